//! The exporter's HTTP serving edge: the Prometheus exporter-toolkit `--web.config.file`
//! format and the accept loop that serves the exporter's axum `Router` with it.
//!
//! Why the toolkit format: operators already run node_exporter, DCGM exporter and other
//! Go exporters with one web config file; the same file (TLS certificate and key, client
//! certificates, bcrypt basic-auth users, security headers, HTTP/2 toggle, rate limit)
//! must work here unchanged, and what it cannot do here must stop the exporter with a
//! message instead of being ignored.
//!
//! Probe paths (`/healthz`, `/readyz`) are served without authentication and outside the
//! rate limit; `/metrics` and every other path keep every check the web config asks for.
//! The kubelet's HTTP probes carry no credentials (no `Authorization` header, no client
//! certificate), so a protected probe makes the kubelet restart a healthy exporter, or
//! forces the password into the DaemonSet. Kubernetes' own components do the same: the API
//! server always allows `/healthz`, `/livez` and `/readyz`, and its TLS handshake requests
//! a client certificate without requiring one, authenticating per request instead. The
//! bodies say only "ok" or why the exporter is not ready.
//!
//! Required client certificates (`client_auth_type: RequireAndVerifyClientCert` or
//! `RequireAnyClientCert`) are enforced per request for the same reason, not in the
//! handshake: the kubelet's HTTPS probe presents no certificate, so a handshake that
//! demands one can never pass. Here the handshake asks for a certificate and lets a
//! client without one finish; such a connection gets the probe paths and `403` for
//! everything else. A certificate that is presented is verified in the handshake exactly
//! as configured (CA chain, client-auth usage, `client_allowed_sans`): a bad certificate
//! still fails the handshake, even for a probe. Options weighed:
//! - the exporter-toolkit's behaviour (node_exporter: no exemption, the handshake fails):
//!   HTTPS probes impossible; only `tcpSocket` probes remain, which cannot tell ready;
//! - a second, plain-HTTP probe listener (etcd's `--listen-metrics-urls`, the kubelet's
//!   healthz port): another unencrypted, unauthenticated port on every GPU node, a port
//!   to allocate and a manifest change, to serve the same two answers;
//! - request-but-enforce-per-path (chosen): one port, probes unchanged except for
//!   `scheme: HTTPS`. The cost: a client without a certificate completes a TLS handshake
//!   and reaches the HTTP layer (still bounded by `max_connections` and the header read
//!   timeout) and can learn whether the exporter is alive and ready; it reads nothing
//!   else. A scanner that checks the handshake sees the certificate as optional.
//!
//! The probe paths are compared with the request path exactly, as the router matches
//! routes, so no other route is reached without authentication (`/healthz/`, `//healthz`
//! or `/metrics?x=/healthz` are not probe paths). [`ServeOptions::probe_paths`] changes
//! the list for a library user; the exporter uses [`PROBE_PATHS`].
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
//! - `tls`: toolkit TLS names and client-certificate policies onto the shared HTTPS
//!   edge (`https-edge`, which also reloads certificate/key/CA files when they change
//!   and reads SANs for `client_allowed_sans`).
//! - `basic_auth`: `Authorization` parsing, bcrypt checks, the verdict cache.
//! - `headers`: the toolkit's allowed response headers.
//! - `rate_limit`: the server-wide token bucket and Go duration parsing.
//! - [`serve`](mod@serve): the toolkit's per-request checks around the router, served by
//!   the edge's accept loop (TLS handshakes, HTTP/1 + HTTP/2, shutdown and drain).
//!
//! rustls is always given the ring provider explicitly (`builder_with_provider`), so this
//! module neither depends on nor installs a process-wide default provider.

mod basic_auth;
pub mod config;
mod headers;
mod rate_limit;
pub mod serve;
mod tls;

pub use config::{RateLimitSettings, WebConfig, WebConfigError};
pub use serve::{PROBE_PATHS, ServeError, ServeOptions, serve, serve_with};
pub use tls::ClientAuth;
