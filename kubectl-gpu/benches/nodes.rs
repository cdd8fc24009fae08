//! `kubectl gpu nodes` over 1,000 simulated GPU nodes, end to end: the release binary,
//! a kubeconfig, the in-test API server (loopback HTTP) listing 1,000 nodes and their
//! exporter pods, and 1,000 `pods/proxy` reads answered with real exporter pages
//! (captured from the exporter on three simulated nodes: the seed's mixed A100 node, an
//! 8-GPU H100 node and an H200 MIG node, each page relabelled for its node). Each read
//! can be delayed to stand for a real API server's proxy hop.
//!
//! Prints figures; asserts nothing. `cargo bench -p kubectl-gpu --bench nodes`
//! (`docs/benchmarks.md`, "kubectl gpu nodes over 1,000 nodes").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use test_support::apiserver::{self, ADMIN_TOKEN, ApiServer, Backend};
use test_support::cluster::{self, EXPORTER_NAMESPACE};
use test_support::simulated::{Clock, SimulatedNode, workspace};

const NODES: usize = 1000;
const RUNS: usize = 5;

fn capture() -> Vec<(String, String, u32)> {
    let mut pages = Vec::new();
    for (scenario, product, gpus) in [
        ("seed-mixed-node", "NVIDIA-A100-SXM4-80GB", 4),
        ("h100-8gpu-node", "NVIDIA-H100-80GB-HBM3", 8),
        ("h200-mig-node", "NVIDIA-H200", 8),
    ] {
        let path = workspace().join("fake-nvml/scenarios").join(format!("{scenario}.yaml"));
        let node = SimulatedNode::start("captured", &path, Clock::Frozen(120.0), "cluster=bench");
        pages.push((node.metrics(), product.to_string(), gpus));
    }
    pages
}

fn cluster(pages: &[(String, String, u32)], delay: Duration) -> ApiServer {
    let api = ApiServer::new();
    for i in 0..NODES {
        let (page, product, gpus) = &pages[i % pages.len()];
        let name = format!("gpu-node-{i:04}");
        api.add_node(cluster::gpu_node(&name, product, *gpus, &[("nvidia.com/gpu", *gpus)]));
        api.add_pod(cluster::exporter_pod(&name, &format!("10.{}.{}.5", i / 250, i % 250)));
        let page = Backend::page(page.replace("node=\"captured\"", &format!("node=\"{name}\"")));
        let backend = if delay.is_zero() { page } else { Backend::Delayed(delay, Arc::new(page)) };
        api.proxy(EXPORTER_NAMESPACE, &format!("gpu-exporter-{name}"), backend);
    }
    api
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn measure(kubeconfig: &std::path::Path, api: &ApiServer, args: &[&str]) -> (Vec<Duration>, usize, usize) {
    let mut times = Vec::new();
    let (mut bytes, mut proxied) = (0, 0);
    for _ in 0..RUNS {
        api.clear_requests();
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-gpu"))
            .env_clear()
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", "/nonexistent")
            .args(args)
            .output()
            .unwrap();
        times.push(started.elapsed());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows = if args.contains(&"json") {
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(doc["warnings"], serde_json::json!([]), "every exporter was read");
            doc["items"].as_array().unwrap().len()
        } else {
            assert!(out.stderr.is_empty(), "every exporter was read: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("gpu-node-")).count()
        };
        assert_eq!(rows, NODES);
        bytes = out.stdout.len();
        proxied = api.requests().iter().filter(|r| r.path.contains("/proxy/")).count();
    }
    times.sort();
    (times, bytes, proxied)
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let pages = capture();
    let sizes: Vec<usize> = pages.iter().map(|p| p.0.len()).collect();
    println!(
        "kubectl gpu nodes over {NODES} simulated GPU nodes ({RUNS} runs each; exporter pages of {sizes:?} bytes)"
    );
    println!("| proxy delay per read | args | min | p50 | max | proxy reads | output bytes |");
    println!("|---|---|---|---|---|---|---|");
    for delay in [Duration::ZERO, Duration::from_millis(20), Duration::from_millis(50)] {
        let api = cluster(&pages, delay);
        let addr = api.start();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = apiserver::kubeconfig(dir.path(), addr, &[("admin", ADMIN_TOKEN, "default")]);
        for args in [&["nodes"][..], &["nodes", "-o", "json"]] {
            let (t, bytes, proxied) = measure(&kubeconfig, &api, args);
            println!(
                "| {} ms | `{}` | {:.2} s | {:.2} s | {:.2} s | {proxied} | {bytes} |",
                delay.as_millis(),
                args.join(" "),
                t[0].as_secs_f64(),
                percentile(&t, 0.5).as_secs_f64(),
                t[t.len() - 1].as_secs_f64(),
            );
        }
    }
}
