//! The accept loop: accepts connections up to a limit, serves each in its own task (one
//! slow client never blocks another), and shuts down gracefully.
//!
//! Limits and shutdown: at most `max_connections` connections (handshaking or open) at a
//! time, `max_connections_per_peer` of them from one address; at a limit the oldest idle
//! connection is closed to make room, and accepting pauses only while every connection
//! is busy serving a request (`admit` says why). When
//! the shutdown future completes, the listener closes, pending handshakes and idle
//! keep-alive connections close, requests in flight may finish, and whatever is still
//! open after `drain` is aborted, so shutdown takes at most `drain` however a client
//! behaves (a Kubernetes pod has `terminationGracePeriodSeconds`, 30 s by default, before
//! it is killed; both binaries' drains default below that).
//!
//! Errors on single connections (handshake failures, resets, protocol errors) are logged
//! at debug level and never end the server; accept errors are logged and retried.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};

pub use crate::options::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_PEER,
    Options, Transport,
};

use crate::admit::{Admission, Registry};
use crate::conn::{self, Context};

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener has no local address (it is not a bound socket).
    #[error("cannot read the listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ServeError>;

/// Serves `service` on `listener` until `shutdown` completes, then drains open
/// connections for at most `options.drain`.
///
/// Every request carries two extensions: `axum::extract::ConnectInfo<SocketAddr>` (the
/// client's address) and [`crate::PeerCertificates`] (what the client presented in the
/// TLS handshake; empty on plain connections).
pub async fn serve<S>(
    listener: TcpListener,
    transport: Transport,
    service: S,
    shutdown: impl Future<Output = ()> + Send,
    options: Options,
) -> Result<()>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let context = Arc::new(Context::new(transport, options.clone(), service));
    let (stop_tx, stop_rx) = watch::channel(false);
    let registry = Registry::new(options.max_connections, options.max_connections_per_peer);
    let mut tasks = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => { report(done); continue; }
            () = registry.room() => {}
        }
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
        let lease = match registry.admit(remote.ip()) {
            Admission::Admitted(lease) => lease,
            Admission::Refused => {
                tracing::debug!(%remote, "connection limit reached with every connection busy; closing the new one");
                continue;
            }
        };
        tasks.spawn(conn::serve_connection(context.clone(), stream, remote, stop_rx.clone(), lease));
    }

    drop(listener);
    stop_tx.send_replace(true);
    drain(tasks, options.drain).await;
    tracing::info!(%addr, "server stopped");
    Ok(())
}

/// Waits for the connection tasks to end, for at most `limit`; aborts the rest.
async fn drain(mut tasks: JoinSet<()>, limit: Duration) {
    if tasks.is_empty() {
        return;
    }
    tracing::info!(open = tasks.len(), drain = ?limit, "shutting down: draining connections");
    let drained = tokio::time::timeout(limit, async {
        while let Some(done) = tasks.join_next().await {
            report(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(aborted = tasks.len(), drain = ?limit, "drain time over; closing the remaining connections");
        tasks.shutdown().await;
    }
}

fn report(done: std::result::Result<(), JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "a connection task panicked");
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted, WouldBlock};
    matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted | WouldBlock)
}
