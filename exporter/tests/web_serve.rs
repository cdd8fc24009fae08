//! The accept loop over real sockets on 127.0.0.1: plain HTTP/1.1 and h2c, slow TLS
//! handshakes, the connection limit, graceful shutdown and the bounded drain.
//!
//! Time bounds here are hang guards with wide margins, not speed checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get as route_get;
use gpu_exporter::web::{ServeOptions, WebConfig};
use http::{StatusCode, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};
use web_support::{Ca, ClientTls, Dir, get, get_h2c, router, start, within};

#[tokio::test]
async fn plain_http_serves_http1_and_h2c_unless_http2_is_off() {
    let running = start(WebConfig::none(), router(), ServeOptions::default()).await;
    let reply = within(10, get(running.addr, None, "/peer", &[])).await.unwrap();
    assert_eq!((reply.status, reply.version), (StatusCode::OK, Version::HTTP_11));
    assert_eq!(reply.body, reply.local.to_string());
    let reply = within(10, get_h2c(running.addr, "/metrics")).await.unwrap();
    assert_eq!((reply.status, reply.version), (StatusCode::OK, Version::HTTP_2));
    running.stop().await.unwrap();

    let dir = Dir::new();
    let config = dir.load(&dir.write("web.yml", "http_server_config:\n  http2: false\n"));
    let running = start(config, router(), ServeOptions::default()).await;
    assert_eq!(within(10, get(running.addr, None, "/metrics", &[])).await.unwrap().status, StatusCode::OK);
    assert!(within(10, get_h2c(running.addr, "/metrics")).await.is_err(), "h2c must be refused");
    running.stop().await.unwrap();
}

/// Opens a TCP connection that starts a TLS record and then stalls.
async fn stalled_client(addr: std::net::SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    tcp
}

/// Reads until the server closes the connection; returns the bytes read.
async fn read_to_close(tcp: &mut TcpStream) -> usize {
    let mut total = 0;
    let mut buf = [0u8; 1024];
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

#[tokio::test]
async fn stalled_handshakes_do_not_block_other_clients() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let options = ServeOptions { handshake_timeout: Duration::from_secs(60), ..ServeOptions::default() };
    let running = start(dir.load(&dir.tls_config(&ca.server(), "", "")), router(), options).await;

    let mut stalled = Vec::new();
    for _ in 0..5 {
        stalled.push(stalled_client(running.addr).await);
    }
    stalled.push(TcpStream::connect(running.addr).await.unwrap()); // sends nothing at all
    // The stalled handshakes have a minute left; the real client is served meanwhile.
    for _ in 0..3 {
        let reply = within(10, get(running.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[])).await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
    }
    let mut probe = [0u8; 1];
    for tcp in &stalled {
        assert!(
            matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "stalled connections are still open, waiting for their handshake"
        );
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_handshake_that_never_finishes_is_dropped_and_frees_its_slot() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let options =
        ServeOptions { handshake_timeout: Duration::from_millis(300), max_connections: 1, ..ServeOptions::default() };
    let running = start(dir.load(&dir.tls_config(&ca.server(), "", "")), router(), options).await;

    // The only slot is taken by a client that never completes its handshake...
    let mut stalled = stalled_client(running.addr).await;
    // ...so this one waits in the backlog until the timeout drops the stalled client.
    let reply = within(10, get(running.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(within(10, read_to_close(&mut stalled)).await, 0, "closed without a byte of TLS");
    running.stop().await.unwrap();
}

/// A router whose `/slow` handler signals that it started, then answers after `delay`.
fn slow_router(started: Arc<Notify>, delay: Duration) -> Router {
    router().route(
        "/slow",
        route_get(move || {
            let started = started.clone();
            async move {
                started.notify_one();
                tokio::time::sleep(delay).await;
                "finished"
            }
        }),
    )
}

#[tokio::test]
async fn shutdown_lets_requests_in_flight_finish_and_stops_accepting() {
    let started = Arc::new(Notify::new());
    let options = ServeOptions { drain: Duration::from_secs(30), ..ServeOptions::default() };
    let mut running = start(WebConfig::none(), slow_router(started.clone(), Duration::from_millis(500)), options).await;
    let addr = running.addr;
    // An idle keep-alive connection must not hold up the shutdown.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");

    let in_flight = tokio::spawn(get(addr, None, "/slow", &[]));
    within(10, started.notified()).await;
    running.signal_stop();

    let reply = within(10, in_flight).await.unwrap().unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "finished"));
    within(10, running.join()).await.unwrap();
    within(10, read_to_close(&mut idle)).await;
    assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed after shutdown");
}

#[tokio::test]
async fn the_drain_is_bounded() {
    let started = Arc::new(Notify::new());
    let options = ServeOptions { drain: Duration::from_millis(200), ..ServeOptions::default() };
    let mut running = start(WebConfig::none(), slow_router(started.clone(), Duration::from_secs(3600)), options).await;
    let (done_tx, done_rx) = oneshot::channel();
    let addr = running.addr;
    tokio::spawn(async move {
        let _ = done_tx.send(get(addr, None, "/slow", &[]).await);
    });
    within(10, started.notified()).await;
    running.signal_stop();
    // The handler would run for an hour; serve returns once the drain time is over.
    within(10, running.join()).await.unwrap();
    let outcome = within(10, done_rx).await.unwrap();
    assert!(outcome.is_err(), "the aborted request fails instead of hanging: {outcome:?}");
}

#[tokio::test]
async fn shutdown_interrupts_a_pending_tls_handshake() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let options = ServeOptions {
        handshake_timeout: Duration::from_secs(3600),
        drain: Duration::from_secs(30),
        ..ServeOptions::default()
    };
    let running = start(dir.load(&dir.tls_config(&ca.server(), "", "")), router(), options).await;
    let mut stalled = stalled_client(running.addr).await;
    tokio::time::sleep(Duration::from_millis(50)).await; // let the server take it
    within(10, running.stop()).await.unwrap();
    assert_eq!(within(10, read_to_close(&mut stalled)).await, 0);
}

#[tokio::test]
async fn silent_plain_clients_are_closed_after_the_header_read_timeout() {
    for http2 in [true, false] {
        let dir = Dir::new();
        let config = dir.load(&dir.write("web.yml", &format!("http_server_config:\n  http2: {http2}\n")));
        let options = ServeOptions {
            header_read_timeout: Duration::from_millis(300),
            max_connections: 2,
            ..ServeOptions::default()
        };
        let running = start(config, router(), options).await;
        // Both slots go to clients that never complete a request: one silent, one that
        // stops halfway through the HTTP/2 preface or an HTTP/1 request head.
        let mut silent = TcpStream::connect(running.addr).await.unwrap();
        let mut partial = TcpStream::connect(running.addr).await.unwrap();
        let head: &[u8] = if http2 { b"PRI * HTTP/2.0\r\n" } else { b"GET /metrics HTTP/1.1\r\nHost: x\r\n" };
        partial.write_all(head).await.unwrap();
        // A real client waits in the backlog until the timeout frees a slot.
        let reply = within(10, get(running.addr, None, "/metrics", &[])).await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "http2: {http2}");
        assert_eq!(within(10, read_to_close(&mut silent)).await, 0, "http2: {http2}");
        within(10, read_to_close(&mut partial)).await;
        running.stop().await.unwrap();
    }
}
