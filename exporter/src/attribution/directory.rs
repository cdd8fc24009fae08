//! What is known about the node's pods, from the API watch or, without one, from the
//! kubelet's pod log directories: UID to namespace, name, phase, containers and labels.
//!
//! The join asks two questions of it: who is pod UID `u` (for a process), and is pod
//! `namespace/name` still running (for a device the kubelet lists). Only a synced API
//! watch is *authoritative*: then a pod it does not know is gone. Pod log directories
//! name pods but cannot say a pod ended, so without the API a pod counts as running for
//! as long as the kubelet lists it.

use std::collections::{BTreeMap, HashMap};

/// `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(phase: &str) -> PodPhase {
        match phase {
            "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            _ => PodPhase::Unknown,
        }
    }

    /// Succeeded or Failed: the pod's containers will not run again.
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// One container of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMeta {
    pub name: String,
    /// 64 hex digits without the runtime scheme, once the container has started.
    pub id: Option<String>,
}

/// One pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMeta {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `None` when the source does not know it (pod log directories).
    pub phase: Option<PodPhase>,
    pub containers: Vec<ContainerMeta>,
    pub labels: BTreeMap<String, String>,
}

impl PodMeta {
    /// The container with this id, if the source knows ids.
    pub fn container_by_id(&self, id: &str) -> Option<&str> {
        self.containers.iter().find(|c| c.id.as_deref() == Some(id)).map(|c| c.name.as_str())
    }
}

/// Pods by UID, with the namespace/name index the join needs.
#[derive(Debug, Clone, Default)]
pub struct PodDirectory {
    pods: HashMap<String, PodMeta>,
    by_name: HashMap<(String, String), String>,
    /// True when built from a synced API watch: a pod missing here is gone.
    pub authoritative: bool,
}

impl PodDirectory {
    pub fn new(pods: impl IntoIterator<Item = PodMeta>, authoritative: bool) -> Self {
        let mut directory = PodDirectory { authoritative, ..PodDirectory::default() };
        for pod in pods {
            directory.insert(pod);
        }
        directory
    }

    pub fn insert(&mut self, pod: PodMeta) {
        self.by_name.insert((pod.namespace.clone(), pod.name.clone()), pod.uid.clone());
        self.pods.insert(pod.uid.clone(), pod);
    }

    pub fn remove(&mut self, uid: &str) {
        if let Some(pod) = self.pods.remove(uid) {
            let key = (pod.namespace, pod.name);
            if self.by_name.get(&key).is_some_and(|u| u == uid) {
                self.by_name.remove(&key);
            }
        }
    }

    pub fn by_uid(&self, uid: &str) -> Option<&PodMeta> {
        self.pods.get(uid)
    }

    pub fn by_name(&self, namespace: &str, name: &str) -> Option<&PodMeta> {
        self.by_name.get(&(namespace.to_string(), name.to_string())).and_then(|uid| self.pods.get(uid))
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Whether the pod `namespace/name` is known to have ended: Succeeded or Failed, or
    /// (authoritative directory only) absent.
    pub fn ended(&self, namespace: &str, name: &str) -> bool {
        match self.by_name(namespace, name) {
            Some(pod) => pod.phase.is_some_and(PodPhase::is_terminal),
            None => self.authoritative,
        }
    }

    /// Merges `fallback` under `self`: pods `self` lacks are taken from it, unless `self`
    /// is authoritative (then a pod it lacks is gone). Authority is `self`'s.
    pub fn merged_with(&self, fallback: &PodDirectory) -> PodDirectory {
        let mut out = self.clone();
        if self.authoritative {
            return out;
        }
        for pod in fallback.pods.values() {
            if !out.pods.contains_key(&pod.uid) {
                out.insert(pod.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, name: &str, phase: Option<PodPhase>) -> PodMeta {
        PodMeta {
            uid: uid.into(),
            namespace: "ns".into(),
            name: name.into(),
            phase,
            containers: vec![ContainerMeta { name: "main".into(), id: Some("c1".into()) }],
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn terminal_and_missing_pods_have_ended_only_where_the_source_can_tell() {
        let api = PodDirectory::new(
            [pod("u1", "running", Some(PodPhase::Running)), pod("u2", "done", Some(PodPhase::Succeeded))],
            true,
        );
        assert!(!api.ended("ns", "running"));
        assert!(api.ended("ns", "done"));
        assert!(api.ended("ns", "deleted"), "an authoritative directory knows a missing pod is gone");
        let logs = PodDirectory::new([pod("u1", "running", None)], false);
        assert!(!logs.ended("ns", "running"));
        assert!(!logs.ended("ns", "unknown"), "log directories cannot say a pod ended");
    }

    #[test]
    fn removal_keeps_a_recreated_pod_with_the_same_name() {
        let mut d = PodDirectory::new([pod("old", "web-0", Some(PodPhase::Running))], true);
        d.insert(pod("new", "web-0", Some(PodPhase::Running)));
        d.remove("old");
        assert_eq!(d.by_name("ns", "web-0").map(|p| p.uid.as_str()), Some("new"));
        assert_eq!(d.by_uid("new").and_then(|p| p.container_by_id("c1")), Some("main"));
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn a_merge_fills_gaps_from_the_fallback_without_reviving_deleted_pods() {
        let logs = PodDirectory::new([pod("u1", "a", None), pod("u9", "gone", None)], false);
        let api = PodDirectory::new([pod("u1", "a", Some(PodPhase::Running))], true);
        let merged = api.merged_with(&logs);
        assert_eq!(merged.by_uid("u1").and_then(|p| p.phase), Some(PodPhase::Running));
        assert!(merged.by_uid("u9").is_none(), "the API says u9 is gone");
        let no_api = PodDirectory::default().merged_with(&logs);
        assert!(no_api.by_uid("u9").is_some());
        assert!(!no_api.authoritative);
    }
}
