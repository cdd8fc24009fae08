//! The rules file of the Prometheus source: which custom metric names it serves, for which
//! resources, and the PromQL template that computes them. YAML:
//!
//! ```yaml
//! rules:
//!   - name: request_latency_ms            # the custom metric name the HPA asks for
//!     query: 'avg by (<<.GroupBy>>) (request_latency_ms{<<.LabelMatchers>>})'
//!     resources:                          # resource -> the Prometheus label naming it
//!       pods: { label: pod }
//!       namespaces: { label: namespace }
//!       deployments.apps: { label: deployment }
//!     namespaceLabel: namespace           # optional, default "namespace"
//!     window: 2m                          # optional: reported as window/windowSeconds
//! ```
//!
//! `<<.LabelMatchers>>` becomes the matchers that pick the requested objects (namespace,
//! object names) and the request's `metricLabelSelector`; `<<.GroupBy>>` becomes the
//! resource's label. Resources other than the built-in ones need `kind` and `apiVersion`
//! (and `namespaced`). A rules file that is wrong is refused at start, naming the rule and
//! the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use crate::selector::{Operator, Selector, is_dns1123_subdomain};
use crate::source::{ResourceInfo, builtin_resource};
use exposition_parser::{is_label_name, is_metric_name};

/// Why a rules file was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("rules file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML for the schema.
    #[error("rules file {path}: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// Parser message (with line and column).
        reason: String,
    },
    /// A rule is invalid.
    #[error("rules file {path}: rule {index} ({name}): {reason}")]
    Rule {
        /// The file.
        path: String,
        /// 1-based position of the rule.
        index: usize,
        /// The rule's name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRule {
    name: String,
    query: String,
    resources: BTreeMap<String, RawResource>,
    #[serde(default)]
    namespace_label: Option<String>,
    #[serde(default)]
    window: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawResource {
    label: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    namespaced: Option<bool>,
}

/// How a rule addresses one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRule {
    /// The Prometheus label holding the object name.
    pub label: String,
    /// How objects are described.
    pub info: ResourceInfo,
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// 1-based position in the file.
    pub index: usize,
    /// Custom metric name.
    pub name: String,
    /// PromQL template.
    pub query: String,
    /// Resource → addressing.
    pub resources: BTreeMap<String, ResourceRule>,
    /// Label holding the namespace.
    pub namespace_label: String,
    /// Window in seconds, if declared.
    pub window_seconds: Option<i64>,
}

const PLACEHOLDERS: [&str; 2] = ["<<.LabelMatchers>>", "<<.GroupBy>>"];

/// A window such as `30s`, `2m` or `1h30m` (the flags' duration syntax), in whole seconds.
pub fn parse_window(s: &str) -> Option<i64> {
    let d = flag_ranges::parse_duration(s).ok()?;
    (d.subsec_nanos() == 0 && d.as_secs() > 0).then(|| i64::try_from(d.as_secs()).ok()).flatten()
}

fn validate(raw: RawRule) -> std::result::Result<Rule, String> {
    if !is_metric_name(&raw.name) {
        return Err("name must match [a-zA-Z_:][a-zA-Z0-9_:]*".into());
    }
    if !raw.query.contains("<<.LabelMatchers>>") {
        return Err("query must contain <<.LabelMatchers>> so requests can narrow it".into());
    }
    let mut rest = raw.query.as_str();
    while let Some(start) = rest.find("<<") {
        let after = &rest[start..];
        let end = after.find(">>").ok_or_else(|| format!("unterminated placeholder at {:?}", after))?;
        let token = &after[..end + 2];
        if !PLACEHOLDERS.contains(&token) {
            return Err(format!("unknown placeholder {token} (known: <<.LabelMatchers>>, <<.GroupBy>>)"));
        }
        rest = &after[end + 2..];
    }
    if raw.resources.is_empty() {
        return Err("resources must name at least one resource".into());
    }
    let namespace_label = raw.namespace_label.unwrap_or_else(|| "namespace".into());
    if !is_label_name(&namespace_label) {
        return Err(format!("namespaceLabel {namespace_label:?} is not a Prometheus label name"));
    }
    let mut resources = BTreeMap::new();
    for (resource, r) in raw.resources {
        if !is_dns1123_subdomain(&resource) {
            return Err(format!(
                "resource {resource:?} is not a lower-case resource name like pods or deployments.apps"
            ));
        }
        if !is_label_name(&r.label) {
            return Err(format!("resource {resource}: label {:?} is not a Prometheus label name", r.label));
        }
        let info = match (builtin_resource(&resource), r.kind, r.api_version) {
            (_, Some(kind), Some(api_version)) => {
                ResourceInfo { kind, api_version, namespaced: r.namespaced.unwrap_or(true) }
            }
            (Some(info), None, None) => info,
            (Some(_), _, _) | (None, Some(_), None) | (None, None, Some(_)) => {
                return Err(format!("resource {resource}: give both kind and apiVersion, or neither"));
            }
            (None, None, None) => {
                return Err(format!("resource {resource} is not built in: give its kind and apiVersion"));
            }
        };
        resources.insert(resource, ResourceRule { label: r.label, info });
    }
    let window_seconds = match raw.window {
        None => None,
        Some(w) => {
            Some(parse_window(&w).ok_or_else(|| format!("window {w:?} is not a whole-second duration like 2m"))?)
        }
    };
    Ok(Rule { index: 0, name: raw.name, query: raw.query, resources, namespace_label, window_seconds })
}

impl Rule {
    /// `rule 2 (request_latency_ms)`, as errors name it.
    pub fn id(&self) -> String {
        format!("rule {} ({})", self.index, self.name)
    }
}

/// Parses and validates a rules document; `path` names it in errors.
pub fn parse(text: &str, path: &str) -> Result<Vec<Rule>> {
    let file: File =
        serde_yaml_ng::from_str(text).map_err(|e| Error::Syntax { path: path.to_owned(), reason: e.to_string() })?;
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut out = Vec::with_capacity(file.rules.len());
    for (i, raw) in file.rules.into_iter().enumerate() {
        let name = raw.name.clone();
        let fail = |reason: String| Error::Rule { path: path.to_owned(), index: i + 1, name: name.clone(), reason };
        let mut rule = validate(raw).map_err(fail)?;
        rule.index = i + 1;
        for resource in rule.resources.keys() {
            if !seen.insert((rule.name.clone(), resource.clone())) {
                return Err(fail(format!("metric {} for {resource} is already defined by an earlier rule", rule.name)));
            }
        }
        out.push(rule);
    }
    Ok(out)
}

/// Reads and validates a rules file.
pub fn load(path: &Path) -> Result<Vec<Rule>> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: shown.clone(), source })?;
    parse(&text, &shown)
}

/// Escapes a literal for a PromQL regular expression inside a backtick string.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Why a request cannot be expressed in PromQL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

/// Which objects to match.
#[derive(Debug, Clone, Copy)]
pub enum Names<'a> {
    /// All objects (`label!=""`).
    All,
    /// These names.
    Some(&'a [&'a str]),
}

/// Renders the rule's query for a request.
pub fn render(
    rule: &Rule,
    resource: &ResourceRule,
    namespace: Option<&str>,
    names: Names<'_>,
    metric_selector: &Selector,
) -> std::result::Result<String, RenderError> {
    let mut m = String::new();
    if let Some(ns) = namespace {
        let _ = write!(m, "{}=\"{}\"", rule.namespace_label, ns);
    }
    let sep = |m: &mut String| {
        if !m.is_empty() {
            m.push(',');
        }
    };
    sep(&mut m);
    match names {
        Names::All => {
            let _ = write!(m, "{}!=\"\"", resource.label);
        }
        Names::Some([]) => return Err(RenderError("no objects to match".into())),
        Names::Some([one]) => {
            let _ = write!(m, "{}=\"{}\"", resource.label, one);
        }
        Names::Some(many) => {
            let alternatives: Vec<String> = many.iter().map(|n| regex_escape(n)).collect();
            let _ = write!(m, "{}=~`{}`", resource.label, alternatives.join("|"));
        }
    }
    for req in metric_selector.requirements() {
        let key = req.key();
        if !is_label_name(key) {
            return Err(RenderError(format!("metricLabelSelector key {key:?} is not a Prometheus label name")));
        }
        sep(&mut m);
        let values = req.values();
        let alt = || values.iter().map(|v| regex_escape(v)).collect::<Vec<_>>().join("|");
        match req.operator() {
            Operator::Equals | Operator::DoubleEquals => {
                let _ = write!(m, "{key}=\"{}\"", values.first().map_or("", String::as_str));
            }
            Operator::NotEquals => {
                let _ = write!(m, "{key}!=\"{}\"", values.first().map_or("", String::as_str));
            }
            Operator::In => {
                let _ = write!(m, "{key}=~`{}`", alt());
            }
            Operator::NotIn => {
                let _ = write!(m, "{key}!~`{}`", alt());
            }
            Operator::Exists => {
                let _ = write!(m, "{key}!=\"\"");
            }
            Operator::DoesNotExist => {
                let _ = write!(m, "{key}=\"\"");
            }
            Operator::GreaterThan | Operator::LessThan => {
                return Err(RenderError(format!(
                    "metricLabelSelector operator on {key:?} has no PromQL label matcher (use in, notin, =, !=)"
                )));
            }
        }
    }
    Ok(rule.query.replace("<<.LabelMatchers>>", &m).replace("<<.GroupBy>>", &resource.label))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
rules:
  - name: request_latency_ms
    query: 'avg by (<<.GroupBy>>) (request_latency_ms{<<.LabelMatchers>>})'
    resources:
      pods: { label: pod }
      namespaces: { label: namespace }
    window: 1m
  - name: queue_depth
    query: 'sum by (<<.GroupBy>>) (queue_depth{<<.LabelMatchers>>})'
    resources:
      inferencepools.serving.example.com: { label: pool, kind: InferencePool, apiVersion: serving.example.com/v1 }
"#;

    fn err(text: &str) -> String {
        parse(text, "rules.yaml").unwrap_err().to_string()
    }

    #[test]
    fn parses_a_good_file() {
        let rules = parse(GOOD, "rules.yaml").unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].window_seconds, Some(60));
        assert_eq!(rules[0].namespace_label, "namespace");
        assert_eq!(rules[0].resources["pods"].info.api_version, "/v1");
        let pool = &rules[1].resources["inferencepools.serving.example.com"];
        assert_eq!((pool.info.kind.as_str(), pool.info.namespaced), ("InferencePool", true));
    }

    #[test]
    fn bad_rules_name_the_rule_and_reason() {
        let one = |body: &str| format!("rules:\n  - name: latency\n{body}");
        let e = err(&one("    query: 'x'\n    resources: { pods: { label: pod } }\n"));
        assert!(e.contains("rule 1 (latency)") && e.contains("<<.LabelMatchers>>"), "{e}");
        let e = err(&one("    query: 'x{<<.LabelMatchers>>} <<.Series>>'\n    resources: { pods: { label: pod } }\n"));
        assert!(e.contains("unknown placeholder <<.Series>>"), "{e}");
        let e = err(&one("    query: 'x{<<.LabelMatchers>>}'\n    resources: {}\n"));
        assert!(e.contains("at least one resource"), "{e}");
        let e = err(&one("    query: 'x{<<.LabelMatchers>>}'\n    resources: { pods: { label: pod-name } }\n"));
        assert!(e.contains("not a Prometheus label name"), "{e}");
        let e = err(&one("    query: 'x{<<.LabelMatchers>>}'\n    resources: { widgets.example.com: { label: w } }\n"));
        assert!(e.contains("give its kind and apiVersion"), "{e}");
        let e = err(&one(
            "    query: 'x{<<.LabelMatchers>>}'\n    resources: { pods: { label: pod } }\n    window: soon\n",
        ));
        assert!(e.contains("window"), "{e}");
        let e = err(
            "rules:\n  - name: bad-name\n    query: 'x{<<.LabelMatchers>>}'\n    resources: { pods: { label: pod } }\n",
        );
        assert!(e.contains("rule 1 (bad-name)"), "{e}");
        let e =
            err(&one("    query: 'x{<<.LabelMatchers>>}'\n    resources: { pods: { label: pod } }\n    extra: 1\n"));
        assert!(e.contains("unknown field"), "{e}");
        let dup = format!(
            "{}  - name: latency\n    query: 'y{{<<.LabelMatchers>>}}'\n    resources: {{ pods: {{ label: pod }} }}\n",
            one("    query: 'x{<<.LabelMatchers>>}'\n    resources: { pods: { label: pod } }\n")
        );
        let e = err(&dup);
        assert!(e.contains("rule 2 (latency)") && e.contains("already defined"), "{e}");
        assert!(err("rules: [").contains("rules.yaml"));
    }

    #[test]
    fn windows() {
        assert_eq!(parse_window("30s"), Some(30));
        assert_eq!(parse_window("2m"), Some(120));
        assert_eq!(parse_window("1h30m"), Some(5400));
        for bad in ["", "5", "m", "5x", "100ms", "1500ms", "0s", "99999999999999999999s"] {
            assert_eq!(parse_window(bad), None, "{bad}");
        }
    }

    #[test]
    fn renders_matchers_for_each_request_shape() {
        let rules = parse(GOOD, "r").unwrap();
        let rule = &rules[0];
        let pods = &rule.resources["pods"];
        let all = render(rule, pods, Some("ai"), Names::All, &Selector::everything()).unwrap();
        assert_eq!(all, r#"avg by (pod) (request_latency_ms{namespace="ai",pod!=""})"#);
        let one = render(rule, pods, Some("ai"), Names::Some(&["p-0"]), &Selector::everything()).unwrap();
        assert_eq!(one, r#"avg by (pod) (request_latency_ms{namespace="ai",pod="p-0"})"#);
        let sel = Selector::parse("route in (chat,embed),!canary,tier!=x,version,zone=a").unwrap();
        let some = render(rule, pods, Some("ai"), Names::Some(&["a.b", "c"]), &sel).unwrap();
        assert_eq!(
            some,
            r#"avg by (pod) (request_latency_ms{namespace="ai",pod=~`a\.b|c`,canary="",route=~`chat|embed`,tier!="x",version!="",zone="a"})"#
        );
        let ns = &rule.resources["namespaces"];
        let nsq = render(rule, ns, None, Names::Some(&["ai"]), &Selector::everything()).unwrap();
        assert_eq!(nsq, r#"avg by (namespace) (request_latency_ms{namespace="ai"})"#);
        let e = render(rule, pods, Some("ai"), Names::All, &Selector::parse("app.kubernetes.io/name=x").unwrap());
        assert!(e.unwrap_err().0.contains("not a Prometheus label name"));
        let e = render(rule, pods, Some("ai"), Names::All, &Selector::parse("gpu>1").unwrap());
        assert!(e.is_err());
    }
}
