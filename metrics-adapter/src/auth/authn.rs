//! Authentication of one request, in the order Kubernetes' delegated authenticator uses:
//!
//! 1. **Front proxy.** A client certificate that chains to the request-header CA (and, if
//!    allowed names are set, has one of them as CN) makes the identity headers
//!    (`X-Remote-User`, `X-Remote-Uid`, `X-Remote-Group`, `X-Remote-Extra-*`, or the
//!    configured names) trusted. Identity headers on a request without such a certificate
//!    are refused outright: nobody else may assert an identity that way.
//! 2. **Client certificate** chaining to the client CA: user = CN, groups = O.
//! 3. **Bearer token** through a TokenReview, cached for a short time by SHA-256 of the token.
//!
//! Anything else is unauthenticated (401). Every authenticated user carries the group
//! `system:authenticated`, appended when missing, as Kubernetes' delegating authenticator
//! adds it (its `AuthenticatedGroupAdder`: not for `system:anonymous`, and not when the
//! user already has `system:authenticated` or `system:unauthenticated`), so RBAC bound to
//! that group authorizes here as it does on the API server.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use percent_encoding::percent_decode_str;
use rustls::pki_types::CertificateDer;

use super::config::{self, AuthnConfig};
use super::x509;
use super::{PeerCertificates, SYSTEM_ANONYMOUS, SYSTEM_AUTHENTICATED, SYSTEM_UNAUTHENTICATED, UserInfo};

/// Why a request is not authenticated. Every variant answers 401; the text is for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Identity headers arrived without a verified front-proxy certificate.
    #[error("identity headers without a verified front-proxy client certificate{0}")]
    UntrustedHeaders(String),
    /// No usable credential.
    #[error("no credentials")]
    NoCredentials,
    /// A client certificate was presented but is trusted by neither CA.
    #[error("client certificate rejected: {0}")]
    BadCertificate(String),
    /// The token is not valid.
    #[error("token rejected{0}")]
    TokenRejected(String),
    /// The token could not be reviewed.
    #[error("token review failed: {0}")]
    TokenReview(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// What a connection's certificate chain proves under one configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertOutcome {
    /// The chain is a valid front-proxy certificate (its CN).
    pub front_proxy: Option<String>,
    /// The user of a valid client-CA certificate.
    pub client_user: Option<UserInfo>,
    /// Why the chain proved nothing, if it was presented and failed.
    pub error: Option<String>,
}

/// Verifies a chain against the current configuration.
pub fn check_chain(cfg: &AuthnConfig, chain: &[CertificateDer<'static>]) -> CertOutcome {
    let mut out = CertOutcome::default();
    let Some(leaf) = chain.first() else { return out };
    let mut errors = Vec::new();
    if let Some(rh) = &cfg.request_header {
        match rh.ca.verify(chain).and_then(|()| x509::subject(leaf)) {
            Ok(subject) if rh.allowed_names.is_empty() || rh.allowed_names.contains(&subject.common_name) => {
                out.front_proxy = Some(subject.common_name);
            }
            Ok(subject) => errors.push(format!("front-proxy CN {:?} is not an allowed name", subject.common_name)),
            Err(e) => errors.push(format!("front-proxy CA: {e}")),
        }
    }
    if let Some(ca) = &cfg.client_ca {
        match ca.verify(chain).and_then(|()| x509::subject(leaf)) {
            Ok(subject) if !subject.common_name.is_empty() => {
                out.client_user =
                    Some(UserInfo { name: subject.common_name, groups: subject.organizations, ..UserInfo::default() });
            }
            Ok(_) => errors.push("client certificate has an empty CN".into()),
            Err(e) => errors.push(format!("client CA: {e}")),
        }
    }
    if out.front_proxy.is_none() && out.client_user.is_none() {
        out.error = Some(if errors.is_empty() { "no CA configured".into() } else { errors.join("; ") });
    }
    out
}

fn values<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = &'a str> {
    headers.get_all(name).into_iter().filter_map(|v| v.to_str().ok())
}

/// The identity asserted through front-proxy headers, if a user header is set.
pub fn user_from_headers(rh: &config::RequestHeader, headers: &HeaderMap) -> Option<UserInfo> {
    let name = rh.username_headers.iter().flat_map(|h| values(headers, h)).find(|v| !v.trim().is_empty())?;
    let uid = rh.uid_headers.iter().flat_map(|h| values(headers, h)).find(|v| !v.is_empty()).unwrap_or_default();
    let groups = rh.group_headers.iter().flat_map(|h| values(headers, h)).map(str::to_owned).collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (header, value) in headers {
        let lower = header.as_str();
        for prefix in &rh.extra_prefixes {
            let prefix = prefix.to_ascii_lowercase();
            if let Some(rest) = lower.strip_prefix(prefix.as_str())
                && !rest.is_empty()
                && let Ok(value) = value.to_str()
            {
                let key = percent_decode_str(rest).decode_utf8().map_or_else(|_| rest.to_owned(), |k| k.into_owned());
                extra.entry(key).or_default().push(value.to_owned());
            }
        }
    }
    Some(UserInfo { name: name.to_owned(), uid: uid.to_owned(), groups, extra })
}

/// Whether any identity header (configured, or the defaults when none is configured) is set.
fn has_identity_headers(cfg: &AuthnConfig, headers: &HeaderMap) -> Option<String> {
    let (exact, prefixes) = match &cfg.request_header {
        Some(rh) => {
            let exact: Vec<String> =
                [&rh.username_headers, &rh.uid_headers, &rh.group_headers].into_iter().flatten().cloned().collect();
            (exact, rh.extra_prefixes.clone())
        }
        None => {
            let exact =
                [config::default_username_headers(), config::default_uid_headers(), config::default_group_headers()]
                    .concat();
            (exact, config::default_extra_prefixes())
        }
    };
    if let Some(h) = exact.iter().find(|h| headers.contains_key(h.as_str())) {
        return Some(h.clone());
    }
    headers.keys().find_map(|k| {
        prefixes.iter().any(|p| k.as_str().starts_with(&p.to_ascii_lowercase())).then(|| k.as_str().to_owned())
    })
}

/// The bearer token of an `Authorization` header.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Adds `system:authenticated` to an authenticated user's groups, as Kubernetes'
/// `AuthenticatedGroupAdder` does: appended last, except for `system:anonymous` and for a
/// user that already has `system:authenticated` or `system:unauthenticated`.
pub fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    let marked = user.groups.iter().any(|g| g == SYSTEM_AUTHENTICATED || g == SYSTEM_UNAUTHENTICATED);
    if user.name != SYSTEM_ANONYMOUS && !marked {
        user.groups.push(SYSTEM_AUTHENTICATED.to_owned());
    }
    user
}

/// Reviews bearer tokens through the Kubernetes API, with a cache.
pub struct TokenReviewer {
    client: kube::Client,
    ttl: Duration,
    timeout: Duration,
    cache: Mutex<HashMap<[u8; 32], CachedReview>>,
}

impl std::fmt::Debug for TokenReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewer").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

const CACHE_LIMIT: usize = 4096;

/// When a review was answered, and the answer (the user, or why the token was refused).
type CachedReview = (Instant, std::result::Result<UserInfo, String>);

impl TokenReviewer {
    /// A reviewer caching answers (positive and negative) for `ttl`.
    pub fn new(client: kube::Client, ttl: Duration, timeout: Duration) -> Self {
        Self { client, ttl, timeout, cache: Mutex::default() }
    }

    fn cached(&self, key: &[u8; 32]) -> Option<std::result::Result<UserInfo, String>> {
        let cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.get(key).filter(|(at, _)| at.elapsed() < self.ttl).map(|(_, r)| r.clone())
    }

    fn remember(&self, key: [u8; 32], result: std::result::Result<UserInfo, String>) {
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= CACHE_LIMIT {
            cache.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), result));
    }

    /// Reviews a token.
    pub async fn review(&self, token: &str) -> Result<UserInfo> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        if let Some(r) = self.cached(&key) {
            return r.map_err(Error::TokenRejected);
        }
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_owned(), audiences: None },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(self.timeout, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| Error::TokenReview(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| Error::TokenReview(e.to_string()))?;
        let status = answer.status.unwrap_or_default();
        let result = match (status.authenticated, status.user) {
            (Some(true), Some(user)) if user.username.as_deref().is_some_and(|u| !u.is_empty()) => Ok(UserInfo {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }),
            _ => Err(status.error.map(|e| format!(": {e}")).unwrap_or_default()),
        };
        self.remember(key, result.clone());
        result.map_err(Error::TokenRejected)
    }
}

/// The authenticator: current settings plus an optional token reviewer.
#[derive(Debug)]
pub struct Authenticator {
    config: ArcSwap<(u64, AuthnConfig)>,
    tokens: Option<TokenReviewer>,
}

impl Authenticator {
    /// An authenticator with initial settings.
    pub fn new(config: AuthnConfig, tokens: Option<TokenReviewer>) -> Self {
        Self { config: ArcSwap::from_pointee((0, config)), tokens }
    }

    /// Replaces the settings (connections re-verify their certificates).
    pub fn set_config(&self, config: AuthnConfig) {
        let generation = self.config.load().0 + 1;
        self.config.store(Arc::new((generation, config)));
    }

    /// The settings in force.
    pub fn config(&self) -> AuthnConfig {
        self.config.load().1.clone()
    }

    /// Authenticates a request from its headers and its connection's certificates.
    pub async fn authenticate(&self, headers: &HeaderMap, certs: Option<&PeerCertificates>) -> Result<UserInfo> {
        self.identify(headers, certs).await.map(with_authenticated_group)
    }

    async fn identify(&self, headers: &HeaderMap, certs: Option<&PeerCertificates>) -> Result<UserInfo> {
        let current = self.config.load_full();
        let (generation, cfg) = (&current.0, &current.1);
        let outcome = match certs {
            Some(c) if !c.chain().is_empty() => Some(c.memo(*generation, |chain| check_chain(cfg, chain))),
            _ => None,
        };
        if let (Some(o), Some(rh)) = (&outcome, &cfg.request_header)
            && o.front_proxy.is_some()
            && let Some(user) = user_from_headers(rh, headers)
        {
            return Ok(user);
        }
        let front_proxy_verified = outcome.as_ref().is_some_and(|o| o.front_proxy.is_some());
        if !front_proxy_verified && let Some(header) = has_identity_headers(cfg, headers) {
            let why = outcome.as_ref().and_then(|o| o.error.clone()).map(|e| format!(" ({e})")).unwrap_or_default();
            return Err(Error::UntrustedHeaders(format!(": {header}{why}")));
        }
        if let Some(user) = outcome.as_ref().and_then(|o| o.client_user.clone()) {
            return Ok(user);
        }
        if let Some(token) = bearer_token(headers) {
            return match &self.tokens {
                Some(t) => t.review(token).await,
                None => Err(Error::TokenReview("no Kubernetes API to review tokens (standalone mode)".into())),
            };
        }
        match outcome.and_then(|o| o.error.clone()) {
            Some(e) => Err(Error::BadCertificate(e)),
            None => Err(Error::NoCredentials),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::x509::CaBundle;
    use crate::certs::Ca;
    use http::HeaderValue;
    use rustls::pki_types::pem::PemObject;

    struct Pki {
        front: Ca,
        client: Ca,
        cfg: AuthnConfig,
    }

    fn pki(allowed: &[&str]) -> Pki {
        let front = Ca::new("front-proxy-ca").unwrap();
        let client = Ca::new("kubernetes").unwrap();
        let cfg = AuthnConfig {
            client_ca: Some(CaBundle::from_pem(client.cert_pem(), "client").unwrap()),
            request_header: Some(config::RequestHeader {
                ca: CaBundle::from_pem(front.cert_pem(), "front").unwrap(),
                allowed_names: allowed.iter().map(|s| (*s).to_owned()).collect(),
                username_headers: config::default_username_headers(),
                uid_headers: config::default_uid_headers(),
                group_headers: config::default_group_headers(),
                extra_prefixes: config::default_extra_prefixes(),
            }),
        };
        Pki { front, client, cfg }
    }

    fn certs(ca: &Ca, cn: &str, orgs: &[&str]) -> PeerCertificates {
        let pair = ca.client(cn, orgs).unwrap();
        PeerCertificates::new(vec![CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap()])
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn hpa_headers() -> HeaderMap {
        headers(&[
            ("x-remote-user", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
            ("x-remote-group", "system:serviceaccounts"),
            ("x-remote-group", "system:serviceaccounts:kube-system"),
            ("x-remote-group", "system:authenticated"),
            ("x-remote-extra-authentication.kubernetes.io%2fcredential-id", "JTI=abc"),
            ("x-remote-extra-authentication.kubernetes.io%2fpod-name", "kube-controller-manager-0"),
        ])
    }

    #[tokio::test]
    async fn front_proxy_certificate_makes_headers_trusted() {
        let p = pki(&["front-proxy-client"]);
        let auth = Authenticator::new(p.cfg.clone(), None);
        let user = auth.authenticate(&hpa_headers(), Some(&certs(&p.front, "front-proxy-client", &[]))).await.unwrap();
        assert_eq!(user.name, "system:serviceaccount:kube-system:horizontal-pod-autoscaler");
        assert_eq!(
            user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
        );
        assert_eq!(user.extra["authentication.kubernetes.io/credential-id"], ["JTI=abc"]);
        assert_eq!(user.extra["authentication.kubernetes.io/pod-name"], ["kube-controller-manager-0"]);
    }

    #[tokio::test]
    async fn identity_headers_without_front_proxy_certificate_are_refused() {
        let p = pki(&["front-proxy-client"]);
        let auth = Authenticator::new(p.cfg.clone(), None);
        // no certificate at all
        let e = auth.authenticate(&hpa_headers(), None).await.unwrap_err();
        assert!(matches!(e, Error::UntrustedHeaders(_)), "{e}");
        // a valid client-CA certificate does not make headers trusted
        let e = auth.authenticate(&hpa_headers(), Some(&certs(&p.client, "jane", &[]))).await.unwrap_err();
        assert!(matches!(e, Error::UntrustedHeaders(_)), "{e}");
        // front-proxy CA but a name that is not allowed
        let e = auth.authenticate(&hpa_headers(), Some(&certs(&p.front, "intruder", &[]))).await.unwrap_err();
        assert!(e.to_string().contains("not an allowed name"), "{e}");
        // a group header alone is an identity header too
        let e = auth.authenticate(&headers(&[("x-remote-group", "system:masters")]), None).await.unwrap_err();
        assert!(matches!(e, Error::UntrustedHeaders(_)), "{e}");
        // even with no request-header configuration the default names are refused
        let auth = Authenticator::new(AuthnConfig::default(), None);
        let e = auth.authenticate(&headers(&[("x-remote-user", "admin")]), None).await.unwrap_err();
        assert!(matches!(e, Error::UntrustedHeaders(_)), "{e}");
    }

    #[test]
    fn authenticated_group_is_added_as_kubernetes_adds_it() {
        let user = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..UserInfo::default()
        };
        let groups = |u: UserInfo| with_authenticated_group(u).groups;
        assert_eq!(groups(user("jane", &[])), ["system:authenticated"]);
        assert_eq!(groups(user("jane", &["dev"])), ["dev", "system:authenticated"]);
        // already there, wherever it is: not repeated, order kept
        assert_eq!(groups(user("jane", &["system:authenticated", "dev"])), ["system:authenticated", "dev"]);
        // the anonymous user and an unauthenticated identity are left as they are
        assert!(groups(user("system:anonymous", &[])).is_empty());
        assert_eq!(groups(user("x", &["system:unauthenticated"])), ["system:unauthenticated"]);
    }

    #[tokio::test]
    async fn front_proxy_users_without_the_group_get_it() {
        let p = pki(&["front-proxy-client"]);
        let auth = Authenticator::new(p.cfg.clone(), None);
        let h = headers(&[("x-remote-user", "alice"), ("x-remote-group", "team-a")]);
        let user = auth.authenticate(&h, Some(&certs(&p.front, "front-proxy-client", &[]))).await.unwrap();
        assert_eq!(user.groups, ["team-a", "system:authenticated"]);
    }

    #[tokio::test]
    async fn empty_allowed_names_accept_any_front_proxy_cn() {
        let p = pki(&[]);
        let auth = Authenticator::new(p.cfg.clone(), None);
        let user = auth.authenticate(&hpa_headers(), Some(&certs(&p.front, "anything", &[]))).await.unwrap();
        assert_eq!(user.name, "system:serviceaccount:kube-system:horizontal-pod-autoscaler");
    }

    #[tokio::test]
    async fn client_certificates_map_cn_and_o() {
        let p = pki(&["front-proxy-client"]);
        let auth = Authenticator::new(p.cfg.clone(), None);
        let user =
            auth.authenticate(&HeaderMap::new(), Some(&certs(&p.client, "jane", &["system:masters", "dev"]))).await;
        let user = user.unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.groups, ["system:masters", "dev", "system:authenticated"]);
        // a certificate from an unknown CA is rejected with the reason
        let stranger = Ca::new("stranger").unwrap();
        let e = auth.authenticate(&HeaderMap::new(), Some(&certs(&stranger, "jane", &[]))).await.unwrap_err();
        assert!(matches!(e, Error::BadCertificate(_)), "{e}");
        // a front-proxy cert without user headers authenticates nobody
        let e = auth.authenticate(&HeaderMap::new(), Some(&certs(&p.front, "front-proxy-client", &[]))).await;
        assert!(e.is_err());
        assert_eq!(auth.authenticate(&HeaderMap::new(), None).await.unwrap_err(), Error::NoCredentials);
    }

    #[tokio::test]
    async fn config_changes_take_effect_on_open_connections() {
        let p = pki(&["front-proxy-client"]);
        let auth = Authenticator::new(AuthnConfig::default(), None);
        let c = certs(&p.client, "jane", &[]);
        assert!(auth.authenticate(&HeaderMap::new(), Some(&c)).await.is_err());
        auth.set_config(p.cfg.clone());
        assert_eq!(auth.authenticate(&HeaderMap::new(), Some(&c)).await.unwrap().name, "jane");
        auth.set_config(AuthnConfig::default());
        assert!(auth.authenticate(&HeaderMap::new(), Some(&c)).await.is_err());
    }

    #[tokio::test]
    async fn tokens_without_a_reviewer_are_refused() {
        let auth = Authenticator::new(AuthnConfig::default(), None);
        let e = auth.authenticate(&headers(&[("authorization", "Bearer abc")]), None).await.unwrap_err();
        assert!(matches!(e, Error::TokenReview(_)));
    }

    #[test]
    fn bearer_token_parsing() {
        assert_eq!(bearer_token(&headers(&[("authorization", "Bearer abc.def")])), Some("abc.def"));
        assert_eq!(bearer_token(&headers(&[("authorization", "bearer   tok ")])), Some("tok"));
        assert_eq!(bearer_token(&headers(&[("authorization", "Basic dXNlcg==")])), None);
        assert_eq!(bearer_token(&headers(&[("authorization", "Bearer ")])), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
