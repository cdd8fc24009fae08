//! The node-scoped pod watch on the Kubernetes API: pods with `spec.nodeName=<node>`,
//! through kube-runtime's watcher (list, then watch from the list's resourceVersion,
//! with bookmarks; relist on `410 Gone`; backoff on errors).
//!
//! It keeps a [`PodDirectory`] of the node's pods (UID, namespace, name, phase,
//! container ids and names, labels). The directory becomes authoritative once the first
//! list is complete, and is replaced whole at each relist, so a pod deleted while the
//! watch was down is gone after the relist. While the watch is failing, the last
//! directory stays in use (marked down in the metrics): its pods do not change phase on
//! their own, and a relist follows as soon as the API answers again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use super::directory::{ContainerMeta, PodDirectory, PodMeta, PodPhase};
use crate::snapshot::attribution::PodWatchHealth;

/// Why no watch could be set up.
#[derive(Debug, thiserror::Error)]
pub enum PodWatchError {
    #[error(transparent)]
    Config(#[from] crate::kube_config::KubeConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(String),
}

pub type Result<T, E = PodWatchError> = std::result::Result<T, E>;

#[derive(Debug, Default)]
struct State {
    directory: PodDirectory,
    up: bool,
    /// Pods listed since the last `Init`, installed at `InitDone`.
    listing: Option<Vec<PodMeta>>,
}

/// Shared between the watch task and the collector.
#[derive(Debug, Default)]
pub struct PodWatch {
    state: Mutex<State>,
}

impl PodWatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The node's pods as last seen.
    pub fn directory(&self) -> PodDirectory {
        self.lock().directory.clone()
    }

    pub fn health(&self) -> PodWatchHealth {
        let state = self.lock();
        PodWatchHealth { up: state.up, pods: state.directory.len() }
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: Event<Pod>) {
        let mut state = self.lock();
        match event {
            Event::Init => state.listing = Some(Vec::new()),
            Event::InitApply(pod) => {
                if let (Some(listing), Some(meta)) = (state.listing.as_mut(), pod_meta(&pod)) {
                    listing.push(meta);
                }
            }
            Event::InitDone => {
                let pods = state.listing.take().unwrap_or_default();
                if !state.up {
                    tracing::info!(pods = pods.len(), "Kubernetes pod watch synced; pods are named from the API");
                }
                state.directory = PodDirectory::new(pods, true);
                state.up = true;
            }
            Event::Apply(pod) => {
                if let Some(meta) = pod_meta(&pod) {
                    state.directory.insert(meta);
                }
            }
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    state.directory.remove(uid);
                }
            }
        }
    }

    /// Records a watch error; logged when the watch goes from up to down.
    pub fn failed(&self, error: &watcher::Error) {
        let mut state = self.lock();
        if state.up {
            tracing::warn!(%error, "Kubernetes pod watch failed; keeping the last pod list and retrying");
        } else {
            tracing::debug!(%error, "Kubernetes pod watch still failing");
        }
        state.up = false;
    }
}

/// Builds a client from `kubeconfig`, or from the environment (in-cluster service
/// account, then `KUBECONFIG` / `~/.kube/config`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client> {
    let config = crate::kube_config::find(kubeconfig).await?;
    kube::Client::try_from(config).map_err(|e| PodWatchError::Client(e.to_string()))
}

/// Watches the node's pods until the task is dropped.
pub async fn run(client: kube::Client, node: String, watch: Arc<PodWatch>) {
    let api: kube::Api<Pod> = kube::Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => watch.apply(event),
            Err(error) => watch.failed(&error),
        }
    }
}

/// The fields the join needs; `None` for an object without a UID.
pub fn pod_meta(pod: &Pod) -> Option<PodMeta> {
    let metadata = &pod.metadata;
    let uid = metadata.uid.clone()?;
    let status = pod.status.as_ref();
    let mut containers: Vec<ContainerMeta> = Vec::new();
    if let Some(spec) = &pod.spec {
        let names = spec.containers.iter().chain(spec.init_containers.iter().flatten()).map(|c| c.name.clone());
        containers.extend(names.map(|name| ContainerMeta { name, id: None }));
    }
    let statuses = status
        .into_iter()
        .flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()));
    for cs in statuses {
        let id = cs.container_id.as_deref().map(strip_scheme).filter(|id| !id.is_empty());
        match containers.iter_mut().find(|c| c.name == cs.name) {
            Some(c) => c.id = id,
            None => containers.push(ContainerMeta { name: cs.name.clone(), id }),
        }
    }
    Some(PodMeta {
        uid,
        namespace: metadata.namespace.clone().unwrap_or_default(),
        name: metadata.name.clone().unwrap_or_default(),
        phase: status.and_then(|s| s.phase.as_deref()).map(PodPhase::parse),
        containers,
        labels: metadata.labels.clone().unwrap_or_default().into_iter().collect::<BTreeMap<_, _>>(),
    })
}

/// `containerd://<id>`, `cri-o://<id>`, `docker://<id>` -> `<id>`.
fn strip_scheme(id: &str) -> String {
    id.split_once("://").map_or(id, |(_, rest)| rest).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, name: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"uid": uid, "namespace": "ns", "name": name, "labels": {"app": "x"}},
            "spec": {"nodeName": "n", "containers": [{"name": "main"}, {"name": "side"}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "main", "containerID": "containerd://ABC123", "image": "i", "imageID": "", "ready": true, "restartCount": 0},
                {"name": "side", "image": "i", "imageID": "", "ready": false, "restartCount": 0}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn pod_fields_are_taken() {
        let meta = pod_meta(&pod("u1", "a", "Running")).unwrap();
        assert_eq!(meta.phase, Some(PodPhase::Running));
        assert_eq!(meta.container_by_id("abc123"), Some("main"));
        assert_eq!(meta.containers[1], ContainerMeta { name: "side".into(), id: None });
        assert_eq!(meta.labels["app"], "x");
        let mut no_uid = pod("u1", "a", "Running");
        no_uid.metadata.uid = None;
        assert!(pod_meta(&no_uid).is_none());
    }

    #[test]
    fn a_relist_replaces_the_directory_and_events_update_it() {
        let watch = PodWatch::default();
        assert!(!watch.health().up);
        watch.apply(Event::Init);
        watch.apply(Event::InitApply(pod("u1", "a", "Running")));
        watch.apply(Event::InitApply(pod("u2", "b", "Running")));
        assert!(!watch.directory().authoritative, "not before the list is complete");
        watch.apply(Event::InitDone);
        assert_eq!(watch.health(), PodWatchHealth { up: true, pods: 2 });
        assert!(watch.directory().authoritative);
        watch.apply(Event::Apply(pod("u1", "a", "Succeeded")));
        assert!(watch.directory().ended("ns", "a"));
        watch.apply(Event::Delete(pod("u2", "b", "Running")));
        assert!(watch.directory().ended("ns", "b"));
        // A relist that no longer has u1.
        watch.apply(Event::Init);
        watch.apply(Event::InitApply(pod("u3", "c", "Pending")));
        assert_eq!(watch.directory().len(), 1, "the old directory serves until the relist is done");
        watch.apply(Event::InitDone);
        let d = watch.directory();
        assert!(d.by_uid("u1").is_none() && d.by_uid("u3").is_some());
    }
}
