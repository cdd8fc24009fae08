//! A TLS client configuration for tests (rustls, ring provider): the CAs it trusts, the
//! client certificate it presents, ALPN, protocol versions and cipher suites.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::pki::{Ca, Pair};

/// How the test client sets up TLS.
pub struct ClientTls {
    pub trust: Vec<String>,
    pub identity: Option<Pair>,
    pub alpn: Vec<Vec<u8>>,
    pub versions: Vec<&'static rustls::SupportedProtocolVersion>,
    /// `None`: every suite of the ring provider.
    pub cipher_suites: Option<Vec<rustls::SupportedCipherSuite>>,
}

impl ClientTls {
    /// Trusts `ca`, offers h2 and http/1.1, TLS 1.2 and 1.3, no client certificate.
    pub fn trusting(ca: &Ca) -> ClientTls {
        ClientTls::trusting_pem(&ca.cert_pem)
    }

    /// Trusts the CA certificate(s) in `pem`, with the defaults of [`ClientTls::trusting`].
    pub fn trusting_pem(pem: &str) -> ClientTls {
        ClientTls {
            trust: vec![pem.to_owned()],
            identity: None,
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            cipher_suites: None,
        }
    }

    pub fn with_identity(mut self, pair: &Pair) -> ClientTls {
        self.identity = Some(pair.clone());
        self
    }

    pub fn config(&self) -> Arc<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for pem in &self.trust {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
        }
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(suites) = &self.cipher_suites {
            provider.cipher_suites.clone_from(suites);
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&self.versions)
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some(pair) => builder
                .with_client_auth_cert(
                    vec![pair.cert_der()],
                    PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols.clone_from(&self.alpn);
        Arc::new(config)
    }
}
