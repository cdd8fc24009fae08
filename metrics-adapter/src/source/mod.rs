//! Metric sources and what the API asks of them.
//!
//! * [`direct`]: scrapes the GPU exporters (default; no Prometheus needed).
//! * [`prometheus`]: a Prometheus-compatible query API with rules that map custom metric
//!   names to PromQL templates (optional), in the project's format or prometheus-adapter's;
//!   the latter's `externalRules` serve external metrics.
//!
//! [`Sources`] routes each metric name to the one source that serves it (a project-format
//! rule naming a direct-source metric is refused at start; a discovered one is answered
//! by the direct source) and lists what exists for discovery.

pub mod direct;
pub mod prometheus;

use std::sync::Arc;

use crate::catalog::Catalog;
use crate::selector::Selector;

/// Which objects of a resource a request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Objects {
    /// Every object that has the metric (`*` without a label selector).
    All,
    /// One named object.
    One(String),
    /// The objects a label selector picked (possibly none), in ascending order without
    /// duplicates: build it with [`Objects::names`].
    Names(Vec<Arc<str>>),
}

impl Objects {
    /// The objects named, sorted and de-duplicated (cheap when already sorted, as the
    /// label store returns them).
    pub fn names(mut names: Vec<Arc<str>>) -> Self {
        names.sort_unstable();
        names.dedup();
        Objects::Names(names)
    }

    /// Whether `name` is among these objects (binary search for `Names`).
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Objects::All => true,
            Objects::One(n) => n == name,
            Objects::Names(names) => names.binary_search_by(|n| (**n).cmp(name)).is_ok(),
        }
    }
}

/// One metric read.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Resource as in the path (`pods`, `nodes`, `namespaces`, `deployments.apps`).
    pub resource: &'a str,
    /// Namespace, for namespaced resources.
    pub namespace: Option<&'a str>,
    /// Which objects.
    pub objects: &'a Objects,
    /// Metric name.
    pub metric: &'a str,
    /// `metricLabelSelector`.
    pub metric_selector: &'a Selector,
    /// How many objects a label selector chose `objects` among (the resource's objects in
    /// the namespace), when one did.
    pub among: Option<usize>,
}

/// One object's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Object name.
    pub name: Arc<str>,
    /// Value.
    pub value: f64,
    /// Observation time, ms since the epoch.
    pub timestamp_ms: i64,
    /// Window for rates, seconds.
    pub window_seconds: Option<i64>,
}

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The request cannot be expressed for this source (400).
    #[error("{0}")]
    Invalid(String),
    /// The backing system did not answer usably in time (503).
    #[error("{0}")]
    Unavailable(String),
    /// The backing system answered something a rule cannot use (500).
    #[error("{0}")]
    Internal(String),
    /// The rule is wrong: Prometheus refused its query (500, saying so).
    #[error("{0}")]
    Config(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

pub use crate::catalog::ResourceInfo;

/// How the well-known resources are described (the built-in catalog). Others need
/// `kind`/`apiVersion` in a rule, or the cluster's catalog.
pub fn builtin_resource(resource: &str) -> Option<ResourceInfo> {
    builtin_catalog().by_path_name(resource).map(crate::catalog::Entry::info)
}

/// The built-in catalog, made once.
pub fn builtin_catalog() -> &'static Catalog {
    static BUILTIN: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    BUILTIN.get_or_init(Catalog::builtin)
}

/// A discovery entry: `resource/metric`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listed {
    /// Resource.
    pub resource: String,
    /// Metric.
    pub metric: String,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
}

/// The configured sources.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The direct exporter scraper.
    pub direct: Option<Arc<direct::DirectSource>>,
    /// The Prometheus query source.
    pub prometheus: Option<Arc<prometheus::PrometheusSource>>,
}

/// A source that serves a (resource, metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The direct source.
    Direct,
    /// The Prometheus source.
    Prometheus,
}

impl Sources {
    /// Which source serves `metric` for `resource`, if any.
    pub fn serving(&self, resource: &str, metric: &str) -> Option<Which> {
        if self.direct.as_ref().is_some_and(|d| d.serves(resource, metric)) {
            return Some(Which::Direct);
        }
        if self.prometheus.as_ref().is_some_and(|p| p.serves(resource, metric)) {
            return Some(Which::Prometheus);
        }
        None
    }

    /// How objects of `resource` are described, if any source serves it.
    pub fn resource_info(&self, resource: &str) -> Option<ResourceInfo> {
        self.prometheus.as_ref().and_then(|p| p.resource_info(resource)).or_else(|| builtin_resource(resource))
    }

    /// Reads a metric; with the time spent waiting for the backend (Prometheus), if any.
    pub async fn query(&self, which: Which, req: &Request<'_>) -> Result<(Vec<Point>, Option<std::time::Duration>)> {
        match which {
            Which::Direct => match &self.direct {
                Some(d) => d.query(req).map(|points| (points, None)),
                None => Ok((Vec::new(), None)),
            },
            Which::Prometheus => match &self.prometheus {
                Some(p) => p.query(req).await.map(|(points, waited)| (points, Some(waited))),
                None => Ok((Vec::new(), None)),
            },
        }
    }

    /// Whether `external.metrics.k8s.io` is served (external rules are configured).
    pub fn external_served(&self) -> bool {
        self.prometheus.as_ref().is_some_and(|p| p.has_external())
    }

    /// The external metrics to list in discovery now, sorted.
    pub fn external_listed(&self) -> Vec<String> {
        self.prometheus.as_ref().map(|p| p.external_listed()).unwrap_or_default()
    }

    /// Reads an external metric: `None` when no rule found it.
    pub async fn external(
        &self,
        namespace: &str,
        metric: &str,
        selector: &Selector,
    ) -> Result<Option<Vec<prometheus::read::ExternalValue>>> {
        match &self.prometheus {
            Some(p) => p.external(namespace, metric, selector).await,
            None => Ok(None),
        }
    }

    /// What to list in discovery now, sorted and unique.
    pub fn listed(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        if let Some(d) = &self.direct {
            out.extend(d.listed());
        }
        if let Some(p) = &self.prometheus {
            out.extend(p.listed());
        }
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_objects_are_sorted_and_searchable() {
        let o = Objects::names(["c", "a", "b", "a"].into_iter().map(Arc::from).collect());
        let Objects::Names(v) = &o else { panic!("names") };
        assert_eq!(v.iter().map(|s| &**s).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(o.contains("b") && !o.contains("d") && !o.contains(""));
        assert!(Objects::All.contains("x"));
        assert!(Objects::One("x".into()).contains("x") && !Objects::One("x".into()).contains("y"));
    }
}
