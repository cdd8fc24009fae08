//! What a connection's client presented in the TLS handshake, handed to every request
//! on that connection as a request extension, so that the request handler decides.
//!
//! Deferred verification is per request but need not be repeated per request: a
//! connection's chain never changes, so [`PeerCertificates::memo`] keeps one outcome per
//! connection, recomputed only when the caller's trust configuration moves on (its
//! generation number changes).

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use rustls_pki_types::CertificateDer;

/// How far the handshake checked the presented chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeCheck {
    /// No certificate was presented (or the connection is not TLS).
    None,
    /// A certificate was presented and its private key proven; the chain is not
    /// verified: the handler must verify it (deferred verification).
    KeyProven,
    /// The chain was verified against the configured client CA (and SAN allow-list) in
    /// the handshake; a chain that failed ended the handshake.
    ChainVerified,
}

/// A memoized outcome and the generation it was computed under.
type Memo = (u64, Arc<dyn Any + Send + Sync>);

/// A connection's client certificates; cheap to clone (shared by its requests).
#[derive(Debug, Clone)]
pub struct PeerCertificates {
    chain: Arc<[CertificateDer<'static>]>,
    check: HandshakeCheck,
    memo: Arc<Mutex<Option<Memo>>>,
}

impl Default for PeerCertificates {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl PeerCertificates {
    /// A chain (leaf first) whose verification is left to the handler; empty when none
    /// was presented.
    pub fn new(chain: Vec<CertificateDer<'static>>) -> Self {
        let check = if chain.is_empty() { HandshakeCheck::None } else { HandshakeCheck::KeyProven };
        Self::checked(chain, check)
    }

    pub(crate) fn checked(chain: Vec<CertificateDer<'static>>, check: HandshakeCheck) -> Self {
        Self { chain: chain.into(), check, memo: Arc::default() }
    }

    /// The presented chain, leaf first; empty when none.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// Whether the client presented a certificate (that the handshake accepted).
    pub fn presented(&self) -> bool {
        !self.chain.is_empty()
    }

    /// What the handshake checked.
    pub fn handshake_check(&self) -> HandshakeCheck {
        self.check
    }

    /// The outcome of `verify` on this connection's chain under configuration
    /// `generation`: computed on the first request, then reused by the connection's later
    /// requests until the generation changes.
    pub fn memo<T: Send + Sync + 'static>(
        &self,
        generation: u64,
        verify: impl FnOnce(&[CertificateDer<'static>]) -> T,
    ) -> Arc<T> {
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((g, outcome)) = memo.as_ref()
            && *g == generation
            && let Ok(outcome) = outcome.clone().downcast::<T>()
        {
            return outcome;
        }
        let outcome = Arc::new(verify(&self.chain));
        *memo = Some((generation, outcome.clone()));
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_is_computed_once_per_generation() {
        let peer = PeerCertificates::new(vec![CertificateDer::from(vec![1, 2, 3])]);
        assert_eq!(peer.handshake_check(), HandshakeCheck::KeyProven);
        let mut runs = 0;
        let mut verify = |generation: u64| {
            *peer.memo(generation, |chain| {
                runs += 1;
                chain.len() + usize::try_from(generation).unwrap()
            })
        };
        assert_eq!((verify(0), verify(0), verify(1)), (1, 1, 2));
        assert_eq!(runs, 2, "recomputed only when the generation changed");
        let shared = peer.clone();
        assert_eq!(*shared.memo(1, |_| 99usize), 2, "clones share the connection's memo");
        assert!(!PeerCertificates::default().presented());
    }
}
