//! `external.metrics.k8s.io/v1beta1`, served from prometheus-adapter `externalRules` by
//! the same server, behind the same authentication and authorization:
//!
//! * `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?labelSelector=...`
//!   answers an `ExternalMetricValueList`, one item per series the rule's query returns,
//!   with `metricLabels` the series' labels. A metric discovery has not found is a 404
//!   Status; a known metric without series is an empty list (the HPA reads both as "no
//!   metric", never as zero).
//! * Authorization is what Kubernetes' request-info parser derives for that path: verb
//!   `list` on resource `{metric}` in the namespace (the HPA controller's role grants
//!   `list` on `external.metrics.k8s.io` `*`).
//! * Discovery (`/apis/external.metrics.k8s.io[/v1beta1]`) lists the metrics found, and
//!   the group is in `/apis`, only when external rules are configured.
//!
//! The JSON is shaped as the Go structs encode: `metricName`, `metricLabels` (an object,
//! keys sorted; `{}` where Go would write `null` for a scalar result), `timestamp`,
//! `window` only when set, `value` as a Quantity.

use std::collections::BTreeMap;

use percent_encoding::percent_decode_str;
use serde::Serialize;

use super::error::ApiError;
use super::types::{self, ApiResource, StatusDetails};
use crate::auth::authz::Attributes;
use crate::quantity::Quantity;
use crate::source::prometheus::read::ExternalValue;

/// The API group.
pub const GROUP: &str = "external.metrics.k8s.io";
/// The one version served.
pub const VERSION: &str = "v1beta1";
const PREFIX: &str = "/apis/external.metrics.k8s.io";

/// A parsed request path under the external group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalPath {
    /// `/apis/external.metrics.k8s.io`
    Group,
    /// `/apis/external.metrics.k8s.io/v1beta1`
    Version,
    /// A metric read.
    Metric {
        /// Namespace.
        namespace: String,
        /// Metric name.
        metric: String,
    },
}

/// Parses a raw path; `None` when it is not under the external group. Segments are
/// decoded and checked as for custom metrics.
pub fn parse(path: &str) -> Option<Result<ExternalPath, ApiError>> {
    let rest = path.strip_prefix(PREFIX)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    let rest = rest.trim_matches('/');
    if rest.is_empty() {
        return Some(Ok(ExternalPath::Group));
    }
    let segs: Vec<&str> = rest.split('/').collect();
    Some(match segs.as_slice() {
        [VERSION] => Ok(ExternalPath::Version),
        [VERSION, "namespaces", ns, metric] => metric_path(ns, metric),
        _ => Err(ApiError::not_found_path()),
    })
}

fn metric_path(ns: &str, metric: &str) -> Result<ExternalPath, ApiError> {
    let decode = |raw: &str| -> Result<String, ApiError> {
        let s = percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| ApiError::BadRequest(format!("invalid request path: segment {raw:?} is not UTF-8")))?;
        if s.is_empty() || s == "." || s == ".." || s.contains(['/', '\\']) || s.chars().any(char::is_control) {
            return Err(ApiError::BadRequest(format!("invalid request path: segment {raw:?}")));
        }
        Ok(s.into_owned())
    };
    let (namespace, metric) = (decode(ns)?, decode(metric)?);
    let ns_ok = namespace.len() <= 63 && crate::selector::is_dns1123_subdomain(&namespace) && !namespace.contains('.');
    if !ns_ok {
        return Err(ApiError::BadRequest(format!("invalid request path: invalid namespace {namespace:?}")));
    }
    let metric_ok = metric.len() <= 253
        && metric.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b':' | b'-' | b'.'))
        && !metric.starts_with(['-', '.']);
    if !metric_ok {
        return Err(ApiError::BadRequest(format!("invalid request path: invalid metric name {metric:?}")));
    }
    Ok(ExternalPath::Metric { namespace, metric })
}

/// The attributes Kubernetes derives for a read: `list` on the metric in the namespace.
pub fn attributes(namespace: &str, metric: &str) -> Attributes {
    Attributes::Resource {
        verb: "list".into(),
        namespace: Some(namespace.to_owned()),
        group: GROUP.into(),
        version: VERSION.into(),
        resource: metric.to_owned(),
        subresource: None,
        name: None,
    }
}

/// 404 for a metric no external rule found.
pub fn not_found(namespace: &str, metric: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("the server could not find the external metric {metric} in namespace {namespace}"),
        details: Some(StatusDetails { name: metric.to_owned(), group: GROUP.into(), kind: String::new() }),
    }
}

/// `GroupVersion` of the external group.
pub fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// The `APIGroup` document.
pub fn api_group(typed: bool) -> types::ApiGroup {
    types::ApiGroup::new(typed, GROUP, vec![(group_version(), VERSION.to_owned())])
}

/// The `APIResourceList` of v1beta1: one entry per metric found.
pub fn api_resource_list(metrics: &[String]) -> types::ApiResourceList {
    let resources = metrics
        .iter()
        .map(|m| ApiResource {
            name: m.clone(),
            singular_name: String::new(),
            namespaced: true,
            kind: "ExternalMetricValueList",
            verbs: vec!["get"],
        })
        .collect();
    types::ApiResourceList::new(group_version(), resources)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List<'a> {
    kind: &'static str,
    api_version: String,
    metadata: BTreeMap<(), ()>,
    items: Vec<Item<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Item<'a> {
    metric_name: &'a str,
    metric_labels: &'a BTreeMap<String, String>,
    timestamp: String,
    value: String,
}

/// The `ExternalMetricValueList` JSON of `values` (non-finite values left out).
pub fn metric_value_list(metric: &str, values: &[ExternalValue]) -> Vec<u8> {
    let items = values
        .iter()
        .filter_map(|v| {
            Some(Item {
                metric_name: metric,
                metric_labels: &v.labels,
                timestamp: types::rfc3339(v.timestamp_ms),
                value: Quantity::from_f64(v.value)?.to_string(),
            })
        })
        .collect();
    let list = List { kind: "ExternalMetricValueList", api_version: group_version(), metadata: BTreeMap::new(), items };
    serde_json::to_vec(&list).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parse("/apis/external.metrics.k8s.io").unwrap().unwrap(), ExternalPath::Group);
        assert_eq!(parse("/apis/external.metrics.k8s.io/v1beta1/").unwrap().unwrap(), ExternalPath::Version);
        assert_eq!(
            parse("/apis/external.metrics.k8s.io/v1beta1/namespaces/ai-inference/queue_length").unwrap().unwrap(),
            ExternalPath::Metric { namespace: "ai-inference".into(), metric: "queue_length".into() }
        );
        assert!(parse("/apis/external.metrics.k8s.iox").is_none());
        assert!(parse("/apis/custom.metrics.k8s.io/v1beta1").is_none());
        for bad in [
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/A_B/q",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q%2Fx",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/%2e%2e",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q%20x",
        ] {
            assert_eq!(parse(bad).unwrap().unwrap_err().code().as_u16(), 400, "{bad}");
        }
        for missing in [
            "/apis/external.metrics.k8s.io/v1beta2",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q/x",
        ] {
            assert_eq!(parse(missing).unwrap().unwrap_err().code().as_u16(), 404, "{missing}");
        }
    }

    #[test]
    fn lists_match_go_json() {
        let values = [
            ExternalValue {
                labels: [("queue".to_owned(), "inference".to_owned()), ("namespace".to_owned(), "ai".to_owned())]
                    .into(),
                value: 42.5,
                timestamp_ms: 1_714_564_800_000,
            },
            ExternalValue { labels: BTreeMap::new(), value: f64::NAN, timestamp_ms: 0 },
        ];
        let json = String::from_utf8(metric_value_list("queue_length", &values)).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},"items":[{"metricName":"queue_length","metricLabels":{"namespace":"ai","queue":"inference"},"timestamp":"2024-05-01T12:00:00Z","value":"42500m"}]}"#
        );
        let empty = String::from_utf8(metric_value_list("q", &[])).unwrap();
        assert!(empty.ends_with(r#""items":[]}"#), "{empty}");
    }

    #[test]
    fn discovery_documents() {
        let g = serde_json::to_value(api_group(true)).unwrap();
        assert_eq!(g["name"], GROUP);
        assert_eq!(g["preferredVersion"]["groupVersion"], "external.metrics.k8s.io/v1beta1");
        let l = serde_json::to_value(api_resource_list(&["queue_length".into()])).unwrap();
        assert_eq!(
            l["resources"][0],
            serde_json::json!({"name":"queue_length","singularName":"","namespaced":true,"kind":"ExternalMetricValueList","verbs":["get"]})
        );
        let Attributes::Resource { verb, resource, name, .. } = attributes("ai", "queue_length") else { panic!() };
        assert_eq!((verb.as_str(), resource.as_str(), name), ("list", "queue_length", None));
    }
}
