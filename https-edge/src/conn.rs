//! One connection, from the accepted socket to its last response.
//!
//! 1. TLS: the first byte is peeked; a client speaking plain HTTP to the TLS port gets a
//!    `400` that says so (as Go's server does) instead of a silent reset. Otherwise the
//!    handshake runs under `handshake_timeout` with the current, possibly just-reloaded
//!    configuration; a client that never finishes is dropped when it expires.
//! 2. HTTP: with TLS, ALPN decides (`h2` -> HTTP/2, anything else -> HTTP/1.1). Without
//!    TLS, HTTP/1.1 is served and, with h2c on, HTTP/2 with prior knowledge too, told
//!    apart by the first bytes. HTTP/1 request heads (the first and every later one on a
//!    keep-alive connection) must arrive within `header_read_timeout`, so an idle or slow
//!    client cannot hold a slot forever; HTTP/2 connections send keep-alive PINGs and
//!    close when the peer stops answering.
//! 3. Each request gets the client's address and certificates as extensions and goes to
//!    the caller's service, once its `Host` passed the HTTP/1.1 rule (`host`). From then
//!    until its response body is written the connection counts as busy (`admit`), and
//!    cannot be shed to make room for a new one.
//! 4. An HTTP/1 connection that hyper ends with a refused request head (`400`, `414`,
//!    `431`) lingers, reading a bounded amount of what the client still sends, so that
//!    the answer arrives instead of a reset (`linger`).
//!
//! Whenever the connection is idle (handshaking, reading a head, between keep-alive
//! requests, lingering) the accept loop may choose it to make room: it is then closed.
//!
//! Shutdown interrupts a pending handshake, and asks an open connection to finish
//! gracefully (idle keep-alive connections close at once, requests in flight complete).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::ServiceExt as _;

use crate::admit::{Lease, Tracker};
use crate::host;
use crate::linger::{self, Returning};
use crate::options::{Options, Transport};
use crate::peer::{HandshakeCheck, PeerCertificates};
use crate::reload::ServerTls;

/// What every connection task shares.
pub(crate) struct Context<S> {
    transport: Transport,
    options: Options,
    service: S,
}

impl<S> Context<S> {
    pub(crate) fn new(transport: Transport, options: Options, service: S) -> Self {
        Context { transport, options, service }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// HTTP/2 connections have no header timeout; PINGs find peers that vanished (a node
/// gone, a NAT entry expired) so their slots are freed.
const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(60);
const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// hyper refuses an HTTP/1 buffer below this (it panics).
const HYPER_MIN_BUF_SIZE: usize = 8192;

/// The client preface that opens every HTTP/2 connection (RFC 9113 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// First byte of a TLS record carrying a handshake message.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
const PLAIN_HTTP_ON_TLS_PORT: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Resolves when shutdown has been signalled (or the server is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

pub(crate) async fn serve_connection<S>(
    context: std::sync::Arc<Context<S>>,
    stream: TcpStream,
    remote: SocketAddr,
    stop: watch::Receiver<bool>,
    lease: Lease,
) where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let tracker = lease.tracker();
    tokio::select! {
        () = connection(context, stream, remote, stop, tracker) => {}
        () = lease.shed() => tracing::debug!(%remote, "closed to make room for a new connection"),
    }
}

async fn connection<S>(
    context: std::sync::Arc<Context<S>>,
    stream: TcpStream,
    remote: SocketAddr,
    mut stop: watch::Receiver<bool>,
    tracker: Tracker,
) where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%remote, error = %e, "cannot set TCP_NODELAY");
    }
    let tls = match &context.transport {
        Transport::Plain { h2c } => {
            let Some(protocol) = plain_protocol(&stream, *h2c, &context.options, remote, &mut stop).await else {
                return;
            };
            let peer = PeerCertificates::default();
            serve_http(&context, stream, Client { remote, peer, tracker }, protocol, stop).await;
            return;
        }
        Transport::Tls(tls) => tls.clone(),
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
    let chain: Vec<_> = session.peer_certificates().map(<[_]>::to_vec).unwrap_or_default();
    let check = match (chain.is_empty(), tls.verifies_chain()) {
        (true, _) => HandshakeCheck::None,
        (false, true) => HandshakeCheck::ChainVerified,
        (false, false) => HandshakeCheck::KeyProven,
    };
    let peer = PeerCertificates::checked(chain, check);
    serve_http(&context, stream, Client { remote, peer, tracker }, protocol, stop).await;
}

/// Plain TCP: HTTP/1, or with h2c on, whichever the first bytes say; `None` when the
/// client said nothing in time, went away, or shutdown came first.
async fn plain_protocol(
    stream: &TcpStream,
    h2c: bool,
    options: &Options,
    remote: SocketAddr,
    stop: &mut watch::Receiver<bool>,
) -> Option<Protocol> {
    if !h2c {
        return Some(Protocol::Http1);
    }
    let sniff = tokio::time::timeout(options.header_read_timeout, sniff_h2c(stream));
    tokio::select! {
        outcome = sniff => match outcome {
            Ok(Ok(protocol)) => Some(protocol),
            Ok(Err(e)) => {
                tracing::debug!(%remote, error = %e, "connection closed before a request");
                None
            }
            Err(_) => {
                tracing::debug!(%remote, "no request within the header read timeout");
                None
            }
        },
        () = stopped(stop) => None,
    }
}

/// HTTP/2 with prior knowledge (h2c) if the client opens with the HTTP/2 preface,
/// HTTP/1 otherwise. Done here rather than by hyper-util's automatic detection because
/// that waits for the first bytes without any deadline.
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

async fn tls_handshake(tls: &ServerTls, stream: TcpStream, remote: SocketAddr) -> Option<TlsStream<TcpStream>> {
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

fn builder(options: &Options, protocol: Protocol) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT);
    if let Some(max) = options.max_header_bytes {
        builder.http1().max_buf_size(max.max(HYPER_MIN_BUF_SIZE));
        builder.http2().max_header_list_size(u32::try_from(max).unwrap_or(u32::MAX));
    }
    match protocol {
        Protocol::Http1 => builder.http1_only(),
        Protocol::Http2 => builder.http2_only(),
    }
}

/// Who a connection serves, as each of its requests sees it.
struct Client {
    remote: SocketAddr,
    peer: PeerCertificates,
    tracker: Tracker,
}

async fn serve_http<S, I>(
    context: &Context<S>,
    io: I,
    client: Client,
    protocol: Protocol,
    mut stop: watch::Receiver<bool>,
) where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Client { remote, peer, tracker } = client;
    let inner = context.service.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let busy = tracker.begin();
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(remote));
        request.extensions_mut().insert(peer.clone());
        let refused = host::check(&request).err();
        let inner = inner.clone();
        async move {
            let response = match refused {
                Some(error) => {
                    tracing::debug!(%remote, %error, "request refused");
                    host::refusal(&error)
                }
                None => inner.oneshot(request).await?,
            };
            // Busy until the body is written (or dropped, when the client goes away).
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _busy = &busy;
                    frame
                }))
            }))
        }
    });
    let (io, returned) = Returning::new(io);
    let builder = builder(&context.options, protocol);
    // Boxed rather than pinned on the stack, so that it can be dropped (handing the
    // stream back) before this function ends.
    let mut conn = Box::pin(builder.serve_connection(TokioIo::new(io), service));
    let outcome = tokio::select! {
        outcome = conn.as_mut() => outcome,
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    let Err(e) = outcome else { return };
    tracing::debug!(%remote, ?protocol, error = %e, "connection ended with an error");
    // hyper answered a head it refused (400, 414, 431): let the answer arrive.
    let refused_head = e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_parse);
    if protocol == Protocol::Http1 && refused_head {
        drop(conn);
        if let Ok(io) = returned.await {
            let dropped = linger::linger(io).await;
            tracing::debug!(%remote, dropped, "lingered after refusing a request head");
        }
    }
}
