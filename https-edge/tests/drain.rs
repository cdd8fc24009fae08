//! Shutdown: the listener closes, requests in flight finish within the drain, and the
//! drain is bounded for requests that would not finish.
//!
//! Time bounds here are hang guards with wide margins, not speed checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use https_edge::{Options, Transport};
use support::{request, router, start, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PLAIN: Transport = Transport::Plain { h2c: true };

#[tokio::test]
async fn requests_in_flight_finish_and_the_listener_closes() {
    let options = Options { drain: Duration::from_secs(30), ..Options::default() };
    let mut running = start(PLAIN, router(None), options).await;
    let addr = running.addr;
    // An idle keep-alive connection must not hold up the shutdown.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut head = [0u8; 12];
    idle.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    let in_flight = tokio::spawn(request(addr, None, "/slow/500"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    running.signal_stop();
    let answer = within(10, in_flight).await.unwrap().unwrap();
    assert_eq!((answer.status, answer.body.as_str()), (200, "finished"));
    within(10, running.stop()).await;
    assert!(started.elapsed() < Duration::from_secs(10), "the drain ended when the last request did");
    let mut rest = Vec::new();
    within(10, idle.read_to_end(&mut rest)).await.unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed after shutdown");
}

#[tokio::test]
async fn the_drain_is_bounded() {
    let options = Options { drain: Duration::from_millis(200), ..Options::default() };
    let mut running = start(PLAIN, router(None), options).await;
    let addr = running.addr;
    let hour = tokio::spawn(request(addr, None, "/slow/3600000"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    running.signal_stop();
    // The handler would run for an hour; serve returns once the drain time is over.
    within(10, running.stop()).await;
    let outcome = within(10, hour).await.unwrap();
    assert!(outcome.is_err(), "the aborted request fails instead of hanging: {outcome:?}");
}
