//! Benchmark that prints figures (not a timed test):
//!
//! * pods-query latency p50/p99 for 100, 1,000 and 10,000 pods, asking the HPA's question
//!   (`pods/*/metric?labelSelector=app=inference`) over TLS with front-proxy auth, from
//!   the direct source and from the Prometheus source (a prometheus-adapter-format rule),
//!   and, side by side with the latter (each adapter request followed by one direct
//!   query), Prometheus's own instant-query latency for the PromQL the adapter sends: the
//!   adapter's overhead above the query, per pair and as p50 against p50. The regex of
//!   every pod name that prometheus-adapter sends is timed too, for comparison;
//! * resident memory of the adapter process at 10,000 pods;
//! * time to refresh 1,000 simulated exporters on loopback.
//!
//! Run: `cargo bench -p gpu-metrics-adapter --bench adapter` (needs Debian's Prometheus 2.42,
//! the flavour the recorded figures were measured with: `test_support::prometheus`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use exposition_parser::Limits;
use gpu_metrics_adapter::http_client::HttpClient;
use gpu_metrics_adapter::source::direct::discovery::{Target, Targets};
use gpu_metrics_adapter::source::direct::{self, DirectSource};
use support::timing::{Stats, measure, percentile};
use support::{Pki, get, hpa_headers, tls_client, try_get};
use test_support::free_port;
use test_support::prometheus::{Flavour, Launch};

const PODS_PER_NODE: usize = 8;

/// One simulated node's exporter output: 8 whole H100s, one per pod, of the pods numbered
/// below `pods` (the last node of 100 pods holds 4).
fn node_body(node: usize, pods: usize) -> String {
    let mut out = String::new();
    let families = [
        ("gpu_utilization", 0.0),
        ("gpu_memory_utilization", 0.0),
        ("gpu_memory_used_bytes", 1.0e9),
        ("gpu_memory_total_bytes", 85_899_345_920.0),
        ("gpu_power_usage_watts", 300.0),
        ("gpu_temperature_celsius", 60.0),
        ("gpu_sm_clock_mhz", 1980.0),
        ("gpu_mem_clock_mhz", 2619.0),
    ];
    for (family, base) in families {
        out.push_str(&format!("# HELP {family} {family}.\n# TYPE {family} gauge\n"));
        for g in 0..PODS_PER_NODE {
            let pod = node * PODS_PER_NODE + g;
            if pod >= pods {
                break;
            }
            let v = if base == 0.0 { ((pod * 37) % 100) as f64 + 0.5 } else { base + g as f64 };
            out.push_str(&format!(
                "{family}{{node=\"node-{node}\",gpu=\"{g}\",uuid=\"GPU-{node}-{g}\",model=\"NVIDIA H100 80GB HBM3\",namespace=\"bench\",pod=\"bench-pool-{pod}\",container=\"inference\",cluster=\"bench\",region=\"local\"}} {v}\n"
            ));
        }
    }
    out
}

/// Starts `n` exporters, each on its own loopback port, for `pods` pods.
async fn exporters(n: usize, pods: usize) -> Vec<std::net::SocketAddr> {
    let mut addrs = Vec::with_capacity(n);
    for node in 0..n {
        let body = Arc::new(node_body(node, pods));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        let app = Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let body = body.clone();
                async move { ([("content-type", "text/plain; version=0.0.4")], (*body).clone()) }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }
    addrs
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

async fn post_query(client: &HttpClient, prom: &str, promql: &str) -> usize {
    let body = form_urlencoded::Serializer::new(String::new()).append_pair("query", promql).finish();
    let req = http::Request::post(format!("{prom}/api/v1/query"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = client.send(req, Duration::from_secs(30), 64 << 20).await.unwrap();
    assert_eq!(resp.status, 200);
    resp.body.len()
}

/// A GET through the TLS client, read to its last byte; nothing else is timed with it.
/// Returns the status, the milliseconds Prometheus took (the answer's Server-Timing) and
/// the body.
async fn fetch(
    client: &support::TlsClient,
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, f64, bytes::Bytes) {
    let mut req = http::Request::get(format!("https://localhost:{}{path}", addr.port()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.request(req.body(http_body_util::Empty::new()).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let upstream = resp
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("prometheus;dur="))
        .and_then(|d| d.parse().ok())
        .unwrap_or(f64::NAN);
    (status, upstream, http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes())
}

async fn pods_case(pods: usize) {
    let nodes = pods.div_ceil(PODS_PER_NODE);
    let pki = Pki::new();
    let addrs = exporters(nodes, pods).await;
    // Prometheus starts after the direct source has been measured, so that its scrapes and
    // compactions do not share the two cores with that measurement.
    let prom_port = free_port();
    let prom_url = format!("http://127.0.0.1:{prom_port}");
    let fake = support::apiserver();
    fake.authentication_config_map(pki.auth_configmap());
    fake.set_policy(|_, _| (true, String::new()));
    for i in 0..pods {
        fake.add_labelled_pod("bench", &format!("bench-pool-{i}"), &[("app", "inference")]);
    }
    let api = fake.serve().await;
    let rules = pki.write(
        "rules.yaml",
        "rules:\n- seriesQuery: 'gpu_utilization{namespace!=\"\",pod!=\"\"}'\n  resources:\n    overrides:\n      namespace: {resource: namespace}\n      pod: {resource: pod}\n  name: {as: prom_gpu_utilization}\n  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n",
    );
    let port = free_port();
    let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}/metrics")).collect();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"))
        .env("GPU_METRICS_ADAPTER_EXPORTER_URL", urls.join(","))
        .args(pki.serving_args())
        .arg(format!("--kubeconfig={}", support::adapter_kubeconfig(api, pki.dir.path()).display()))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--prometheus-url={prom_url}"))
        .arg(format!("--config={}", rules.display()))
        .arg("--metrics-relist-interval=2s")
        .arg("--prometheus-timeout=30s")
        .arg("--log.level=warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let client = tls_client(&pki, Some(&pki.front_proxy_client));
    let headers = hpa_headers();
    let direct_q =
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/%2A/gpu_utilization?labelSelector=app%3Dinference";
    let prom_q = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/%2A/prom_gpu_utilization?labelSelector=app%3Dinference";
    let count = |body: &str| body.matches("\"describedObject\"").count();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ok = tokio::time::timeout(Duration::from_secs(5), async {
            try_get(&client, addr, direct_q, &headers).await.is_some_and(|a| a.status == 200 && count(&a.body) == pods)
        })
        .await
        .unwrap_or(false);
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "adapter never served {pods} pods");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let iters = if pods <= 1000 { 2000 } else { 300 };
    let direct = measure(50, iters, async || {
        let a = get(&client, addr, direct_q, &headers).await;
        assert_eq!(a.status, 200);
    })
    .await;
    let rss = rss_kib(pid);
    let prom = Launch::new(Flavour::V2)
        .port(prom_port)
        .interval("15s")
        .scrape_honoring_labels("app", &addrs)
        .start_async()
        .await;
    prom.wait_for_series_async("gpu_utilization{namespace=\"bench\"}", pods).await;
    let prom_iters = if pods <= 1000 { 300 } else { 100 };
    // Discovery finds the rule's metric at a relist after Prometheus has the series.
    support::eventually("the Prometheus rule's metric", Duration::from_secs(60), async || {
        try_get(&client, addr, prom_q, &headers).await.is_some_and(|a| a.status == 200 && count(&a.body) == pods)
    })
    .await;
    // The PromQL the adapter sends: the selection is the whole namespace, so its pods'
    // matcher is namespace-wide; and the regex of every name prometheus-adapter sends.
    let promql = "avg(gpu_utilization{namespace=\"bench\",pod!=\"\"}) by (pod)".to_owned();
    let names: Vec<String> = (0..pods).map(|i| format!("bench-pool-{i}")).collect();
    let regex = format!("avg(gpu_utilization{{namespace=\"bench\",pod=~\"{}\"}}) by (pod)", names.join("|"));
    let http = HttpClient::new(None, 4).unwrap();
    assert!(post_query(&http, &prom.url(), &promql).await > pods * 40, "the direct query answers every pod");
    for _ in 0..3 {
        get(&client, addr, prom_q, &headers).await;
        post_query(&http, &prom.url(), &promql).await;
    }
    let (mut adapter, mut direct_q, mut upstream, mut own) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..prom_iters {
        let t = Instant::now();
        let (status, waited_ms, body) = fetch(&client, addr, prom_q, &headers).await;
        let ta = t.elapsed();
        let waited = Duration::from_secs_f64(waited_ms / 1000.0);
        upstream.push(waited);
        own.push(ta.saturating_sub(waited));
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{body}");
        assert_eq!(count(&body), pods);
        let t = Instant::now();
        post_query(&http, &prom.url(), &promql).await;
        let td = t.elapsed();
        adapter.push(ta);
        direct_q.push(td);
    }
    let stats = |mut v: Vec<Duration>| {
        v.sort();
        Stats { p50: percentile(&v, 0.5), p99: percentile(&v, 0.99), n: v.len() }
    };
    let signed_overhead: Vec<f64> =
        adapter.iter().zip(&direct_q).map(|(a, d)| a.as_secs_f64() * 1000.0 - d.as_secs_f64() * 1000.0).collect();
    let (via_prom, floor, upstream, own) = (stats(adapter), stats(direct_q), stats(upstream), stats(own));
    let mut sorted = signed_overhead.clone();
    sorted.sort_by(f64::total_cmp);
    let pair_p50 = sorted[sorted.len() / 2];
    let regex_floor = measure(2, prom_iters.min(30), async || {
        post_query(&http, &prom.url(), &regex).await;
    })
    .await;
    println!("| {pods} pods | direct source | {} | {} | {} requests |", ms(direct.p50), ms(direct.p99), direct.n);
    println!(
        "| {pods} pods | Prometheus source (prometheus-adapter rule) | {} | {} | {} requests |",
        ms(via_prom.p50),
        ms(via_prom.p99),
        via_prom.n
    );
    println!(
        "| {pods} pods | the same PromQL asked of Prometheus directly, side by side | {} | {} | {} requests |",
        ms(floor.p50),
        ms(floor.p99),
        floor.n
    );
    println!(
        "| {pods} pods | Prometheus' part of those answers (their Server-Timing) | {} | {} | |",
        ms(upstream.p50),
        ms(upstream.p99)
    );
    println!(
        "| {pods} pods | **adapter's own time per answer (total - Server-Timing)** | **{}** | **{}** | |",
        ms(own.p50),
        ms(own.p99)
    );
    println!(
        "| {pods} pods | adapter overhead above the direct query: p50 - p50 | {:.3} ms | | |",
        (via_prom.p50.as_secs_f64() - floor.p50.as_secs_f64()) * 1000.0
    );
    println!("| {pods} pods | adapter overhead above the direct query: median of the pairs | {pair_p50:.3} ms | | |");
    println!(
        "| {pods} pods | prometheus-adapter's PromQL (regex of every pod name) asked directly | {} | {} | {} requests |",
        ms(regex_floor.p50),
        ms(regex_floor.p99),
        regex_floor.n
    );
    println!("RSS of the adapter at {pods} pods ({nodes} exporters): {:.1} MiB", rss as f64 / 1024.0);
    let _ = child.kill().await;
    drop(prom);
}

/// The same question answered by the router in-process (no socket, no TLS): the adapter's
/// own compute cost.
async fn in_process_case(pods: usize) {
    use exposition_parser::{Format, parse};
    use gpu_metrics_adapter::api::{self, AppState};
    use gpu_metrics_adapter::auth::PeerCertificates;
    use gpu_metrics_adapter::auth::authn::Authenticator;
    use gpu_metrics_adapter::auth::authz::Authorizer;
    use gpu_metrics_adapter::auth::config::AuthnConfig;
    use gpu_metrics_adapter::auth::x509::CaBundle;
    use gpu_metrics_adapter::labels::LabelStore;
    use gpu_metrics_adapter::objects::ObjectNames;
    use gpu_metrics_adapter::source::Sources;
    use gpu_metrics_adapter::source::direct::model::{FAMILIES, Report};
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use tower::ServiceExt;

    let cfg = direct::Config {
        interval: Duration::from_secs(15),
        timeout: Duration::from_secs(5),
        max_age: Duration::from_secs(45),
        limits: Limits::default(),
        concurrency: 64,
        bearer_token: None,
    };
    let source = Arc::new(DirectSource::new(cfg, HttpClient::new(None, 0).unwrap(), Targets::Static(vec![])));
    let labels = Arc::new(LabelStore::new());
    source.ingest((0..pods / PODS_PER_NODE).map(|node| {
        let body = node_body(node, usize::MAX);
        let samples =
            parse(body.as_bytes(), Format::PrometheusText, &Limits::default(), |n| FAMILIES.contains(&n)).unwrap();
        (format!("node-{node}"), Report::from_samples(&samples, direct::now_ms()))
    }));
    for i in 0..pods {
        labels.apply_pod("bench", &format!("bench-pool-{i}"), &[("app", "inference")]);
    }
    labels.mark_synced();
    let ca = gpu_metrics_adapter::certs::Ca::new("ca").unwrap();
    let admin = ca.client("admin", &["system:masters"]).unwrap();
    let peer = PeerCertificates::new(vec![CertificateDer::from_pem_slice(admin.cert_pem.as_bytes()).unwrap()]);
    let state = AppState {
        sources: Sources { direct: Some(source), prometheus: None },
        objects: Some(Arc::new(ObjectNames::pods_and_nodes(labels))),
        authn: Arc::new(Authenticator::new(
            AuthnConfig { client_ca: Some(CaBundle::from_pem(ca.cert_pem(), "ca").unwrap()), request_header: None },
            None,
        )),
        authz: Arc::new(Authorizer::new(
            None,
            Duration::from_secs(10),
            Duration::from_secs(10),
            Duration::from_secs(1),
        )),
        ready_checks: vec![],
        limits: api::Limits::default(),
    };
    let router = api::router(state);
    let q =
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/%2A/gpu_utilization?labelSelector=app%3Dinference";
    let iters = if pods <= 1000 { 2000 } else { 300 };
    let stats = measure(50, iters, async || {
        let mut req = http::Request::get(q).body(axum::body::Body::empty()).unwrap();
        req.extensions_mut().insert(peer.clone());
        let resp = router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
        assert!(body.len() > pods * 100);
    })
    .await;
    println!(
        "| {pods} pods | direct source, router in-process (no socket, no TLS) | {} | {} | {} requests |",
        ms(stats.p50),
        ms(stats.p99),
        stats.n
    );
}

async fn refresh_case(n: usize) {
    let addrs = exporters(n, usize::MAX).await;
    let cfg = direct::Config {
        interval: Duration::from_secs(15),
        timeout: Duration::from_secs(5),
        max_age: Duration::from_secs(45),
        limits: Limits::default(),
        concurrency: 64,
        bearer_token: None,
    };
    let targets = addrs.iter().map(|a| Target { url: format!("http://{a}/metrics"), node: None }).collect();
    let source = DirectSource::new(cfg, HttpClient::new(None, 0).unwrap(), Targets::Static(targets));
    let mut times = Vec::new();
    for _ in 0..5 {
        let stats = source.refresh().await;
        assert_eq!(stats.failures, 0);
        assert_eq!(stats.pods, n * PODS_PER_NODE);
        times.push(stats.duration);
    }
    times.sort();
    println!(
        "Refresh of {n} exporters ({} pods) on loopback: median {}, worst {} (5 cycles, concurrency 64)",
        n * PODS_PER_NODE,
        ms(times[2]),
        ms(times[4])
    );
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let only = std::env::var("BENCH_ONLY").unwrap_or_default();
        println!("| size | path | p50 | p99 | samples |");
        println!("|---|---|---|---|---|");
        if only.is_empty() || only == "in-process" {
            in_process_case(1000).await;
            in_process_case(10_000).await;
        }
        if only.is_empty() || only == "pods" {
            pods_case(100).await;
            pods_case(1000).await;
            pods_case(10_000).await;
        }
        if only.is_empty() || only == "refresh" {
            refresh_case(1000).await;
        }
    });
}
