//! The direct source: scrapes every GPU exporter on a fixed interval, keeps each
//! exporter's last good [`model::Report`], and serves queries from a merged
//! [`model::Snapshot`] swapped in atomically after each cycle (queries never wait on a
//! scrape).
//!
//! A failed scrape keeps nothing new: the exporter's previous values stay until they pass
//! `max_age`, then its pods' metrics disappear. Missing, never zero: a zero would tell the
//! HPA the pods are idle and make it scale down on a fault. When nothing at all is fresh
//! (no exporter listed, or none answered within `max_age`), a read that finds no value
//! is an error saying why (503), not an empty list: the HPA shows that message in its
//! `ScalingActive=False` condition, where an empty list would only say that no metrics
//! came back.
//!
//! **Only objects that exist.** With the Kubernetes API, a `*` read, with or without a
//! label selector, answers only the pods and nodes the API server has (the metadata
//! watch's store, through `crate::objects`), as the Prometheus source and
//! prometheus-adapter do. A pod deleted from the API server whose values are still on an
//! exporter's page (until the exporter's next collection, or up to `--max-age` when its
//! scrape fails) is left out of every list at once: the HPA never averages a pod that is
//! gone. Read by its name, that pod still answers from the page until its values go, and
//! counts in its namespace's total (`namespaces/{ns}/metrics/{metric}`): a named read asks
//! no API server, in either source, as prometheus-adapter's `GetMetricByName` does not. `namespaces/*` answers the namespaces listed, each with its
//! pods' aggregate. Standalone there is no API server to ask, so a `*` read answers every
//! pod and node the pages show.

pub mod discovery;
pub mod model;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::Full;

use self::discovery::{Target, Targets};
use self::model::{GpuMetric, Kind, Names, Report, Snapshot};
use super::{Listed, Objects, Point, Request};
use crate::http_client::HttpClient;
use exposition_parser::{self, Format, Limits};

/// Settings of the direct source.
#[derive(Debug, Clone)]
pub struct Config {
    /// Time between scrape cycles.
    pub interval: Duration,
    /// Deadline for one exporter's answer.
    pub timeout: Duration,
    /// Values older than this are not served.
    pub max_age: Duration,
    /// Payload limits.
    pub limits: Limits,
    /// Exporters scraped at once.
    pub concurrency: usize,
    /// Bearer token sent to exporters, if any.
    pub bearer_token: Option<String>,
}

/// Why one exporter's scrape failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeError {
    /// The URL or request is unusable.
    #[error("bad request to {url}: {reason}")]
    Request {
        /// Target URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// Transport, timeout or size failure.
    #[error("{url}: {source}")]
    Http {
        /// Target URL.
        url: String,
        /// The failure.
        source: crate::http_client::Error,
    },
    /// Non-200 answer.
    #[error("{url}: HTTP {status}")]
    Status {
        /// Target URL.
        url: String,
        /// Status code.
        status: u16,
    },
    /// Malformed payload.
    #[error("{url}: {source}")]
    Parse {
        /// Target URL.
        url: String,
        /// Parser error.
        source: exposition_parser::Error,
    },
}

/// What one refresh cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Exporters scraped.
    pub targets: usize,
    /// Scrapes that failed.
    pub failures: usize,
    /// Pods with data in the new snapshot.
    pub pods: usize,
    /// Wall time of the cycle.
    pub duration: Duration,
}

struct Kept {
    report: Arc<Report>,
    fetched_at_ms: i64,
}

/// What the last cycle saw of the exporters, to say why a read finds nothing.
#[derive(Debug, Default)]
struct Reach {
    /// Exporters listed.
    targets: usize,
    /// The newest scrape or discovery error, if any.
    last_error: Option<String>,
}

/// The direct source.
pub struct DirectSource {
    cfg: Config,
    client: HttpClient,
    targets: Targets,
    kept: Mutex<HashMap<String, Kept>>,
    last_targets: Mutex<Vec<Target>>,
    snapshot: ArcSwap<Snapshot>,
    reach: ArcSwap<Reach>,
    ready: AtomicBool,
}

impl std::fmt::Debug for DirectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSource").field("cfg", &self.cfg).field("targets", &self.targets).finish_non_exhaustive()
    }
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn kind_of(resource: &str) -> Option<Kind> {
    match resource {
        "pods" => Some(Kind::Pods),
        "nodes" => Some(Kind::Nodes),
        "namespaces" => Some(Kind::Namespaces),
        _ => None,
    }
}

fn resource_of(kind: Kind) -> (&'static str, bool) {
    match kind {
        Kind::Pods => ("pods", true),
        Kind::Nodes => ("nodes", false),
        Kind::Namespaces => ("namespaces", false),
    }
}

impl DirectSource {
    /// A direct source scraping `targets` with `client`.
    pub fn new(cfg: Config, client: HttpClient, targets: Targets) -> Self {
        Self {
            cfg,
            client,
            targets,
            kept: Mutex::default(),
            last_targets: Mutex::default(),
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            reach: ArcSwap::from_pointee(Reach::default()),
            ready: AtomicBool::new(false),
        }
    }

    /// The metric names this source can serve (for conflict checks).
    pub fn metric_names() -> impl Iterator<Item = &'static str> {
        GpuMetric::ALL.into_iter().map(GpuMetric::name)
    }

    /// Whether it serves `metric` for `resource`.
    pub fn serves(&self, resource: &str, metric: &str) -> bool {
        match (kind_of(resource), GpuMetric::from_name(metric)) {
            (Some(kind), Some(m)) => m.aggregation(kind).is_some(),
            _ => false,
        }
    }

    /// Whether the first refresh cycle has completed.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn fresh_after(&self) -> i64 {
        now_ms().saturating_sub(i64::try_from(self.cfg.max_age.as_millis()).unwrap_or(i64::MAX))
    }

    /// (resource, metric) pairs with at least one fresh value.
    pub fn listed(&self) -> Vec<Listed> {
        self.snapshot
            .load()
            .available(self.fresh_after())
            .into_iter()
            .map(|(kind, m)| {
                let (resource, namespaced) = resource_of(kind);
                Listed { resource: resource.into(), metric: m.name().into(), namespaced }
            })
            .collect()
    }

    /// Answers a read from the current snapshot: the points found, or, when none is found
    /// because no exporter is listed or fresh, why.
    pub fn query(&self, req: &Request<'_>) -> Result<Vec<Point>, super::Error> {
        let points = self.points(req);
        if !points.is_empty() || !self.is_ready() {
            return Ok(points);
        }
        // Judged as the read judges values, at this instant: a value can pass --max-age
        // between two refresh cycles.
        if !self.snapshot.load().available(self.fresh_after()).is_empty() {
            return Ok(points);
        }
        let reach = self.reach.load();
        let why = reach.last_error.as_deref().map(|e| format!("; last error: {e}")).unwrap_or_default();
        Err(super::Error::Unavailable(if reach.targets == 0 {
            format!("no GPU exporter to read: {} name none{why}", self.targets.describe())
        } else {
            format!(
                "none of the {} GPU exporters ({}) has answered within --max-age {}s{why}",
                reach.targets,
                self.targets.describe(),
                self.cfg.max_age.as_secs()
            )
        }))
    }

    fn points(&self, req: &Request<'_>) -> Vec<Point> {
        let (Some(kind), Some(metric)) = (kind_of(req.resource), GpuMetric::from_name(req.metric)) else {
            return Vec::new();
        };
        let snap = self.snapshot.load();
        let fresh = self.fresh_after();
        let sel = req.metric_selector;
        let sorted: Vec<Arc<str>>;
        let names = match req.objects {
            Objects::All => Names::All,
            Objects::One(n) => Names::One(n),
            Objects::Names(v) if v.is_sorted() => Names::Sorted(v),
            Objects::Names(v) => {
                let mut v = v.clone();
                v.sort();
                sorted = v;
                Names::Sorted(&sorted)
            }
        };
        let values = match kind {
            Kind::Pods => {
                let Some(ns) = req.namespace else { return Vec::new() };
                snap.pods(ns, names, metric, sel, fresh)
            }
            Kind::Nodes => snap.nodes(names, metric, sel, fresh),
            Kind::Namespaces => match req.objects {
                Objects::One(ns) => snap
                    .namespace(ns, metric, sel, fresh)
                    .map(|value| model::ObjectValue { name: Arc::from(ns.as_str()), value })
                    .into_iter()
                    .collect(),
                // The namespaces that exist (listed by `crate::objects`), each with its pods'
                // aggregate; standalone (`All`) there is no list of namespaces to answer for.
                Objects::Names(v) => v
                    .iter()
                    .filter_map(|ns| {
                        let value = snap.namespace(ns, metric, sel, fresh)?;
                        Some(model::ObjectValue { name: ns.clone(), value })
                    })
                    .collect(),
                Objects::All => Vec::new(),
            },
        };
        values
            .into_iter()
            .map(|o| Point { name: o.name, value: o.value.v, timestamp_ms: o.value.at_ms, window_seconds: None })
            .collect()
    }

    /// Scrapes one exporter.
    pub async fn scrape(&self, url: &str) -> Result<Report, ScrapeError> {
        let mut req = http::Request::get(url)
            .header(http::header::ACCEPT, "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1")
            .header(http::header::USER_AGENT, concat!("gpu-metrics-adapter/", env!("CARGO_PKG_VERSION")));
        if let Some(token) = &self.cfg.bearer_token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| ScrapeError::Request { url: url.to_owned(), reason: e.to_string() })?;
        let fetched_at = now_ms();
        let resp = self
            .client
            .send(req, self.cfg.timeout, self.cfg.limits.max_bytes)
            .await
            .map_err(|source| ScrapeError::Http { url: url.to_owned(), source })?;
        if resp.status != http::StatusCode::OK {
            return Err(ScrapeError::Status { url: url.to_owned(), status: resp.status.as_u16() });
        }
        let format =
            Format::from_content_type(resp.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
        let samples = exposition_parser::parse(&resp.body, format, &self.cfg.limits, |n| model::FAMILIES.contains(&n))
            .map_err(|source| ScrapeError::Parse { url: url.to_owned(), source })?;
        Ok(Report::from_samples(&samples, fetched_at))
    }

    /// Stores reports as if their URLs had just been scraped, and rebuilds the snapshot
    /// (for tests and benchmarks that feed data without exporters).
    pub fn ingest(&self, reports: impl IntoIterator<Item = (String, Report)>) {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (url, report) in reports {
            kept.insert(url, Kept { report: Arc::new(report), fetched_at_ms: now_ms() });
        }
        self.snapshot.store(Arc::new(Snapshot::build(kept.values().map(|k| &*k.report))));
        self.reach.store(Arc::new(Reach { targets: kept.len(), last_error: None }));
        self.ready.store(true, Ordering::Release);
    }

    /// One cycle: resolve targets, scrape them all, rebuild the snapshot.
    pub async fn refresh(&self) -> CycleStats {
        let started = Instant::now();
        let mut last_error: Option<String> = None;
        let targets = match self.targets.resolve().await {
            Ok(t) => {
                *self.last_targets.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = t.clone();
                t
            }
            Err(e) => {
                tracing::warn!(error = %e, "exporter discovery failed; scraping the previous list");
                last_error = Some(e.to_string());
                self.last_targets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
            }
        };
        let urls: Vec<String> = targets.iter().map(|t| t.url.clone()).collect();
        let results: Vec<(String, Result<Report, ScrapeError>)> = futures::stream::iter(urls)
            .map(|url| async move {
                let r = self.scrape(&url).await;
                (url, r)
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await;
        let max_age_ms = i64::try_from(self.cfg.max_age.as_millis()).unwrap_or(i64::MAX);
        let now = now_ms();
        let mut failures = 0;
        let snapshot = {
            let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (url, result) in results {
                match result {
                    Ok(report) => {
                        kept.insert(url, Kept { report: Arc::new(report), fetched_at_ms: now });
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(error = %e, "exporter scrape failed; its values expire after max age");
                        last_error = Some(e.to_string());
                    }
                }
            }
            let live: HashSet<&str> = targets.iter().map(|t| t.url.as_str()).collect();
            kept.retain(|url, k| live.contains(url.as_str()) && now - k.fetched_at_ms <= max_age_ms);
            self.reach.store(Arc::new(Reach { targets: targets.len(), last_error }));
            Snapshot::build(kept.values().map(|k| &*k.report))
        };
        let pods = snapshot.pod_count();
        self.snapshot.store(Arc::new(snapshot));
        self.ready.store(true, Ordering::Release);
        let stats = CycleStats { targets: targets.len(), failures, pods, duration: started.elapsed() };
        tracing::debug!(?stats, "direct source refreshed");
        stats
    }

    /// Refreshes every interval until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => { self.refresh().await; }
                _ = shutdown.changed() => return,
            }
        }
    }
}
