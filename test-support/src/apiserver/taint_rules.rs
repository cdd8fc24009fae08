//! `resource.k8s.io` as a DRA cluster serves it to a controller that taints devices:
//! the group's discovery documents in the versions a test serves
//! ([`ApiServer::serve_resource_api`]; none: the group answers 404, as on a cluster
//! without DRA), and cluster-scoped DeviceTaintRules in the versions that have them:
//! list by label selector, get, create (409 AlreadyExists), JSON merge patch and
//! delete with `resourceVersion` and UID preconditions (409 when they fail). A rule is
//! stored once and served in whichever version is asked, as the real server converts.
//! ResourceSlices, under the same group, are [`slices`](super::slices).
//!
//! Rules are kept as JSON: their API versions differ, and tests read back what a
//! client wrote.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::listing::Params;
use super::patch::merge;
use super::record::Listed;
use super::reply::{conflict, created, json, status};
use super::script::MERGE;
use super::selectors::Selector;
use super::{ApiServer, slices};

const GROUP: &str = "resource.k8s.io";
const RULES: &str = "devicetaintrules.resource.k8s.io";

fn not_served() -> Response {
    status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource")
}

fn in_version(rule: &Value, version: &str) -> Value {
    let mut rule = rule.clone();
    rule["apiVersion"] = json!(format!("{GROUP}/{version}"));
    rule
}

/// `/apis/resource.k8s.io`: the group, in the versions served.
pub(super) async fn group(State(s): State<ApiServer>) -> Response {
    let versions: Vec<Value> = s
        .state()
        .resource_versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{GROUP}/{v}"), "version": v}))
        .collect();
    let Some(preferred) = versions.first().cloned() else { return not_served() };
    json(&json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": versions,
        "preferredVersion": preferred}))
}

/// `/apis/resource.k8s.io/{version}`: its resources.
pub(super) async fn version(State(s): State<ApiServer>, Path(version): Path<String>) -> Response {
    let state = s.state();
    if !state.resource_versions.contains(&version) {
        return not_served();
    }
    let mut resources = vec![json!({"name": "resourceslices", "singularName": "resourceslice",
        "namespaced": false, "kind": "ResourceSlice", "verbs": ["get", "list", "watch"]})];
    if state.rule_versions.contains(&version) {
        resources.push(json!({"name": "devicetaintrules", "singularName": "devicetaintrule",
            "namespaced": false, "kind": "DeviceTaintRule",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}));
    }
    json(&json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{version}"),
        "resources": resources}))
}

/// `/apis/resource.k8s.io/{version}/{resource}`: ResourceSlices (v1) or the rules.
pub(super) async fn collection(
    State(s): State<ApiServer>,
    Path((version, resource)): Path<(String, String)>,
    headers: HeaderMap,
    q: Params,
    method: axum::http::Method,
    body: Bytes,
) -> Response {
    if version == "v1" && resource == "resourceslices" && method == axum::http::Method::GET {
        return slices::list_or_watch(State(s), headers, q).await;
    }
    if resource != "devicetaintrules" || !s.state().rule_versions.contains(&version) {
        return not_served();
    }
    match method.as_str() {
        "GET" => list_rules(&s, &version, &q.0),
        "POST" => create_rule(&s, &version, &body),
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "not on a collection"),
    }
}

fn list_rules(s: &ApiServer, version: &str, q: &BTreeMap<String, String>) -> Response {
    let selector = match Selector::parse(q.get("labelSelector").map_or("", String::as_str)) {
        Ok(sel) => sel,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e),
    };
    let state = s.state();
    let items: Vec<Value> = state
        .device_taint_rules
        .values()
        .filter(|rule| {
            let labels = rule["metadata"]["labels"].as_object().into_iter().flatten();
            let labels: BTreeMap<String, String> =
                labels.filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect();
            selector.matches(&labels)
        })
        .map(|rule| in_version(rule, version))
        .collect();
    let listed = items.len();
    let mut answer = json(&json!({"apiVersion": format!("{GROUP}/{version}"), "kind": "DeviceTaintRuleList",
        "metadata": {"resourceVersion": state.resource_version.to_string()}, "items": items}));
    answer.extensions_mut().insert(Listed(listed));
    answer
}

fn create_rule(s: &ApiServer, version: &str, body: &[u8]) -> Response {
    let Ok(mut rule) = serde_json::from_slice::<Value>(body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    if rule["apiVersion"] != json!(format!("{GROUP}/{version}")) {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the body's apiVersion is not the path's");
    }
    let name = rule["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let mut state = s.state();
    if state.device_taint_rules.contains_key(&name) {
        return status(StatusCode::CONFLICT, "AlreadyExists", format!("{RULES} \"{name}\" already exists"));
    }
    state.resource_version += 1;
    let rv = state.resource_version.to_string();
    rule["metadata"]["resourceVersion"] = json!(rv);
    rule["metadata"]["uid"] = json!(format!("uid-{name}-{rv}"));
    state.device_taint_rules.insert(name, rule.clone());
    created(&rule)
}

/// `/apis/resource.k8s.io/{version}/devicetaintrules/{name}`: get, merge patch, delete.
pub(super) async fn rule(
    State(s): State<ApiServer>,
    Path((version, resource, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    method: axum::http::Method,
    body: Bytes,
) -> Response {
    if resource != "devicetaintrules" || !s.state().rule_versions.contains(&version) {
        return not_served();
    }
    let verb = match method.as_str() {
        "GET" => "get",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => return status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "not on a rule"),
    };
    let mut state = s.state();
    let Some(current) = state.device_taint_rules.get(&name).cloned() else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("{RULES} \"{name}\" not found"));
    };
    match verb {
        "get" => json(&in_version(&current, &version)),
        "patch" => {
            if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some(MERGE) {
                return status(StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType", "only merge patches here");
            }
            let Ok(mut patch) = serde_json::from_slice::<Value>(&body) else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
            };
            if let Some(want) = patch.pointer("/metadata/resourceVersion").cloned() {
                if want != current["metadata"]["resourceVersion"] {
                    return conflict(RULES, &name);
                }
                patch["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            }
            state.resource_version += 1;
            let mut rule = current;
            merge(&mut rule, &patch, "", true);
            rule["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
            state.device_taint_rules.insert(name, rule.clone());
            json(&in_version(&rule, &version))
        }
        _ => {
            let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let pre = &options["preconditions"];
            let uid_ok = pre.get("uid").is_none_or(|u| *u == current["metadata"]["uid"]);
            let rv_ok = pre.get("resourceVersion").is_none_or(|v| *v == current["metadata"]["resourceVersion"]);
            if !uid_ok || !rv_ok {
                return conflict(RULES, &name);
            }
            state.device_taint_rules.remove(&name);
            json(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": GROUP, "kind": "devicetaintrules"}}))
        }
    }
}

impl ApiServer {
    /// Serves `resource.k8s.io` in `group` versions, DeviceTaintRules in `rules` of them.
    pub fn serve_resource_api(&self, group: &[&str], rules: &[&str]) {
        let mut state = self.state();
        state.resource_versions = group.iter().map(|v| v.to_string()).collect();
        state.rule_versions = rules.iter().map(|v| v.to_string()).collect();
    }

    /// Creates a DeviceTaintRule as another client (an admin) would.
    pub fn add_device_taint_rule(&self, mut rule: Value) {
        let mut state = self.state();
        state.resource_version += 1;
        let name = rule["metadata"]["name"].as_str().expect("a rule has a name").to_string();
        rule["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
        rule["metadata"]["uid"] = json!(format!("uid-{name}"));
        state.device_taint_rules.insert(name, rule);
    }

    /// Deletes a DeviceTaintRule as another client would.
    pub fn delete_device_taint_rule(&self, name: &str) {
        self.state().device_taint_rules.remove(name);
    }

    /// The DeviceTaintRules by name, as stored (`apiVersion` as last written).
    pub fn device_taint_rules(&self) -> BTreeMap<String, Value> {
        self.state().device_taint_rules.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ask(s: &ApiServer, method: &str, name: &str, content_type: &str, body: Value) -> (u16, Value) {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", content_type.parse().unwrap());
        let path = Path(("v1beta2".to_string(), "devicetaintrules".to_string(), name.to_string()));
        let method = method.parse().unwrap();
        let answer = rule(State(s.clone()), path, headers, method, body.to_string().into()).await;
        let code = answer.status().as_u16();
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX).await.unwrap();
        (code, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_rule_is_served_in_the_version_asked_and_changed_only_under_its_preconditions() {
        let s = ApiServer::new();
        s.serve_resource_api(&["v1", "v1beta2"], &["v1beta2"]);
        s.add_device_taint_rule(json!({"apiVersion": "resource.k8s.io/v1alpha3", "metadata": {"name": "r"}}));
        let (code, got) = ask(&s, "GET", "r", "", Value::Null).await;
        assert_eq!((code, got["apiVersion"].as_str()), (200, Some("resource.k8s.io/v1beta2")));
        let stale = json!({"metadata": {"resourceVersion": "0"}, "spec": {"taint": {"effect": "NoExecute"}}});
        assert_eq!(ask(&s, "PATCH", "r", MERGE, stale).await.0, 409);
        let rv = got["metadata"]["resourceVersion"].clone();
        let fresh = json!({"metadata": {"resourceVersion": rv}, "spec": {"taint": {"effect": "NoExecute"}}});
        assert_eq!(ask(&s, "PATCH", "r", "application/json-patch+json", fresh.clone()).await.0, 415);
        assert_eq!(ask(&s, "PATCH", "r", MERGE, fresh).await.0, 200);
        let wrong_uid = json!({"preconditions": {"uid": "someone-else"}});
        assert_eq!(ask(&s, "DELETE", "r", "", wrong_uid).await.0, 409);
        assert_eq!(ask(&s, "DELETE", "r", "", json!({"preconditions": {"uid": "uid-r"}})).await.0, 200);
        assert!(s.device_taint_rules().is_empty());
        assert_eq!(ask(&s, "GET", "r", "", Value::Null).await.0, 404);
    }

    #[tokio::test]
    async fn the_group_is_absent_until_served() {
        let s = ApiServer::new();
        assert_eq!(group(State(s.clone())).await.status(), 404);
        s.serve_resource_api(&["v1beta2"], &[]);
        assert_eq!(group(State(s.clone())).await.status(), 200);
        assert_eq!(version(State(s.clone()), Path("v1".into())).await.status(), 404);
        let (code, _) = ask(&s, "GET", "r", "", Value::Null).await;
        assert_eq!(code, 404, "no rules in a version that has none");
    }
}
