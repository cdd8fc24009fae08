//! The wire types of `custom.metrics.k8s.io` and `meta/v1`, shaped exactly as the Go
//! structs serialize: `MetricValueList` in v1beta1 (`metricName`, `window`, `selector`
//! written even when null) and v1beta2 (`metric.name`, `metric.selector` also written as
//! `null` when unset: k8s.io/metrics v0.30.0 `pkg/apis/custom_metrics/v1beta2/types.go`
//! declares it `json:"selector"`, without `omitempty`, and prometheus-adapter writes it so;
//! `windowSeconds`), `ObjectReference` with `apiVersion` as Go adapters write it (`/v1` for
//! the core group), `metav1.Time` as RFC 3339 seconds in UTC, `metav1.Status`, and the
//! discovery documents (`APIGroupList`, `APIGroup`, `APIResourceList`).

use std::fmt::Write as _;

use serde::Serialize;

use crate::quantity::Quantity;
use crate::selector::LabelSelector;

/// The API group this server serves.
pub const GROUP: &str = "custom.metrics.k8s.io";

/// A served version of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// `v1beta1`
    V1Beta1,
    /// `v1beta2` (preferred)
    V1Beta2,
}

impl Version {
    /// Versions in order of preference.
    pub const PREFERRED_FIRST: [Version; 2] = [Version::V1Beta2, Version::V1Beta1];

    /// `v1beta1` or `v1beta2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1Beta1 => "v1beta1",
            Version::V1Beta2 => "v1beta2",
        }
    }

    /// Parses a version path segment.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "v1beta1" => Some(Version::V1Beta1),
            "v1beta2" => Some(Version::V1Beta2),
            _ => None,
        }
    }

    /// `custom.metrics.k8s.io/<version>`.
    pub fn group_version(self) -> String {
        format!("{GROUP}/{}", self.as_str())
    }
}

/// What all items of one `MetricValueList` share: the described objects' kind, namespace
/// and `apiVersion` (as Go adapters write it: `/v1` for the core group), the metric name
/// and the metric selector the request used.
#[derive(Debug, Clone, Copy)]
pub struct ListContext<'a> {
    /// e.g. `Pod`
    pub kind: &'a str,
    /// Set for namespaced objects.
    pub namespace: Option<&'a str>,
    /// `group/version`.
    pub api_version: &'a str,
    /// Metric name.
    pub metric: &'a str,
    /// The `metricLabelSelector` of the request, if any.
    pub selector: Option<&'a LabelSelector>,
}

/// One object's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Item<'a> {
    /// Object name.
    pub name: &'a str,
    /// Observation time, ms since the epoch.
    pub timestamp_ms: i64,
    /// Window the value was computed over, if it is a rate.
    pub window_seconds: Option<i64>,
    /// The value.
    pub value: Quantity,
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push_str(s);
    } else {
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

/// Serializes a `MetricValueList` in the given version, field for field as the Go structs
/// encode: v1beta1 items are `describedObject`, `metricName`, `timestamp`, `window`
/// (omitted when unset), `value`, `selector` (written as `null` when unset); v1beta2 items
/// are `describedObject`, `metric` (`name`, `selector`, `null` when unset), `timestamp`,
/// `windowSeconds` (omitted when unset), `value`. The parts every item shares are encoded
/// once per list.
pub fn metric_value_list<'a>(
    version: Version,
    ctx: &ListContext<'_>,
    items: impl ExactSizeIterator<Item = Item<'a>>,
) -> Vec<u8> {
    let mut prefix = String::from("{\"describedObject\":{\"kind\":");
    push_json_str(&mut prefix, ctx.kind);
    if let Some(ns) = ctx.namespace {
        prefix.push_str(",\"namespace\":");
        push_json_str(&mut prefix, ns);
    }
    prefix.push_str(",\"name\":");
    let selector = ctx.selector.map(|s| serde_json::to_string(s).unwrap_or_else(|_| "null".into()));
    let mut middle = String::from(",\"apiVersion\":");
    push_json_str(&mut middle, ctx.api_version);
    middle.push_str("},");
    match version {
        Version::V1Beta1 => {
            middle.push_str("\"metricName\":");
            push_json_str(&mut middle, ctx.metric);
        }
        Version::V1Beta2 => {
            middle.push_str("\"metric\":{\"name\":");
            push_json_str(&mut middle, ctx.metric);
            middle.push_str(",\"selector\":");
            middle.push_str(selector.as_deref().unwrap_or("null"));
            middle.push('}');
        }
    }
    middle.push_str(",\"timestamp\":\"");
    let window_key = match version {
        Version::V1Beta1 => ",\"window\":",
        Version::V1Beta2 => ",\"windowSeconds\":",
    };
    let suffix = match (version, &selector) {
        (Version::V1Beta1, Some(sel)) => format!(",\"selector\":{sel}}}"),
        (Version::V1Beta1, None) => ",\"selector\":null}".to_owned(),
        (Version::V1Beta2, _) => "}".to_owned(),
    };

    let mut out = String::with_capacity(96 + items.len() * (prefix.len() + middle.len() + suffix.len() + 64));
    out.push_str("{\"kind\":\"MetricValueList\",\"apiVersion\":");
    push_json_str(&mut out, &version.group_version());
    out.push_str(",\"metadata\":{},\"items\":[");
    let mut last_second: Option<(i64, String)> = None;
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&prefix);
        push_json_str(&mut out, item.name);
        out.push_str(&middle);
        let second = item.timestamp_ms.div_euclid(1000);
        match &last_second {
            Some((s, text)) if *s == second => out.push_str(text),
            _ => {
                let text = rfc3339(item.timestamp_ms);
                out.push_str(&text);
                last_second = Some((second, text));
            }
        }
        out.push('"');
        if let Some(w) = item.window_seconds {
            out.push_str(window_key);
            let _ = write!(out, "{w}");
        }
        out.push_str(",\"value\":\"");
        let _ = write!(out, "{}", item.value);
        out.push('"');
        out.push_str(&suffix);
    }
    out.push_str("]}");
    out.into_bytes()
}

/// `metav1.Time` text: RFC 3339 with seconds, UTC (`2024-05-01T12:00:00Z`).
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatusDetails {
    /// Object name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Resource (Go puts the resource in `kind` for NotFound errors).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

/// `metav1.Status` for a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    kind: &'static str,
    api_version: &'static str,
    metadata: StatusMeta,
    status: &'static str,
    /// Human readable description.
    pub message: String,
    /// Machine readable reason (`NotFound`, `Forbidden`, ...).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub reason: &'static str,
    /// Extra details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// HTTP status code.
    pub code: u16,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
struct StatusMeta {}

impl Status {
    /// A failure status.
    pub fn failure(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: "Status",
            api_version: "v1",
            metadata: StatusMeta {},
            status: "Failure",
            message: message.into(),
            reason,
            details: None,
            code,
        }
    }

    /// Adds details.
    pub fn with_details(mut self, details: StatusDetails) -> Self {
        self.details = Some(details);
        self
    }
}

/// `metav1.GroupVersionForDiscovery`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionForDiscovery {
    /// `group/version`
    pub group_version: String,
    /// `version`
    pub version: String,
}

/// `metav1.APIGroup`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiGroup {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    name: &'static str,
    versions: Vec<GroupVersionForDiscovery>,
    preferred_version: GroupVersionForDiscovery,
}

fn gv(v: Version) -> GroupVersionForDiscovery {
    GroupVersionForDiscovery { group_version: v.group_version(), version: v.as_str().to_owned() }
}

impl ApiGroup {
    /// A group with `versions` (`(group/version, version)`, preferred first); `typed` adds
    /// kind/apiVersion (a top-level document rather than an entry of `/apis`).
    pub fn new(typed: bool, name: &'static str, versions: Vec<(String, String)>) -> Self {
        let versions: Vec<GroupVersionForDiscovery> = versions
            .into_iter()
            .map(|(group_version, version)| GroupVersionForDiscovery { group_version, version })
            .collect();
        let preferred_version = versions
            .first()
            .cloned()
            .unwrap_or(GroupVersionForDiscovery { group_version: String::new(), version: String::new() });
        ApiGroup {
            kind: typed.then_some("APIGroup"),
            api_version: typed.then_some("v1"),
            name,
            versions,
            preferred_version,
        }
    }
}

/// The `APIGroup` document for this group; `typed` adds kind/apiVersion (top level).
pub fn api_group(typed: bool) -> ApiGroup {
    let versions = Version::PREFERRED_FIRST.into_iter().map(gv).map(|g| (g.group_version, g.version)).collect();
    ApiGroup::new(typed, GROUP, versions)
}

/// `metav1.APIGroupList` with this group.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiGroupList {
    kind: &'static str,
    api_version: &'static str,
    groups: Vec<ApiGroup>,
}

/// The `/apis` document: this group, and `more` groups after it.
pub fn api_group_list(more: Vec<ApiGroup>) -> ApiGroupList {
    let mut groups = vec![api_group(false)];
    groups.extend(more);
    ApiGroupList { kind: "APIGroupList", api_version: "v1", groups }
}

/// `metav1.APIResource`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResource {
    /// `pods/gpu_utilization`
    pub name: String,
    /// Always empty (Go writes it anyway).
    pub singular_name: String,
    /// Whether the described resource is namespaced.
    pub namespaced: bool,
    /// `MetricValueList`
    pub kind: &'static str,
    /// `["get"]`
    pub verbs: Vec<&'static str>,
}

impl ApiResource {
    /// A discovery entry for `resource/metric`.
    pub fn metric(resource: &str, metric: &str, namespaced: bool) -> Self {
        Self {
            name: format!("{resource}/{metric}"),
            singular_name: String::new(),
            namespaced,
            kind: "MetricValueList",
            verbs: vec!["get"],
        }
    }
}

/// `metav1.APIResourceList`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceList {
    kind: &'static str,
    api_version: &'static str,
    group_version: String,
    resources: Vec<ApiResource>,
}

impl ApiResourceList {
    /// The discovery document of `group_version`.
    pub fn new(group_version: String, resources: Vec<ApiResource>) -> Self {
        ApiResourceList { kind: "APIResourceList", api_version: "v1", group_version, resources }
    }
}

/// The discovery document of one version.
pub fn api_resource_list(version: Version, resources: Vec<ApiResource>) -> ApiResourceList {
    ApiResourceList::new(version.group_version(), resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::Selector;

    fn ctx(selector: Option<&LabelSelector>) -> ListContext<'_> {
        ListContext {
            kind: "Pod",
            namespace: Some("ai-inference"),
            api_version: "/v1",
            metric: "gpu_utilization",
            selector,
        }
    }

    fn item(window: Option<i64>) -> Item<'static> {
        Item {
            name: "inference-pool-0",
            timestamp_ms: 1_714_564_800_123,
            window_seconds: window,
            value: Quantity::from_f64(0.85).unwrap(),
        }
    }

    fn list(version: Version, ctx: &ListContext<'_>, items: Vec<Item<'_>>) -> String {
        String::from_utf8(metric_value_list(version, ctx, items.into_iter())).unwrap()
    }

    #[test]
    fn v1beta2_list_matches_go_json() {
        let json = list(Version::V1Beta2, &ctx(None), vec![item(None)]);
        assert_eq!(
            json,
            r#"{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","metadata":{},"items":[{"describedObject":{"kind":"Pod","namespace":"ai-inference","name":"inference-pool-0","apiVersion":"/v1"},"metric":{"name":"gpu_utilization","selector":null},"timestamp":"2024-05-01T12:00:00Z","value":"850m"}]}"#
        );
        let sel = Selector::parse("mig_profile=3g.40gb").unwrap().to_label_selector();
        let json = list(Version::V1Beta2, &ctx(Some(&sel)), vec![item(Some(60))]);
        assert!(
            json.contains(
                r#""metric":{"name":"gpu_utilization","selector":{"matchLabels":{"mig_profile":"3g.40gb"}}}"#
            ),
            "{json}"
        );
        assert!(json.contains(r#""windowSeconds":60,"value":"850m""#), "{json}");
    }

    #[test]
    fn v1beta1_list_matches_go_json() {
        let json = list(Version::V1Beta1, &ctx(None), vec![item(Some(30))]);
        assert_eq!(
            json,
            r#"{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta1","metadata":{},"items":[{"describedObject":{"kind":"Pod","namespace":"ai-inference","name":"inference-pool-0","apiVersion":"/v1"},"metricName":"gpu_utilization","timestamp":"2024-05-01T12:00:00Z","window":30,"value":"850m","selector":null}]}"#
        );
        let empty = list(Version::V1Beta1, &ctx(None), vec![]);
        assert_eq!(
            empty,
            r#"{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta1","metadata":{},"items":[]}"#
        );
    }

    #[test]
    fn lists_are_valid_json_whatever_the_names() {
        let sel = Selector::parse("a in (x,y),!b").unwrap().to_label_selector();
        let nodes =
            ListContext { kind: "Node", namespace: None, api_version: "/v1", metric: "m\"x", selector: Some(&sel) };
        let names = ["plain", "quo\"te", "back\\slash", "ctl\u{1}\n", "ünï"];
        for version in [Version::V1Beta1, Version::V1Beta2] {
            let items: Vec<Item<'_>> = names
                .iter()
                .enumerate()
                .map(|(i, n)| Item {
                    name: n,
                    timestamp_ms: 1000 * i as i64,
                    window_seconds: Some(i as i64),
                    value: Quantity::from_i64(i as i64),
                })
                .collect();
            let v: serde_json::Value = serde_json::from_str(&list(version, &nodes, items)).unwrap();
            let got: Vec<&str> =
                v["items"].as_array().unwrap().iter().map(|i| i["describedObject"]["name"].as_str().unwrap()).collect();
            assert_eq!(got, names);
            assert!(v["items"][0]["describedObject"].get("namespace").is_none());
            assert_eq!(v["items"][2]["timestamp"], "1970-01-01T00:00:02Z");
        }
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199_999), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(4_102_444_800_000), "2100-01-01T00:00:00Z");
        assert_eq!(rfc3339(-1000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn status_matches_go_json() {
        let s = Status::failure(404, "NotFound", "the server could not find the metric x for pods")
            .with_details(StatusDetails { name: String::new(), group: GROUP.into(), kind: "pods".into() });
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the metric x for pods","reason":"NotFound","details":{"group":"custom.metrics.k8s.io","kind":"pods"},"code":404}"#
        );
    }

    #[test]
    fn discovery_documents() {
        let list = serde_json::to_value(api_group_list(Vec::new())).unwrap();
        assert_eq!(list["kind"], "APIGroupList");
        assert_eq!(list["groups"][0]["name"], GROUP);
        assert!(list["groups"][0].get("kind").is_none());
        assert_eq!(list["groups"][0]["preferredVersion"]["version"], "v1beta2");
        assert_eq!(list["groups"][0]["versions"][1]["groupVersion"], "custom.metrics.k8s.io/v1beta1");
        let group = serde_json::to_value(api_group(true)).unwrap();
        assert_eq!(group["kind"], "APIGroup");
        let res = api_resource_list(Version::V1Beta1, vec![ApiResource::metric("pods", "gpu_utilization", true)]);
        assert_eq!(
            serde_json::to_string(&res).unwrap(),
            r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"custom.metrics.k8s.io/v1beta1","resources":[{"name":"pods/gpu_utilization","singularName":"","namespaced":true,"kind":"MetricValueList","verbs":["get"]}]}"#
        );
    }
}
