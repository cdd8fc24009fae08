//! prometheus-adapter's configuration, as its documentation writes it, served against a
//! real Prometheus on loopback (each test twice: Debian's 2.42 and a built 3.x, see
//! `test_support::prometheus`) that scrapes the simulated GPU node (the real gpu-exporter
//! on fake-nvml) and a small application server (request counters per pod, cAdvisor-style
//! container series, a per-Deployment gauge and a queue length). The answers are checked
//! with `kubectl get --raw` and with replays of the HPA controller's requests for Pods,
//! Object and External metrics (as the kube-aggregator forwards them), against values the
//! application server was built to produce and against Prometheus' own answers.
//!
//! Bad configurations are refused at start, each with the rule and the field: a bad
//! regex, `as` missing with two capture groups, an unknown template field, a resource the
//! cluster does not have, and a query Prometheus rejects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use serde_json::{Value, json};
use support::kubectl::{json as kubectl_json, kubeconfig, kubectl};
use support::node::{FROZEN_AT, NodeOptions, SimulatedNode, repo};
use support::{Pki, Running, get, hpa_headers, quantity, tls_client};
use test_support::apiserver::ApiServer;
use test_support::free_port;
use test_support::prometheus::{Flavour, Launch, Prometheus};

/// Each named `async fn(Flavour)` becomes a module of two tests, `prometheus_2` and
/// `prometheus_3`: the same body against each Prometheus.
macro_rules! on_both_prometheus {
    ($($body:ident),* $(,)?) => {$(
        mod $body {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn prometheus_2() {
                super::$body(super::Flavour::V2).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn prometheus_3() {
                super::$body(super::Flavour::V3).await;
            }
        }
    )*};
}

on_both_prometheus!(
    the_walkthrough_config_serves_requests_per_second,
    cadvisor_rules_object_and_external_metrics,
    bad_configs_are_refused_at_start_with_the_rule_and_the_field,
    a_query_prometheus_rejects_later_is_a_configuration_error_not_unavailable,
    the_binary_takes_a_prometheus_adapter_command_line,
    the_example_queue_hpa_is_served_by_the_shipped_rules,
    a_dcgm_exporter_rule_on_gpu_util_works_unchanged,
);

const HPA_USER: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
const SCENARIO: &str = "fake-nvml/scenarios/seed-mixed-node.yaml";
const NS: &str = "ai-inference";

/// prometheus-adapter's configuration walkthrough, word for word but a 10s rate window
/// (Prometheus here scrapes every second).
const WALKTHROUGH: &str = r#"
rules:
- seriesQuery: 'http_requests_total{kubernetes_namespace!="",kubernetes_pod_name!=""}'
  resources:
    overrides:
      kubernetes_namespace: {resource: "namespace"}
      kubernetes_pod_name: {resource: "pod"}
  name:
    matches: "^(.*)_total"
    as: "${1}_per_second"
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[10s])) by (<<.GroupBy>>)'
"#;

/// cAdvisor-style rules from prometheus-adapter's sample configuration (overrides,
/// `seriesFilters`, a `template`), a template rule over the gpu-exporter's series, a
/// per-Deployment gauge, and an external queue-length rule.
const CADVISOR: &str = r#"
rules:
# cumulative cAdvisor metrics measured in seconds
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name:
    matches: "^container_(.*)_seconds_total$"
  metricsQuery: "sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[10s])) by (<<.GroupBy>>)"
# cumulative cAdvisor metrics not measured in seconds
- seriesQuery: '{__name__=~"^container_.*_total",container!="POD",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  seriesFilters:
  - isNot: "^container_.*_seconds_total$"
  name: {matches: "^container_(.*)_total$"}
  metricsQuery: "sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[10s])) by (<<.GroupBy>>)"
# cAdvisor gauges, resources from a template
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  resources:
    template: "<<.Resource>>"
  seriesFilters:
  - isNot: "^container_.*_total$"
  name: {matches: "^container_(.*)$"}
  metricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}) by (<<.GroupBy>>)"
# the gpu-exporter's per-pod utilization of shared GPUs, through Prometheus
- seriesQuery: '{__name__="gpu_pod_utilization",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name: {matches: "^gpu_pod_(.*)$", as: "prometheus_gpu_${1}"}
  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
# an application gauge per Deployment (Object metrics)
- seriesQuery: '{__name__=~"^inference_.*",namespace!="",deployment!=""}'
  resources:
    template: "<<.Resource>>"
  metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: '{__name__="queue_length",queue!=""}'
  resources:
    overrides: { namespace: {resource: "namespace"} }
  metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
"#;

/// The application server's series, computed at each scrape from the time since start:
/// counters grow at known rates, gauges are fixed.
struct AppServer {
    addr: SocketAddr,
}

/// Requests per second of pod `i` of the pool: GET and POST.
fn request_rates(i: usize) -> (f64, f64) {
    ((i + 1) as f64, 0.5)
}

/// CPU seconds per second of pod `i`'s inference container (its pause container burns 100).
fn cpu_rate(i: usize) -> f64 {
    0.25 * (i + 1) as f64
}

/// Memory of pod `i`: the inference container and a sidecar (the pause container's 5 GB is
/// filtered out by the rules).
fn memory(i: usize) -> (f64, f64) {
    (1e9 * (i + 1) as f64, 1e8)
}

const IN_FLIGHT: [(&str, f64); 2] = [("inference-pool", 12.0), ("llm-inference", 3.0)];
const QUEUES: [(&str, &str, f64); 3] =
    [(NS, "inference-requests", 42.0), (NS, "batch", 7.0), ("other-team", "inference-requests", 1000.0)];

fn exposition(pods: &[String], t: f64, extra: &str) -> String {
    let mut out = String::from("# TYPE http_requests_total counter\n");
    for (i, pod) in pods.iter().enumerate() {
        let (get, post) = request_rates(i);
        for (method, rate) in [("GET", get), ("POST", post)] {
            out.push_str(&format!(
                "http_requests_total{{kubernetes_namespace=\"{NS}\",kubernetes_pod_name=\"{pod}\",method=\"{method}\"}} {}\n",
                rate * t
            ));
        }
    }
    out.push_str("# TYPE container_cpu_usage_seconds_total counter\n");
    for (i, pod) in pods.iter().enumerate() {
        out.push_str(&format!(
            "container_cpu_usage_seconds_total{{namespace=\"{NS}\",pod=\"{pod}\",container=\"inference\"}} {}\n",
            cpu_rate(i) * t
        ));
        out.push_str(&format!(
            "container_cpu_usage_seconds_total{{namespace=\"{NS}\",pod=\"{pod}\",container=\"POD\"}} {}\n",
            100.0 * t
        ));
    }
    out.push_str("# TYPE container_network_receive_bytes_total counter\n");
    for (i, pod) in pods.iter().enumerate() {
        out.push_str(&format!(
            "container_network_receive_bytes_total{{namespace=\"{NS}\",pod=\"{pod}\",interface=\"eth0\"}} {}\n",
            1000.0 * (i + 1) as f64 * t
        ));
    }
    out.push_str("# TYPE container_memory_working_set_bytes gauge\n");
    for (i, pod) in pods.iter().enumerate() {
        let (main, sidecar) = memory(i);
        for (c, v) in [("inference", main), ("sidecar", sidecar), ("POD", 5e9)] {
            out.push_str(&format!(
                "container_memory_working_set_bytes{{namespace=\"{NS}\",pod=\"{pod}\",container=\"{c}\"}} {v}\n"
            ));
        }
    }
    out.push_str("# TYPE inference_requests_in_flight gauge\n");
    for (deployment, v) in IN_FLIGHT {
        out.push_str(&format!("inference_requests_in_flight{{namespace=\"{NS}\",deployment=\"{deployment}\"}} {v}\n"));
    }
    out.push_str("# TYPE queue_length gauge\n");
    for (ns, queue, v) in QUEUES {
        out.push_str(&format!("queue_length{{namespace=\"{ns}\",queue=\"{queue}\"}} {v}\n"));
    }
    out.push_str(extra);
    out
}

impl AppServer {
    async fn start(pods: Vec<String>, extra: Arc<std::sync::Mutex<String>>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Instant::now();
        let pods = Arc::new(pods);
        let app = Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let (pods, extra) = (pods.clone(), extra.clone());
                async move {
                    let text = exposition(&pods, started.elapsed().as_secs_f64(), &extra.lock().unwrap());
                    ([("content-type", "text/plain; version=0.0.4")], text)
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr }
    }
}

/// Pods of the scenario: (name, labels), in name order.
fn scenario_pods() -> Vec<(String, BTreeMap<String, String>)> {
    let text = std::fs::read_to_string(repo().join(SCENARIO)).unwrap();
    let doc: Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut pods: Vec<(String, BTreeMap<String, String>)> = doc["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["namespace"] == NS)
        .map(|p| (p["name"].as_str().unwrap().to_owned(), serde_json::from_value(p["labels"].clone()).unwrap()))
        .collect();
    pods.sort();
    pods
}

/// The simulated cluster: the GPU node, the application, Prometheus scraping both, and
/// the in-test API server holding the scenario's pods.
struct Cluster {
    pki: Pki,
    fake: ApiServer,
    kubeconfig: std::path::PathBuf,
    prom: Prometheus,
    /// The pool's pods (app=inference), in name order: pod `i` of the rates above.
    pool: Vec<String>,
    extra_series: Arc<std::sync::Mutex<String>>,
    _node: SimulatedNode,
}

impl Cluster {
    async fn start(flavour: Flavour) -> Self {
        let pods = scenario_pods();
        let pool: Vec<String> = pods
            .iter()
            .filter(|(_, l)| l.get("app").map(String::as_str) == Some("inference"))
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(pool.len(), 8, "the scenario's inference pool");
        let node = tokio::task::spawn_blocking(|| {
            SimulatedNode::start_with("gpu-node-1", &repo().join(SCENARIO), FROZEN_AT, NodeOptions::default())
        })
        .await
        .unwrap();
        let extra_series = Arc::new(std::sync::Mutex::new(String::new()));
        let app = AppServer::start(pool.clone(), extra_series.clone()).await;
        let prom = Launch::new(flavour).scrape_honoring_labels("app", &[app.addr, node.exporter]).start_async().await;
        prom.wait_for_series_async("http_requests_total", 16).await;
        // Rates are exact once the 10s window is full of samples.
        let first = format!("sum(rate(http_requests_total{{kubernetes_pod_name=\"{}\"}}[10s]))", pool[0]);
        let (g, p) = request_rates(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = prom.query_async(&first).await;
            let rate: f64 = v["data"]["result"][0]["value"][1].as_str().and_then(|r| r.parse().ok()).unwrap_or(0.0);
            if (rate - (g + p)).abs() < (g + p) * 0.01 {
                break;
            }
            assert!(Instant::now() < deadline, "{flavour}: the rate never settled: {v}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let pool_gpu = format!("max by (pod) (gpu_pod_utilization{{namespace=\"{NS}\",pod=~\"{}\"}})", pool.join("|"));
        prom.wait_for_series_async(&pool_gpu, pool.len()).await;

        let pki = Pki::new();
        let fake = support::apiserver();
        fake.authentication_config_map(pki.auth_configmap());
        for (name, labels) in &pods {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            fake.add_labelled_pod(NS, name, &labels);
        }
        // The HPA controller's ClusterRole: get on custom metrics, list on external ones;
        // kubectl's user is in system:masters.
        fake.set_policy(|user, spec| {
            let ra = &spec["resourceAttributes"];
            let ok = user == HPA_USER
                && ((ra["group"] == "custom.metrics.k8s.io" && ra["verb"] == "get")
                    || (ra["group"] == "external.metrics.k8s.io" && ra["verb"] == "list"));
            (ok, String::new())
        });
        let api = fake.serve().await;
        let kubeconfig = support::adapter_kubeconfig(api, pki.dir.path());
        Self { pki, fake, kubeconfig, prom, pool, extra_series, _node: node }
    }

    fn flags(&self, config: &str) -> Vec<String> {
        let file = self.pki.write("config.yaml", config);
        let mut flags = self.pki.serving_args();
        flags.extend([
            format!("--lister-kubeconfig={}", self.kubeconfig.display()),
            "--direct-source=false".into(),
            format!("--prometheus-url={}", self.prom.url()),
            format!("--config={}", file.display()),
            "--metrics-relist-interval=1s".into(),
        ]);
        flags
    }

    async fn adapter(&self, config: &str) -> Running {
        support::start(&self.flags(config)).await
    }
}

/// The HPA controller's request through the aggregator.
async fn hpa_get(pki: &Pki, addr: SocketAddr, path: &str) -> support::Answer {
    get(&tls_client(pki, Some(&pki.front_proxy_client)), addr, path, &hpa_headers()).await
}

fn values(list: &Value) -> BTreeMap<String, f64> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["describedObject"]["name"].as_str().unwrap().to_owned(), quantity(i["value"].as_str().unwrap())))
        .collect()
}

fn listed(doc: &Value) -> Vec<String> {
    let mut names: Vec<String> =
        doc["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_owned()).collect();
    names.sort();
    names
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() <= want.abs() * 0.02 + 1e-3, "{what}: got {got}, want {want}");
}

fn selector_query() -> String {
    form_urlencoded::Serializer::new(String::new()).append_pair("labelSelector", "app=inference").finish()
}

async fn the_walkthrough_config_serves_requests_per_second(flavour: Flavour) {
    let c = Cluster::start(flavour).await;
    let a = c.adapter(WALKTHROUGH).await;
    // Discovery lists exactly what the rule makes of the series, in both versions.
    let d = hpa_get(&c.pki, a.addr, "/apis/custom.metrics.k8s.io/v1beta1").await;
    assert_eq!(listed(&d.json()), ["namespaces/http_requests_per_second", "pods/http_requests_per_second"]);
    let namespaces = d.json()["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces/http_requests_per_second")
        .cloned()
        .unwrap();
    assert_eq!(namespaces["namespaced"], false);
    assert_eq!(listed(&hpa_get(&c.pki, a.addr, "/apis/custom.metrics.k8s.io/v1beta2").await.json()).len(), 2);

    // The HPA's Pods-metric request: every pool pod, its requests per second summed over methods.
    let path = format!(
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/pods/%2A/http_requests_per_second?{}",
        selector_query()
    );
    let mut got = BTreeMap::new();
    support::eventually("a rate for every pool pod", Duration::from_secs(30), async || {
        let r = hpa_get(&c.pki, a.addr, &path).await;
        got = if r.status == 200 { values(&r.json()) } else { BTreeMap::new() };
        got.len() == c.pool.len()
    })
    .await;
    for (i, pod) in c.pool.iter().enumerate() {
        let (g, p) = request_rates(i);
        close(got[pod], g + p, pod);
    }
    // The answer says how long Prometheus took.
    let r = hpa_get(&c.pki, a.addr, &path).await;
    let timing = r.headers.get("server-timing").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let ms: f64 = timing.strip_prefix("prometheus;dur=").and_then(|d| d.parse().ok()).unwrap_or(-1.0);
    assert!(ms >= 0.0, "Server-Timing {timing:?}");

    // kubectl reads the same, and a named pod alone (the walkthrough's own example).
    let home = tempfile::tempdir().unwrap();
    let admin = c.pki.client_ca.client("dev-admin", &["system:masters"]).unwrap();
    let kc = kubeconfig(&c.pki, "admin", a.addr.port(), &admin);
    let one = &c.pool[3];
    let v = kubectl_json(
        &kubectl(
            home.path(),
            &kc,
            &format!("/apis/custom.metrics.k8s.io/v1beta1/namespaces/{NS}/pods/{one}/http_requests_per_second"),
        )
        .await,
    );
    assert_eq!(v["items"][0]["metricName"], "http_requests_per_second");
    assert_eq!(
        v["items"][0]["describedObject"],
        json!({"kind": "Pod", "namespace": NS, "name": one, "apiVersion": "/v1"})
    );
    let (g, p) = request_rates(3);
    close(quantity(v["items"][0]["value"].as_str().unwrap()), g + p, "kubectl, one pod");
    // The namespace's own metric: the rule grouped by the namespace label.
    let v = kubectl_json(
        &kubectl(
            home.path(),
            &kc,
            &format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/metrics/http_requests_per_second"),
        )
        .await,
    );
    let total: f64 = (0..c.pool.len()).map(|i| request_rates(i).0 + request_rates(i).1).sum();
    close(quantity(v["items"][0]["value"].as_str().unwrap()), total, "namespace total");
    // A metric discovery did not find: 404, as the HPA expects.
    let r = hpa_get(
        &c.pki,
        a.addr,
        &format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/pods/%2A/http_requests_total"),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    a.stop().await;
}

async fn cadvisor_rules_object_and_external_metrics(flavour: Flavour) {
    let c = Cluster::start(flavour).await;
    let a = c.adapter(CADVISOR).await;
    let d = hpa_get(&c.pki, a.addr, "/apis/custom.metrics.k8s.io/v1beta2").await.json();
    let names = listed(&d);
    for expected in [
        "pods/cpu_usage",
        "namespaces/cpu_usage",
        "pods/network_receive_bytes",
        "pods/memory_working_set_bytes",
        "namespaces/memory_working_set_bytes",
        "pods/prometheus_gpu_utilization",
        "deployments.apps/inference_requests_in_flight",
        "namespaces/inference_requests_in_flight",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} not in discovery: {names:?}");
    }
    // seriesFilters kept container_cpu_usage_seconds_total out of the second rule, and the
    // third rule's template mapped no resource for `container` or `interface`.
    assert!(!names.iter().any(|n| n.ends_with("/cpu_usage_seconds") || n.contains("container")), "{names:?}");
    assert_eq!(names.iter().filter(|n| n.starts_with("pods/")).count(), 4, "{names:?}");

    // Pods metrics, as the HPA asks for them.
    let pods_metric = |metric: &str| {
        format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/pods/%2A/{metric}?{}", selector_query())
    };
    let cpu = values(&hpa_get(&c.pki, a.addr, &pods_metric("cpu_usage")).await.json());
    let mem = values(&hpa_get(&c.pki, a.addr, &pods_metric("memory_working_set_bytes")).await.json());
    assert_eq!((cpu.len(), mem.len()), (c.pool.len(), c.pool.len()));
    for (i, pod) in c.pool.iter().enumerate() {
        close(cpu[pod], cpu_rate(i), &format!("cpu of {pod} (the POD container left out)"));
        let (main, sidecar) = memory(i);
        close(mem[pod], main + sidecar, &format!("memory of {pod}"));
    }
    // The exporter's GPU series through Prometheus: the same as Prometheus' own answer.
    let gpu = values(&hpa_get(&c.pki, a.addr, &pods_metric("prometheus_gpu_utilization")).await.json());
    let own = c
        .prom
        .query_async(&format!("avg(gpu_pod_utilization{{namespace=\"{NS}\",pod=~\"{}\"}}) by (pod)", c.pool.join("|")))
        .await;
    let own: BTreeMap<String, f64> = own["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["metric"]["pod"].as_str().unwrap().to_owned(), r["value"][1].as_str().unwrap().parse().unwrap()))
        .collect();
    assert_eq!(gpu.keys().collect::<Vec<_>>(), c.pool.iter().collect::<Vec<_>>());
    assert_eq!(gpu.keys().collect::<Vec<_>>(), own.keys().collect::<Vec<_>>());
    for (pod, v) in &own {
        close(gpu[pod], *v, pod);
    }

    // An Object metric on the Deployment, as the HPA asks for it.
    let r = hpa_get(&c.pki, a.addr, &format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/deployments.apps/inference-pool/inference_requests_in_flight")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let item = &r.json()["items"][0];
    assert_eq!(
        item["describedObject"],
        json!({"kind": "Deployment", "namespace": NS, "name": "inference-pool", "apiVersion": "apps/v1"})
    );
    close(quantity(item["value"].as_str().unwrap()), IN_FLIGHT[0].1, "in flight");

    external_metrics(&c, &a).await;
    a.stop().await;
}

/// `external.metrics.k8s.io`: discovery, the HPA's request, kubectl, authorization.
async fn external_metrics(c: &Cluster, a: &Running) {
    let apis = hpa_get(&c.pki, a.addr, "/apis").await.json();
    assert!(apis["groups"].as_array().unwrap().iter().any(|g| g["name"] == "external.metrics.k8s.io"), "{apis}");
    let d = hpa_get(&c.pki, a.addr, "/apis/external.metrics.k8s.io/v1beta1").await.json();
    assert_eq!(d["groupVersion"], "external.metrics.k8s.io/v1beta1");
    assert_eq!(
        d["resources"],
        json!([{"name": "queue_length", "singularName": "", "namespaced": true, "kind": "ExternalMetricValueList", "verbs": ["get"]}])
    );

    // The HPA's External metric request with its metric selector.
    let path = format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/queue_length?labelSelector=queue%3Dinference-requests"
    );
    let r = hpa_get(&c.pki, a.addr, &path).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json();
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("ExternalMetricValueList"), Some("external.metrics.k8s.io/v1beta1"))
    );
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["metricName"], "queue_length");
    assert_eq!(items[0]["metricLabels"], json!({"queue": "inference-requests"}));
    close(quantity(items[0]["value"].as_str().unwrap()), QUEUES[0].2, "queue length in the HPA's namespace");
    // The authorization asked was Kubernetes' for that path: list on the metric.
    let sar = c
        .fake
        .requests()
        .iter()
        .rev()
        .find(|r| r.path.ends_with("subjectaccessreviews") && r.body.contains("external.metrics.k8s.io"))
        .unwrap()
        .body
        .clone();
    let sar: Value = serde_json::from_str(&sar).unwrap();
    assert_eq!(
        sar["spec"]["resourceAttributes"],
        json!({"namespace": NS, "verb": "list", "group": "external.metrics.k8s.io", "version": "v1beta1", "resource": "queue_length"})
    );

    // kubectl: every queue of the namespace (not the other team's).
    let home = tempfile::tempdir().unwrap();
    let admin = c.pki.client_ca.client("dev-admin", &["system:masters"]).unwrap();
    let kc = kubeconfig(&c.pki, "admin", a.addr.port(), &admin);
    let v = kubectl_json(
        &kubectl(home.path(), &kc, &format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/queue_length"))
            .await,
    );
    let mut queues: Vec<(String, f64)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["metricLabels"]["queue"].as_str().unwrap().to_owned(), quantity(i["value"].as_str().unwrap())))
        .collect();
    queues.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<(String, f64)> =
        QUEUES.iter().filter(|(ns, _, _)| *ns == NS).map(|(_, q, v)| ((*q).to_owned(), *v)).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(queues, want);

    // Missing is never zero: no series is an empty list, an unknown metric a 404 Status.
    let r = hpa_get(
        &c.pki,
        a.addr,
        &format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/queue_length?labelSelector=queue%3Dnone"),
    )
    .await;
    assert_eq!((r.status, r.json()["items"].clone()), (200, json!([])));
    let r =
        hpa_get(&c.pki, a.addr, &format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/queue_depth")).await;
    assert_eq!(
        (r.status, r.json()["kind"].as_str(), r.json()["reason"].as_str()),
        (404, Some("Status"), Some("NotFound"))
    );
    let o =
        kubectl(home.path(), &kc, &format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/queue_depth")).await;
    assert!(!o.ok && o.stderr.contains("NotFound"), "{}", o.stderr);
    // Someone the policy does not allow: 403.
    let r = get(
        &tls_client(&c.pki, Some(&c.pki.front_proxy_client)),
        a.addr,
        &path,
        &[("x-remote-user", "mallory"), ("x-remote-group", "dev")],
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
}

/// Starts the adapter on `config` and returns why it refused to.
async fn refused(c: &Cluster, config: &str) -> String {
    let args = support::args(&c.flags(config));
    match gpu_metrics_adapter::app::App::build(&args).await {
        Ok(_) => panic!("the adapter started on a bad config:\n{config}"),
        Err(e) => e.to_string(),
    }
}

async fn bad_configs_are_refused_at_start_with_the_rule_and_the_field(flavour: Flavour) {
    let c = Cluster::start(flavour).await;
    let rule = |name: &str, query: &str, resources: &str| {
        format!(
            "rules:\n- seriesQuery: 'http_requests_total{{kubernetes_pod_name!=\"\"}}'\n  resources: {resources}\n  name: {name}\n  metricsQuery: '{query}'\n"
        )
    };
    let overrides = "{overrides: {kubernetes_namespace: {resource: namespace}, kubernetes_pod_name: {resource: pod}}}";
    let good_query = "sum(rate(<<.Series>>{<<.LabelMatchers>>}[10s])) by (<<.GroupBy>>)";

    let e = refused(&c, &rule("{matches: \"^(.*_total\"}", good_query, overrides)).await;
    assert!(
        e.contains("rules[0]") && e.contains("name.matches") && e.contains("not a valid regular expression"),
        "{e}"
    );
    let e = refused(&c, &rule("{matches: \"^(.*)_(total|count)$\"}", good_query, overrides)).await;
    assert!(e.contains("rules[0]") && e.contains("name.as: is required") && e.contains("2 capture groups"), "{e}");
    let e =
        refused(&c, &rule("{matches: \"^(.*)_total$\"}", "sum(rate(<<.Seris>>{<<.LabelMatchers>>}[10s]))", overrides))
            .await;
    assert!(e.contains("rules[0]") && e.contains("metricsQuery") && e.contains("unknown field .Seris"), "{e}");
    let e = refused(
        &c,
        &rule(
            "{matches: \"^(.*)_total$\"}",
            good_query,
            "{overrides: {kubernetes_pod_name: {group: cheese.io, resource: brand}}}",
        ),
    )
    .await;
    assert!(e.contains("resources.overrides.kubernetes_pod_name") && e.contains("not served by this cluster"), "{e}");
    // The catalog came from the API server's discovery, the broken group left out.
    assert!(
        c.fake.count("GET", "/apis/apps/v1") >= 1 && c.fake.count("GET", "/apis/custom.metrics.k8s.io/v1beta2") == 0
    );
    // A CRD the cluster serves is accepted.
    c.fake.add_api_group("cheese.io/v1", &[("brands", "brand", "Brand", true)]);
    let ok = support::args(&c.flags(&rule("{matches: \"^(.*)_total$\"}", good_query, "{overrides: {kubernetes_namespace: {resource: namespace}, kubernetes_pod_name: {group: cheese.io, resource: brand}}}")));
    assert!(gpu_metrics_adapter::app::App::build(&ok).await.is_ok());
    // A query Prometheus rejects (bad_data) is caught at the first relist, before serving.
    let e = refused(
        &c,
        &rule(
            "{matches: \"^(.*)_total$\"}",
            "sum(rate(<<.Series>>{<<.LabelMatchers>>}[10s]) by (<<.GroupBy>>)",
            overrides,
        ),
    )
    .await;
    assert!(
        e.contains("Prometheus refused the configuration")
            && e.contains("rules[0] metricsQuery")
            && e.contains("bad_data"),
        "{e}"
    );
    let e = refused(&c, "rules:\n- seriesQuery: 'http_requests_total{'\n  resources: {template: \"<<.Resource>>\"}\n  metricsQuery: x\n").await;
    assert!(e.contains("rules[0] seriesQuery") && e.contains("bad_data"), "{e}");
}

async fn a_query_prometheus_rejects_later_is_a_configuration_error_not_unavailable(flavour: Flavour) {
    let c = Cluster::start(flavour).await;
    // At start no series matches, so there is nothing to probe; the series appears later.
    let config = "rules:\n- seriesQuery: 'late_gauge{namespace!=\"\",pod!=\"\"}'\n  resources: {template: \"<<.Resource>>\"}\n  metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>'\n";
    let a = c.adapter(config).await;
    assert!(listed(&hpa_get(&c.pki, a.addr, "/apis/custom.metrics.k8s.io/v1beta2").await.json()).is_empty());
    *c.extra_series.lock().unwrap() = format!("late_gauge{{namespace=\"{NS}\",pod=\"{}\"}} 1\n", c.pool[0]);
    let path = format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/pods/{}/late_gauge", c.pool[0]);
    let mut last = None;
    support::eventually("the late metric discovered and answered", Duration::from_secs(30), async || {
        let r = hpa_get(&c.pki, a.addr, &path).await;
        let done = r.status != 404;
        last = Some(r);
        done
    })
    .await;
    let r = last.unwrap();
    assert_eq!(r.status, 500, "{}", r.body);
    let s = r.json();
    assert_eq!(s["reason"], "InternalError");
    let message = s["message"].as_str().unwrap();
    assert!(
        message.contains("configuration error in rules[0] metricsQuery") && message.contains("bad_data"),
        "{message}"
    );
    a.stop().await;
}

async fn the_binary_takes_a_prometheus_adapter_command_line(flavour: Flavour) {
    let c = Cluster::start(flavour).await;
    let config = c.pki.write("adapter-config.yaml", WALKTHROUGH);
    let cert_dir = c.pki.dir.path().join("cert");
    let port = free_port();
    // The helm chart's arguments, its leading /adapter included.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"))
        .args([
            "/adapter".to_owned(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", cert_dir.display()),
            format!("--prometheus-url={}", c.prom.url()),
            "--metrics-relist-interval=1s".into(),
            "--v=4".into(),
            format!("--config={}", config.display()),
            "--logtostderr=true".into(),
            format!("--lister-kubeconfig={}", c.kubeconfig.display()),
            "--bind-address=127.0.0.1".into(),
            "--direct-source=false".into(),
        ])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // --cert-dir: a self-signed pair written there, as a Go API server writes it.
    support::eventually("the adapter on its port", Duration::from_secs(30), async || {
        cert_dir.join("apiserver.crt").exists() && tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
    assert!(cert_dir.join("apiserver.key").exists());
    // kubectl with a client certificate of the cluster's client CA (read from the
    // kube-system ConfigMap), not verifying the self-signed serving certificate.
    let admin = c.pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let (cert, key) = (c.pki.write("admin.pem", &admin.cert_pem), c.pki.write("admin-key.pem", &admin.key_pem));
    let discovery = async || {
        let out = tokio::process::Command::new(support::kubectl::kubectl_bin())
            .args(["get", "--raw", "/apis/custom.metrics.k8s.io/v1beta1", "--insecure-skip-tls-verify"])
            .arg(format!("--server=https://{addr}"))
            .arg(format!("--client-certificate={}", cert.display()))
            .arg(format!("--client-key={}", key.display()))
            .env("HOME", c.pki.dir.path())
            .env_remove("KUBECONFIG")
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut text = String::new();
    support::eventually("discovery through kubectl", Duration::from_secs(30), async || {
        text = discovery().await;
        text.contains("pods/http_requests_per_second")
    })
    .await;
    assert!(text.contains("namespaces/http_requests_per_second"), "{text}");
    let _ = child.kill().await;

    // A flag of prometheus-adapter's that is not implemented: exit 2, saying so.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"))
        .args([
            "/adapter",
            "--prometheus-auth-config=/etc/prometheus-config/kubeconfig",
            &format!("--config={}", config.display()),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "--prometheus-auth-config is a prometheus-adapter flag that gpu-metrics-adapter does not implement"
        ),
        "{stderr}"
    );
    // A bad config through the binary: exit 2 with the rule and the field.
    let bad = c.pki.write("bad.yaml", "rules:\n- seriesQuery: x\n  resources: {template: \"<<.Resource>>\"}\n  name: {matches: \"(a)(b)\"}\n  metricsQuery: x\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"))
        .args(["--standalone", "--direct-source=false", "--bind-address=127.0.0.1", "--secure-port=0"])
        .arg(format!("--prometheus-url={}", c.prom.url()))
        .arg(format!("--config={}", bad.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rules[0]") && stderr.contains("name.as"), "{stderr}");
}

/// `data[key]` of the ConfigMap in a manifest file.
fn configmap_data(path: &str, key: &str) -> String {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    let doc: Value = serde_yaml_ng::from_str(&text).unwrap();
    doc["data"][key].as_str().unwrap().to_owned()
}

async fn the_example_queue_hpa_is_served_by_the_shipped_rules(flavour: Flavour) {
    let c = Cluster::start(flavour).await;
    let hpa: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("deploy/examples/inference-queue/inference-queue-hpa.yaml")).unwrap(),
    )
    .unwrap();
    let ns = hpa["metadata"]["namespace"].as_str().unwrap().to_owned();
    let external = &hpa["spec"]["metrics"][0]["external"];
    let metric = external["metric"]["name"].as_str().unwrap();
    let labels = external["metric"]["selector"]["matchLabels"].as_object().unwrap();
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap())).collect();
    let per_replica = quantity(external["target"]["averageValue"].as_str().unwrap());
    // The queue the example scales on, another queue, and the same queue of another team.
    let queue = labels["queue"].as_str().unwrap();
    *c.extra_series.lock().unwrap() = format!(
        "{metric}{{namespace=\"{ns}\",queue=\"{queue}\"}} 95\n{metric}{{namespace=\"{ns}\",queue=\"batch\"}} 400\n{metric}{{namespace=\"other-team\",queue=\"{queue}\"}} 7\n"
    );
    c.prom.wait_for_series_async(metric, 3).await;
    let config = configmap_data("deploy/components/prometheus-operator/adapter-prometheus-rules.yaml", "rules.yaml");
    let a = c.adapter(&config).await;
    let query =
        form_urlencoded::Serializer::new(String::new()).append_pair("labelSelector", &selector.join(",")).finish();
    let path = format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?{query}");
    let mut items = Vec::new();
    support::eventually("the example's external metric", Duration::from_secs(30), async || {
        let r = hpa_get(&c.pki, a.addr, &path).await;
        items = if r.status == 200 { r.json()["items"].as_array().cloned().unwrap_or_default() } else { Vec::new() };
        !items.is_empty()
    })
    .await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["metricLabels"], json!({"queue": queue}));
    let total = quantity(items[0]["value"].as_str().unwrap());
    assert_eq!(total, 95.0, "the HPA's namespace and queue only");
    // What the controller makes of it: ceil(total / averageValue) replicas.
    let desired = (total / per_replica).ceil();
    assert_eq!(desired, 4.0);
    eprintln!("{metric}{{{}}} = {total}: inference-queue-hpa wants {desired} replicas", selector.join(","));
    a.stop().await;
}

/// A prometheus-adapter rule written for dcgm-exporter, as NVIDIA's HPA guides write it
/// (per-pod `DCGM_FI_DEV_GPU_UTIL`), works unchanged on the exporter in
/// `--metrics.naming both`: the pod that holds a whole GPU gets its GPU's utilization.
/// Pods sharing a time-sliced GPU carry no pod label in this naming (dcgm-exporter names
/// one sharer arbitrarily, docs/replacing-dcgm-exporter.md), so the rule has nothing for
/// them; the native `gpu_pod_utilization` has their split.
const DCGM_UTIL: &str = r#"
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name:
    matches: "^DCGM_FI_DEV_GPU_UTIL$"
    as: "gpu_util"
  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"#;

async fn a_dcgm_exporter_rule_on_gpu_util_works_unchanged(flavour: Flavour) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("node.yaml");
    std::fs::write(
        &scenario,
        "gpus:
  - {model: A100-SXM4-80GB, values: {utilization: 64}}
  - {model: A100-SXM4-80GB, values: {utilization: 30}}
pods:
  - namespace: training
    name: trainer-0
    labels: {app: trainer}
    containers:
      - {name: main, devices: [{resource: nvidia.com/gpu, gpu: 0}], processes: [{pid: 4100, gpu: 0, memory_used_mib: 2000}]}
  - namespace: training
    name: trainer-1
    labels: {app: trainer}
    containers:
      - {name: main, devices: [{resource: nvidia.com/gpu, gpu: 1, replica: 0}], processes: [{pid: 4200, gpu: 1, memory_used_mib: 1000}]}
  - namespace: training
    name: trainer-2
    labels: {app: trainer}
    containers:
      - {name: main, devices: [{resource: nvidia.com/gpu, gpu: 1, replica: 1}], processes: [{pid: 4300, gpu: 1, memory_used_mib: 1000}]}
",
    )
    .unwrap();
    let node = tokio::task::spawn_blocking(move || {
        let options = NodeOptions { args: &["--metrics.naming=both"], ..NodeOptions::default() };
        SimulatedNode::start_with("gpu-node-1", &scenario, FROZEN_AT, options)
    })
    .await
    .unwrap();
    let prom = Launch::new(flavour).scrape_honoring_labels("app", &[node.exporter]).start_async().await;
    prom.wait_for_series_async("DCGM_FI_DEV_GPU_UTIL", 2).await;

    let pki = Pki::new();
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    for pod in ["trainer-0", "trainer-1", "trainer-2"] {
        fake.add_labelled_pod("training", pod, &[("app", "trainer")]);
    }
    fake.set_policy(|user, spec| {
        let ra = &spec["resourceAttributes"];
        (user == HPA_USER && ra["group"] == "custom.metrics.k8s.io" && ra["verb"] == "get", String::new())
    });
    let api = fake.serve().await;
    let kubeconfig = support::adapter_kubeconfig(api, pki.dir.path());
    let config = pki.write("config.yaml", DCGM_UTIL);
    let mut flags = pki.serving_args();
    flags.extend([
        format!("--lister-kubeconfig={}", kubeconfig.display()),
        "--direct-source=false".into(),
        format!("--prometheus-url={}", prom.url()),
        format!("--config={}", config.display()),
        "--metrics-relist-interval=1s".into(),
    ]);
    let a = support::start(&flags).await;

    let d = hpa_get(&pki, a.addr, "/apis/custom.metrics.k8s.io/v1beta2").await.json();
    assert_eq!(listed(&d), ["namespaces/gpu_util", "pods/gpu_util"]);
    let query = form_urlencoded::Serializer::new(String::new()).append_pair("labelSelector", "app=trainer").finish();
    let path = format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/training/pods/%2A/gpu_util?{query}");
    let mut got = BTreeMap::new();
    support::eventually("the dedicated GPU's utilization", Duration::from_secs(30), async || {
        let r = hpa_get(&pki, a.addr, &path).await;
        got = if r.status == 200 { values(&r.json()) } else { BTreeMap::new() };
        !got.is_empty()
    })
    .await;
    assert_eq!(got, BTreeMap::from([("trainer-0".to_string(), 64.0)]), "only the pod that holds a whole GPU");
    a.stop().await;
}
