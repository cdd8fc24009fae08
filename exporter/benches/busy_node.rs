//! The whole exporter on the busy MIG node of the attribution issue: 8 H100 each cut
//! into 7x `1g.10gb` (56 instances), 100 pods (MIG devices time-sliced between two pods)
//! and 400 GPU processes, with the simulated kubelet serving pod-resources and a procfs
//! tree. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p gpu-exporter --bench busy_node` (release build). Measures the
//! collection cycle as the exporter reports it (NVML reads, MIG, processes, attribution),
//! `/metrics` p50/p99 under 10 concurrent scrapers, series and bytes, resident memory,
//! and CPU at a 1 s collect interval.
//!
//! `BENCH_NAMING=native|dcgm-exporter|both` picks `--metrics.naming` (default native),
//! for the cost of serving dcgm-exporter's names beside or instead of ours.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fmt::Write as _;
use std::time::Duration;

use fake_nvml::scenario::Scenario;
use support::{
    PROMETHEUS_ACCEPT, SCRAPERS, SCRAPES_PER_SCRAPER, Spawned, build_fake, connect, get, resource_use, scrape_load,
    target_dir,
};

const GPUS: u32 = 8;
const INSTANCES_PER_GPU: u32 = 7;
const PODS: u32 = 100;
const PROCESSES_PER_POD: u32 = 4;

/// The scenario: pod `p` holds replica `p / 56` of MIG instance `p % 56`.
fn scenario_yaml() -> String {
    let mut y = String::from("kubelet: {cgroup_version: 2, cgroup_driver: systemd, runtime: containerd}\ngpus:\n");
    for g in 0..GPUS {
        let _ = writeln!(y, "  - model: H100-SXM5-80GB");
        let _ = writeln!(y, "    values: {{power_watts: {}, temperature_c: 60}}", 400 + g * 10);
        let _ = writeln!(y, "    mig:\n      instances:");
        for i in 0..INSTANCES_PER_GPU {
            let _ = writeln!(
                y,
                "        - {{profile: 1g.10gb, values: {{sm_activity: {}, tensor_activity: 20}}}}",
                30 + i * 5
            );
        }
    }
    y.push_str("pods:\n");
    let instances = GPUS * INSTANCES_PER_GPU;
    for p in 0..PODS {
        let (instance, replica) = (p % instances, p / instances);
        let (gpu, mig) = (instance / INSTANCES_PER_GPU, instance % INSTANCES_PER_GPU);
        let _ = writeln!(y, "  - namespace: inference\n    name: pool-{p}\n    labels: {{app: pool}}\n    containers:");
        let _ = writeln!(y, "      - name: server");
        let _ = writeln!(
            y,
            "        devices: [{{resource: nvidia.com/mig-1g.10gb, gpu: {gpu}, mig: {mig}, replica: {replica}}}]"
        );
        let _ = writeln!(y, "        processes:");
        for k in 0..PROCESSES_PER_POD {
            let _ = writeln!(
                y,
                "          - {{pid: {}, gpu: {gpu}, mig: {mig}, memory_used_mib: 600}}",
                10_000 + p * 10 + k
            );
        }
    }
    y
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy-node.yaml");
    std::fs::write(&path, scenario_yaml()).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    assert_eq!(scenario.processes.len(), (PODS * PROCESSES_PER_POD) as usize);
    let library = build_fake(&target_dir());
    let kubelet_dir = dir.path().join("kubelet");
    std::fs::create_dir_all(&kubelet_dir).unwrap();
    let kubelet = fake_kubelet::start_in(&scenario, "bench-node", &kubelet_dir).unwrap();
    let naming = std::env::var("BENCH_NAMING").unwrap_or_else(|_| "native".into());
    let extra = vec![
        format!("--metrics.naming={naming}"),
        format!("--kubelet.pod-resources-socket={}", kubelet.socket().display()),
        format!("--path.procfs={}", kubelet_dir.join("proc").display()),
        format!("--path.pod-logs={}", kubelet_dir.join("pods").display()),
    ];
    let exporter = Spawned::exporter(&library, &path, &extra);
    // Let the PID cache fill and the pod-resources list arrive.
    std::thread::sleep(Duration::from_secs(3));

    println!(
        "# Busy MIG node: {GPUS} H100 x {INSTANCES_PER_GPU} instances, {PODS} pods, {} processes, naming {naming}\n",
        PODS * PROCESSES_PER_POD
    );
    let mut cycles = Vec::new();
    for _ in 0..20 {
        let (_, body) = get(&mut connect(&exporter.address), "/metrics", "text/plain", false);
        let text = String::from_utf8(body).unwrap();
        let seconds: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("gpu_exporter_collection_duration_seconds{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        cycles.push(seconds * 1e3);
        std::thread::sleep(Duration::from_millis(1000));
    }
    cycles.sort_by(f64::total_cmp);
    let (_, body) = get(&mut connect(&exporter.address), "/metrics", "text/plain", false);
    let text = String::from_utf8(body).unwrap();
    let pod_series = text.lines().filter(|l| l.starts_with("gpu_pod_memory_used_bytes{")).count();
    println!("## Collection cycle as the exporter reports it (20 cycles)\n");
    println!("| median | max | per-pod memory series |\n|---|---|---|");
    println!("| {:.2} ms | {:.2} ms | {pod_series} |", cycles[cycles.len() / 2], cycles[cycles.len() - 1]);
    println!("\n## /metrics under {SCRAPERS} concurrent keep-alive scrapers ({SCRAPES_PER_SCRAPER} scrapes each)\n");
    println!("| target | request | series | bytes | p50 | p99 | p50 per series |");
    println!("|---|---|---|---|---|---|---|");
    scrape_load(&exporter.address, "gpu-exporter", "OpenMetrics + gzip", PROMETHEUS_ACCEPT, true);
    scrape_load(&exporter.address, "gpu-exporter", "text 0.0.4", "text/plain", false);
    resource_use(&exporter);
    drop(kubelet);
}
