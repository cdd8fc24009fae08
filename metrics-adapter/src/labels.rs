//! Object labels for `labelSelector`: the HPA asks for `pods/*` with the scale target's pod
//! selector, so the adapter must know which pods carry which labels. A metadata-only watch
//! of pods and nodes keeps a compact map (namespace, name, labels) and nothing else.
//!
//! Without a Kubernetes API (standalone mode) the store is absent and a non-empty
//! `labelSelector` is refused instead of guessed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::selector::Selector;

/// A compact label set.
type Labels = Box<[(Box<str>, Box<str>)]>;

/// namespace ("" for cluster-scoped) → name → labels, names in order
type Objects = HashMap<Box<str>, BTreeMap<Arc<str>, Labels>>;

/// Why a selection cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// There is no watch for this resource (standalone mode or unsupported resource).
    #[error("labelSelector is not supported for {0} here: {1}")]
    Unsupported(String, &'static str),
    /// The watch has not completed its first list yet.
    #[error("labels of {0} are not synced yet")]
    NotSynced(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Default)]
struct Table {
    objects: RwLock<Objects>,
    synced: AtomicBool,
}

fn key_of(meta: &kube::api::ObjectMeta) -> Option<(Box<str>, Arc<str>)> {
    let name = meta.name.as_deref()?;
    Some((meta.namespace.as_deref().unwrap_or_default().into(), Arc::from(name)))
}

fn labels_of(meta: &kube::api::ObjectMeta) -> Labels {
    meta.labels.iter().flatten().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect()
}

impl Table {
    fn apply(&self, meta: &kube::api::ObjectMeta) {
        if let Some((ns, name)) = key_of(meta) {
            let mut objects = self.objects.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            objects.entry(ns).or_default().insert(name, labels_of(meta));
        }
    }

    fn delete(&self, meta: &kube::api::ObjectMeta) {
        if let Some((ns, name)) = key_of(meta) {
            let mut objects = self.objects.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(m) = objects.get_mut(&ns) {
                m.remove(&name);
                if m.is_empty() {
                    objects.remove(&ns);
                }
            }
        }
    }

    fn replace(&self, all: Objects) {
        *self.objects.write().unwrap_or_else(std::sync::PoisonError::into_inner) = all;
        self.synced.store(true, Ordering::Release);
    }

    /// The matching names, and how many objects the namespace has.
    fn select(&self, namespace: &str, sel: &Selector) -> (Vec<Arc<str>>, usize) {
        let objects = self.objects.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(m) = objects.get(namespace) else { return (Vec::new(), 0) };
        let names = m
            .iter()
            .filter(|(_, labels)| sel.matches(|k| labels.iter().find(|(lk, _)| &**lk == k).map(|(_, v)| &**v)))
            .map(|(name, _)| name.clone())
            .collect();
        (names, m.len())
    }

    fn len(&self) -> usize {
        self.objects.read().unwrap_or_else(std::sync::PoisonError::into_inner).values().map(BTreeMap::len).sum()
    }

    /// Consumes watch events until the stream ends.
    async fn follow<K>(&self, stream: impl futures::Stream<Item = watcher::Result<Event<PartialObjectMeta<K>>>>) {
        let mut stream = std::pin::pin!(stream);
        let mut pending: Option<Objects> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => pending = Some(HashMap::new()),
                Ok(Event::InitApply(o)) => {
                    if let (Some(p), Some((ns, name))) = (pending.as_mut(), key_of(&o.metadata)) {
                        p.entry(ns).or_default().insert(name, labels_of(&o.metadata));
                    }
                }
                Ok(Event::InitDone) => {
                    if let Some(p) = pending.take() {
                        self.replace(p);
                    }
                }
                Ok(Event::Apply(o)) => self.apply(&o.metadata),
                Ok(Event::Delete(o)) => self.delete(&o.metadata),
                Err(e) => tracing::warn!(error = %e, "label watch failed; retrying with backoff"),
            }
        }
    }
}

/// Labels of pods and nodes, kept current by metadata watches.
#[derive(Debug, Default)]
pub struct LabelStore {
    pods: Table,
    nodes: Table,
}

impl LabelStore {
    /// An empty store (fill it with [`LabelStore::run`] or [`LabelStore::apply_pod`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Names of the objects of `resource` in `namespace` (None for cluster-scoped) matching
    /// `sel`, in ascending order.
    pub fn select(&self, resource: &str, namespace: Option<&str>, sel: &Selector) -> Result<Vec<Arc<str>>> {
        self.select_among(resource, namespace, sel).map(|(names, _)| names)
    }

    /// Like [`LabelStore::select`], with the number of objects the names were chosen
    /// among (all of the resource in the namespace).
    pub fn select_among(
        &self,
        resource: &str,
        namespace: Option<&str>,
        sel: &Selector,
    ) -> Result<(Vec<Arc<str>>, usize)> {
        let table = match resource {
            "pods" => &self.pods,
            "nodes" => &self.nodes,
            other => return Err(Error::Unsupported(other.to_owned(), "only pods and nodes can be selected by label")),
        };
        if !table.synced.load(Ordering::Acquire) {
            return Err(Error::NotSynced(resource.to_owned()));
        }
        Ok(table.select(namespace.unwrap_or_default(), sel))
    }

    /// Whether both watches have listed once.
    pub fn is_synced(&self) -> bool {
        self.pods.synced.load(Ordering::Acquire) && self.nodes.synced.load(Ordering::Acquire)
    }

    /// Number of pods known.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Records a pod's labels (for tests and benchmarks that have no watch).
    pub fn apply_pod(&self, namespace: &str, name: &str, labels: &[(&str, &str)]) {
        let meta = kube::api::ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            labels: Some(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
            ..Default::default()
        };
        self.pods.apply(&meta);
        self.pods.synced.store(true, Ordering::Release);
    }

    /// Marks both tables as listed (for tests and benchmarks that have no watch).
    pub fn mark_synced(&self) {
        self.pods.synced.store(true, Ordering::Release);
        self.nodes.synced.store(true, Ordering::Release);
    }

    /// Watches pods and nodes (metadata only) until `shutdown`.
    pub async fn run(self: Arc<Self>, client: kube::Client, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let pods = watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), watcher::Config::default())
            .default_backoff();
        let nodes =
            watcher::watcher(Api::<PartialObjectMeta<Node>>::all(client), watcher::Config::default()).default_backoff();
        tokio::select! {
            () = async { tokio::join!(self.pods.follow(pods), self.nodes.follow(nodes)); } => {}
            _ = shutdown.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_by_labels_within_a_namespace() {
        let s = LabelStore::new();
        assert!(matches!(s.select("pods", Some("ai"), &Selector::everything()), Err(Error::NotSynced(_))));
        s.apply_pod("ai", "inference-pool-1", &[("app", "inference")]);
        s.apply_pod("ai", "inference-pool-0", &[("app", "inference")]);
        s.apply_pod("ai", "trainer", &[("app", "train")]);
        s.apply_pod("other", "inference-x", &[("app", "inference")]);
        let sel = Selector::parse("app=inference").unwrap();
        let got = s.select("pods", Some("ai"), &sel).unwrap();
        assert_eq!(got, vec![Arc::from("inference-pool-0"), Arc::from("inference-pool-1")]);
        assert_eq!(s.select("pods", Some("ai"), &Selector::everything()).unwrap().len(), 3);
        assert_eq!(s.select_among("pods", Some("ai"), &sel).unwrap().1, 3);
        assert_eq!(s.select_among("pods", Some("none"), &sel).unwrap(), (vec![], 0));
        assert!(matches!(s.select("deployments.apps", Some("ai"), &sel), Err(Error::Unsupported(..))));
        assert!(matches!(s.select("nodes", None, &sel), Err(Error::NotSynced(_))));
        assert_eq!(s.pod_count(), 4);
    }

    #[test]
    fn delete_removes() {
        let t = Table::default();
        let meta = kube::api::ObjectMeta {
            namespace: Some("a".into()),
            name: Some("p".into()),
            labels: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        };
        t.apply(&meta);
        assert_eq!(t.len(), 1);
        t.delete(&meta);
        assert_eq!(t.len(), 0);
    }
}
