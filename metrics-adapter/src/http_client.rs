//! The outbound HTTP client shared by the exporter scraper and the Prometheus source:
//! HTTP/1.1 over plain TCP or rustls (ring), with a whole-exchange deadline and a cap on
//! the response body, so a slow or oversized peer costs bounded time and memory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Building the client or request failed.
    #[error("{0}")]
    Setup(String),
    /// No complete answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connection or protocol failure.
    #[error("{0}")]
    Transport(String),
    /// The body exceeded the cap.
    #[error("response body larger than {0} bytes")]
    TooLarge(usize),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// A complete response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

/// An HTTP(S) client.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client trusting the CAs in `ca_file` for `https` URLs (none: `https` fails to verify).
    pub fn new(ca_file: Option<&Path>, max_idle_per_host: usize) -> Result<Self> {
        Self::with_identity(ca_file, None, max_idle_per_host)
    }

    /// Like [`HttpClient::new`], presenting the client certificate `identity` (chain and
    /// key PEM files) to servers that ask for one.
    pub fn with_identity(
        ca_file: Option<&Path>,
        identity: Option<(&Path, &Path)>,
        max_idle_per_host: usize,
    ) -> Result<Self> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|e| Error::Setup(format!("reading {}: {e}", path.display())))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| Error::Setup(format!("{}: {e}", path.display())))?;
                roots.add(cert).map_err(|e| Error::Setup(format!("{}: {e}", path.display())))?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Setup(e.to_string()))?
            .with_root_certificates(roots);
        let tls = match identity {
            None => tls.with_no_client_auth(),
            Some((cert, key)) => {
                let read =
                    |p: &Path| std::fs::read(p).map_err(|e| Error::Setup(format!("reading {}: {e}", p.display())));
                let pair = https_edge::pem::key_pair(
                    &read(cert)?,
                    &read(key)?,
                    &cert.display().to_string(),
                    &key.display().to_string(),
                )
                .map_err(|e| Error::Setup(e.to_string()))?;
                tls.with_client_auth_cert(pair.cert.clone(), read_key(key)?).map_err(|e| Error::Setup(e.to_string()))?
            }
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Ok(Self { inner })
    }

    /// Sends a request and reads the whole body, within `timeout` and `max_body` bytes.
    pub async fn send(&self, req: Request<Full<Bytes>>, timeout: Duration, max_body: usize) -> Result<Response> {
        let exchange = async {
            let resp = self.inner.request(req).await.map_err(|e| Error::Transport(describe(&e)))?;
            let (parts, body) = resp.into_parts();
            if let Some(len) = parts.headers.get(http::header::CONTENT_LENGTH)
                && len.to_str().ok().and_then(|l| l.parse::<usize>().ok()).is_some_and(|l| l > max_body)
            {
                return Err(Error::TooLarge(max_body));
            }
            let body = Limited::new(body, max_body).collect().await.map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                    Error::TooLarge(max_body)
                } else {
                    Error::Transport(e.to_string())
                }
            })?;
            Ok(Response { status: parts.status, headers: parts.headers, body: body.to_bytes() })
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| Error::Timeout(timeout))?
    }
}

fn read_key(path: &Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::PrivateKeyDer::from_pem_file(path)
        .map_err(|e| Error::Setup(format!("private key {}: {e}", path.display())))
}

/// The error and its causes on one line.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
