//! Fault handling end to end: the exporter binary on the simulated node, with faults
//! scheduled in the scenario and scenario time stepped by the test through
//! `FAKE_NVML_CLOCK_FILE`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Launch, clocked, sample, set_clock, wait_for, write_scenario};

fn gpu(index: &str) -> [(&'static str, &str); 1] {
    [("gpu", index)]
}

#[test]
fn a_lost_gpu_shows_as_lost_while_the_others_keep_updating() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - {model: H100-SXM5-80GB, values: {utilization: 50}, faults: [{at_s: 10, lost: true}]}
  - {model: H100-SXM5-80GB, values: {utilization: {steps: [[0, 20], [10, 65]]}}}
",
        0.0,
        &["--collect-interval", "200ms", "--nvml.call-timeout", "100ms"],
    );
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_up", &gpu("0")), Some(1.0));
    assert_eq!(sample(&m, "gpu_utilization", &gpu("0")), Some(50.0));

    set_clock(&clock, 11.0);
    wait_for(Duration::from_secs(10), || sample(&exporter.metrics(), "gpu_lost", &gpu("0")) == Some(1.0))
        .expect("GPU 0 reported lost");
    wait_for(Duration::from_secs(10), || sample(&exporter.metrics(), "gpu_utilization", &gpu("1")) == Some(65.0))
        .expect("GPU 1 keeps updating");
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_up", &gpu("0")), Some(0.0));
    assert_eq!(sample(&m, "gpu_utilization", &gpu("0")), None, "no stale reading on a lost GPU");
    assert!(sample(&m, "gpu_info", &gpu("0")).is_some(), "the lost GPU keeps its identity");
    assert!(exporter.logs().contains("GPU is lost"), "{}", exporter.logs());
    assert_eq!(exporter.get("/readyz", &[]).status, 200, "one lost GPU does not make the exporter unready");
}

#[test]
fn a_hung_call_marks_only_that_gpu_stale_and_scrapes_still_answer() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - {model: L40S-48GB, values: {utilization: {steps: [[0, 10], [5, 77]]}}}
  - {model: L40S-48GB, values: {power_watts: 200}, faults: [{at_s: 5, hang: {call: nvmlDeviceGetPowerUsage, for_s: 3}}]}
",
        0.0,
        &["--collect-interval", "300ms", "--nvml.call-timeout", "150ms"],
    );
    assert_eq!(sample(&exporter.metrics(), "gpu_power_usage_watts", &gpu("1")), Some(200.0));

    set_clock(&clock, 5.0);
    wait_for(Duration::from_secs(10), || sample(&exporter.metrics(), "gpu_collection_stale", &gpu("1")) == Some(1.0))
        .expect("GPU 1 marked stale");
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_power_usage_watts", &gpu("1")), None, "readings withheld while stale");
    assert!(sample(&m, "gpu_last_collection_success_timestamp_seconds", &gpu("1")).is_some());
    let errors = [("gpu", "1"), ("call", "nvmlDeviceGetPowerUsage"), ("error", "deadline_exceeded")];
    assert_eq!(sample(&m, "gpu_exporter_nvml_errors_total", &errors), Some(1.0));
    wait_for(Duration::from_secs(10), || sample(&exporter.metrics(), "gpu_utilization", &gpu("0")) == Some(77.0))
        .expect("GPU 0 keeps updating while GPU 1 hangs");

    // Leave the hang window before the blocked call returns, so the GPU recovers.
    set_clock(&clock, 9.0);
    wait_for(Duration::from_secs(10), || sample(&exporter.metrics(), "gpu_up", &gpu("1")) == Some(1.0))
        .expect("GPU 1 answers again after the hang");
    assert!(exporter.logs().contains("past its deadline"), "{}", exporter.logs());
}

#[test]
fn an_xid_is_counted_from_the_event_set_without_waiting_for_a_cycle() {
    let (_dir, clock, exporter) = clocked(
        "gpus:
  - {model: A100-SXM4-80GB, faults: [{at_s: 3, xid: 79}, {at_s: 3, xid: 13}, {at_s: 4, xid: 79}]}
",
        0.0,
        &["--collect-interval", "60s", "--nvml.call-timeout", "1s"],
    );
    let cycles = sample(&exporter.metrics(), "gpu_exporter_collections_total", &[]).unwrap();
    assert_eq!(sample(&exporter.metrics(), "gpu_xid_errors_total", &[("xid", "79")]), None);

    set_clock(&clock, 4.5);
    wait_for(Duration::from_secs(5), || {
        sample(&exporter.metrics(), "gpu_xid_errors_total", &[("gpu", "0"), ("xid", "79")]) == Some(2.0)
    })
    .expect("both XID 79 events counted");
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_xid_errors_total", &[("xid", "13")]), Some(1.0));
    assert!(sample(&m, "gpu_xid_last_seen_timestamp_seconds", &[("xid", "79")]).unwrap() > 1.7e9);
    assert_eq!(
        sample(&m, "gpu_exporter_collections_total", &[]),
        Some(cycles),
        "delivered by the event, not by a collection cycle"
    );
}

#[test]
fn a_missing_library_keeps_the_exporter_serving_and_retrying() {
    let exporter = Launch {
        library: "/nonexistent/libnvidia-ml.so.1".into(),
        env: vec![],
        args: vec!["--nvml.init-retry-max".into(), "1s".into()],
    }
    .start();
    wait_for(Duration::from_secs(10), || {
        sample(&exporter.metrics(), "gpu_exporter_nvml_init_attempts_total", &[]).is_some_and(|n| n >= 3.0)
    })
    .expect("init retried");
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_exporter_nvml_up", &[]), Some(0.0));
    let reason = common::samples(&m, "gpu_exporter_nvml_error_info");
    assert_eq!(reason.len(), 1, "{m}");
    assert!(reason[0].contains("error=\"library_not_loaded\""), "{}", reason[0]);
    assert!(reason[0].contains("/nonexistent/libnvidia-ml.so.1"), "{}", reason[0]);
    let ready = exporter.get("/readyz", &[]);
    assert_eq!(ready.status, 503);
    assert!(ready.body.contains("library_not_loaded"), "{}", ready.body);
    assert_eq!(exporter.get("/healthz", &[]).status, 200, "alive, so no restart loop");
    assert!(exporter.terminate().success(), "clean exit on SIGTERM");
}

#[test]
fn a_library_that_is_not_nvml_is_reported_not_crashed_on() {
    let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a libc to load");
    let exporter = Launch { library: libc.into(), env: vec![], args: vec![] }.start();
    wait_for(Duration::from_secs(10), || {
        !common::samples(&exporter.metrics(), "gpu_exporter_nvml_error_info").is_empty()
    })
    .expect("error reported");
    let m = exporter.metrics();
    let reason = common::samples(&m, "gpu_exporter_nvml_error_info")[0].to_string();
    assert!(reason.contains("error=\"library_not_loaded\"") && reason.contains("nvmlInit_v2"), "{reason}");
}

#[test]
fn a_malformed_scenario_is_refused_with_file_field_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "broken.yaml",
        "gpus:\n  - model: H100-SXM5-80GB\n    values:\n      power_watts: {ramp: {from: 100, to: 200}}\n",
    );
    let exporter = Launch::scenario(&scenario, None).start();
    let expected = format!("{}: gpus[0].values.power_watts", scenario.display());
    wait_for(Duration::from_secs(10), || exporter.logs().contains(&expected))
        .unwrap_or_else(|| panic!("no refusal naming {expected}; logs:\n{}", exporter.logs()));
    assert_eq!(sample(&exporter.metrics(), "gpu_exporter_nvml_up", &[]), Some(0.0));
    assert_eq!(exporter.get("/readyz", &[]).status, 503);
}

#[test]
fn nvml_comes_up_once_the_driver_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("late.yaml");
    let exporter = Launch::scenario(&scenario, None).args(&["--nvml.init-retry-max", "1s"]).start();
    wait_for(Duration::from_secs(10), || exporter.get("/readyz", &[]).status == 503).expect("not ready without a node");
    // Written aside and renamed into place: an init between create and write would read
    // an empty file, a node with no GPUs.
    let aside = dir.path().join("late.yaml.new");
    std::fs::write(&aside, "gpus: [{model: H200-SXM-141GB}]\n").unwrap();
    std::fs::rename(&aside, &scenario).unwrap();
    exporter.wait_ready();
    let m = exporter.metrics();
    assert_eq!(sample(&m, "gpu_exporter_nvml_up", &[]), Some(1.0));
    assert_eq!(sample(&m, "gpu_exporter_gpus", &[]), Some(1.0));
    assert!(common::samples(&m, "gpu_exporter_nvml_error_info").is_empty());
}

#[test]
fn driver_not_loaded_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "n.yaml", "gpus: [{model: H100-SXM5-80GB}]\n");
    let exporter = Launch::scenario(&scenario, None).env("FAKE_NVML_INIT_ERROR", "driver_not_loaded").start();
    wait_for(Duration::from_secs(10), || {
        common::samples(&exporter.metrics(), "gpu_exporter_nvml_error_info")
            .first()
            .is_some_and(|l| l.contains("error=\"driver_not_loaded\""))
    })
    .expect("driver_not_loaded reported");
}

#[test]
fn memory_error_counters_are_read_on_each_generation_of_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "node.yaml",
        "gpus:
  - model: V100-SXM2-32GB
    faults: [{at_s: 1, retired_pages: {single_bit: 2, double_bit: 1, pending: true}}, {at_s: 1, ecc_errors: {uncorrected: 1}}]
  - model: A100-SXM4-80GB
    faults:
      - {at_s: 1, remapped_rows: {correctable: 3, uncorrectable: 1, pending: true}}
      - {at_s: 1, recovery_action: gpu_reset}
      - {at_s: 1, clock_events: {reasons: [hw_thermal_slowdown]}}
      - {at_s: 1, pcie_replays: 12}
",
    );
    let exporter = Launch::scenario(&scenario, Some(5.0))
        .args(&["--collect-interval", "300ms", "--nvml.call-timeout", "200ms"])
        .start();
    exporter.wait_ready();
    let m = exporter.metrics();
    let v100 = |extra: (&'static str, &'static str)| [("gpu", "0"), extra];
    assert_eq!(sample(&m, "gpu_retired_pages", &v100(("cause", "single_bit_ecc"))), Some(2.0));
    assert_eq!(sample(&m, "gpu_retired_pages", &v100(("cause", "double_bit_ecc"))), Some(1.0));
    assert_eq!(sample(&m, "gpu_retired_pages_pending", &gpu("0")), Some(1.0));
    assert_eq!(sample(&m, "gpu_ecc_volatile_errors_total", &v100(("error_type", "uncorrected"))), Some(1.0));
    assert_eq!(sample(&m, "gpu_remapped_rows", &gpu("0")), None, "V100 does not remap rows");
    let a100 = |extra: (&'static str, &'static str)| [("gpu", "1"), extra];
    assert_eq!(sample(&m, "gpu_remapped_rows", &a100(("error_type", "correctable"))), Some(3.0));
    assert_eq!(sample(&m, "gpu_remapped_rows", &a100(("error_type", "uncorrectable"))), Some(1.0));
    assert_eq!(sample(&m, "gpu_remapped_rows_pending", &gpu("1")), Some(1.0));
    assert_eq!(sample(&m, "gpu_retired_pages", &gpu("1")), None, "A100 does not retire pages");
    assert_eq!(sample(&m, "gpu_recovery_action", &gpu("1")), Some(1.0));
    assert_eq!(sample(&m, "gpu_clock_event_active", &a100(("reason", "hw_thermal_slowdown"))), Some(1.0));
    assert_eq!(sample(&m, "gpu_clock_event_active", &a100(("reason", "sw_thermal_slowdown"))), Some(0.0));
    assert_eq!(sample(&m, "gpu_pcie_replays_total", &gpu("1")), Some(12.0));
    assert!(common::samples(&m, "gpu_exporter_nvml_errors_total").is_empty(), "NOT_SUPPORTED is not an error: {m}");
}
