//! A real Prometheus, Debian's 2.42 and a built 3.x (`test_support::prometheus`), started
//! on loopback, scrapes the exporter on the simulated node; a query for each metric of
//! the seed's contract returns the scenario's value, with the constant labels attached.
//! Prometheus 3 fails a scrape whose Content-Type it does not know instead of reading it
//! as text, and asks for OpenMetrics first: both read what the exporter answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Launch, wait_for, write_scenario};
use test_support::prometheus::{self, Flavour};

#[test]
fn prometheus_2_scrapes_the_seed_metrics_with_the_scenario_values() {
    scrapes_the_seed_metrics(Flavour::V2);
}

#[test]
fn prometheus_3_scrapes_the_seed_metrics_with_the_scenario_values() {
    scrapes_the_seed_metrics(Flavour::V3);
}

fn scrapes_the_seed_metrics(flavour: Flavour) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "node.yaml",
        "gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-11111111-2222-3333-4444-555555555555
    values: {utilization: 63, memory_used_mib: 40960, power_watts: 350.5, temperature_c: 61, sm_clock_mhz: 1755, mem_clock_mhz: 2619}
",
    );
    let exporter = Launch::scenario(&scenario, Some(30.0))
        .args(&[
            "--collect-interval",
            "500ms",
            "--nvml.call-timeout",
            "200ms",
            "--label",
            "cluster=production,region=cn-east",
        ])
        .start();
    exporter.wait_ready();
    let prometheus = prometheus::Launch::new(flavour).scrape("gpu", &[&exporter.address]).start();
    wait_for(Duration::from_secs(60), || {
        prometheus.vector("up{job=\"gpu\"}").first().is_some_and(|(_, v)| *v == 1.0)
            && !prometheus.vector("gpu_mem_clock_mhz").is_empty()
    })
    .unwrap_or_else(|| panic!("{flavour} did not scrape the exporter: {}", prometheus.get("/api/v1/targets").1));

    let total = 81559.0 * 1024.0 * 1024.0;
    let used = 40960.0 * 1024.0 * 1024.0;
    let expected = [
        ("gpu_utilization", 63.0),
        ("gpu_memory_utilization", used / total * 100.0),
        ("gpu_memory_used_bytes", used),
        ("gpu_memory_total_bytes", total),
        ("gpu_power_usage_watts", 350.5),
        ("gpu_temperature_celsius", 61.0),
        ("gpu_sm_clock_mhz", 1755.0),
        ("gpu_mem_clock_mhz", 2619.0),
    ];
    for (metric, value) in expected {
        let results = prometheus.vector(metric);
        assert_eq!(results.len(), 1, "{metric}: {results:?}");
        let (labels, got) = &results[0];
        assert!((got - value).abs() < 1e-9 * value.abs().max(1.0), "{metric}: got {got}, expected {value}");
        assert_eq!(labels["uuid"], "GPU-11111111-2222-3333-4444-555555555555", "{metric}");
        assert_eq!(labels["model"], "NVIDIA H100 80GB HBM3");
        assert_eq!(labels["gpu"], "0");
        assert_eq!(labels["node"], "test-node");
        assert_eq!(labels["cluster"], "production");
        assert_eq!(labels["region"], "cn-east");
    }
    // The counter survives Prometheus's OpenMetrics parser with its _total suffix.
    assert_eq!(prometheus.vector("gpu_exporter_nvml_init_attempts_total").len(), 1);
}
