//! What discovery found: for each prometheus-adapter rule, the series its `seriesQuery`
//! returned, kept by its filters, named by `name`, and attached to the resources its
//! labels name (`resources`). API discovery lists exactly these; a read is answered only
//! for a (resource, metric) or external metric found here.
//!
//! As in prometheus-adapter, when two series (of one rule or of two) give the same
//! (resource, metric), the later one wins; the adapter says so in a warning, since that
//! is rarely meant.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::adapter::{Config, Kind};
use super::answer::Shape;
use crate::catalog::{Catalog, Entry};
use crate::source::Listed;

/// A custom metric found for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Index of the rule in the configuration.
    pub rule: usize,
    /// The Prometheus series name (`.Series`).
    pub series: String,
    /// The resource.
    pub entry: Entry,
    /// The label naming its objects.
    pub label: String,
}

/// An external metric found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundExternal {
    /// Index of the rule in the configuration.
    pub rule: usize,
    /// The Prometheus series name (`.Series`).
    pub series: String,
}

/// The discovered metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    custom: HashMap<(String, String), Found>,
    external: BTreeMap<String, FoundExternal>,
}

impl Registry {
    /// Builds the registry from the shapes each series query returned (a query missing
    /// from `shapes` contributes nothing); returns the warnings worth logging.
    pub fn build(config: &Config, shapes: &HashMap<String, Vec<Shape>>, catalog: &Catalog) -> (Self, Vec<String>) {
        let mut reg = Registry::default();
        let mut warnings = BTreeSet::new();
        for (i, rule) in config.rules.iter().enumerate() {
            let Some(found) = shapes.get(&rule.series_query) else { continue };
            for shape in found {
                let Some(metric) = rule.metric_name(&shape.name) else { continue };
                match rule.kind {
                    Kind::External => {
                        let entry = FoundExternal { rule: i, series: shape.name.clone() };
                        if let Some(old) = reg.external.insert(metric.clone(), entry)
                            && old.series != shape.name
                        {
                            warnings.insert(format!(
                                "external metric {metric} comes from series {} and {}; {} ({}) wins",
                                old.series,
                                shape.name,
                                shape.name,
                                rule.id()
                            ));
                        }
                    }
                    Kind::Custom => {
                        for (label, entry) in
                            rule.resources.resources_for(shape.labels.iter().map(String::as_str), catalog)
                        {
                            let key = (entry.path_name(), metric.clone());
                            let found = Found { rule: i, series: shape.name.clone(), entry, label };
                            if let Some(old) = reg.custom.insert(key.clone(), found)
                                && old.series != shape.name
                            {
                                warnings.insert(format!(
                                    "metric {} of {} comes from series {} and {}; {} ({}) wins",
                                    key.1,
                                    key.0,
                                    old.series,
                                    shape.name,
                                    shape.name,
                                    rule.id()
                                ));
                            }
                        }
                    }
                }
            }
        }
        (reg, warnings.into_iter().collect())
    }

    /// The custom metric `metric` of resource `path_name` (`pods`, `deployments.apps`).
    pub fn custom(&self, path_name: &str, metric: &str) -> Option<&Found> {
        self.custom.get(&(path_name.to_owned(), metric.to_owned()))
    }

    /// The external metric `metric`.
    pub fn external(&self, metric: &str) -> Option<&FoundExternal> {
        self.external.get(metric)
    }

    /// Every custom (resource, metric), for API discovery.
    pub fn listed(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = self
            .custom
            .iter()
            .map(|((resource, metric), f)| Listed {
                resource: resource.clone(),
                metric: metric.clone(),
                namespaced: f.entry.namespaced,
            })
            .collect();
        out.sort();
        out
    }

    /// Every external metric name, sorted.
    pub fn external_names(&self) -> Vec<String> {
        self.external.keys().cloned().collect()
    }

    /// Every custom metric found, for probing the rules.
    pub fn all_custom(&self) -> impl Iterator<Item = &Found> {
        self.custom.values()
    }

    /// Every external metric found, for probing the rules.
    pub fn all_external(&self) -> impl Iterator<Item = &FoundExternal> {
        self.external.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::prometheus::adapter;

    const CONFIG: &str = r#"
rules:
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name: {matches: "^container_(.*)_seconds_total$"}
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[2m])) by (<<.GroupBy>>)'
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  seriesFilters: [{isNot: "^container_.*_seconds_total$"}]
  name: {matches: "^container_(.*)_total$"}
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[2m])) by (<<.GroupBy>>)'
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  resources: {template: "<<.Resource>>"}
  name: {matches: "^(.*)_total$"}
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: '{__name__="queue_length",queue!=""}'
  resources: {namespaced: false}
  metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
"#;

    fn shape(name: &str, labels: &[&str]) -> Shape {
        Shape { name: name.into(), labels: labels.iter().map(|l| (*l).to_owned()).collect() }
    }

    #[test]
    fn discovery_lists_what_the_rules_make_of_the_series() {
        let catalog = Catalog::builtin();
        let config = adapter::parse(CONFIG, "c", &catalog).unwrap();
        let cadvisor = vec![
            shape("container_cpu_usage_seconds_total", &["container", "namespace", "pod"]),
            shape("container_network_receive_bytes_total", &["interface", "namespace", "pod"]),
            shape("container_memory_working_set_bytes", &["container", "namespace", "pod"]),
        ];
        let app = vec![
            shape("http_requests_total", &["job", "method", "namespace", "pod", "service"]),
            shape("queue_length", &["namespace", "queue"]),
        ];
        let shapes: HashMap<String, Vec<Shape>> = [
            (config.rules[0].series_query.clone(), cadvisor),
            (config.rules[2].series_query.clone(), app),
            (config.rules[3].series_query.clone(), vec![shape("queue_length", &["namespace", "queue"])]),
        ]
        .into();
        let (reg, warnings) = Registry::build(&config, &shapes, &catalog);
        assert!(warnings.is_empty(), "{warnings:?}");
        let listed: Vec<String> = reg.listed().iter().map(|l| format!("{}/{}", l.resource, l.metric)).collect();
        assert_eq!(
            listed,
            [
                "jobs.batch/http_requests",
                "namespaces/cpu_usage",
                "namespaces/http_requests",
                "namespaces/network_receive_bytes",
                "pods/cpu_usage",
                "pods/http_requests",
                "pods/network_receive_bytes",
                "services/http_requests",
            ]
        );
        let found = reg.custom("pods", "cpu_usage").unwrap();
        assert_eq!(
            (found.rule, found.series.as_str(), found.label.as_str()),
            (0, "container_cpu_usage_seconds_total", "pod")
        );
        assert!(!reg.listed().iter().find(|l| l.resource == "namespaces").unwrap().namespaced);
        assert_eq!(reg.external_names(), ["queue_length"]);
        assert_eq!(reg.external("queue_length").unwrap().rule, 3);
        assert!(reg.custom("pods", "memory_working_set_bytes").is_none());
    }

    #[test]
    fn two_series_for_one_metric_warn() {
        let catalog = Catalog::builtin();
        let text = "rules:\n- seriesQuery: '{pod!=\"\"}'\n  resources: {template: \"<<.Resource>>\"}\n  name: {as: \"requests\"}\n  metricsQuery: 'x'\n";
        let config = adapter::parse(text, "c", &catalog).unwrap();
        let shapes =
            [(config.rules[0].series_query.clone(), vec![shape("a_total", &["pod"]), shape("b_total", &["pod"])])]
                .into();
        let (reg, warnings) = Registry::build(&config, &shapes, &catalog);
        assert_eq!(reg.custom("pods", "requests").unwrap().series, "b_total");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("a_total and b_total"), "{warnings:?}");
    }
}
