//! Serving: the certificate is reloaded from files when they change (a broken pair is not
//! taken), a self-signed pair is made when none is given, and shutdown lets in-flight
//! requests finish while refusing new connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use gpu_metrics_adapter::app::App;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::{Behavior, Exporter, Pki, fixture, get, tls_client};
use tokio::sync::watch;

/// The leaf certificate a fresh TLS connection is served, trusting `roots`.
async fn served_leaf(addr: std::net::SocketAddr, roots: &[&str]) -> Option<CertificateDer<'static>> {
    let mut store = rustls::RootCertStore::empty();
    for pem in roots {
        store.add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .ok()?;
    tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_certificate_is_reloaded_when_the_files_change() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let mut flags = pki.serving_args();
    flags.extend(pki.auth_file_args());
    flags.extend([
        "--standalone".into(),
        format!("--exporter-url={}", exporter.url()),
        "--tls-reload-interval=100ms".into(),
    ]);
    let adapter = support::start(&flags).await;
    let first = CertificateDer::from_pem_slice(pki.serving.cert_pem.as_bytes()).unwrap();
    assert_eq!(served_leaf(adapter.addr, &[pki.serving_ca.cert_pem()]).await, Some(first.clone()));

    // A broken pair (key of another certificate) is refused; the old one keeps serving.
    let other = pki.serving_ca.server(&["localhost"]).unwrap();
    pki.write("serving-key.pem", &other.key_pem);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(served_leaf(adapter.addr, &[pki.serving_ca.cert_pem()]).await, Some(first.clone()));

    // The rotated pair, from a new CA, is served to new connections without a restart.
    let new_ca = gpu_metrics_adapter::certs::Ca::new("rotated-ca").unwrap();
    let rotated = new_ca.server(&["localhost", "127.0.0.1"]).unwrap();
    pki.write("serving.pem", &rotated.cert_pem);
    pki.write("serving-key.pem", &rotated.key_pem);
    let want = CertificateDer::from_pem_slice(rotated.cert_pem.as_bytes()).unwrap();
    support::eventually("rotated certificate", Duration::from_secs(5), async || {
        served_leaf(adapter.addr, &[new_ca.cert_pem()]).await == Some(want.clone())
    })
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_pair_is_made_when_none_is_given() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let args = support::args(&["--standalone".into(), format!("--exporter-url={}", exporter.url())]);
    let app = App::build(&args).await.unwrap();
    let addr = app.local_addr();
    let chain = app.serving_chain();
    assert_eq!(chain.len(), 1);
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(app.run(rx));
    let pem = format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", base64_lines(chain[0].as_ref()));
    assert_eq!(served_leaf(addr, &[&pem]).await, Some(chain[0].clone()));
    tx.send(true).unwrap();
    task.await.unwrap();
}

fn base64_lines(der: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in der.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(char::from(T[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                s.push('=');
            }
        }
    }
    s.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests_and_refuses_new_ones() {
    let pki = Pki::new();
    // A Prometheus that takes a second to answer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow_addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/api/v1/query",
        axum::routing::post(|| async {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"p-0"},"value":[1700000000,"180"]}]}}"#
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let rules = pki.write("rules.yaml", "rules:\n  - name: request_latency_ms\n    query: 'avg by (<<.GroupBy>>) (request_latency_ms{<<.LabelMatchers>>})'\n    resources:\n      pods: { label: pod }\n");
    let mut flags = pki.serving_args();
    flags.extend(pki.auth_file_args());
    flags.extend([
        "--standalone".into(),
        "--direct-source=false".into(),
        format!("--prometheus-url=http://{slow_addr}"),
        format!("--prometheus-rules-file={}", rules.display()),
        "--shutdown-drain=5s".into(),
    ]);
    let adapter = support::start(&flags).await;
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let client = tls_client(&pki, Some(&admin));
    let addr = adapter.addr;
    let in_flight = tokio::spawn(async move {
        get(&client, addr, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai/pods/%2A/request_latency_ms", &[]).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    adapter.stop().await;
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.body.contains("\"p-0\""));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed after shutdown");
}
