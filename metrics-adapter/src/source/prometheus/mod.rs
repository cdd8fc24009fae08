//! The Prometheus source: answers reads for the metrics its rules define by running an
//! instant query against a Prometheus-compatible API (Prometheus, Thanos, Mimir), with a
//! deadline and a response size cap. Its rules come in either of two formats, one per
//! file:
//!
//! * the project's own ([`rules`]): each rule names its metric and resources, and is
//!   listed whether or not series exist;
//! * prometheus-adapter's ([`adapter`]): rules discover their metrics from the series
//!   Prometheus has ([`relist`], every `--metrics-relist-interval`), and API discovery
//!   lists exactly what was found ([`registry`]); external rules serve
//!   `external.metrics.k8s.io`.
//!
//! A slow, failing or unreachable Prometheus is an error for that read (503), never a
//! zero. A query Prometheus refuses as `bad_data` is the rule's fault: it is a
//! configuration error (500, saying so), remembered for the rule until a relist finds it
//! fixed; the first relist at start probes every rule so that most are caught before the
//! adapter serves.
//!
//! **Namespace-wide queries.** When a label selector picks many pods that are most of
//! their namespace (at least [`WIDEN_MIN_NAMES`] and at least half), the objects' matcher
//! is `pod!=""` instead of a regex of every name, and the answer is narrowed to the
//! selection here; see NOTES.md ("Prometheus path") for the figures and the opt-out.

pub mod adapter;
pub mod answer;
pub mod client;
pub mod read;
pub mod registry;
pub mod relist;
pub mod rules;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

use self::adapter::query::{self, Objects as QueryObjects};
use self::answer::Failure;
use self::client::Client;
use self::read::ExternalValue;
use self::registry::Registry;
use self::rules::{Names, Rule};
use super::{Error, Listed, Objects, Point, Request, ResourceInfo, Result};
use crate::catalog::{Catalog, Entry};
use crate::http_client::HttpClient;
use crate::selector::Selector;

pub use self::answer::Sample;

/// Selections of at least this many objects may be queried namespace-wide.
pub const WIDEN_MIN_NAMES: usize = 64;

/// Settings of the Prometheus source.
#[derive(Debug, Clone)]
pub struct Config {
    /// The API client's settings.
    pub client: client::Config,
    /// How often prometheus-adapter rules re-discover their series.
    pub relist_interval: Duration,
    /// How far back discovery looks for series.
    pub max_age: Duration,
    /// Query large selections namespace-wide and narrow the answer here.
    pub widen: bool,
}

/// The rules of the source, in one of the two formats.
#[derive(Debug, Clone)]
pub enum RuleSet {
    /// The project's own format.
    Native(Vec<Rule>),
    /// prometheus-adapter's format.
    Adapter(adapter::Config),
}

/// A configuration error Prometheus found in a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The rule (`rules[0]`, `externalRules[1]`, `rule 2 (name)`).
    pub rule: String,
    /// The field (`seriesQuery`, `metricsQuery`, `query`).
    pub field: &'static str,
    /// What Prometheus said.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "configuration error in {} {}: {}", self.rule, self.field, self.message)
    }
}

/// The Prometheus source.
#[derive(Debug)]
pub struct PrometheusSource {
    cfg: Config,
    client: Client,
    native: Vec<Rule>,
    native_index: HashMap<(String, String), usize>,
    adapter: adapter::Config,
    registry: ArcSwap<Registry>,
    catalog: ArcSwap<Catalog>,
    problems: ArcSwap<BTreeMap<String, Problem>>,
    probed: std::sync::Mutex<std::collections::HashSet<String>>,
    relisted: AtomicBool,
}

/// The namespaces resource, for a rule's namespace label.
fn namespaces(catalog: &Catalog) -> Option<Entry> {
    catalog.resolve("", "namespaces").or_else(|| super::builtin_catalog().resolve("", "namespaces")).cloned()
}

impl PrometheusSource {
    /// A source over validated rules.
    pub fn new(cfg: Config, http: HttpClient, rules: RuleSet, catalog: Catalog) -> Self {
        let (native, adapter) = match rules {
            RuleSet::Native(r) => (r, adapter::Config::default()),
            RuleSet::Adapter(a) => (Vec::new(), a),
        };
        let mut native_index = HashMap::new();
        for (i, r) in native.iter().enumerate() {
            for resource in r.resources.keys() {
                native_index.insert((resource.clone(), r.name.clone()), i);
            }
        }
        let client = Client::new(cfg.client.clone(), http);
        Self {
            cfg,
            client,
            native,
            native_index,
            adapter,
            registry: ArcSwap::from_pointee(Registry::default()),
            catalog: ArcSwap::from_pointee(catalog),
            problems: ArcSwap::from_pointee(BTreeMap::new()),
            probed: std::sync::Mutex::default(),
            relisted: AtomicBool::new(false),
        }
    }

    /// The metric names the project-format rules define.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.native.iter().map(|r| r.name.as_str())
    }

    /// Whether external rules are configured (`external.metrics.k8s.io` is served).
    pub fn has_external(&self) -> bool {
        self.adapter.has_external()
    }

    /// Replaces the cluster's catalog (read again by the application).
    pub fn set_catalog(&self, catalog: Catalog) {
        self.catalog.store(Arc::new(catalog));
    }

    /// Whether a rule serves `metric` for `resource`.
    pub fn serves(&self, resource: &str, metric: &str) -> bool {
        self.native_index.contains_key(&(resource.to_owned(), metric.to_owned()))
            || self.registry.load().custom(resource, metric).is_some()
    }

    /// How a resource's objects are described: a rule's declaration, else the catalog.
    pub fn resource_info(&self, resource: &str) -> Option<ResourceInfo> {
        self.native
            .iter()
            .find_map(|r| r.resources.get(resource))
            .map(|rr| rr.info.clone())
            .or_else(|| self.catalog.load().by_path_name(resource).map(Entry::info))
    }

    /// Every (resource, metric) to list: the project-format rules always, the discovered
    /// metrics of prometheus-adapter rules as found.
    pub fn listed(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = self
            .native
            .iter()
            .flat_map(|r| {
                r.resources.iter().map(|(resource, rr)| Listed {
                    resource: resource.clone(),
                    metric: r.name.clone(),
                    namespaced: rr.info.namespaced,
                })
            })
            .collect();
        out.extend(self.registry.load().listed());
        out
    }

    /// The external metrics found.
    pub fn external_listed(&self) -> Vec<String> {
        self.registry.load().external_names()
    }

    /// The configuration errors Prometheus has found, by rule.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems.load().values().cloned().collect()
    }

    fn problem(&self, rule: &str) -> Option<Problem> {
        self.problems.load().get(rule).cloned()
    }

    fn record_problem(&self, p: Problem) {
        tracing::error!(rule = %p.rule, field = p.field, error = %p.message, "Prometheus rejected a rule's query");
        self.problems.rcu(|old| {
            let mut next = (**old).clone();
            next.insert(p.rule.clone(), p.clone());
            next
        });
    }

    fn clear_problem(&self, rule: &str) {
        if self.problems.load().contains_key(rule) {
            self.problems.rcu(|old| {
                let mut next = (**old).clone();
                next.remove(rule);
                next
            });
        }
    }

    /// Runs an instant query, with how long it took; the answer is parsed by
    /// [`PrometheusSource::parsed`].
    async fn fetch(&self, promql: &str) -> Result<(client::Raw, Duration)> {
        let started = std::time::Instant::now();
        let raw = self.client.query(promql).await.map_err(|e| Error::Unavailable(e.to_string()))?;
        Ok((raw, started.elapsed()))
    }

    /// Parses an answer keeping the labels `keep` says; a `bad_data` refusal is
    /// recorded against `rule`.
    fn parsed<'a>(
        &self,
        raw: &'a client::Raw,
        keep: answer::Keep<'_>,
        rule: &str,
        field: &'static str,
    ) -> Result<answer::Answer<'a>> {
        answer::query_keeping(raw.status, &raw.body, keep).map_err(|f| self.failure(f, rule, field))
    }

    fn failure(&self, f: Failure, rule: &str, field: &'static str) -> Error {
        match f {
            Failure::Rejected { .. } => {
                let p = Problem { rule: rule.to_owned(), field, message: f.to_string() };
                self.record_problem(p.clone());
                Error::Config(p.to_string())
            }
            Failure::WrongType(_) => Error::Config(format!("configuration error in {rule} {field}: {f}")),
            Failure::Failed { status, .. } if status < 500 && status != 429 => {
                Error::Internal(format!("{rule} {field}: {f}"))
            }
            Failure::Failed { .. } | Failure::Unusable(_) => Error::Unavailable(f.to_string()),
        }
    }

    /// Answers a read, with the time spent waiting for Prometheus.
    pub async fn query(&self, req: &Request<'_>) -> Result<(Vec<Point>, Duration)> {
        if let Some(&i) = self.native_index.get(&(req.resource.to_owned(), req.metric.to_owned())) {
            return self.native_query(&self.native[i], req).await;
        }
        let found = self.registry.load().custom(req.resource, req.metric).cloned();
        match found {
            Some(f) => self.adapter_query(&f, req).await,
            None => Ok((Vec::new(), Duration::ZERO)),
        }
    }

    /// Whether to query `objects` namespace-wide and narrow the answer here.
    fn widen(&self, req: &Request<'_>, reads_values: bool) -> bool {
        let Objects::Names(names) = req.objects else { return false };
        let among = req.among.unwrap_or(usize::MAX);
        self.cfg.widen && !reads_values && names.len() >= WIDEN_MIN_NAMES && names.len().saturating_mul(2) >= among
    }

    async fn native_query(&self, rule: &Rule, req: &Request<'_>) -> Result<(Vec<Point>, Duration)> {
        let Some(rr) = rule.resources.get(req.resource) else { return Ok((Vec::new(), Duration::ZERO)) };
        let id = rule.id();
        if let Some(p) = self.problem(&id) {
            return Err(Error::Config(p.to_string()));
        }
        let namespace = if rr.info.namespaced { req.namespace } else { None };
        let listed: Vec<&str>;
        let names = match req.objects {
            Objects::All => Names::All,
            Objects::Names(v) if v.is_empty() => return Ok((Vec::new(), Duration::ZERO)),
            _ if self.widen(req, false) => Names::All,
            Objects::One(n) => {
                listed = vec![n.as_str()];
                Names::Some(&listed)
            }
            Objects::Names(v) => {
                listed = v.iter().map(|s| &**s).collect();
                Names::Some(&listed)
            }
        };
        let promql = rules::render(rule, rr, namespace, names, req.metric_selector).map_err(|e| Error::Invalid(e.0))?;
        let (raw, waited) = self.fetch(&promql).await?;
        let answer = self.parsed(&raw, answer::Keep::Only(&rr.label), &id, "query")?;
        Ok((read::points(&answer.samples, &rr.label, req.objects, rule.window_seconds, &id)?, waited))
    }

    async fn adapter_query(&self, found: &registry::Found, req: &Request<'_>) -> Result<(Vec<Point>, Duration)> {
        let rule = &self.adapter.rules[found.rule];
        let id = rule.id();
        if let Some(p) = self.problem(&id) {
            return Err(Error::Config(p.to_string()));
        }
        let ns_label = match (found.entry.namespaced, req.namespace) {
            (true, Some(ns)) => Some((self.namespace_label(rule)?, ns)),
            _ => None,
        };
        let listed: Vec<&str>;
        let objects = match req.objects {
            Objects::All => QueryObjects::Any,
            Objects::Names(v) if v.is_empty() => return Ok((Vec::new(), Duration::ZERO)),
            _ if self.widen(req, rule.query.uses("LabelValuesByName")) => QueryObjects::Any,
            Objects::One(n) => {
                listed = vec![n.as_str()];
                QueryObjects::Names(&listed)
            }
            Objects::Names(v) => {
                listed = v.iter().map(|s| &**s).collect();
                QueryObjects::Names(&listed)
            }
        };
        let ns = ns_label.as_ref().map(|(l, n)| (l.as_str(), *n));
        let data = query::custom(&found.series, ns, &found.label, objects, req.metric_selector)
            .map_err(|e| Error::Invalid(e.0))?;
        let promql = rule.query.render(&data);
        let (raw, waited) = self.fetch(&promql).await?;
        let answer = self.parsed(&raw, answer::Keep::Only(&found.label), &id, "metricsQuery")?;
        Ok((read::points(&answer.samples, &found.label, req.objects, None, &id)?, waited))
    }

    fn namespace_label(&self, rule: &adapter::Rule) -> Result<String> {
        namespaces(&self.catalog.load()).and_then(|ns| rule.resources.label_for(&ns)).ok_or_else(|| {
            Error::Config(format!(
                "configuration error in {}: no label maps to namespaces, which a namespaced query needs",
                rule.id()
            ))
        })
    }

    /// Answers an external-metric read: `None` when no external rule found `metric`.
    pub async fn external(
        &self,
        namespace: &str,
        metric: &str,
        selector: &Selector,
    ) -> Result<Option<Vec<ExternalValue>>> {
        let Some(found) = self.registry.load().external(metric).cloned() else { return Ok(None) };
        let rule = &self.adapter.rules[found.rule];
        let id = rule.id();
        if let Some(p) = self.problem(&id) {
            return Err(Error::Config(p.to_string()));
        }
        let ns_label = if rule.namespaced { Some(self.namespace_label(rule)?) } else { None };
        let data = query::external(&found.series, ns_label.as_deref().map(|l| (l, namespace)), selector)
            .map_err(|e| Error::Invalid(e.0))?;
        let promql = rule.query.render(&data);
        let (raw, _) = self.fetch(&promql).await?;
        let answer = self.parsed(&raw, answer::Keep::All, &id, "metricsQuery")?;
        Ok(Some(read::external(&answer.samples)))
    }

    /// Whether the first relist has completed.
    pub fn relisted(&self) -> bool {
        self.relisted.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_resolve_with_or_without_a_catalog() {
        assert_eq!(namespaces(&Catalog::builtin()).map(|e| e.path_name()).as_deref(), Some("namespaces"));
        assert_eq!(namespaces(&Catalog::default()).map(|e| e.path_name()).as_deref(), Some("namespaces"));
    }
}
