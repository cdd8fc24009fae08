//! A resource as the metrics API names it (`services`, `namespaces`, `deployments.apps`,
//! `jobs.batch`) resolved to what listing it needs: group, version, plural and scope.
//!
//! The answer comes from API discovery of the resource's group (kube's
//! `discovery::group`: `/api` and `/api/v1` for the core group, `/apis` and the group's
//! versions otherwise), the preferred version first and else the most stable version that
//! serves it, as the RESTMapper prometheus-adapter lists through resolves a group-resource
//! (custom-metrics-apiserver v1.30.0, `pkg/provider/helpers/helpers.go`, `ResourceFor`).
//!
//! What discovery lists of a group is kept for the life of the process (a resource's
//! version changes only with an upgrade), and read again when a resource asked for is not
//! in it (a CRD installed since is found without a restart) or when
//! [`Resolver::forget`] says a collection answered 404 (its version went away). Only the
//! one group is read, never the whole of discovery, so an aggregated API that is down
//! elsewhere does not matter.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use kube::discovery::{ApiCapabilities, ApiResource, Scope, verbs};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a list of a resource needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// API group (`""` for the core group).
    pub group: String,
    /// The version listed.
    pub version: String,
    /// Plural name (`deployments`).
    pub plural: String,
    /// Kind (`Deployment`).
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

/// Characters kept as they are in a path segment (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

impl Resolved {
    /// The collection's path: in `namespace` for a namespaced resource given one, else
    /// cluster-wide.
    pub fn collection(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        let plural = utf8_percent_encode(&self.plural, SEGMENT);
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("{base}/namespaces/{}/{plural}", utf8_percent_encode(ns, SEGMENT)),
            None => format!("{base}/{plural}"),
        }
    }
}

/// Why a resource did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Discovery answered, and the cluster does not serve the resource (or it cannot be
    /// listed).
    #[error("{resource}: {why}")]
    Unknown {
        /// The resource as asked for.
        resource: String,
        /// What discovery said.
        why: String,
    },
    /// Discovery could not be read.
    #[error("{resource}: reading API discovery of group {group:?} failed: {reason}")]
    Failed {
        /// The resource as asked for.
        resource: String,
        /// Its group.
        group: String,
        /// Why.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// `deployments.apps` → (`deployments`, `apps`); `services` → (`services`, `""`).
pub fn split(resource: &str) -> (&str, &str) {
    resource.split_once('.').unwrap_or((resource, ""))
}

/// The entry for `plural` among a group's resources: the preferred version's first, then
/// the others most stable first. Subresources never match (kube lists them apart).
pub fn pick<'a>(
    plural: &str,
    preferred: &'a [(ApiResource, ApiCapabilities)],
    by_stability: &'a [(ApiResource, ApiCapabilities)],
) -> Option<&'a (ApiResource, ApiCapabilities)> {
    preferred.iter().chain(by_stability).find(|(r, _)| r.plural == plural)
}

fn resolved(resource: &str, (r, caps): &(ApiResource, ApiCapabilities)) -> Result<Resolved> {
    if !caps.supports_operation(verbs::LIST) {
        return Err(Error::Unknown {
            resource: resource.to_owned(),
            why: format!("API discovery lists {} in {} without the list verb", r.plural, r.api_version),
        });
    }
    Ok(Resolved {
        group: r.group.clone(),
        version: r.version.clone(),
        plural: r.plural.clone(),
        kind: r.kind.clone(),
        namespaced: caps.scope == Scope::Namespaced,
    })
}

/// A group's resources as discovery listed them: the preferred version's, and every
/// version's most stable first.
#[derive(Debug, Default)]
struct GroupResources {
    preferred: Vec<(ApiResource, ApiCapabilities)>,
    by_stability: Vec<(ApiResource, ApiCapabilities)>,
}

/// Resolves resources through discovery, keeping what discovery said of each group read.
pub struct Resolver {
    client: kube::Client,
    groups: RwLock<HashMap<String, Arc<GroupResources>>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").field("groups", &self.groups).finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver asking through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client, groups: RwLock::default() }
    }

    /// The resource `resource` names (`deployments.apps`): from the group's kept
    /// discovery, else from discovery read again (a resource the kept one does not list
    /// may have been installed since).
    pub async fn resolve(&self, resource: &str) -> Result<Resolved> {
        let (plural, group) = split(resource);
        let kept = self.groups.read().unwrap_or_else(PoisonError::into_inner).get(group).cloned();
        if let Some(entry) = kept.as_deref().and_then(|g| pick(plural, &g.preferred, &g.by_stability)) {
            return resolved(resource, entry);
        }
        let unknown = |why: String| Error::Unknown { resource: resource.to_owned(), why };
        let found = match kube::discovery::group(&self.client, group).await {
            Ok(g) => Arc::new(GroupResources {
                preferred: g.recommended_resources(),
                by_stability: g.resources_by_stability(),
            }),
            Err(kube::Error::Discovery(e)) => {
                self.forget(resource);
                return Err(unknown(format!("API discovery: {e}")));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.forget(resource);
                return Err(unknown(format!("API discovery of group {group:?} answered 404: {}", s.message)));
            }
            Err(e) => {
                return Err(Error::Failed {
                    resource: resource.to_owned(),
                    group: group.to_owned(),
                    reason: e.to_string(),
                });
            }
        };
        self.groups.write().unwrap_or_else(PoisonError::into_inner).insert(group.to_owned(), found.clone());
        match pick(plural, &found.preferred, &found.by_stability) {
            Some(entry) => resolved(resource, entry),
            None => {
                let shown = if group.is_empty() { "the core group".to_owned() } else { format!("group {group:?}") };
                Err(unknown(format!("API discovery of {shown} lists no resource {plural:?}; is it installed?")))
            }
        }
    }

    /// Drops what is kept of `resource`'s group: its collection is gone.
    pub fn forget(&self, resource: &str) {
        self.groups.write().unwrap_or_else(PoisonError::into_inner).remove(split(resource).1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        scope: Scope,
        ops: &[&str],
    ) -> (ApiResource, ApiCapabilities) {
        let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        (
            ApiResource {
                group: group.into(),
                version: version.into(),
                api_version,
                kind: kind.into(),
                plural: plural.into(),
            },
            ApiCapabilities {
                scope,
                subresources: Vec::new(),
                operations: ops.iter().map(|o| (*o).to_owned()).collect(),
            },
        )
    }

    #[test]
    fn names_split_into_plural_and_group() {
        assert_eq!(split("services"), ("services", ""));
        assert_eq!(split("deployments.apps"), ("deployments", "apps"));
        assert_eq!(split("ingresses.networking.k8s.io"), ("ingresses", "networking.k8s.io"));
    }

    #[test]
    fn the_preferred_version_wins_then_the_most_stable() {
        let list = [verbs::LIST];
        let preferred = [entry("autoscaling.example.com", "v2", "scalers", "Scaler", Scope::Namespaced, &list)];
        let stable = [
            entry("autoscaling.example.com", "v2", "scalers", "Scaler", Scope::Namespaced, &list),
            entry("autoscaling.example.com", "v1beta1", "legacies", "Legacy", Scope::Cluster, &list),
        ];
        assert_eq!(pick("scalers", &preferred, &stable).unwrap().0.version, "v2");
        // only in an older version: found there, as a RESTMapper finds it
        assert_eq!(pick("legacies", &preferred, &stable).unwrap().0.version, "v1beta1");
        assert!(pick("widgets", &preferred, &stable).is_none());
    }

    #[test]
    fn a_resource_resolves_to_its_collection_paths() {
        let e = entry("", "v1", "services", "Service", Scope::Namespaced, &["get", verbs::LIST]);
        let r = resolved("services", &e).unwrap();
        assert_eq!(r.collection(Some("ai")), "/api/v1/namespaces/ai/services");
        assert_eq!(r.collection(None), "/api/v1/services");
        let e = entry("batch", "v1", "jobs", "Job", Scope::Namespaced, &[verbs::LIST]);
        assert_eq!(resolved("jobs.batch", &e).unwrap().collection(Some("a b")), "/apis/batch/v1/namespaces/a%20b/jobs");
        let e = entry("", "v1", "namespaces", "Namespace", Scope::Cluster, &[verbs::LIST]);
        let r = resolved("namespaces", &e).unwrap();
        assert!(!r.namespaced);
        assert_eq!(r.collection(Some("ignored")), "/api/v1/namespaces");
        let e = entry("", "v1", "bindings", "Binding", Scope::Namespaced, &["create"]);
        let err = resolved("bindings", &e).unwrap_err();
        assert!(err.to_string().contains("without the list verb"), "{err}");
    }
}
