use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

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
             modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"gpu-node-1\",DCGM_FI_DRIVER_VERSION=\"550.90.07\",\
             cluster=\"production\"} 83\n"
        ),
        "{text}"
    );
    assert!(text.contains("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"));
}

#[test]
fn the_host_label_can_take_its_old_name() {
    let mut c = ctx(Naming::DcgmExporter);
    c.dcgm_host_label = HostLabel::Capitalized;
    let text = render(&snapshot(vec![gpu(0)]), &c, Format::PrometheusText);
    assert!(text.contains(",Hostname=\"gpu-node-1\","), "{text}");
    assert!(!text.contains("hostname="), "{text}");
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
    assert!(line.ends_with(",err_code=\"0\",err_msg=\"No Error\"} 0"), "{line}");
    let mut g = gpu(0);
    let at = |s| XidRecord { count: 1, last_seen: UNIX_EPOCH + Duration::from_secs(s) };
    g.xids = BTreeMap::from([(79, at(100)), (13, at(200)), (999, at(50))]);
    let text = page(&snapshot(vec![g.clone()]), Naming::DcgmExporter);
    let line = samples(&text, "DCGM_FI_DEV_XID_ERRORS")[0];
    assert!(line.ends_with(",err_code=\"13\",err_msg=\"Graphics Engine Exception\"} 13"), "{line}");
    g.xids.insert(999, at(300));
    assert_eq!(last_xid(&g), 999);
    let text = page(&snapshot(vec![g]), Naming::DcgmExporter);
    let line = samples(&text, "DCGM_FI_DEV_XID_ERRORS")[0];
    assert!(line.ends_with(",err_code=\"999\",err_msg=\"Unknown Error\"} 999"), "{line}");
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
    let owner = ContainerRef { namespace: "ml".into(), pod: "train-0".into(), container: "main".into() };
    s.attribution = Some(AttributionResult {
        owners: BTreeMap::from([("MIG-b".to_string(), owner)]),
        ..AttributionResult::default()
    });
    let text = page(&s, Naming::DcgmExporter);
    let used = samples(&text, "DCGM_FI_DEV_FB_USED");
    assert_eq!(used.len(), 2, "per instance only, not the whole GPU too: {used:?}");
    assert!(
        used[0].starts_with(
            "DCGM_FI_DEV_FB_USED{gpu=\"2\",UUID=\"GPU-2\",pci_bus_id=\"00000000:1A:00.0\",device=\"nvidia2\",\
             modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\",hostname=\"gpu-node-1\","
        ),
        "{}",
        used[0]
    );
    assert!(used[0].ends_with(" 1024"), "{}", used[0]);
    assert!(
        used[1].contains(
            "GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",hostname=\"gpu-node-1\",DCGM_FI_DRIVER_VERSION=\"550.90.07\",\
             container=\"main\",namespace=\"ml\",pod=\"train-0\",cluster=\"production\"} 2048"
        ),
        "{}",
        used[1]
    );
    let tensor: Vec<f64> = samples(&text, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").iter().map(|l| value(l)).collect();
    assert_eq!(tensor, [0.25, 0.25]);
    assert!(samples(&text, "DCGM_FI_PROF_DRAM_ACTIVE").is_empty(), "no GPM DRAM reading, no series");
    // Device-wide readings once, on the GPU.
    let temp = samples(&text, "DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temp.len(), 1);
    assert!(!temp[0].contains("GPU_I_"), "{}", temp[0]);
    assert!(samples(&text, "DCGM_FI_DEV_GPU_UTIL").is_empty(), "NVML has no utilization in MIG mode");
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
