//! The routes of the health loop's in-test API server: Nodes (get, list by label
//! selector, metadata-only lists, strategic and JSON merge patches of the object and of
//! `/status`), ConfigMaps, Events, `resource.k8s.io` discovery, DeviceTaintRules and
//! ResourceSlices, and the pod watch the exporter opens.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::patch::{apply_node_patch, merge};
use super::{Cluster, MERGE, Request, STRATEGIC};
use crate::apiserver::selectors::Selector;

pub(super) fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code
    });
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn ok(body: &Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

pub(super) fn reason_for(code: u16) -> &'static str {
    match code {
        409 => "Conflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| decode(v))
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// Whether `labels` (an object's `metadata.labels`) satisfy `selector`, read as the
/// workspace's other in-test API server reads it ([`Selector`]); a selector that does
/// not parse matches nothing.
fn selector_matches(selector: &str, labels: &Value) -> bool {
    let labels: BTreeMap<String, String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    Selector::parse(selector).is_ok_and(|s| s.matches(&labels))
}

pub(super) fn serve(c: &mut Cluster, r: &Request, accept: &str) -> Response {
    let parts: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
    match (r.method.as_str(), parts.as_slice()) {
        ("GET", ["api", "v1", "nodes"]) => {
            let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
            let items: Vec<Value> =
                c.nodes.values().filter(|n| selector_matches(&selector, &n["metadata"]["labels"])).cloned().collect();
            let rv = c.resource_version.to_string();
            let listed = items.len();
            if let Some(last) = c.log.last_mut() {
                last.listed = listed;
            }
            if accept.contains("as=PartialObjectMetadataList") {
                let items: Vec<Value> = items
                    .iter()
                    .map(|n| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": n["metadata"]}))
                    .collect();
                ok(
                    &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": rv}, "items": items}),
                )
            } else {
                ok(
                    &json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": rv}, "items": items}),
                )
            }
        }
        // Attribution's ResourceSlice watch: 404 (no DRA, as on a 1.33 cluster) unless
        // the test serves slices.
        ("GET", ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let Some(items) = c.slices.clone() else {
                return status(404, "NotFound", "the server could not find the requested resource");
            };
            let kind = "ResourceSliceList";
            list_or_quiet_watch(c, &r.query, &json!({"apiVersion": "resource.k8s.io/v1", "kind": kind}), items)
        }
        ("GET", ["api", "v1", "pods"]) => {
            list_or_quiet_watch(c, &r.query, &json!({"apiVersion": "v1", "kind": "PodList"}), Vec::new())
        }
        ("GET", ["api", "v1", "nodes", name]) => match c.nodes.get(*name) {
            Some(n) => ok(n),
            None => status(404, "NotFound", &format!("nodes \"{name}\" not found")),
        },
        ("PATCH", ["api", "v1", "nodes", name, rest @ ..]) => {
            let subresource = match rest {
                [] => false,
                ["status"] => true,
                _ => return status(404, "NotFound", "no such subresource"),
            };
            let merge = match r.content_type.as_str() {
                STRATEGIC => false,
                MERGE => true,
                other => return status(415, "UnsupportedMediaType", &format!("{other} is not supported here")),
            };
            let manager = query_param(&r.query, "fieldManager").unwrap_or_else(|| "unknown".into());
            let rv = c.next_rv();
            let Some(node) = c.nodes.get_mut(*name) else {
                return status(404, "NotFound", &format!("nodes \"{name}\" not found"));
            };
            let mut patch = r.body.clone();
            if let Some(want) = patch.pointer("/metadata/resourceVersion").cloned() {
                if want != node["metadata"]["resourceVersion"] {
                    return status(
                        409,
                        "Conflict",
                        "Operation cannot be fulfilled on nodes: the object has been modified; please apply your changes to the latest version and try again",
                    );
                }
                patch["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            }
            if subresource {
                patch = json!({"status": patch.get("status").cloned().unwrap_or(Value::Null)});
            } else if let Some(o) = patch.as_object_mut() {
                o.remove("status");
            }
            apply_node_patch(node, &patch, merge, !subresource, &manager);
            node["metadata"]["resourceVersion"] = json!(rv);
            ok(node)
        }
        ("GET", ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            match c.config_maps.get(&(ns.to_string(), name.to_string())) {
                Some(m) => ok(m),
                None => status(404, "NotFound", &format!("configmaps \"{name}\" not found")),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "configmaps"]) => {
            let name = r.body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let key = (ns.to_string(), name.clone());
            if c.config_maps.contains_key(&key) {
                return status(409, "AlreadyExists", &format!("configmaps \"{name}\" already exists"));
            }
            let rv = c.next_rv();
            let mut m = r.body.clone();
            m["metadata"]["resourceVersion"] = json!(rv);
            m["metadata"]["namespace"] = json!(ns);
            c.config_maps.insert(key, m.clone());
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], m.to_string()).into_response()
        }
        ("PUT", ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            let key = (ns.to_string(), name.to_string());
            let Some(current) = c.config_maps.get(&key) else {
                return status(404, "NotFound", &format!("configmaps \"{name}\" not found"));
            };
            if r.body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return status(
                    409,
                    "Conflict",
                    "Operation cannot be fulfilled on configmaps: the object has been modified; please apply your changes to the latest version and try again",
                );
            }
            let rv = c.next_rv();
            let mut m = r.body.clone();
            m["metadata"]["resourceVersion"] = json!(rv);
            c.config_maps.insert(key, m.clone());
            ok(&m)
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            let name = r.body["metadata"]["name"].as_str().unwrap_or("").to_string();
            if c.events.iter().any(|e| e["metadata"]["name"] == name.as_str()) {
                return status(409, "AlreadyExists", &format!("events \"{name}\" already exists"));
            }
            let rv = c.next_rv();
            let mut e = r.body.clone();
            e["metadata"]["resourceVersion"] = json!(rv);
            e["metadata"]["namespace"] = json!(ns);
            c.events.push(e.clone());
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], e.to_string()).into_response()
        }
        (_, ["apis", "resource.k8s.io", rest @ ..]) => serve_resource(c, r, rest),
        _ => {
            let line = format!("{}: no such route in the test API server", r.describe());
            c.failures.push(line);
            status(404, "NotFound", "no such route")
        }
    }
}

/// `resource.k8s.io`: discovery and DeviceTaintRules, in the versions served.
fn serve_resource(c: &mut Cluster, r: &Request, rest: &[&str]) -> Response {
    match (r.method.as_str(), rest) {
        ("GET", []) => {
            if c.resource_versions.is_empty() {
                return status(404, "NotFound", "the server could not find the requested resource");
            }
            let versions: Vec<Value> = c
                .resource_versions
                .iter()
                .map(|v| json!({"groupVersion": format!("resource.k8s.io/{v}"), "version": v}))
                .collect();
            ok(&json!({"kind": "APIGroup", "apiVersion": "v1", "name": "resource.k8s.io",
                "versions": versions, "preferredVersion": versions[0]}))
        }
        ("GET", [version]) if c.resource_versions.iter().any(|v| v == version) => {
            let mut resources = vec![json!({"name": "resourceslices", "singularName": "resourceslice",
                "namespaced": false, "kind": "ResourceSlice", "verbs": ["get", "list", "watch"]})];
            if c.rule_versions.iter().any(|v| v == version) {
                resources.push(json!({"name": "devicetaintrules", "singularName": "devicetaintrule",
                    "namespaced": false, "kind": "DeviceTaintRule",
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}));
            }
            ok(&json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": format!("resource.k8s.io/{version}"), "resources": resources}))
        }
        (_, [version, "devicetaintrules", tail @ ..]) if c.rule_versions.iter().any(|v| v == version) => {
            let version = version.to_string();
            match tail {
                [] => serve_rules(c, r, &version),
                [name] => serve_rule(c, r, &version, name),
                _ => status(404, "NotFound", "no such subresource"),
            }
        }
        _ => status(404, "NotFound", "the server could not find the requested resource"),
    }
}

fn as_version(rule: &Value, version: &str) -> Value {
    let mut rule = rule.clone();
    rule["apiVersion"] = json!(format!("resource.k8s.io/{version}"));
    rule
}

fn conflict(what: &str) -> Response {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on devicetaintrules.resource.k8s.io \"{what}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
    )
}

/// `.../devicetaintrules`: list (label selector) and create.
fn serve_rules(c: &mut Cluster, r: &Request, version: &str) -> Response {
    match r.method.as_str() {
        "GET" => {
            let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
            let items: Vec<Value> = c
                .rules
                .values()
                .filter(|rule| selector_matches(&selector, &rule["metadata"]["labels"]))
                .map(|rule| as_version(rule, version))
                .collect();
            if let Some(last) = c.log.last_mut() {
                last.listed = items.len();
            }
            let rv = c.resource_version.to_string();
            ok(&json!({"apiVersion": format!("resource.k8s.io/{version}"), "kind": "DeviceTaintRuleList",
                "metadata": {"resourceVersion": rv}, "items": items}))
        }
        "POST" => {
            if r.body["apiVersion"] != json!(format!("resource.k8s.io/{version}")) {
                return status(400, "BadRequest", "the body's apiVersion is not the path's");
            }
            let name = r.body["metadata"]["name"].as_str().unwrap_or("").to_string();
            if c.rules.contains_key(&name) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("devicetaintrules.resource.k8s.io \"{name}\" already exists"),
                );
            }
            let rv = c.next_rv();
            let mut rule = r.body.clone();
            rule["metadata"]["resourceVersion"] = json!(rv);
            rule["metadata"]["uid"] = json!(format!("uid-{name}-{rv}"));
            c.rules.insert(name, rule.clone());
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], rule.to_string()).into_response()
        }
        _ => status(405, "MethodNotAllowed", "not on a collection"),
    }
}

/// `.../devicetaintrules/<name>`: get, JSON merge patch, delete.
fn serve_rule(c: &mut Cluster, r: &Request, version: &str, name: &str) -> Response {
    let Some(current) = c.rules.get(name).cloned() else {
        return status(404, "NotFound", &format!("devicetaintrules.resource.k8s.io \"{name}\" not found"));
    };
    match r.method.as_str() {
        "GET" => ok(&as_version(&current, version)),
        "PATCH" => {
            if r.content_type != MERGE {
                return status(415, "UnsupportedMediaType", "only merge patches here");
            }
            let mut patch = r.body.clone();
            if let Some(want) = patch.pointer("/metadata/resourceVersion").cloned() {
                if want != current["metadata"]["resourceVersion"] {
                    return conflict(name);
                }
                patch["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            }
            let rv = c.next_rv();
            let mut rule = current;
            merge(&mut rule, &patch, "", true);
            rule["metadata"]["resourceVersion"] = json!(rv);
            c.rules.insert(name.to_string(), rule.clone());
            ok(&as_version(&rule, version))
        }
        "DELETE" => {
            let pre = &r.body["preconditions"];
            let uid_ok = pre.get("uid").is_none_or(|u| *u == current["metadata"]["uid"]);
            let rv_ok = pre.get("resourceVersion").is_none_or(|v| *v == current["metadata"]["resourceVersion"]);
            if !uid_ok || !rv_ok {
                return conflict(name);
            }
            c.rules.remove(name);
            ok(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "resource.k8s.io", "kind": "devicetaintrules"}}))
        }
        _ => status(405, "MethodNotAllowed", "not on a rule"),
    }
}

/// A list of `items`, or a watch on which nothing ever changes: it stays open until its
/// timeout or the server stops.
fn list_or_quiet_watch(c: &Cluster, query: &str, list: &Value, items: Vec<Value>) -> Response {
    let watch = query_param(query, "watch").is_some_and(|w| w == "true" || w == "1");
    if !watch {
        let mut list = list.clone();
        list["metadata"] = json!({"resourceVersion": c.resource_version.to_string()});
        list["items"] = json!(items);
        return ok(&list);
    }
    let seconds = query_param(query, "timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(290);
    let mut closing = c.closing.clone().unwrap();
    let end = async move {
        tokio::select! {
            _ = closing.wait_for(|c| *c) => {}
            () = tokio::time::sleep(Duration::from_secs(seconds)) => {}
        }
        Ok::<_, std::convert::Infallible>(Bytes::new())
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from_stream(futures::stream::once(end)))
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::gpu_node;

    #[test]
    fn selectors_and_query_strings_are_read_as_the_api_server_reads_them() {
        let labels = &gpu_node("x")["metadata"]["labels"];
        assert!(selector_matches("nvidia.com/gpu.present=true", labels));
        assert!(selector_matches("nvidia.com/gpu.present", labels));
        assert!(!selector_matches("nvidia.com/gpu.present!=true", labels));
        assert!(!selector_matches("nvidia.com/gpu.present=false", labels));
        assert!(!selector_matches("a b=c", labels), "a selector that does not parse matches nothing");
        assert_eq!(decode("nvidia.com%2Fgpu.present%3Dtrue"), "nvidia.com/gpu.present=true");
        assert_eq!(query_param("watch=1&labelSelector=a%3Db", "labelSelector").as_deref(), Some("a=b"));
    }
}
