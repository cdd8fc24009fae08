//! Benchmark that prints figures (not a timed test): our adapter and the real
//! prometheus-adapter (v0.12.0, `scripts/go-tools build prometheus-adapter`) side by
//! side, on a real control plane (`scripts/cluster`), one Prometheus 3 and one rule in
//! prometheus-adapter's format, both started with the same command line (the flags of
//! prometheus-adapter's Deployment, [`test_support::peer_adapter::DropIn`]) and the same
//! identity, our adapter with `--direct-source=false` as a drop-in runs.
//!
//! * The question is the HPA controller's over a label-selected pod list:
//!   `pods/*/app_gpu_utilization?labelSelector=app=inference`, every pod of the namespace
//!   selected, at 100, 1,000 and 10,000 pods (real Pod objects in the API server, which
//!   both adapters must list or watch to answer); asked of each adapter directly over
//!   TLS with the cluster admin's client certificate, sequentially, one kept-alive
//!   connection per adapter, alternating between the two, after warm-up requests; one
//!   round (a request to each) every `BENCH_PACE_MS` (default 250 ms). The pace matters
//!   to prometheus-adapter: it lists the pods from the API server on every read, through
//!   client-go's client-side throttle (custom-metrics-apiserver v1.30.0
//!   `pkg/cmd/builder.go`: `--client-qps` defaults to client-go's 5 a second, burst 10),
//!   so back to back (`BENCH_PACE_MS=0`) its answers are spaced 200 ms apart whatever
//!   they cost.
//! * Each adapter's resident memory (peak and at the end) and CPU time (user + system)
//!   over the whole run, from /proc.
//!
//! Run: `cargo bench -p gpu-metrics-adapter --bench beside_prometheus_adapter`
//! (`BENCH_PODS=100,1000` for fewer sizes, `BENCH_PACE_MS=0` back to back). It takes several minutes: the control plane
//! starts, and 10,000 pods are created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::timing::percentile;
use support::{TlsClient, get, https_client};
use test_support::app_metrics::serve_page;
use test_support::control_plane::{ControlPlane, unscheduled_pod};
use test_support::joined::{NAMESPACE, base, spawn_logged};
use test_support::peer_adapter::{self, DropIn, Serving};
use test_support::pki::Pair;
use test_support::prometheus::{Flavour, Launch};
use test_support::simulated::{Killed, binaries};
use test_support::tls::ClientTls;

const QUESTION: &str =
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/%2A/app_gpu_utilization?labelSelector=app%3Dinference";

const RULE: &str = r#"
rules:
  - seriesQuery: 'app_gpu_utilization{namespace!="",pod!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"#;

/// The pods' page: one series per pod created so far.
fn page(pods: usize) -> String {
    let mut out = String::from("# TYPE app_gpu_utilization gauge\n");
    for i in 0..pods {
        let _ = writeln!(out, "app_gpu_utilization{{namespace=\"bench\",pod=\"bench-pool-{i}\"}} {}", (i * 37) % 100);
    }
    out
}

/// Creates pods `from..to` in namespace bench (label app=inference, left unscheduled),
/// four kubectl processes at a time.
fn create_pods(cp: &ControlPlane, from: usize, to: usize) {
    let chunks: Vec<(usize, usize)> = (from..to).step_by(250).map(|a| (a, (a + 250).min(to))).collect();
    for four in chunks.chunks(4) {
        let children: Vec<_> = four
            .iter()
            .map(|&(a, b)| {
                let yaml: String =
                    (a..b).map(|i| unscheduled_pod("bench", &format!("bench-pool-{i}"), "{app: inference}")).collect();
                let mut child = cp
                    .kubectl()
                    .args(["create", "-f", "-", "-o", "name"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                std::io::Write::write_all(&mut child.stdin.take().unwrap(), yaml.as_bytes()).unwrap();
                child
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success(), "kubectl create of bench pods failed");
        }
    }
}

/// Resident memory now and at its peak (KiB), and CPU seconds used, of process `pid`.
fn usage(pid: u32) -> (u64, u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the command name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (kib("VmRSS:"), kib("VmHWM:"), ticks as f64 / hz)
}

struct Contender {
    name: &'static str,
    addr: SocketAddr,
    process: Killed,
    times: Vec<Duration>,
}

async fn answered_items(client: &TlsClient, addr: SocketAddr) -> Result<usize, String> {
    let answer = get(client, addr, QUESTION, &[]).await;
    if answer.status != 200 {
        return Err(format!("{}: {}", answer.status, answer.body));
    }
    Ok(answer.json()["items"].as_array().map_or(0, Vec::len))
}

fn main() {
    // Our adapter as users run it: the release build (test_support::simulated::binaries).
    // SAFETY: no other thread runs yet to read the environment.
    unsafe { std::env::set_var("SIMULATED_RELEASE", "1") };
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(bench());
}

async fn bench() {
    let sizes: Vec<usize> = std::env::var("BENCH_PODS")
        .unwrap_or_else(|_| "100,1000,10000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("BENCH_PODS: pod counts separated by commas"))
        .collect();
    let pods = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let page_addr = listener.local_addr().unwrap();
    let shown = Arc::clone(&pods);
    serve_page(listener, move || Some(page(shown.load(Ordering::SeqCst))));
    let prometheus = Launch::new(Flavour::V3).interval("2s").scrape_honoring_labels("apps", &[page_addr]).start();

    let cp = ControlPlane::start();
    cp.apply(&base());
    cp.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: bench}\n");
    let dir = cp.dir.join("beside");
    std::fs::create_dir_all(&dir).unwrap();
    let serving = Serving::new(&dir);
    let config = dir.join("config.yaml");
    std::fs::write(&config, RULE).unwrap();
    let kubeconfig = cp.service_account(NAMESPACE, "gpu-metrics-adapter", None);
    let url = prometheus.url();
    let drop_in = |port| DropIn {
        kubeconfig: &kubeconfig,
        serving: &serving,
        port,
        prometheus_url: &url,
        config: &config,
        relist: "5s",
    };

    let peer_port = test_support::free_port();
    let peer = peer_adapter::spawn(&drop_in(peer_port), &dir.join("prometheus-adapter.log"));
    let ours_port = test_support::free_port();
    let mut command = drop_in(ours_port).command(&binaries().join("gpu-metrics-adapter"));
    command.arg("--direct-source=false");
    let (ours, serving_line) = spawn_logged(command, &dir.join("gpu-metrics-adapter.log"), |l| {
        l.contains("serving custom.metrics.k8s.io").then(|| l.to_owned())
    });
    assert!(
        serving_line.is_some(),
        "gpu-metrics-adapter did not start: {}",
        dir.join("gpu-metrics-adapter.log").display()
    );
    let mut contenders = [
        Contender {
            name: "gpu-metrics-adapter",
            addr: SocketAddr::from(([127, 0, 0, 1], ours_port)),
            process: ours,
            times: vec![],
        },
        Contender {
            name: "prometheus-adapter",
            addr: SocketAddr::from(([127, 0, 0, 1], peer_port)),
            process: peer,
            times: vec![],
        },
    ];

    // The cluster admin (system:masters), whose certificate both trust through the
    // cluster's client CA; each adapter's serving certificate from the test's CA.
    let pki = cp.dir.join("pki");
    let admin = Pair {
        cert_pem: std::fs::read_to_string(pki.join("admin.crt")).unwrap(),
        key_pem: std::fs::read_to_string(pki.join("admin.key")).unwrap(),
    };
    let mut tls = ClientTls::trusting_pem(&serving.ca_pem).with_identity(&admin);
    tls.alpn.clear();
    let clients: Vec<TlsClient> = contenders.iter().map(|_| https_client(Arc::unwrap_or_clone(tls.config()))).collect();

    let pace = Duration::from_millis(
        std::env::var("BENCH_PACE_MS").map_or(250, |p| p.parse().expect("BENCH_PACE_MS: milliseconds")),
    );
    println!("one round every {} ms", pace.as_millis());
    println!("| pods | adapter | requests | p50 | p99 |");
    println!("|---|---|---|---|---|");
    let mut created = 0;
    for &n in &sizes {
        create_pods(&cp, created, n);
        created = n;
        pods.store(n, Ordering::SeqCst);
        for (c, client) in contenders.iter().zip(&clients) {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                match answered_items(client, c.addr).await {
                    Ok(items) if items == n => break,
                    other => assert!(Instant::now() < deadline, "{} never answered {n} pods: {other:?}", c.name),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let rounds = match n {
            ..=100 => 300,
            101..=1000 => 100,
            _ => 30,
        };
        for c in &mut contenders {
            c.times.clear();
        }
        for round in 0..rounds + 5 {
            let next = Instant::now() + pace;
            for (c, client) in contenders.iter_mut().zip(&clients) {
                let start = Instant::now();
                let answer = get(client, c.addr, QUESTION, &[]).await;
                let took = start.elapsed();
                assert_eq!(answer.status, 200, "{}: {}", c.name, answer.body);
                if round >= 5 {
                    c.times.push(took);
                }
            }
            tokio::time::sleep_until(next.into()).await;
        }
        for c in &mut contenders {
            c.times.sort();
            println!(
                "| {n} | {} | {rounds} | {:.1} ms | {:.1} ms |",
                c.name,
                percentile(&c.times, 0.5).as_secs_f64() * 1e3,
                percentile(&c.times, 0.99).as_secs_f64() * 1e3
            );
        }
    }
    println!();
    println!("| adapter | resident now | resident peak | CPU (user + system) over the run |");
    println!("|---|---|---|---|");
    for c in &contenders {
        let (rss, peak, cpu) = usage(c.process.0.id());
        println!("| {} | {:.1} MiB | {:.1} MiB | {cpu:.1} s |", c.name, rss as f64 / 1024.0, peak as f64 / 1024.0);
    }
}
