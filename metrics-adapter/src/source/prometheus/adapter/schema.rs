//! The YAML of prometheus-adapter's configuration file (its `pkg/config`), read strictly
//! as its `yaml.UnmarshalStrict` reads it: an unknown or misspelt field is refused.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole file (`MetricsDiscoveryConfig`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct File {
    /// Custom-metric rules.
    #[serde(default)]
    pub rules: Vec<DiscoveryRule>,
    /// Resource-metric rules (`metrics.k8s.io`), which this adapter does not serve.
    #[serde(default)]
    pub resource_rules: Option<serde_yaml_ng::Value>,
    /// External-metric rules.
    #[serde(default)]
    pub external_rules: Vec<DiscoveryRule>,
}

/// One rule (`DiscoveryRule`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DiscoveryRule {
    /// Series selector for `/api/v1/series`.
    #[serde(default)]
    pub series_query: String,
    /// Extra filters on series names.
    #[serde(default)]
    pub series_filters: Vec<RegexFilter>,
    /// Which labels name which resources.
    #[serde(default)]
    pub resources: ResourceMapping,
    /// Series name to API name.
    #[serde(default)]
    pub name: NameMapping,
    /// The query template.
    #[serde(default)]
    pub metrics_query: String,
}

/// `is` or `isNot`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RegexFilter {
    /// Keep names matching this.
    #[serde(default)]
    pub is: String,
    /// Keep names not matching this.
    #[serde(default)]
    pub is_not: String,
}

/// Label to resource mapping (`ResourceMapping`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceMapping {
    /// `<<.Group>>`/`<<.Resource>>` label template.
    #[serde(default)]
    pub template: String,
    /// Label → group-resource.
    #[serde(default)]
    pub overrides: BTreeMap<String, GroupResource>,
    /// External rules: whether the request's namespace narrows the query (default true).
    #[serde(default)]
    pub namespaced: Option<bool>,
}

/// A group-resource (`GroupResource`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupResource {
    /// API group (empty: the core group, or any group that serves the name).
    #[serde(default)]
    pub group: String,
    /// Resource, singular or plural.
    pub resource: String,
}

/// Naming (`NameMapping`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NameMapping {
    /// Regex on series names (empty: `.*`).
    #[serde(default)]
    pub matches: String,
    /// The API name, with `$1`-style captures (default `$0` or `$1`).
    #[serde(default, rename = "as")]
    pub as_: String,
}
