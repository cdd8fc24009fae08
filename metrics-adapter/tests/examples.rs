//! The seed's workloads in `deploy/examples`, as users apply them.
//!
//! - Every kustomization a user applies renders with `kubectl kustomize` and passes
//!   `kubernetes-validate --strict -k 1.33.0`; every file is part of one; what the schema
//!   leaves to the API server holds too (selectors select their templates, containers
//!   have images, Jobs do not restart Always); every namespace used is created or expected.
//! - The seed's objects are there as the seed wrote them (the HPA unchanged).
//! - Every metric an example HorizontalPodAutoscaler names is served by the adapter with
//!   the shipped configuration, asked the way the HPA controller asks (through the
//!   aggregator, `labelSelector` from the scale target's selector, pod labels from the API
//!   server): `gpu_utilization` from the real gpu-exporter on the simulated seed node,
//!   `request_latency_ms` from a real Prometheus (Debian's 2.42 and a built 3.x, a test
//!   each) through the rules in the shipped
//!   `gpu-metrics-adapter-rules` ConfigMap. [`SERVED`] maps each metric name to how it is
//!   served and checked; a name missing from it fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricTarget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};
use support::kustomize::{documents, render, try_documents, try_render_text};
use support::node::{FROZEN_AT, NodeOptions, SimulatedNode, repo};
use support::{Behavior, Exporter, Pki, get, hpa_headers, label, quantity, series, tls_client};
use test_support::prometheus::{Flavour, Launch};

const HPA_USER: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
/// The ConfigMap the adapter's Prometheus rules ship in, and its key.
const RULES_CONFIGMAP: &str = "gpu-metrics-adapter-rules";
const RULES_KEY: &str = "rules.yaml";
/// The simulated node the direct source is checked on: the seed's `mixed` MIG node with
/// the seed's workloads on it.
const SCENARIO: &str = "fake-nvml/scenarios/seed-mixed-node.yaml";
/// Namespaces the examples use without creating them: the GPU operator's own.
const EXTERNAL_NAMESPACES: &[&str] = &["gpu-operator"];
/// Kinds the examples use that are not namespaced.
const CLUSTER_SCOPED: &[&str] = &["Namespace", "PriorityClass"];

/// How a metric an example HPA names is served, and so how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// The adapter's direct source: scraped from the gpu-exporters. Checked against the
    /// real exporter on the simulated node; expected values are the exporter's per-pod
    /// series (`gpu_pod_utilization` on shared GPUs, `gpu_utilization` with pod labels on
    /// a GPU or MIG instance the pod holds), averaged per pod.
    GpuUtilizationFromExporters,
    /// The adapter's Prometheus source, through a rule of the shipped rules ConfigMap.
    /// Checked against a real Prometheus scraping an in-test endpoint that serves the
    /// metric per pod with `namespace` and `pod` labels, as the application would.
    PrometheusRule,
}

/// Every metric name an example HPA may name. Add a row (and, for a new way of serving,
/// a check) before an example uses another metric.
const SERVED: &[(&str, Served)] =
    &[("gpu_utilization", Served::GpuUtilizationFromExporters), ("request_latency_ms", Served::PrometheusRule)];

/// One metric of one HPA.
#[derive(Debug, Clone)]
struct HpaMetric {
    hpa: String,
    namespace: String,
    /// `Pods`, `Object`, `External`, `Resource`, `ContainerResource`.
    source: String,
    name: String,
    /// Whether the HPA narrows the metric's series (`metric.selector`).
    metric_selector: bool,
    target: MetricTarget,
    /// The scale target: (apiVersion, kind, name).
    scale_target: (String, String, String),
}

/// What the check of one metric does.
#[derive(Debug, Clone)]
struct Check {
    metric: HpaMetric,
    served: Served,
}

fn examples_dir() -> PathBuf {
    repo().join("deploy/examples")
}

fn kind_is(doc: &Value, kind: &str) -> bool {
    doc["kind"] == kind
}

fn name_of(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(doc: &Value) -> &str {
    doc["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// Every metric of every HPA in `docs`.
fn hpa_metrics(docs: &[Value]) -> Vec<HpaMetric> {
    let mut out = Vec::new();
    for doc in docs.iter().filter(|d| kind_is(d, "HorizontalPodAutoscaler")) {
        assert_eq!(doc["apiVersion"], "autoscaling/v2", "HPA {}: use autoscaling/v2", name_of(doc));
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(doc.clone()).unwrap();
        let name = hpa.metadata.name.clone().unwrap();
        let namespace = hpa.metadata.namespace.clone().unwrap_or_else(|| panic!("HPA {name} names no namespace"));
        let spec = hpa.spec;
        let r = &spec.scale_target_ref;
        let scale_target = (r.api_version.clone().unwrap_or_default(), r.kind.clone(), r.name.clone());
        for m in spec.metrics.unwrap_or_default() {
            let (metric, target) = match (m.type_.as_str(), &m.pods, &m.object, &m.external, &m.resource) {
                ("Pods", Some(p), ..) => (p.metric.clone(), p.target.clone()),
                ("Object", _, Some(o), ..) => (o.metric.clone(), o.target.clone()),
                ("External", _, _, Some(e), _) => (e.metric.clone(), e.target.clone()),
                ("Resource", .., Some(r)) => (
                    k8s_openapi::api::autoscaling::v2::MetricIdentifier { name: r.name.clone(), selector: None },
                    r.target.clone(),
                ),
                (t, ..) => panic!("HPA {name}: metric of type {t} without its {t} block"),
            };
            out.push(HpaMetric {
                hpa: name.clone(),
                namespace: namespace.clone(),
                source: m.type_.clone(),
                name: metric.name,
                metric_selector: metric.selector.is_some(),
                target,
                scale_target: scale_target.clone(),
            });
        }
    }
    out
}

/// How `m` is checked, or why it cannot be served.
fn plan(m: &HpaMetric) -> Result<Check, String> {
    let what = format!("HPA {}/{}: {} metric {}", m.namespace, m.hpa, m.source, m.name);
    match m.source.as_str() {
        "Pods" => {}
        "External" => {
            return Err(format!(
                "{what}: nobody serves it (gpu-metrics-adapter serves custom.metrics.k8s.io only, not external.metrics.k8s.io)"
            ));
        }
        "Object" => return Err(format!("{what}: this test has no check for Object metrics yet; add one")),
        _ => {
            return Err(format!(
                "{what}: resource metrics come from metrics-server, which gpu-telemetry does not ship or check"
            ));
        }
    }
    if m.metric_selector {
        return Err(format!("{what}: this test has no check for metric selectors yet; add one"));
    }
    let served = SERVED.iter().find(|(n, _)| *n == m.name).map(|(_, s)| *s).ok_or_else(|| {
        let known: Vec<&str> = SERVED.iter().map(|(n, _)| *n).collect();
        format!("{what}: nobody is known to serve it (served metrics: {known:?}); serve it and add it to SERVED")
    })?;
    Ok(Check { metric: m.clone(), served })
}

/// `matchLabels` and `matchExpressions` as one `labelSelector` string, the form the HPA
/// controller sends (the scale subresource's `status.selector`).
fn selector_string(s: &LabelSelector) -> String {
    let mut parts: Vec<String> = s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            op => panic!("selector operator {op}"),
        });
    }
    parts.join(",")
}

/// Whether `labels` satisfy `s` (test-side, independent of the adapter's selector code).
fn selects(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    s.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().flatten().all(|e| {
            let values = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
                "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
                "Exists" => labels.contains_key(&e.key),
                "DoesNotExist" => !labels.contains_key(&e.key),
                op => panic!("selector operator {op}"),
            }
        })
}

fn labels_of(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

/// The workload an HPA scales, found in the examples.
fn scale_target<'a>(docs: &'a [Value], m: &HpaMetric) -> &'a Value {
    let (api_version, kind, name) = &m.scale_target;
    docs.iter()
        .find(|d| {
            d["apiVersion"] == api_version.as_str()
                && kind_is(d, kind)
                && name_of(d) == name
                && namespace_of(d) == m.namespace
        })
        .unwrap_or_else(|| {
            panic!("HPA {}: scale target {kind} {}/{name} ({api_version}) is not in the examples", m.hpa, m.namespace)
        })
}

fn selector_of(workload: &Value) -> LabelSelector {
    serde_json::from_value(workload["spec"]["selector"].clone())
        .unwrap_or_else(|e| panic!("{} {}: selector: {e}", workload["kind"], name_of(workload)))
}

// ---------------------------------------------------------------------------------------
// Rendering and validation
// ---------------------------------------------------------------------------------------

fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"].iter().map(|f| dir.join(f)).find(|p| p.exists())
}

/// Every directory under `root` (itself included), depth first.
fn dirs_under(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let mut children: Vec<PathBuf> =
            std::fs::read_dir(&out[i]).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
        children.sort();
        out.extend(children);
        i += 1;
    }
    out
}

/// The kustomizations under deploy/examples that no other one includes: what users apply.
/// Also returns every file some kustomization lists.
fn entry_points() -> (Vec<PathBuf>, BTreeSet<PathBuf>) {
    let kustomizations: Vec<PathBuf> =
        dirs_under(&examples_dir()).into_iter().filter(|d| kustomization_file(d).is_some()).collect();
    let mut included = BTreeSet::new();
    let mut listed = BTreeSet::new();
    for dir in &kustomizations {
        let text = std::fs::read_to_string(kustomization_file(dir).unwrap()).unwrap();
        let k = documents(&text).pop().unwrap();
        for r in k["resources"].as_array().into_iter().flatten() {
            let p = dir.join(r.as_str().unwrap()).canonicalize().unwrap();
            if p.is_dir() {
                included.insert(p)
            } else {
                listed.insert(p)
            };
        }
    }
    let roots = kustomizations.into_iter().filter(|d| !included.contains(&d.canonicalize().unwrap())).collect();
    (roots, listed)
}

fn kubernetes_validate() -> PathBuf {
    let found = match std::env::var_os("KUBERNETES_VALIDATE") {
        Some(p) => Some(PathBuf::from(p)).filter(|p| p.is_file()),
        None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("kubernetes-validate"))
            .find(|p| p.is_file()),
    };
    found.unwrap_or_else(|| {
        panic!(
            "this test needs kubernetes-validate (PyPI): pip install kubernetes-validate, \
             or point KUBERNETES_VALIDATE at it"
        )
    })
}

#[test]
fn every_example_renders_and_passes_strict_validation() {
    let (roots, listed) = entry_points();
    assert!(roots.contains(&examples_dir()), "deploy/examples must be a kustomization users apply: {roots:?}");

    // Every manifest is applied by some kustomization (and so validated below).
    for dir in dirs_under(&examples_dir()) {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            let yaml = p.extension().is_some_and(|e| e == "yaml" || e == "yml");
            if yaml && kustomization_file(&dir).as_deref() != Some(p.as_path()) {
                assert!(listed.contains(&p.canonicalize().unwrap()), "{} is in no kustomization", p.display());
            }
        }
    }

    // Kustomizations applied after deploy/examples (an alternative HPA, say) may use the
    // namespaces it creates.
    let examples_text =
        try_render_text(&examples_dir()).unwrap_or_else(|e| panic!("kubectl kustomize deploy/examples: {e}"));
    let examples_docs = documents(&examples_text);
    let from_examples: BTreeSet<&str> = examples_docs.iter().filter(|d| kind_is(d, "Namespace")).map(name_of).collect();
    let validate = kubernetes_validate();
    for root in &roots {
        let shown = root.strip_prefix(repo()).unwrap().display().to_string();
        let text = try_render_text(root).unwrap_or_else(|e| panic!("kubectl kustomize {shown}: {e}"));
        let mut child = std::process::Command::new(&validate)
            .args(["--strict", "-k", "1.33.0", "--quiet", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubernetes-validate --strict -k 1.33.0 on {shown}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        // What a schema does not say but the API server or `kubectl apply` would refuse.
        let docs = documents(&text);
        assert!(!docs.is_empty(), "{shown} renders nothing");
        let created: BTreeSet<&str> = docs.iter().filter(|d| kind_is(d, "Namespace")).map(name_of).collect();
        for d in &docs {
            let what = format!("{shown}: {} {}", d["kind"].as_str().unwrap(), name_of(d));
            if CLUSTER_SCOPED.contains(&d["kind"].as_str().unwrap()) {
                assert!(namespace_of(d).is_empty(), "{what}: cluster-scoped, names a namespace");
                continue;
            }
            let ns = namespace_of(d);
            assert!(!ns.is_empty(), "{what} names no namespace (it would land in the user's current one)");
            let after_examples = *root != examples_dir() && from_examples.contains(ns);
            assert!(
                created.contains(ns) || EXTERNAL_NAMESPACES.contains(&ns) || after_examples,
                "{what}: namespace {ns} is neither created by {shown} (or deploy/examples) nor expected to exist"
            );
            if d["spec"]["template"].is_object() && d["spec"]["selector"].is_object() {
                let labels = labels_of(&d["spec"]["template"]["metadata"]["labels"]);
                assert!(selects(&selector_of(d), &labels), "{what}: the selector does not select its own template");
            }
            let pod_spec = if kind_is(d, "Pod") { &d["spec"] } else { &d["spec"]["template"]["spec"] };
            for c in pod_spec["containers"].as_array().into_iter().flatten() {
                assert!(
                    c["image"].as_str().is_some_and(|i| !i.is_empty()),
                    "{what}: container {} has no image",
                    c["name"]
                );
            }
            if kind_is(d, "Job") {
                let policy = pod_spec["restartPolicy"].as_str().unwrap_or("Always");
                assert!(["Never", "OnFailure"].contains(&policy), "{what}: a Job's pods may not restart {policy}");
            }
        }
    }
}

#[test]
fn the_seeds_workloads_are_there_as_the_seed_wrote_them() {
    let docs = render(&examples_dir());
    let find = |kind: &str, ns: &str, name: &str| -> &Value {
        docs.iter()
            .find(|d| kind_is(d, kind) && namespace_of(d) == ns && name_of(d) == name)
            .unwrap_or_else(|| panic!("no {kind} {ns}/{name} in deploy/examples"))
    };

    // The seed's inference-hpa, exactly (as it appears in the article).
    let hpa = find("HorizontalPodAutoscaler", "ai-inference", "inference-hpa");
    let seed_spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "inference-pool"},
        "minReplicas": 2,
        "maxReplicas": 20,
        "metrics": [
            {"type": "Pods", "pods": {"metric": {"name": "gpu_utilization"}, "target": {"type": "AverageValue", "averageValue": "70"}}},
            {"type": "Pods", "pods": {"metric": {"name": "request_latency_ms"}, "target": {"type": "AverageValue", "averageValue": "200"}}}
        ],
        "behavior": {
            "scaleUp": {"stabilizationWindowSeconds": 60, "policies": [{"type": "Percent", "value": 50, "periodSeconds": 120}]},
            "scaleDown": {"stabilizationWindowSeconds": 300, "policies": [{"type": "Percent", "value": 25, "periodSeconds": 300}]}
        }
    });
    assert_eq!(hpa["spec"], seed_spec);

    let pool = find("Deployment", "ai-inference", "inference-pool");
    assert_eq!(pool["spec"]["replicas"], 8);
    assert_eq!(pool["spec"]["selector"], json!({"matchLabels": {"app": "inference"}}));
    let c = &pool["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "vllm/vllm-openai:latest");
    assert_eq!(c["resources"]["limits"], json!({"nvidia.com/gpu": 1}));
    assert_eq!(c["env"][0], json!({"name": "MODEL_NAME", "value": "Qwen/Qwen2.5-7B-Instruct"}));

    let llm = find("Pod", "ai-inference", "llm-inference-70b");
    assert_eq!(llm["metadata"]["labels"]["workload"], "llm-inference");
    assert_eq!(llm["spec"]["containers"][0]["resources"]["limits"], json!({"nvidia.com/mig-3g.40gb": 1}));
    let embedding = find("Pod", "ai-inference", "embedding-service");
    assert_eq!(embedding["metadata"]["labels"]["workload"], "light-inference");
    assert_eq!(embedding["spec"]["containers"][0]["resources"]["limits"], json!({"nvidia.com/mig-1g.10gb": 1}));
    let mps = find("Pod", "ai-training", "training-job-mps");
    assert_eq!(mps["spec"]["containers"][0]["resources"]["limits"], json!({"nvidia.com/gpu": 1}));

    for (name, value) in [("gpu-critical", 1_000_000), ("gpu-high", 900_000), ("gpu-low", 100_000)] {
        let pc = find("PriorityClass", "", name);
        assert_eq!((&pc["value"], &pc["globalDefault"]), (&json!(value), &json!(false)), "{name}");
    }
    let online = find("Deployment", "team-a", "online-inference");
    assert_eq!(online["spec"]["template"]["spec"]["priorityClassName"], "gpu-critical");
    assert_eq!(
        online["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"],
        json!({"nvidia.com/mig-3g.40gb": 1})
    );
    let offline = find("Job", "team-b", "offline-training");
    assert_eq!(offline["spec"]["template"]["spec"]["priorityClassName"], "gpu-low");
    assert_eq!(
        offline["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"],
        json!({"nvidia.com/gpu": 4})
    );
    let quota_a = find("ResourceQuota", "team-a", "gpu-quota-team-a");
    assert_eq!(quota_a["spec"]["hard"]["requests.nvidia.com/gpu"], "8");
    assert_eq!(quota_a["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"], "14");
    let quota_b = find("ResourceQuota", "team-b", "gpu-quota-team-b");
    assert_eq!(quota_b["spec"]["hard"]["requests.nvidia.com/mig-3g.40gb"], "2");

    // What the seed replaced is not shipped.
    for d in &docs {
        let kind = d["kind"].as_str().unwrap();
        assert!(
            !["dcgm-exporter", "gpu-monitor-config", "gpu-health-monitor", "nvidia-device-plugin-daemonset"]
                .contains(&name_of(d)),
            "{kind} {} is replaced by gpu-telemetry's install",
            name_of(d)
        );
        assert!(kind != "MigManager", "MigManager is not a GPU operator resource");
    }

    // The GPU operator's configuration, in its own kustomization.
    let operator = render(&examples_dir().join("gpu-operator"));
    let data = |name: &str, key: &str| -> Value {
        let cm = operator
            .iter()
            .find(|d| kind_is(d, "ConfigMap") && name_of(d) == name && namespace_of(d) == "gpu-operator")
            .unwrap_or_else(|| panic!("no ConfigMap gpu-operator/{name}"));
        let text = cm["data"][key].as_str().unwrap_or_else(|| panic!("ConfigMap {name} has no {key}"));
        documents(text).pop().unwrap()
    };
    let ts = data("gpu-time-slicing-config", "config.yaml");
    assert_eq!(
        ts["sharing"]["timeSlicing"]["resources"],
        json!([{"name": "nvidia.com/gpu", "replicas": 4, "devices": "all"}])
    );
    let mps = data("gpu-mps-config", "config.yaml");
    assert_eq!(
        mps["sharing"]["mps"]["resources"],
        json!([{"name": "nvidia.com/gpu", "replicas": 2, "devices": "all"}])
    );
    let mig = data("nvidia-mig-config", "config.yaml");
    let layouts: Vec<&String> = mig["mig-configs"].as_object().unwrap().keys().collect();
    assert_eq!(layouts, ["all-1g.10gb", "all-2g.20gb", "all-3g.40gb", "mixed"]);
    assert_eq!(
        mig["mig-configs"]["mixed"][0],
        json!({"devices": [0], "mig-enabled": true, "mig-devices": {"3g.40gb": 2}})
    );
    assert_eq!(
        mig["mig-configs"]["mixed"][1],
        json!({"devices": [1], "mig-enabled": true, "mig-devices": {"1g.10gb": 7}})
    );
    assert_eq!(mig["mig-configs"]["mixed"][2], json!({"devices": [2, 3], "mig-enabled": false}));
}

#[test]
fn an_hpa_metric_nobody_serves_fails_the_check() {
    let hpa = |metrics: Value| {
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "h", "namespace": "ai-inference"},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "inference-pool"},
                        "maxReplicas": 3, "metrics": metrics}})
    };
    let pods = |name: &str| json!({"type": "Pods", "pods": {"metric": {"name": name}, "target": {"type": "AverageValue", "averageValue": "1"}}});
    let plans = |metrics: Value| -> Vec<Result<Served, String>> {
        hpa_metrics(&[hpa(metrics)]).iter().map(|m| plan(m).map(|c| c.served)).collect()
    };

    assert_eq!(
        plans(json!([pods("gpu_utilization"), pods("request_latency_ms")])),
        [Ok(Served::GpuUtilizationFromExporters), Ok(Served::PrometheusRule)]
    );
    let unknown = plans(json!([pods("queue_depth")]));
    assert!(unknown[0].as_ref().unwrap_err().contains("queue_depth: nobody is known to serve it"), "{unknown:?}");
    let external = plans(
        json!([{"type": "External", "external": {"metric": {"name": "gpu_utilization"}, "target": {"type": "Value", "value": "1"}}}]),
    );
    assert!(external[0].as_ref().unwrap_err().contains("nobody serves it"), "{external:?}");
    let resource = plans(
        json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]),
    );
    assert!(resource[0].is_err(), "{resource:?}");
}

// ---------------------------------------------------------------------------------------
// The metrics, served
// ---------------------------------------------------------------------------------------

/// The shipped rules: `rules.yaml` of every ConfigMap named gpu-metrics-adapter-rules (or
/// kustomize's `<name>-<hash>`) in a YAML file under deploy/ or in the render of a
/// kustomization there, deploy/examples left out. One entry per distinct text, with where
/// it was first found.
fn shipped_rules() -> Vec<(String, String)> {
    let deploy = repo().join("deploy");
    let is_rules = |d: &Value| {
        kind_is(d, "ConfigMap")
            && name_of(d).strip_prefix(RULES_CONFIGMAP).is_some_and(|rest| {
                rest.is_empty()
                    || rest
                        .strip_prefix('-')
                        .is_some_and(|h| h.len() == 10 && h.bytes().all(|b| b.is_ascii_alphanumeric()))
            })
    };
    let mut found: Vec<(String, String)> = Vec::new();
    let mut add = |place: String, docs: Vec<Value>| {
        for d in docs.iter().filter(|d| is_rules(d)) {
            let text = d["data"][RULES_KEY]
                .as_str()
                .unwrap_or_else(|| panic!("{place}: ConfigMap {} has no {RULES_KEY}", name_of(d)))
                .to_owned();
            if !found.iter().any(|(_, t)| *t == text) {
                found.push((place.clone(), text));
            }
        }
    };
    for dir in dirs_under(&deploy).into_iter().filter(|d| !d.starts_with(examples_dir())) {
        let shown = dir.strip_prefix(repo()).unwrap().display().to_string();
        if let Some(k) = kustomization_file(&dir) {
            let kind = documents(&std::fs::read_to_string(&k).unwrap()).pop().unwrap_or_default();
            if kind["kind"] != "Component" {
                match try_render_text(&dir) {
                    Ok(text) => add(format!("kubectl kustomize {shown}"), documents(&text)),
                    Err(e) => eprintln!("note: {shown} does not render on its own, files searched instead: {e}"),
                }
            }
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                let text = std::fs::read_to_string(&p).unwrap();
                // A file that is not plain YAML (a template, a patch) holds no ConfigMap.
                add(p.strip_prefix(repo()).unwrap().display().to_string(), try_documents(&text).unwrap_or_default());
            }
        }
    }
    found
}

/// The pods of the simulated scenario: (namespace, name, labels as the scenario writes them).
fn scenario_pods() -> Vec<(String, String, BTreeMap<String, String>)> {
    let scenario = documents(&std::fs::read_to_string(repo().join(SCENARIO)).unwrap()).pop().unwrap();
    scenario["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["namespace"].as_str().unwrap().into(), p["name"].as_str().unwrap().into(), labels_of(&p["labels"])))
        .collect()
}

/// The labels the API server would report for a scenario pod: those of the example that
/// makes it (a Deployment's template plus `pod-template-hash`, or a Pod's own), else the
/// scenario's.
fn api_labels(docs: &[Value], ns: &str, name: &str, scenario: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    for d in docs.iter().filter(|d| namespace_of(d) == ns) {
        if kind_is(d, "Pod") && name_of(d) == name {
            return labels_of(&d["metadata"]["labels"]);
        }
        if kind_is(d, "Deployment")
            && let Some((hash, suffix)) =
                name.strip_prefix(&format!("{}-", name_of(d))).and_then(|rest| rest.split_once('-'))
            && !hash.is_empty()
            && !suffix.is_empty()
            && !suffix.contains('-')
        {
            let mut labels = labels_of(&d["spec"]["template"]["metadata"]["labels"]);
            labels.insert("pod-template-hash".into(), hash.into());
            return labels;
        }
    }
    scenario.clone()
}

/// GET over plain HTTP/1.0 (the exporter's /metrics).
async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The exporter's per-pod GPU utilization, averaged per (namespace, pod).
fn exporter_pod_utilization(exposition: &str) -> BTreeMap<(String, String), f64> {
    let mut per_pod: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for family in ["gpu_pod_utilization", "gpu_utilization"] {
        for (labels, v) in series(exposition, family) {
            if let (Some(ns), Some(pod)) = (label(&labels, "namespace"), label(&labels, "pod")) {
                per_pod.entry((ns.into(), pod.into())).or_default().push(v);
            }
        }
    }
    per_pod.into_iter().map(|(k, v)| (k, v.iter().sum::<f64>() / v.len() as f64)).collect()
}

/// The value the in-test application reports for the `i`-th pod: distinct, with a
/// fractional part the milli-precision answer must keep.
fn app_value(i: usize) -> f64 {
    150.0 + 12.25 * i as f64
}

/// `name -> (namespace, pod) -> value`: the series the in-test application serves for
/// every metric checked through Prometheus: each scenario pod, plus a pod in another
/// namespace named like the first, which must never be answered.
fn app_series(
    metrics: &[&str],
    pods: &[(String, String, BTreeMap<String, String>)],
) -> BTreeMap<String, BTreeMap<(String, String), f64>> {
    metrics
        .iter()
        .map(|m| {
            let mut values: BTreeMap<(String, String), f64> =
                pods.iter().enumerate().map(|(i, (ns, pod, _))| ((ns.clone(), pod.clone()), app_value(i))).collect();
            values.insert(("elsewhere".into(), pods[0].1.clone()), 99_999.0);
            ((*m).to_owned(), values)
        })
        .collect()
}

fn exposition(series: &BTreeMap<String, BTreeMap<(String, String), f64>>) -> String {
    let mut out = String::new();
    for (name, values) in series {
        out.push_str(&format!("# TYPE {name} gauge\n"));
        for ((ns, pod), v) in values {
            out.push_str(&format!("{name}{{namespace=\"{ns}\",pod=\"{pod}\"}} {v}\n"));
        }
    }
    out
}

/// `describedObject.name -> value` of a MetricValueList, checking each item's shape.
fn answered(list: &Value, m: &HpaMetric) -> BTreeMap<String, f64> {
    assert_eq!(list["kind"], "MetricValueList", "{list}");
    assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta2");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["describedObject"]["kind"], "Pod", "{i}");
            assert_eq!(i["describedObject"]["namespace"], m.namespace.as_str(), "{i}");
            assert_eq!(i["metric"]["name"], m.name.as_str(), "{i}");
            (i["describedObject"]["name"].as_str().unwrap().to_owned(), quantity(i["value"].as_str().unwrap()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_an_example_hpa_names_is_served_as_shipped_from_prometheus_2() {
    every_metric_served_as_shipped(Flavour::V2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_an_example_hpa_names_is_served_as_shipped_from_prometheus_3() {
    every_metric_served_as_shipped(Flavour::V3).await;
}

async fn every_metric_served_as_shipped(flavour: Flavour) {
    let docs = render(&examples_dir());
    let metrics = hpa_metrics(&docs);
    assert!(!metrics.is_empty(), "no HPA in deploy/examples");
    let checks: Vec<Check> = metrics.iter().map(|m| plan(m).unwrap_or_else(|e| panic!("{e}"))).collect();
    let rules = shipped_rules();
    assert!(!rules.is_empty(), "no ConfigMap {RULES_CONFIGMAP} with {RULES_KEY} under deploy/");

    // The cluster: pods as the API server reports them, exporters on the simulated node.
    let pods: Vec<(String, String, BTreeMap<String, String>)> = scenario_pods()
        .into_iter()
        .map(|(ns, name, labels)| {
            let labels = api_labels(&docs, &ns, &name, &labels);
            (ns, name, labels)
        })
        .collect();
    let node = tokio::task::spawn_blocking(|| {
        SimulatedNode::start_with("gpu-node-1", &repo().join(SCENARIO), FROZEN_AT, NodeOptions::default())
    })
    .await
    .unwrap();

    // The application's metrics, in a real Prometheus.
    let prometheus_metrics: BTreeSet<&str> =
        checks.iter().filter(|c| c.served == Served::PrometheusRule).map(|c| c.metric.name.as_str()).collect();
    let app_values = app_series(&prometheus_metrics.iter().copied().collect::<Vec<_>>(), &pods);
    let app = Exporter::start(Behavior::Serve(exposition(&app_values))).await;
    let prom = Launch::new(flavour).scrape_honoring_labels("app", &[app.addr]).start_async().await;
    for (name, values) in &app_values {
        prom.wait_for_series_async(name, values.len()).await;
    }

    let pki = Pki::new();
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    for (ns, name, labels) in &pods {
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        fake.add_labelled_pod(ns, name, &labels);
    }
    fake.set_policy(|user, spec| {
        let ra = &spec["resourceAttributes"];
        let ok = user == HPA_USER && ra["group"] == "custom.metrics.k8s.io" && ra["verb"] == "get";
        (
            ok,
            if ok {
                "RBAC: allowed by ClusterRoleBinding hpa-controller-gpu-custom-metrics".into()
            } else {
                String::new()
            },
        )
    });
    let api = fake.serve().await;
    let kubeconfig = support::adapter_kubeconfig(api, pki.dir.path());
    let aggregator = tls_client(&pki, Some(&pki.front_proxy_client));
    let anonymous = tls_client(&pki, None);
    let headers = hpa_headers();

    for (where_found, rules_text) in &rules {
        let rules_file = pki.write("rules.yaml", rules_text);
        let mut flags = pki.serving_args();
        flags.extend([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--exporter-url={}", node.metrics_url()),
            "--scrape-interval=1s".into(),
            format!("--prometheus-url={}", prom.url()),
            format!("--prometheus-rules-file={}", rules_file.display()),
        ]);
        let adapter = support::start(&flags).await;
        support::eventually("readyz", Duration::from_secs(30), async || {
            get(&anonymous, adapter.addr, "/readyz", &[]).await.status == 200
        })
        .await;

        for check in &checks {
            let m = &check.metric;
            let what = format!("HPA {}/{} metric {} (rules from {where_found})", m.namespace, m.hpa, m.name);
            assert_eq!(m.target.type_, "AverageValue", "{what}: a Pods metric's target is an AverageValue");
            let target = quantity(&m.target.average_value.as_ref().unwrap().0);

            // The pods the controller asks about: the scale target's selector.
            let workload = scale_target(&docs, m);
            let selector = selector_of(workload);
            let selected: BTreeSet<String> = pods
                .iter()
                .filter(|(ns, _, labels)| *ns == m.namespace && selects(&selector, labels))
                .map(|(_, name, _)| name.clone())
                .collect();
            let replicas = workload["spec"]["replicas"].as_u64().unwrap_or(1);
            assert_eq!(
                selected.len() as u64,
                replicas,
                "{what}: the simulated node runs {} pods of {} {}, the example {replicas}: keep {SCENARIO} in step",
                selected.len(),
                workload["kind"],
                name_of(workload)
            );

            // Discovery lists it, as the controller's REST mapper needs.
            let resource = format!("pods/{}", m.name);
            support::eventually(&format!("{what} in discovery"), Duration::from_secs(30), async || {
                let d = get(&aggregator, adapter.addr, "/apis/custom.metrics.k8s.io/v1beta2", &headers).await;
                d.status == 200
                    && d.json()["resources"].as_array().unwrap().iter().any(|r| r["name"] == resource.as_str())
            })
            .await;

            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("labelSelector", &selector_string(&selector))
                .finish();
            let path =
                format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/pods/*/{}?{query}", m.namespace, m.name);
            let mut got = BTreeMap::new();
            support::eventually(
                &format!("{what}: a value for every selected pod"),
                Duration::from_secs(30),
                async || {
                    let a = get(&aggregator, adapter.addr, &path, &headers).await;
                    assert!(a.status == 200 || a.status == 404, "{what}: {} {}", a.status, a.body);
                    got = if a.status == 200 { answered(&a.json(), m) } else { BTreeMap::new() };
                    selected.iter().all(|p| got.contains_key(p))
                },
            )
            .await;
            let answered_pods: BTreeSet<String> = got.keys().cloned().collect();
            assert_eq!(answered_pods, selected, "{what}: answered for exactly the selected pods");

            let expected: BTreeMap<String, f64> = match check.served {
                Served::GpuUtilizationFromExporters => {
                    let text = http_get(&node.exporter.to_string(), "/metrics").await;
                    let per_pod = exporter_pod_utilization(&text);
                    selected
                        .iter()
                        .map(|p| {
                            let v = per_pod.get(&(m.namespace.clone(), p.clone()));
                            (p.clone(), *v.unwrap_or_else(|| panic!("{what}: the exporter reports nothing for {p}")))
                        })
                        .collect()
                }
                Served::PrometheusRule => selected
                    .iter()
                    .map(|p| (p.clone(), app_values[&m.name][&(m.namespace.clone(), p.clone())]))
                    .collect(),
            };
            for (pod, want) in &expected {
                assert!((got[pod] - want).abs() < 1e-3, "{what}: {pod} answered {}, expected {want}", got[pod]);
            }
            let mean = got.values().sum::<f64>() / got.len() as f64;
            eprintln!(
                "{what}: {} pods, mean {mean:.3} against target {target}: the controller's ratio {:.3}",
                got.len(),
                mean / target
            );
        }
        adapter.stop().await;
    }
    drop(node);
}
