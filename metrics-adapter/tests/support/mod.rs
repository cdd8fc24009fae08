//! Shared test support: certificates, in-test exporters, a TLS client that talks to the
//! adapter like the aggregator or kubectl, a raw TLS client for malformed requests,
//! starting the adapter in-process, the simulated GPU node (`node`), rendering
//! `deploy/` (`kustomize`), and test-support's API server as the adapter meets it
//! ([`apiserver`]).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod kubectl;
pub mod kustomize;
pub mod node;
pub mod timing;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use gpu_metrics_adapter::app::App;
use gpu_metrics_adapter::certs::{Ca, Pair};
use gpu_metrics_adapter::config::Args;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::ServerName;
use test_support::apiserver::ApiServer;
use test_support::tls::ClientTls;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// The token the adapter's kubeconfig carries.
pub const ADAPTER_TOKEN: &str = "adapter-service-account-token";

/// test-support's API server as the adapter meets it: the adapter's service account
/// ([`ADAPTER_TOKEN`]) allowed everything, pods and nodes listed and watched as metadata
/// only (406 otherwise: the adapter must never hold whole objects).
pub fn apiserver() -> ApiServer {
    let server = ApiServer::new();
    let account = "system:serviceaccount:gpu-telemetry:gpu-metrics-adapter";
    server.user(ADAPTER_TOKEN, account);
    server.metadata_only();
    server
}

/// A kubeconfig for the adapter pointing at `addr`, under `dir`.
pub fn adapter_kubeconfig(addr: SocketAddr, dir: &Path) -> PathBuf {
    let path = dir.join("adapter-kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\nusers:\n- name: adapter\n  user:\n    token: {ADAPTER_TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: adapter\n    namespace: gpu-telemetry\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    path
}

pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)).unwrap()
}

/// The certificates of a cluster: kube-apiserver's client CA, the front-proxy CA with the
/// aggregator's client certificate, and the adapter's serving certificate.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub client_ca: Ca,
    pub front_proxy_ca: Ca,
    pub serving_ca: Ca,
    pub front_proxy_client: Pair,
    pub serving: Pair,
}

impl Pki {
    pub fn new() -> Self {
        let client_ca = Ca::new("kubernetes").unwrap();
        let front_proxy_ca = Ca::new("front-proxy-ca").unwrap();
        let serving_ca = Ca::new("adapter-serving-ca").unwrap();
        let front_proxy_client = front_proxy_ca.client("front-proxy-client", &[]).unwrap();
        let serving = serving_ca.server(&["localhost", "127.0.0.1"]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pki = Self { dir, client_ca, front_proxy_ca, serving_ca, front_proxy_client, serving };
        pki.write("client-ca.pem", pki.client_ca.cert_pem());
        pki.write("front-proxy-ca.pem", pki.front_proxy_ca.cert_pem());
        pki.write("serving.pem", &pki.serving.cert_pem);
        pki.write("serving-key.pem", &pki.serving.key_pem);
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Flags for TLS serving with the serving pair.
    pub fn serving_args(&self) -> Vec<String> {
        vec![
            format!("--tls-cert-file={}", self.path("serving.pem").display()),
            format!("--tls-private-key-file={}", self.path("serving-key.pem").display()),
        ]
    }

    /// Flags for front-proxy and client-CA authentication from files.
    pub fn auth_file_args(&self) -> Vec<String> {
        vec![
            format!("--client-ca-file={}", self.path("client-ca.pem").display()),
            format!("--requestheader-client-ca-file={}", self.path("front-proxy-ca.pem").display()),
            "--requestheader-allowed-names=front-proxy-client".into(),
        ]
    }

    /// The ConfigMap kube-apiserver would publish for these CAs.
    pub fn auth_configmap(&self) -> std::collections::BTreeMap<String, String> {
        [
            ("client-ca-file", self.client_ca.cert_pem().to_owned()),
            ("requestheader-client-ca-file", self.front_proxy_ca.cert_pem().to_owned()),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#.to_owned()),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#.to_owned()),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#.to_owned()),
            ("requestheader-extra-headers-prefix", r#"["X-Remote-Extra-"]"#.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// What an in-test exporter does when scraped.
#[derive(Debug, Clone)]
pub enum Behavior {
    Serve(String),
    ServeWithType(String, &'static str),
    Status(u16),
    Hang,
    Oversized(usize),
}

/// An HTTP exporter on loopback.
#[derive(Clone)]
pub struct Exporter {
    pub addr: SocketAddr,
    pub behavior: Arc<Mutex<Behavior>>,
    pub hits: Arc<Mutex<usize>>,
}

impl Exporter {
    pub async fn start(behavior: Behavior) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let behavior = Arc::new(Mutex::new(behavior));
        let hits = Arc::new(Mutex::new(0usize));
        let (b, h) = (behavior.clone(), hits.clone());
        let app = Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let (b, h) = (b.clone(), h.clone());
                async move {
                    *h.lock().unwrap() += 1;
                    let current = b.lock().unwrap().clone();
                    respond(current).await
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, behavior, hits }
    }

    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    pub fn set(&self, b: Behavior) {
        *self.behavior.lock().unwrap() = b;
    }
}

async fn respond(b: Behavior) -> Response {
    match b {
        Behavior::Serve(body) => ([("content-type", "text/plain; version=0.0.4; charset=utf-8")], body).into_response(),
        Behavior::ServeWithType(body, ct) => ([("content-type", ct)], body).into_response(),
        Behavior::Status(code) => axum::http::StatusCode::from_u16(code).unwrap().into_response(),
        Behavior::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "late".into_response()
        }
        Behavior::Oversized(n) => {
            let line = "gpu_utilization{node=\"x\",gpu=\"0\",uuid=\"u\",namespace=\"ai-inference\",pod=\"big\"} 1\n";
            line.repeat(n / line.len() + 1).into_response()
        }
    }
}

/// A running adapter.
pub struct Running {
    pub addr: SocketAddr,
    pub shutdown: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        tokio::time::timeout(Duration::from_secs(10), self.task).await.expect("adapter stops").unwrap();
    }
}

pub fn args(extra: &[String]) -> Args {
    let mut v = vec!["gpu-metrics-adapter".to_owned(), "--bind-address=127.0.0.1".into(), "--secure-port=0".into()];
    v.extend(extra.iter().cloned());
    Args::parse_from_args(v).unwrap()
}

pub async fn start(extra: &[String]) -> Running {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let app = App::build(&args(extra)).await.unwrap();
    let addr = app.local_addr();
    let (shutdown, rx) = watch::channel(false);
    let task = tokio::spawn(app.run(rx));
    Running { addr, shutdown, task }
}

/// Polls `f` until it returns true or the deadline passes.
pub async fn eventually(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn client_config(pki: &Pki, identity: Option<&Pair>) -> rustls::ClientConfig {
    // The shared test client; ALPN is left to the caller (hyper-rustls sets its own).
    let mut tls = ClientTls::trusting_pem(pki.serving_ca.cert_pem());
    tls.alpn.clear();
    if let Some(p) = identity {
        tls = tls.with_identity(&test_support::pki::Pair { cert_pem: p.cert_pem.clone(), key_pem: p.key_pem.clone() });
    }
    Arc::unwrap_or_clone(tls.config())
}

/// An HTTPS client (HTTP/1.1 and HTTP/2) trusting the serving CA, with an optional client certificate.
pub type TlsClient =
    Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Empty<Bytes>>;

pub fn tls_client(pki: &Pki, identity: Option<&Pair>) -> TlsClient {
    https_client(client_config(pki, identity))
}

/// An HTTPS client (HTTP/1.1 and HTTP/2) with the TLS settings of `config`.
pub fn https_client(config: rustls::ClientConfig) -> TlsClient {
    // TCP_NODELAY, as Go clients (the aggregator, kubectl) set it by default.
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .enable_http2()
        .wrap_connector(tcp);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// A response, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub async fn get(client: &TlsClient, addr: SocketAddr, path_and_query: &str, headers: &[(&str, &str)]) -> Answer {
    try_get(client, addr, path_and_query, headers).await.expect("the adapter answers")
}

/// Like [`get`], but `None` when the connection or exchange fails.
pub async fn try_get(
    client: &TlsClient,
    addr: SocketAddr,
    path_and_query: &str,
    headers: &[(&str, &str)],
) -> Option<Answer> {
    let mut req = http::Request::get(format!("https://localhost:{}{path_and_query}", addr.port()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.request(req.body(Empty::new()).unwrap()).await.ok()?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some(Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Sends raw bytes over TLS and returns the raw response text (for requests an HTTP
/// client would refuse to build).
pub async fn raw(pki: &Pki, identity: Option<&Pair>, addr: SocketAddr, request: &[u8]) -> String {
    let mut cfg = client_config(pki, identity);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    // A server that refuses the request early (431 on a huge header) answers and closes
    // while the rest is still being written: the write then fails with a broken pipe or
    // a reset, and the answer is read from what already arrived.
    let _ = tls.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw HTTP/1.1 response.
pub fn raw_status(resp: &str) -> u16 {
    resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {resp:?}"))
}

/// The headers the kube-aggregator adds when it proxies the HPA controller's request.
pub fn hpa_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("accept", "application/vnd.kubernetes.protobuf, */*"),
        (
            "user-agent",
            "kube-controller-manager/v1.33.1 (linux/amd64) kubernetes/8adc0f0/system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        ),
        ("accept-encoding", "gzip"),
        ("x-forwarded-for", "10.0.0.10"),
        ("x-remote-user", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
        ("x-remote-group", "system:serviceaccounts"),
        ("x-remote-group", "system:serviceaccounts:kube-system"),
        ("x-remote-group", "system:authenticated"),
        ("x-remote-extra-authentication.kubernetes.io%2fcredential-id", "JTI=8f0c2a4e-3b1d-4c55-9a61-2f7e3d1c0b9a"),
        ("x-remote-extra-authentication.kubernetes.io%2fnode-name", "control-plane-1"),
    ]
}

/// Parses a Kubernetes quantity string into a float (test-side, independent of the crate).
pub fn quantity(s: &str) -> f64 {
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'm')) => (&s[..i], 1e-3),
        Some((i, 'k')) => (&s[..i], 1e3),
        Some((i, 'M')) => (&s[..i], 1e6),
        Some((i, 'G')) => (&s[..i], 1e9),
        Some((i, 'T')) => (&s[..i], 1e12),
        _ => (s, 1.0),
    };
    num.parse::<f64>().unwrap_or_else(|_| panic!("quantity {s:?}")) * mult
}

/// Values of `family` in an exposition text, with their labels (test-side line scan).
pub fn series(text: &str, family: &str) -> Vec<(Vec<(String, String)>, f64)> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .map(|l| {
            let open = l.find('{').unwrap();
            let close = l.rfind('}').unwrap();
            let labels = l[open + 1..close]
                .split("\",")
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").unwrap();
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            (labels, l[close + 1..].trim().parse().unwrap())
        })
        .collect()
}

pub fn label<'a>(labels: &'a [(String, String)], k: &str) -> Option<&'a str> {
    labels.iter().find(|(lk, _)| lk == k).map(|(_, v)| v.as_str())
}
