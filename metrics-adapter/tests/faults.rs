//! Bad input and faults, over real TLS connections: Prometheus down, slow or answering
//! garbage (bounded time, an error, never zeros); exporters that fail, hang, send
//! malformed or oversized payloads (metrics go missing, never zero); malformed selectors;
//! unknown paths and path tricks; oversized URLs and headers; wrong methods; identity
//! headers without a front-proxy certificate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::{Behavior, Exporter, Pki, fixture, get, raw, raw_status, tls_client};

const RULES: &str = "rules:\n  - name: request_latency_ms\n    query: 'avg by (<<.GroupBy>>) (request_latency_ms{<<.LabelMatchers>>})'\n    resources:\n      pods: { label: pod }\n";

async fn standalone(pki: &Pki, extra: &[String]) -> support::Running {
    let mut flags = pki.serving_args();
    flags.extend(pki.auth_file_args());
    flags.push("--standalone".into());
    flags.extend(extra.iter().cloned());
    support::start(&flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_down_slow_or_broken_is_a_bounded_error_never_zero() {
    let pki = Pki::new();
    let rules = pki.write("rules.yaml", RULES);
    // A port nobody listens on.
    let closed = format!("127.0.0.1:{}", test_support::free_port());
    // A server that accepts and never answers.
    let slow = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow_addr = slow.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = slow.accept().await {
            held.push(s);
        }
    });
    // A server answering HTML with 502.
    let garbage = Exporter::start(Behavior::Status(502)).await;
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/request_latency_ms";
    for (name, url) in [
        ("down", format!("http://{closed}")),
        ("slow", format!("http://{slow_addr}")),
        ("broken", format!("http://{}/", garbage.addr)),
    ] {
        let adapter = standalone(
            &pki,
            &[
                "--direct-source=false".into(),
                format!("--prometheus-url={url}"),
                format!("--prometheus-rules-file={}", rules.display()),
                "--prometheus-timeout=700ms".into(),
            ],
        )
        .await;
        let client = tls_client(&pki, Some(&admin));
        let started = Instant::now();
        let a = get(&client, adapter.addr, path, &[]).await;
        let took = started.elapsed();
        assert_eq!(a.status, 503, "{name}: {}", a.body);
        let s = a.json();
        assert_eq!(
            (s["kind"].as_str(), s["reason"].as_str(), s["code"].as_u64()),
            (Some("Status"), Some("ServiceUnavailable"), Some(503)),
            "{name}"
        );
        assert!(took < Duration::from_secs(3), "{name}: took {took:?}");
        if name == "slow" {
            assert!(s["message"].as_str().unwrap().contains("no answer within"), "{}", a.body);
        }
        // Discovery does not depend on Prometheus.
        let d = get(&client, adapter.addr, "/apis", &[]).await;
        assert_eq!(d.status, 200);
        let d = get(&client, adapter.addr, "/apis/custom.metrics.k8s.io/v1beta2", &[]).await;
        assert_eq!(d.status, 200);
        assert!(d.body.contains("pods/request_latency_ms"));
        adapter.stop().await;
    }
}

/// Polls a pod's value until it disappears (404, or 503 naming why), failing if a zero
/// is ever served.
async fn wait_until_missing(client: &support::TlsClient, addr: std::net::SocketAddr, pod: &str) {
    let one = format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml-training/pods/{pod}/gpu_utilization");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = get(client, addr, &one, &[]).await;
        // Missing: not found, or, once no exporter has a fresh value at all, unavailable
        // with the reason (the direct source's `query`).
        if a.status == 404 {
            assert_eq!(a.json()["reason"], "NotFound");
            return;
        }
        if a.status == 503 {
            assert_eq!(a.json()["reason"], "ServiceUnavailable");
            assert!(a.body.contains("has answered within --max-age"), "{}", a.body);
            return;
        }
        assert_eq!(a.status, 200, "{}", a.body);
        let v = a.json()["items"][0]["value"].as_str().unwrap().to_owned();
        assert_ne!(v, "0", "a failing exporter must never turn into zeros");
        assert!(Instant::now() < deadline, "value never went missing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_exporters_make_metrics_missing_not_zero() {
    let pki = Pki::new();
    let good = fixture("node-a100-mig-mixed.prom");
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let broken_payloads = [
        ("malformed", Behavior::Serve(format!("{good}gpu_utilization{{gpu=\"0\" 12\n"))),
        ("oversized", Behavior::Oversized(200_000)),
        ("http 500", Behavior::Status(500)),
        ("hang", Behavior::Hang),
        ("garbage", Behavior::Serve("\u{fffd}\u{fffd} binary noise \u{1}\n".into())),
        (
            "openmetrics with junk after samples",
            Behavior::ServeWithType(
                format!("{good}gpu_utilization 1 2 3\n# EOF\n"),
                "application/openmetrics-text; version=1.0.0",
            ),
        ),
    ];
    for (name, bad) in broken_payloads {
        let exporter = Exporter::start(Behavior::Serve(good.clone())).await;
        let adapter = standalone(
            &pki,
            &[
                format!("--exporter-url={}", exporter.url()),
                "--scrape-interval=300ms".into(),
                "--scrape-timeout=300ms".into(),
                "--max-age=1s".into(),
                "--scrape-max-bytes=100000".into(),
            ],
        )
        .await;
        let client = tls_client(&pki, Some(&admin));
        let list = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml-training/pods/%2A/gpu_utilization";
        support::eventually("first scrape", Duration::from_secs(5), async || {
            get(&client, adapter.addr, list, &[]).await.body.contains("offline-training-x2k4p")
        })
        .await;
        exporter.set(bad);
        wait_until_missing(&client, adapter.addr, "offline-training-x2k4p").await;
        // The list, its only exporter failing, says why it has nothing (503 naming the
        // exporter and its error) rather than answering an empty list or zeros.
        let a = get(&client, adapter.addr, list, &[]).await;
        assert_eq!(a.status, 503, "{name}: {}", a.body);
        assert!(a.body.contains("has answered within --max-age 1s"), "{name}: {}", a.body);
        assert!(!a.body.contains("offline-training-x2k4p"), "{name}: {}", a.body);
        // And the pod comes back when the exporter recovers.
        exporter.set(Behavior::Serve(good.clone()));
        support::eventually("recovery", Duration::from_secs(5), async || {
            get(&client, adapter.addr, list, &[]).await.body.contains("offline-training-x2k4p")
        })
        .await;
        adapter.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_status() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-a100-mig-mixed.prom"))).await;
    let adapter =
        standalone(&pki, &[format!("--exporter-url={}", exporter.url()), "--scrape-interval=1s".into()]).await;
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let client = tls_client(&pki, Some(&admin));
    let base = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization";

    // Malformed selectors: 400, naming the parameter and where it broke.
    for (q, param) in [
        ("labelSelector=app+in+%28a%2Cb", "labelSelector"),
        ("labelSelector=%21%21x", "labelSelector"),
        ("metricLabelSelector=model%3D%3D%3Dx", "metricLabelSelector"),
        ("metricLabelSelector=gpu%3Eabc", "metricLabelSelector"),
    ] {
        let a = get(&client, adapter.addr, &format!("{base}?{q}"), &[]).await;
        assert_eq!(a.status, 400, "{q}: {}", a.body);
        let m = a.json()["message"].as_str().unwrap().to_owned();
        assert!(m.contains(param) && m.contains("at position"), "{q}: {m}");
        assert_eq!(a.json()["reason"], "BadRequest");
    }
    // A labelSelector cannot be evaluated without the Kubernetes API: said plainly.
    let a = get(&client, adapter.addr, &format!("{base}?labelSelector=app%3Dinference"), &[]).await;
    assert_eq!(a.status, 400);
    assert!(a.body.contains("standalone"));

    // Unknown paths and metrics: 404 Status.
    for p in [
        "/apis/custom.metrics.k8s.io/v1beta3",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods",
        "/apis/external.metrics.k8s.io/v1beta1",
        "/api/v1/pods",
        "/metrics",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/deployments.apps/x/gpu_utilization",
        "/apis/custom.metrics.k8s.io/v1beta2/nodes/nowhere/gpu_utilization",
    ] {
        let a = get(&client, adapter.addr, p, &[]).await;
        assert_eq!(a.status, 404, "{p}: {}", a.body);
        assert_eq!(a.json()["kind"], "Status", "{p}");
    }

    // Path tricks, sent raw so no client normalizes them.
    let admin_pair = Some(&admin);
    for (target, want) in [
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/../pods/%2A/gpu_utilization", 400),
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/%2e%2e/pods/%2A/gpu_utilization", 400),
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/a%2Fb/gpu_utilization", 400),
        ("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%00/gpu_utilization", 400),
        ("/apis/custom.metrics.k8s.io/v1beta2//namespaces/ai-inference/pods/x/gpu_utilization", 404),
        ("/apis/custom.metrics.k8s.io/../../healthz", 400),
        ("/apis/../apis/custom.metrics.k8s.io/v1beta2", 404),
    ] {
        let req = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let resp = raw(&pki, admin_pair, adapter.addr, req.as_bytes()).await;
        assert_eq!(raw_status(&resp), want, "{target}: {resp}");
    }
    // A request line hyper cannot parse is refused at the HTTP layer.
    let resp = raw(&pki, admin_pair, adapter.addr, b"GET /apis\x01 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(raw_status(&resp), 400, "{resp}");

    // Oversized URL and headers.
    let long = format!("{base}?labelSelector={}", "a".repeat(20_000));
    let a = get(&client, adapter.addr, &long, &[]).await;
    assert_eq!(a.status, 414, "{}", a.body);
    assert_eq!(a.json()["code"], 414);
    let big = "x".repeat(40_000);
    let a = get(&client, adapter.addr, base, &[("x-padding-1", &big), ("x-padding-2", &big)]).await;
    assert_eq!(a.status, 431, "{}", a.body);
    let huge = "y".repeat(600_000);
    let req = format!("GET {base} HTTP/1.1\r\nHost: localhost\r\nX-Huge: {huge}\r\nConnection: close\r\n\r\n");
    let resp = raw(&pki, admin_pair, adapter.addr, req.as_bytes()).await;
    assert_eq!(raw_status(&resp), 431, "{}", &resp[..resp.len().min(200)]);

    // Methods: the API is read-only.
    let req = format!("POST {base} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}");
    let resp = raw(&pki, admin_pair, adapter.addr, req.as_bytes()).await;
    assert_eq!(raw_status(&resp), 405, "{resp}");

    // Media types: protobuf only is refused, protobuf with */* gets JSON.
    let a = get(&client, adapter.addr, "/apis", &[("accept", "application/vnd.kubernetes.protobuf")]).await;
    assert_eq!(a.status, 406);
    let a = get(&client, adapter.addr, "/apis", &[("accept", "application/vnd.kubernetes.protobuf, */*")]).await;
    assert_eq!(a.status, 200);

    // Identity headers from a client that is not the front proxy: 401, even with a valid certificate.
    let a =
        get(&client, adapter.addr, base, &[("x-remote-user", "system:admin"), ("x-remote-group", "system:masters")])
            .await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert_eq!(a.json()["reason"], "Unauthorized");
    let anonymous = tls_client(&pki, None);
    let a = get(&anonymous, adapter.addr, base, &[("x-remote-user", "system:admin")]).await;
    assert_eq!(a.status, 401);
    // No credentials at all: 401; health endpoints need none.
    assert_eq!(get(&anonymous, adapter.addr, "/apis", &[]).await.status, 401);
    for p in ["/healthz", "/livez"] {
        let a = get(&anonymous, adapter.addr, p, &[]).await;
        assert_eq!((a.status, a.body.as_str()), (200, "ok"));
    }
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_is_refused_at_start() {
    let pki = Pki::new();
    let build = |extra: Vec<String>| async move {
        let mut v = vec!["--standalone".to_owned()];
        v.extend(extra);
        gpu_metrics_adapter::app::App::build(&support::args(&v)).await.map(|_| ()).unwrap_err().to_string()
    };
    let bad_rules =
        pki.write("bad.yaml", "rules:\n  - name: latency\n    query: 'x'\n    resources: { pods: { label: pod } }\n");
    let e = build(vec![
        "--direct-source=false".into(),
        "--prometheus-url=http://127.0.0.1:9".into(),
        format!("--prometheus-rules-file={}", bad_rules.display()),
    ])
    .await;
    assert!(e.contains("rule 1 (latency)") && e.contains("<<.LabelMatchers>>"), "{e}");
    let clash = pki.write("clash.yaml", "rules:\n  - name: gpu_utilization\n    query: 'x{<<.LabelMatchers>>}'\n    resources: { pods: { label: pod } }\n");
    let e = build(vec![
        "--exporter-url=http://127.0.0.1:9/metrics".into(),
        "--prometheus-url=http://127.0.0.1:9".into(),
        format!("--prometheus-rules-file={}", clash.display()),
    ])
    .await;
    assert!(e.contains("gpu_utilization") && e.contains("both"), "{e}");
    let e = build(vec![]).await;
    assert!(e.contains("--exporter-url"), "{e}");
    let e = build(vec!["--exporter-url=ftp://x/metrics".into()]).await;
    assert!(e.contains("http"), "{e}");
    let e = build(vec![
        "--exporter-url=http://x/metrics".into(),
        format!("--tls-cert-file={}", pki.path("serving.pem").display()),
        format!("--tls-private-key-file={}", pki.path("client-ca.pem").display()),
    ])
    .await;
    assert!(e.contains("private key"), "{e}");
    let e = build(vec!["--exporter-url=http://x/metrics".into(), "--max-age=1s".into(), "--scrape-interval=5s".into()])
        .await;
    assert!(e.contains("--max-age"), "{e}");
    let e = build(vec![
        "--exporter-url=http://x/metrics".into(),
        format!("--client-ca-file={}", pki.path("nope.pem").display()),
    ])
    .await;
    assert!(e.contains("nope.pem"), "{e}");
}
