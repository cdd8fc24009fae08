//! Shared helpers for the `web_*` integration tests: the workspace's test PKI, a server
//! started on 127.0.0.1, and a small HTTP client on hyper + tokio-rustls (ring provider).
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing;
use gpu_exporter::web::{ServeError, ServeOptions, WebConfig, serve_with};
use http::{HeaderMap, Request, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub type BoxError = Box<dyn Error + Send + Sync>;

pub use test_support::pki::{Ca, Pair};
pub use test_support::tls::ClientTls;

/// A temporary directory holding a web config and the files it names.
pub struct Dir {
    pub dir: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Dir {
        Dir { dir: tempfile::tempdir().unwrap() }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    /// Writes `server.crt` / `server.key` and a web config with `extra` lines appended
    /// under `tls_server_config` (already indented by two spaces) and `rest` at top level.
    pub fn tls_config(&self, server: &Pair, extra_tls: &str, rest: &str) -> PathBuf {
        self.write("server.crt", &server.cert_pem);
        self.write("server.key", &server.key_pem);
        let text = format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{extra_tls}{rest}");
        self.write("web.yml", &text)
    }

    pub fn load(&self, config: &Path) -> WebConfig {
        WebConfig::load(config).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The router the tests serve: `/metrics` and `/peer` (the client's address as the
/// router sees it through `ConnectInfo`).
pub fn router() -> Router {
    Router::new()
        .route("/metrics", routing::get(|| async { "gpu_up 1\n" }))
        .route("/peer", routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }))
}

/// A server running in a task until stopped or dropped.
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

impl Running {
    /// Fires the shutdown signal without waiting.
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Fires the shutdown signal and waits for `serve` to return.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.signal_stop();
        self.task.take().unwrap().await.unwrap()
    }

    /// Waits for `serve` to return (after [`Running::signal_stop`]).
    pub async fn join(mut self) -> Result<(), ServeError> {
        self.task.take().unwrap().await.unwrap()
    }
}

pub async fn start(config: WebConfig, router: Router, options: ServeOptions) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_with(
        listener,
        router,
        Arc::new(config),
        async move {
            let _ = stopped.await;
        },
        options,
    ));
    Running { addr, stop: Some(stop), task: Some(task) }
}

/// What came back from one request.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
    pub version: Version,
    /// The server's end-entity certificate, over TLS.
    pub peer_cert: Option<CertificateDer<'static>>,
    /// The client's own address.
    pub local: SocketAddr,
}

/// One GET over a fresh connection: TLS when `tls` is given (HTTP/2 if ALPN picks h2),
/// plain HTTP/1.1 otherwise.
pub async fn get(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let local = tcp.local_addr()?;
    match tls {
        None => {
            let (status, headers, body, version) = http1(tcp, addr, path, headers).await?;
            Ok(Reply { status, headers, body, version, peer_cert: None, local })
        }
        Some(tls) => {
            let connector = tokio_rustls::TlsConnector::from(tls.config());
            let stream = connector.connect(ServerName::try_from("localhost")?, tcp).await?;
            let (_, session) = stream.get_ref();
            let peer_cert = session.peer_certificates().and_then(|c| c.first().cloned());
            let h2 = session.alpn_protocol() == Some(b"h2");
            let (status, headers, body, version) = if h2 {
                http2(stream, addr, "https", path, headers).await?
            } else {
                http1(stream, addr, path, headers).await?
            };
            Ok(Reply { status, headers, body, version, peer_cert, local })
        }
    }
}

/// One GET over plain TCP with HTTP/2 prior knowledge (h2c).
pub async fn get_h2c(addr: SocketAddr, path: &str) -> Result<Reply, BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let local = tcp.local_addr()?;
    let (status, headers, body, version) = http2(tcp, addr, "http", path, &[]).await?;
    Ok(Reply { status, headers, body, version, peer_cert: None, local })
}

type Parts = (StatusCode, HeaderMap, String, Version);

fn request(
    uri: String,
    addr: SocketAddr,
    headers: &[(&str, &str)],
    host: bool,
) -> Result<Request<Empty<Bytes>>, BoxError> {
    let mut builder = Request::get(uri);
    if host {
        builder = builder.header(http::header::HOST, addr.to_string());
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    Ok(builder.body(Empty::new())?)
}

async fn http1<S>(io: S, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<Parts, BoxError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let response = sender.send_request(request(path.to_owned(), addr, headers, true)?).await?;
    collect(response).await
}

async fn http2<S>(
    io: S,
    addr: SocketAddr,
    scheme: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Parts, BoxError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let uri = format!("{scheme}://localhost:{}{path}", addr.port());
    let response = sender.send_request(request(uri, addr, headers, false)?).await?;
    collect(response).await
}

async fn collect(response: http::Response<hyper::body::Incoming>) -> Result<Parts, BoxError> {
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await?.to_bytes();
    Ok((parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned(), parts.version))
}

/// Fails the test if `future` takes longer than `secs` (a hang guard, not a speed check).
pub async fn within<T>(secs: u64, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), future).await.expect("the operation hung")
}

/// Basic-auth header value.
pub fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// An error with all its sources, for assertions on the underlying TLS alert.
pub fn describe(err: &BoxError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
