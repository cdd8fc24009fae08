//! The seed's `inference-hpa` works unchanged: this test replays the HPA controller's
//! requests, as the kube-aggregator forwards them (TLS, front-proxy client certificate,
//! X-Remote-* headers, the controller's Accept header), against the adapter wired to an
//! in-test Kubernetes API (ConfigMap, EndpointSlices, pod labels, SubjectAccessReview),
//! two in-test exporters serving the simulated nodes, and a real Prometheus holding
//! `request_latency_ms` (Debian's 2.42 and a built 3.x: `test_support::prometheus`). The
//! answers are checked against the exporter output and against Prometheus's own answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Behavior, Exporter, Pki, fixture, get, hpa_headers, label, quantity, series, tls_client};
use test_support::prometheus::{Flavour, Launch};

const HPA_USER: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";

fn slice(name: &str, port: u16, node: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "gpu-telemetry", "labels": {"kubernetes.io/service-name": "gpu-exporter"}},
        "addressType": "IPv4",
        "ports": [{"name": "metrics", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["127.0.0.1"], "nodeName": node, "conditions": {"ready": true}}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_hpa_requests_are_answered_like_the_go_adapters_from_prometheus_2() {
    inference_hpa_requests(Flavour::V2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_hpa_requests_are_answered_like_the_go_adapters_from_prometheus_3() {
    inference_hpa_requests(Flavour::V3).await;
}

async fn inference_hpa_requests(flavour: Flavour) {
    let pki = Pki::new();
    let node1 = fixture("node-a100-mig-mixed.prom");
    let node2 = fixture("node-h100-timesliced.prom");
    let e1 = Exporter::start(Behavior::Serve(node1.clone())).await;
    let e2 = Exporter::start(Behavior::Serve(node2.clone())).await;

    // The application's latency, as the inference pods expose it.
    let latencies: BTreeMap<String, f64> =
        (0..8).map(|i| (format!("inference-pool-6b7c9-{i}"), 150.0 + 12.5 * f64::from(i))).collect();
    let mut app_metrics = String::from("# TYPE request_latency_ms gauge\n");
    for (pod, v) in &latencies {
        app_metrics.push_str(&format!(
            "request_latency_ms{{namespace=\"ai-inference\",deployment=\"inference-pool\",pod=\"{pod}\"}} {v}\n"
        ));
    }
    app_metrics.push_str(
        "request_latency_ms{namespace=\"ai-inference\",deployment=\"llm-server\",pod=\"llm-server-7d9f8\"} 900\n",
    );
    let app = Exporter::start(Behavior::Serve(app_metrics)).await;
    let prom = Launch::new(flavour).scrape_honoring_labels("app", &[app.addr]).start_async().await;
    prom.wait_for_series_async("request_latency_ms", 9).await;

    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    fake.add_endpoint_slice(serde_json::from_value(slice("gpu-exporter-a", e1.addr.port(), "gpu-node-1")).unwrap());
    fake.add_endpoint_slice(serde_json::from_value(slice("gpu-exporter-b", e2.addr.port(), "gpu-node-2")).unwrap());
    for i in 0..8 {
        fake.add_labelled_pod(
            "ai-inference",
            &format!("inference-pool-6b7c9-{i}"),
            &[("app", "inference"), ("pod-template-hash", "6b7c9")],
        );
    }
    fake.add_labelled_pod("ai-inference", "llm-server-7d9f8", &[("app", "llm")]);
    for i in 0..3 {
        fake.add_labelled_pod("ai-inference", &format!("embedding-svc-{i}"), &[("app", "embedding")]);
    }
    fake.add_labelled_pod("ml-training", "offline-training-x2k4p", &[("job-name", "offline-training")]);
    fake.set_policy(|user, spec| {
        let ra = &spec["resourceAttributes"];
        let ok = user == HPA_USER && ra["group"] == "custom.metrics.k8s.io" && ra["verb"] == "get";
        (
            ok,
            if ok { "RBAC: allowed by ClusterRoleBinding hpa-controller-custom-metrics".into() } else { String::new() },
        )
    });
    let api = fake.serve().await;
    let kubeconfig = support::adapter_kubeconfig(api, pki.dir.path());
    let rules = pki.write(
        "rules.yaml",
        "rules:\n  - name: request_latency_ms\n    query: 'avg by (<<.GroupBy>>) (request_latency_ms{<<.LabelMatchers>>})'\n    resources:\n      pods: { label: pod }\n      deployments.apps: { label: deployment }\n    window: 1m\n",
    );
    let mut flags = pki.serving_args();
    flags.extend([
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--prometheus-url={}", prom.url()),
        format!("--prometheus-rules-file={}", rules.display()),
        "--scrape-interval=1s".into(),
    ]);
    let adapter = support::start(&flags).await;

    // Readiness needs no credentials and turns green once sources, labels and auth are in.
    let anonymous = tls_client(&pki, None);
    support::eventually("readyz", Duration::from_secs(20), async || {
        get(&anonymous, adapter.addr, "/readyz", &[]).await.status == 200
    })
    .await;

    // The aggregator's view: front-proxy certificate plus the controller's identity headers.
    let aggregator = tls_client(&pki, Some(&pki.front_proxy_client));
    let headers = hpa_headers();

    // Discovery, as the HPA's REST mapper does it.
    let d = get(&aggregator, adapter.addr, "/apis/custom.metrics.k8s.io/v1beta2", &headers).await;
    assert_eq!(d.status, 200, "{}", d.body);
    let names: Vec<String> =
        d.json()["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.contains(&"pods/gpu_utilization".to_owned()), "{names:?}");
    assert!(names.contains(&"pods/request_latency_ms".to_owned()), "{names:?}");

    // Metric 1: gpu_utilization, exactly as the controller asks for it.
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?labelSelector=app%3Dinference";
    let a = get(&aggregator, adapter.addr, path, &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["content-type"], "application/json");
    let list = a.json();
    assert_eq!(list["kind"], "MetricValueList");
    assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta2");
    let items = list["items"].as_array().unwrap();
    // Expected: each inference pod's gpu_pod_utilization from the simulated node.
    let expected: BTreeMap<String, f64> = series(&node2, "gpu_pod_utilization")
        .into_iter()
        .map(|(l, v)| (label(&l, "pod").unwrap().to_owned(), v))
        .collect();
    assert_eq!(items.len(), expected.len(), "{}", a.body);
    for item in items {
        let pod = item["describedObject"]["name"].as_str().unwrap();
        assert_eq!(item["describedObject"]["kind"], "Pod");
        assert_eq!(item["describedObject"]["namespace"], "ai-inference");
        assert_eq!(item["describedObject"]["apiVersion"], "/v1");
        assert_eq!(item["metric"]["name"], "gpu_utilization");
        assert!(item["metric"]["selector"].is_null(), "written as null, as the Go struct does");
        let got = quantity(item["value"].as_str().unwrap());
        assert!((got - expected[pod]).abs() < 1e-3, "{pod}: {got} vs {}", expected[pod]);
        assert!(item["timestamp"].as_str().unwrap().ends_with('Z'));
    }

    // Metric 2: request_latency_ms from Prometheus.
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/request_latency_ms?labelSelector=app%3Dinference";
    let a = get(&aggregator, adapter.addr, path, &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let items = a.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 8, "{}", a.body);
    let from_prom = prom
        .query_async("avg by (pod) (request_latency_ms{namespace=\"ai-inference\",pod=~\"inference-pool.*\"})")
        .await;
    let prom_values: BTreeMap<String, f64> = from_prom["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["metric"]["pod"].as_str().unwrap().to_owned(), r["value"][1].as_str().unwrap().parse().unwrap()))
        .collect();
    for item in &items {
        let pod = item["describedObject"]["name"].as_str().unwrap();
        let got = quantity(item["value"].as_str().unwrap());
        assert!((got - latencies[pod]).abs() < 1e-3, "{pod}: {got}");
        assert!((got - prom_values[pod]).abs() < 1e-3, "{pod}: adapter {got}, prometheus {}", prom_values[pod]);
    }

    // An Object metric on the Deployment (dotted resource name), v1beta2 then v1beta1.
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/deployments.apps/inference-pool/request_latency_ms";
    let a = get(&aggregator, adapter.addr, path, &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["items"][0]["describedObject"],
        json!({"kind": "Deployment", "namespace": "ai-inference", "name": "inference-pool", "apiVersion": "apps/v1"})
    );
    assert_eq!(v["items"][0]["windowSeconds"], 60);
    let mean = latencies.values().sum::<f64>() / latencies.len() as f64;
    assert!((quantity(v["items"][0]["value"].as_str().unwrap()) - mean).abs() < 1e-3, "{}", a.body);
    let a = get(&aggregator, adapter.addr, &path.replace("v1beta2", "v1beta1"), &headers).await;
    assert_eq!(a.json()["items"][0]["window"], 60);
    let a = get(&aggregator, adapter.addr, &path.replace("inference-pool", "no-such-deployment"), &headers).await;
    assert_eq!(a.status, 404, "{}", a.body);

    // What the controller computes from these answers (AverageValue targets 70 and 200).
    let avg = |items: &[Value]| {
        items.iter().map(|i| quantity(i["value"].as_str().unwrap())).sum::<f64>() / items.len() as f64
    };
    let latency_ratio = avg(&items) / 200.0;
    assert!(latency_ratio > 0.5 && latency_ratio < 2.0);

    // The same question through v1beta1 has the v1beta1 shape.
    let path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ai-inference/pods/%2A/gpu_utilization?labelSelector=app%3Dinference";
    let a = get(&aggregator, adapter.addr, path, &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let first = &a.json()["items"][0];
    assert_eq!(first["metricName"], "gpu_utilization");
    assert!(first.get("selector").is_some_and(Value::is_null));
    assert!(first.get("metric").is_none());

    // Authorization went through SubjectAccessReview with the controller's identity.
    let reviews: Vec<Value> = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let gpu = reviews
        .iter()
        .find(|r| r["spec"]["resourceAttributes"]["subresource"] == "gpu_utilization")
        .expect("a review for gpu_utilization");
    assert_eq!(gpu["spec"]["user"], HPA_USER);
    assert_eq!(
        gpu["spec"]["groups"],
        json!(["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"])
    );
    assert_eq!(gpu["spec"]["extra"]["authentication.kubernetes.io/node-name"], json!(["control-plane-1"]));
    let ra = &gpu["spec"]["resourceAttributes"];
    assert_eq!(
        (ra["namespace"].as_str(), ra["resource"].as_str(), ra["name"].as_str(), ra["version"].as_str()),
        (Some("ai-inference"), Some("pods"), Some("*"), Some("v1beta2"))
    );

    // Someone else, with the same front proxy, is refused with a Status.
    let mut intruder = hpa_headers();
    intruder.retain(|(k, _)| *k != "x-remote-user");
    intruder.push(("x-remote-user", "system:serviceaccount:default:curious"));
    let a = get(&aggregator, adapter.addr, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?labelSelector=app%3Dinference", &intruder).await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.json()["reason"], "Forbidden");

    adapter.stop().await;
}
