//! Serving a web config: the exporter-toolkit's request checks (rate limit, required
//! client certificate, basic auth, response headers) layered around the exporter's axum
//! `Router`, served by the shared edge (`https-edge`: accept loop, TLS, HTTP/1.1 and
//! HTTP/2, shutdown and drain).
//!
//! Each request: the probe paths ([`ServeOptions::probe_paths`], `/healthz` and
//! `/readyz`) go straight to the router. Every other request: rate limit (`429`), then,
//! where `client_auth_type` requires a client certificate and the connection has none,
//! `403`; then basic auth (`401` with `WWW-Authenticate`); then the router. The router
//! sees `ConnectInfo<SocketAddr>`; the configured headers are added to every response,
//! the refusals included. Why the probe paths are open, and why a required client
//! certificate is enforced here rather than in the handshake: see the
//! [module documentation](super).
//!
//! Connections: plain HTTP/1.1 and, with `http_server_config.http2`, h2c; with TLS, ALPN
//! offers `h2` only when `http2` is true. Timeouts, the connection limit and the bounded
//! drain are the edge's (`https_edge::serve`), tuned by [`ServeOptions`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use https_edge::{PeerCertificates, Transport};
use std::net::SocketAddr;
use tower::ServiceExt as _;

use super::basic_auth::{self, Authenticator, BasicAuthError, Verdict};
use super::config::WebConfig;
use super::rate_limit::TokenBucket;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener could not be served (it is not a bound socket).
    #[error(transparent)]
    Edge(#[from] https_edge::ServeError),
    /// Basic auth could not be set up.
    #[error("basic auth: {0}")]
    BasicAuth(#[from] BasicAuthError),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ServeError>;

/// Tunables of the accept loop; [`serve`] uses the defaults with the given drain.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long in-flight connections may run on after shutdown fires.
    pub drain: Duration,
    /// How long a client may take to finish its TLS handshake.
    pub handshake_timeout: Duration,
    /// How long an HTTP/1 client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections open at once; at the limit the oldest idle one is closed to make room.
    pub max_connections: usize,
    /// Connections open at once from one IP address; at the limit its oldest idle one is
    /// closed to make room (or the new one, when all are busy).
    pub max_connections_per_ip: usize,
    /// Paths served without authentication (basic auth, a required client certificate)
    /// and outside the rate limit: the kubelet's probes carry no credentials. Compared
    /// with the request's path exactly (no normalisation, no prefix match), the way the
    /// router matches routes. Default: [`PROBE_PATHS`].
    pub probe_paths: Vec<String>,
}

/// The exporter's probe endpoints: liveness and readiness.
pub const PROBE_PATHS: &[&str] = &["/healthz", "/readyz"];

impl Default for ServeOptions {
    fn default() -> Self {
        let edge = https_edge::Options::default();
        ServeOptions {
            drain: edge.drain,
            handshake_timeout: edge.handshake_timeout,
            header_read_timeout: edge.header_read_timeout,
            max_connections: edge.max_connections,
            max_connections_per_ip: edge.max_connections_per_peer,
            probe_paths: PROBE_PATHS.iter().map(|p| (*p).to_owned()).collect(),
        }
    }
}

impl ServeOptions {
    fn edge(&self) -> https_edge::Options {
        https_edge::Options {
            drain: self.drain,
            handshake_timeout: self.handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_ip,
            max_header_bytes: None,
        }
    }
}

/// Serves `router` on `listener` as the web config says until `shutdown` completes, then
/// drains open connections for at most `drain`. Uses [`ServeOptions::default`] otherwise.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    config: Arc<WebConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> Result<()> {
    serve_with(listener, router, config, shutdown, ServeOptions { drain, ..ServeOptions::default() }).await
}

/// [`serve`] with every tunable given.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    config: Arc<WebConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: ServeOptions,
) -> Result<()> {
    let auth = config.users().map(|users| Authenticator::new(users.clone())).transpose()?;
    let limiter = config.rate_limit().map(|r| TokenBucket::new(r.burst, r.interval));
    let handler = Arc::new(RequestHandler {
        router,
        auth,
        limiter,
        headers: config.headers().to_vec(),
        require_client_cert: config.client_auth().requires_cert(),
        probe_paths: options.probe_paths.clone(),
    });
    let transport = match config.tls() {
        Some(tls) => Transport::Tls(tls.clone()),
        None => Transport::Plain { h2c: config.http2() },
    };
    tracing::info!(
        addr = ?listener.local_addr().ok(),
        tls = config.tls_enabled(),
        http2 = config.http2(),
        basic_auth_users = config.users().map_or(0, |users| users.len()),
        client_auth = ?config.client_auth(),
        web_config = ?config.source(),
        probe_paths = ?options.probe_paths,
        max_connections = options.max_connections,
        max_connections_per_ip = options.max_connections_per_ip,
        "serving HTTP (probe paths without authentication)"
    );
    let service = tower::service_fn(move |request: Request<Body>| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler.handle(request).await) }
    });
    https_edge::serve(listener, transport, service, shutdown, options.edge()).await?;
    Ok(())
}

/// Probe paths, rate limit, client-certificate requirement, basic auth and headers
/// around the router.
struct RequestHandler {
    router: Router,
    auth: Option<Authenticator>,
    limiter: Option<TokenBucket>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// `client_auth_type` requires a certificate: enforced per request (see the module docs).
    require_client_cert: bool,
    probe_paths: Vec<String>,
}

impl RequestHandler {
    async fn handle(&self, request: Request<Body>) -> Response<Body> {
        let mut response = self.respond(request).await;
        for (name, value) in &self.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response
    }

    fn is_probe(&self, request: &Request<Body>) -> bool {
        let path = request.uri().path();
        self.probe_paths.iter().any(|p| p == path)
    }

    async fn respond(&self, request: Request<Body>) -> Response<Body> {
        let remote = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
        // The edge puts what the handshake accepted on every request; none: no certificate.
        let client_cert = request.extensions().get::<PeerCertificates>().is_some_and(PeerCertificates::presented);
        if !self.is_probe(&request) {
            if let Some(limiter) = &self.limiter {
                if !limiter.allow() {
                    tracing::debug!(?remote, "rate limit exceeded");
                    return text_response(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
                }
            }
            if self.require_client_cert && !client_cert {
                tracing::debug!(?remote, path = request.uri().path(), "no client certificate; refused");
                return text_response(StatusCode::FORBIDDEN, "Forbidden: a client certificate is required\n");
            }
            if let Some(auth) = &self.auth {
                let verdict = auth.check(request.headers().get(AUTHORIZATION)).await;
                if verdict != Verdict::Allowed {
                    tracing::debug!(?remote, ?verdict, path = request.uri().path(), "basic auth refused the request");
                    let mut response = text_response(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static(basic_auth::CHALLENGE));
                    return response;
                }
            }
        }
        match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

fn text_response(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
