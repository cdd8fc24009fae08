//! Which objects of a resource exist, and which of them a label selector picks: the
//! names a `*` read answers for. prometheus-adapter asks the API server for them on every
//! `*` read, with or without a label selector (custom-metrics-apiserver v1.30.0,
//! `pkg/provider/helpers/helpers.go` `ListObjectNames`, called from prometheus-adapter
//! v0.12.0 `pkg/custom-provider/provider.go` `GetMetricBySelector`), so that a series of a
//! deleted object, or of one never created, is never answered. So does this adapter:
//!
//! * **pods and nodes** from the [`LabelStore`] the metadata watch keeps (the HPA asks for
//!   pods on every cycle; a list per request would cost the API server);
//! * **every other resource** (Services, Deployments, Jobs, Namespaces, custom resources)
//!   listed from the API server per read: its name resolved through discovery
//!   ([`resolve`]), its objects listed metadata only and paged, the label selector sent to
//!   the API server ([`list`]).
//!
//! Lists are kept [`LIST_TTL`] ([`cache`]): the HPA controller reads each metric every
//! 15 s, so a kept list is never one cycle's answer served to the next, while reads that
//! come together (several HPAs or metrics over the same objects, a dashboard) cost the API
//! server one list instead of one each; an object deleted in the last two seconds may
//! still be answered, about the gap prometheus-adapter has between its list and its query.
//!
//! The whole selection has one deadline (`--kube-api-timeout`). Failures say what could
//! not be listed and why; none is an empty answer. Standalone mode has no
//! [`ObjectNames`] at all (the caller refuses label selectors and answers `*` from the
//! source, as before).

pub mod cache;
pub mod list;
pub mod resolve;

use std::sync::Arc;
use std::time::Duration;

use self::cache::TtlCache;
use self::list::Failure;
use self::resolve::Resolver;
use crate::labels::{self, LabelStore};
use crate::selector::Selector;

/// How long a list from the API server is kept.
pub const LIST_TTL: Duration = Duration::from_secs(2);

/// Lists kept at most (resource, namespace, selector).
const LISTS_KEPT: usize = 1024;

/// The objects picked, and how many they were picked among when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Names, ascending, once each.
    pub names: Vec<Arc<str>>,
    /// How many objects of the resource the namespace has (or the cluster, for a
    /// cluster-scoped one), when known: always from the store, and from a list without a
    /// selector (the API server selects, so a selective list does not tell).
    pub among: Option<usize>,
}

/// Why the objects could not be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The store's watch has not listed once yet.
    #[error("{0}")]
    NotSynced(String),
    /// No API server to list from (a store without a lister: tests, benchmarks).
    #[error(
        "labelSelector is not supported for {0} here: only pods and nodes can be selected without the Kubernetes API"
    )]
    Unsupported(String),
    /// The cluster does not serve the resource (discovery answered).
    #[error("unable to list matching resources: {0}")]
    UnknownResource(String),
    /// A cluster-scoped path for a resource the cluster says is namespaced.
    #[error(
        "unable to list matching resources: {0} are namespaced in this cluster; ask under namespaces/{{namespace}}/"
    )]
    Scope(String),
    /// The API server refused the label selector (400).
    #[error("unable to list matching resources: {what}: the API server refused labelSelector {selector:?}: {message}")]
    Selector {
        /// What was listed.
        what: String,
        /// The selector sent.
        selector: String,
        /// The API server's message.
        message: String,
    },
    /// The API server refused the adapter (401, 403) or does not have the collection
    /// (404, 405): the deployment's RBAC or the cluster is wrong, not the request.
    #[error("unable to list matching resources: {what}: {failure}{hint}")]
    Refused {
        /// What was listed.
        what: String,
        /// The answer.
        failure: Failure,
        /// What to do about it.
        hint: String,
    },
    /// The API server or discovery did not answer usably in time.
    #[error("unable to list matching resources: {what}: {reason}")]
    Unavailable {
        /// What was listed.
        what: String,
        /// Why.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

impl From<labels::Error> for Error {
    fn from(e: labels::Error) -> Self {
        match e {
            labels::Error::NotSynced(_) => Error::NotSynced(e.to_string()),
            labels::Error::Unsupported(resource, _) => Error::Unsupported(resource),
        }
    }
}

/// (resource, namespace, selector): one kept list.
type ListKey = (String, Option<String>, String);

struct Lister {
    client: kube::Client,
    resolver: Resolver,
    lists: TtlCache<ListKey, Arc<Vec<Arc<str>>>>,
    timeout: Duration,
    page: u32,
}

impl std::fmt::Debug for Lister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lister")
            .field("resolver", &self.resolver)
            .field("lists", &self.lists)
            .field("timeout", &self.timeout)
            .field("page", &self.page)
            .finish_non_exhaustive()
    }
}

/// The names of existing objects: pods and nodes from the store, the rest from the API
/// server.
#[derive(Debug)]
pub struct ObjectNames {
    labels: Arc<LabelStore>,
    lister: Option<Lister>,
}

fn what(resource: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{resource} in namespace {ns}"),
        None => resource.to_owned(),
    }
}

impl ObjectNames {
    /// Pods and nodes from `labels`, other resources listed through `client` (the client
    /// without retries: a failing API server is reported, not waited out), each selection
    /// within `timeout`.
    pub fn new(labels: Arc<LabelStore>, client: kube::Client, timeout: Duration) -> Self {
        let lister = Lister {
            resolver: Resolver::new(client.clone()),
            client,
            lists: TtlCache::new(LIST_TTL, LISTS_KEPT),
            timeout,
            page: list::PAGE,
        };
        Self { labels, lister: Some(lister) }
    }

    /// Pods and nodes only (tests and benchmarks without an API server).
    pub fn pods_and_nodes(labels: Arc<LabelStore>) -> Self {
        Self { labels, lister: None }
    }

    /// Lists in pages of `page` objects and keeps them `ttl` (zero: not at all), for
    /// tests and benchmarks.
    #[must_use]
    pub fn tuned(mut self, page: u32, ttl: Duration) -> Self {
        if let Some(l) = &mut self.lister {
            l.page = page.max(1);
            l.lists = TtlCache::new(ttl, LISTS_KEPT);
        }
        self
    }

    /// The store of pod and node labels.
    pub fn labels(&self) -> &Arc<LabelStore> {
        &self.labels
    }

    /// The objects of `resource` (as in the metrics API path) in `namespace` (`None`
    /// for a cluster-scoped resource) that `selector` picks; an empty selector picks every
    /// object that exists.
    pub async fn select(&self, resource: &str, namespace: Option<&str>, selector: &Selector) -> Result<Selection> {
        if matches!(resource, "pods" | "nodes") {
            let (names, among) = self.labels.select_among(resource, namespace, selector)?;
            // The store lists names in order, once each.
            debug_assert!(names.windows(2).all(|w| w[0] < w[1]));
            return Ok(Selection { names, among: Some(among) });
        }
        let Some(lister) = &self.lister else { return Err(Error::Unsupported(resource.to_owned())) };
        let shown = what(resource, namespace);
        let listed =
            tokio::time::timeout(lister.timeout, lister.select(resource, namespace, selector)).await.map_err(
                |_| Error::Unavailable { what: shown, reason: format!("no answer within {:?}", lister.timeout) },
            )??;
        let names = (*listed).clone();
        let among = selector.is_empty().then_some(names.len());
        Ok(Selection { names, among })
    }
}

impl Lister {
    async fn select(&self, resource: &str, namespace: Option<&str>, selector: &Selector) -> Result<Arc<Vec<Arc<str>>>> {
        let selector = selector.to_string();
        let key = (resource.to_owned(), namespace.map(str::to_owned), selector.clone());
        self.lists.get_or_load(&key, || self.load(resource, namespace, &selector)).await
    }

    /// Resolves and lists; once more when the collection answers 404 (its version may have
    /// gone with an upgrade: discovery is asked again).
    async fn load(&self, resource: &str, namespace: Option<&str>, selector: &str) -> Result<Arc<Vec<Arc<str>>>> {
        let shown = what(resource, namespace);
        let mut tried_again = false;
        loop {
            let r = self.resolver.resolve(resource).await.map_err(|e| match e {
                resolve::Error::Unknown { .. } => Error::UnknownResource(e.to_string()),
                resolve::Error::Failed { .. } => Error::Unavailable { what: shown.clone(), reason: e.to_string() },
            })?;
            if r.namespaced && namespace.is_none() {
                return Err(Error::Scope(resource.to_owned()));
            }
            match list::names(&self.client, &r.collection(namespace), selector, self.page).await {
                Ok(mut names) => {
                    // The API server lists in key order; sorted here whatever it did.
                    if !names.is_sorted() {
                        names.sort_unstable();
                    }
                    names.dedup();
                    return Ok(Arc::new(names));
                }
                Err(Failure::Status { code: 404, .. }) if !tried_again => {
                    self.resolver.forget(resource);
                    tried_again = true;
                }
                Err(failure) => return Err(classify(shown, selector, &r.plural, failure)),
            }
        }
    }
}

/// What a failed list means for the read.
fn classify(what: String, selector: &str, plural: &str, failure: Failure) -> Error {
    let Failure::Status { code, message, .. } = &failure else {
        return Error::Unavailable { what, reason: failure.to_string() };
    };
    match code {
        400 => Error::Selector { what, selector: selector.to_owned(), message: message.clone() },
        401 | 403 => {
            Error::Refused { what, failure, hint: format!("; the adapter's ClusterRole needs list on {plural}") }
        }
        404 | 405 => Error::Refused { what, failure, hint: String::new() },
        _ => Error::Unavailable { what, reason: failure.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Failure {
        Failure::Status { code, reason: "R".into(), message: "m".into() }
    }

    #[test]
    fn failures_are_classified_by_whose_fault_they_are() {
        let c = |f| classify("services in namespace ai".into(), "tier=web", "services", f);
        assert!(matches!(c(status(400)), Error::Selector { .. }));
        let e = c(status(403));
        assert!(matches!(e, Error::Refused { .. }));
        assert_eq!(
            e.to_string(),
            "unable to list matching resources: services in namespace ai: the API server answered 403 R: m; \
             the adapter's ClusterRole needs list on services"
        );
        assert!(matches!(c(status(404)), Error::Refused { .. }));
        for code in [410, 429, 500, 503] {
            assert!(matches!(c(status(code)), Error::Unavailable { .. }), "{code}");
        }
        assert!(matches!(c(Failure::Transport("reset".into())), Error::Unavailable { .. }));
    }

    #[tokio::test]
    async fn pods_and_nodes_come_from_the_store_and_nothing_else_without_an_api() {
        let store = Arc::new(LabelStore::new());
        let names = ObjectNames::pods_and_nodes(store.clone());
        let all = Selector::everything();
        assert!(matches!(names.select("pods", Some("ai"), &all).await, Err(Error::NotSynced(_))));
        store.apply_pod("ai", "b", &[("app", "x")]);
        store.apply_pod("ai", "a", &[("app", "y")]);
        store.mark_synced();
        let s = names.select("pods", Some("ai"), &all).await.unwrap();
        assert_eq!((s.names.len(), s.among), (2, Some(2)));
        let s = names.select("pods", Some("ai"), &Selector::parse("app=x").unwrap()).await.unwrap();
        assert_eq!((s.names, s.among), (vec![Arc::from("b")], Some(2)));
        let e = names.select("services", Some("ai"), &all).await.unwrap_err();
        assert!(matches!(e, Error::Unsupported(ref r) if r == "services"), "{e}");
    }
}
