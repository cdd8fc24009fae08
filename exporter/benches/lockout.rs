//! Connection limits under attack (issue 24): 5,000 idle connections and 500 slowloris
//! connections opened at once against the exporter (plain HTTP and TLS) and the metrics
//! adapter, each with its default limits (1024 connections, 256 per address, 5 s
//! deadlines), while a legitimate client asks what Prometheus, the kubelet and the HPA
//! ask. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p gpu-exporter --bench lockout`. The servers are the debug builds
//! that the end-to-end tests use (`test_support::simulated::binaries`), so the latencies
//! are an upper bound for the release images; `SIMULATED_RELEASE=1` runs the release
//! builds instead. The attackers come from one loopback
//! address, 127.0.0.2, as from one host in the issue (`BENCH_SPREAD=20`: from 127.0.0.2
//! to 127.0.0.21, which together can take every place), the legitimate client from
//! 127.0.0.1; every shed attacker reconnects at once.
//!
//! Per target: the server's open descriptors (`/proc/<pid>/fd`) before, during (the
//! highest of the samples taken while the attack runs) and after the attack (with the
//! time they took to get back to the baseline), what the attack did, and the latency of
//! `ROUNDS` legitimate requests of each kind, each on a fresh connection with a 5 s
//! limit (`attack::timed_get`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use test_support::attack::{self, Attack};
use test_support::pki::{Ca, Pair};
use test_support::simulated::{Killed, binaries};
use test_support::tls::ClientTls;

const IDLE: usize = 5000;
const SLOW: usize = 500;
/// Attacker addresses by default (`BENCH_SPREAD` overrides): one host, as in the issue.
const SPREAD: usize = 1;
const ROUNDS: usize = 20;
const HPA: &str = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/inference/pods/%2A/gpu_utilization";

/// Starts `command` and waits for the line of its log that carries its address.
fn spawn(mut command: Command, find: fn(&str) -> Option<String>) -> (Killed, SocketAddr) {
    let mut child: Child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = find(&line) {
                let _ = tx.send(addr);
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).expect("the server starts").parse().unwrap();
    (Killed::new(child), addr)
}

fn exporter(bin: &Path, dir: &Path, web_config: Option<&Path>) -> (Killed, SocketAddr) {
    let scenario = dir.join("node.yaml");
    let mut yaml = String::from("gpus:\n");
    for _ in 0..8 {
        yaml.push_str("  - {model: H100-SXM5-80GB, values: {utilization: 42}}\n");
    }
    std::fs::write(&scenario, yaml).unwrap();
    let mut command = Command::new(bin.join("gpu-exporter"));
    command
        .arg("--nvml-library")
        .arg(bin.join("libfake_nvml.so"))
        .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--node-name", "bench-node"])
        .env("FAKE_NVML_SCENARIO", &scenario)
        .env("FAKE_NVML_FROZEN_AT", "10")
        .env("GPU_EXPORTER_KUBERNETES_API", "off")
        .env("KUBECONFIG", "/nonexistent")
        .env_remove("NODE_NAME");
    if let Some(config) = web_config {
        command.arg("--web.config.file").arg(config);
    }
    spawn(command, |line| line.split("\"address\":\"").nth(1).map(|rest| rest.split('"').next().unwrap_or("").into()))
}

fn adapter(bin: &Path, dir: &Path, exporter: SocketAddr) -> (Killed, SocketAddr) {
    let certs = dir.join("adapter-certs");
    let out = Command::new(bin.join("gpu-metrics-adapter"))
        .args(["dev-certs", "--out"])
        .arg(&certs)
        .args(["--server", "https://127.0.0.1:6443"])
        .output()
        .unwrap();
    assert!(out.status.success(), "dev-certs: {}", String::from_utf8_lossy(&out.stderr));
    let mut command = Command::new(bin.join("gpu-metrics-adapter"));
    command
        .args(["--standalone", "--bind-address=127.0.0.1", "--secure-port=0", "--scrape-interval=1s"])
        .arg(format!("--tls-cert-file={}", certs.join("serving.pem").display()))
        .arg(format!("--tls-private-key-file={}", certs.join("serving-key.pem").display()))
        .arg(format!("--client-ca-file={}", certs.join("ca.pem").display()))
        .arg(format!("--exporter-url=http://{exporter}/metrics"))
        .env("KUBECONFIG", "/nonexistent");
    spawn(command, |line| {
        line.contains("serving custom.metrics.k8s.io")
            .then(|| line.split("addr=").nth(1).map(|a| a.split_whitespace().next().unwrap_or("").to_owned()))
            .flatten()
    })
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

fn http1(mut tls: ClientTls) -> Arc<rustls::ClientConfig> {
    tls.alpn = vec![b"http/1.1".to_vec()];
    tls.config()
}

/// A legitimate request: its path and the TLS it speaks.
struct Ask {
    label: &'static str,
    path: &'static str,
    tls: Option<Arc<rustls::ClientConfig>>,
}

async fn wait_answered(addr: SocketAddr, ask: &Ask) {
    for _ in 0..600 {
        if let (Ok(200), _) = attack::timed_get(addr, ask.tls.clone(), ask.path, &[], Duration::from_secs(2)).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never answered {}", addr, ask.path);
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn spread() -> usize {
    std::env::var("BENCH_SPREAD").ok().and_then(|s| s.parse().ok()).unwrap_or(SPREAD)
}

async fn measure(
    target: &str,
    pid: u32,
    addr: SocketAddr,
    attack_tls: Option<Arc<rustls::ClientConfig>>,
    asks: &[Ask],
) {
    let spread = spread();
    for ask in asks {
        wait_answered(addr, ask).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = fds(pid);
    let for_a_while = Duration::from_secs(120);
    let started = Instant::now();
    let mut attacks: Vec<Attack> = match attack_tls {
        None => vec![attack::idle(addr, IDLE, spread, b"", for_a_while)],
        // Half silent before the handshake, half stalled a few bytes into it.
        Some(_) => vec![
            attack::idle(addr, IDLE / 2, spread, b"", for_a_while),
            attack::idle(addr, IDLE / 2, spread, &[0x16, 0x03, 0x01], for_a_while),
        ],
    };
    attacks.push(attack::slowloris(addr, SLOW, spread, attack_tls, Duration::from_secs(1), for_a_while));
    let connects = |attacks: &[Attack]| attacks.iter().map(|a| a.tally.connects.load(Ordering::Relaxed)).sum::<usize>();
    let mut peak = baseline;
    while connects(&attacks) < IDLE + SLOW && started.elapsed() < Duration::from_secs(30) {
        peak = peak.max(fds(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let opened_in = started.elapsed();
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); asks.len()];
    let mut failures = vec![0usize; asks.len()];
    for _ in 0..ROUNDS {
        for (i, ask) in asks.iter().enumerate() {
            let (status, took) = attack::timed_get(addr, ask.tls.clone(), ask.path, &[], Duration::from_secs(5)).await;
            match status {
                Ok(200) => latencies[i].push(took),
                _ => failures[i] += 1,
            }
            peak = peak.max(fds(pid));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tally = |f: fn(&attack::Tally) -> usize| attacks.iter().map(|a| f(&a.tally)).sum::<usize>();
    let (opened, closed, failed) = (
        tally(|t| t.connects.load(Ordering::Relaxed)),
        tally(|t| t.closed_by_server.load(Ordering::Relaxed)),
        tally(|t| t.failed.load(Ordering::Relaxed)),
    );
    let attacked_for = started.elapsed();
    for attack in attacks {
        attack.stop().await;
    }
    let stopped = Instant::now();
    let mut after = fds(pid);
    while after > baseline && stopped.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = fds(pid);
    }
    println!("\n## {target}");
    println!(
        "attack: {IDLE} idle + {SLOW} slowloris sockets from {spread} address(es), all connected once after {}; \
         {opened} connects, {closed} closed by the server, {failed} failed connects in {:.1} s",
        ms(opened_in),
        attacked_for.as_secs_f64()
    );
    println!(
        "server descriptors: {baseline} before, at most {peak} during, {after} after ({} after the attack stopped)",
        ms(stopped.elapsed())
    );
    println!("| request | answered | p50 | max |");
    println!("|---|---|---|---|");
    for (i, ask) in asks.iter().enumerate() {
        let mut sorted = latencies[i].clone();
        sorted.sort();
        let p50 = sorted.get(sorted.len() / 2).copied().map_or("-".into(), ms);
        let max = sorted.last().copied().map_or("-".into(), ms);
        println!("| {} | {}/{ROUNDS} | {p50} | {max} |", ask.label, ROUNDS - failures[i]);
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (soft, hard) = attack::raise_open_files_limit();
    println!("open files limit: {soft} (hard {hard}); the servers inherit it");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bin = binaries();
    let dir = tempfile::tempdir().unwrap();

    let (plain, plain_addr) = exporter(&bin, dir.path(), None);
    let asks = [
        Ask { label: "exporter `/metrics`", path: "/metrics", tls: None },
        Ask { label: "exporter `/healthz`", path: "/healthz", tls: None },
    ];
    measure("gpu-exporter, plain HTTP", plain.0.id(), plain_addr, None, &asks).await;

    let ca = Ca::new("bench ca");
    let server: Pair = ca.server();
    std::fs::write(dir.path().join("server.crt"), &server.cert_pem).unwrap();
    std::fs::write(dir.path().join("server.key"), &server.key_pem).unwrap();
    let config = dir.path().join("web.yml");
    std::fs::write(&config, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n").unwrap();
    let tls_dir = tempfile::tempdir().unwrap();
    let (tls, tls_addr) = exporter(&bin, tls_dir.path(), Some(&config));
    let client = http1(ClientTls::trusting(&ca));
    let asks = [
        Ask { label: "exporter `/metrics` (TLS)", path: "/metrics", tls: Some(client.clone()) },
        Ask { label: "exporter `/healthz` (TLS)", path: "/healthz", tls: Some(client.clone()) },
    ];
    measure("gpu-exporter, TLS", tls.0.id(), tls_addr, Some(client), &asks).await;
    drop(tls);

    let (adapter, adapter_addr) = adapter(&bin, dir.path(), plain_addr);
    let certs = dir.path().join("adapter-certs");
    let read = |f: &str| std::fs::read_to_string(certs.join(f)).unwrap();
    let kubelet = http1(ClientTls::trusting_pem(&read("ca.pem")));
    let hpa = http1(
        ClientTls::trusting_pem(&read("ca.pem"))
            .with_identity(&Pair { cert_pem: read("client.pem"), key_pem: read("client-key.pem") }),
    );
    let asks = [
        Ask { label: "adapter HPA request (`pods/*/gpu_utilization`)", path: HPA, tls: Some(hpa) },
        Ask { label: "adapter `/healthz`", path: "/healthz", tls: Some(kubelet.clone()) },
    ];
    measure("gpu-metrics-adapter (TLS)", adapter.0.id(), adapter_addr, Some(kubelet), &asks).await;
    drop(adapter);
    drop(plain);
}
