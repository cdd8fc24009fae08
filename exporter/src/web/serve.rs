//! The accept loop: serves an axum `Router` over plain TCP or TLS, applies the web
//! config's rate limit, basic auth and response headers, and shuts down gracefully.
//!
//! Per connection (each in its own task, so one slow client never blocks another):
//! 1. TLS, when configured: the first byte is peeked; a client speaking plain HTTP to the
//!    TLS port gets a `400` that says so (as Go's server does) instead of a silent reset.
//!    Otherwise the handshake runs under `handshake_timeout` with the current, possibly
//!    just-reloaded certificate. A client that never finishes is dropped when it expires.
//! 2. HTTP: with TLS, ALPN decides (`h2` -> HTTP/2, anything else -> HTTP/1.1; `h2` is only
//!    offered when `http_server_config.http2` is true). Without TLS, HTTP/1.1 is served and,
//!    when `http2` is true, HTTP/2 with prior knowledge (h2c) too, told apart by the first
//!    bytes. HTTP/1 request headers (the first and every later one on a keep-alive
//!    connection) must arrive within `header_read_timeout`, so an idle or slow client
//!    cannot hold a slot forever; HTTP/2 connections send keep-alive PINGs and close when
//!    the peer stops answering.
//! 3. Each request: the probe paths ([`ServeOptions::probe_paths`], `/healthz` and
//!    `/readyz`) go straight to the router. Every other request: rate limit (`429`), then,
//!    where `client_auth_type` requires a client certificate and the connection has none,
//!    `403`; then basic auth (`401` with `WWW-Authenticate`); then the router. The router
//!    sees `ConnectInfo<SocketAddr>`; the configured headers are added to every
//!    response, the refusals included. Why the probe paths are open, and why a required
//!    client certificate is enforced here rather than in the handshake: see the
//!    [module documentation](super).
//!
//! Limits and shutdown: at most `max_connections` connections (handshaking or open) at a
//! time; at the limit, accepting pauses and new clients wait in the kernel backlog. When
//! the shutdown future completes, the listener closes, idle keep-alive connections close,
//! requests in flight may finish, and whatever is still open after `drain` is aborted.
//!
//! Errors on single connections (handshake failures, resets, protocol errors) are logged
//! at debug level and never end the server; accept errors are logged and retried.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinError, JoinSet};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::ServiceExt as _;

use super::basic_auth::{self, Authenticator, BasicAuthError, Verdict};
use super::config::WebConfig;
use super::rate_limit::TokenBucket;
use super::tls::TlsReloader;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener has no local address (it is not a bound socket).
    #[error("cannot read the listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
    /// Basic auth could not be set up.
    #[error("basic auth: {0}")]
    BasicAuth(#[from] BasicAuthError),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ServeError>;

/// Tunables of the accept loop; [`serve`] uses the defaults with the given drain.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long in-flight connections may run on after shutdown fires.
    pub drain: Duration,
    /// How long a client may take to finish its TLS handshake.
    pub handshake_timeout: Duration,
    /// How long an HTTP/1 client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections served (or handshaking) at once; more wait in the kernel backlog.
    pub max_connections: usize,
    /// Paths served without authentication (basic auth, a required client certificate)
    /// and outside the rate limit: the kubelet's probes carry no credentials. Compared
    /// with the request's path exactly (no normalisation, no prefix match), the way the
    /// router matches routes. Default: [`PROBE_PATHS`].
    pub probe_paths: Vec<String>,
}

/// The exporter's probe endpoints: liveness and readiness.
pub const PROBE_PATHS: &[&str] = &["/healthz", "/readyz"];

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            drain: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            max_connections: 512,
            probe_paths: PROBE_PATHS.iter().map(|p| (*p).to_owned()).collect(),
        }
    }
}

/// Serves `router` on `listener` as the web config says until `shutdown` completes, then
/// drains open connections for at most `drain`. Uses [`ServeOptions::default`] otherwise.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: Arc<WebConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> Result<()> {
    serve_with(listener, router, config, shutdown, ServeOptions { drain, ..ServeOptions::default() }).await
}

/// [`serve`] with every tunable given.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    config: Arc<WebConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: ServeOptions,
) -> Result<()> {
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let auth = config.users().map(|users| Authenticator::new(users.clone())).transpose()?;
    let limiter = config.rate_limit().map(|r| TokenBucket::new(r.burst, r.interval));
    let handler = Arc::new(RequestHandler {
        router,
        auth,
        limiter,
        headers: config.headers().to_vec(),
        require_client_cert: config.client_auth().requires_cert(),
        probe_paths: options.probe_paths.clone(),
    });
    let context = Arc::new(ConnectionContext {
        tls: config.tls().cloned(),
        http2: config.http2(),
        options: options.clone(),
        handler,
    });
    tracing::info!(
        %addr,
        tls = config.tls_enabled(),
        http2 = config.http2(),
        basic_auth_users = config.users().map_or(0, |users| users.len()),
        client_auth = ?config.client_auth(),
        web_config = ?config.source(),
        probe_paths = ?options.probe_paths,
        "serving HTTP (probe paths without authentication)"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let mut tasks = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => { report(done); continue; }
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, remote) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => { report(done); continue; }
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) if is_connection_error(&e) => {
                    tracing::debug!(error = %e, "connection failed before it was accepted");
                    continue;
                }
                Err(e) => {
                    // Typically out of file descriptors: wait for some to be released.
                    tracing::error!(%addr, error = %e, "accept failed; retrying in 1s");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        tasks.spawn(connection(context.clone(), stream, remote, stop_rx.clone(), permit));
    }

    drop(listener);
    stop_tx.send_replace(true);
    if !tasks.is_empty() {
        tracing::info!(open = tasks.len(), drain = ?options.drain, "shutting down: draining connections");
    }
    let drained = tokio::time::timeout(options.drain, async {
        while let Some(done) = tasks.join_next().await {
            report(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(aborted = tasks.len(), drain = ?options.drain, "drain time over; closing the remaining connections");
        tasks.shutdown().await;
    }
    tracing::info!(%addr, "server stopped");
    Ok(())
}

fn report(done: std::result::Result<(), JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!(error = %e, "a connection task panicked");
        }
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted, WouldBlock};
    matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted | WouldBlock)
}

/// What every connection task shares.
struct ConnectionContext {
    tls: Option<Arc<TlsReloader>>,
    http2: bool,
    options: ServeOptions,
    handler: Arc<RequestHandler>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// The client preface that opens every HTTP/2 connection (RFC 9113 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Plain TCP with HTTP/2 enabled: HTTP/2 with prior knowledge (h2c) if the client opens
/// with the HTTP/2 preface, HTTP/1 otherwise. Done here rather than by hyper-util's
/// automatic detection because that waits for the first bytes without any deadline.
async fn sniff_h2c(stream: &TcpStream) -> std::io::Result<Protocol> {
    let mut head = [0u8; 24];
    loop {
        let n = stream.peek(&mut head).await?;
        let seen = head.get(..n).unwrap_or_default();
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if !H2_PREFACE.starts_with(seen) {
            return Ok(Protocol::Http1);
        }
        if n == H2_PREFACE.len() {
            return Ok(Protocol::Http2);
        }
        // Part of the preface so far; `peek` would return the same bytes at once, so wait.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Resolves when shutdown has been signalled (or the server is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

async fn connection(
    context: Arc<ConnectionContext>,
    stream: TcpStream,
    remote: SocketAddr,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%remote, error = %e, "cannot set TCP_NODELAY");
    }
    let Some(tls) = context.tls.clone() else {
        let protocol = if context.http2 {
            let sniff = tokio::time::timeout(context.options.header_read_timeout, sniff_h2c(&stream));
            tokio::select! {
                outcome = sniff => match outcome {
                    Ok(Ok(protocol)) => protocol,
                    Ok(Err(e)) => {
                        tracing::debug!(%remote, error = %e, "connection closed before a request");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%remote, "no request within the header read timeout");
                        return;
                    }
                },
                () = stopped(&mut stop) => return,
            }
        } else {
            Protocol::Http1
        };
        let peer = Peer { remote, client_cert: false };
        serve_http(&context, TokioIo::new(stream), peer, protocol, stop).await;
        return;
    };
    let handshake = tokio::time::timeout(context.options.handshake_timeout, tls_handshake(&tls, stream, remote));
    let stream = tokio::select! {
        outcome = handshake => match outcome {
            Ok(Some(stream)) => stream,
            Ok(None) => return,
            Err(_) => {
                tracing::debug!(%remote, timeout = ?context.options.handshake_timeout, "TLS handshake timed out");
                return;
            }
        },
        () = stopped(&mut stop) => return,
    };
    let session = stream.get_ref().1;
    let protocol = if session.alpn_protocol() == Some(b"h2") { Protocol::Http2 } else { Protocol::Http1 };
    // Only a certificate the verifier accepted gets this far: a rejected one fails the handshake.
    let client_cert = session.peer_certificates().is_some_and(|chain| !chain.is_empty());
    serve_http(&context, TokioIo::new(stream), Peer { remote, client_cert }, protocol, stop).await;
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone, Copy)]
struct Peer {
    remote: SocketAddr,
    /// The client presented a certificate and the handshake's verifier accepted it.
    client_cert: bool,
}

/// HTTP/2 connections have no header timeout; PINGs find peers that vanished (a node
/// gone, a NAT entry expired) so their slots are freed.
const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(60);
const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// First byte of a TLS record carrying a handshake message.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
const PLAIN_HTTP_ON_TLS_PORT: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

async fn tls_handshake(tls: &TlsReloader, stream: TcpStream, remote: SocketAddr) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(0) => return None,
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(%remote, error = %e, "connection failed before the TLS handshake");
            return None;
        }
    }
    if first[0] != TLS_HANDSHAKE_RECORD && first[0].is_ascii_alphabetic() {
        tracing::debug!(%remote, "plain HTTP on the TLS port; answering 400");
        answer_plain_http(stream).await;
        return None;
    }
    match TlsAcceptor::from(tls.current()).accept(stream).await {
        Ok(stream) => Some(stream),
        Err(e) => {
            tracing::debug!(%remote, error = %e, "TLS handshake failed");
            None
        }
    }
}

/// Tells a plain-HTTP client it reached a TLS port, then reads what it still sends for a
/// moment so that closing does not reset the connection before the answer is read.
async fn answer_plain_http(mut stream: TcpStream) {
    if stream.write_all(PLAIN_HTTP_ON_TLS_PORT).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut total = 0usize;
        while total < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

async fn serve_http<I>(
    context: &ConnectionContext,
    io: TokioIo<I>,
    peer: Peer,
    protocol: Protocol,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handler = context.handler.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler.handle(request, peer).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(context.options.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT);
    let builder = match protocol {
        Protocol::Http1 => builder.http1_only(),
        Protocol::Http2 => builder.http2_only(),
    };
    let mut conn = pin!(builder.serve_connection(io, service));
    let outcome = tokio::select! {
        outcome = conn.as_mut() => outcome,
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = outcome {
        tracing::debug!(remote = %peer.remote, ?protocol, error = %e, "connection ended with an error");
    }
}

/// Probe paths, rate limit, client-certificate requirement, basic auth and headers
/// around the router.
struct RequestHandler {
    router: Router,
    auth: Option<Authenticator>,
    limiter: Option<TokenBucket>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// `client_auth_type` requires a certificate: enforced per request (see the module docs).
    require_client_cert: bool,
    probe_paths: Vec<String>,
}

impl RequestHandler {
    async fn handle(&self, request: Request<Incoming>, peer: Peer) -> Response<Body> {
        let mut response = self.respond(request, peer).await;
        for (name, value) in &self.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response
    }

    fn is_probe(&self, request: &Request<Incoming>) -> bool {
        let path = request.uri().path();
        self.probe_paths.iter().any(|p| p == path)
    }

    async fn respond(&self, mut request: Request<Incoming>, peer: Peer) -> Response<Body> {
        let remote = peer.remote;
        if !self.is_probe(&request) {
            if let Some(limiter) = &self.limiter {
                if !limiter.allow() {
                    tracing::debug!(%remote, "rate limit exceeded");
                    return text_response(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
                }
            }
            if self.require_client_cert && !peer.client_cert {
                tracing::debug!(%remote, path = request.uri().path(), "no client certificate; refused");
                return text_response(StatusCode::FORBIDDEN, "Forbidden: a client certificate is required\n");
            }
            if let Some(auth) = &self.auth {
                let verdict = auth.check(request.headers().get(AUTHORIZATION)).await;
                if verdict != Verdict::Allowed {
                    tracing::debug!(%remote, ?verdict, path = request.uri().path(), "basic auth refused the request");
                    let mut response = text_response(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static(basic_auth::CHALLENGE));
                    return response;
                }
            }
        }
        request.extensions_mut().insert(ConnectInfo(remote));
        match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

fn text_response(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
