//! A real Prometheus (Debian's `prometheus` package), started on loopback, scrapes the
//! exporter on the simulated node; a query for each metric of the seed's contract
//! returns the scenario's value, with the constant labels attached.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::prometheus::{query, start_prometheus};
use common::{Launch, wait_for, write_scenario};

#[test]
fn prometheus_scrapes_the_seed_metrics_with_the_scenario_values() {
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
    let prometheus = start_prometheus(Some(&exporter.address));
    wait_for(Duration::from_secs(60), || {
        common::try_http_get(&prometheus.address, "/-/ready", &[]).is_ok_and(|r| r.status == 200)
            && query(&prometheus, "up{job=\"gpu\"}").first().is_some_and(|(_, v)| *v == 1.0)
            && !query(&prometheus, "gpu_mem_clock_mhz").is_empty()
    })
    .expect("prometheus scraped the exporter");

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
        let results = query(&prometheus, metric);
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
    assert_eq!(query(&prometheus, "gpu_exporter_nvml_init_attempts_total").len(), 1);
}
