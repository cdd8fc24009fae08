//! dcgm-exporter's users keep their dashboards and alerts: a real Prometheus (Debian's
//! 2.42, and a built 3.x: `test_support::prometheus`) scrapes the simulated node served
//! in `--metrics.naming both`, and
//! - every variable and panel query of NVIDIA's own dashboard
//!   (`tests/fixtures/dcgm-exporter/dcgm-exporter-dashboard.json`, see the README beside
//!   it) returns data, with the labels its legends name;
//! - typical dcgm-exporter alert expressions select the GPUs the scenario makes them
//!   select, and nothing else;
//! - each dcgm-exporter series agrees with its native twin in the same scrape.
//!
//! Variables are set as Grafana's "All" sets them (a regex matching every value).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Launch, wait_for, write_scenario};
use test_support::prometheus::{self, Flavour};

const SCENARIO: &str = "gpus:
  - {model: H100-SXM5-80GB, uuid: GPU-e0000000-0000-4000-8000-000000000000, values: {utilization: 91, memory_used_mib: 61440, power_watts: 640, temperature_c: 88, sm_clock_mhz: 1980, mem_clock_mhz: 2619, tensor_activity: 45, dram_activity: 30}}
  - {model: H100-SXM5-80GB, uuid: GPU-e0000000-0000-4000-8000-000000000001, values: {utilization: 12, memory_used_mib: 2048, power_watts: 120, temperature_c: 41, sm_clock_mhz: 345, mem_clock_mhz: 2619, tensor_activity: 1, dram_activity: 2}}
  - model: H100-SXM5-80GB
    uuid: GPU-e0000000-0000-4000-8000-000000000002
    values: {power_watts: 300, temperature_c: 50}
    mig:
      instances:
        - {profile: 3g.40gb, values: {sm_activity: 62, tensor_activity: 40, dram_activity: 30}}
        - {profile: 3g.40gb}
";

fn dashboard() -> serde_json::Value {
    let path = common::repo_root().join("exporter/tests/fixtures/dcgm-exporter/dcgm-exporter-dashboard.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every (title, expr, legend) of the dashboard's panels, rows included.
fn panel_queries(panels: &serde_json::Value, out: &mut Vec<(String, String, String)>) {
    for panel in panels.as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default().to_string();
            if !expr.is_empty() {
                let title = panel["title"].as_str().unwrap_or_default().to_string();
                out.push((title, expr, target["legendFormat"].as_str().unwrap_or_default().to_string()));
            }
        }
        panel_queries(&panel["panels"], out);
    }
}

/// The `{{label}}` names of a legend format.
fn legend_labels(legend: &str) -> Vec<String> {
    legend.split("{{").skip(1).filter_map(|part| part.split_once("}}")).map(|(l, _)| l.trim().to_string()).collect()
}

/// "All" for every variable: Grafana writes a regex that matches each value.
fn all_variables(expr: &str) -> String {
    expr.replace("$instance", ".+").replace("$gpu", ".+").replace("$__rate_interval", "1m")
}

#[test]
fn nvidias_dashboard_and_typical_alerts_work_on_both_namings_in_prometheus_2() {
    dashboard_and_alerts(Flavour::V2);
}

#[test]
fn nvidias_dashboard_and_typical_alerts_work_on_both_namings_in_prometheus_3() {
    dashboard_and_alerts(Flavour::V3);
}

fn dashboard_and_alerts(flavour: Flavour) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "node.yaml", SCENARIO);
    let exporter = Launch::scenario(&scenario, Some(30.0))
        .args(&["--collect-interval", "500ms", "--nvml.call-timeout", "200ms", "--metrics.naming", "both"])
        .start();
    exporter.wait_ready();
    let prometheus = prometheus::Launch::new(flavour).scrape("gpu", &[&exporter.address]).start();
    wait_for(Duration::from_secs(60), || {
        prometheus.vector("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").len() == 4
            && prometheus.vector("gpu_utilization").len() >= 2
    })
    .unwrap_or_else(|| panic!("{flavour} never had the node's series; exporter logs:\n{}", exporter.logs()));

    let dashboard = dashboard();
    // Variables: label_values(METRIC, LABEL) is a series query on METRIC's LABEL.
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let mut checked = 0;
    for variable in variables {
        let Some(q) = variable["query"].as_str().and_then(|q| q.strip_prefix("label_values(")) else { continue };
        let (metric, label) = q.trim_end_matches(')').split_once(',').unwrap();
        let values: Vec<String> = prometheus
            .vector(metric.trim())
            .iter()
            .filter_map(|(labels, _)| labels[label.trim()].as_str().map(String::from))
            .collect();
        assert!(!values.is_empty(), "variable {}: no values of {label} on {metric}", variable["name"]);
        checked += 1;
    }
    assert_eq!(checked, 2, "the dashboard's instance and gpu variables");

    let mut queries = Vec::new();
    panel_queries(&dashboard["panels"], &mut queries);
    assert_eq!(queries.len(), 8, "the dashboard's panel queries: {queries:?}");
    for (title, expr, legend) in &queries {
        let result = prometheus.vector(&all_variables(expr));
        assert!(!result.is_empty(), "panel {title:?}: {expr} returned nothing");
        for label in legend_labels(legend) {
            for (labels, _) in &result {
                assert!(labels[&label].is_string(), "panel {title:?}: legend {legend:?} lacks {label} in {labels}");
            }
        }
    }
    // The tensor panel shows the whole GPUs and each GPU instance.
    let tensor = prometheus.vector("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE");
    assert_eq!(tensor.iter().filter(|(l, _)| l["GPU_I_PROFILE"] == "3g.40gb").count(), 2, "{tensor:?}");

    // Typical alert expressions written for dcgm-exporter.
    let firing = |expr: &str| -> Vec<String> {
        let mut gpus: Vec<String> =
            prometheus.vector(expr).iter().map(|(l, _)| l["gpu"].as_str().unwrap_or_default().to_string()).collect();
        gpus.sort();
        gpus
    };
    assert_eq!(firing("DCGM_FI_DEV_GPU_TEMP > 85"), ["0"], "GPU too hot");
    assert_eq!(firing("DCGM_FI_DEV_XID_ERRORS > 0"), Vec::<String>::new(), "no XID on this node");
    assert_eq!(firing("avg by (gpu, Hostname, hostname) (DCGM_FI_DEV_GPU_UTIL) < 20"), ["1"], "idle GPU");
    assert_eq!(
        firing("DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_RESERVED) > 0.7"),
        ["0"],
        "framebuffer nearly full"
    );
    assert_eq!(firing("rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[1m]) > 0"), Vec::<String>::new());

    // Each dcgm-exporter series agrees with its native twin in the same scrape (whole GPUs).
    for (dcgm, factor, native) in [
        ("DCGM_FI_DEV_GPU_UTIL", 1.0, "gpu_utilization"),
        ("DCGM_FI_DEV_POWER_USAGE", 1.0, "gpu_power_usage_watts"),
        ("DCGM_FI_DEV_FB_USED", 1048576.0, "gpu_memory_used_bytes"),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0.001, "gpu_energy_consumption_joules_total"),
    ] {
        let pick = format!("sum by (gpu) ({dcgm}{{GPU_I_PROFILE=\"\"}}) * {factor}");
        let twin = format!("sum by (gpu) ({native}{{mig_profile=\"\"}})");
        assert!(!prometheus.vector(&pick).is_empty(), "{dcgm} has data");
        let differ = prometheus.vector(&format!("abs({pick} - on (gpu) {twin}) > 0.001"));
        assert!(differ.is_empty(), "{dcgm} differs from {native}: {differ:?}");
        let paired = prometheus.vector(&format!("{pick} and on (gpu) {twin}"));
        assert_eq!(paired.len(), prometheus.vector(&pick).len(), "every {dcgm} GPU has a {native} twin");
    }
}
