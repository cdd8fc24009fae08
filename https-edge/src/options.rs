//! What a caller chooses for [`serve`](crate::serve()): how connections are spoken to
//! ([`Transport`]) and the accept loop's limits ([`Options`]).
//!
//! Kept apart from the accept loop (`serve`) and the connection task (`conn`), which
//! both read them, so that neither has to import the other's module for them: the loop
//! spawns connection tasks, and a connection task needs only these settings.

use std::sync::Arc;
use std::time::Duration;

use crate::reload::ServerTls;

/// How connections are spoken to.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Plain HTTP/1.1, and HTTP/2 with prior knowledge (h2c) when `h2c` is set.
    Plain {
        /// Accept h2c beside HTTP/1.1.
        h2c: bool,
    },
    /// TLS with the current (possibly just reloaded) configuration; ALPN picks HTTP/2
    /// or HTTP/1.1.
    Tls(Arc<ServerTls>),
}

/// Default [`Options::handshake_timeout`]: a TLS handshake on a busy node takes
/// milliseconds; 5 s leaves room for a slow client and still frees a silent one's
/// place well within one 15 s scrape interval.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Options::header_read_timeout`]: a scraper or the kubelet sends its whole
/// request head in one write; 5 s is a third of the usual 15 s scrape interval.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Options::max_connections`]: far above what a node's scrapers and probes
/// use (a handful), small enough that a flood costs at most this many descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default [`Options::max_connections_per_peer`]: a quarter of the total, so that one
/// address never holds more than that.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 256;

/// Tunables of the accept loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long in-flight connections may run on after shutdown fires.
    pub drain: Duration,
    /// How long a client may take from accept to the end of its TLS handshake (the
    /// wait for its first byte included).
    pub handshake_timeout: Duration,
    /// How long an HTTP/1 client may take to send a complete request head: the first
    /// one (counted from accept on plain HTTP, from the end of the handshake on TLS) and
    /// each later one on a keep-alive connection (counted from the previous response).
    pub header_read_timeout: Duration,
    /// Connections open at once. At the limit the oldest idle connection is closed to
    /// make room; only when all are busy serving requests do new clients wait in the
    /// kernel backlog.
    pub max_connections: usize,
    /// Connections open at once from one peer address; at the limit the peer's oldest
    /// idle connection is closed to make room, or, when all are busy, the new one.
    /// Effectively at most `max_connections`.
    pub max_connections_per_peer: usize,
    /// The most bytes of request head (HTTP/1 buffer, HTTP/2 header list) a client may
    /// send; larger requests are refused by hyper (`431`). `None`: hyper's defaults.
    pub max_header_bytes: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            drain: Duration::from_secs(10),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            max_header_bytes: None,
        }
    }
}
