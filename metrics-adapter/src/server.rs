//! HTTPS serving: rustls (ring provider only) with the serving certificate resolved per
//! handshake from a swappable slot (files re-read when they change, or a self-signed pair
//! made at start), client certificates requested but verified per request by the
//! authenticator (so CA changes apply without a restart), HTTP/1.1 and HTTP/2, and a
//! graceful shutdown that stops accepting and drains open connections for a bounded time.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::auth::PeerCertificates;

/// Why serving could not start or a certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The certificate or key is unusable.
    #[error("serving certificate {name}: {reason}")]
    BadPair {
        /// Where it came from.
        name: String,
        /// Why.
        reason: String,
    },
    /// TLS configuration failed.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// Certificate generation failed.
    #[error(transparent)]
    Generate(#[from] crate::certs::Error),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses a PEM certificate chain and private key into a key rustls can serve with,
/// checking that they belong together.
pub fn load_pair(cert_pem: &[u8], key_pem: &[u8], name: &str) -> Result<CertifiedKey> {
    use rustls::pki_types::pem::PemObject;
    let bad = |reason: String| Error::BadPair { name: name.to_owned(), reason };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(format!("certificate: {e}")))?;
    if chain.is_empty() {
        return Err(bad("no certificate in the certificate file".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad(format!("private key: {e}")))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| bad(e.to_string()))
}

/// The serving certificate slot.
#[derive(Debug)]
pub struct CertSlot {
    current: ArcSwap<CertifiedKey>,
}

impl CertSlot {
    /// A slot holding `key`.
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self { current: ArcSwap::from_pointee(key) })
    }

    /// Replaces the certificate for new handshakes.
    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }

    /// The certificate served now (leaf first).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current.load().cert.clone()
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// Reads a certificate and key pair from files.
pub fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| Error::Read { path: p.to_owned(), source });
    Ok((read(cert)?, read(key)?))
}

/// Re-reads the pair every `interval` and swaps it in when the bytes changed and the new
/// pair is valid; a broken pair is logged and the previous one kept.
pub async fn reload_pair(
    slot: Arc<CertSlot>,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = read_pair(&cert, &key).ok();
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let pair = match read_pair(&cert, &key) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "serving certificate unreadable; keeping the current one");
                continue;
            }
        };
        if last.as_ref() == Some(&pair) {
            continue;
        }
        match load_pair(&pair.0, &pair.1, &cert.display().to_string()) {
            Ok(k) => {
                slot.set(k);
                tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                last = Some(pair);
            }
            Err(e) => tracing::warn!(error = %e, "new serving certificate refused; keeping the current one"),
        }
    }
}

/// Requests a client certificate and checks the handshake signature (proof of the private
/// key), but leaves chain verification to the authenticator, which knows the current CAs.
#[derive(Debug)]
struct DeferredClientAuth {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for DeferredClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints: Go clients then send their configured certificate whatever its issuer.
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The rustls server configuration: TLS 1.2 and 1.3, h2 and http/1.1.
pub fn tls_config(slot: Arc<CertSlot>) -> Result<Arc<ServerConfig>> {
    let provider = provider();
    let verifier = Arc::new(DeferredClientAuth { algorithms: provider.signature_verification_algorithms });
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(slot);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Connection-level settings.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Deadline for a TLS handshake.
    pub handshake_timeout: Duration,
    /// Deadline for a request's headers (HTTP/1.1).
    pub header_read_timeout: Duration,
    /// HTTP/1.1 read buffer; a request head larger than this is refused by hyper (431).
    pub max_buf_size: usize,
    /// How long open connections may drain at shutdown.
    pub drain: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            max_buf_size: 256 << 10,
            drain: Duration::from_secs(20),
        }
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` turns true, then drains.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    opts: Options,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout)
        .max_buf_size(opts.max_buf_size);
    builder.http2().timer(TokioTimer::new()).max_header_list_size(u32::try_from(opts.max_buf_size).unwrap_or(u32::MAX));
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(opts.handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            };
            let chain =
                tls.get_ref().1.peer_certificates().map(<[CertificateDer<'static>]>::to_vec).unwrap_or_default();
            let peer = PeerCertificates::new(chain);
            let svc = tower::service_fn(move |req: http::Request<Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(peer.clone());
                let app = app.clone();
                async move { Ok::<_, Infallible>(app.oneshot(req).await.unwrap_or_else(|never| match never {})) }
            });
            let conn = builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(svc)).into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%remote, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(opts.drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(drain = ?opts.drain, "connections still open after the drain period; closing them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs;

    #[test]
    fn pairs_must_match_and_parse() {
        let a = certs::self_signed(&["localhost"]).unwrap();
        let b = certs::self_signed(&["localhost"]).unwrap();
        assert!(load_pair(a.cert_pem.as_bytes(), a.key_pem.as_bytes(), "a").is_ok());
        let e = load_pair(a.cert_pem.as_bytes(), b.key_pem.as_bytes(), "mixed").unwrap_err().to_string();
        assert!(e.contains("mixed"), "{e}");
        assert!(load_pair(b"", a.key_pem.as_bytes(), "empty").is_err());
        assert!(load_pair(a.cert_pem.as_bytes(), b"nope", "nokey").is_err());
    }
}
