//! Minimal OpenAPI documents (`/openapi/v2`, `/openapi/v3` and its per-version documents):
//! enough for the aggregator to merge and for clients to see the read paths and the
//! `MetricValueList` schema of each version.

use serde_json::{Value, json};

use super::types::{GROUP, Version};

fn metric_value_list_schema(version: Version) -> Value {
    let item = match version {
        Version::V1Beta1 => json!({
            "type": "object",
            "required": ["describedObject", "metricName", "timestamp", "value"],
            "properties": {
                "describedObject": {"type": "object"},
                "metricName": {"type": "string"},
                "timestamp": {"type": "string", "format": "date-time"},
                "window": {"type": "integer", "format": "int64"},
                "value": {"type": "string"},
                "selector": {"type": "object"}
            }
        }),
        Version::V1Beta2 => json!({
            "type": "object",
            "required": ["describedObject", "metric", "timestamp", "value"],
            "properties": {
                "describedObject": {"type": "object"},
                "metric": {"type": "object", "properties": {"name": {"type": "string"}, "selector": {"type": "object"}}},
                "timestamp": {"type": "string", "format": "date-time"},
                "windowSeconds": {"type": "integer", "format": "int64"},
                "value": {"type": "string"}
            }
        }),
    };
    json!({
        "type": "object",
        "required": ["items"],
        "properties": {
            "kind": {"type": "string"},
            "apiVersion": {"type": "string"},
            "metadata": {"type": "object"},
            "items": {"type": "array", "items": item}
        },
        "x-kubernetes-group-version-kind": [{"group": GROUP, "version": version.as_str(), "kind": "MetricValueList"}]
    })
}

fn def_name(version: Version) -> String {
    format!("io.k8s.metrics.pkg.apis.custom_metrics.{}.MetricValueList", version.as_str())
}

fn paths(version: Version, schema_ref: &str, v3: bool) -> Value {
    let gv = version.group_version();
    let response = if v3 {
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}})
    } else {
        json!({"200": {"description": "OK", "schema": {"$ref": schema_ref}}})
    };
    let op = |id: &str| json!({"get": {"operationId": id, "produces": ["application/json"], "responses": response}});
    let v = version.as_str();
    json!({
        format!("/apis/{gv}/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}"): op(&format!("getNamespacedMetric{v}")),
        format!("/apis/{gv}/namespaces/{{namespace}}/metrics/{{metric}}"): op(&format!("getNamespaceMetric{v}")),
        format!("/apis/{gv}/{{resource}}/{{name}}/{{metric}}"): op(&format!("getRootScopedMetric{v}")),
    })
}

const EXTERNAL_DEF: &str = "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList";

fn external_schema() -> Value {
    json!({
        "type": "object",
        "required": ["items"],
        "properties": {
            "kind": {"type": "string"},
            "apiVersion": {"type": "string"},
            "metadata": {"type": "object"},
            "items": {"type": "array", "items": {
                "type": "object",
                "required": ["metricName", "metricLabels", "timestamp", "value"],
                "properties": {
                    "metricName": {"type": "string"},
                    "metricLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "timestamp": {"type": "string", "format": "date-time"},
                    "window": {"type": "integer", "format": "int64"},
                    "value": {"type": "string"}
                }
            }}
        },
        "x-kubernetes-group-version-kind": [{"group": "external.metrics.k8s.io", "version": "v1beta1", "kind": "ExternalMetricValueList"}]
    })
}

fn external_paths(schema_ref: &str, v3: bool) -> Value {
    let response = if v3 {
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}})
    } else {
        json!({"200": {"description": "OK", "schema": {"$ref": schema_ref}}})
    };
    json!({
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}":
            {"get": {"operationId": "listExternalMetricv1beta1", "produces": ["application/json"], "responses": response}}
    })
}

/// The OpenAPI 3.0 document of `external.metrics.k8s.io/v1beta1`.
pub fn v3_external() -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "gpu-metrics-adapter", "version": env!("CARGO_PKG_VERSION")},
        "paths": external_paths(&format!("#/components/schemas/{EXTERNAL_DEF}"), true),
        "components": {"schemas": {EXTERNAL_DEF: external_schema()}},
    })
}

/// The Swagger 2.0 document (with the external group when it is served).
pub fn v2(external: bool) -> Value {
    let mut all_paths = serde_json::Map::new();
    let mut definitions = serde_json::Map::new();
    for v in Version::PREFERRED_FIRST {
        let name = def_name(v);
        if let Value::Object(p) = paths(v, &format!("#/definitions/{name}"), false) {
            all_paths.extend(p);
        }
        definitions.insert(name, metric_value_list_schema(v));
    }
    if external {
        if let Value::Object(p) = external_paths(&format!("#/definitions/{EXTERNAL_DEF}"), false) {
            all_paths.extend(p);
        }
        definitions.insert(EXTERNAL_DEF.to_owned(), external_schema());
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "gpu-metrics-adapter", "version": env!("CARGO_PKG_VERSION")},
        "paths": all_paths,
        "definitions": definitions,
    })
}

/// The OpenAPI 3.0 document of one group version.
pub fn v3_group_version(version: Version) -> Value {
    let name = def_name(version);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "gpu-metrics-adapter", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths(version, &format!("#/components/schemas/{name}"), true),
        "components": {"schemas": {name: metric_value_list_schema(version)}},
    })
}

/// The `/openapi/v3` index, with a content hash per group version.
pub fn v3_index(external: bool) -> Value {
    let mut docs: Vec<(String, Value)> =
        Version::PREFERRED_FIRST.into_iter().map(|v| (v.group_version(), v3_group_version(v))).collect();
    if external {
        docs.push(("external.metrics.k8s.io/v1beta1".to_owned(), v3_external()));
    }
    let mut paths = serde_json::Map::new();
    for (gv, doc) in docs {
        let doc = serde_json::to_vec(&doc).unwrap_or_default();
        let digest = ring::digest::digest(&ring::digest::SHA256, &doc);
        let hash: String = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
        paths.insert(format!("apis/{gv}"), json!({"serverRelativeURL": format!("/openapi/v3/apis/{gv}?hash={hash}")}));
    }
    json!({ "paths": paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_name_both_versions() {
        let v2 = v2(false);
        assert!(v2["definitions"].get(EXTERNAL_DEF).is_none());
        assert!(super::v2(true)["definitions"][EXTERNAL_DEF].is_object());
        assert!(v3_index(true)["paths"]["apis/external.metrics.k8s.io/v1beta1"].is_object());
        assert_eq!(v3_external()["openapi"], "3.0.0");
        assert_eq!(v2["swagger"], "2.0");
        assert!(v2["definitions"][def_name(Version::V1Beta1)].is_object());
        assert!(v2["paths"]["/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/metrics/{metric}"].is_object());
        let idx = v3_index(false);
        let url = idx["paths"]["apis/custom.metrics.k8s.io/v1beta2"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/apis/custom.metrics.k8s.io/v1beta2?hash="));
        let doc = v3_group_version(Version::V1Beta1);
        assert_eq!(doc["openapi"], "3.0.0");
        assert!(doc["components"]["schemas"][def_name(Version::V1Beta1)]["properties"]["items"].is_object());
    }
}
