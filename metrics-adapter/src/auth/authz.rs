//! Authorization through SubjectAccessReview, with short allow and deny caches.
//!
//! Members of `system:masters` are allowed without asking, as in Kubernetes. Request
//! attributes follow the Kubernetes request-info rules: for
//! `/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/gpu_utilization` the review asks
//! for verb `get` on resource `pods`, subresource `gpu_utilization`, name `*`, namespace `ns`
//! in the `custom.metrics.k8s.io` group; discovery and OpenAPI paths are non-resource paths.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde::Serialize;

use super::{SYSTEM_MASTERS, UserInfo};

/// What is being asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Attributes {
    /// A resource request.
    Resource {
        /// `get`
        verb: String,
        /// Namespace, for namespaced requests.
        namespace: Option<String>,
        /// API group.
        group: String,
        /// API version.
        version: String,
        /// Resource (`pods`, `metrics`, `nodes`).
        resource: String,
        /// Subresource (the metric name for object metrics).
        subresource: Option<String>,
        /// Object name (`*` for all).
        name: Option<String>,
    },
    /// A non-resource request.
    NonResource {
        /// `get`
        verb: String,
        /// Path.
        path: String,
    },
}

impl Attributes {
    /// Go's `forbiddenMessage` text.
    pub fn forbidden_message(&self, user: &str) -> String {
        match self {
            Attributes::NonResource { verb, path } => format!("User {user:?} cannot {verb} path {path:?}"),
            Attributes::Resource { verb, namespace, group, resource, subresource, .. } => {
                let resource = match subresource {
                    Some(s) => format!("{resource}/{s}"),
                    None => resource.clone(),
                };
                match namespace {
                    Some(ns) => format!(
                        "User {user:?} cannot {verb} resource {resource:?} in API group {group:?} in the namespace {ns:?}"
                    ),
                    None => {
                        format!(
                            "User {user:?} cannot {verb} resource {resource:?} in API group {group:?} at the cluster scope"
                        )
                    }
                }
            }
        }
    }
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Not allowed; the reviewer's reason, if any.
    Deny(String),
}

/// Why no decision could be made (answers 500).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("authorization check failed: {0}")]
pub struct Error(pub String);

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

const CACHE_LIMIT: usize = 10_000;

/// The authorizer.
pub struct Authorizer {
    client: Option<kube::Client>,
    allow_ttl: Duration,
    deny_ttl: Duration,
    timeout: Duration,
    cache: Mutex<HashMap<String, (Instant, Decision)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("subject_access_review", &self.client.is_some())
            .field("allow_ttl", &self.allow_ttl)
            .field("deny_ttl", &self.deny_ttl)
            .finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer. Without a client only `system:masters` is allowed.
    pub fn new(client: Option<kube::Client>, allow_ttl: Duration, deny_ttl: Duration, timeout: Duration) -> Self {
        Self { client, allow_ttl, deny_ttl, timeout, cache: Mutex::default() }
    }

    fn cached(&self, key: &str) -> Option<Decision> {
        let cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, d) = cache.get(key)?;
        let ttl = if *d == Decision::Allow { self.allow_ttl } else { self.deny_ttl };
        (at.elapsed() < ttl).then(|| d.clone())
    }

    fn remember(&self, key: String, d: Decision) {
        let ttl = if d == Decision::Allow { self.allow_ttl } else { self.deny_ttl };
        if ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= CACHE_LIMIT {
            let longest = self.allow_ttl.max(self.deny_ttl);
            cache.retain(|_, (at, _)| at.elapsed() < longest);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), d));
    }

    /// Decides whether `user` may do `attrs`.
    pub async fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Result<Decision> {
        if user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Ok(Decision::Allow);
        }
        let Some(client) = &self.client else {
            return Ok(Decision::Deny(
                "no SubjectAccessReview in standalone mode; only system:masters is allowed".into(),
            ));
        };
        let key = serde_json::to_string(&(user, attrs)).map_err(|e| Error(e.to_string()))?;
        if let Some(d) = self.cached(&key) {
            return Ok(d);
        }
        let review = SubjectAccessReview { spec: spec(user, attrs), ..SubjectAccessReview::default() };
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        let answer = tokio::time::timeout(self.timeout, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| Error(format!("SubjectAccessReview: no answer within {:?}", self.timeout)))?
            .map_err(|e| Error(format!("SubjectAccessReview: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let d = if status.allowed && status.denied != Some(true) {
            Decision::Allow
        } else {
            Decision::Deny(status.reason.unwrap_or_default())
        };
        self.remember(key, d.clone());
        Ok(d)
    }
}

/// The SubjectAccessReview spec for a user and request.
pub fn spec(user: &UserInfo, attrs: &Attributes) -> SubjectAccessReviewSpec {
    let (resource_attributes, non_resource_attributes) = match attrs.clone() {
        Attributes::Resource { verb, namespace, group, version, resource, subresource, name } => (
            Some(ResourceAttributes {
                verb: Some(verb),
                namespace,
                group: Some(group),
                version: Some(version),
                resource: Some(resource),
                subresource,
                name,
                ..ResourceAttributes::default()
            }),
            None,
        ),
        Attributes::NonResource { verb, path } => {
            (None, Some(NonResourceAttributes { verb: Some(verb), path: Some(path) }))
        }
    };
    SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
        groups: Some(user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect::<BTreeMap<_, _>>()),
        resource_attributes,
        non_resource_attributes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods_attrs() -> Attributes {
        Attributes::Resource {
            verb: "get".into(),
            namespace: Some("ai-inference".into()),
            group: "custom.metrics.k8s.io".into(),
            version: "v1beta2".into(),
            resource: "pods".into(),
            subresource: Some("gpu_utilization".into()),
            name: Some("*".into()),
        }
    }

    #[test]
    fn forbidden_messages_match_go() {
        assert_eq!(
            pods_attrs().forbidden_message("bob"),
            r#"User "bob" cannot get resource "pods/gpu_utilization" in API group "custom.metrics.k8s.io" in the namespace "ai-inference""#
        );
        let nodes = Attributes::Resource {
            verb: "get".into(),
            namespace: None,
            group: "custom.metrics.k8s.io".into(),
            version: "v1beta2".into(),
            resource: "nodes".into(),
            subresource: Some("gpu_utilization".into()),
            name: Some("n1".into()),
        };
        assert!(nodes.forbidden_message("bob").ends_with("at the cluster scope"));
        let path = Attributes::NonResource { verb: "get".into(), path: "/apis".into() };
        assert_eq!(path.forbidden_message("bob"), r#"User "bob" cannot get path "/apis""#);
    }

    #[test]
    fn spec_carries_user_and_attributes() {
        let user = UserInfo {
            name: "system:serviceaccount:kube-system:horizontal-pod-autoscaler".into(),
            uid: "u-1".into(),
            groups: vec!["system:serviceaccounts".into()],
            extra: [("authentication.kubernetes.io/pod-name".to_owned(), vec!["x".to_owned()])].into(),
        };
        let json = serde_json::to_value(spec(&user, &pods_attrs())).unwrap();
        assert_eq!(json["user"], user.name);
        assert_eq!(json["uid"], "u-1");
        assert_eq!(json["extra"]["authentication.kubernetes.io/pod-name"][0], "x");
        let ra = &json["resourceAttributes"];
        assert_eq!(
            (ra["verb"].as_str(), ra["resource"].as_str(), ra["subresource"].as_str(), ra["name"].as_str()),
            (Some("get"), Some("pods"), Some("gpu_utilization"), Some("*"))
        );
        assert_eq!(ra["namespace"], "ai-inference");
        assert_eq!(ra["group"], "custom.metrics.k8s.io");
        assert!(json.get("nonResourceAttributes").is_none());
    }

    #[tokio::test]
    async fn masters_are_allowed_and_others_denied_without_a_reviewer() {
        let a = Authorizer::new(None, Duration::from_secs(10), Duration::from_secs(10), Duration::from_secs(1));
        let admin = UserInfo { name: "admin".into(), groups: vec![SYSTEM_MASTERS.into()], ..UserInfo::default() };
        assert_eq!(a.authorize(&admin, &pods_attrs()).await.unwrap(), Decision::Allow);
        let bob = UserInfo { name: "bob".into(), ..UserInfo::default() };
        assert!(matches!(a.authorize(&bob, &pods_attrs()).await.unwrap(), Decision::Deny(_)));
    }
}
