//! The adapter's serving settings on the shared HTTPS edge (`https-edge`): the serving
//! certificate from files (re-read when they change, checked at most every
//! `--tls-reload-interval`) or from a slot the adapter fills itself (its Secret, or a
//! self-signed pair made at start); client certificates requested in every handshake but
//! verified per request by the authenticator, which knows the CAs in force (they change
//! with the `extension-apiserver-authentication` ConfigMap, without a restart); HTTP/1.1
//! and HTTP/2; request heads bounded by the URI and header flags; the edge's deadlines
//! and connection limits (the oldest idle connection closed to make room) set by their
//! flags ([`Limits`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use https_edge::{ClientCertRequest, ClientCerts, Identity, PemSource, ServerTls, TlsSettings};
use rustls::sign::CertifiedKey;

pub use https_edge::CertSlot;

/// Why serving could not start or a certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate or key is unusable.
    #[error("serving certificate {name}: {reason}")]
    BadPair {
        /// Where it came from.
        name: String,
        /// Why.
        reason: String,
    },
    /// TLS configuration failed (files unreadable, bad combination).
    #[error("TLS configuration: {0}")]
    Tls(#[from] https_edge::TlsError),
    /// Certificate generation failed.
    #[error(transparent)]
    Generate(#[from] crate::certs::Error),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Parses a PEM certificate chain and private key into a key rustls can serve with,
/// checking that they belong together.
pub fn load_pair(cert_pem: &[u8], key_pem: &[u8], name: &str) -> Result<CertifiedKey> {
    https_edge::pem::key_pair(cert_pem, key_pem, "certificate", "private key")
        .map_err(|e| Error::BadPair { name: name.to_owned(), reason: e.to_string() })
}

/// Where the serving certificate comes from.
#[derive(Debug)]
pub enum ServingCert {
    /// `--tls-cert-file` and `--tls-private-key-file`, checked for changes at most every
    /// `check_every`.
    Files {
        /// Certificate chain file.
        cert: PathBuf,
        /// Private key file.
        key: PathBuf,
        /// How often the files are checked at most.
        check_every: Duration,
    },
    /// A slot the adapter fills itself.
    Slot(Arc<CertSlot>),
}

/// Protocol choices of the serving edge (`--tls-min-version`, `--tls-cipher-suites`,
/// `--disable-http2`).
#[derive(Debug, Clone)]
pub struct Protocols {
    /// Serve TLS 1.3 only.
    pub tls13_only: bool,
    /// The cipher suites offered (`None`: the ring provider's defaults).
    pub cipher_suites: Option<Vec<rustls::SupportedCipherSuite>>,
    /// Offer HTTP/2.
    pub http2: bool,
}

impl Default for Protocols {
    fn default() -> Self {
        Self { tls13_only: false, cipher_suites: None, http2: true }
    }
}

/// The TLS configuration: TLS 1.2 and 1.3 (or 1.3 only), h2 and http/1.1 (or http/1.1
/// only), client certificates requested for the authenticator (no hints: Go clients then
/// send their configured certificate whatever its issuer).
pub fn tls(cert: ServingCert, protocols: &Protocols) -> Result<Arc<ServerTls>> {
    let (identity, check_every) = match cert {
        ServingCert::Files { cert, key, check_every } => {
            (Identity::Pem { cert: PemSource::File(cert), key: PemSource::File(key) }, check_every)
        }
        ServingCert::Slot(slot) => (Identity::Slot(slot), Duration::ZERO),
    };
    let mut settings = TlsSettings::new(identity);
    settings.client_certs = ClientCerts::Request(ClientCertRequest::default());
    if protocols.tls13_only {
        settings.versions = vec![&rustls::version::TLS13];
    }
    settings.cipher_suites.clone_from(&protocols.cipher_suites);
    settings.http2 = protocols.http2;
    Ok(Arc::new(ServerTls::new(settings, check_every)?))
}

/// The connection settings the adapter's flags choose (`--shutdown-drain`, the request
/// size flags, `--header-read-timeout`, `--tls-handshake-timeout`, `--max-connections`,
/// `--max-connections-per-ip`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long open connections may finish at shutdown.
    pub drain: Duration,
    /// The most bytes of request head (hyper refuses larger ones with 431).
    pub max_head_bytes: usize,
    /// How long a client may take to send a request head after its handshake.
    pub header_read_timeout: Duration,
    /// How long a client may take from accept to the end of its handshake.
    pub handshake_timeout: Duration,
    /// Connections open at once; at the limit the one idle the longest is closed.
    pub max_connections: usize,
    /// Connections open at once from one address.
    pub max_connections_per_ip: usize,
}

/// The edge's connection settings for the adapter.
pub fn options(limits: Limits) -> https_edge::Options {
    https_edge::Options {
        drain: limits.drain,
        handshake_timeout: limits.handshake_timeout,
        header_read_timeout: limits.header_read_timeout,
        max_connections: limits.max_connections,
        max_connections_per_peer: limits.max_connections_per_ip,
        max_header_bytes: Some(limits.max_head_bytes),
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

    #[test]
    fn unreadable_files_are_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let cert = ServingCert::Files {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            check_every: Duration::from_secs(1),
        };
        let e = tls(cert, &Protocols::default()).unwrap_err().to_string();
        assert!(e.contains("cannot read") && e.contains("tls.crt"), "{e}");
    }
}
