//! Kubernetes API interactions against an in-test API server speaking the real wire
//! protocol: TokenReview and SubjectAccessReview (with their caches), the authentication
//! ConfigMap (read at start and re-read), EndpointSlice discovery of exporters, and the
//! metadata watch of pods that feeds `labelSelector`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Behavior, Exporter, Pki, fixture, get, tls_client};
use test_support::apiserver::ApiServer;

const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const TOKENREVIEW: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

async fn adapter(pki: &Pki, fake: &ApiServer, extra: &[String]) -> support::Running {
    let api = fake.serve().await;
    let mut flags = pki.serving_args();
    flags.push(format!("--kubeconfig={}", support::adapter_kubeconfig(api, pki.dir.path()).display()));
    flags.extend(extra.iter().cloned());
    support::start(&flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_and_access_reviews_are_cached_briefly() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    fake.token("alice-token", "alice", &["team-a"]);
    fake.set_policy(|user, spec| {
        (user == "alice" && spec["resourceAttributes"]["namespace"] == "ai-inference", String::new())
    });
    // A `*` read answers the pods the API server has.
    for i in 0..8 {
        fake.add_labelled_pod("ai-inference", &format!("inference-pool-6b7c9-{i}"), &[("app", "inference")]);
    }
    let a = adapter(
        &pki,
        &fake,
        &[
            format!("--exporter-url={}", exporter.url()),
            "--scrape-interval=1s".into(),
            "--authentication-token-cache-ttl=1s".into(),
            "--authorization-cache-allow-ttl=1s".into(),
            "--authorization-cache-deny-ttl=1s".into(),
        ],
    )
    .await;
    let client = tls_client(&pki, None);
    let ok_path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization";
    let no_path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/kube-system/pods/%2A/gpu_utilization";
    let alice = [("authorization", "Bearer alice-token")];
    support::eventually("metrics", Duration::from_secs(10), async || {
        get(&client, a.addr, ok_path, &alice).await.body.contains("inference-pool")
    })
    .await;
    let (tr, sar) = (fake.count("POST", TOKENREVIEW), fake.count("POST", SAR));
    for _ in 0..5 {
        assert_eq!(get(&client, a.addr, ok_path, &alice).await.status, 200);
        assert_eq!(get(&client, a.addr, no_path, &alice).await.status, 403);
    }
    // Within the TTLs nothing new is asked (at most one refresh if a TTL just ran out).
    assert!(fake.count("POST", TOKENREVIEW) <= tr + 1);
    assert!(fake.count("POST", SAR) <= sar + 2);
    // The review carried the token.
    let body = fake.requests().iter().find(|r| r.path == TOKENREVIEW).unwrap().body.clone();
    let review: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["spec"]["token"], "alice-token");
    // After the TTL the API is asked again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = fake.count("POST", SAR);
    assert_eq!(get(&client, a.addr, ok_path, &alice).await.status, 200);
    assert_eq!(fake.count("POST", SAR), before + 1);

    // Unknown tokens: 401, and the refusal is cached too.
    let bad = [("authorization", "Bearer stolen")];
    let before = fake.count("POST", TOKENREVIEW);
    for _ in 0..3 {
        let r = get(&client, a.addr, ok_path, &bad).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.json()["reason"], "Unauthorized");
    }
    assert_eq!(fake.count("POST", TOKENREVIEW), before + 1);

    // When the API fails: tokens are not accepted (401), authorization is an error (500), never an allow.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fake.fail_reviews(true);
    assert_eq!(get(&client, a.addr, ok_path, &alice).await.status, 401);
    let admin_like = pki.client_ca.client("carol", &[]).unwrap();
    let carol = tls_client(&pki, Some(&admin_like));
    let r = get(&carol, a.addr, ok_path, &[]).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.json()["reason"], "InternalError");
    fake.fail_reviews(false);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_configmap_is_read_and_reloaded() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let fake = support::apiserver();
    // At first the ConfigMap trusts another front proxy CA.
    let other = gpu_metrics_adapter::certs::Ca::new("old-front-proxy-ca").unwrap();
    let mut cm = pki.auth_configmap();
    cm.insert("requestheader-client-ca-file".into(), other.cert_pem().to_owned());
    fake.authentication_config_map(cm);
    fake.set_policy(|_, _| (true, String::new()));
    let a = adapter(
        &pki,
        &fake,
        &[format!("--exporter-url={}", exporter.url()), "--authentication-config-refresh=200ms".into()],
    )
    .await;
    assert!(fake.count("GET", "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication") >= 1);
    let aggregator = tls_client(&pki, Some(&pki.front_proxy_client));
    let headers = support::hpa_headers();
    assert_eq!(get(&aggregator, a.addr, "/apis", &headers).await.status, 401);
    // kube-apiserver rotates its front-proxy CA: the adapter follows without a restart.
    fake.authentication_config_map(pki.auth_configmap());
    support::eventually("new front-proxy CA", Duration::from_secs(5), async || {
        get(&aggregator, a.addr, "/apis", &headers).await.status == 200
    })
    .await;
    // A front-proxy certificate with a name outside requestheader-allowed-names is refused.
    let impostor = pki.front_proxy_ca.client("not-the-aggregator", &[]).unwrap();
    let impostor = tls_client(&pki, Some(&impostor));
    assert_eq!(get(&impostor, a.addr, "/apis", &headers).await.status, 401);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporters_come_from_ready_endpoints_and_pods_from_the_watch() {
    let pki = Pki::new();
    let ready = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let not_ready = Exporter::start(Behavior::Serve(fixture("node-a100-mig-mixed.prom"))).await;
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    fake.set_policy(|_, _| (true, String::new()));
    fake.add_endpoint_slice(serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "gpu-exporter-x1", "namespace": "gpu-telemetry", "labels": {"kubernetes.io/service-name": "gpu-exporter"}},
        "addressType": "IPv4",
        "ports": [{"name": "metrics", "port": ready.addr.port()}],
        "endpoints": [
            {"addresses": ["127.0.0.1"], "nodeName": "gpu-node-2", "conditions": {"ready": true}},
            {"addresses": ["127.0.0.2"], "nodeName": "gpu-node-1", "conditions": {"ready": false}}
        ]
    })).unwrap());
    for i in 0..4 {
        fake.add_labelled_pod("ai-inference", &format!("inference-pool-6b7c9-{i}"), &[("app", "inference")]);
    }
    let a = adapter(&pki, &fake, &["--scrape-interval=300ms".into()]).await;
    let aggregator = tls_client(&pki, Some(&pki.front_proxy_client));
    let headers = support::hpa_headers();
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization?labelSelector=app%3Dinference";
    let count = async || {
        let r = get(&aggregator, a.addr, path, &headers).await;
        if r.status == 200 { r.json()["items"].as_array().unwrap().len() } else { 0 }
    };
    support::eventually("four labelled pods", Duration::from_secs(10), async || count().await == 4).await;
    // The discovery request named the Service the way kube-proxy does.
    let q = fake.requests().iter().find(|r| r.path.ends_with("/endpointslices")).unwrap().clone();
    assert_eq!(q.path, "/apis/discovery.k8s.io/v1/namespaces/gpu-telemetry/endpointslices");
    assert_eq!(q.param("labelSelector").as_deref(), Some("kubernetes.io/service-name=gpu-exporter"));
    // The pod watch asked for metadata only.
    assert!(fake.count("GET", "/api/v1/pods") >= 1);
    // A new replica appears through the watch, without a restart.
    for i in 4..8 {
        fake.add_labelled_pod("ai-inference", &format!("inference-pool-6b7c9-{i}"), &[("app", "inference")]);
    }
    support::eventually("eight labelled pods", Duration::from_secs(10), async || count().await == 8).await;
    // The not-ready endpoint was never scraped (it points at 127.0.0.2 on the ready port,
    // and the other exporter was never listed at all).
    assert_eq!(*not_ready.hits.lock().unwrap(), 0);
    assert!(*ready.hits.lock().unwrap() >= 1);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_bound_to_system_authenticated_authorizes_every_authenticated_user() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    // TokenReview answers without system:authenticated, as some webhook authenticators do;
    // the policy grants metric reads to the group only, as a ClusterRoleBinding to
    // system:authenticated would.
    fake.token("bob-token", "bob", &["team-b"]);
    fake.set_policy(|_, spec| {
        let groups = spec["groups"].as_array().cloned().unwrap_or_default();
        (groups.iter().any(|g| g == "system:authenticated"), String::new())
    });
    let a = adapter(&pki, &fake, &[format!("--exporter-url={}", exporter.url()), "--scrape-interval=1s".into()]).await;
    let client = tls_client(&pki, None);
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization";
    let bob = [("authorization", "Bearer bob-token")];
    support::eventually("metrics for bob", Duration::from_secs(10), async || {
        get(&client, a.addr, path, &bob).await.status == 200
    })
    .await;
    let body = fake.requests().iter().rev().find(|r| r.path == SAR).unwrap().body.clone();
    let review: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["spec"]["user"], "bob");
    assert_eq!(review["spec"]["groups"], json!(["team-b", "system:authenticated"]));
    a.stop().await;
}
