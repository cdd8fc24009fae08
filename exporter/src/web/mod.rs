//! The exporter's HTTP serving edge: the Prometheus exporter-toolkit `--web.config.file`
//! format and the accept loop that serves the exporter's axum `Router` with it.
//!
//! Why the toolkit format: operators already run node_exporter, DCGM exporter and other
//! Go exporters with one web config file; the same file (TLS certificate and key, client
//! certificates, bcrypt basic-auth users, security headers, HTTP/2 toggle, rate limit)
//! must work here unchanged, and what it cannot do here must stop the exporter with a
//! message instead of being ignored.
//!
//! How it is used:
//! ```no_run
//! # async fn run(path: Option<&std::path::Path>, router: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use gpu_exporter::web::{self, WebConfig};
//! let config = match path {
//!     Some(path) => WebConfig::load(path)?, // refuses a bad file: file, field, reason
//!     None => WebConfig::none(),
//! };
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:9400").await?;
//! let shutdown = async { let _ = tokio::signal::ctrl_c().await; };
//! web::serve(listener, router, Arc::new(config), shutdown, std::time::Duration::from_secs(10)).await?;
//! # Ok(()) }
//! ```
//!
//! Modules, one job each:
//! - [`config`]: file format, strict parsing, validation, error messages.
//! - `tls`: toolkit TLS names to rustls (ring provider only), client-certificate
//!   policies, and reloading certificate/key/CA files when they change.
//! - `san`: reads a certificate's SANs for `client_allowed_sans`.
//! - `basic_auth`: `Authorization` parsing, bcrypt checks, the verdict cache.
//! - `headers`: the toolkit's allowed response headers.
//! - `rate_limit`: the server-wide token bucket and Go duration parsing.
//! - [`serve`](mod@serve): the accept loop, TLS handshakes, HTTP/1 + HTTP/2, shutdown and drain.
//!
//! rustls is always given the ring provider explicitly (`builder_with_provider`), so this
//! module neither depends on nor installs a process-wide default provider.

mod basic_auth;
pub mod config;
mod headers;
mod rate_limit;
mod san;
pub mod serve;
mod tls;

pub use config::{RateLimitSettings, WebConfig, WebConfigError};
pub use serve::{ServeError, ServeOptions, serve, serve_with};
pub use tls::ClientAuth;
