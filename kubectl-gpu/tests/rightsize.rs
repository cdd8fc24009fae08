//! `kubectl gpu rightsize` end to end against a real Prometheus, Debian's 2.42 and a
//! built 3.x (`test_support::prometheus`), each giving the same report: its TSDB is
//! backfilled (by the same flavour's `promtool tsdb create-blocks-from openmetrics`)
//! with seven days of synthetic per-pod history for the seed's kinds of workload, and the
//! plugin reaches it through the in-test API server's services proxy (the shipped viewer
//! roles' `services/proxy` is checked on a real API server, `real-cluster/tests/kubectl_gpu.rs`).
//!
//! | workload | node, device | history | expected |
//! |---|---|---|---|
//! | `ai-inference/llm-inference-70b` (StatefulSet) | A100 3g.40gb | peak 35 GiB, no SM activity (no GPM) | keep (42 GiB wanted: headroom short) |
//! | `ai-inference/embedding` (Deployment) | A100 1g.10gb | peak 6 GiB, restarted 2x | keep |
//! | `ml-training/batch-scorer` (Deployment, 2 pods) | whole A100s | peak 14 GiB, p95 12 % | 1g.20gb each |
//! | `ml-training/nightly-eval` (Job) | whole A100 | the same, 2 days only | 1g.20gb, history 2d of 7d |
//! | `ai-inference/inference-pool` (Deployment, 8 pods) | 2 L40S time-sliced 4 ways | peak 4 GiB, p95 8 % of the GPU | 1/8 GPU |
//! | `research/feature-extractor` (bare pod) | whole H100 | p95 5 GiB, peak 30 GiB, p95 10 % | 3g.40gb, spiky memory |
//! | `research/dra-embedder` (bare pod, DRA claim) | H100 3g.40gb | peak 7 GiB, SM activity p95 20 % | 1g.10gb |
//!
//! The recorded series (`pod_device:*`) cover two days only: the run reads the raw families.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;
use test_support::apiserver::{self, ApiServer, Backend};
use test_support::cluster;
use test_support::prometheus::{Flavour, Launch, Prometheus, Promtool};

const GIB: f64 = 1_073_741_824.0;
const DAY: i64 = 86_400;
const STEP: i64 = 300;

/// One synthetic pod: where it runs and what it used.
struct Synth {
    namespace: &'static str,
    pod: &'static str,
    node: &'static str,
    model: &'static str,
    uuid: String,
    gpu: u32,
    /// (profile, GPU instance) on MIG.
    mig: Option<(&'static str, u32)>,
    base_gib: f64,
    peak_gib: f64,
    /// Share of samples at the peak (spiky: 1 %, below the p95).
    peak_share: f64,
    util: Option<f64>,
    days: i64,
}

fn synths() -> Vec<Synth> {
    let a100 = "NVIDIA A100-SXM4-80GB";
    let mut v = vec![
        Synth {
            namespace: "ai-inference",
            pod: "llm-inference-70b-0",
            node: "a100-mig-node",
            model: a100,
            uuid: "GPU-a100-mig-0".into(),
            gpu: 0,
            mig: Some(("3g.40gb", 1)),
            base_gib: 33.0,
            peak_gib: 35.0,
            peak_share: 0.2,
            util: None,
            days: 7,
        },
        Synth {
            namespace: "ai-inference",
            pod: "embedding-5d8c7b9f4-x2x7p",
            node: "a100-mig-node",
            model: a100,
            uuid: "GPU-a100-mig-0".into(),
            gpu: 0,
            mig: Some(("1g.10gb", 7)),
            base_gib: 5.0,
            peak_gib: 6.0,
            peak_share: 0.2,
            util: None,
            days: 7,
        },
    ];
    for (i, pod) in ["batch-scorer-7f6b9c8d5-aaaaa", "batch-scorer-7f6b9c8d5-bbbbb"].into_iter().enumerate() {
        v.push(Synth {
            namespace: "ml-training",
            pod,
            node: "a100-node-2",
            model: a100,
            uuid: format!("GPU-a100-2-{i}"),
            gpu: i as u32,
            mig: None,
            base_gib: 12.0,
            peak_gib: 14.0,
            peak_share: 0.2,
            util: Some(12.0),
            days: 7,
        });
    }
    v.push(Synth {
        namespace: "ml-training",
        pod: "nightly-eval-29000000-q8w2z",
        node: "a100-node-2",
        model: a100,
        uuid: "GPU-a100-2-2".into(),
        gpu: 2,
        mig: None,
        base_gib: 12.0,
        peak_gib: 14.0,
        peak_share: 0.2,
        util: Some(12.0),
        days: 2,
    });
    for i in 0..8 {
        v.push(Synth {
            namespace: "ai-inference",
            pod: ["pool-0", "pool-1", "pool-2", "pool-3", "pool-4", "pool-5", "pool-6", "pool-7"][i],
            node: "l40s-node-1",
            model: "NVIDIA L40S",
            uuid: format!("GPU-l40s-{}", i / 4),
            gpu: (i / 4) as u32,
            mig: None,
            base_gib: 3.0,
            peak_gib: 4.0,
            peak_share: 0.2,
            util: Some(8.0),
            days: 7,
        });
    }
    v.push(Synth {
        namespace: "research",
        pod: "feature-extractor",
        node: "h100-node-1",
        model: "NVIDIA H100 80GB HBM3",
        uuid: "GPU-h100-0".into(),
        gpu: 0,
        mig: None,
        base_gib: 5.0,
        peak_gib: 30.0,
        peak_share: 0.01,
        util: Some(10.0),
        days: 7,
    });
    v.push(Synth {
        namespace: "research",
        pod: "dra-embedder",
        node: "h100-node-1",
        model: "NVIDIA H100 80GB HBM3",
        uuid: "GPU-h100-1".into(),
        gpu: 1,
        mig: Some(("3g.40gb", 2)),
        base_gib: 6.0,
        peak_gib: 7.0,
        peak_share: 0.2,
        util: Some(20.0),
        days: 7,
    });
    v
}

fn labels(s: &Synth, container: bool) -> String {
    let mut l = format!("node=\"{}\",gpu=\"{}\",uuid=\"{}\",model=\"{}\"", s.node, s.gpu, s.uuid, s.model);
    if let Some((profile, gi)) = s.mig {
        write!(l, ",mig_profile=\"{profile}\",gpu_instance_id=\"{gi}\",compute_instance_id=\"0\"").unwrap();
    }
    write!(l, ",namespace=\"{}\",pod=\"{}\"", s.namespace, s.pod).unwrap();
    if container {
        l.push_str(",container=\"main\"");
    }
    l
}

/// The OpenMetrics file to backfill, ending at `end`.
fn history(end: i64) -> String {
    let synths = synths();
    let mut out = String::new();
    let series = |s: &Synth, value: &dyn Fn(i64, usize) -> f64, labels: &str, name: &str, out: &mut String| {
        let start = end - s.days * DAY - if s.days == 7 { 3600 } else { 0 };
        for (n, t) in (start..=end).step_by(STEP as usize).enumerate() {
            writeln!(out, "{name}{{{labels}}} {} {t}", value(t, n)).unwrap();
        }
    };
    out.push_str("# TYPE gpu_pod_memory_used_bytes gauge\n");
    for s in &synths {
        // Every 1/share-th sample at the peak, the rest at the base.
        let every = (1.0 / s.peak_share).round() as usize;
        let v = |_t: i64, n: usize| if n % every == every / 2 { s.peak_gib * GIB } else { s.base_gib * GIB };
        series(s, &v, &labels(s, true), "gpu_pod_memory_used_bytes", &mut out);
    }
    out.push_str("# TYPE gpu_pod_utilization gauge\n");
    for s in synths.iter().filter(|s| s.util.is_some()) {
        let u = s.util.unwrap();
        series(s, &|_, _| u, &labels(s, true), "gpu_pod_utilization", &mut out);
    }
    // The recording rules were installed two days ago: their series do not cover the window.
    out.push_str("# TYPE pod_device:gpu_memory_used_bytes:max1h gauge\n");
    for s in &synths[..1] {
        let recent = Synth { days: 2, ..clone_synth(s) };
        series(
            &recent,
            &|_, _| s.peak_gib * GIB,
            &labels(s, false),
            "pod_device:gpu_memory_used_bytes:max1h",
            &mut out,
        );
    }
    // kube-state-metrics: the embedding pod restarted twice mid-window.
    out.push_str("# TYPE kube_pod_container_status_restarts_total gauge\n");
    for s in &synths {
        let l = format!("namespace=\"{}\",pod=\"{}\",container=\"main\"", s.namespace, s.pod);
        let restarted = s.pod.starts_with("embedding");
        let mid = end - 3 * DAY;
        series(
            s,
            &|t, _| if restarted && t >= mid { 3.0 } else { 1.0 },
            &l,
            "kube_pod_container_status_restarts_total",
            &mut out,
        );
    }
    out.push_str("# EOF\n");
    out
}

fn clone_synth(s: &Synth) -> Synth {
    Synth { uuid: s.uuid.clone(), ..*s }
}

/// A Prometheus of `flavour` on a TSDB that the same flavour's promtool backfilled with
/// the history ending at `end` (a TSDB written by Prometheus 3 is not for 2.42 to read).
fn start_prometheus(flavour: Flavour, end: i64) -> (Prometheus, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.om");
    std::fs::write(&file, history(end)).unwrap();
    let tsdb = dir.path().join("tsdb");
    Promtool::new(flavour).args(["tsdb", "create-blocks-from", "openmetrics"]).arg(&file).arg(&tsdb).check();
    let prometheus = Launch::new(flavour)
        .config("global:\n  evaluation_interval: 1m\n")
        .tsdb(&tsdb)
        .arg("--storage.tsdb.retention.time=30d")
        .start();
    (prometheus, dir)
}

fn owned(mut pod: Pod, kind: &str, name: &str, hash: Option<&str>) -> Pod {
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    if let Some(h) = hash {
        pod.metadata.labels = Some([("pod-template-hash".to_string(), h.to_string())].into());
    }
    pod
}

fn objects(api: &ApiServer) {
    for (name, product, count) in [
        ("a100-mig-node", "NVIDIA-A100-SXM4-80GB", 1),
        ("a100-node-2", "NVIDIA-A100-SXM4-80GB", 3),
        ("l40s-node-1", "NVIDIA-L40S", 2),
        ("h100-node-1", "NVIDIA-H100-80GB-HBM3", 2),
    ] {
        api.add_node(cluster::gpu_node(name, product, count, &[("nvidia.com/gpu", count)]));
    }
    api.add_node(cluster::cpu_node("cpu-node-1"));
    let pod = |ns, name, node, res: &[(&str, u32)]| cluster::gpu_pod(ns, name, Some(node), "Running", res);
    api.add_pod(owned(
        pod("ai-inference", "llm-inference-70b-0", "a100-mig-node", &[("nvidia.com/mig-3g.40gb", 1)]),
        "StatefulSet",
        "llm-inference-70b",
        None,
    ));
    api.add_pod(owned(
        pod("ai-inference", "embedding-5d8c7b9f4-x2x7p", "a100-mig-node", &[("nvidia.com/mig-1g.10gb", 1)]),
        "ReplicaSet",
        "embedding-5d8c7b9f4",
        Some("5d8c7b9f4"),
    ));
    for p in ["batch-scorer-7f6b9c8d5-aaaaa", "batch-scorer-7f6b9c8d5-bbbbb"] {
        api.add_pod(owned(
            pod("ml-training", p, "a100-node-2", &[("nvidia.com/gpu", 1)]),
            "ReplicaSet",
            "batch-scorer-7f6b9c8d5",
            Some("7f6b9c8d5"),
        ));
    }
    api.add_pod(owned(
        pod("ml-training", "nightly-eval-29000000-q8w2z", "a100-node-2", &[("nvidia.com/gpu", 1)]),
        "Job",
        "nightly-eval-29000000",
        None,
    ));
    for i in 0..8 {
        api.add_pod(owned(
            pod(
                "ai-inference",
                ["pool-0", "pool-1", "pool-2", "pool-3", "pool-4", "pool-5", "pool-6", "pool-7"][i],
                "l40s-node-1",
                &[("nvidia.com/gpu", 1)],
            ),
            "ReplicaSet",
            "inference-pool-6c9d",
            Some("6c9d"),
        ));
    }
    api.add_pod(pod("research", "feature-extractor", "h100-node-1", &[("nvidia.com/gpu", 1)]));
    let mut dra = pod("research", "dra-embedder", "h100-node-1", &[]);
    dra.spec.as_mut().unwrap().resource_claims = Some(vec![PodResourceClaim {
        name: "gpu".into(),
        resource_claim_template_name: Some("mig-3g".into()),
        ..PodResourceClaim::default()
    }]);
    api.add_pod(dra);
    // A CPU pod: not a GPU holder, not listed.
    api.add_pod(cluster::gpu_pod("research", "web", Some("cpu-node-1"), "Running", &[]));
}

struct Setup {
    kubeconfig: std::path::PathBuf,
    _prometheus: Prometheus,
    _dirs: [tempfile::TempDir; 2],
}

/// The in-test API server, its services proxy in front of a Prometheus of `flavour`:
/// made once per flavour and test binary.
fn setup(flavour: Flavour) -> &'static Setup {
    static SETUPS: [OnceLock<Setup>; 2] = [OnceLock::new(), OnceLock::new()];
    SETUPS[flavour as usize].get_or_init(|| {
        let end = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let (prometheus, history) = start_prometheus(flavour, end);
        let api = ApiServer::new();
        objects(&api);
        api.user("viewer-token", "alice");
        api.service_proxy("gpu-telemetry", "prometheus", Backend::Http(prometheus.addr()));
        let addr = api.start();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = apiserver::kubeconfig(dir.path(), addr, &[("viewer", "viewer-token", "ai-inference")]);
        Setup { kubeconfig, _prometheus: prometheus, _dirs: [history, dir] }
    })
}

type Run = test_support::Ran;

/// The plugin, as the viewer, in front of a Prometheus of `flavour`.
fn run(flavour: Flavour, args: &[&str]) -> Run {
    test_support::run_with_kubeconfig(Path::new(env!("CARGO_BIN_EXE_kubectl-gpu")), &setup(flavour).kubeconfig, args)
}

const SERVICE: &str = "gpu-telemetry/prometheus:9090";

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|v| (v - want).abs() < 1e-6)
}

#[test]
fn the_window_gives_the_hand_computed_recommendations_and_savings_from_prometheus_2() {
    hand_computed_recommendations(Flavour::V2);
}

#[test]
fn the_window_gives_the_hand_computed_recommendations_and_savings_from_prometheus_3() {
    hand_computed_recommendations(Flavour::V3);
}

fn hand_computed_recommendations(flavour: Flavour) {
    let out = run(flavour, &["rightsize", "-A", "--prometheus-service", SERVICE, "-o", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["source"], "raw", "the recorded series cover two days of seven: {doc}");
    let item = |name: &str| {
        doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["workload"]["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {doc}"))
            .clone()
    };
    let verdict = |name: &str| {
        let i = item(name);
        (
            i["recommendation"]["verdict"].as_str().unwrap().to_string(),
            i["recommendation"]["text"].as_str().unwrap().to_string(),
        )
    };
    // 70B on 3g.40gb, peak 35 GiB: 42 GiB wanted, no cheaper profile has 19.5+: keep.
    assert_eq!(verdict("llm-inference-70b"), ("keep".into(), "keep".into()));
    let llm = item("llm-inference-70b");
    assert_eq!(llm["workload"]["kind"], "StatefulSet");
    assert!(close(&llm["peakMemoryBytes"], 35.0 * GIB), "{llm}");
    assert!(close(&llm["dollarsPerHour"]["current"], 1.75) && close(&llm["dollarsPerHour"]["saved"], 0.0), "{llm}");
    assert_eq!(llm["p95ComputePercent"], Value::Null, "an A100 instance has no SM activity: unknown, not 0");
    // The embedding pod: 7.2 GiB fits its 1g.10gb, nothing is cheaper; its restarts are named.
    assert_eq!(verdict("embedding").0, "keep");
    let emb = item("embedding");
    assert_eq!(emb["workload"]["kind"], "Deployment", "through its ReplicaSet");
    assert_eq!(emb["restarts"], 2, "{emb}");
    // Whole A100s at 12 % with a 14 GiB peak: 1g.20gb, $3.50 → $0.875 each.
    assert_eq!(verdict("batch-scorer"), ("move".into(), "MIG 1g.20gb".into()));
    let batch = item("batch-scorer");
    assert_eq!(batch["pods"].as_array().unwrap().len(), 2);
    assert!(close(&batch["dollarsPerHour"]["saved"], 2.0 * 2.625), "{batch}");
    assert!(close(&batch["savedDollarsPerMonth"], 2.0 * 2.625 * 730.0));
    assert_eq!(batch["recommendation"]["certain"], true);
    // The same on two days of history: the same move, flagged.
    let eval = item("nightly-eval-29000000");
    assert_eq!(eval["workload"]["kind"], "Job");
    assert_eq!(eval["recommendation"]["text"], "MIG 1g.20gb");
    assert_eq!(eval["recommendation"]["certain"], false);
    assert!(eval["flags"].as_array().unwrap().iter().any(|f| f["text"] == "history 2d of 7d"), "{eval}");
    // The L40S pool, a quarter each, 4 GiB and 8 % of the GPU: an eighth (5.6 GiB).
    assert_eq!(verdict("inference-pool"), ("move".into(), "1/8 GPU (time-sliced)".into()));
    let pool = item("inference-pool");
    assert_eq!(pool["current"]["device"], "1/4 GPU (time-sliced)");
    assert!(close(&pool["dollarsPerHour"]["saved"], 8.0 * (0.375 - 0.1875)), "{pool}");
    // Spiky: p95 5 GiB, peak 30 GiB → sized on the peak, 36 GiB: 3g.40gb of the H100.
    assert_eq!(verdict("feature-extractor"), ("move".into(), "MIG 3g.40gb".into()));
    let spiky = item("feature-extractor");
    assert_eq!(spiky["workload"]["kind"], "Pod");
    assert!(close(&spiky["p95MemoryBytes"], 5.0 * GIB) && close(&spiky["peakMemoryBytes"], 30.0 * GIB), "{spiky}");
    assert!(spiky["flags"][0]["text"].as_str().unwrap().starts_with("spiky memory"), "{spiky}");
    assert!(close(&spiky["dollarsPerHour"]["saved"], 2.25));
    // The DRA pod on an H100 3g.40gb: 8.4 GiB and 0.2 × 3/7 of the GPU fit 1g.10gb.
    assert_eq!(verdict("dra-embedder"), ("move".into(), "MIG 1g.10gb".into()));
    let dra = item("dra-embedder");
    assert_eq!(dra["current"]["device"], "MIG 3g.40gb");
    assert!(close(&dra["dollarsPerHour"]["saved"], 2.25 - 4.5 / 7.0), "{dra}");
    // Totals: allocated 1.75 + 0.5 + 7 + 3.5 + 3 + 4.5 + 2.25 = 22.5; saved
    // 5.25 + 2.625 + 1.5 + 2.25 + 1.607 = 13.232, of which 2.625 uncertain.
    let t = &doc["totals"];
    let saved = 5.25 + 2.625 + 1.5 + 2.25 + (2.25 - 4.5 / 7.0);
    assert!(close(&t["allocatedDollarsPerHour"], 22.5), "{t}");
    assert!(close(&t["savedDollarsPerHour"], saved), "{t}");
    assert!(close(&t["savedShare"], saved / 22.5), "{t}");
    assert!(close(&t["uncertainSavedDollarsPerHour"], 2.625), "{t}");
    assert_eq!(doc["items"].as_array().unwrap().len(), 7, "the CPU pod is no GPU holder");
}

#[test]
fn the_plan_frees_whole_gpus_with_valid_layouts_from_prometheus_2() {
    plan_frees_whole_gpus(Flavour::V2);
}

#[test]
fn the_plan_frees_whole_gpus_with_valid_layouts_from_prometheus_3() {
    plan_frees_whole_gpus(Flavour::V3);
}

fn plan_frees_whole_gpus(flavour: Flavour) {
    let out = run(flavour, &["rightsize", "-A", "--prometheus-service", SERVICE, "--plan", "-o", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    let node = |name: &str| doc["plan"].as_array().unwrap().iter().find(|p| p["node"] == name).unwrap().clone();
    // Three 1g.20gb on one A100 at memory slices 0, 2, 4: GPUs 1 and 2 freed.
    let a100 = node("a100-node-2");
    assert_eq!(a100["freedGpus"], 2, "{a100}");
    let starts: Vec<u64> =
        a100["gpus"][0]["detail"].as_array().unwrap().iter().map(|i| i["start"].as_u64().unwrap()).collect();
    assert_eq!(starts, [0, 2, 4]);
    let layout: Vec<(&str, u8)> = a100["gpus"][0]["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["profile"].as_str().unwrap(), i["start"].as_u64().unwrap() as u8))
        .collect();
    let model = kubectl_gpu::rightsize::catalog::model("A100-80GB").unwrap();
    kubectl_gpu::rightsize::catalog::validate_layout(model, &layout).unwrap();
    // The H100: the spiky pod's 3g.40gb at 0 and the DRA pod's 1g.10gb at 4 on GPU 0.
    let h100 = node("h100-node-1");
    assert_eq!(h100["freedGpus"], 1, "{h100}");
    // The L40S pool on one GPU cut in eight.
    let l40s = node("l40s-node-1");
    assert_eq!(
        (l40s["freedGpus"].clone(), l40s["gpus"][0]["detail"]["replicas"].clone()),
        (1.into(), 8.into()),
        "{l40s}"
    );
    let config = doc["migPartedConfig"].as_str().unwrap();
    assert!(config.contains("kubectl label node a100-node-2 nvidia.com/mig.config=rightsize-a100-node-2 --overwrite"));
    assert!(config.contains("version: v1\nmig-configs:\n"), "{config}");
}

#[test]
fn without_prometheus_it_says_so_and_shows_a_snapshot() {
    let out = run(Flavour::V2, &["rightsize", "-A"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("SNAPSHOT, NOT A RECOMMENDATION: no Prometheus was given"), "{}", out.stderr);
    let out =
        run(Flavour::V2, &["rightsize", "-A", "--prometheus-service", "gpu-telemetry/nothing:9090", "-o", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["kind"], "GPURightsizeSnapshot");
    assert!(doc["summary"].as_str().unwrap().contains("could not be read"), "{doc}");
}

#[test]
fn the_command_line_is_checked_before_anything_is_read() {
    let out = run(Flavour::V2, &["rightsize", "--prometheus-service", "prometheus:9090"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("expected NAMESPACE/NAME:PORT"), "{}", out.stderr);
}

/// The README's rightsize sample, between these markers.
const BEGIN: &str = "<!-- BEGIN kubectl-gpu rightsize sample: generated by kubectl-gpu/tests/rightsize.rs; UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test rightsize -->\n";
const END: &str = "<!-- END kubectl-gpu rightsize sample -->\n";

/// The README's sample, as the plugin prints it in front of a Prometheus of `flavour`.
fn readme_sample(flavour: Flavour) -> String {
    let mut block = String::from(BEGIN);
    block.push_str("```console\n");
    for args in [
        &["rightsize", "-A", "--prometheus-service", SERVICE][..],
        &["rightsize", "-n", "ml-training", "--prometheus-service", SERVICE, "--plan"][..],
    ] {
        let out = run(flavour, args);
        assert_eq!(out.code, 0, "{flavour}: {}", out.stderr);
        writeln!(block, "$ kubectl gpu {}", args.join(" ")).unwrap();
        block.push_str(&out.stdout);
        block.push_str(&out.stderr);
    }
    block.push_str("```\n");
    block.push_str(END);
    block
}

#[test]
fn the_readme_sample_is_this_run() {
    let block = readme_sample(Flavour::V2);
    test_support::golden::block(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
        BEGIN,
        END,
        &block,
        "UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test rightsize",
    );
}

/// Prometheus 3 (left-open ranges, its own quantile and subquery code) gives the same
/// report, to the cent and the byte, as the sample 2.42 gives.
#[test]
fn prometheus_3_gives_the_same_report_as_prometheus_2() {
    let (v2, v3) = (readme_sample(Flavour::V2), readme_sample(Flavour::V3));
    assert!(v2 == v3, "{}:\n{v2}\n{}:\n{v3}", Flavour::V2, Flavour::V3);
}
