//! NVLink, the memory temperature and GPM graphics activity end to end: the exporter
//! binary reads the simulated node through `nvml-wrapper` and the real NVML code path,
//! with links going down, error counters climbing, a driver that reports no error
//! counters, boards without NVLink or a memory sensor, and a hung NVLink call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Launch, QUICK_CYCLES, clocked, sample, samples, set_clock, write_scenario};

const H100: &str = "GPU-a1000000-0000-4000-8000-000000000000";
const L40S: &str = "GPU-a1000000-0000-4000-8000-000000000001";
const H200: &str = "GPU-a1000000-0000-4000-8000-000000000002";
const MIG: &str = "GPU-a1000000-0000-4000-8000-000000000003";

const SCENARIO: &str = "gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-a1000000-0000-4000-8000-000000000000
    values: {utilization: 40, graphics_activity: 55, memory_temperature_c: 71}
    nvlink: {tx_bytes_per_second: 1048576, rx_bytes_per_second: 2048}
    faults:
      - {at_s: 5, nvlink_down: {link: 3}}
      - {at_s: 5, nvlink_errors: {link: 3, crc_flit: 7, crc_data: 2, replay: 4, recovery: 1}}
  - model: L40S-48GB
    uuid: GPU-a1000000-0000-4000-8000-000000000001
  - model: H200-SXM-141GB
    uuid: GPU-a1000000-0000-4000-8000-000000000002
    values: {temperature_c: 50}
    nvlink: {links: 2, error_counters: false}
  - model: H100-SXM5-80GB
    uuid: GPU-a1000000-0000-4000-8000-000000000003
    mig:
      instances:
        - {profile: 3g.40gb, values: {sm_activity: 60, graphics_activity: 33}}
";

fn link(m: &str, name: &str, uuid: &str, link: &str, extra: &[(&str, &str)]) -> Option<f64> {
    let mut labels = vec![("uuid", uuid), ("link", link)];
    labels.extend_from_slice(extra);
    sample(m, name, &labels)
}

fn series_of(m: &str, name: &str, uuid: &str) -> usize {
    samples(m, name).into_iter().filter(|l| l.contains(&format!("uuid=\"{uuid}\""))).count()
}

#[test]
fn nvlink_memory_temperature_and_graphics_activity_through_nvml() {
    let (_dir, clock, exporter) = clocked(SCENARIO, 4.0, QUICK_CYCLES);
    let m = exporter.wait_metrics("GPM graphics activity after two samples", |m| {
        sample(m, "gpu_graphics_activity", &[("uuid", H100)]).is_some()
            && samples(m, "gpu_graphics_activity").iter().any(|l| l.contains("mig_uuid="))
    });
    // Memory temperature where the board has a sensor (the H200's follows its GPU + 4).
    assert_eq!(sample(&m, "gpu_memory_temperature_celsius", &[("uuid", H100)]), Some(71.0));
    assert_eq!(sample(&m, "gpu_memory_temperature_celsius", &[("uuid", H200)]), Some(54.0));
    assert_eq!(sample(&m, "gpu_memory_temperature_celsius", &[("uuid", L40S)]), None, "no sensor: absent");
    // Graphics activity per GPU and per MIG instance; none without GPM (L40S).
    assert_eq!(sample(&m, "gpu_graphics_activity", &[("uuid", H100)]), Some(55.0));
    let instance = samples(&m, "gpu_graphics_activity").into_iter().find(|l| l.contains(MIG)).unwrap();
    assert!(instance.contains("mig_profile=\"3g.40gb\"") && instance.ends_with(" 33"), "{instance}");
    assert_eq!(sample(&m, "gpu_graphics_activity", &[("uuid", L40S)]), None);

    // Every link of the H100s and the H200's two; none on the L40S.
    assert_eq!(series_of(&m, "gpu_nvlink_up", H100), 18);
    assert_eq!(series_of(&m, "gpu_nvlink_up", MIG), 18, "NVLink is read on a GPU in MIG mode too");
    assert_eq!(series_of(&m, "gpu_nvlink_up", H200), 2);
    for family in ["gpu_nvlink_up", "gpu_nvlink_tx_bytes_total", "gpu_nvlink_rx_bytes_total", "gpu_nvlink_errors_total"]
    {
        assert_eq!(series_of(&m, family, L40S), 0, "{family} on a board without NVLink");
    }
    assert_eq!(link(&m, "gpu_nvlink_up", H100, "3", &[]), Some(1.0));
    assert_eq!(link(&m, "gpu_nvlink_errors_total", H100, "3", &[("error_type", "replay")]), Some(0.0));
    // A driver that reports no error counters: absent, never 0.
    assert_eq!(series_of(&m, "gpu_nvlink_errors_total", H200), 0);
    assert_eq!(series_of(&m, "gpu_nvlink_tx_bytes_total", H200), 2);
    // Data counters: 1 MiB/s for 4 s on the H100's link 2.
    assert_eq!(link(&m, "gpu_nvlink_tx_bytes_total", H100, "2", &[]), Some(4.0 * 1_048_576.0));
    assert_eq!(link(&m, "gpu_nvlink_rx_bytes_total", H100, "2", &[]), Some(4.0 * 2048.0));

    // Link 3 goes down at 5 s and counts errors; it carries nothing while down.
    set_clock(&clock, 10.0);
    // Error counters are read over a sweep of cycles (nvml::nvlink::ERROR_SWEEP_CYCLES),
    // so they may follow the link state by a few cycles.
    let m = exporter.wait_metrics("link 3 down and its errors", |m| {
        link(m, "gpu_nvlink_up", H100, "3", &[]) == Some(0.0)
            && link(m, "gpu_nvlink_errors_total", H100, "3", &[("error_type", "recovery")]) == Some(1.0)
    });
    let errors = |t: &str| link(&m, "gpu_nvlink_errors_total", H100, "3", &[("error_type", t)]);
    assert_eq!(
        (errors("crc_flit"), errors("crc_data"), errors("replay"), errors("recovery")),
        (Some(7.0), Some(2.0), Some(4.0), Some(1.0))
    );
    assert_eq!(link(&m, "gpu_nvlink_tx_bytes_total", H100, "3", &[]), Some(5.0 * 1_048_576.0));
    assert_eq!(link(&m, "gpu_nvlink_tx_bytes_total", H100, "2", &[]), Some(10.0 * 1_048_576.0));
    assert_eq!(link(&m, "gpu_nvlink_up", H100, "2", &[]), Some(1.0));
    // None of it is an error of a call: NOT_SUPPORTED is not counted.
    let call_errors: Vec<&str> =
        samples(&m, "gpu_exporter_nvml_errors_total").into_iter().filter(|l| l.contains("NvLink")).collect();
    assert!(call_errors.is_empty(), "{call_errors:?}");
}

#[test]
fn a_hung_nvlink_call_stalls_only_its_gpu() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-a1000000-0000-4000-8000-000000000000
    faults:
      - {at_s: 5, hang: {call: nvmlDeviceGetNvLinkErrorCounter, for_s: 1000}}
  - model: L40S-48GB
    uuid: GPU-a1000000-0000-4000-8000-000000000001
",
        0.0,
        QUICK_CYCLES,
    );
    exporter.wait_cycles(2);
    set_clock(&clock, 6.0);
    let m = exporter.wait_metrics("the H100 stale on its NVLink call", |m| {
        sample(m, "gpu_collection_stale", &[("uuid", H100)]) == Some(1.0)
    });
    assert_eq!(sample(&m, "gpu_up", &[("uuid", L40S)]), Some(1.0), "the other GPU is read on");
    assert_eq!(series_of(&m, "gpu_nvlink_up", H100), 0, "a stale GPU shows no readings");
    let deadline = sample(
        &m,
        "gpu_exporter_nvml_errors_total",
        &[("gpu", "0"), ("call", "nvmlDeviceGetNvLinkErrorCounter"), ("error", "deadline_exceeded")],
    );
    assert_eq!(deadline, Some(1.0), "the hung call is named and counted once");
}

/// `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` as DCGM computes it: the TX+RX KiB of every link
/// between two reads, per second of NVML's sample timestamps, over 1000, truncated.
#[test]
fn dcgm_nvlink_bandwidth_is_the_rate_over_all_links_in_dcgms_unit() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "node.yaml",
        "gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-a1000000-0000-4000-8000-000000000000
    nvlink: {tx_bytes_per_second: 1048576, rx_bytes_per_second: 2048}
  - model: L40S-48GB
    uuid: GPU-a1000000-0000-4000-8000-000000000001
",
    );
    let exporter = Launch::scenario(&scenario, None)
        .args(&["--collect-interval", "300ms", "--nvml.call-timeout", "250ms", "--metrics.naming", "both"])
        .start();
    exporter.wait_ready();
    let m = exporter.wait_metrics("a bandwidth after two cycles", |m| {
        sample(m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", &[("UUID", H100)]).is_some()
    });
    // 18 links × (1 MiB + 2 KiB) per second = 18,468 KiB/s, over 1000: 18. The driver
    // counts whole KiB, so a read may be up to a KiB per counter behind: ±1.
    let value = sample(&m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", &[("UUID", H100)]).unwrap();
    assert!((value - 18.0).abs() <= 1.0, "{value}");
    assert_eq!(sample(&m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", &[("UUID", L40S)]), None, "no NVLink: absent");
}
