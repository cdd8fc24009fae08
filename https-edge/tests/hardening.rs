//! The edge under attack on loopback: idle sockets and slowloris clients must not lock a
//! legitimate client out (plain and TLS), a refused over-long request head must reach
//! the client as its `431`, and HTTP/1.1's `Host` rule holds (RFC 9112 section 3.2).
//!
//! Attacks come from four addresses, 127.0.0.2 to 127.0.0.5 (each can hold at most 256
//! places, 1024 together, all the server has), the legitimate client from 127.0.0.1; every
//! attack stops at its deadline. Time bounds are hang guards, not speed checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use https_edge::{Identity, Options, PemSource, ServerTls, TlsSettings, Transport};
use support::{Ca, client_tls, router, start, within};
use test_support::attack;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PLAIN: Transport = Transport::Plain { h2c: false };

/// More idle sockets than the edge has ever had places for (512 before, 1024 now), and
/// than those and the listen backlog (1024) together.
const IDLE: usize = 2000;
/// Slowloris clients: more than the 512 places there were (each costs a TLS handshake).
const SLOW: usize = 1300;

fn tls_transport(ca: &Ca) -> Transport {
    let server = ca.server();
    let settings = TlsSettings::new(Identity::Pem {
        cert: PemSource::Inline(server.cert_pem.clone()),
        key: PemSource::Inline(server.key_pem.clone()),
    });
    Transport::Tls(Arc::new(ServerTls::new(settings, Duration::ZERO).unwrap()))
}

fn options() -> Options {
    Options { drain: Duration::from_secs(1), ..Options::default() }
}

async fn legitimate(addr: std::net::SocketAddr, tls: Option<Arc<rustls::ClientConfig>>) {
    for round in 0..3 {
        let (status, took) = attack::timed_get(addr, tls.clone(), "/whoami", &[], Duration::from_secs(3)).await;
        assert_eq!(status.unwrap_or_else(|e| panic!("request {round} failed after {took:?}: {e}")), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_do_not_lock_out_a_plain_client() {
    attack::raise_open_files_limit();
    let running = start(PLAIN, router(None), options()).await;
    let idle = attack::idle(running.addr, IDLE, 4, b"", Duration::from_secs(30));
    idle.opened(IDLE).await;
    legitimate(running.addr, None).await;
    idle.stop().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_and_stalled_handshakes_do_not_lock_out_a_tls_client() {
    attack::raise_open_files_limit();
    let ca = Ca::new("server CA");
    let running = start(tls_transport(&ca), router(None), options()).await;
    // Half say nothing (before the handshake), half stop after a TLS record's first bytes
    // (during it).
    let silent = attack::idle(running.addr, IDLE / 2, 4, b"", Duration::from_secs(30));
    let stalled = attack::idle(running.addr, IDLE / 2, 4, &[0x16, 0x03, 0x01], Duration::from_secs(30));
    // More than the 512 places there were; waiting for all of them would let the old
    // 10 s handshake timeout free some places meanwhile.
    silent.opened(IDLE / 4).await;
    stalled.opened(IDLE / 4).await;
    legitimate(running.addr, Some(client_tls(&ca, None))).await;
    silent.stop().await;
    stalled.stop().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_do_not_lock_out_a_tls_client() {
    attack::raise_open_files_limit();
    let ca = Ca::new("server CA");
    let running = start(tls_transport(&ca), router(None), options()).await;
    let tls = client_tls(&ca, None);
    let slow =
        attack::slowloris(running.addr, SLOW, 4, Some(tls.clone()), Duration::from_secs(1), Duration::from_secs(30));
    slow.opened(SLOW).await;
    legitimate(running.addr, Some(tls)).await;
    slow.stop().await;
    running.stop().await;
}

#[tokio::test]
async fn a_silent_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let options = Options { header_read_timeout: Duration::from_millis(300), ..options() };
    let running = start(PLAIN, router(None), options).await;
    let mut stream = TcpStream::connect(running.addr).await.unwrap();
    stream.write_all(b"GET /whoami HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // The rest of the answer, then nothing more: the server must close the idle connection.
    let mut rest = Vec::new();
    within(10, stream.read_to_end(&mut rest)).await.unwrap();
    assert!(String::from_utf8_lossy(&rest).ends_with("no certificate"), "{rest:?}");
    running.stop().await;
}

/// Sends a request whose target carries `selector_bytes` of label selector, reading the
/// answer while it is still being sent; returns the status line.
async fn over_long(
    addr: std::net::SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    selector_bytes: usize,
) -> String {
    // A small send buffer, as on a real network path where most of the megabyte is still
    // in flight when the server has answered; on loopback the kernel's buffers would
    // otherwise take the whole request at once.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(64 << 10).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    let stream: Box<dyn Duplex> = match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Box::new(tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.unwrap())
        }
    };
    let (mut read, mut write) = tokio::io::split(stream);
    let writer = tokio::spawn(async move {
        let mut head =
            b"GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/gpu_utilization?labelSelector="
                .to_vec();
        head.resize(head.len() + selector_bytes, b'a');
        head.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\n\r\n");
        // A client such as curl gives up reading once its sending fails ("connection
        // reset"), so the whole request must go out.
        write.write_all(&head).await?;
        write.shutdown().await
    });
    let mut answer = Vec::new();
    let outcome = within(10, read.read_to_end(&mut answer)).await;
    let sent = writer.await.unwrap();
    assert!(sent.is_ok(), "sending the request failed: {sent:?} (read {outcome:?})");
    let text = String::from_utf8_lossy(&answer);
    let line = text.lines().next().unwrap_or_default().to_owned();
    assert!(!line.is_empty(), "no answer, only {outcome:?}");
    line
}

trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

#[tokio::test]
async fn a_refused_one_megabyte_request_head_gets_its_431() {
    let ca = Ca::new("server CA");
    // hyper's default head limit (the exporter, plain) and a set one (the adapter's
    // 160 KiB, over TLS).
    for (transport, tls, max_header_bytes) in
        [(PLAIN, None, None), (tls_transport(&ca), Some(client_tls(&ca, None)), Some(160 << 10))]
    {
        let running = start(transport, router(None), Options { max_header_bytes, ..options() }).await;
        for _ in 0..10 {
            let line = over_long(running.addr, tls.clone(), 1 << 20).await;
            assert_eq!(line, "HTTP/1.1 431 Request Header Fields Too Large");
        }
        running.stop().await;
    }
}

async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    within(10, stream.read_to_end(&mut answer)).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn http11_requests_need_exactly_one_valid_host() {
    let running = start(PLAIN, router(None), options()).await;
    let addr = running.addr;
    let ok = raw(addr, b"GET /whoami HTTP/1.1\r\nHost: localhost:9400\r\nConnection: close\r\n\r\n").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let http10 = raw(addr, b"GET /whoami HTTP/1.0\r\n\r\n").await;
    assert!(http10.starts_with("HTTP/1.0 200"), "HTTP/1.0 may omit Host: {http10}");
    for (request, why) in [
        (&b"GET /whoami HTTP/1.1\r\nConnection: close\r\n\r\n"[..], "Host header"),
        (b"GET /whoami HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", "2 Host headers"),
        (b"GET /whoami HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", "2 Host headers"),
        (b"GET /whoami HTTP/1.1\r\nHost: user@host\r\nConnection: close\r\n\r\n", "is not host[:port]"),
    ] {
        let answer = raw(addr, request).await;
        assert!(answer.starts_with("HTTP/1.1 400") || answer.starts_with("HTTP/1.0 400"), "{answer}");
        assert!(answer.contains(why) && answer.contains("RFC 9112"), "{answer}");
    }
    running.stop().await;
}
