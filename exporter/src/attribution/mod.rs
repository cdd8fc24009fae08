//! Pod attribution: which pod and container owns each GPU and MIG instance, and each
//! pod's use of shared (time-sliced, MPS) GPUs. A stage of its own after collection:
//! the collector hands each cycle's GPUs to [`Attributor::attach`], which joins them with
//! what the sources last said and returns an [`AttributionResult`] for the snapshot.
//!
//! Sources, each refreshed on its own schedule and never from a scrape:
//! - [`pod_resources`] + [`kubelet`]: the kubelet's device allocations (pod-resources v1
//!   `List` on a unix socket), for exclusive owners and the holders of shared GPUs.
//! - [`procfs`] + [`cgroup`]: PID -> pod UID + container id, read in the cycle for the
//!   PIDs NVML reported, cached by PID and start time.
//! - [`pod_watch`]: the node's pods from the Kubernetes API (names, phases, container
//!   ids, labels); it is what lets ended pods leave at once.
//! - [`resource_slices`]: the node's ResourceSlices from the Kubernetes API, which say
//!   which GPU or MIG instance each DRA device (driver, pool, name) is.
//! - [`pod_logs`]: pod names from `/var/log/pods` when there is no API server.
//!
//! [`join`] is the pure core; [`directory`] merges the pod sources; what it returns,
//! [`AttributionResult`], is plain data kept in the snapshot
//! ([`crate::snapshot::attribution`]), which rendering reads. `docs/attribution.md` describes the rules for users.

pub mod cgroup;
pub mod config;
pub mod directory;
pub mod join;
pub mod kubelet;
pub mod pod_logs;
pub mod pod_resources;
pub mod pod_watch;
pub mod procfs;
pub mod proto;
pub mod resource_slices;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use regex::Regex;

// What the stage returns is snapshot data; named here too, as the stage's output.
pub use crate::snapshot::attribution::{AttributionResult, ContainerRef, MigRef, PodInfo, PodUsage, Unattributed};

use self::config::{ApiMode, AttributionArgs};
use self::directory::PodDirectory;
use self::kubelet::KubeletCache;
use self::pod_resources::{PodResourcesClient, ResourceFilter};
use self::pod_watch::PodWatch;
use self::procfs::ProcReader;
use self::resource_slices::SliceWatch;
use crate::snapshot::GpuSnapshot;

/// The attribution stage: holds the sources' latest state and joins it with a cycle's
/// GPUs. Shared by the collector thread and the source tasks.
#[derive(Debug)]
pub struct Attributor {
    kubelet: Option<Arc<KubeletCache>>,
    watch: Option<Arc<PodWatch>>,
    slices: Option<Arc<SliceWatch>>,
    pod_logs: Option<Arc<Mutex<PodDirectory>>>,
    procfs: Mutex<ProcReader>,
    labels: Option<Regex>,
    /// Whether the "pods cannot be named" line was logged.
    unnamed_logged: AtomicBool,
}

impl Attributor {
    /// An attributor with no source running; the source tasks feed the handles it returns.
    pub fn new(procfs: impl Into<PathBuf>, labels: Option<Regex>) -> Self {
        Attributor {
            kubelet: None,
            watch: None,
            slices: None,
            pod_logs: None,
            procfs: Mutex::new(ProcReader::new(procfs)),
            labels,
            unnamed_logged: AtomicBool::new(false),
        }
    }

    /// Uses a kubelet cache (fed by [`kubelet::run`]).
    pub fn with_kubelet(mut self, cache: Arc<KubeletCache>) -> Self {
        self.kubelet = Some(cache);
        self
    }

    /// Uses a pod watch (fed by [`pod_watch::run`]).
    pub fn with_watch(mut self, watch: Arc<PodWatch>) -> Self {
        self.watch = Some(watch);
        self
    }

    /// Uses a ResourceSlice watch (fed by [`resource_slices::run`]).
    pub fn with_slices(mut self, slices: Arc<SliceWatch>) -> Self {
        self.slices = Some(slices);
        self
    }

    /// Uses a pod-log directory listing (fed by [`scan_pod_logs`]).
    pub fn with_pod_logs(mut self, logs: Arc<Mutex<PodDirectory>>) -> Self {
        self.pod_logs = Some(logs);
        self
    }

    /// Joins a cycle's GPUs with the sources' latest state.
    pub fn attach(&self, gpus: &[GpuSnapshot]) -> AttributionResult {
        let allocations = self.kubelet.as_ref().map(|k| k.allocations()).unwrap_or_default();
        let pids = self.procfs.lock().unwrap_or_else(PoisonError::into_inner).owners(join::pids(gpus));
        let from_api = self.watch.as_ref().map(|w| w.directory()).unwrap_or_default();
        let directory = match &self.pod_logs {
            Some(logs) => from_api.merged_with(&logs.lock().unwrap_or_else(PoisonError::into_inner)),
            None => from_api,
        };
        let slices = self.slices.as_ref().map(|s| s.directory()).unwrap_or_default();
        let mut result = join::join(
            gpus,
            &join::Sources {
                allocations: &allocations,
                pids: &pids,
                directory: &directory,
                slices: &slices,
                label_allowlist: self.labels.as_ref(),
            },
        );
        let unknown = result.unattributed.get(&Unattributed::UnknownPod).copied().unwrap_or(0);
        // Not while a configured watch is still listing: its pods are about to be known.
        let settled = self.watch.as_ref().is_none_or(|w| w.health().up);
        if unknown > 0 && settled && !self.unnamed_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                processes = unknown,
                "GPU processes run in pods no source can name (no API watch, no pod log directory for them); \
                 they are counted in gpu_exporter_unattributed_processes (logged once)"
            );
        }
        result.pod_resources = self.kubelet.as_ref().map(|k| k.health());
        result.pod_watch = self.watch.as_ref().map(|w| w.health());
        result.slice_watch = self.slices.as_ref().map(|s| s.health());
        result
    }
}

/// Starts the sources the flags ask for on the current tokio runtime and returns the
/// stage. `node` is the node name for the pod watch's field selector.
pub async fn start(args: &AttributionArgs, node: &str) -> Arc<Attributor> {
    let labels = args.label_allowlist().ok().flatten();
    let mut attributor = Attributor::new(args.procfs.clone(), labels);
    match args.socket() {
        Some(socket) => {
            let cache = Arc::new(KubeletCache::new(args.refresh_interval));
            let mut client = PodResourcesClient::new(socket, args.timeout, resource_filter(args));
            // The first list before the first cycle (bounded by --kubelet.timeout), so the
            // first snapshots already carry owners.
            kubelet::refresh(&mut client, &cache).await;
            tokio::spawn(kubelet::run(client, cache.clone(), args.refresh_interval));
            attributor = attributor.with_kubelet(cache);
        }
        None => tracing::info!("kubelet pod-resources turned off; devices get no owner labels"),
    }
    match args.api {
        ApiMode::Off => tracing::info!(
            "Kubernetes API off: exclusive devices are attributed from pod-resources; shared GPUs are split by pod \
             only where /var/log/pods names the pod, and ended pods leave when the kubelet stops listing them"
        ),
        ApiMode::Auto => match pod_watch::client(args.kubeconfig.as_deref()).await {
            Ok(client) => {
                let watch = Arc::new(PodWatch::default());
                tokio::spawn(pod_watch::run(client.clone(), node.to_string(), watch.clone()));
                tracing::info!(node, "watching this node's pods on the Kubernetes API");
                attributor = attributor.with_watch(watch);
                let drivers = resource_filter(args).dra_drivers;
                if !drivers.is_empty() {
                    let slices = Arc::new(SliceWatch::new(drivers));
                    tokio::spawn(resource_slices::run(client, node.to_string(), slices.clone()));
                    attributor = attributor.with_slices(slices);
                }
            }
            Err(error) => tracing::warn!(
                %error,
                "no Kubernetes API: exclusive devices are attributed from pod-resources; shared GPUs are split by pod \
                 only where /var/log/pods names the pod, and ended pods leave when the kubelet stops listing them"
            ),
        },
    }
    if let Some(dir) = args.pod_log_dir() {
        let first = pod_logs::scan(dir).unwrap_or_default();
        let logs = Arc::new(Mutex::new(first));
        tokio::spawn(scan_pod_logs(dir.to_path_buf(), logs.clone(), args.refresh_interval));
        attributor = attributor.with_pod_logs(logs);
    }
    Arc::new(attributor)
}

/// Which allocations are GPUs, from the flags (empty names dropped).
fn resource_filter(args: &AttributionArgs) -> ResourceFilter {
    let named = |names: &[String]| names.iter().filter(|r| !r.is_empty()).cloned().collect();
    ResourceFilter { extra: named(&args.resource_names), dra_drivers: named(&args.dra_drivers) }
}

/// Rescans the pod log directory every `interval` (the first time an interval from now);
/// a missing directory is noted once.
pub async fn scan_pod_logs(dir: PathBuf, logs: Arc<Mutex<PodDirectory>>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticker.tick().await;
        let path = dir.clone();
        let scanned = tokio::task::spawn_blocking(move || pod_logs::scan(&path)).await;
        match scanned {
            Ok(Ok(directory)) => {
                failing = false;
                *logs.lock().unwrap_or_else(PoisonError::into_inner) = directory;
            }
            Ok(Err(error)) => {
                if !failing {
                    tracing::info!(%error, "pod log directory unavailable; pods are not named from it");
                }
                failing = true;
                *logs.lock().unwrap_or_else(PoisonError::into_inner) = PodDirectory::default();
            }
            Err(_) => {}
        }
    }
}
