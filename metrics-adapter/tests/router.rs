//! The router driven without sockets (`tower::ServiceExt::oneshot`): response shapes of
//! both versions, discovery, single-object reads, errors, readiness and OpenAPI, with the
//! direct source fed from the fixture files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use exposition_parser::{self, Format, Limits};
use gpu_metrics_adapter::api::{self, AppState};
use gpu_metrics_adapter::auth::PeerCertificates;
use gpu_metrics_adapter::auth::authn::Authenticator;
use gpu_metrics_adapter::auth::authz::Authorizer;
use gpu_metrics_adapter::auth::config::AuthnConfig;
use gpu_metrics_adapter::auth::x509::CaBundle;
use gpu_metrics_adapter::certs::Ca;
use gpu_metrics_adapter::http_client::HttpClient;
use gpu_metrics_adapter::labels::LabelStore;
use gpu_metrics_adapter::objects::ObjectNames;
use gpu_metrics_adapter::source::Sources;
use gpu_metrics_adapter::source::direct::discovery::{Target, Targets};
use gpu_metrics_adapter::source::direct::model::{FAMILIES, Report};
use gpu_metrics_adapter::source::direct::{self, DirectSource};
use http_body_util::BodyExt;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tower::ServiceExt;

struct World {
    state: AppState,
    admin: PeerCertificates,
    direct: Arc<DirectSource>,
}

fn report(name: &str) -> Report {
    report_at(name, direct::now_ms())
}

/// The fixture page `name` as read at `at_ms`.
fn report_at(name: &str, at_ms: i64) -> Report {
    let text = support::fixture(name);
    let samples = exposition_parser::parse(text.as_bytes(), Format::PrometheusText, &Limits::default(), |n| {
        FAMILIES.contains(&n)
    })
    .unwrap();
    Report::from_samples(&samples, at_ms)
}

fn world(with_labels: bool, ingest: bool) -> World {
    world_over(Targets::Static(vec![]), with_labels, ingest)
}

fn world_over(targets: Targets, with_labels: bool, ingest: bool) -> World {
    let ca = Ca::new("kubernetes").unwrap();
    let admin = ca.client("admin", &["system:masters"]).unwrap();
    let cfg = direct::Config {
        interval: Duration::from_secs(15),
        timeout: Duration::from_secs(1),
        max_age: Duration::from_secs(60),
        limits: Limits::default(),
        concurrency: 4,
        bearer_token: None,
    };
    let direct = Arc::new(DirectSource::new(cfg, HttpClient::new(None, 1).unwrap(), targets));
    if ingest {
        direct.ingest([
            ("node-1".to_owned(), report("node-a100-mig-mixed.prom")),
            ("node-2".to_owned(), report("node-h100-timesliced.prom")),
        ]);
    }
    let objects = with_labels.then(|| {
        let s = Arc::new(LabelStore::new());
        for i in 0..8 {
            s.apply_pod("ai-inference", &format!("inference-pool-6b7c9-{i}"), &[("app", "inference")]);
        }
        s.apply_pod("ai-inference", "llm-server-7d9f8", &[("app", "llm")]);
        s.mark_synced();
        Arc::new(ObjectNames::pods_and_nodes(s))
    });
    let authn = Authenticator::new(
        AuthnConfig { client_ca: Some(CaBundle::from_pem(ca.cert_pem(), "ca").unwrap()), request_header: None },
        None,
    );
    let check = direct.clone();
    let state = AppState {
        sources: Sources { direct: Some(direct.clone()), prometheus: None },
        objects,
        authn: Arc::new(authn),
        authz: Arc::new(Authorizer::new(
            None,
            Duration::from_secs(10),
            Duration::from_secs(10),
            Duration::from_secs(1),
        )),
        ready_checks: vec![("direct-source".into(), Arc::new(move || check.is_ready()))],
        limits: api::Limits::default(),
    };
    let admin = PeerCertificates::new(vec![CertificateDer::from_pem_slice(admin.cert_pem.as_bytes()).unwrap()]);
    World { state, admin, direct }
}

async fn call(w: &World, path: &str, as_admin: bool) -> (u16, Value, String) {
    let mut req = http::Request::get(path).body(Body::empty()).unwrap();
    if as_admin {
        req.extensions_mut().insert(w.admin.clone());
    }
    let resp = api::router(w.state.clone()).oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null), text)
}

/// Replaces the (clock-dependent) timestamps so whole documents can be compared.
fn without_timestamps(mut v: Value) -> Value {
    for item in v["items"].as_array_mut().into_iter().flatten() {
        let ts = item["timestamp"].as_str().unwrap().to_owned();
        assert_eq!(ts.len(), 20, "{ts}");
        item["timestamp"] = json!("T");
    }
    v
}

#[tokio::test]
async fn single_object_reads_are_one_item_lists_in_each_version() {
    let w = world(true, true);
    let (code, v, _) = call(
        &w,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/llm-server-7d9f8/gpu_utilization",
        true,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        without_timestamps(v),
        json!({"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","metadata":{},"items":[
            {"describedObject":{"kind":"Pod","namespace":"ai-inference","name":"llm-server-7d9f8","apiVersion":"/v1"},
             "metric":{"name":"gpu_utilization","selector":null},"timestamp":"T","value":"78"}]})
    );
    let (code, v, _) = call(&w, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ai-inference/pods/llm-server-7d9f8/gpu_memory_utilization?metricLabelSelector=mig_profile%3D3g.40gb", true).await;
    assert_eq!(code, 200);
    assert_eq!(
        without_timestamps(v),
        json!({"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta1","metadata":{},"items":[
            {"describedObject":{"kind":"Pod","namespace":"ai-inference","name":"llm-server-7d9f8","apiVersion":"/v1"},
             "metricName":"gpu_memory_utilization","timestamp":"T","value":"75",
             "selector":{"matchLabels":{"mig_profile":"3g.40gb"}}}]})
    );
    // Fractional values are canonical quantities.
    let (_, v, _) = call(
        &w,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/inference-pool-6b7c9-2/gpu_utilization",
        true,
    )
    .await;
    assert_eq!(v["items"][0]["value"], "17250m");
}

#[tokio::test]
async fn star_and_percent_2a_and_label_selectors() {
    let w = world(true, true);
    let (_, a, _) =
        call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization", true).await;
    let (_, b, _) =
        call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization", true).await;
    assert_eq!(a, b);
    // Of the 12 pods on the pages, the 9 the API server has (the store): embedding-svc-0
    // to -2 are only on a page.
    let names: Vec<&str> =
        a["items"].as_array().unwrap().iter().map(|i| i["describedObject"]["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 9, "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("embedding-svc")), "{names:?}");
    // Without the Kubernetes API (standalone) every pod on the pages answers.
    let standalone = world(false, true);
    let (_, v, _) =
        call(&standalone, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization", true)
            .await;
    assert_eq!(v["items"].as_array().unwrap().len(), 12);
    let (_, v, _) = call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?labelSelector=app+notin+%28inference%29", true).await;
    let names: Vec<&str> =
        v["items"].as_array().unwrap().iter().map(|i| i["describedObject"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["llm-server-7d9f8"]);
    let (_, v, _) = call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?labelSelector=app%3Dnobody", true).await;
    assert_eq!(v["items"], json!([]));
    // v1beta2 echoes the metric selector in metric.selector (the 1g.10gb pods,
    // embedding-svc-*, are only on a page: asked of the standalone world).
    let (_, v, _) = call(&standalone, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?metricLabelSelector=mig_profile+in+%281g.10gb%29", true).await;
    assert_eq!(v["items"].as_array().unwrap().len(), 3);
    assert_eq!(
        v["items"][0]["metric"]["selector"],
        json!({"matchExpressions":[{"key":"mig_profile","operator":"In","values":["1g.10gb"]}]})
    );
    // `!=` is answered and echoed as NotIn of the one value (prometheus-adapter fails
    // such a read with 500: Go's ParseToLabelSelector has no `!=`).
    let (c, v, _) = call(&standalone, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?metricLabelSelector=mig_profile%21%3D1g.10gb", true).await;
    assert_eq!(c, 200, "{v}");
    assert!(!v["items"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(
        v["items"][0]["metric"]["selector"],
        json!({"matchExpressions":[{"key":"mig_profile","operator":"NotIn","values":["1g.10gb"]}]})
    );
}

#[tokio::test]
async fn discovery_lists_what_exists_now() {
    let empty = world(false, false);
    let (code, v, _) = call(&empty, "/apis/custom.metrics.k8s.io/v1beta1", true).await;
    assert_eq!(code, 200);
    assert_eq!(
        v,
        json!({"kind":"APIResourceList","apiVersion":"v1","groupVersion":"custom.metrics.k8s.io/v1beta1","resources":[]})
    );
    let (code, v, _) = call(&empty, "/apis", true).await;
    assert_eq!(code, 200);
    assert_eq!(v["groups"][0]["preferredVersion"]["groupVersion"], "custom.metrics.k8s.io/v1beta2");
    let (code, v, _) = call(&empty, "/apis/custom.metrics.k8s.io", true).await;
    assert_eq!((code, v["kind"].as_str()), (200, Some("APIGroup")));
    empty.direct.ingest([("node-2".to_owned(), report("node-h100-timesliced.prom"))]);
    let (_, v, _) = call(&empty, "/apis/custom.metrics.k8s.io/v1beta2", true).await;
    let names: Vec<&str> = v["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    // Time-sliced pods have utilization and memory, but hold no whole GPU: no pod power.
    assert!(names.contains(&"pods/gpu_utilization") && names.contains(&"pods/gpu_memory_used_bytes"), "{names:?}");
    assert!(!names.contains(&"pods/gpu_power_usage_watts"), "{names:?}");
    assert!(names.contains(&"nodes/gpu_power_usage_watts"), "{names:?}");
    let pods = v["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods/gpu_utilization").unwrap();
    assert_eq!(
        pods,
        &json!({"name":"pods/gpu_utilization","singularName":"","namespaced":true,"kind":"MetricValueList","verbs":["get"]})
    );
}

#[tokio::test]
async fn errors_are_statuses_with_the_right_code() {
    let w = world(false, true);
    let cases = [
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_temperature_celsius", 404, "NotFound"),
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/ghost/gpu_utilization", 404, "NotFound"),
        (
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/nodes/gpu-node-1/gpu_utilization",
            404,
            "NotFound",
        ),
        ("/apis/custom.metrics.k8s.io/v1beta2/pods/x/gpu_utilization", 404, "NotFound"),
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/metrics/gpu_memory_utilization", 404, "NotFound"),
        (
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization?labelSelector=a%3D",
            400,
            "BadRequest",
        ),
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/a..b/pods/*/gpu_utilization", 400, "BadRequest"),
    ];
    for (path, code, reason) in cases {
        let (c, v, body) = call(&w, path, true).await;
        assert_eq!((c, v["reason"].as_str()), (code, Some(reason)), "{path}: {body}");
        assert_eq!(v["code"], code);
        assert_eq!(v["status"], "Failure");
    }
    let (c, v, _) = call(&w, "/apis", false).await;
    assert_eq!((c, v["reason"].as_str()), (401, Some("Unauthorized")));
    let req = http::Request::post("/apis").body(Body::empty()).unwrap();
    let resp = api::router(w.state.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 405);
}

#[tokio::test]
async fn with_no_exporter_answering_a_read_says_why_instead_of_an_empty_list() {
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization";
    // No exporter listed at all.
    let w = world_over(Targets::Static(vec![]), false, false);
    w.direct.refresh().await;
    let (status, body, _) = call(&w, path, true).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["message"], "no GPU exporter to read: --exporter-url name none");
    // One listed, none answering: the scrape's error is in the message.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{closed}/metrics");
    let w = world_over(Targets::Static(vec![Target { url: url.clone(), node: None }]), false, false);
    w.direct.refresh().await;
    let (status, body, _) = call(&w, path, true).await;
    assert_eq!(status, 503, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "none of the 1 GPU exporters (--exporter-url) has answered within --max-age 60s; last error: "
        ),
        "{message}"
    );
    assert!(message.contains(&url), "{message}");
    // Kept from a scrape of this cycle, but every value past --max-age by the time of
    // the read (the exporters stopped between two cycles): the same answer, not a list
    // that is empty without a word.
    let w = world(false, false);
    w.direct.ingest([("node-2".to_owned(), report_at("node-h100-timesliced.prom", direct::now_ms() - 61_000))]);
    let (status, body, _) = call(&w, path, true).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["message"].as_str().unwrap().contains("has answered within --max-age 60s"), "{body}");
    // Exporters answering but no value for these pods: an empty list, as before.
    let w = world(false, true);
    let (status, body, _) =
        call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/no-gpu-here/pods/*/gpu_utilization", true).await;
    assert_eq!((status, body["items"].as_array().map(Vec::len)), (200, Some(0)), "{body}");
}

#[tokio::test]
async fn namespace_and_node_metrics() {
    let w = world(false, true);
    let (c, v, _) =
        call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/metrics/gpu_memory_used_bytes", true)
            .await;
    assert_eq!(c, 200);
    assert_eq!(v["items"][0]["describedObject"], json!({"kind":"Namespace","name":"ai-inference","apiVersion":"/v1"}));
    // the namespace total is the sum over its pods
    let (_, pods, _) =
        call(&w, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_memory_used_bytes", true)
            .await;
    let sum: f64 =
        pods["items"].as_array().unwrap().iter().map(|i| support::quantity(i["value"].as_str().unwrap())).sum();
    assert!((support::quantity(v["items"][0]["value"].as_str().unwrap()) - sum).abs() < 1.0);
    let (c, v, _) = call(&w, "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/gpu_utilization", true).await;
    assert_eq!(c, 200);
    let nodes: Vec<&str> =
        v["items"].as_array().unwrap().iter().map(|i| i["describedObject"]["name"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["gpu-node-1", "gpu-node-2"]);
    assert!(v["items"][0]["describedObject"].get("namespace").is_none());
}

#[tokio::test]
async fn readiness_and_openapi() {
    let w = world(false, false);
    let resp =
        api::router(w.state.clone()).oneshot(http::Request::get("/readyz").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), 503);
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(text.contains("[-]direct-source failed"), "{text}");
    w.direct.ingest([("n".to_owned(), Report::default())]);
    let resp =
        api::router(w.state.clone()).oneshot(http::Request::get("/readyz").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let (c, v, _) = call(&w, "/openapi/v2", true).await;
    assert_eq!((c, v["swagger"].as_str()), (200, Some("2.0")));
    let (c, v, _) = call(&w, "/openapi/v3", true).await;
    assert_eq!(c, 200);
    let url = v["paths"]["apis/custom.metrics.k8s.io/v1beta1"]["serverRelativeURL"].as_str().unwrap().to_owned();
    let (c, v, _) = call(&w, &url, true).await;
    assert_eq!((c, v["openapi"].as_str()), (200, Some("3.0.0")));
    let (c, _, _) = call(&w, "/openapi/v3/apis/custom.metrics.k8s.io/extra/v1beta2", true).await;
    assert_eq!(c, 404);
}
