//! Golden-file test of the whole `/metrics` output for every shipped scenario.
//!
//! The exporter runs on the simulated node with scenario time frozen, so every GPU
//! reading is exact; the few values that depend on the wall clock or on how many
//! cycles ran (timestamps, durations, call counters) are replaced by `NaN` before the
//! comparison. Regenerate with `UPDATE_GOLDEN=1 cargo test -p gpu-exporter --test golden`.
//! Each raw scrape must also pass `promtool check metrics`, Debian's 2.42 and a built 3.x. Every scenario runs with the
//! simulated kubelet beside it (pod-resources socket, procfs and pod log trees), so pods
//! on the seed's mixed node show up in its golden file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{Node, shipped_scenario};
use test_support::prometheus::{Flavour, Promtool, PromtoolRun};

/// Families whose values change from run to run.
const RUN_DEPENDENT: &[&str] = &[
    "gpu_last_collection_success_timestamp_seconds",
    "gpu_xid_last_seen_timestamp_seconds",
    "gpu_exporter_collection_duration_seconds",
    "gpu_exporter_collections_total",
    "gpu_exporter_last_collection_timestamp_seconds",
    "gpu_exporter_nvml_calls_total",
    "gpu_exporter_nvml_call_seconds_total",
    "gpu_health_checks_total",
    "gpu_exporter_pod_resources_last_success_timestamp_seconds",
];

const SCENARIOS: &[&str] = &[
    "a100-80gb",
    "a100-mig-layouts",
    "h100-80gb",
    "h200-141gb",
    "l40s-48gb",
    "rtx-4090-24gb",
    "h100-8gpu-node",
    "h200-mig-node",
    "seed-mixed-node",
    "dra-node",
];

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn start(scenario: &str) -> Node {
    start_with(scenario, &[])
}

/// [`start`] with more flags.
fn start_with(scenario: &str, extra: &[&str]) -> Node {
    let args = [&["--label", "cluster=production,region=cn-east"], extra].concat();
    common::start_node(&shipped_scenario(scenario), Some(120.0), &args)
}

/// Masks run-dependent values and the build revision.
fn normalize(exposition: &str) -> String {
    let mut out = String::with_capacity(exposition.len());
    for line in exposition.lines() {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        if !line.starts_with('#') && RUN_DEPENDENT.contains(&name) {
            let (series, _) = line.rsplit_once(' ').unwrap();
            out.push_str(series);
            out.push_str(" NaN");
        } else if name == "gpu_exporter_build_info" {
            let start = line.find("revision=\"").unwrap() + "revision=\"".len();
            let end = start + line[start..].find('"').unwrap();
            out.push_str(&line[..start]);
            out.push_str("REVISION");
            out.push_str(&line[end..]);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

fn promtool_check(exposition: &str) {
    for flavour in Flavour::ALL {
        let run = promtool(flavour, exposition);
        assert!(run.success, "{flavour}: promtool check metrics failed:\n{}", run.report);
    }
}

/// `promtool check metrics` of `flavour` on `exposition`.
fn promtool(flavour: Flavour, exposition: &str) -> PromtoolRun {
    Promtool::new(flavour).args(["check", "metrics"]).stdin(exposition).run()
}

fn compare(name: &str, actual: &str) {
    test_support::golden::file(&golden_path(name), actual, "UPDATE_GOLDEN=1 cargo test -p gpu-exporter --test golden");
}

#[test]
fn every_shipped_scenario_matches_its_golden_file() {
    for scenario in SCENARIOS {
        let exporter = start(scenario);
        let raw = exporter.metrics();
        promtool_check(&raw);
        compare(&format!("{scenario}.prom"), &normalize(&raw));
    }
}

/// The seed's mixed node in dcgm-exporter's naming alone: the page dashboards written
/// for dcgm-exporter read. promtool finds no error in it, and its only lint findings are
/// the ones dcgm-exporter's own names force: counters without `_total` and the
/// camelCase label names (`modelName`; `UUID` is upper case and passes), and the word
/// `COUNTER` in `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`.
#[test]
fn dcgm_exporter_naming_matches_its_golden_file_and_lints_only_for_its_names() {
    let exporter = start_with("seed-mixed-node", &["--metrics.naming", "dcgm-exporter"]);
    let raw = exporter.metrics();
    assert!(raw.contains("\nDCGM_FI_DEV_GPU_UTIL{"), "{raw}");
    compare("seed-mixed-node.dcgm-exporter.prom", &normalize(&raw));
    let mut expected: Vec<String> = [
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ]
    .iter()
    // The NVLink bandwidth is a rate between two cycles: absent under the frozen clock.
    .filter(|name| raw.contains(&format!("# TYPE {name} counter")))
    .map(|name| format!("{name} counter metrics should have \"_total\" suffix"))
    .collect();
    // And the name itself says what promtool wants only the type to say.
    expected.push("DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'".to_string());
    for family in raw.lines().filter_map(|l| l.strip_prefix("# TYPE DCGM_")) {
        let name = family.split(' ').next().unwrap_or_default();
        expected.push(format!("DCGM_{name} label names should be written in 'snake_case' not 'camelCase'"));
    }
    expected.sort();
    expected.dedup();
    for flavour in Flavour::ALL {
        let report = promtool(flavour, &raw).report;
        let mut findings: Vec<&str> = report.lines().filter(|l| !l.trim().is_empty()).collect();
        // promtool names a camelCase finding once per series; compare the distinct findings.
        findings.sort();
        findings.dedup();
        assert_eq!(findings, expected, "{flavour}: promtool's findings, all of them:\n{report}");
    }
}

#[test]
fn openmetrics_output_matches_its_golden_file() {
    let exporter = start("h100-8gpu-node");
    let response = exporter.get("/metrics", &[("Accept", "application/openmetrics-text;version=1.0.0")]);
    assert_eq!(response.header("content-type"), Some("application/openmetrics-text; version=1.0.0; charset=utf-8"));
    assert!(response.body.ends_with("# EOF\n"));
    compare("h100-8gpu-node.openmetrics", &normalize(&response.body));
}

#[test]
fn every_scenario_file_is_covered() {
    let dir = common::repo_root().join("fake-nvml/scenarios");
    let mut shipped: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".yaml").map(String::from))
        .collect();
    shipped.sort();
    let mut covered: Vec<String> = SCENARIOS.iter().map(|s| s.to_string()).collect();
    covered.sort();
    assert_eq!(shipped, covered, "add new scenarios to SCENARIOS");
}
