//! What a TLS server is configured with, and building the rustls `ServerConfig` from
//! it (ring provider only, given explicitly: nothing here installs or reads a
//! process-wide default provider).
//!
//! The settings are protocol-level and name no configuration format: each binary maps
//! its own flags or file onto them (the exporter its exporter-toolkit web config, the
//! adapter its Kubernetes-style flags) and maps errors back to its own setting names
//! through [`TlsError`]'s material.

use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::CertificateDer;

use crate::ca::ClientCa;
use crate::client_auth::{ClientCertRequest, ClientCerts, RequestedClientCert};
use crate::pem::{self, Material, PemError, PemSource};
use crate::slot::CertSlot;

/// Why a TLS configuration cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate, key or client CA material is unreadable or unusable.
    #[error(transparent)]
    Pem(#[from] PemError),
    /// Chain verification in the handshake was asked for without a client CA.
    #[error("a client CA is required to verify client certificates")]
    MissingClientCa,
    /// None of the cipher suites works with any of the protocol versions.
    #[error("none of the cipher suites can be used with {0}")]
    NoUsableSuite(String),
    /// rustls refused the combination of settings.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, TlsError>;

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A certificate chain and key as PEM; files are re-read when they change.
    Pem {
        /// The certificate chain, leaf first.
        cert: PemSource,
        /// The private key.
        key: PemSource,
    },
    /// A slot its owner replaces while serving.
    Slot(Arc<CertSlot>),
}

/// A TLS server's settings.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The serving certificate.
    pub identity: Identity,
    /// Client certificates: asked for or not, and what the handshake checks.
    pub client_certs: ClientCerts,
    /// Protocol versions offered.
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// Cipher suites, in preference order; `None`: the ring provider's defaults.
    pub cipher_suites: Option<Vec<SupportedCipherSuite>>,
    /// Key-exchange groups, in preference order; `None`: the ring provider's defaults.
    pub kx_groups: Option<Vec<&'static dyn SupportedKxGroup>>,
    /// Choose the cipher suite by the server's order rather than the client's.
    pub ignore_client_order: bool,
    /// Offer HTTP/2 through ALPN (`h2`, then `http/1.1`); off: `http/1.1` only.
    pub http2: bool,
}

impl TlsSettings {
    /// Serves `identity` with TLS 1.2 and 1.3, the ring defaults, no client
    /// certificates, HTTP/2 and HTTP/1.1.
    pub fn new(identity: Identity) -> Self {
        TlsSettings {
            identity,
            client_certs: ClientCerts::Off,
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            cipher_suites: None,
            kx_groups: None,
            ignore_client_order: false,
            http2: true,
        }
    }

    fn provider(&self) -> CryptoProvider {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(suites) = &self.cipher_suites {
            provider.cipher_suites.clone_from(suites);
        }
        if let Some(groups) = &self.kx_groups {
            provider.kx_groups.clone_from(groups);
        }
        provider
    }

    /// Checks what can be checked without reading files: some suite fits some version.
    pub fn check(&self) -> Result<()> {
        let provider = self.provider();
        let usable =
            provider.cipher_suites.iter().any(|s| self.versions.iter().any(|v| v.version == s.version().version));
        if usable {
            return Ok(());
        }
        let versions: Vec<String> = self.versions.iter().map(|v| format!("{:?}", v.version)).collect();
        Err(TlsError::NoUsableSuite(versions.join(" or ")))
    }

    /// The files behind the settings (checked for changes by [`crate::ServerTls`]).
    pub(crate) fn files(&self) -> Vec<&std::path::Path> {
        let identity = match &self.identity {
            Identity::Pem { cert, key } => vec![cert, key],
            Identity::Slot(_) => Vec::new(),
        };
        let ca = match &self.client_certs {
            ClientCerts::Request(ClientCertRequest { ca: Some(ca), .. }) => Some(ca),
            _ => None,
        };
        identity.into_iter().chain(ca).filter_map(PemSource::path).collect()
    }

    /// Reads the files and builds the rustls configuration.
    pub(crate) fn build(&self) -> Result<Built> {
        self.check()?;
        let (resolver, key): (Arc<dyn ResolvesServerCert>, _) = match &self.identity {
            Identity::Pem { cert, key } => {
                let key = Arc::new(pem::key_pair_from(cert, key)?);
                (Arc::new(SingleCertAndKey::from(key.clone())), Some(key))
            }
            Identity::Slot(slot) => (slot.clone(), None),
        };
        let verifier = self.client_verifier()?;
        let mut config = ServerConfig::builder_with_provider(Arc::new(self.provider()))
            .with_protocol_versions(&self.versions)
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(resolver);
        config.ignore_client_order = self.ignore_client_order;
        config.alpn_protocols =
            if self.http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
        Ok(Built { config: Arc::new(config), key })
    }

    /// Whether a handshake verifies a presented chain against the client CA (building
    /// refuses chain verification without a CA).
    pub(crate) fn verifies_chain(&self) -> bool {
        matches!(&self.client_certs, ClientCerts::Request(request) if request.verify_chain)
    }

    fn client_verifier(&self) -> Result<Arc<dyn ClientCertVerifier>> {
        let ClientCerts::Request(request) = &self.client_certs else {
            return Ok(WebPkiClientVerifier::no_client_auth());
        };
        let ca = request.ca.as_ref().map(load_client_ca).transpose()?;
        if request.verify_chain && ca.is_none() {
            return Err(TlsError::MissingClientCa);
        }
        Ok(Arc::new(RequestedClientCert::new(request, ca.as_ref())))
    }
}

fn load_client_ca(source: &PemSource) -> Result<ClientCa> {
    let bytes = source.read(Material::ClientCa)?;
    let invalid = |reason: String| PemError::Invalid { material: Material::ClientCa, reason };
    let text = String::from_utf8(bytes).map_err(|_| invalid(format!("{}: not PEM text", source.describe())))?;
    Ok(ClientCa::from_pem(&text, &source.describe()).map_err(|e| invalid(e.to_string()))?)
}

/// A built configuration and what the reloader keeps beside it.
pub(crate) struct Built {
    pub(crate) config: Arc<ServerConfig>,
    /// The key pair read from PEM (not for a slot, which keeps its own).
    pub(crate) key: Option<Arc<CertifiedKey>>,
}

impl Built {
    pub(crate) fn chain(&self, identity: &Identity) -> Vec<CertificateDer<'static>> {
        match (&self.key, identity) {
            (Some(key), _) => key.cert.clone(),
            (None, Identity::Slot(slot)) => slot.chain(),
            (None, Identity::Pem { .. }) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_that_fit_no_version_are_refused_before_any_file_is_read() {
        let mut settings = TlsSettings::new(Identity::Pem {
            cert: PemSource::Inline(String::new()),
            key: PemSource::Inline(String::new()),
        });
        settings.versions = vec![&rustls::version::TLS12];
        settings.cipher_suites = Some(vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256]);
        assert_eq!(settings.check().unwrap_err().to_string(), "none of the cipher suites can be used with TLSv1_2");
        settings.versions.push(&rustls::version::TLS13);
        assert!(settings.check().is_ok());
        let err = settings.build().err().unwrap();
        assert!(matches!(&err, TlsError::Pem(e) if e.material() == Material::Cert), "{err}");
        assert_eq!(err.to_string(), "the inline value: no PEM certificate found");
    }

    #[test]
    fn verifying_chains_without_a_client_ca_is_refused() {
        let slot = {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["x".to_owned()]).unwrap().self_signed(&key).unwrap();
            CertSlot::new(pem::key_pair(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), "c", "k").unwrap())
        };
        let mut settings = TlsSettings::new(Identity::Slot(slot));
        settings.client_certs =
            ClientCerts::Request(ClientCertRequest { ca: None, verify_chain: true, allowed_sans: None });
        assert!(matches!(settings.build(), Err(TlsError::MissingClientCa)));
        settings.client_certs = ClientCerts::Request(ClientCertRequest::default());
        let built = settings.build().unwrap_or_else(|e| panic!("{e}"));
        assert!(!settings.verifies_chain());
        assert_eq!(built.chain(&settings.identity).len(), 1, "a slot's chain is the slot's");
    }
}
