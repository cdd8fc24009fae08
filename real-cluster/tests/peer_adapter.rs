//! Our adapter against the real prometheus-adapter (v0.12.0), with one configuration file
//! in prometheus-adapter's format, unchanged: each adapter in turn behind the real
//! aggregator, with the same identity and rights (`deploy/base`), the same Prometheus
//! (3.x) and the same objects, asked the same questions through the API server on
//! `custom.metrics.k8s.io` v1beta1 and v1beta2 and `external.metrics.k8s.io` v1beta1:
//! discovery and every answer are compared.
//!
//! The configuration is the kind a cluster runs: rates over counters, name matches,
//! resource overrides (dcgm-exporter's `exported_*` and `Hostname` included) and a
//! template, a series filter, a namespace's own metric, and external rules, one of them
//! `namespaced: false`; the questions select pods, nodes, Services, Deployments and Jobs
//! by name, by `*` and by label, and ask for objects that do not exist but whose series
//! Prometheus still has (a deleted pod, a Service never created, a node gone).
//!
//! An answer may differ only where docs/replacing-prometheus-adapter.md ("What is
//! different or not supported") says so: [`DOCUMENTED`] holds each such question with
//! the words of the doc that explain it. A difference not listed fails, and so does a
//! listed one that no longer differs (the list must say what is true). Values are
//! compared within a part in a thousand: rates are computed by each Prometheus query a
//! moment apart, and prometheus-adapter truncates values to thousandths where we round.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use test_support::app_metrics::serve_page;
use test_support::control_plane::{ControlPlane, unscheduled_pod};
use test_support::joined::{Adapter, AdapterOptions, base_with_external_metrics};
use test_support::peer_adapter::PeerAdapter;
use test_support::prometheus::{Flavour, Launch};
use test_support::simulated::{wait_until_ok, workspace};

/// prometheus-adapter's configuration, as a cluster would write it.
const CONFIG: &str = r#"
rules:
  # A counter per pod, as a rate; the status code stays a label to select on.
  - seriesQuery: 'http_requests_total{namespace!="",pod!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    name:
      matches: "^(.*)_total$"
      as: "${1}_per_second"
    metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)'
  # dcgm-exporter's series: the pod in exported_*, the node in Hostname.
  - seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_pod!=""}'
    resources:
      overrides:
        exported_namespace: {resource: namespace}
        exported_pod: {resource: pod}
        Hostname: {resource: node}
    name:
      matches: "^DCGM_FI_DEV_GPU_UTIL$"
      as: "dcgm_gpu_utilization"
    metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
  # A node's gauge.
  - seriesQuery: 'node_gpu_temperature_celsius{node!=""}'
    resources:
      overrides:
        node: {resource: node}
    metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
  # Workload gauges whose labels are named after their kind.
  - seriesQuery: '{__name__=~"^workload_.*",namespace!=""}'
    resources:
      template: "<<.Resource>>"
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
  # A Job's GPU time as a rate (job_name: Prometheus owns "job").
  - seriesQuery: 'job_gpu_seconds_total{namespace!="",job_name!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
        job_name: {group: batch, resource: job}
    name:
      matches: "^job_(.*)_seconds_total$"
      as: "job_${1}_usage"
    metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)'
  # A namespace's own gauge.
  - seriesQuery: 'namespace_gpu_quota_used{namespace!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
  # Application counters, the debug ones filtered out.
  - seriesQuery: '{__name__=~"^app_.*_total$",namespace!="",pod!=""}'
    seriesFilters:
      - isNot: "^app_debug_.*"
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    name:
      matches: "^app_(.*)_total$"
      as: "${1}_per_second"
    metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)'
externalRules:
  - seriesQuery: 'queue_messages_ready{namespace!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
  - seriesQuery: 'cluster_gpus_free'
    resources:
      namespaced: false
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (pool)'
  - seriesQuery: 'requests_dropped_total{namespace!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
    name:
      matches: "^(.*)_total$"
      as: "${1}_per_second"
    metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (service)'
"#;

/// The pods that exist: namespace, name, labels.
const PODS: [(&str, &str, &str); 8] = [
    ("ai-inference", "inference-0", "{app: inference, tier: a}"),
    ("ai-inference", "inference-1", "{app: inference, tier: a}"),
    ("ai-inference", "inference-2", "{app: inference, tier: b}"),
    ("ai-inference", "inference-3", "{app: inference, tier: b}"),
    ("ai-inference", "batch-0", "{app: batch}"),
    ("ai-inference", "batch-1", "{app: batch}"),
    ("web", "web-0", "{app: web}"),
    ("web", "web-1", "{app: web}"),
];

/// Pods Prometheus still has series of, which the API server does not list.
const GONE_PODS: [(&str, &str); 2] = [("ai-inference", "inference-gone"), ("web", "web-gone")];

/// Differences docs/replacing-prometheus-adapter.md explains: a question (a part of its
/// path) and the words of the doc's entry.
const DOCUMENTED: [(&str, &str); 1] =
    [("metricLabelSelector=code!=500", "**`metricLabelSelector` with `!=`** (`?metricLabelSelector=code!=500`)")];

/// The objects both adapters see: namespaces, nodes, pods that stay unscheduled (a
/// scheduler nobody runs), Services, Deployments of no replicas, suspended Jobs.
fn objects() -> String {
    let mut yaml = String::new();
    for (name, team) in [("ai-inference", "ml"), ("web", "web"), ("empty-ns", "none")] {
        let _ = write!(
            yaml,
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{team: {team}}}}}\n"
        );
    }
    for (name, pool) in [("gpu-node-a", "gpu"), ("gpu-node-b", "gpu"), ("cpu-node-c", "cpu")] {
        let _ = write!(yaml, "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{pool: {pool}}}}}\n");
    }
    for (namespace, name, labels) in PODS {
        yaml.push_str(&unscheduled_pod(namespace, name, labels));
    }
    for (namespace, name, app) in
        [("ai-inference", "inference", "inference"), ("ai-inference", "batch", "batch"), ("web", "frontend", "web")]
    {
        let _ = write!(
            yaml,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {namespace}, labels: {{app: {app}}}}}\n\
             spec: {{ports: [{{port: 80}}], selector: {{app: {app}}}}}\n"
        );
    }
    for (namespace, name, app) in [
        ("ai-inference", "inference-pool", "inference"),
        ("ai-inference", "batch-pool", "batch"),
        ("web", "frontend", "web"),
    ] {
        let _ = write!(
            yaml,
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {namespace}, labels: {{app: {app}}}}}\n\
             spec:\n  replicas: 0\n  selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    \
             spec: {{containers: [{{name: app, image: registry.invalid/app:1}}]}}\n"
        );
    }
    for (name, kind) in [("train-llm", "train"), ("eval-llm", "eval")] {
        let _ = write!(
            yaml,
            "---\napiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}, namespace: ai-inference, labels: {{kind: {kind}}}}}\n\
             spec:\n  suspend: true\n  template:\n    spec: {{restartPolicy: Never, containers: [{{name: app, image: registry.invalid/app:1}}]}}\n"
        );
    }
    yaml
}

/// The exposition Prometheus scrapes: a counter growing at `r` per second is `r` times
/// the time of the scrape to the millisecond (Prometheus stamps the sample with the
/// scrape's start, a millisecond or so earlier), so that its rate is `r` at any moment
/// to a few parts in a million.
fn page() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let counter = |rate: f64| rate * now;
    let mut out = String::new();
    let mut line = |series: String, value: f64| {
        let _ = writeln!(out, "{series} {value}");
    };
    let pods = PODS.iter().map(|(ns, pod, _)| (*ns, *pod)).chain(GONE_PODS);
    for (i, (namespace, pod)) in pods.enumerate() {
        let i = i as f64;
        line(
            format!("http_requests_total{{namespace=\"{namespace}\",pod=\"{pod}\",code=\"200\"}}"),
            counter(0.5 * (i + 1.0)),
        );
        line(format!("http_requests_total{{namespace=\"{namespace}\",pod=\"{pod}\",code=\"500\"}}"), counter(0.25));
        line(
            format!("app_tokens_generated_total{{namespace=\"{namespace}\",pod=\"{pod}\"}}"),
            counter(100.0 * (i + 1.0)),
        );
        line(format!("app_debug_events_total{{namespace=\"{namespace}\",pod=\"{pod}\"}}"), counter(1.0));
        let host = if pod.ends_with("gone") {
            "gone-node"
        } else if i % 2.0 == 0.0 {
            "gpu-node-a"
        } else {
            "gpu-node-b"
        };
        line(
            format!(
                "DCGM_FI_DEV_GPU_UTIL{{exported_namespace=\"{namespace}\",exported_pod=\"{pod}\",Hostname=\"{host}\",gpu=\"0\"}}"
            ),
            10.0 * (i + 1.0),
        );
    }
    for (node, celsius) in [("gpu-node-a", 61.0), ("gpu-node-b", 67.0), ("gone-node", 70.0)] {
        line(format!("node_gpu_temperature_celsius{{node=\"{node}\"}}"), celsius);
    }
    for (namespace, deployment, depth) in [
        ("ai-inference", "inference-pool", 12.0),
        ("ai-inference", "batch-pool", 3.0),
        ("ai-inference", "old-pool", 9.0),
        ("web", "frontend", 5.0),
    ] {
        line(format!("workload_queue_depth{{namespace=\"{namespace}\",deployment=\"{deployment}\"}}"), depth);
    }
    for (namespace, service, inflight) in [
        ("ai-inference", "inference", 40.0),
        ("ai-inference", "batch", 2.0),
        ("ai-inference", "gone-svc", 7.0),
        ("web", "frontend", 11.0),
    ] {
        line(format!("workload_inflight_requests{{namespace=\"{namespace}\",service=\"{service}\"}}"), inflight);
    }
    for (job, rate) in [("train-llm", 8.0), ("eval-llm", 2.0), ("old-job", 4.0)] {
        line(format!("job_gpu_seconds_total{{namespace=\"ai-inference\",job_name=\"{job}\"}}"), counter(rate));
    }
    for (namespace, used) in [("ai-inference", 10.0), ("web", 2.0), ("gone-ns", 4.0)] {
        line(format!("namespace_gpu_quota_used{{namespace=\"{namespace}\"}}"), used);
    }
    for (namespace, queue, ready) in
        [("ai-inference", "jobs", 40.0), ("ai-inference", "prio", 7.0), ("web", "mail", 3.0)]
    {
        line(format!("queue_messages_ready{{namespace=\"{namespace}\",queue=\"{queue}\"}}"), ready);
    }
    for (pool, free) in [("a100", 5.0), ("h100", 2.0)] {
        line(format!("cluster_gpus_free{{pool=\"{pool}\"}}"), free);
    }
    for (namespace, service, rate) in [("ai-inference", "inference", 0.5), ("web", "frontend", 1.5)] {
        line(format!("requests_dropped_total{{namespace=\"{namespace}\",service=\"{service}\"}}"), counter(rate));
    }
    out
}

/// Every question, as paths below the API server.
fn questions() -> Vec<String> {
    let custom = [
        "",
        "/namespaces/ai-inference/pods/*/http_requests_per_second",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?labelSelector=app=inference",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?labelSelector=app%20in%20(inference,batch),tier!=b",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?labelSelector=app=nothing",
        "/namespaces/ai-inference/pods/inference-1/http_requests_per_second",
        "/namespaces/ai-inference/pods/inference-gone/http_requests_per_second",
        "/namespaces/ai-inference/pods/no-such-pod/http_requests_per_second",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?metricLabelSelector=code=500",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?metricLabelSelector=code!=500",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?metricLabelSelector=code%20in%20(200)",
        "/namespaces/ai-inference/pods/*/http_requests_per_second?labelSelector=app=batch&metricLabelSelector=code=200",
        "/namespaces/web/pods/*/http_requests_per_second",
        "/namespaces/empty-ns/pods/*/http_requests_per_second",
        "/namespaces/ai-inference/pods/*/dcgm_gpu_utilization",
        "/namespaces/ai-inference/pods/*/dcgm_gpu_utilization?labelSelector=tier=a",
        "/nodes/*/dcgm_gpu_utilization",
        "/nodes/*/node_gpu_temperature_celsius",
        "/nodes/*/node_gpu_temperature_celsius?labelSelector=pool=gpu",
        "/nodes/gpu-node-b/node_gpu_temperature_celsius",
        "/nodes/gone-node/node_gpu_temperature_celsius",
        "/namespaces/ai-inference/services/*/workload_inflight_requests",
        "/namespaces/ai-inference/services/*/workload_inflight_requests?labelSelector=app=inference",
        "/namespaces/ai-inference/services/inference/workload_inflight_requests",
        "/namespaces/ai-inference/services/gone-svc/workload_inflight_requests",
        "/namespaces/ai-inference/deployments.apps/*/workload_queue_depth",
        "/namespaces/ai-inference/deployments.apps/*/workload_queue_depth?labelSelector=app=batch",
        "/namespaces/ai-inference/deployments.apps/inference-pool/workload_queue_depth",
        "/namespaces/web/deployments.apps/*/workload_queue_depth",
        "/namespaces/ai-inference/jobs.batch/*/job_gpu_usage",
        "/namespaces/ai-inference/jobs.batch/*/job_gpu_usage?labelSelector=kind=train",
        "/namespaces/ai-inference/jobs.batch/old-job/job_gpu_usage",
        "/namespaces/ai-inference/metrics/namespace_gpu_quota_used",
        "/namespaces/gone-ns/metrics/namespace_gpu_quota_used",
        "/namespaces/web/metrics/workload_queue_depth",
        "/namespaces/*/metrics/namespace_gpu_quota_used",
        "/namespaces/*/metrics/namespace_gpu_quota_used?labelSelector=team=ml",
        "/nodes/*/node_gpu_temperature_celsius?labelSelector=pool=cpu",
        "/namespaces/ai-inference/pods/*/tokens_generated_per_second",
        "/namespaces/ai-inference/pods/*/debug_events_per_second",
        "/namespaces/ai-inference/pods/*/no_such_metric",
        "/namespaces/ai-inference/services/*/http_requests_per_second",
    ];
    let external = [
        "",
        "/namespaces/ai-inference/queue_messages_ready",
        "/namespaces/ai-inference/queue_messages_ready?labelSelector=queue=jobs",
        "/namespaces/ai-inference/queue_messages_ready?labelSelector=queue%20in%20(jobs,prio)",
        "/namespaces/ai-inference/queue_messages_ready?labelSelector=queue!=jobs",
        "/namespaces/web/queue_messages_ready",
        "/namespaces/default/cluster_gpus_free",
        "/namespaces/default/cluster_gpus_free?labelSelector=pool=h100",
        "/namespaces/ai-inference/requests_dropped_per_second",
        "/namespaces/ai-inference/requests_dropped_per_second?labelSelector=service=inference",
        "/namespaces/ai-inference/no_such_external",
    ];
    let mut all = Vec::new();
    for version in ["v1beta1", "v1beta2"] {
        all.extend(custom.iter().map(|q| format!("/apis/custom.metrics.k8s.io/{version}{q}")));
    }
    all.extend(external.iter().map(|q| format!("/apis/external.metrics.k8s.io/v1beta1{q}")));
    all
}

/// An answer with what may change between two askings taken out: timestamps, list
/// order; a value is a number.
fn normalised(v: Value) -> Value {
    match v["kind"].as_str() {
        Some("APIResourceList") => {
            let mut resources: Vec<Value> = v["resources"].as_array().cloned().unwrap_or_default();
            resources.sort_by_key(|r| r["name"].to_string());
            json!({"kind": v["kind"], "groupVersion": v["groupVersion"], "resources": resources})
        }
        Some("MetricValueList" | "ExternalMetricValueList") => {
            let mut items: Vec<Value> = v["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut item| {
                    let object = item.as_object_mut().unwrap();
                    object.remove("timestamp");
                    if let Some(q) = object.get("value").and_then(Value::as_str) {
                        let number = quantity(q);
                        object.insert("value".into(), json!(number));
                    }
                    item
                })
                .collect();
            items.sort_by_key(|i| format!("{}{}{}", i["describedObject"], i["metricName"], i["metricLabels"]));
            json!({"kind": v["kind"], "apiVersion": v["apiVersion"], "items": items})
        }
        _ => v,
    }
}

/// A Kubernetes quantity as a number ("1500m", "12", "3k", "2e3").
fn quantity(q: &str) -> f64 {
    let (digits, factor) = match q.char_indices().last() {
        Some((i, 'm')) => (&q[..i], 1e-3),
        Some((i, 'k')) => (&q[..i], 1e3),
        Some((i, 'M')) => (&q[..i], 1e6),
        Some((i, 'G')) => (&q[..i], 1e9),
        _ => (q, 1.0),
    };
    digits.parse::<f64>().unwrap_or_else(|_| panic!("not a quantity: {q}")) * factor
}

/// Equal, numbers within a part in a thousand (or a thousandth).
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-3 * x.abs().max(y.abs()) + 1e-3
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| close(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

/// The answer to `path` through the API server: the normalised body, or the reason of
/// the error status (the message is each adapter's own).
fn ask(cp: &ControlPlane, path: &str) -> Value {
    let out = cp.kubectl().args(["get", "--raw", path]).output().unwrap();
    if out.status.success() {
        return normalised(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{path}: {e}")));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = stderr
        .split_once("Error from server (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map_or_else(|| stderr.lines().next().unwrap_or_default().to_owned(), |(reason, _)| reason.to_owned());
    json!({"error": reason})
}

/// Waits until the adapter behind the aggregator has discovered every rule's metrics.
fn wait_discovered(cp: &ControlPlane, who: &str, log: impl Fn() -> String) {
    for (group, wanted) in [
        ("custom.metrics.k8s.io/v1beta1", "jobs.batch/job_gpu_usage"),
        ("custom.metrics.k8s.io/v1beta2", "pods/tokens_generated_per_second"),
        ("external.metrics.k8s.io/v1beta1", "cluster_gpus_free"),
    ] {
        wait_until_ok(&format!("{who} lists {wanted} in {group}"), Duration::from_secs(60), || {
            let found = ask(cp, &format!("/apis/{group}"));
            let listed = found["resources"].as_array().is_some_and(|r| r.iter().any(|r| r["name"] == wanted));
            if listed { Ok(()) } else { Err(format!("{found}\n{}", log())) }
        });
    }
}

fn ask_all(cp: &ControlPlane) -> BTreeMap<String, Value> {
    questions().into_iter().map(|q| (q.clone(), ask(cp, &q))).collect()
}

#[test]
fn our_adapter_answers_as_prometheus_adapter_does_or_as_documented() {
    // Prometheus first: a rate over [1m] is the counter's own only once a minute of
    // samples covers its window, and the control plane starts meanwhile.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let page_addr = listener.local_addr().unwrap();
    serve_page(listener, || Some(page()));
    let prometheus = Launch::new(Flavour::V3).interval("1s").scrape_honoring_labels("apps", &[page_addr]).start();
    let series = page().lines().count();
    wait_until_ok("Prometheus has every series of the page", Duration::from_secs(60), || {
        let count = prometheus.vector("count({job=\"apps\",__name__!~\"up|scrape_.*\"})");
        let n = count.first().map_or(0.0, |(_, n)| *n);
        if n as usize == series { Ok(()) } else { Err(format!("{n} of {series}")) }
    });
    let full_window = Instant::now() + Duration::from_secs(65);
    let cp = ControlPlane::start();
    cp.apply(&base_with_external_metrics());
    cp.apply(&objects());
    std::thread::sleep(full_window.saturating_duration_since(Instant::now()));
    let config = cp.dir.join("adapter-config.yaml");
    std::fs::write(&config, CONFIG).unwrap();

    let peer = PeerAdapter::start(&cp, &prometheus.url(), &config, "5s");
    wait_discovered(&cp, "prometheus-adapter", || peer.log_tail(20));
    let theirs = ask_all(&cp);
    drop(peer);

    let options = AdapterOptions {
        prometheus: Some((prometheus.url(), config)),
        args: vec!["--direct-source=false".into(), "--metrics-relist-interval=5s".into()],
        ..AdapterOptions::default()
    };
    let adapter = Adapter::start(&cp, &options);
    wait_discovered(&cp, "gpu-metrics-adapter", || adapter.log_tail(20));
    let ours = ask_all(&cp);

    // Each question answered by both, or explained.
    let doc = std::fs::read_to_string(workspace().join("docs/replacing-prometheus-adapter.md")).unwrap();
    let mut unexplained = Vec::new();
    let mut explained = Vec::new();
    for (question, their) in &theirs {
        let our = &ours[question];
        if close(our, their) {
            continue;
        }
        match DOCUMENTED.iter().find(|(q, _)| question.contains(q)) {
            Some((q, words)) => {
                assert!(doc.contains(words), "the doc no longer explains {q}: {words}");
                explained.push(*q);
            }
            None => unexplained.push(format!("{question}\n  prometheus-adapter: {their}\n  ours: {our}")),
        }
    }
    assert!(unexplained.is_empty(), "answers that differ and no doc explains:\n{}", unexplained.join("\n"));
    for (q, _) in DOCUMENTED {
        assert!(explained.contains(&q), "{q} is listed as a difference but both answer alike");
    }
    // The comparison compared something: real answers on both sides.
    let answered = theirs.values().filter(|v| v["items"].as_array().is_some_and(|i| !i.is_empty())).count();
    assert!(answered >= 30, "only {answered} questions had values: {theirs:#?}");
}
