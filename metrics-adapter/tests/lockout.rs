//! The adapter binary under the lockout attack of issue 24, on loopback: hundreds of
//! idle sockets (half of them stalled a few bytes into a TLS handshake) and slowloris
//! clients that never finish a request head, reopened as they are closed. The HPA's
//! request (through the aggregator, with its client certificate) and the kubelet's
//! `/healthz` must still be answered.
//!
//! What this reproduces: before the fix the edge accepted at most 512 connections, let a
//! TLS client hold its place for 10 s before its handshake ended, and stopped accepting
//! when full: about 600 idle sockets took the HPA's metrics away. Here the limits are
//! small, through the flags (`--max-connections 64`, `--max-connections-per-ip 16`), and
//! the handshake deadline is the old 10 s: the attack holds ten times more sockets than
//! there are places, and a server that paused at its limit instead of closing the
//! connection idle the longest leaves the first request unanswered. The attackers come
//! from three addresses (127.0.0.2 to 127.0.0.4), 48 places at most, so the aggregator on
//! 127.0.0.1 always finds one. Time limits are hang guards (5 s per request), not speed
//! checks; the latencies are in docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use support::{Behavior, Exporter, Pki, fixture};
use test_support::attack;
use test_support::simulated::Killed;
use test_support::tls::ClientTls;

const IDLE: usize = 600;
const SLOW: usize = 100;
const SPREAD: usize = 3;
const HPA: &str = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization";

/// The adapter binary, standalone over `exporter`, with the small limits; its address.
fn start(pki: &Pki, exporter: &Exporter) -> (Killed, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"))
        .args(["--standalone", "--bind-address=127.0.0.1", "--secure-port=0", "--scrape-interval=1s"])
        .args(pki.serving_args())
        .arg(format!("--client-ca-file={}", pki.path("client-ca.pem").display()))
        .arg(format!("--exporter-url={}", exporter.url()))
        .args(["--max-connections=64", "--max-connections-per-ip=16", "--tls-handshake-timeout=10s"])
        .env_clear()
        .env("KUBECONFIG", "/nonexistent")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = test_support::simulated::adapter_address(&mut child);
    (Killed::new(child), addr)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap()
}

/// HTTP/1.1 only (`attack::timed_get` speaks HTTP/1.1), trusting the serving CA.
fn client(pki: &Pki, identity: Option<&gpu_metrics_adapter::certs::Pair>) -> Arc<rustls::ClientConfig> {
    let mut tls = ClientTls::trusting_pem(pki.serving_ca.cert_pem());
    tls.alpn = vec![b"http/1.1".to_vec()];
    if let Some(pair) = identity {
        tls = tls
            .with_identity(&test_support::pki::Pair { cert_pem: pair.cert_pem.clone(), key_pem: pair.key_pem.clone() });
    }
    tls.config()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stalled_and_slowloris_sockets_do_not_lock_the_hpa_and_probes_out() {
    attack::raise_open_files_limit();
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-a100-mig-mixed.prom"))).await;
    let (adapter, addr) = start(&pki, &exporter);
    let pid = adapter.0.id();
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let hpa = client(&pki, Some(&admin));
    let kubelet = client(&pki, None);

    // Ready once the first scrape is in: the HPA's answer names the exporter's pod.
    let mut ready = false;
    for _ in 0..200 {
        if let (Ok(200), _) = attack::timed_get(addr, Some(hpa.clone()), HPA, &[], Duration::from_secs(2)).await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the adapter never answered the HPA's request");
    let baseline = fds(pid);

    let for_a_while = Duration::from_secs(60);
    let attacks = [
        (attack::idle(addr, IDLE / 2, SPREAD, b"", for_a_while), IDLE / 2),
        (attack::idle(addr, IDLE / 2, SPREAD, &[0x16, 0x03, 0x01], for_a_while), IDLE / 2),
        (attack::slowloris(addr, SLOW, SPREAD, Some(kubelet.clone()), Duration::from_secs(1), for_a_while), SLOW),
    ];
    for (attack, count) in &attacks {
        attack.opened(*count).await;
    }

    for round in 0..3 {
        for (path, tls) in [(HPA, &hpa), ("/healthz", &kubelet)] {
            let (status, took) = attack::timed_get(addr, Some(tls.clone()), path, &[], Duration::from_secs(5)).await;
            let status = status.unwrap_or_else(|e| {
                panic!("{path} (round {round}) was not answered during the attack ({took:?}): {e}")
            });
            assert_eq!(status, 200, "{path} (round {round})");
        }
    }
    let closed: usize = attacks.iter().map(|(a, _)| a.tally.closed_by_server.load(Ordering::Relaxed)).sum();
    assert!(closed > 0, "the server closed no attacker: the attack never reached its limits");
    // The fewest of a few samples: shed sockets are closed as their tasks next run, so
    // the descriptors exceed the places by a load-dependent amount; without the shedding
    // the server would hold every one of the attack's sockets.
    let mut during = usize::MAX;
    for _ in 0..5 {
        during = during.min(fds(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        during < baseline + IDLE + SLOW,
        "{during} descriptors open during the attack, {baseline} before: none shed"
    );

    for (attack, _) in attacks {
        attack.stop().await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = fds(pid);
    while after > baseline + 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = fds(pid);
    }
    assert!(after <= baseline + 2, "{after} descriptors open after the attack, {baseline} before");
    let (status, _) = attack::timed_get(addr, Some(hpa), HPA, &[], Duration::from_secs(5)).await;
    assert_eq!(status.unwrap(), 200, "served after the attack");
}
