//! `kubectl gpu` on the real API server: every view (`nodes`, `gpus`, `pods`, `cost`,
//! `rightsize`) as a user who holds only the roles of `deploy/base/kubectl-gpu` (a
//! client certificate in group `gpu-telemetry-viewers`), reading the exporters through
//! the real pods proxy, the adapter through the aggregator, the prices ConfigMap, and a
//! real Prometheus through the services proxy; and users without those roles, who get
//! the real server's refusal naming what they lack.
//!
//! | node | GPUs | pods (bare, pinned by nodeSelector) |
//! |---|---|---|
//! | `h100-node` | 4× H100, whole | `ai-inference/chat-0`, `chat-1` (60 % each), `research/notebook` (idle), `gpu-telemetry/prometheus-0` (no GPU) |
//! | `a100-node` | A100 in 2× 3g.40gb, A100 whole | `ai-inference/llm` (3g.40gb), `ml-training/scorer` (whole, 12 %) |
//!
//! The Prometheus stands in for a pod as the exporters do: the simulated kubelet runs
//! `prometheus-0` and gives it an IP, the endpoint slice controller lists it in the
//! `prometheus` Service, and a real Prometheus listens on that IP (the API server's
//! services proxy goes only to endpoints that are pods). Its TSDB holds seven days of
//! history written for the series the exporters really report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use test_support::control_plane::ControlPlane;
use test_support::joined::{Adapter, AdapterOptions, JoinedFleet, NAMESPACE, NodeSpec, base};
use test_support::netns::HostAddress;
use test_support::prometheus::{Flavour, Launch, Promtool};
use test_support::simulated::{binaries, wait_until_ok};

const H100: &str = "gpus:\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - \
                    {model: H100-SXM5-80GB}\n";
// GPU UUIDs of its own (the scenario's default UUIDs follow the index, and a UUID is
// unique across a real fleet: rightsize counts a GPU's holders by it).
const A100: &str = "gpus:\n  - {model: A100-SXM4-80GB, uuid: GPU-a1000000-0000-4000-8000-000000000000, mig: {layout: \
                    all-3g.40gb}}\n  - {model: A100-SXM4-80GB, uuid: GPU-a1000000-0000-4000-8000-000000000001}\n";
const GIB: f64 = 1_073_741_824.0;

/// A bare GPU pod pinned to `node`.
fn pod(namespace: &str, name: &str, node: &str, resource: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {{app: {app}}}}}\n\
         spec:\n  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  containers:\n    - name: main\n      image: \
         registry.example/{app}:1\n      resources: {{limits: {{{resource}: 1}}}}\n",
        app = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-'),
    )
}

fn workloads() -> String {
    let mut y = String::new();
    for ns in ["ai-inference", "ml-training", "research"] {
        writeln!(y, "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}").unwrap();
    }
    y.push_str(&pod("ai-inference", "chat-0", "h100-node", "nvidia.com/gpu"));
    y.push_str(&pod("ai-inference", "chat-1", "h100-node", "nvidia.com/gpu"));
    y.push_str(&pod("research", "notebook", "h100-node", "nvidia.com/gpu"));
    y.push_str(&pod("ai-inference", "llm", "a100-node", "nvidia.com/mig-3g.40gb"));
    y.push_str(&pod("ml-training", "scorer", "a100-node", "nvidia.com/gpu"));
    // The cluster's prices: the H100 at $5.00 instead of the shipped table's.
    y.push_str(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: gpu-prices, namespace: gpu-telemetry}\ndata:\n  \
         prices.yaml: |\n    models:\n      - {name: H100, dollars_per_hour: 5.0}\n",
    );
    // Prometheus: a pod the simulated kubelet runs (no GPU) behind a Service.
    y.push_str(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: prometheus-0, namespace: gpu-telemetry, labels: {app: \
         prometheus}}\nspec:\n  nodeSelector: {kubernetes.io/hostname: h100-node}\n  containers:\n    - name: \
         prometheus\n      image: quay.io/prometheus/prometheus:v3.5.0\n      ports: [{name: web, containerPort: \
         9090}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: prometheus, namespace: gpu-telemetry}\nspec:\n  \
         selector: {app: prometheus}\n  ports: [{name: web, port: 9090, targetPort: web}]\n",
    );
    y
}

const LOAD: &str = "workloads:\n  - {namespace: ai-inference, selector: {app: chat}, demand: 120, memory_used_mib: \
                    30000}\n  - {namespace: ai-inference, selector: {app: llm}, demand: 50, memory_used_mib: 20000}\n  \
                    - {namespace: ml-training, selector: {app: scorer}, demand: 12, memory_used_mib: 12000}\n";

/// What a run printed.
type Run = test_support::Ran;

/// `kubectl gpu <args>` with `kubeconfig` and a clean environment.
fn gpu(kubeconfig: &Path, args: &[&str]) -> Run {
    test_support::run_with_kubeconfig(&binaries().join("kubectl-gpu"), kubeconfig, args)
}

fn json(kubeconfig: &Path, args: &[&str]) -> Value {
    let out = gpu(kubeconfig, args);
    assert_eq!(out.code, 0, "kubectl gpu {args:?}: {}", out.stderr);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(!said.contains("forbidden"), "kubectl gpu {args:?} was refused something: {said}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|v| (v - want).abs() < 1e-6)
}

fn item<'a>(doc: &'a Value, key: &str, name: &str) -> &'a Value {
    doc["items"].as_array().unwrap().iter().find(|i| i[key] == name).unwrap_or_else(|| panic!("{name}: {doc}"))
}

/// Seven days and an hour of history, every 5 minutes up to `end`, for each per-pod
/// series `page` (an exporter's) reports: the scorer at 12 GiB with every fifth sample
/// at 14 GiB and 12 % busy, every other pod as it is now.
fn history(pages: &[String], end: i64) -> String {
    let mut out = String::new();
    for family in ["gpu_pod_memory_used_bytes", "gpu_pod_utilization"] {
        writeln!(out, "# TYPE {family} gauge").unwrap();
        for page in pages {
            for line in page.lines().filter(|l| l.starts_with(&format!("{family}{{"))) {
                let (series, now) = line.rsplit_once(' ').unwrap();
                let now: f64 = now.parse().unwrap();
                let scorer = series.contains("pod=\"scorer\"");
                for (n, t) in (end - 7 * 86_400 - 3600..=end).step_by(300).enumerate() {
                    let v = match (scorer, family) {
                        (true, "gpu_pod_memory_used_bytes") => {
                            if n % 5 == 2 {
                                14.0 * GIB
                            } else {
                                12.0 * GIB
                            }
                        }
                        (true, _) => 12.0,
                        (false, _) => now,
                    };
                    writeln!(out, "{series} {v} {t}").unwrap();
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

#[test]
fn every_view_reads_the_real_api_server_with_the_viewer_roles_only() {
    let cp = ControlPlane::start();
    cp.apply(&base());
    let mut fleet = JoinedFleet::join(
        &cp,
        &[
            NodeSpec { name: "h100-node".into(), scenario: H100.into(), replicas: 1 },
            NodeSpec { name: "a100-node".into(), scenario: A100.into(), replicas: 1 },
        ],
    );
    fleet.start_exporters(&cp, &[]);
    cp.apply(&workloads());
    fleet.set_load(LOAD);
    cp.wait_for(
        "the GPU pods and Prometheus Running",
        Duration::from_secs(60),
        &["get", "pods", "-A", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"],
        |s| ["chat-0", "chat-1", "notebook", "llm", "scorer", "prometheus-0"].iter().all(|p| s.contains(p)),
    );
    // Every GPU pod attributed, with its load, on its exporter's page.
    let pages: Vec<String> = wait_until_ok("every GPU pod on its exporter's page", Duration::from_secs(60), || {
        let pages: Vec<String> = fleet.exporters.iter().map(|e| e.metrics()).collect();
        let all = pages.join("\n");
        let has = |pod: &str| all.lines().any(|l| l.starts_with("gpu_pod_memory_used_bytes{") && l.contains(pod));
        let busy = all
            .lines()
            .any(|l| l.starts_with("gpu_pod_utilization{") && l.contains("pod=\"scorer\"") && l.ends_with(" 12"));
        if ["chat-0", "chat-1", "notebook", "llm", "scorer"].iter().all(|p| has(&format!("pod=\"{p}\""))) && busy {
            Ok(pages)
        } else {
            Err(all.lines().filter(|l| l.starts_with("gpu_pod_")).collect::<Vec<_>>().join("\n"))
        }
    });
    let _adapter = Adapter::start(&cp, &AdapterOptions::default());

    // The real Prometheus on the pod's IP, with seven days of history.
    let ip: std::net::Ipv4Addr = cp
        .run(&["get", "pod", "prometheus-0", "-n", NAMESPACE, "-o", "jsonpath={.status.podIP}"])
        .trim()
        .parse()
        .unwrap();
    let _address = HostAddress::at(ip);
    let dir = tempfile::tempdir().unwrap();
    let end = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let file = dir.path().join("history.om");
    std::fs::write(&file, history(&pages, end)).unwrap();
    let tsdb = dir.path().join("tsdb");
    Promtool::new(Flavour::V2).args(["tsdb", "create-blocks-from", "openmetrics"]).arg(&file).arg(&tsdb).check();
    let _prometheus = Launch::new(Flavour::V2)
        .config("global:\n  evaluation_interval: 1m\n")
        .tsdb(&tsdb)
        .arg("--storage.tsdb.retention.time=30d")
        .host(ip)
        .port(9090)
        .start();
    cp.wait_for_service_addresses(NAMESPACE, "prometheus", &[ip.to_string()], false);

    let viewer = cp.user("alice", &["gpu-telemetry-viewers"]);

    // nodes: both GPU nodes, read through their exporters.
    let nodes = json(&viewer, &["nodes", "-o", "json"]);
    assert_eq!(nodes["items"].as_array().unwrap().len(), 2, "{nodes}");
    for name in ["h100-node", "a100-node"] {
        let n = item(&nodes, "name", name);
        assert_eq!(n["exporter"]["state"], "ok", "{n}");
        assert_eq!(n["gpuCount"], 2 + 2 * u64::from(name == "h100-node"), "{n}");
    }
    assert_eq!(item(&nodes, "name", "a100-node")["migLayout"], "0:2×3g.40gb", "{nodes}");

    // gpus: the H100s with their holders.
    let gpus = json(&viewer, &["gpus", "h100-node", "-o", "json"]);
    assert_eq!(gpus["items"].as_array().unwrap().len(), 4, "{gpus}");
    let text = gpus.to_string();
    for p in ["chat-0", "chat-1", "notebook"] {
        assert!(text.contains(p), "{p} holds an H100: {gpus}");
    }

    // pods: from the adapter through the aggregator for one namespace, from the
    // exporters for all.
    let from_adapter = json(&viewer, &["pods", "-n", "ai-inference", "-o", "json"]);
    let chat = item(&from_adapter, "pod", "chat-0");
    assert_eq!(chat["source"], "custom-metrics", "{chat}");
    assert!(close(&chat["utilizationPercent"], 60.0), "{chat}");
    let all = json(&viewer, &["pods", "-A", "-o", "json"]);
    let pods: Vec<&str> = all["items"].as_array().unwrap().iter().map(|i| i["pod"].as_str().unwrap()).collect();
    assert_eq!(pods.len(), 5, "the five GPU pods, not Prometheus: {pods:?}");
    assert_eq!(item(&all, "pod", "llm")["migProfile"], "3g.40gb");

    // cost: the ConfigMap's H100 price; the idle notebook is idle cost.
    let cost = json(&viewer, &["cost", "--by", "node", "-o", "json"]);
    let h100 = item(&cost, "node", "h100-node");
    assert!(close(&h100["capacity"]["dollarsPerHour"], 20.0), "4 × $5.00 from gpu-prices: {h100}");
    assert!(close(&h100["allocated"]["dollarsPerHour"], 15.0), "{h100}");
    assert!(close(&h100["idle"]["dollarsPerHour"], 5.0), "the notebook runs nothing: {h100}");
    // The A100s at the shipped $3.50: the LLM's 3g.40gb is 3/7 of one, the scorer a whole one.
    let a100 = item(&cost, "node", "a100-node");
    assert!(close(&a100["capacity"]["dollarsPerHour"], 7.0), "{a100}");
    assert!(close(&a100["allocated"]["dollarsPerHour"], 1.5 + 3.5), "{a100}");

    // rightsize: through the services proxy to the Prometheus pod.
    let rs = json(&viewer, &["rightsize", "-A", "--prometheus-service", "gpu-telemetry/prometheus:9090", "-o", "json"]);
    assert_eq!(rs["kind"], "GPURightsizeList", "{rs}");
    let scorer = rs["items"].as_array().unwrap().iter().find(|i| i["workload"]["name"] == "scorer").unwrap();
    // A whole A100 at 12 % with a 14 GiB peak: 1g.20gb, $3.50 → $0.875.
    assert_eq!(scorer["recommendation"]["verdict"], "move", "{scorer}");
    assert_eq!(scorer["recommendation"]["text"], "MIG 1g.20gb", "{scorer}");
    assert!(close(&scorer["dollarsPerHour"]["saved"], 2.625), "{scorer}");
    assert!(close(&scorer["peakMemoryBytes"], 14.0 * GIB), "{scorer}");
    assert_eq!(rs["items"].as_array().unwrap().len(), 5, "{rs}");

    // A user of no role: the real server's refusal, naming the verb and resource.
    let nobody = cp.user("bob", &["developers"]);
    let out = gpu(&nobody, &["nodes"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains(
            "nodes is forbidden: User \"bob\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        ),
        "{}",
        out.stderr
    );

    // A user who may read nodes and pods (the cluster-wide viewer role) but holds
    // neither pods/proxy nor services/proxy in gpu-telemetry: the nodes still show,
    // their readings unknown, and each warning names the permission.
    cp.run(&["create", "clusterrolebinding", "carol-views", "--clusterrole=gpu-telemetry-viewer", "--user=carol"]);
    let carol = cp.user("carol", &[]);
    let out = gpu(&carol, &["nodes", "-o", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(item(&doc, "name", "h100-node")["exporter"]["state"], "unknown", "{doc}");
    assert!(
        out.stdout.contains(
            "cannot get resource \\\"pods/proxy\\\" in API group \\\"\\\" in the namespace \\\"gpu-telemetry\\\""
        ) || out
            .stderr
            .contains("cannot get resource \"pods/proxy\" in API group \"\" in the namespace \"gpu-telemetry\""),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let out = gpu(&carol, &["rightsize", "-A", "--prometheus-service", "gpu-telemetry/prometheus:9090", "-o", "json"]);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("cannot get resource \\\"services/proxy\\\"")
            || said.contains("cannot get resource \"services/proxy\""),
        "{said}"
    );

    // A user who may read nodes and nothing else: the nodes show, unknown, and the
    // warning quotes the server's refusal to list the exporter pods.
    cp.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: nodes-only}\nrules:\n  - \
         {apiGroups: [\"\"], resources: [nodes], verbs: [get, list]}\n---\napiVersion: \
         rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: dave-nodes}\nroleRef: {apiGroup: \
         rbac.authorization.k8s.io, kind: ClusterRole, name: nodes-only}\nsubjects: [{kind: User, name: dave}]\n",
    );
    let dave = cp.user("dave", &[]);
    let out = gpu(&dave, &["nodes", "--timeout", "5s"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for name in ["h100-node", "a100-node"] {
        let line = out.stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{}", out.stdout));
        assert!(line.contains("unknown"), "{line}");
    }
    assert!(
        out.stderr.contains(
            "exporter forbidden (listing exporter pods in namespace gpu-telemetry (app.kubernetes.io/name=gpu-exporter): \
             Error from server (Forbidden): pods is forbidden: User \"dave\" cannot list resource \"pods\" in API group \
             \"\" in the namespace \"gpu-telemetry\""
        ),
        "{}",
        out.stderr
    );

    // An admin's `kubectl cordon` is shown as the real kubectl names itself in the
    // Node's managedFields (`kubectl`; the in-test fixtures say `kubectl-cordon`).
    let jane = cp.user("jane", &["system:masters"]);
    let out = cp.run_as_with_input(&jane, &["cordon", "a100-node"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let nodes = json(&viewer, &["nodes", "-o", "json"]);
    assert_eq!(item(&nodes, "name", "a100-node")["health"]["cordonedBy"], "kubectl", "{nodes}");
}
