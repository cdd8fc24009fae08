//! The cluster kubectl gpu's end-to-end tests run against: the in-test API server
//! (`test_support::apiserver`) with four GPU nodes and a CPU node, and behind it real
//! exporter processes on simulated nodes and the real metrics adapter:
//!
//! | node | scenario | exporter | health |
//! |---|---|---|---|
//! | `gpu-node-1` | the seed's mixed node (`fake-nvml/scenarios/seed-mixed-node.yaml`): 4× A100, 2×3g.40gb + 7×1g.10gb + 2 time-sliced GPUs, 12 pods | real, frozen at 120 s | healthy |
//! | `h100-node-1` | `tests/scenarios/h100-node.yaml`: 8× H100, 6 pods, an idle notebook | real, frozen at 120 s | healthy |
//! | `gpu-node-2` | `tests/scenarios/v100-quarantined.yaml`: 2× V100 (unpriced), XID 79 on GPU 1 | real, clock driven to 6 s | quarantined for Xid79, cordoned by the loop |
//! | `l40s-node-1` | — (4× L40S by its labels) | down: the proxy answers 503 | unhealthy (Temperature), breaker open, cordoned by `kubectl-cordon` |
//! | `cpu-node-1` | no GPUs | none | not shown |
//!
//! Users (tokens): `admin` and `viewer`, both allowed everything by the in-test server,
//! which evaluates no RBAC: that the viewer roles of `deploy/base/kubectl-gpu` suffice,
//! and what a user without them is told, is checked on a real API server
//! (`real-cluster/tests/kubectl_gpu.rs`). The kubeconfig's contexts are named after
//! them, the viewer's current, with namespace `ai-inference`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod pty;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use test_support::apiserver::{self, ApiServer, Backend};
use test_support::cluster::{self, EXPORTER_NAMESPACE};
use test_support::simulated::{Clock, MetricsAdapter, SimulatedNode, wait_until, workspace};

pub struct Cluster {
    pub api: ApiServer,
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    pub nodes: Vec<SimulatedNode>,
    pub adapter: MetricsAdapter,
    _dir: tempfile::TempDir,
}

fn scenario(name: &str) -> PathBuf {
    let shipped = workspace().join("fake-nvml/scenarios").join(format!("{name}.yaml"));
    if shipped.exists() {
        shipped
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios").join(format!("{name}.yaml"))
    }
}

fn nodes_and_pods(api: &ApiServer) {
    let mut seed = cluster::gpu_node(
        "gpu-node-1",
        "NVIDIA-A100-SXM4-80GB",
        4,
        &[("nvidia.com/gpu", 8), ("nvidia.com/mig-3g.40gb", 2), ("nvidia.com/mig-1g.10gb", 7)],
    );
    cluster::set_gpu_healthy(&mut seed, "True", "GPUsHealthy", "every GPU answers and no signal is seen");
    let mut h100 = cluster::gpu_node("h100-node-1", "NVIDIA-H100-80GB-HBM3", 8, &[("nvidia.com/gpu", 8)]);
    cluster::set_gpu_healthy(&mut h100, "True", "GPUsHealthy", "every GPU answers and no signal is seen");
    let mut quarantined = cluster::gpu_node("gpu-node-2", "Tesla-V100-SXM2-32GB", 2, &[("nvidia.com/gpu", 2)]);
    cluster::quarantine(&mut quarantined, "Xid79", "GPU 1: XID 79 (GPU has fallen off the bus)");
    let mut down = cluster::gpu_node("l40s-node-1", "NVIDIA-L40S", 4, &[("nvidia.com/gpu", 4)]);
    cluster::set_gpu_healthy(&mut down, "False", "Temperature", "GPU 2: 91 °C, at or above 90 °C");
    cluster::cordon(&mut down, "kubectl-cordon");
    let claim = r#"{"state":"unhealthy","since":"2026-01-01T00:00:00Z","reasons":[{"code":"Temperature","detail":"GPU 2: 91 °C"}],"blocked":true}"#;
    cluster::annotate(&mut down, "gpu-telemetry.io/gpu-health", claim);
    let nodes: [Node; 5] = [seed, h100, quarantined, down, cluster::cpu_node("cpu-node-1")];
    for node in nodes {
        api.add_node(node);
    }
    for (node, ip) in [
        ("gpu-node-1", "10.0.1.5"),
        ("h100-node-1", "10.0.2.5"),
        ("gpu-node-2", "10.0.3.5"),
        ("l40s-node-1", "10.0.4.5"),
    ] {
        api.add_pod(cluster::exporter_pod(node, ip));
    }
    for (name, node) in
        [("seed-mixed-node", "gpu-node-1"), ("h100-node", "h100-node-1"), ("v100-quarantined", "gpu-node-2")]
    {
        for pod in cluster::scenario_file_pods(&scenario(name), node) {
            api.add_pod(pod);
        }
    }
    api.add_pod(cluster::gpu_pod("media", "render-0", Some("l40s-node-1"), "Running", &[("nvidia.com/gpu", 1)]));
    api.add_pod(cluster::gpu_pod("research", "sweep-7", None, "Pending", &[("nvidia.com/gpu", 2)]));
}

fn users(api: &ApiServer) {
    api.user("viewer-token", "alice");
}

/// The cluster, started once per test binary.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let labels = "cluster=test";
        let seed = SimulatedNode::start("gpu-node-1", &scenario("seed-mixed-node"), Clock::Frozen(120.0), labels);
        let h100 = SimulatedNode::start("h100-node-1", &scenario("h100-node"), Clock::Frozen(120.0), labels);
        let v100 = SimulatedNode::start("gpu-node-2", &scenario("v100-quarantined"), Clock::Driven(0.0), labels);
        v100.set_clock(6.0);
        v100.wait_for("XID 79 counted", |m| {
            m.lines().any(|l| l.starts_with("gpu_xid_errors_total{") && l.contains("xid=\"79\""))
        });
        let api = ApiServer::new();
        nodes_and_pods(&api);
        users(&api);
        for node in [&seed, &h100, &v100] {
            api.proxy(EXPORTER_NAMESPACE, &format!("gpu-exporter-{}", node.name), node.backend());
        }
        api.proxy(EXPORTER_NAMESPACE, "gpu-exporter-l40s-node-1", Backend::Refused);
        let adapter = MetricsAdapter::start(&[seed.exporter, h100.exporter, v100.exporter]);
        api.aggregate("custom.metrics.k8s.io", adapter.backend());
        let addr = api.start();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = apiserver::kubeconfig(
            dir.path(),
            addr,
            &[("viewer", "viewer-token", "ai-inference"), ("admin", apiserver::ADMIN_TOKEN, "default")],
        );
        let cluster = Cluster { api, addr, kubeconfig, nodes: vec![seed, h100, v100], adapter, _dir: dir };
        // The adapter has scraped every exporter once it has figures for a pod of each.
        wait_until("the adapter's per-pod figures", Duration::from_secs(60), || {
            let out = cluster.run(&["pods", "-n", "ai-inference", "-o", "json"]);
            let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
            let has = |pod: &str, field: &str| {
                doc["items"].as_array().into_iter().flatten().any(|i| i["pod"] == pod && !i[field].is_null())
            };
            has("chat-3", "utilizationPercent") && has("llm-inference-70b", "memoryUsedBytes")
        });
        cluster
    })
}

/// What a run printed.
#[derive(Debug, Clone)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Output {
    /// The golden form: the command line, stdout, stderr and the exit code.
    pub fn transcript(&self, args: &[&str]) -> String {
        let quoted: Vec<String> =
            args.iter().map(|a| if a.contains(' ') { format!("'{a}'") } else { (*a).to_string() }).collect();
        let mut t = format!("$ kubectl gpu {}\n{}", quoted.join(" "), self.stdout);
        if !self.stderr.is_empty() {
            t.push_str("[stderr]\n");
            t.push_str(&self.stderr);
        }
        t.push_str(&format!("[exit {}]\n", self.code));
        t
    }
}

/// The plugin binary with a clean environment (no colour, no stray kubeconfig).
pub fn command(kubeconfig: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-gpu"));
    c.env_clear()
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent");
    c
}

impl Cluster {
    /// Runs `kubectl gpu <args>` as the viewer (the kubeconfig's current context).
    pub fn run(&self, args: &[&str]) -> Output {
        let out = command(&self.kubeconfig).args(args).output().unwrap();
        Output {
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
            code: out.status.code().unwrap_or(-1),
        }
    }
}

/// Compares `actual` with the golden file `name`, or rewrites it with `UPDATE_GOLDEN=1`.
pub fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    test_support::golden::file(&path, actual, "UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test e2e");
}
