//! A serving certificate that its owner replaces while serving (a certificate the
//! process issues or fetches itself, rather than files on disk): each new handshake
//! takes whatever the slot holds at that moment.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::CertificateDer;

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
