//! prometheus-adapter's configuration file, accepted unchanged (the file its `--config`
//! reads, usually mounted from a ConfigMap): `rules` and `externalRules` with
//! `seriesQuery`, `seriesFilters` (`is`, `isNot`), `resources` (`template` with
//! `<<.Group>>`/`<<.Resource>>`, `overrides`, and for external rules `namespaced`),
//! `name` (`matches`, `as`, with its defaults) and `metricsQuery` (`<<.Series>>`,
//! `<<.LabelMatchers>>`, `<<.GroupBy>>`, `<<.LabelValuesByName>>`, `<<.GroupBySlice>>`, in
//! the `text/template` subset of [`template`]).
//!
//! Everything that can be wrong is found when the file is read, with the rule and the
//! field: YAML and unknown fields, regular expressions, a missing `as`, template fields,
//! resources the cluster does not serve, and rules that could never answer (a custom rule
//! that maps no label, an empty `seriesQuery` or `metricsQuery`, an external rule that is
//! namespaced without a label for namespaces; prometheus-adapter starts with those and
//! fails every query of them). `resourceRules` (the resource metrics API behind
//! `kubectl top`) are refused: this adapter does not serve `metrics.k8s.io`.
//!
//! [`is_adapter_format`] tells this format from the project's own rules format, so one
//! `--config` takes either.

pub mod naming;
pub mod query;
pub mod resources;
pub mod schema;
pub mod template;

use self::naming::{Filter, Namer};
use self::resources::ResourceMapper;
use self::schema::{DiscoveryRule, File};
use self::template::{Schema, Template};
use crate::catalog::Catalog;

/// Why a prometheus-adapter configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not YAML of the schema.
    #[error("{path}: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// Parser message (with line and column).
        reason: String,
    },
    /// A top-level field this adapter does not honour.
    #[error("{path}: {field}: {reason}")]
    Unsupported {
        /// The file.
        path: String,
        /// The field.
        field: &'static str,
        /// Why, and what to do.
        reason: String,
    },
    /// A rule is wrong.
    #[error("{path}: {rule} (seriesQuery {series_query:?}): {field}: {reason}")]
    Rule {
        /// The file.
        path: String,
        /// `rules[0]` or `externalRules[2]`.
        rule: String,
        /// Its series query, to find it in the file.
        series_query: String,
        /// The field (`name.matches`, `resources.overrides.pod`, `metricsQuery`).
        field: String,
        /// Why.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Custom or external.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `rules`: `custom.metrics.k8s.io`.
    Custom,
    /// `externalRules`: `external.metrics.k8s.io`.
    External,
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Which list it is in.
    pub kind: Kind,
    /// Its position there.
    pub index: usize,
    /// The series selector discovery runs.
    pub series_query: String,
    filters: Vec<Filter>,
    namer: Namer,
    /// Label ↔ resource mapping.
    pub resources: ResourceMapper,
    /// External rules: whether the request's namespace narrows the query.
    pub namespaced: bool,
    /// `metricsQuery`.
    pub query: Template,
}

impl Rule {
    /// `rules[0]` or `externalRules[2]`, as the file names it.
    pub fn id(&self) -> String {
        match self.kind {
            Kind::Custom => format!("rules[{}]", self.index),
            Kind::External => format!("externalRules[{}]", self.index),
        }
    }

    /// The API name of a discovered series, `None` when the rule's filters drop it.
    pub fn metric_name(&self, series: &str) -> Option<String> {
        if !self.filters.iter().all(|f| f.keeps(series)) || !self.namer.keeps(series) {
            return None;
        }
        self.namer.name(series).filter(|n| !n.is_empty())
    }
}

/// A compiled configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `rules` then `externalRules`.
    pub rules: Vec<Rule>,
}

impl Config {
    /// Whether any external rule is configured.
    pub fn has_external(&self) -> bool {
        self.rules.iter().any(|r| r.kind == Kind::External)
    }
}

/// Whether a rules document is in prometheus-adapter's format rather than this project's
/// (`name` + `query` per rule): it has `externalRules` or `resourceRules`, or a rule with
/// `seriesQuery`, `metricsQuery` or `seriesFilters`.
pub fn is_adapter_format(text: &str) -> bool {
    let Ok(serde_yaml_ng::Value::Mapping(doc)) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) else {
        return false;
    };
    if doc.contains_key("externalRules") || doc.contains_key("resourceRules") {
        return true;
    }
    let Some(serde_yaml_ng::Value::Sequence(rules)) = doc.get("rules") else { return false };
    rules.iter().any(|r| {
        r.as_mapping()
            .is_some_and(|m| ["seriesQuery", "metricsQuery", "seriesFilters"].iter().any(|k| m.contains_key(*k)))
    })
}

/// Parses and compiles a configuration; `path` names it in errors, `catalog` resolves
/// the resources it names.
pub fn parse(text: &str, path: &str, catalog: &Catalog) -> Result<Config> {
    let file: File =
        serde_yaml_ng::from_str(text).map_err(|e| Error::Syntax { path: path.to_owned(), reason: e.to_string() })?;
    if file.resource_rules.is_some() {
        return Err(Error::Unsupported {
            path: path.to_owned(),
            field: "resourceRules",
            reason: "this adapter does not serve the resource metrics API (metrics.k8s.io, kubectl top); \
                     keep metrics-server for it and remove resourceRules"
                .into(),
        });
    }
    let mut rules = Vec::with_capacity(file.rules.len() + file.external_rules.len());
    for (kind, list) in [(Kind::Custom, &file.rules), (Kind::External, &file.external_rules)] {
        for (index, raw) in list.iter().enumerate() {
            let fail = |field: String, reason: String| {
                let rule = match kind {
                    Kind::Custom => format!("rules[{index}]"),
                    Kind::External => format!("externalRules[{index}]"),
                };
                Error::Rule { path: path.to_owned(), rule, series_query: raw.series_query.clone(), field, reason }
            };
            rules.push(compile(kind, index, raw, catalog).map_err(|(f, r)| fail(f, r))?);
        }
    }
    Ok(Config { rules })
}

fn compile(
    kind: Kind,
    index: usize,
    raw: &DiscoveryRule,
    catalog: &Catalog,
) -> std::result::Result<Rule, (String, String)> {
    if raw.series_query.trim().is_empty() {
        return Err(("seriesQuery".into(), "is required: the series selector discovery asks Prometheus for".into()));
    }
    let filters = raw
        .series_filters
        .iter()
        .enumerate()
        .map(|(i, f)| Filter::new(f).map_err(|r| (format!("seriesFilters[{i}]"), r)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let namer = Namer::new(&raw.name).map_err(|e| (format!("name.{}", e.field), e.reason))?;
    let resources =
        ResourceMapper::new(&raw.resources, catalog).map_err(|e| (format!("resources.{}", e.field), e.reason))?;
    if raw.metrics_query.trim().is_empty() {
        return Err(("metricsQuery".into(), "is required: the query template that computes the metric".into()));
    }
    let query =
        Template::parse(&raw.metrics_query, Schema::Query).map_err(|e| ("metricsQuery".into(), e.to_string()))?;
    let namespaced = raw.resources.namespaced.unwrap_or(true);
    match kind {
        Kind::Custom if !resources.maps_anything() => {
            return Err((
                "resources".into(),
                "maps no label to a resource: give a template (such as \"<<.Resource>>\") or overrides".into(),
            ));
        }
        Kind::External if namespaced && !resources.maps_namespaces() => {
            return Err((
                "resources".into(),
                "the rule is namespaced (the default) but no label maps to namespaces: add overrides: \
                 {namespace: {resource: namespace}} (or a template), or set namespaced: false"
                    .into(),
            ));
        }
        _ => {}
    }
    Ok(Rule { kind, index, series_query: raw.series_query.clone(), filters, namer, resources, namespaced, query })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALKTHROUGH: &str = r#"
rules:
- seriesQuery: 'http_requests_total{kubernetes_namespace!="",kubernetes_pod_name!=""}'
  resources:
    overrides:
      kubernetes_namespace: {resource: "namespace"}
      kubernetes_pod_name: {resource: "pod"}
  name:
    matches: "^(.*)_total"
    as: "${1}_per_second"
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: '{__name__="queue_length",queue!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)
  resources:
    overrides: { namespace: {resource: "namespace"} }
- seriesQuery: '{__name__="queue_depth",topic!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    namespaced: false
"#;

    fn err(text: &str) -> String {
        parse(text, "config.yaml", &Catalog::builtin()).unwrap_err().to_string()
    }

    #[test]
    fn reads_the_documented_format() {
        let c = parse(WALKTHROUGH, "config.yaml", &Catalog::builtin()).unwrap();
        assert_eq!(c.rules.len(), 3);
        assert_eq!(c.rules[0].id(), "rules[0]");
        assert_eq!(c.rules[0].metric_name("http_requests_total").as_deref(), Some("http_requests_per_second"));
        assert_eq!(c.rules[0].metric_name("up"), None);
        assert_eq!((c.rules[1].id(), c.rules[1].namespaced), ("externalRules[0]".into(), true));
        assert!(!c.rules[2].namespaced);
        assert!(c.has_external());
        assert!(is_adapter_format(WALKTHROUGH));
        assert!(!is_adapter_format("rules:\n  - name: x\n    query: 'x{<<.LabelMatchers>>}'\n"));
        assert!(!is_adapter_format("not: [yaml"));
    }

    #[test]
    fn bad_configs_name_the_rule_and_the_field() {
        let rule = |body: &str| {
            format!("rules:\n- seriesQuery: 'x{{pod!=\"\"}}'\n  resources: {{template: \"<<.Resource>>\"}}\n{body}")
        };
        let e = err(&rule("  name: {matches: \"^(.*_total\"}\n  metricsQuery: 'x'\n"));
        assert!(
            e.contains("config.yaml: rules[0] (seriesQuery \"x{pod!=\\\"\\\"}\"): name.matches:")
                && e.contains("not a valid regular expression"),
            "{e}"
        );
        let e = err(&rule("  name: {matches: \"^(.*)_(total|sum)$\"}\n  metricsQuery: 'x'\n"));
        assert!(e.contains("name.as: is required") && e.contains("2 capture groups"), "{e}");
        let e = err(&rule("  metricsQuery: 'sum(<<.Seris>>{<<.LabelMatchers>>})'\n"));
        assert!(e.contains("metricsQuery:") && e.contains("unknown field .Seris"), "{e}");
        let e = err(
            "rules:\n- seriesQuery: 'cheddar'\n  resources: {overrides: {brand: {group: cheese.io, resource: brand}}}\n  metricsQuery: x\n",
        );
        assert!(e.contains("resources.overrides.brand:") && e.contains("not served by this cluster"), "{e}");
        let e = err(&rule("  seriesFilters: [{is: a, isNot: b}]\n  metricsQuery: x\n"));
        assert!(e.contains("seriesFilters[0]: has both"), "{e}");
        let e = err(&rule("  metricsQuery: ''\n"));
        assert!(e.contains("metricsQuery: is required"), "{e}");
        let e = err("rules:\n- metricsQuery: x\n  resources: {template: \"<<.Resource>>\"}\n");
        assert!(e.contains("seriesQuery: is required"), "{e}");
        let e = err("rules:\n- seriesQuery: x\n  metricsQuery: x\n");
        assert!(e.contains("rules[0]") && e.contains("resources: maps no label"), "{e}");
        let e = err("externalRules:\n- seriesQuery: x\n  metricsQuery: x\n");
        assert!(e.contains("externalRules[0]") && e.contains("no label maps to namespaces"), "{e}");
        let e = err(&rule("  metricsQuery: x\n  metricQuery: y\n"));
        assert!(e.contains("unknown field `metricQuery`"), "{e}");
        let e = err("resourceRules: {cpu: {containerQuery: x}}\n");
        assert!(e.contains("resourceRules: this adapter does not serve the resource metrics API"), "{e}");
        assert!(err("rules: [").starts_with("config.yaml: "));
    }
}
