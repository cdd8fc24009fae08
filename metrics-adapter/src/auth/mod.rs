//! Authentication and authorization, the way an aggregated API server does them.
//!
//! * [`config`]: who is trusted: the client CA, and the request-header (front-proxy) CA with
//!   its allowed names and header names, from the `kube-system/extension-apiserver-authentication`
//!   ConfigMap and/or files, reloaded while running.
//! * [`authn`]: who is asking: front-proxy headers (only behind a verified front-proxy
//!   certificate), client certificates, bearer tokens through TokenReview (cached).
//! * [`authz`]: may they: SubjectAccessReview with short allow/deny caches; `system:masters`
//!   always may.
//! * [`x509`]: chain verification and certificate subjects.

pub mod authn;
pub mod authz;
pub mod config;
pub mod x509;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rustls::pki_types::CertificateDer;
use serde::Serialize;

/// An authenticated user, as Kubernetes' `user.Info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// UID, if known.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (lower-case keys).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The group that bypasses authorization, as in Kubernetes.
pub const SYSTEM_MASTERS: &str = "system:masters";

/// A verification outcome and the configuration generation it was computed under.
type Memo = (u64, Arc<authn::CertOutcome>);

/// What a connection's client presented during the TLS handshake, shared by the requests
/// on that connection, with a per-connection memo of the verification outcome.
#[derive(Debug, Clone, Default)]
pub struct PeerCertificates {
    chain: Arc<[CertificateDer<'static>]>,
    memo: Arc<Mutex<Option<Memo>>>,
}

impl PeerCertificates {
    /// The chain a client presented (leaf first); empty when none.
    pub fn new(chain: Vec<CertificateDer<'static>>) -> Self {
        Self { chain: chain.into(), memo: Arc::default() }
    }

    /// The presented chain.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// The outcome for config generation `generation`, computed once per connection.
    pub(crate) fn outcome(
        &self,
        generation: u64,
        compute: impl FnOnce(&[CertificateDer<'static>]) -> authn::CertOutcome,
    ) -> Arc<authn::CertOutcome> {
        let mut memo = self.memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((g, o)) = memo.as_ref()
            && *g == generation
        {
            return o.clone();
        }
        let o = Arc::new(compute(&self.chain));
        *memo = Some((generation, o.clone()));
        o
    }
}
