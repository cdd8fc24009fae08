//! Authentication and authorization, the way an aggregated API server does them.
//!
//! * [`config`]: who is trusted: the client CA, and the request-header (front-proxy) CA with
//!   its allowed names and header names, from the `kube-system/extension-apiserver-authentication`
//!   ConfigMap and/or files, reloaded while running.
//! * [`authn`]: who is asking: front-proxy headers (only behind a verified front-proxy
//!   certificate), client certificates, bearer tokens through TokenReview (cached).
//! * [`authz`]: may they: SubjectAccessReview with short allow/deny caches; `system:masters`
//!   always may.
//! * [`x509`]: chain verification and certificate subjects (the shared edge's).

pub mod authn;
pub mod authz;
pub mod config;
pub mod x509;

use std::collections::BTreeMap;

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

/// The group every authenticated user is in, as in Kubernetes.
pub const SYSTEM_AUTHENTICATED: &str = "system:authenticated";

/// The group of unauthenticated requests (never added here: there is no anonymous user).
pub const SYSTEM_UNAUTHENTICATED: &str = "system:unauthenticated";

/// The anonymous user's name.
pub const SYSTEM_ANONYMOUS: &str = "system:anonymous";

/// What a connection's client presented in the TLS handshake, shared by the requests on
/// that connection; [`authn`] verifies it per request and keeps the outcome per
/// connection and configuration generation ([`PeerCertificates::memo`]).
pub use https_edge::PeerCertificates;
