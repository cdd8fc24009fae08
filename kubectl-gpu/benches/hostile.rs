//! `kubectl gpu nodes` over ten hostile exporters: the release binary against the
//! in-test API server, every exporter page streamed through the pods proxy as it is made
//! (never held by the harness). Prints the command's peak resident memory (the child's
//! `ru_maxrss` from `wait4`), its wall time and how many bytes the proxy handed out.
//!
//! Prints figures; asserts nothing. `cargo bench -p kubectl-gpu --bench hostile`
//! (`docs/benchmarks.md`, "kubectl gpu over hostile pages").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Instant;

use test_support::apiserver::{self, ADMIN_TOKEN, ApiServer, Backend};
use test_support::cluster::{self, EXPORTER_NAMESPACE};

const NODES: usize = 10;

/// Makes one node's exporter.
type MakeBackend<'a> = Box<dyn Fn() -> Backend + 'a>;

/// Runs `kubectl gpu nodes` and returns its peak RSS in KiB and its stderr.
fn run(kubeconfig: &std::path::Path) -> (i64, String, f64) {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-gpu"))
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", "/nonexistent")
        .args(["nodes", "--exporter-timeout", "5m", "--timeout", "10m"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals above.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    // Already reaped by wait4; this only tells `Child` so (it answers ECHILD).
    let _ = child.wait();
    let took = started.elapsed().as_secs_f64();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "kubectl gpu failed: {status}");
    (usage.ru_maxrss, std::fs::read_to_string(err_path).unwrap(), took)
}

fn main() {
    let filler = format!("filler{{a=\"{}\"}} 1\n", "x".repeat(1000));
    let good = "gpu_info{gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA A100-SXM4-80GB\"} 1\ngpu_utilization{gpu=\"0\"} 40\n";
    let scenarios: Vec<(&str, MakeBackend<'_>)> = vec![
        ("a normal page (2 samples)", Box::new(|| Backend::page(good))),
        ("1 GB (1 KiB lines)", Box::new(|| Backend::streamed("", &filler, Some(1 << 20), ""))),
        (
            "10 million series of a kept family",
            Box::new(|| Backend::streamed("", "gpu_up{gpu=\"0\"} 1\n", Some(10_000_000), "")),
        ),
        (
            "10 million series of another family",
            Box::new(|| Backend::streamed("", "x_total{gpu=\"0\"} 1\n", Some(10_000_000), "")),
        ),
        ("a page that never ends", Box::new(|| Backend::streamed("", &filler, None, ""))),
    ];
    println!("kubectl gpu nodes over {NODES} exporters each serving:");
    println!("| each page | peak RSS | wall | bytes the proxy sent (all nodes) | warnings |");
    println!("|---|---|---|---|---|");
    for (what, make) in scenarios {
        let api = ApiServer::new();
        let mut backends = Vec::new();
        for i in 0..NODES {
            let name = format!("gpu-node-{i}");
            api.add_node(cluster::gpu_node(&name, "NVIDIA-A100-SXM4-80GB", 1, &[("nvidia.com/gpu", 1)]));
            api.add_pod(cluster::exporter_pod(&name, &format!("10.0.0.{}", i + 5)));
            let backend = make();
            backends.push(backend.clone());
            api.proxy(EXPORTER_NAMESPACE, &format!("gpu-exporter-{name}"), backend);
        }
        let addr = api.start();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = apiserver::kubeconfig(dir.path(), addr, &[("admin", ADMIN_TOKEN, "default")]);
        let (rss_kib, stderr, took) = run(&kubeconfig);
        let sent: u64 = backends.iter().map(Backend::sent).sum();
        let first = stderr.lines().next().unwrap_or("none");
        let first =
            first.split_once(": exporter ").map_or(first, |(_, r)| r).trim_end_matches("; its readings are unknown");
        println!(
            "| {what} | {:.1} MiB | {took:.2} s | {:.1} MiB | {} ({first}) |",
            rss_kib as f64 / 1024.0,
            sent as f64 / (1 << 20) as f64,
            stderr.lines().count(),
        );
    }
}
