//! The writes a controller on a node makes, with the real server's semantics: Node
//! patches of the object and of `/status` (strategic merge with conditions merged by
//! `type`, JSON merge replacing lists, `metadata.resourceVersion` as a precondition
//! answering 409, `/status` changing only the status and the object everything but,
//! the managed fields of `spec.unschedulable`), ConfigMaps created (409
//! AlreadyExists) and replaced (409 on a stale `resourceVersion`), and Events created.
//! A patched Node that is no longer a Node answers 422 and changes nothing.
//!
//! Nodes and ConfigMaps are kept typed, as every other route reads them; Events as the
//! JSON a client sent, since no route reads them back.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::ApiServer;
use super::patch::apply_node_patch;
use super::reply::{conflict, created, json, status};
use super::script::{MERGE, STRATEGIC};

fn not_found(resource: &str, name: &str) -> Response {
    status(StatusCode::NOT_FOUND, "NotFound", format!("{resource} \"{name}\" not found"))
}

/// The body as `T`: 400 when it is not JSON, 422 when it is not a `what`. Boxed: a
/// response is large.
fn decode<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, Box<Response>> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Box::new(status(StatusCode::BAD_REQUEST, "BadRequest", format!("not JSON: {e}"))))?;
    serde_json::from_value(value).map_err(|e| Box::new(invalid(what, &e)))
}

fn invalid(what: &str, e: &serde_json::Error) -> Response {
    status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", format!("{what} is invalid: {e}"))
}

/// `PATCH /api/v1/nodes/{name}` and `.../{name}/status`.
pub(super) async fn patch_node(
    State(s): State<ApiServer>,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    patch(&s, &name, uri.path().ends_with("/status"), &q, &headers, &body)
}

fn patch(
    s: &ApiServer,
    name: &str,
    status_only: bool,
    q: &BTreeMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let json_merge = match headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default() {
        STRATEGIC => false,
        MERGE => true,
        other => {
            let message = format!("the body of the request was in an unknown format: {other}");
            return status(StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType", message);
        }
    };
    let mut patch: Value = match decode("patch", body) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let manager = q.get("fieldManager").map_or("unknown", String::as_str);
    let mut state = s.state();
    let Some(node) = state.nodes.get(name) else { return not_found("nodes", name) };
    let mut object = serde_json::to_value(node).unwrap();
    if let Some(want) = patch.pointer("/metadata/resourceVersion").cloned() {
        if want != object["metadata"]["resourceVersion"] {
            return conflict("nodes", name);
        }
        patch["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    }
    // `/status` changes the status only; the object everything but.
    if status_only {
        patch = json!({"status": patch.get("status").cloned().unwrap_or(Value::Null)});
    } else if let Some(o) = patch.as_object_mut() {
        o.remove("status");
    }
    apply_node_patch(&mut object, &patch, json_merge, !status_only, manager);
    state.resource_version += 1;
    object["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
    match serde_json::from_value::<Node>(object) {
        Ok(node) => {
            let answer = json(&node);
            state.nodes.insert(name.to_string(), node);
            answer
        }
        Err(e) => invalid(&format!("Node \"{name}\""), &e),
    }
}

pub(super) async fn create_config_map(State(s): State<ApiServer>, Path(ns): Path<String>, body: Bytes) -> Response {
    let mut map: ConfigMap = match decode("ConfigMap", &body) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let name = map.metadata.name.clone().unwrap_or_default();
    let mut state = s.state();
    let key = (ns.clone(), name.clone());
    if state.config_maps.contains_key(&key) {
        return status(StatusCode::CONFLICT, "AlreadyExists", format!("configmaps \"{name}\" already exists"));
    }
    state.resource_version += 1;
    map.metadata.resource_version = Some(state.resource_version.to_string());
    map.metadata.namespace = Some(ns);
    let answer = created(&map);
    state.config_maps.insert(key, map);
    answer
}

pub(super) async fn replace_config_map(
    State(s): State<ApiServer>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let mut map: ConfigMap = match decode("ConfigMap", &body) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let mut state = s.state();
    let key = (ns, name.clone());
    let Some(current) = state.config_maps.get(&key) else { return not_found("configmaps", &name) };
    // Without a version the update is unconditional, as the real server takes it.
    if map.metadata.resource_version.as_ref().is_some_and(|v| Some(v) != current.metadata.resource_version.as_ref()) {
        return conflict("configmaps", &name);
    }
    state.resource_version += 1;
    map.metadata.resource_version = Some(state.resource_version.to_string());
    map.metadata.namespace = Some(key.0.clone());
    let answer = json(&map);
    state.config_maps.insert(key, map);
    answer
}

pub(super) async fn create_event(State(s): State<ApiServer>, Path(ns): Path<String>, body: Bytes) -> Response {
    let mut event: Value = match decode("Event", &body) {
        Ok(e) => e,
        Err(r) => return *r,
    };
    let name = event["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let mut state = s.state();
    if state.events.iter().any(|e| e["metadata"]["name"] == name.as_str()) {
        return status(StatusCode::CONFLICT, "AlreadyExists", format!("events \"{name}\" already exists"));
    }
    state.resource_version += 1;
    event["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
    event["metadata"]["namespace"] = json!(ns);
    state.events.push(event.clone());
    created(&event)
}

impl ApiServer {
    /// Node `name` as JSON, as a client would read it; panics if there is none.
    pub fn node(&self, name: &str) -> Value {
        let state = self.state();
        let node = state.nodes.get(name).unwrap_or_else(|| panic!("no node {name}"));
        serde_json::to_value(node).unwrap()
    }

    /// Changes a node as another client would (an admin's `kubectl cordon`): a
    /// strategic merge patch under `manager`.
    pub fn patch_node_as(&self, name: &str, manager: &str, patch: Value) {
        let mut state = self.state();
        let mut object = serde_json::to_value(&state.nodes[name]).unwrap();
        apply_node_patch(&mut object, &patch, false, true, manager);
        state.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
        let node = serde_json::from_value(object).expect("the patched node is a Node");
        state.nodes.insert(name.to_string(), node);
    }

    /// Creates or replaces a ConfigMap with this `data` as another client would.
    pub fn put_config_map(&self, namespace: &str, name: &str, data: Value) {
        let map = json!({"metadata": {"name": name, "namespace": namespace}, "data": data});
        self.add_config_map(serde_json::from_value(map).expect("ConfigMap data are strings"));
    }

    /// ConfigMap `namespace/name` as JSON, if there is one.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Value> {
        let state = self.state();
        let map = state.config_maps.get(&(namespace.to_string(), name.to_string()))?;
        Some(serde_json::to_value(map).unwrap())
    }

    /// The Events created so far.
    pub fn events(&self) -> Vec<Value> {
        self.state().events.clone()
    }

    pub fn events_with_reason(&self, reason: &str) -> Vec<Value> {
        self.events().into_iter().filter(|e| e["reason"] == reason).collect()
    }
}

/// `node` as the server stores it: anything that serializes as a Node.
pub(super) fn as_node(node: impl Serialize) -> Node {
    let value = serde_json::to_value(node).unwrap();
    serde_json::from_value(value).unwrap_or_else(|e| panic!("not a Node: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::registered_node;

    /// Patches node `n` as `manager` would: (status, the node after).
    fn send(s: &ApiServer, status_only: bool, content_type: &str, patch: &Value) -> (u16, Value) {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", content_type.parse().unwrap());
        let q = BTreeMap::from([("fieldManager".to_string(), "gpu-exporter-health".to_string())]);
        let answer = super::patch(s, "n", status_only, &q, &headers, patch.to_string().as_bytes());
        (answer.status().as_u16(), s.node("n"))
    }

    #[test]
    fn a_node_patch_changes_only_its_part_and_only_at_the_version_it_read() {
        let s = ApiServer::new();
        s.add_node(registered_node("n"));
        let condition = json!({"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]},
                               "spec": {"unschedulable": true}});
        let (code, node) = send(&s, true, STRATEGIC, &condition);
        assert_eq!(code, 200);
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 3, "merged by type");
        assert!(node["spec"].get("unschedulable").is_none(), "/status leaves the spec alone");
        let (_, node) = send(&s, false, STRATEGIC, &condition);
        assert_eq!(node["spec"]["unschedulable"], true);
        assert_eq!(node["metadata"]["managedFields"][0]["manager"], "gpu-exporter-health");
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 3, "the object leaves the status alone");
        let stale = json!({"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": null}});
        assert_eq!(send(&s, false, STRATEGIC, &stale).0, 409);
        let rv = node["metadata"]["resourceVersion"].clone();
        let fresh = json!({"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": null}});
        assert_eq!(send(&s, false, "application/json-patch+json", &fresh).0, 415);
        let (code, node) = send(&s, false, MERGE, &fresh);
        assert_eq!(code, 200);
        assert!(node["spec"].get("unschedulable").is_none());
        let not_a_node = json!({"spec": {"unschedulable": "yes"}});
        let (code, after) = send(&s, false, MERGE, &not_a_node);
        assert_eq!(code, 422, "unschedulable is a boolean");
        assert_eq!(after, node, "a refused patch changes nothing");
    }

    #[tokio::test]
    async fn a_config_map_is_created_once_and_replaced_at_the_version_read() {
        let s = ApiServer::new();
        let ns = || Path("gpu-telemetry".to_string());
        let map = json!({"metadata": {"name": "breaker"}, "data": {"gpu-01": "2024-05-01T12:00:00Z"}});
        let create = || create_config_map(State(s.clone()), ns(), map.to_string().into());
        assert_eq!(create().await.status(), 201);
        assert_eq!(create().await.status(), 409, "AlreadyExists");
        let read = s.config_map("gpu-telemetry", "breaker").unwrap();
        let replace = |body: Value| {
            let path = Path(("gpu-telemetry".to_string(), "breaker".to_string()));
            replace_config_map(State(s.clone()), path, body.to_string().into())
        };
        let mut stale = read.clone();
        stale["metadata"]["resourceVersion"] = json!("0");
        assert_eq!(replace(stale).await.status(), 409);
        assert_eq!(replace(json!({"data": {"gpu-01": 1}})).await.status(), 422, "data are strings");
        let mut fresh = read;
        fresh["data"] = json!({});
        assert_eq!(replace(fresh).await.status(), 200);
        assert_eq!(s.config_map("gpu-telemetry", "breaker").unwrap()["data"], json!({}));
    }
}
