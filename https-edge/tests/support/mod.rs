//! Shared by the edge's integration tests: the workspace's test PKI, a server on
//! 127.0.0.1 that answers with what it learnt about the client's certificate, and a
//! one-request HTTP/1.1 client over plain TCP or rustls.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::routing::get;
use https_edge::{ClientCa, HandshakeCheck, Options, PeerCertificates, ServeError, Transport, cert};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use test_support::pki::{Ca, Pair};
use test_support::tls::ClientTls;

/// The handler every test serves: says what the handshake checked, and what verifying
/// the chain against `ca` now (deferred verification) says.
async fn whoami(Extension(peer): Extension<PeerCertificates>, State(ca): State<Option<Arc<ClientCa>>>) -> String {
    let Some(leaf) = peer.chain().first() else { return "no certificate".to_owned() };
    let user = cert::subject(leaf).map(|s| s.common_name).unwrap_or_else(|e| e.to_string());
    let check = match peer.handshake_check() {
        HandshakeCheck::None => "none",
        HandshakeCheck::KeyProven => "key proven",
        HandshakeCheck::ChainVerified => "chain verified",
    };
    let verdict = match &ca {
        Some(ca) => match *peer.memo(0, |chain| ca.verify(chain)) {
            Ok(()) => "trusted".to_owned(),
            Err(ref e) => format!("refused: {e}"),
        },
        None => "not checked".to_owned(),
    };
    format!("{user}; {check}; {verdict}")
}

/// `/whoami`, and `/slow/<ms>` that answers after that many milliseconds.
pub fn router(deferred_ca: Option<ClientCa>) -> Router {
    Router::new()
        .route("/whoami", get(whoami))
        .route(
            "/slow/{ms}",
            get(|axum::extract::Path(ms): axum::extract::Path<u64>| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                "finished"
            }),
        )
        .with_state(deferred_ca.map(Arc::new))
}

/// A server running in a task until stopped.
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    pub async fn stop(mut self) {
        self.signal_stop();
        self.task.await.unwrap().unwrap();
    }
}

pub async fn start(transport: Transport, router: Router, options: Options) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let task = tokio::spawn(https_edge::serve(listener, transport, router, shutdown, options));
    Running { addr, stop: Some(stop), task }
}

/// A TLS client trusting `ca`, presenting `identity` if given, without ALPN (the
/// requests here are written as HTTP/1.1 by hand).
pub fn client_tls(ca: &Ca, identity: Option<&Pair>) -> Arc<rustls::ClientConfig> {
    let mut tls = ClientTls::trusting(ca);
    tls.alpn.clear();
    if let Some(pair) = identity {
        tls = tls.with_identity(pair);
    }
    tls.config()
}

/// What one request got back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    /// The server's leaf certificate, over TLS.
    pub served: Option<CertificateDer<'static>>,
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, path: &str) -> std::io::Result<(u16, String)> {
    io.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut raw = Vec::new();
    // A TLS peer may close without close_notify: what arrived before counts. With
    // nothing read, the error (a TLS alert, say) is the answer.
    if let Err(e) = io.read_to_end(&mut raw).await
        && raw.is_empty()
    {
        return Err(e);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP answer: {text:?}")))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// One GET over a fresh connection (HTTP/1.1; over TLS when `tls` is given).
pub async fn request(addr: SocketAddr, tls: Option<Arc<rustls::ClientConfig>>, path: &str) -> std::io::Result<Answer> {
    let tcp = TcpStream::connect(addr).await?;
    let Some(tls) = tls else {
        let (status, body) = exchange(tcp, path).await?;
        return Ok(Answer { status, body, served: None });
    };
    let stream = tokio_rustls::TlsConnector::from(tls).connect(ServerName::try_from("localhost").unwrap(), tcp).await?;
    let served = stream.get_ref().1.peer_certificates().and_then(|c| c.first().cloned());
    let (status, body) = exchange(stream, path).await?;
    Ok(Answer { status, body, served })
}

/// Fails the test if `future` takes longer than `secs` (a hang guard, not a speed check).
pub async fn within<T>(secs: u64, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), future).await.expect("the operation hung")
}
