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

/// Tunables of the accept loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long in-flight connections may run on after shutdown fires.
    pub drain: Duration,
    /// How long a client may take to finish its TLS handshake.
    pub handshake_timeout: Duration,
    /// How long an HTTP/1 client may take to send a request's headers (and a plain
    /// client its first bytes).
    pub header_read_timeout: Duration,
    /// Connections served (or handshaking) at once; more wait in the kernel backlog.
    pub max_connections: usize,
    /// The most bytes of request head (HTTP/1 buffer, HTTP/2 header list) a client may
    /// send; larger requests are refused by hyper (`431`). `None`: hyper's defaults.
    pub max_header_bytes: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            drain: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_header_bytes: None,
        }
    }
}
