//! Discovery, every `--metrics-relist-interval`: each distinct `seriesQuery` of the
//! prometheus-adapter rules is asked of `/api/v1/series` over the last `--metrics-max-age`,
//! and the registry is rebuilt from the answers. A Prometheus that does not answer leaves
//! the previous registry in place (discovery does not empty with an outage); a series query
//! it refuses (`bad_data`) is a configuration error of the rules that use it.
//!
//! Each relist also **probes** the rules not yet known to work: one query per rule,
//! rendered as a read would render it but for an object that does not exist, so that
//! Prometheus parses it at almost no cost. A probe Prometheus refuses records a
//! configuration error against the rule (its reads answer 500 saying so); a later probe
//! that passes clears it. The first relist runs before the adapter serves, and a
//! configuration error found then stops the adapter at start.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::adapter::Kind;
use super::adapter::query::{self, Objects as QueryObjects};
use super::answer::{self, Failure, Shape};
use super::registry::Registry;
use super::rules::Names;
use super::{Problem, PrometheusSource, namespaces};
use crate::selector::Selector;
use crate::source::{Error, Result};

/// The object name probes ask for.
pub const PROBE_NAME: &str = "gpu-metrics-adapter-probe";

/// What a relist found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// (resource, metric) pairs found.
    pub custom: usize,
    /// External metrics found.
    pub external: usize,
    /// The configuration errors known after it.
    pub problems: Vec<Problem>,
}

/// A probe: the rule, the field it tests and the query.
struct Probe {
    rule: String,
    field: &'static str,
    promql: std::result::Result<String, Problem>,
}

impl PrometheusSource {
    /// Re-discovers the series of the prometheus-adapter rules and probes the rules not
    /// yet known to work. `Err` when Prometheus did not answer (the registry is kept).
    pub async fn relist(&self) -> Result<Report> {
        let shapes = self.discover().await?;
        let (registry, warnings) = Registry::build(&self.adapter, &shapes, &self.catalog.load());
        for w in warnings {
            tracing::warn!("{w}");
        }
        self.registry.store(Arc::new(registry));
        self.probe_all().await;
        self.relisted.store(true, Ordering::Release);
        let reg = self.registry.load();
        let report =
            Report { custom: reg.listed().len(), external: reg.external_names().len(), problems: self.problems() };
        Ok(report)
    }

    /// The shapes of every distinct series query that Prometheus answered; a refused
    /// query records a problem against its rules and contributes nothing.
    async fn discover(&self) -> Result<HashMap<String, Vec<Shape>>> {
        let mut queries: Vec<&str> = self.adapter.rules.iter().map(|r| r.series_query.as_str()).collect();
        queries.sort_unstable();
        queries.dedup();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs_f64();
        let start = now - self.cfg.max_age.as_secs_f64();
        let answers = futures::future::join_all(queries.iter().map(|q| self.client.series(q, start, now))).await;
        let mut shapes = HashMap::new();
        for (q, answer) in queries.into_iter().zip(answers) {
            let raw = answer.map_err(|e| Error::Unavailable(e.to_string()))?;
            match answer::series(raw.status, &raw.body) {
                Ok(found) => {
                    shapes.insert(q.to_owned(), found);
                    for rule in self.adapter.rules.iter().filter(|r| r.series_query == q) {
                        if self.problem(&rule.id()).is_some_and(|p| p.field == "seriesQuery") {
                            self.clear_problem(&rule.id());
                        }
                    }
                }
                Err(f @ Failure::Rejected { .. }) => {
                    for rule in self.adapter.rules.iter().filter(|r| r.series_query == q) {
                        self.record_problem(Problem { rule: rule.id(), field: "seriesQuery", message: f.to_string() });
                    }
                }
                Err(f) => return Err(Error::Unavailable(format!("listing series {q}: {f}"))),
            }
        }
        Ok(shapes)
    }

    /// Probes every rule not yet known to work (or known not to).
    async fn probe_all(&self) {
        let pending: Vec<Probe> =
            self.probes().into_iter().filter(|p| self.problem(&p.rule).is_some() || !self.probed_ok(&p.rule)).collect();
        for probe in pending {
            let promql = match probe.promql {
                Ok(q) => q,
                Err(problem) => {
                    self.record_problem(problem);
                    continue;
                }
            };
            let raw = match self.client.query(&promql).await {
                Ok(raw) => raw,
                Err(e) => {
                    tracing::debug!(rule = %probe.rule, error = %e, "probe not answered; trying again at the next relist");
                    continue;
                }
            };
            match answer::query(raw.status, &raw.body) {
                Err(f @ (Failure::Rejected { .. } | Failure::WrongType(_))) => {
                    self.record_problem(Problem { rule: probe.rule, field: probe.field, message: f.to_string() });
                }
                Err(f) => {
                    tracing::debug!(rule = %probe.rule, error = %f, "probe failed; trying again at the next relist")
                }
                Ok(_) => {
                    if self.problem(&probe.rule).is_some_and(|p| p.field == probe.field) {
                        tracing::info!(rule = %probe.rule, "Prometheus accepts the rule's query again");
                        self.clear_problem(&probe.rule);
                    }
                    self.mark_probed(&probe.rule);
                }
            }
        }
    }

    fn probed_ok(&self, rule: &str) -> bool {
        self.probed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(rule)
    }

    fn mark_probed(&self, rule: &str) {
        self.probed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(rule.to_owned());
    }

    /// One probe per rule that can be rendered now: every project-format rule, and each
    /// prometheus-adapter rule that discovery found a metric for.
    fn probes(&self) -> Vec<Probe> {
        let everything = Selector::everything();
        let mut out = Vec::new();
        for rule in &self.native {
            let Some(rr) = rule.resources.values().next() else { continue };
            let ns = rr.info.namespaced.then_some(PROBE_NAME);
            let promql = super::rules::render(rule, rr, ns, Names::Some(&[PROBE_NAME]), &everything)
                .map_err(|e| Problem { rule: rule.id(), field: "query", message: e.0 });
            out.push(Probe { rule: rule.id(), field: "query", promql });
        }
        let reg = self.registry.load();
        let mut seen = std::collections::HashSet::new();
        for f in reg.all_custom() {
            if seen.insert(f.rule) {
                out.push(self.custom_probe(f));
            }
        }
        for f in reg.all_external() {
            if seen.insert(f.rule) {
                let rule = &self.adapter.rules[f.rule];
                let ns = if rule.namespaced { self.namespace_label(rule).ok() } else { None };
                let promql = query::external(&f.series, ns.as_deref().map(|l| (l, PROBE_NAME)), &everything)
                    .map(|d| rule.query.render(&d))
                    .map_err(|e| Problem { rule: rule.id(), field: "metricsQuery", message: e.0 });
                out.push(Probe { rule: rule.id(), field: "metricsQuery", promql });
            }
        }
        out
    }

    fn custom_probe(&self, f: &super::registry::Found) -> Probe {
        let rule = &self.adapter.rules[f.rule];
        debug_assert_eq!(rule.kind, Kind::Custom);
        let ns_label = if f.entry.namespaced {
            match namespaces(&self.catalog.load()).and_then(|ns| rule.resources.label_for(&ns)) {
                Some(l) => Some(l),
                None => {
                    let message = format!(
                        "{} is namespaced but no label maps to namespaces: add overrides: {{<label>: {{resource: namespace}}}}",
                        f.entry.path_name()
                    );
                    return Probe {
                        rule: rule.id(),
                        field: "resources",
                        promql: Err(Problem { rule: rule.id(), field: "resources", message }),
                    };
                }
            }
        } else {
            None
        };
        let ns = ns_label.as_deref().map(|l| (l, PROBE_NAME));
        let promql =
            query::custom(&f.series, ns, &f.label, QueryObjects::Names(&[PROBE_NAME]), &Selector::everything())
                .map(|d| rule.query.render(&d))
                .map_err(|e| Problem { rule: rule.id(), field: "metricsQuery", message: e.0 });
        Probe { rule: rule.id(), field: "metricsQuery", promql }
    }

    /// Relists every interval until `shutdown` (sooner, every 10 s at most, until the
    /// first relist has succeeded).
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let wait = if self.relisted() {
                self.cfg.relist_interval
            } else {
                self.cfg.relist_interval.min(Duration::from_secs(10))
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
            match self.relist().await {
                Ok(r) => tracing::debug!(
                    custom = r.custom,
                    external = r.external,
                    problems = r.problems.len(),
                    "relisted Prometheus series"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "relisting Prometheus series failed; keeping the metrics found before")
                }
            }
        }
    }
}
