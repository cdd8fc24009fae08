//! `scripts/demo`: the whole story on a real control plane. Kubernetes (built from its
//! Go modules on the first run), two simulated 8-GPU nodes joined to it, `deploy/`
//! applied, an exporter on each node, the adapter behind the aggregator, a Prometheus
//! for the pods' request latency, and the seed's `inference-hpa` scaling
//! `inference-pool` up and down as the simulated load rises and falls, with `kubectl get
//! hpa` and `kubectl gpu nodes` shown as it goes. Ctrl-C stops and removes everything.
//!
//! The HPA's behaviour windows are shortened to 10 s (the seed's 60 s and 300 s would
//! make a demo of many minutes); `--seed-windows` keeps the seed's. Needs root for the
//! simulated pods' addresses (network namespaces, `ip` from iproute2).

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::app_metrics::AppMetrics;
use test_support::control_plane::{ControlPlane, Options};
use test_support::joined::{Adapter, AdapterOptions, JoinedFleet, NodeSpec, base_with_external_metrics};
use test_support::prometheus::{Flavour, Launch};
use test_support::simulated::{binaries, workspace};

const NODE: &str = "gpu-node";
const EIGHT_H100: &str = "gpus:\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  \
                          - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - \
                          {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n";

/// One step of the load: a demand (percent of one GPU, over all Ready replicas) held
/// until the Deployment settles at one of `settles` (the counts the HPA's formula keeps
/// for that demand), then for `hold`.
struct Phase {
    what: &'static str,
    demand: f64,
    settles: &'static [u32],
    hold: Duration,
}

fn main() -> ExitCode {
    let seed_windows = std::env::args().any(|a| a == "--seed-windows");
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: scripts/demo [--seed-windows]   (scripts/demo --standalone [SCENARIO] runs without Kubernetes)"
        );
        return ExitCode::SUCCESS;
    }
    // ip netns needs root.
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        eprintln!(
            "scripts/demo: the simulated pods' addresses are veth pairs in network namespaces, which needs root; \
             run it as root, or run scripts/demo --standalone for the exporter and adapter without Kubernetes"
        );
        return ExitCode::from(2);
    }
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop));
    run(&stop, seed_windows);
    println!("\nStopping: the exporters, the adapter, Prometheus, the simulated nodes and the control plane.");
    ExitCode::SUCCESS
}

/// Sets `stop` on SIGINT or SIGTERM, so that everything is dropped and removed.
fn watch_signals(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        runtime.block_on(async {
            let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        stop.store(true, Ordering::SeqCst);
    });
}

fn sleep_or_stop(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    !stop.load(Ordering::SeqCst)
}

fn run(stop: &AtomicBool, seed_windows: bool) {
    let dir = std::env::temp_dir().join("gpu-telemetry-demo");
    println!("Starting a Kubernetes control plane in {} ...", dir.display());
    let cp = ControlPlane::start_with(&Options { dir: Some(dir), show_progress: true, ..Options::default() });
    println!("Building the simulated node, the exporter and the adapter ...");
    let bin = binaries();
    cp.apply(&base_with_external_metrics());
    let nodes: Vec<NodeSpec> =
        (1..=2).map(|i| NodeSpec { name: format!("{NODE}-{i}"), scenario: EIGHT_H100.into(), replicas: 4 }).collect();
    let mut fleet = JoinedFleet::join(&cp, &nodes);
    // The seed's constant labels, as deploy/overlays/seed sets them (the base sets none).
    fleet.start_exporters(&cp, &["--label", "cluster=production,region=cn-east"]);
    let app = AppMetrics::start(&cp, "ai-inference", "app=inference", "request_latency_ms", 40.0);
    let prometheus = Launch::new(Flavour::V2).interval("5s").scrape_honoring_labels("inference", &[app.addr]).start();
    let rules_doc = docs("deploy/components/prometheus-operator/adapter-prometheus-rules.yaml").remove(0);
    let rules = cp.dir.join("adapter-rules.yaml");
    if let Err(e) = std::fs::write(&rules, rules_doc["data"]["rules.yaml"].as_str().unwrap_or_default()) {
        eprintln!("scripts/demo: {}: {e}", rules.display());
        return;
    }
    let _adapter = Adapter::start(
        &cp,
        &AdapterOptions {
            prometheus: Some((prometheus.url(), rules)),
            scrape_interval: Some("5s".into()),
            args: vec![],
        },
    );
    if stop.load(Ordering::SeqCst) {
        return;
    }

    cp.apply(&serde_yaml_ng::to_string(&docs("deploy/examples/namespaces.yaml")[0]).unwrap_or_default());
    fleet.set_load(&load(560.0));
    cp.apply(&serde_json::to_string(&docs("deploy/examples/inference/inference-pool.yaml")[0]).unwrap_or_default());
    let mut hpa = docs("deploy/examples/inference/inference-hpa.yaml").remove(0);
    if !seed_windows {
        let b = &mut hpa["spec"]["behavior"];
        b["scaleUp"]["stabilizationWindowSeconds"] = json!(10);
        b["scaleUp"]["policies"][0]["periodSeconds"] = json!(10);
        b["scaleDown"]["stabilizationWindowSeconds"] = json!(10);
        b["scaleDown"]["policies"][0]["periodSeconds"] = json!(10);
    }
    cp.apply(&serde_json::to_string(&hpa).unwrap_or_default());

    println!(
        "\n  KUBECONFIG={}\n  Try: kubectl get hpa,pods -n ai-inference -o wide\n       {} nodes\n       \
         kubectl get --raw '/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization'\n  \
         The HPA syncs every 15 s; behaviour windows {}.\n",
        cp.kubeconfig.display(),
        bin.join("kubectl-gpu").display(),
        if seed_windows { "as the seed wrote them (60 s up, 300 s down)" } else { "shortened to 10 s" }
    );

    let phases = [
        Phase {
            what: "steady: 8 replicas at 70 % (a demand of 560; 560 / n is within 10 % of 70 only for n = 8)",
            demand: 560.0,
            settles: &[8],
            hold: Duration::from_secs(40),
        },
        Phase {
            what: "load rises to 91 % per replica (demand 728): ceil(8 x 91 / 70) = 11; 728 / n is within 10 % of \
                   70 for n = 10 and 11",
            demand: 728.0,
            settles: &[10, 11],
            hold: Duration::from_secs(40),
        },
        Phase {
            what: "load falls (demand 150): ceil(150 / 70) = 3 from any count",
            demand: 150.0,
            settles: &[3],
            hold: Duration::from_secs(40),
        },
    ];
    loop {
        for phase in &phases {
            println!("==> {}", phase.what);
            fleet.set_load(&load(phase.demand));
            let mut reached: Option<Instant> = None;
            loop {
                show(&cp, &bin);
                let now = replicas(&cp);
                if reached.is_none() && now.is_some_and(|n| phase.settles.contains(&n)) {
                    reached = Some(Instant::now());
                }
                if reached.is_some_and(|t| t.elapsed() >= phase.hold) {
                    break;
                }
                if !sleep_or_stop(stop, Duration::from_secs(10)) {
                    return;
                }
            }
        }
    }
}

fn load(demand: f64) -> String {
    format!(
        "workloads: [{{namespace: ai-inference, selector: {{app: inference}}, demand: {demand}, memory_used_mib: 15500}}]\n"
    )
}

fn docs(path: &str) -> Vec<Value> {
    test_support::deploy::parse_docs(&std::fs::read_to_string(workspace().join(path)).unwrap_or_default())
}

fn replicas(cp: &ControlPlane) -> Option<u32> {
    let out = cp
        .kubectl()
        .args(["get", "deployment", "inference-pool", "-n", "ai-inference", "-o", "jsonpath={.spec.replicas}"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn show(cp: &ControlPlane, bin: &std::path::Path) {
    let hpa = cp.kubectl().args(["get", "hpa", "-n", "ai-inference"]).output();
    let nodes = Command::new(bin.join("kubectl-gpu")).arg("--kubeconfig").arg(&cp.kubeconfig).arg("nodes").output();
    println!("$ kubectl get hpa -n ai-inference");
    if let Ok(o) = hpa {
        print!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    println!("$ kubectl gpu nodes");
    if let Ok(o) = nodes {
        print!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    println!();
}
