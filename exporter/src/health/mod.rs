//! The exporter's side of the health loop: it turns a [`Snapshot`] into the core's
//! observation ([`observe`]), renders the loop's metric families ([`metrics`]), finds
//! the Kubernetes API as `--kubernetes.api` says, and starts the loop.
//!
//! The loop itself lives in two crates, named directly wherever they are used:
//! `gpu-health` (the pure core: signals, policy, plan, the breaker's decision, the XID
//! table) and `gpu-health-kube` (the Kubernetes edge, the flags and the loop driver).
//! Nothing of theirs is re-exported here.
//!
//! `--kubernetes.api` means the same here as for the pod watch: `off` and the process
//! never builds a Kubernetes client, so the loop runs **report-only**; `auto` and it
//! uses `--kubernetes.kubeconfig`, else the in-cluster service account, `KUBECONFIG`
//! or `~/.kube/config`. Without any of those the loop is report-only too.

pub mod metrics;
pub mod observe;

use std::path::PathBuf;
use std::sync::Arc;

use gpu_health_kube::{HealthHandle, config, start_with_config};
use tokio::sync::watch;

use crate::render::Section;
use crate::snapshot::Snapshot;

/// How the loop finds the Kubernetes API: `--kubernetes.api` and
/// `--kubernetes.kubeconfig`, read the same way as for the pod watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeAccess {
    /// `--kubernetes.api=off`: no client is built and nothing is sent; report-only.
    Off,
    /// `--kubernetes.api=auto`: `kubeconfig` if given, else the in-cluster service
    /// account, `KUBECONFIG` or `~/.kube/config`; report-only without any.
    Auto { kubeconfig: Option<PathBuf> },
}

/// Finds the Kubernetes API as `access` says and starts the loop on the current
/// runtime; with `--kubernetes.api=off` or without an API configured the loop runs in
/// report-only mode.
pub async fn start(
    settings: config::HealthSettings,
    node: String,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    access: KubeAccess,
) -> HealthHandle {
    let kubeconfig = match access {
        KubeAccess::Off => {
            tracing::info!(
                node,
                "--kubernetes.api=off: the health loop runs in report-only mode; it evaluates, logs and exports its \
                 verdict and never contacts the API server"
            );
            return gpu_health_kube::start_offline(settings, node, snapshots);
        }
        KubeAccess::Auto { kubeconfig } => kubeconfig,
    };
    let config = match crate::kube_config::find(kubeconfig.as_deref()).await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(
                node,
                reason = %e,
                "no Kubernetes API configured: the health loop runs in report-only mode and only logs and exports \
                 what it would do"
            );
            None
        }
    };
    start_with_config(settings, node, snapshots, config).await
}

/// The metric families to render after the exporter's own.
pub fn sections(handle: &HealthHandle) -> Vec<Arc<dyn Section>> {
    vec![handle.metrics.clone() as Arc<dyn Section>]
}
