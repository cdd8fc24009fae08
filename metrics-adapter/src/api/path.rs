//! Request paths and query parameters of `custom.metrics.k8s.io`, parsed strictly from the
//! raw (still percent-encoded) request target.
//!
//! Segments are split on `/` before decoding, so an encoded slash (`%2F`) can never
//! create a segment boundary: a decoded segment that contains `/`, is `.` or `..`, is
//! empty, or holds control characters is refused with 400. `*` may arrive as `%2A`
//! (client-go escapes it). The shapes served are:
//!
//! * `namespaces/{ns}/metrics/{metric}`: a metric describing the namespace itself;
//! * `namespaces/{ns}/{resource}/{name}/{metric}`: namespaced objects (`{name}` may be `*`);
//! * `{resource}/{name}/{metric}`: root-scoped objects such as nodes.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

use super::types::Version;
use crate::selector::{ParseError, Selector, is_dns1123_subdomain};

/// What a metrics request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A metric describing a namespace object (`namespaces/{ns}/metrics/{metric}`).
    Namespace {
        /// The namespace, or `*` for every one.
        namespace: String,
        /// Metric name.
        metric: String,
    },
    /// A metric describing objects of a resource.
    Objects {
        /// The namespace for namespaced resources.
        namespace: Option<String>,
        /// Resource as written in the path (`pods`, `deployments.apps`).
        resource: String,
        /// Object name, or `None` for `*`.
        name: Option<String>,
        /// Metric name.
        metric: String,
    },
}

/// A parsed request path under `/apis/custom.metrics.k8s.io/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// `/apis/custom.metrics.k8s.io`
    Group,
    /// `/apis/custom.metrics.k8s.io/{version}`
    Version(Version),
    /// A metrics read.
    Metric(Version, Target),
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not a path this server serves.
    #[error("the server could not find the requested resource")]
    NotFound,
    /// A malformed or suspicious path.
    #[error("invalid request path: {0}")]
    Invalid(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, PathError>;

const PREFIX: &str = "/apis/custom.metrics.k8s.io";

/// Decodes one segment, refusing encoded separators, dot segments and control characters.
fn decode_segment(raw: &str) -> Result<String> {
    let decoded: Cow<'_, str> = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| PathError::Invalid(format!("segment {raw:?} is not valid UTF-8 once decoded")))?;
    if decoded.is_empty() {
        return Err(PathError::NotFound);
    }
    if decoded == "." || decoded == ".." {
        return Err(PathError::Invalid(format!("dot segment {raw:?} is not allowed")));
    }
    if decoded.contains(['/', '\\']) {
        return Err(PathError::Invalid(format!("segment {raw:?} contains an encoded path separator")));
    }
    if decoded.chars().any(char::is_control) {
        return Err(PathError::Invalid(format!("segment {raw:?} contains control characters")));
    }
    Ok(decoded.into_owned())
}

fn check_namespace(ns: &str) -> Result<()> {
    if ns.len() <= 63 && is_dns1123_subdomain(ns) && !ns.contains('.') {
        Ok(())
    } else {
        Err(PathError::Invalid(format!("invalid namespace {ns:?}")))
    }
}

fn check_resource(r: &str) -> Result<()> {
    if is_dns1123_subdomain(r) { Ok(()) } else { Err(PathError::Invalid(format!("invalid resource {r:?}"))) }
}

fn check_name(n: &str) -> Result<Option<String>> {
    if n == "*" {
        return Ok(None);
    }
    if n.len() <= 253 && !n.contains(char::is_whitespace) {
        Ok(Some(n.to_owned()))
    } else {
        Err(PathError::Invalid(format!("invalid object name {n:?}")))
    }
}

fn check_metric(m: &str) -> Result<String> {
    let ok = m.len() <= 253
        && m.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b':' | b'-' | b'.'))
        && !m.starts_with(['-', '.']);
    if ok { Ok(m.to_owned()) } else { Err(PathError::Invalid(format!("invalid metric name {m:?}"))) }
}

/// Parses a raw request path; `None` when it is not under `/apis/custom.metrics.k8s.io`.
pub fn parse(path: &str) -> Option<Result<ApiPath>> {
    let rest = path.strip_prefix(PREFIX)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    Some(parse_rest(rest))
}

fn parse_rest(rest: &str) -> Result<ApiPath> {
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Ok(ApiPath::Group);
    }
    let segs = rest.split('/').map(decode_segment).collect::<Result<Vec<_>>>()?;
    let version = Version::parse(&segs[0]).ok_or(PathError::NotFound)?;
    let s: Vec<&str> = segs[1..].iter().map(String::as_str).collect();
    let target = match s.as_slice() {
        [] => return Ok(ApiPath::Version(version)),
        // `namespaces/*/metrics/{metric}`: every namespace's own metric (a label selector
        // picks among them), as custom-metrics-apiserver routes it.
        ["namespaces", ns, "metrics", metric] => {
            if *ns != "*" {
                check_namespace(ns)?;
            }
            Target::Namespace { namespace: (*ns).to_owned(), metric: check_metric(metric)? }
        }
        ["namespaces", ns, resource, name, metric] => {
            check_namespace(ns)?;
            check_resource(resource)?;
            Target::Objects {
                namespace: Some((*ns).to_owned()),
                resource: (*resource).to_owned(),
                name: check_name(name)?,
                metric: check_metric(metric)?,
            }
        }
        [resource, name, metric] if *resource != "namespaces" => {
            check_resource(resource)?;
            Target::Objects {
                namespace: None,
                resource: (*resource).to_owned(),
                name: check_name(name)?,
                metric: check_metric(metric)?,
            }
        }
        _ => return Err(PathError::NotFound),
    };
    Ok(ApiPath::Metric(version, target))
}

/// The query parameters a metrics read understands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// `labelSelector`: which objects.
    pub label_selector: Selector,
    /// `metricLabelSelector`: which series of the metric.
    pub metric_selector: Selector,
}

/// A malformed query parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {param} {value:?}: {error}")]
pub struct QueryError {
    /// Parameter name.
    pub param: &'static str,
    /// Its value.
    pub value: String,
    /// The selector parse error.
    pub error: ParseError,
}

/// Parses the query string (first value wins when a parameter repeats, as in Go).
pub fn parse_query(query: Option<&str>) -> std::result::Result<Query, QueryError> {
    let mut label = None;
    let mut metric = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "labelSelector" if label.is_none() => label = Some(v.into_owned()),
            "metricLabelSelector" if metric.is_none() => metric = Some(v.into_owned()),
            _ => {}
        }
    }
    let parse = |param: &'static str, value: Option<String>| -> std::result::Result<Selector, QueryError> {
        let value = value.unwrap_or_default();
        Selector::parse(&value).map_err(|error| QueryError { param, value, error })
    };
    Ok(Query { label_selector: parse("labelSelector", label)?, metric_selector: parse("metricLabelSelector", metric)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(p: &str) -> ApiPath {
        match parse(p) {
            Some(Ok(a)) => a,
            other => panic!("{p}: {other:?}"),
        }
    }

    fn objects(ns: Option<&str>, resource: &str, name: Option<&str>, metric: &str) -> Target {
        Target::Objects {
            namespace: ns.map(str::to_owned),
            resource: resource.into(),
            name: name.map(str::to_owned),
            metric: metric.into(),
        }
    }

    #[test]
    fn served_shapes() {
        assert_eq!(ok("/apis/custom.metrics.k8s.io"), ApiPath::Group);
        assert_eq!(ok("/apis/custom.metrics.k8s.io/"), ApiPath::Group);
        assert_eq!(ok("/apis/custom.metrics.k8s.io/v1beta2"), ApiPath::Version(Version::V1Beta2));
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization"),
            ApiPath::Metric(Version::V1Beta2, objects(Some("ai-inference"), "pods", None, "gpu_utilization"))
        );
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta1/namespaces/ai-inference/pods/*/gpu_utilization"),
            ApiPath::Metric(Version::V1Beta1, objects(Some("ai-inference"), "pods", None, "gpu_utilization"))
        );
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai/deployments.apps/inference-pool/request_latency_ms"),
            ApiPath::Metric(
                Version::V1Beta2,
                objects(Some("ai"), "deployments.apps", Some("inference-pool"), "request_latency_ms")
            )
        );
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai/metrics/gpu_memory_used_bytes"),
            ApiPath::Metric(
                Version::V1Beta2,
                Target::Namespace { namespace: "ai".into(), metric: "gpu_memory_used_bytes".into() }
            )
        );
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta2/namespaces/%2A/metrics/quota_used"),
            ApiPath::Metric(Version::V1Beta2, Target::Namespace { namespace: "*".into(), metric: "quota_used".into() })
        );
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta2/nodes/gpu-node-1/gpu_utilization"),
            ApiPath::Metric(Version::V1Beta2, objects(None, "nodes", Some("gpu-node-1"), "gpu_utilization"))
        );
        assert_eq!(
            ok("/apis/custom.metrics.k8s.io/v1beta2/nodes/%2a/gpu_utilization"),
            ApiPath::Metric(Version::V1Beta2, objects(None, "nodes", None, "gpu_utilization"))
        );
    }

    #[test]
    fn other_prefixes_are_not_ours() {
        assert!(parse("/apis/custom.metrics.k8s.iox/v1beta2").is_none());
        assert!(parse("/apis").is_none());
        assert!(parse("/healthz").is_none());
    }

    #[test]
    fn unknown_shapes_are_not_found() {
        for p in [
            "/apis/custom.metrics.k8s.io/v1/namespaces/a/pods/x/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/x",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/m",
            "/apis/custom.metrics.k8s.io/v1beta2/pods",
            "/apis/custom.metrics.k8s.io/v1beta2/a/b/c/d/e/f",
            "/apis/custom.metrics.k8s.io/v1beta2//pods/x/m",
        ] {
            assert_eq!(parse(p), Some(Err(PathError::NotFound)), "{p}");
        }
    }

    #[test]
    fn path_tricks_are_refused() {
        for p in [
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/../pods/x/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/%2e%2e/pods/x/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/x%2Fy/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/x%5Cy/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/x%00/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/%ff/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/A_B/pods/x/m",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/x/m%20x",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/Pods/x/m",
            "/apis/custom.metrics.k8s.io/v1beta2/./nodes/x/m",
        ] {
            assert!(matches!(parse(p), Some(Err(PathError::Invalid(_)))), "{p}: {:?}", parse(p));
        }
    }

    #[test]
    fn query_selectors() {
        let q = parse_query(Some("labelSelector=app%3Dinference&metricLabelSelector=mig_profile+in+%283g.40gb%29"))
            .unwrap();
        assert_eq!(q.label_selector.to_string(), "app=inference");
        assert_eq!(q.metric_selector.to_string(), "mig_profile in (3g.40gb)");
        let q = parse_query(None).unwrap();
        assert!(q.label_selector.is_empty() && q.metric_selector.is_empty());
        let q = parse_query(Some("labelSelector=a%3D1&labelSelector=b%3D2&other=x")).unwrap();
        assert_eq!(q.label_selector.to_string(), "a=1");
        let e = parse_query(Some("metricLabelSelector=model+in+%28a")).unwrap_err();
        assert_eq!(e.param, "metricLabelSelector");
        assert_eq!(e.error.position, 11);
        assert!(e.to_string().contains("at position 11"), "{e}");
    }
}
