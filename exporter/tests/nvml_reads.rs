//! What the NVML layer makes of a driver's answers, end to end: the exporter binary on
//! the simulated node, with transient errors, per-handle `NOT_SUPPORTED`, newer MIG
//! profile tables and XID events scheduled in the scenario, and scenario time stepped
//! by the test through `FAKE_NVML_CLOCK_FILE`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{QUICK_CYCLES, clocked, sample, samples, set_clock, wait_for};

/// The first sample of `name` on a whole GPU (no MIG labels) with `labels`.
fn gpu_sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(exposition, name).into_iter().filter(|l| !l.contains("mig_uuid=")).find_map(|l| sample(l, name, labels))
}

fn errors(exposition: &str, call: &str, error: &str) -> f64 {
    sample(exposition, "gpu_exporter_nvml_errors_total", &[("call", call), ("error", error)]).unwrap_or(0.0)
}

#[test]
fn a_transient_error_at_start_up_is_read_again_and_switches_nothing_off() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - model: A100-SXM4-80GB
    uuid: GPU-a1000000-0000-4000-8000-000000000001
    faults:
      - {at_s: 0, error: {call: nvmlDeviceGetEccMode, code: UNKNOWN, for_s: 3}}
      - {at_s: 0, error: {call: nvmlDeviceGetTemperatureThreshold, code: TIMEOUT, for_s: 3}}
      - {at_s: 0, error: {call: nvmlDeviceGetUUID, code: NO_PERMISSION, for_s: 3}}
      - {at_s: 5, ecc_errors: {uncorrected: 2}}
",
        0.0,
        QUICK_CYCLES,
    );
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_up", &[("gpu", "0")]), Some(1.0), "the GPU is read meanwhile");
    assert_eq!(sample(&m, "gpu_ecc_enabled", &[]), None, "ECC mode unknown for now");
    assert_eq!(sample(&m, "gpu_temperature_slowdown_threshold_celsius", &[]), None);
    assert!(errors(&m, "nvmlDeviceGetEccMode", "unknown") >= 1.0, "{m}");
    assert!(errors(&m, "nvmlDeviceGetTemperatureThreshold", "timeout") >= 1.0, "{m}");
    assert!(errors(&m, "nvmlDeviceGetUUID", "no_permission") >= 1.0, "{m}");

    set_clock(&clock, 4.0);
    exporter.wait_metrics("ECC mode read again once it answers", |m| {
        sample(m, "gpu_ecc_enabled", &[("uuid", "GPU-a1000000-0000-4000-8000-000000000001")]) == Some(1.0)
    });
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_temperature_slowdown_threshold_celsius", &[]), Some(89.0));
    assert_eq!(sample(&m, "gpu_ecc_volatile_errors_total", &[("error_type", "uncorrected")]), Some(0.0));

    set_clock(&clock, 6.0);
    exporter.wait_metrics("the ECC errors of 5 s are seen", |m| {
        sample(m, "gpu_ecc_volatile_errors_total", &[("error_type", "uncorrected")]) == Some(2.0)
    });
    let settled = errors(&exporter.metrics(), "nvmlDeviceGetEccMode", "unknown");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(errors(&exporter.metrics(), "nvmlDeviceGetEccMode", "unknown"), settled, "not asked once settled");
}

#[test]
fn gpu_is_lost_in_a_field_value_ends_the_read_as_lost() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - {model: A100-SXM4-80GB, faults: [{at_s: 3, error: {call: nvmlDeviceGetFieldValues, code: GPU_IS_LOST, for_s: 100}}]}
  - {model: A100-SXM4-80GB}
",
        0.0,
        QUICK_CYCLES,
    );
    assert_eq!(exporter.value("gpu_lost", &[("gpu", "0")]), Some(0.0));
    set_clock(&clock, 4.0);
    exporter.wait_metrics("GPU 0 reported lost", |m| sample(m, "gpu_lost", &[("gpu", "0")]) == Some(1.0));
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_up", &[("gpu", "0")]), Some(0.0));
    assert_eq!(sample(&m, "gpu_lost", &[("gpu", "1")]), Some(0.0));
}

#[test]
fn not_supported_on_a_mig_device_leaves_its_parent_and_siblings_alone() {
    let (_dir, _clock, exporter) = clocked(
        "gpus:
  - model: H100-SXM5-80GB
    mig: {layout: all-3g.40gb}
    faults:
      - {at_s: 0, error: {call: nvmlDeviceGetMemoryInfo_v2, code: NOT_SUPPORTED, for_s: 1000, mig: 0}}
      - {at_s: 0, error: {call: nvmlDeviceGetComputeRunningProcesses_v3, code: NOT_SUPPORTED, for_s: 1000, mig: 0}}
",
        0.0,
        QUICK_CYCLES,
    );
    // A few cycles, so that a wrongly shared memory of NOT_SUPPORTED would have struck.
    let cycles = exporter.value("gpu_exporter_collections_total", &[]).unwrap();
    wait_for(Duration::from_secs(10), || {
        exporter.value("gpu_exporter_collections_total", &[]).is_some_and(|n| n >= cycles + 3.0)
    })
    .unwrap();
    let m = exporter.metrics();
    assert_eq!(gpu_sample(&m, "gpu_memory_total_bytes", &[("gpu", "0")]), Some(81559.0 * 1048576.0), "the parent");
    let instance = |gi: &'static str| [("gpu_instance_id", gi)];
    assert_eq!(sample(&m, "gpu_memory_total_bytes", &instance("1")), None, "the MIG device that lacks it");
    assert_eq!(sample(&m, "gpu_memory_total_bytes", &instance("2")), Some(40320.0 * 1048576.0), "its sibling");
    assert_eq!(sample(&m, "gpu_processes", &instance("2")), Some(0.0), "its sibling's processes");
    assert_eq!(errors(&m, "nvmlDeviceGetMemoryInfo_v2", "not_supported"), 0.0, "NOT_SUPPORTED is no error");
}

#[test]
fn mig_profiles_of_newer_drivers_are_read_and_an_unknown_one_is_still_named() {
    let (_dir, _clock, exporter) = clocked(
        "gpus:
  - model: H100-SXM5-80GB
    mig:
      extra_profiles:
        - {name: 1g.10gb-me, index: 13, id: 47, compute_slices: 1, memory_slices: 1, memory_mib: 9984, max_instances: 7}
        - {name: 1g.10gb+me.all, index: 15, id: 65, compute_slices: 1, memory_slices: 1, memory_mib: 9984}
        - {name: 2g.20gb+me.all, index: 16, id: 66, compute_slices: 2, memory_slices: 2, memory_mib: 20096}
        - {name: 3g.40gb+gfx, index: 17, id: 67, compute_slices: 3, memory_slices: 4, memory_mib: 40320}
        - {name: 1g.10gb+next, index: 70, id: 90, compute_slices: 1, memory_slices: 1, memory_mib: 9984}
      instances: [{profile: 2g.20gb+me.all}, {profile: 1g.10gb-me}, {profile: 1g.10gb+next}]
",
        0.0,
        QUICK_CYCLES,
    );
    let m = exporter.metrics();
    let info = |gi: &'static str, profile: &'static str| {
        sample(&m, "gpu_mig_instance_info", &[("gpu_instance_id", gi), ("mig_profile", profile)])
    };
    assert_eq!(info("1", "2g.20gb+me.all"), Some(1.0), "profile index 16 (2_SLICE_ALL_ME): {m}");
    assert_eq!(info("2", "1g.10gb-me"), Some(1.0), "profile index 13 (1_SLICE_NO_ME)");
    assert_eq!(info("3", "1g.10gb+next"), Some(1.0), "an index past any enumeration, found by its id");
    let slices = |gi: &'static str| sample(&m, "gpu_mig_instance_compute_slices", &[("gpu_instance_id", gi)]);
    assert_eq!((slices("1"), slices("2"), slices("3")), (Some(2.0), Some(1.0), Some(1.0)));
    let offered: Vec<String> = samples(&m, "gpu_mig_profile_available")
        .iter()
        .filter_map(|l| l.split("mig_profile=\"").nth(1)?.split('"').next().map(str::to_string))
        .collect();
    for profile in
        ["1g.10gb", "1g.10gb+me", "1g.20gb", "7g.80gb", "1g.10gb-me", "1g.10gb+me.all", "2g.20gb+me.all", "3g.40gb+gfx"]
    {
        assert!(offered.iter().any(|p| p == profile), "{profile} missing from {offered:?}");
    }
    assert!(!m.contains("mig_profile=\"unknown\""), "{m}");
}

#[test]
fn a_profile_table_read_with_a_transient_error_is_read_again() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - model: H100-SXM5-80GB
    mig: {layout: all-1g.10gb}
    faults: [{at_s: 0, error: {call: nvmlDeviceGetGpuInstanceProfileInfoV, code: UNKNOWN, for_s: 3}}]
",
        0.0,
        QUICK_CYCLES,
    );
    let m = exporter.metrics();
    assert!(errors(&m, "nvmlDeviceGetGpuInstanceProfileInfoV", "unknown") >= 1.0, "{m}");
    assert_eq!(
        sample(&m, "gpu_mig_instance_info", &[("gpu_instance_id", "1"), ("mig_profile", "1g.10gb")]),
        Some(1.0),
        "instances are named meanwhile, by profile id: {m}"
    );
    set_clock(&clock, 4.0);
    exporter.wait_metrics("the whole profile table once it answers", |m| {
        sample(m, "gpu_mig_profile_available", &[("mig_profile", "3g.40gb")]).is_some()
            && sample(m, "gpu_mig_profile_available", &[("mig_profile", "1g.10gb+me")]).is_some()
    });
}

#[test]
fn xids_from_before_the_exporter_registered_are_not_counted() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - {model: A100-SXM4-80GB, faults: [{at_s: 2, xid: 79}, {at_s: 10, xid: 13}]}
",
        5.0,
        QUICK_CYCLES,
    );
    set_clock(&clock, 11.0);
    exporter.wait_metrics("the XID of 10 s counted", |m| {
        sample(m, "gpu_xid_errors_total", &[("gpu", "0"), ("xid", "13")]) == Some(1.0)
    });
    assert_eq!(
        exporter.value("gpu_xid_errors_total", &[("xid", "79")]),
        None,
        "the XID of 2 s happened before the exporter registered for events"
    );
}
