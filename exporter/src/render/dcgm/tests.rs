use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use super::version::{Version, v};
use super::*;
use crate::exposition::Format;
use crate::render::{Naming, render};
use crate::snapshot::attribution::AttributionResult;
use crate::snapshot::{DriverInfo, GpuIdentity, GpuState, MemoryReading, MigState, RemappedRows, XidRecord};

fn ctx(naming: Naming) -> RenderContext {
    RenderContext {
        node: "gpu-node-1".into(),
        extra_labels: vec![("cluster".into(), "production".into())],
        naming,
        ..RenderContext::default()
    }
}

const GIB: u64 = 1 << 30;

fn readings() -> GpuReadings {
    GpuReadings {
        utilization_percent: Some(83),
        memory_controller_percent: Some(41),
        memory: Some(MemoryReading { total_bytes: 80 * GIB, used_bytes: 30 * GIB + 5, reserved_bytes: 512 << 20 }),
        power_watts: Some(312.457),
        energy_joules: Some(123_456.789),
        temperature_celsius: Some(64),
        sm_clock_mhz: Some(1980),
        mem_clock_mhz: Some(2619),
        encoder_percent: Some(0),
        decoder_percent: Some(3),
        pcie_tx_bytes_per_second: Some(2048),
        pcie_rx_bytes_per_second: Some(4096),
        pcie_replays: Some(7),
        remapped_rows: Some(RemappedRows { correctable: 2, uncorrectable: 1, pending: false, failed: false }),
        tensor_activity_percent: Some(55.5),
        dram_activity_percent: Some(20.0),
        graphics_activity_percent: Some(61.25),
        memory_temperature_celsius: Some(72),
        // 25 GB/s of TX+RX: 24,414,062.5 KiB/s, over 1000 and truncated: DCGM's 24414 MB/s.
        nvlink_data_bytes_per_second: Some(25_000_000_000.0),
        ..GpuReadings::default()
    }
}

fn gpu(index: u32) -> GpuSnapshot {
    GpuSnapshot {
        index,
        identity: GpuIdentity {
            uuid: format!("GPU-{index}"),
            model: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
            ..GpuIdentity::default()
        },
        state: GpuState::Ok,
        readings: Some(readings()),
        ..GpuSnapshot::default()
    }
}

fn mig_gpu(index: u32) -> GpuSnapshot {
    let mut g = gpu(index);
    if let Some(r) = g.readings.as_mut() {
        r.utilization_percent = None;
        r.tensor_activity_percent = None;
        r.dram_activity_percent = None;
    }
    let instance = |uuid: &str, profile: &str, gi: u32, used: u64| MigInstance {
        uuid: uuid.into(),
        profile: profile.into(),
        gpu_instance_id: gi,
        compute_instance_id: 0,
        compute_slices: 3,
        gpu_instance_memory_mib: Some(40_192),
        memory: Some(MemoryReading { total_bytes: 40 * GIB, used_bytes: used, reserved_bytes: 0 }),
        sm_activity_percent: Some(10.0),
        tensor_activity_percent: Some(25.0),
        dram_activity_percent: None,
        graphics_activity_percent: None,
        processes: Vec::new(),
    };
    g.mig = Some(MigState {
        instances: vec![instance("MIG-a", "3g.40gb", 1, GIB), instance("MIG-b", "1c.3g.40gb", 2, 2 * GIB)],
        ..MigState::default()
    });
    g
}

fn snapshot(gpus: Vec<GpuSnapshot>) -> Snapshot {
    Snapshot {
        nvml: NvmlStatus::Up(DriverInfo { driver_version: "550.90.07".into(), cuda_version: "12.4".into() }),
        gpus,
        ..Snapshot::default()
    }
}

fn page(s: &Snapshot, naming: Naming) -> String {
    render(s, &ctx(naming), Format::PrometheusText)
}

/// The dcgm-exporter page of `release`.
fn page_of(s: &Snapshot, release: Version) -> String {
    render(s, &RenderContext { dcgm_version: release, ..ctx(Naming::DcgmExporter) }, Format::PrometheusText)
}

/// The label names of a sample line, in order.
fn label_names(line: &str) -> Vec<&str> {
    let inside = line.split_once('{').and_then(|(_, rest)| rest.rsplit_once('}')).map_or("", |(labels, _)| labels);
    inside.split("\",").filter_map(|pair| pair.split_once('=')).map(|(name, _)| name).collect()
}

fn held(s: &mut Snapshot, uuid: &str) {
    let owner = ContainerRef { namespace: "ml".into(), pod: "train-0".into(), container: "main".into() };
    s.attribution.get_or_insert_with(AttributionResult::default).owners.insert(uuid.to_string(), owner);
}

/// Sample lines of `name` (exactly that name).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .collect()
}

fn value(line: &str) -> f64 {
    line.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()).unwrap_or_else(|| panic!("no value in {line}"))
}

#[test]
fn a_gpu_series_has_dcgm_exporters_labels_in_its_order() {
    let text = page(&snapshot(vec![gpu(0)]), Naming::DcgmExporter);
    assert!(
        text.contains(
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-0\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",\
             modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-node-1\",DCGM_FI_DRIVER_VERSION=\"550.90.07\",\
             cluster=\"production\"} 83\n"
        ),
        "{text}"
    );
    assert!(text.contains("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"));
}

#[test]
fn the_host_label_is_hostname_from_4_8_3() {
    let text = page_of(&snapshot(vec![gpu(0)]), v(4, 8, 3));
    assert!(text.contains(",hostname=\"gpu-node-1\","), "{text}");
    assert!(!text.contains("Hostname="), "{text}");
    let text = page_of(&snapshot(vec![gpu(0)]), v(4, 8, 2));
    assert!(text.contains(",Hostname=\"gpu-node-1\",") && !text.contains("hostname="), "{text}");
}

#[test]
fn counters_keep_dcgm_exporters_names_without_total() {
    let text = page(&snapshot(vec![gpu(0)]), Naming::DcgmExporter);
    for name in [
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    ] {
        assert!(text.contains(&format!("# TYPE {name} counter\n")), "{name}: {text}");
        assert_eq!(samples(&text, name).len(), 1, "{name}");
        assert!(!text.contains(&format!("{name}_total")), "{name}");
    }
}

/// Each value equals its native twin after the unit conversion.
#[test]
fn values_equal_their_native_twins_converted() {
    let text = page(&snapshot(vec![gpu(0)]), Naming::Both);
    let one = |name: &str| {
        let lines = samples(&text, name);
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        value(lines[0])
    };
    let mib = 1024.0 * 1024.0;
    let twins: &[(&str, &str, f64)] = &[
        ("DCGM_FI_DEV_SM_CLOCK", "gpu_sm_clock_mhz", 1.0),
        ("DCGM_FI_DEV_MEM_CLOCK", "gpu_mem_clock_mhz", 1.0),
        ("DCGM_FI_DEV_GPU_TEMP", "gpu_temperature_celsius", 1.0),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gpu_memory_temperature_celsius", 1.0),
        ("DCGM_FI_DEV_POWER_USAGE", "gpu_power_usage_watts", 1.0),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gpu_energy_consumption_joules_total", 1000.0),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "gpu_pcie_replays_total", 1.0),
        ("DCGM_FI_DEV_GPU_UTIL", "gpu_utilization", 1.0),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gpu_memory_controller_utilization", 1.0),
        ("DCGM_FI_DEV_ENC_UTIL", "gpu_encoder_utilization", 1.0),
        ("DCGM_FI_DEV_DEC_UTIL", "gpu_decoder_utilization", 1.0),
        ("DCGM_FI_DEV_FB_USED", "gpu_memory_used_bytes", 1.0 / mib),
        ("DCGM_FI_DEV_FB_RESERVED", "gpu_memory_reserved_bytes", 1.0 / mib),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu_graphics_activity", 0.01),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gpu_tensor_activity", 0.01),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "gpu_dram_activity", 0.01),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "gpu_pcie_tx_bytes_per_second", 1.0),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", "gpu_pcie_rx_bytes_per_second", 1.0),
    ];
    for (dcgm, native, factor) in twins {
        let (d, n) = (one(dcgm), one(native));
        assert!((d - n * factor).abs() <= 1e-9 * d.abs().max(1.0), "{dcgm} {d} vs {native} {n} × {factor}");
    }
    let free = one("gpu_memory_total_bytes") - one("gpu_memory_used_bytes") - one("gpu_memory_reserved_bytes");
    assert_eq!(one("DCGM_FI_DEV_FB_FREE"), free / mib);
    let rows: Vec<f64> = samples(&text, "gpu_remapped_rows").iter().map(|l| value(l)).collect();
    assert_eq!(rows, [2.0, 1.0], "correctable, uncorrectable");
    assert_eq!(one("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"), 2.0);
    assert_eq!(one("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), 1.0);
    assert_eq!(one("DCGM_FI_DEV_ROW_REMAP_FAILURE"), one("gpu_remapped_rows_failed"));
    // A rate between two cycles, whose native twin is rate() of the per-link counters.
    assert_eq!(one("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"), (25_000_000_000.0_f64 / 1024.0 / 1000.0).trunc());
    assert_eq!(one("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"), 24414.0);
}

#[test]
fn a_reading_we_lack_stays_absent() {
    let mut g = gpu(0);
    g.readings = Some(GpuReadings { sm_clock_mhz: Some(1000), ..GpuReadings::default() });
    let stale = GpuSnapshot { readings: None, state: GpuState::Failed { error: "x".into() }, ..gpu(1) };
    let text = page(&snapshot(vec![g, stale]), Naming::DcgmExporter);
    for field in FIELDS {
        let lines = samples(&text, field.family.name);
        let expected = match field.family.name {
            "DCGM_FI_DEV_SM_CLOCK" => 1,
            "DCGM_FI_DEV_XID_ERRORS" => 2,
            _ => 0,
        };
        assert_eq!(lines.len(), expected, "{}: {lines:?}", field.family.name);
    }
}

#[test]
fn the_xid_gauge_is_zero_until_an_xid_then_the_last_code() {
    let text = page(&snapshot(vec![gpu(0)]), Naming::DcgmExporter);
    let line = samples(&text, "DCGM_FI_DEV_XID_ERRORS")[0];
    assert!(line.ends_with(",err_code=\"0\",err_msg=\"No Error\",cluster=\"production\"} 0"), "{line}");
    let mut g = gpu(0);
    let at = |s| XidRecord { count: 1, last_seen: UNIX_EPOCH + Duration::from_secs(s) };
    g.xids = BTreeMap::from([(79, at(100)), (13, at(200)), (999, at(50))]);
    let text = page(&snapshot(vec![g.clone()]), Naming::DcgmExporter);
    let line = samples(&text, "DCGM_FI_DEV_XID_ERRORS")[0];
    assert!(
        line.ends_with(",err_code=\"13\",err_msg=\"Graphics Engine Exception\",cluster=\"production\"} 13"),
        "{line}"
    );
    g.xids.insert(999, at(300));
    assert_eq!(last_xid(&g), 999);
    let text = page(&snapshot(vec![g]), Naming::DcgmExporter);
    let line = samples(&text, "DCGM_FI_DEV_XID_ERRORS")[0];
    assert!(line.ends_with(",err_code=\"999\",err_msg=\"Unknown Error\",cluster=\"production\"} 999"), "{line}");
}

#[test]
fn xid_text_matches_dcgm_exporters_table_at_its_ends() {
    assert_eq!(xid_text::message(0), "No Error");
    assert_eq!(xid_text::message(79), "GPU has fallen off the bus");
    assert_eq!(xid_text::message(172), "Uncorrectable SRAM Error");
    assert_eq!(xid_text::message(173), xid_text::UNKNOWN);
    assert_eq!(xid_text::message(u64::MAX), xid_text::UNKNOWN);
}

#[test]
fn gpu_instances_carry_their_profile_and_id_with_the_parents_gpu_labels() {
    let mut s = snapshot(vec![mig_gpu(2)]);
    held(&mut s, "MIG-b");
    let text = page(&s, Naming::DcgmExporter);
    let used = samples(&text, "DCGM_FI_DEV_FB_USED");
    assert_eq!(used.len(), 2, "per instance only, not the whole GPU too: {used:?}");
    assert!(
        used[0].starts_with(
            "DCGM_FI_DEV_FB_USED{gpu=\"2\",UUID=\"GPU-2\",pci_bus_id=\"00000000:1A:00.0\",device=\"nvidia2\",\
             modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\",Hostname=\"gpu-node-1\","
        ),
        "{}",
        used[0]
    );
    assert!(used[0].ends_with(" 1024"), "{}", used[0]);
    assert!(
        used[1].contains(
            "GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",Hostname=\"gpu-node-1\",DCGM_FI_DRIVER_VERSION=\"550.90.07\",\
             container=\"main\",namespace=\"ml\",pod=\"train-0\",cluster=\"production\"} 2048"
        ),
        "{}",
        used[1]
    );
    let tensor: Vec<f64> = samples(&text, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").iter().map(|l| value(l)).collect();
    assert_eq!(tensor, [0.25, 0.25]);
    assert!(samples(&text, "DCGM_FI_PROF_DRAM_ACTIVE").is_empty(), "no GPM DRAM reading, no series");
}

/// dcgm-exporter's default device mode reads a GPU with GPU instances only through
/// them, and DCGM answers a device-level field on an instance with the GPU's value.
#[test]
fn device_level_fields_are_repeated_on_each_instance_and_no_series_lacks_gpu_i() {
    let mut s = snapshot(vec![mig_gpu(2), gpu(3)]);
    held(&mut s, "MIG-b");
    let text = page(&s, Naming::DcgmExporter);
    for field in FIELDS {
        for line in samples(&text, field.family.name) {
            let whole = line.contains("gpu=\"3\"");
            assert_eq!(!whole, line.contains(",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\""), "{line}");
        }
    }
    let on_instances =
        |name: &str| -> Vec<&str> { samples(&text, name).into_iter().filter(|l| l.contains("gpu=\"2\"")).collect() };
    for (name, each) in [
        ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
        ("DCGM_FI_DEV_MEM_CLOCK", 2619.0),
        ("DCGM_FI_DEV_MEMORY_TEMP", 72.0),
        ("DCGM_FI_DEV_GPU_TEMP", 64.0),
        ("DCGM_FI_DEV_POWER_USAGE", 312.457),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 123_456_789.0),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 7.0),
        ("DCGM_FI_DEV_XID_ERRORS", 0.0),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 24414.0),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1.0),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 2.0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0.0),
    ] {
        let lines = on_instances(name);
        assert_eq!(lines.len(), 2, "{name} once per instance: {lines:?}");
        assert!(lines.iter().all(|l| value(l) == each), "{name}: the GPU's value on each: {lines:?}");
        // The holder of an instance is on that instance's series, and only there.
        assert!(lines[1].contains(",pod=\"train-0\",") && !lines[0].contains("pod="), "{name}: {lines:?}");
    }
    // NVML has no utilization, encoder or decoder value, nor DCGM's profiling module a
    // PCIe rate, for a GPU instance: no MIG page has them.
    for name in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ] {
        assert!(on_instances(name).is_empty(), "{name}: {:?}", on_instances(name));
        assert_eq!(samples(&text, name).len(), 1, "{name} on the whole GPU 3");
    }
}

#[test]
fn a_stale_gpu_with_instances_keeps_only_its_xid_on_each_instance() {
    let stale = GpuSnapshot { readings: None, state: GpuState::Failed { error: "x".into() }, ..mig_gpu(0) };
    let text = page(&snapshot(vec![stale]), Naming::DcgmExporter);
    let series: Vec<&str> = text.lines().filter(|l| l.starts_with("DCGM_")).collect();
    assert_eq!(series.len(), 2, "{series:?}");
    assert!(series.iter().all(|l| l.starts_with("DCGM_FI_DEV_XID_ERRORS{") && l.contains("GPU_I_ID=")), "{series:?}");
}

#[test]
fn xid_attributes_sit_among_the_pod_labels_in_name_order() {
    let mut s = snapshot(vec![gpu(0)]);
    held(&mut s, "GPU-0");
    let text = page_of(&s, v(4, 6, 0));
    let line = samples(&text, "DCGM_FI_DEV_XID_ERRORS")[0];
    assert_eq!(
        label_names(line),
        [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "Hostname",
            "DCGM_FI_DRIVER_VERSION",
            "container",
            "err_code",
            "err_msg",
            "namespace",
            "pod",
            "pod_uid",
            "cluster"
        ],
        "{line}"
    );
    assert!(line.contains(",pod_uid=\"\","), "dcgm-exporter does not look the UID up by default: {line}");
}

/// Each release's page, from the same snapshot: what `version::Shape` says it changed.
#[test]
fn each_release_writes_its_own_shape() {
    let mut s = snapshot(vec![gpu(0), gpu(1)]);
    held(&mut s, "GPU-0");
    let names = |text: &str, family: &str, gpu: &str| -> Vec<String> {
        let line = samples(text, family).into_iter().find(|l| l.contains(&format!("{{gpu=\"{gpu}\""))).unwrap();
        label_names(line).into_iter().map(String::from).collect()
    };
    let head = ["gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"];
    // 3.2.0, the GPU operator v23.9.2's: no pci_bus_id, no XID attributes, empty pod
    // labels on the GPU no container holds.
    let text = page_of(&s, v(3, 2, 0));
    assert_eq!(
        names(&text, "DCGM_FI_DEV_XID_ERRORS", "0"),
        [&head[..], &["container", "namespace", "pod", "cluster"]].concat()
    );
    assert_eq!(
        names(&text, "DCGM_FI_DEV_SM_CLOCK", "1"),
        [&head[..], &["container", "namespace", "pod", "cluster"]].concat()
    );
    assert!(samples(&text, "DCGM_FI_DEV_SM_CLOCK")[1].contains(",container=\"\",namespace=\"\",pod=\"\","));
    assert!(samples(&text, "DCGM_FI_DEV_FB_RESERVED").is_empty() && !text.contains("DCGM_FI_DEV_FB_RESERVED"));
    assert!(
        text.contains(
            "# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active (in %).\n"
        )
    );
    // 3.4.1: an idle GPU has no pod labels at all.
    assert_eq!(names(&page_of(&s, v(3, 4, 1)), "DCGM_FI_DEV_SM_CLOCK", "1"), [&head[..], &["cluster"]].concat());
    // 3.5.0: pci_bus_id, err_code and err_msg, help strings without the unit.
    let text = page_of(&s, v(3, 5, 0));
    let with_bus = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"];
    assert_eq!(
        names(&text, "DCGM_FI_DEV_XID_ERRORS", "1"),
        [&with_bus[..], &["err_code", "err_msg", "cluster"]].concat()
    );
    assert!(
        text.contains("# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.\n")
    );
    assert!(!text.contains("DCGM_FI_DEV_FB_RESERVED"));
    // 4.4.0: the reserved framebuffer; 4.6.0: pod_uid on the held GPU only.
    assert_eq!(samples(&page_of(&s, v(4, 4, 0)), "DCGM_FI_DEV_FB_RESERVED").len(), 2);
    let text = page_of(&s, v(4, 6, 0));
    assert_eq!(
        names(&text, "DCGM_FI_DEV_SM_CLOCK", "0"),
        [&with_bus[..], &["container", "namespace", "pod", "pod_uid", "cluster"]].concat()
    );
    assert_eq!(names(&text, "DCGM_FI_DEV_SM_CLOCK", "1"), [&with_bus[..], &["cluster"]].concat());
    // 4.8.2: pod_uid gone again; 4.8.3: hostname.
    assert!(!page_of(&s, v(4, 8, 2)).contains("pod_uid"));
    let text = page_of(&s, v(4, 8, 3));
    let lower: Vec<&str> = with_bus.iter().map(|n| if *n == "Hostname" { "hostname" } else { n }).collect();
    assert_eq!(names(&text, "DCGM_FI_DEV_SM_CLOCK", "1"), [&lower[..], &["cluster"]].concat());
}

#[test]
fn pod_labels_only_where_one_container_holds_the_device() {
    let mut s = snapshot(vec![gpu(0), gpu(1)]);
    let owner = ContainerRef { namespace: "web".into(), pod: "infer-1".into(), container: "server".into() };
    s.attribution = Some(AttributionResult {
        owners: BTreeMap::from([("GPU-0".to_string(), owner)]),
        ..AttributionResult::default()
    });
    let text = page(&s, Naming::DcgmExporter);
    let replays = samples(&text, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER");
    assert!(replays[0].contains(",container=\"server\",namespace=\"web\",pod=\"infer-1\","), "{}", replays[0]);
    assert!(!replays[1].contains("pod="), "{}", replays[1]);
}

#[test]
fn each_naming_serves_its_families_and_the_exporters_own_in_all() {
    let s = snapshot(vec![gpu(0)]);
    let native = page(&s, Naming::Native);
    let dcgm = page(&s, Naming::DcgmExporter);
    let both = page(&s, Naming::Both);
    assert!(!native.contains("DCGM_"));
    assert!(samples(&dcgm, "gpu_utilization").is_empty() && samples(&dcgm, "gpu_info").is_empty());
    for text in [&native, &dcgm, &both] {
        assert!(text.contains("\ngpu_exporter_nvml_up{"), "{text}");
    }
    assert!(
        dcgm.lines().filter(|l| !l.starts_with('#')).all(|l| l.starts_with("DCGM_") || l.starts_with("gpu_exporter_"))
    );
    let series = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
    let own = dcgm.lines().filter(|l| l.starts_with("gpu_exporter_")).count();
    assert_eq!(series(&both), series(&native) + series(&dcgm) - own);
    // The dcgm-exporter part comes last, in both formats.
    let om = render(&s, &ctx(Naming::Both), Format::OpenMetrics);
    assert!(om.ends_with("# EOF\n"));
    let last = om.lines().rfind(|l| !l.starts_with('#')).unwrap_or_default();
    assert!(last.starts_with("DCGM_FI_PROF_PCIE_RX_BYTES{"), "{last}");
    assert!(om.contains("# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER unknown\n"));
}

#[test]
fn gpu_instance_profile_drops_a_smaller_compute_instance() {
    assert_eq!(gpu_instance_profile("3g.40gb"), "3g.40gb");
    assert_eq!(gpu_instance_profile("1c.3g.40gb"), "3g.40gb");
    assert_eq!(gpu_instance_profile("1g.10gb+me"), "1g.10gb+me");
    assert_eq!(gpu_instance_profile("c.x"), "c.x");
}

/// DCGM names a GPU instance from its profile's slices and memory, in GiB rounded up.
#[test]
fn gpu_i_profile_is_dcgms_name_of_the_instance() {
    let instance = |profile: &str, slices: u32, mib: Option<u64>| MigInstance {
        profile: profile.into(),
        compute_slices: slices,
        gpu_instance_memory_mib: mib,
        ..MigInstance::default()
    };
    // `nvidia-smi mig -lgip` of an H100 NVL lists 1g.12gb with 10.62 GiB (10,880 MiB;
    // OpenNebula/website, content/product/cluster_configuration/hosts_and_clusters/vgpu.md):
    // dcgm-exporter issue #544 shows it as 1g.11gb.
    assert_eq!(dcgm_profile_name(&instance("1g.12gb", 1, Some(10_880))), "1g.11gb");
    assert_eq!(dcgm_profile_name(&instance("1g.12gb+me", 1, Some(10_880))), "1g.11gb");
    assert_eq!(dcgm_profile_name(&instance("7g.94gb", 7, Some(94_848))), "7g.93gb");
    // An 80 GB A100's 7g.80gb has 80,384 MiB: gpu-operator issue #687 shows 7g.79gb.
    assert_eq!(dcgm_profile_name(&instance("7g.80gb", 7, Some(80_384))), "7g.79gb");
    assert_eq!(dcgm_profile_name(&instance("1g.10gb", 1, Some(9_728))), "1g.10gb");
    assert_eq!(dcgm_profile_name(&instance("1c.3g.40gb", 3, Some(40_192))), "3g.40gb");
    // Exactly a whole GiB stays as it is.
    assert_eq!(dcgm_profile_name(&instance("1g.16gb", 1, Some(16_384))), "1g.16gb");
    // No size from the driver's table: the GPU instance's profile as the driver names it.
    assert_eq!(dcgm_profile_name(&instance("1c.3g.40gb", 3, None)), "3g.40gb");
    assert_eq!(dcgm_profile_name(&instance("2g.20gb", 0, Some(19_968))), "2g.20gb");
}
