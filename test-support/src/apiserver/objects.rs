//! Objects of the kinds a client only lists (Services, Deployments, Jobs, Namespaces, a
//! custom resource): kept as their metadata (namespace, name, labels) and listed as the
//! real server lists any resource, by its collection path (`/api/v1/namespaces`,
//! `/api/v1/namespaces/{ns}/services`, `/apis/apps/v1/deployments`,
//! `/apis/batch/v1/namespaces/{ns}/jobs`) with `labelSelector` and paging (`limit`,
//! `continue`), whole or metadata only (`as=PartialObjectMetadataList`; a
//! [`metadata_only`](ApiServer::metadata_only) server answers nothing else, 406).
//!
//! A resource discovery does not list answers 404 as kube-apiserver does. Kept apart from
//! pods and nodes, which have typed objects, watches and their own routes.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::ApiServer;
use super::discovery;
use super::listing::{Ask, Params, page, selectors};
use super::record::Listed;
use super::reply::{json, status};
use super::selectors::Selector;

/// group version (`v1`, `apps/v1`) and plural (`services`)
pub(crate) type Collection = (String, String);
/// namespace ("" for cluster-scoped) and name → (kind, labels)
pub(crate) type Objects = BTreeMap<(String, String), (String, BTreeMap<String, String>)>;

impl ApiServer {
    /// Adds or replaces an object of `plural` in group version `gv` (`v1`, `apps/v1`)
    /// with these labels; `namespace` `None` for a cluster-scoped kind.
    pub fn add_object(
        &self,
        gv: &str,
        plural: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        labels: &[(&str, &str)],
    ) {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        let mut s = self.state();
        s.resource_version += 1;
        s.objects.entry((gv.into(), plural.into())).or_default().insert(key, (kind.into(), labels));
    }

    /// Deletes an object added by [`ApiServer::add_object`]; nothing if there is none.
    pub fn delete_object(&self, gv: &str, plural: &str, namespace: Option<&str>, name: &str) {
        let mut s = self.state();
        if let Some(objects) = s.objects.get_mut(&(gv.to_string(), plural.to_string())) {
            objects.remove(&(namespace.unwrap_or_default().to_string(), name.to_string()));
        }
    }
}

/// `/api` as kube-apiserver serves it: the core group's versions.
pub(super) async fn core_versions() -> Response {
    json(&json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    }))
}

pub(super) async fn core_cluster(
    State(s): State<ApiServer>,
    headers: HeaderMap,
    Path(plural): Path<String>,
    Query(q): Params,
) -> Response {
    list(&s, &headers, "v1", &plural, None, &q)
}

pub(super) async fn core_namespaced(
    State(s): State<ApiServer>,
    headers: HeaderMap,
    Path((ns, plural)): Path<(String, String)>,
    Query(q): Params,
) -> Response {
    list(&s, &headers, "v1", &plural, Some(&ns), &q)
}

pub(super) async fn group_cluster(
    State(s): State<ApiServer>,
    headers: HeaderMap,
    Path((group, version, plural)): Path<(String, String, String)>,
    Query(q): Params,
) -> Response {
    list(&s, &headers, &format!("{group}/{version}"), &plural, None, &q)
}

pub(super) async fn group_namespaced(
    State(s): State<ApiServer>,
    headers: HeaderMap,
    Path((group, version, ns, plural)): Path<(String, String, String, String)>,
    Query(q): Params,
) -> Response {
    list(&s, &headers, &format!("{group}/{version}"), &plural, Some(&ns), &q)
}

/// A list of `plural` in `gv`, in `namespace` or across all of them.
fn list(
    s: &ApiServer,
    headers: &HeaderMap,
    gv: &str,
    plural: &str,
    namespace: Option<&str>,
    q: &BTreeMap<String, String>,
) -> Response {
    let Some((kind, namespaced)) = discovery::served(s, gv, plural) else {
        return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource");
    };
    if namespace.is_some() && !namespaced {
        return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource");
    }
    let ask = Ask::of(s, headers);
    if let Some(r) = ask.refused() {
        return r;
    }
    let (labels, fields) = match selectors(q, &["metadata.name", "metadata.namespace"]) {
        Ok(sel) => sel,
        Err(response) => return *response,
    };
    let state = s.state();
    let empty = Objects::new();
    let objects = state.objects.get(&(gv.to_string(), plural.to_string())).unwrap_or(&empty);
    // Paged before any JSON is built: a list of 10,000 objects in pages of 500 builds
    // each object once, not once per page.
    let matching: Vec<_> = objects
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
        .filter(|((ns, name), (_, l))| {
            let by_fields = || {
                let f =
                    BTreeMap::from([("metadata.name".into(), name.clone()), ("metadata.namespace".into(), ns.clone())]);
                fields.matches(&f)
            };
            labels.matches(l) && (fields == Selector::default() || by_fields())
        })
        .collect();
    let (on_page, more) = page(&matching, q);
    let items: Vec<Value> = on_page
        .into_iter()
        .map(|((ns, name), (_, l))| {
            let mut metadata = json!({"name": name, "uid": format!("uid-{ns}-{name}"), "labels": l,
                                      "resourceVersion": "1", "annotations": {"note": "kept out of the adapter"}});
            if !ns.is_empty() {
                metadata["namespace"] = ns.clone().into();
            }
            if ask.metadata {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
            } else {
                json!({"kind": kind, "apiVersion": gv, "metadata": metadata, "spec": {}})
            }
        })
        .collect();
    let listed = items.len();
    let (list_kind, api_version) = if ask.metadata {
        ("PartialObjectMetadataList".to_string(), "meta.k8s.io/v1")
    } else {
        (format!("{kind}List"), gv)
    };
    let mut metadata = json!({"resourceVersion": state.resource_version.to_string()});
    if let Some(token) = more {
        metadata["continue"] = token.into();
    }
    let mut answer = json(&json!({"kind": list_kind, "apiVersion": api_version, "metadata": metadata, "items": items}));
    answer.extensions_mut().insert(Listed(listed));
    answer
}
