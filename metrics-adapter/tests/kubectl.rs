//! `kubectl get --raw` (a real Kubernetes client) against the adapter over TLS with a
//! kubeconfig and a client certificate: answers, errors as kubectl prints them, and
//! authorization through SubjectAccessReview for users outside system:masters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::kubectl::{json, kubeconfig, kubectl};
use support::{Behavior, Exporter, Pki, fixture, label, quantity, series};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_metrics_with_a_client_certificate() {
    let pki = Pki::new();
    let node1 = fixture("node-a100-mig-mixed.prom");
    let exporter = Exporter::start(Behavior::Serve(node1.clone())).await;
    let mut flags = pki.serving_args();
    flags.extend(pki.auth_file_args());
    flags.extend(["--standalone".into(), format!("--exporter-url={}", exporter.url()), "--scrape-interval=1s".into()]);
    let adapter = support::start(&flags).await;
    let home = tempfile::tempdir().unwrap();
    let admin = pki.client_ca.client("dev-admin", &["system:masters"]).unwrap();
    let kc = kubeconfig(&pki, "admin", adapter.addr.port(), &admin);

    support::eventually("first scrape", Duration::from_secs(10), async || {
        kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2").await.stdout.contains("pods/gpu_utilization")
    })
    .await;

    // A pod holding two whole GPUs gets their mean.
    let training: Vec<f64> = series(&node1, "gpu_utilization")
        .into_iter()
        .filter(|(l, _)| label(l, "pod") == Some("offline-training-x2k4p"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(training.len(), 2);
    let o = kubectl(
        home.path(),
        &kc,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml-training/pods/offline-training-x2k4p/gpu_utilization",
    )
    .await;
    let v = json(&o);
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    let got = quantity(v["items"][0]["value"].as_str().unwrap());
    assert!((got - (training[0] + training[1]) / 2.0).abs() < 1e-3, "{got}");

    // Power for the pod: the sum over its whole GPUs.
    let power: f64 = series(&node1, "gpu_power_usage_watts")
        .into_iter()
        .filter(|(l, _)| label(l, "pod") == Some("offline-training-x2k4p"))
        .map(|(_, v)| v)
        .sum();
    let v = json(
        &kubectl(
            home.path(),
            &kc,
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml-training/pods/*/gpu_power_usage_watts",
        )
        .await,
    );
    assert!((quantity(v["items"][0]["value"].as_str().unwrap()) - power).abs() < 1e-3);

    // metricLabelSelector narrows to a MIG profile; v1beta1 echoes it in `selector`.
    let o = kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ai-inference/pods/*/gpu_memory_used_bytes?metricLabelSelector=mig_profile%3D1g.10gb").await;
    let v = json(&o);
    let pods: Vec<&str> =
        v["items"].as_array().unwrap().iter().map(|i| i["describedObject"]["name"].as_str().unwrap()).collect();
    assert_eq!(pods, ["embedding-svc-0", "embedding-svc-1", "embedding-svc-2"]);
    assert_eq!(v["items"][0]["selector"], serde_json::json!({"matchLabels": {"mig_profile": "1g.10gb"}}));
    let embed0: f64 = series(&node1, "gpu_memory_used_bytes")
        .into_iter()
        .find(|(l, _)| label(l, "pod") == Some("embedding-svc-0"))
        .map(|(_, v)| v)
        .unwrap();
    assert!((quantity(v["items"][0]["value"].as_str().unwrap()) - embed0).abs() < 1.0);

    // ... or to a GPU model, written as GPU feature discovery writes it.
    let o = kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization?metricLabelSelector=model%3DNVIDIA-A100-SXM4-80GB").await;
    assert_eq!(json(&o)["items"].as_array().unwrap().len(), 4);
    let o = kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization?metricLabelSelector=model%3DNVIDIA-H100-80GB-HBM3").await;
    assert!(json(&o)["items"].as_array().unwrap().is_empty());

    // Namespace totals and node metrics.
    let o = kubectl(
        home.path(),
        &kc,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml-training/metrics/gpu_power_usage_watts",
    )
    .await;
    let v = json(&o);
    assert_eq!(
        v["items"][0]["describedObject"],
        serde_json::json!({"kind": "Namespace", "name": "ml-training", "apiVersion": "/v1"})
    );
    assert!((quantity(v["items"][0]["value"].as_str().unwrap()) - power).abs() < 1e-3);
    let o = kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/nodes/gpu-node-1/gpu_utilization").await;
    let v = json(&o);
    assert_eq!(v["items"][0]["describedObject"]["kind"], "Node");

    // Errors arrive as Status objects kubectl understands.
    let o =
        kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/no_such_metric")
            .await;
    assert!(!o.ok);
    assert!(
        o.stderr.contains("(NotFound)")
            && o.stderr.contains("the server could not find the metric no_such_metric for pods"),
        "{}",
        o.stderr
    );
    let o = kubectl(
        home.path(),
        &kc,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/ghost/gpu_utilization",
    )
    .await;
    assert!(o.stderr.contains("(NotFound)") && o.stderr.contains("pods ghost"), "{}", o.stderr);
    let o = kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization?metricLabelSelector=model+in+%28a").await;
    assert!(o.stderr.contains("(BadRequest)") && o.stderr.contains("position"), "{}", o.stderr);

    // A user outside system:masters has no authorizer to ask in standalone mode.
    let bob = pki.client_ca.client("bob", &["developers"]).unwrap();
    let kc_bob = kubeconfig(&pki, "bob", adapter.addr.port(), &bob);
    let o = kubectl(
        home.path(),
        &kc_bob,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization",
    )
    .await;
    assert!(
        o.stderr.contains("(Forbidden)")
            && o.stderr.contains("User \"bob\" cannot get resource \"pods/gpu_utilization\""),
        "{}",
        o.stderr
    );
    // ... but discovery is open to every authenticated user.
    assert!(kubectl(home.path(), &kc_bob, "/apis").await.ok);

    // A certificate from another CA does not authenticate.
    let stranger =
        gpu_metrics_adapter::certs::Ca::new("stranger").unwrap().client("dev-admin", &["system:masters"]).unwrap();
    let kc_stranger = kubeconfig(&pki, "stranger", adapter.addr.port(), &stranger);
    let o = kubectl(home.path(), &kc_stranger, "/apis").await;
    assert!(!o.ok && o.stderr.contains("Unauthorized"), "{}", o.stderr);

    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_user_authorized_by_subject_access_review() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    fake.set_policy(|user, spec| {
        let ra = &spec["resourceAttributes"];
        (user == "bob" && ra["namespace"] == "ai-inference", "bound to custom-metrics-reader in ai-inference".into())
    });
    // A `*` read answers the pods the API server has.
    for i in 0..8 {
        fake.add_labelled_pod("ai-inference", &format!("inference-pool-6b7c9-{i}"), &[("app", "inference")]);
    }
    let api = fake.serve().await;
    let mut flags = pki.serving_args();
    flags.extend([
        format!("--kubeconfig={}", support::adapter_kubeconfig(api, pki.dir.path()).display()),
        format!("--exporter-url={}", exporter.url()),
        "--scrape-interval=1s".into(),
    ]);
    let adapter = support::start(&flags).await;
    let home = tempfile::tempdir().unwrap();
    let bob = pki.client_ca.client("bob", &["developers"]).unwrap();
    let kc = kubeconfig(&pki, "bob", adapter.addr.port(), &bob);
    support::eventually("metrics", Duration::from_secs(10), async || {
        kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization")
            .await
            .ok
    })
    .await;
    let o =
        kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization")
            .await;
    assert_eq!(json(&o)["items"].as_array().unwrap().len(), 8);
    let o =
        kubectl(home.path(), &kc, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/kube-system/pods/*/gpu_utilization")
            .await;
    assert!(o.stderr.contains("(Forbidden)"), "{}", o.stderr);
    adapter.stop().await;
}

/// The README's demo: `dev-certs`, then the adapter standalone with that bundle, then
/// `kubectl get --raw` with the written kubeconfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_certs_bundle_works_with_kubectl() {
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let dir = tempfile::tempdir().unwrap();
    let port = test_support::free_port();
    let b = gpu_metrics_adapter::certs::write_dev_bundle(
        &dir.path().join("certs"),
        &format!("https://127.0.0.1:{port}"),
        &["localhost", "127.0.0.1"],
    )
    .unwrap();
    let adapter = support::start(&[
        format!("--secure-port={port}"),
        "--standalone".into(),
        format!("--tls-cert-file={}", b.serving_cert.display()),
        format!("--tls-private-key-file={}", b.serving_key.display()),
        format!("--client-ca-file={}", b.ca.display()),
        format!("--exporter-url={}", exporter.url()),
    ])
    .await;
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization";
    support::eventually("demo answer", Duration::from_secs(10), async || {
        let o = kubectl(dir.path(), &b.kubeconfig, path).await;
        o.ok && o.stdout.contains("inference-pool-6b7c9-0")
    })
    .await;
    adapter.stop().await;
}
