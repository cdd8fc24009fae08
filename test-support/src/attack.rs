//! Connection attacks on a loopback server, for the serving edge's tests and its load
//! harness: sockets that say nothing, slowloris clients that send a request head one
//! line at a time, and a timed legitimate request.
//!
//! Every attack targets a loopback address only (the helpers refuse anything else) and
//! stops by itself at its deadline. Attackers connect from `127.0.0.2` and up (Linux
//! answers all of 127.0.0.0/8 on `lo`), so a server's per-address limit sees them as
//! other peers than the legitimate client on `127.0.0.1`, as on a real node network.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// Raises this process' open-file soft limit to its hard limit; returns (soft, hard)
/// after the change. Attacks with thousands of sockets need it where the soft limit is
/// the usual 1024.
pub fn raise_open_files_limit() -> (u64, u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) != 0 {
            return (0, 0);
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) == 0 {
                limit = raised;
            }
        }
    }
    (limit.rlim_cur, limit.rlim_max)
}

/// Open file descriptors of this process now.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(Iterator::count).unwrap_or(0)
}

/// The attacker address number `n` (0-based): 127.0.0.2, 127.0.0.3, ...
pub fn attacker_address(n: usize, spread: usize) -> IpAddr {
    let k = n % spread.max(1);
    let host = u8::try_from(2 + k % 250).unwrap_or(2);
    let third = u8::try_from(k / 250).unwrap_or(0);
    IpAddr::V4(Ipv4Addr::new(127, 0, third, host))
}

fn require_loopback(target: SocketAddr) {
    assert!(target.ip().is_loopback(), "attacks target loopback only, not {target}");
}

async fn connect_from(source: IpAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let socket = if target.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if target.is_ipv4() && source.is_ipv4() {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    socket.connect(target).await
}

/// What an attack did, counted while it ran.
#[derive(Debug, Default)]
pub struct Tally {
    /// Connections opened (reconnections included).
    pub connects: AtomicUsize,
    /// Connections the server closed.
    pub closed_by_server: AtomicUsize,
    /// Connection attempts that failed.
    pub failed: AtomicUsize,
}

/// A running attack: its tasks end at the deadline (or when dropped).
#[derive(Debug)]
pub struct Attack {
    pub tally: Arc<Tally>,
    tasks: JoinSet<()>,
}

impl Attack {
    /// Waits for every attacker to reach its deadline and close its socket.
    pub async fn finish(mut self) -> Arc<Tally> {
        while self.tasks.join_next().await.is_some() {}
        self.tally
    }

    /// Stops at once.
    pub async fn stop(mut self) -> Arc<Tally> {
        self.tasks.shutdown().await;
        self.tally
    }

    /// Waits until the attack has opened at least `count` connections, or 10 s (a
    /// server that stopped accepting may never let them all in), then 300 ms more for
    /// the server to accept what the kernel queued.
    pub async fn opened(&self, count: usize) {
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while self.tally.connects.load(Ordering::Relaxed) < count {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `count` sockets from attacker addresses spread over `spread` addresses, each opening
/// with `first` (nothing, or for instance one byte of a TLS record), then silent. A
/// socket the server closes is reopened, until `duration` is over.
pub fn idle(target: SocketAddr, count: usize, spread: usize, first: &'static [u8], duration: Duration) -> Attack {
    require_loopback(target);
    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + duration;
    let mut tasks = JoinSet::new();
    for n in 0..count {
        let tally = tally.clone();
        let source = attacker_address(n, spread);
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let Ok(mut stream) = connect_from(source, target).await else {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tally.connects.fetch_add(1, Ordering::Relaxed);
                if !first.is_empty() && stream.write_all(first).await.is_err() {
                    continue;
                }
                let mut sink = [0u8; 512];
                let left = deadline.saturating_duration_since(Instant::now());
                // Ends with the server closing (0 or an error) or at the deadline.
                if tokio::time::timeout(left, stream.read(&mut sink)).await.is_ok() {
                    tally.closed_by_server.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    Attack { tally, tasks }
}

/// `count` slowloris clients: each sends a request line and then one header line every
/// `every`, never finishing the head, over TLS when `tls` is given; reconnects when the
/// server closes, until `duration` is over.
pub fn slowloris(
    target: SocketAddr,
    count: usize,
    spread: usize,
    tls: Option<Arc<rustls::ClientConfig>>,
    every: Duration,
    duration: Duration,
) -> Attack {
    require_loopback(target);
    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + duration;
    let mut tasks = JoinSet::new();
    for n in 0..count {
        let tally = tally.clone();
        let tls = tls.clone();
        let source = attacker_address(n, spread);
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let Ok(stream) = connect_from(source, target).await else {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tally.connects.fetch_add(1, Ordering::Relaxed);
                let left = deadline.saturating_duration_since(Instant::now());
                let outcome = match &tls {
                    None => tokio::time::timeout(left, trickle(stream, every)).await,
                    Some(config) => {
                        let connector = tokio_rustls::TlsConnector::from(config.clone());
                        tokio::time::timeout(left, async {
                            match connector.connect(ServerName::try_from("localhost").unwrap(), stream).await {
                                Ok(stream) => trickle(stream, every).await,
                                Err(e) => e,
                            }
                        })
                        .await
                    }
                };
                if outcome.is_ok() {
                    tally.closed_by_server.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    Attack { tally, tasks }
}

/// Sends a request head that never ends; returns the error that ended it.
async fn trickle<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, every: Duration) -> io::Error {
    if let Err(e) = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n").await {
        return e;
    }
    let mut n = 0u64;
    loop {
        tokio::time::sleep(every).await;
        n += 1;
        if let Err(e) = stream.write_all(format!("X-Slow-{n}: 1\r\n").as_bytes()).await {
            return e;
        }
        // A closed connection shows on the next write; a read notices the FIN sooner.
        let mut probe = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await {
            return io::ErrorKind::UnexpectedEof.into();
        }
    }
}

/// One `GET path` from 127.0.0.1 over a fresh connection, HTTP/1.1 (over TLS when
/// `tls` is given), with `headers` added; the status and how long the whole exchange
/// took, or why it failed. Gives up after `limit`.
pub async fn timed_get(
    target: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    path: &str,
    headers: &[(&str, &str)],
    limit: Duration,
) -> (io::Result<u16>, Duration) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(limit, async {
        let stream = TcpStream::connect(target).await?;
        let mut head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        match tls {
            None => exchange(stream, &head).await,
            Some(config) => {
                let connector = tokio_rustls::TlsConnector::from(config);
                let stream = connector.connect(ServerName::try_from("localhost").unwrap(), stream).await?;
                exchange(stream, &head).await
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {limit:?}"))));
    (outcome, started.elapsed())
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, head: &str) -> io::Result<u16> {
    stream.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    if let Err(e) = stream.read_to_end(&mut raw).await
        && raw.is_empty()
    {
        return Err(e);
    }
    let text = String::from_utf8_lossy(&raw);
    text.get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no HTTP answer: {:?}", text.chars().take(200).collect::<String>())))
}
