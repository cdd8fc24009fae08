//! How the in-test API server answers a list or watch: whether it asked for metadata
//! only, its label and field selectors (a 400 for one that does not parse or names a
//! field the resource does not index), and a page of the matching objects.

use std::collections::BTreeMap;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use k8s_openapi::{List, ListableResource};
use serde::Serialize;

use super::ApiServer;
use super::record::Listed;
use super::reply::{json, status};
use super::selectors::Selector;
use super::watch::{self, Fields};

pub(super) type Params = Query<BTreeMap<String, String>>;

/// How a list or watch asks to be answered.
#[derive(Clone, Copy)]
pub(super) struct Ask {
    /// `as=PartialObjectMetadataList` (or `PartialObjectMetadata`, for a watch).
    pub metadata: bool,
    /// The server answers only metadata-only requests.
    pub metadata_only: bool,
}

impl Ask {
    pub(super) fn of(s: &ApiServer, headers: &HeaderMap) -> Ask {
        let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
        Ask { metadata: accept.contains("as=PartialObjectMetadata"), metadata_only: s.state().metadata_only }
    }

    /// The 406 a whole-object request gets from a metadata-only server.
    pub(super) fn refused(self) -> Option<Response> {
        (self.metadata_only && !self.metadata)
            .then(|| status(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", "this server serves metadata only"))
    }
}

pub(super) fn watching(params: &BTreeMap<String, String>) -> bool {
    params.get("watch").is_some_and(|w| w == "true" || w == "1")
}

/// The label and field selectors of a list or watch; a 400 when one does not parse or
/// names a field the resource does not index (`indexed`). Boxed: a response is large.
pub(super) fn selectors(
    params: &BTreeMap<String, String>,
    indexed: &[&str],
) -> Result<(Selector, Selector), Box<Response>> {
    let parse = |key: &str| Selector::parse(params.get(key).map_or("", String::as_str));
    let (labels, fields) = match (parse("labelSelector"), parse("fieldSelector")) {
        (Ok(l), Ok(f)) => (l, f),
        (Err(e), _) | (_, Err(e)) => return Err(Box::new(status(StatusCode::BAD_REQUEST, "BadRequest", e))),
    };
    if let Some(bad) = fields.keys().into_iter().find(|k| !indexed.contains(k)) {
        let message = format!("field label not supported: {bad}");
        return Err(Box::new(status(StatusCode::BAD_REQUEST, "BadRequest", message)));
    }
    Ok((labels, fields))
}

/// The page of `matching` that `limit` and `continue` ask for, and the token of the
/// next page when there is one (the offset, which the real server's opaque token is not).
pub(super) fn page<T: Clone>(matching: &[T], params: &BTreeMap<String, String>) -> (Vec<T>, Option<String>) {
    let start: usize = params.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit = params.get("limit").and_then(|l| l.parse().ok()).filter(|l: &usize| *l > 0).unwrap_or(usize::MAX);
    let end = start.saturating_add(limit).min(matching.len());
    let more = end < matching.len();
    (matching[start.min(end)..end].to_vec(), more.then(|| end.to_string()))
}

/// A list as the API serves it: selectors, then a page of `limit` from `continue`.
pub(super) fn list<T: ListableResource + Serialize + Clone>(
    objects: Vec<(T, Fields, Fields)>,
    params: &BTreeMap<String, String>,
    indexed: &[&str],
    resource_version: u64,
    ask: Ask,
) -> Response {
    let (labels, fields) = match selectors(params, indexed) {
        Ok(s) => s,
        Err(response) => return *response,
    };
    let matching: Vec<T> =
        objects.into_iter().filter(|(_, l, f)| labels.matches(l) && fields.matches(f)).map(|(o, ..)| o).collect();
    let (items, continue_) = page(&matching, params);
    let page = List {
        items,
        metadata: ListMeta { resource_version: Some(resource_version.to_string()), continue_, ..ListMeta::default() },
    };
    let mut value = serde_json::to_value(&page).unwrap();
    value["kind"] = T::LIST_KIND.into();
    value["apiVersion"] = T::API_VERSION.into();
    if ask.metadata {
        let items: Vec<serde_json::Value> =
            value["items"].as_array().into_iter().flatten().map(watch::metadata_of).collect();
        value["items"] = items.into();
        value["kind"] = "PartialObjectMetadataList".into();
        value["apiVersion"] = "meta.k8s.io/v1".into();
    }
    let listed = value["items"].as_array().map_or(0, Vec::len);
    let mut answer = json(&value);
    answer.extensions_mut().insert(Listed(listed));
    answer
}
