//! Who a GPU pod belongs to: its workload, from the pod's controller `ownerReference`,
//! and what its status says of restarts and OOM kills.
//!
//! - A pod a **ReplicaSet** controls belongs to the **Deployment** that made the
//!   ReplicaSet when the pod carries `pod-template-hash` and the ReplicaSet's name is
//!   `<deployment>-<hash>`: that is how the Deployment controller names them
//!   (`pkg/controller/deployment/sync.go`), so no ReplicaSet needs reading (and no
//!   `replicasets` permission). A ReplicaSet of its own (no such hash) stays a ReplicaSet.
//! - **StatefulSet**, **Job**, **DaemonSet** and any other controller: that owner.
//! - No controller: a **bare pod**, its own workload.
//!
//! Restarts and OOM kills from the pod's status are the fallback when kube-state-metrics
//! has no series for the pod: `restartCount` counts since the pod started, not over the
//! window, and `lastState` keeps only the last termination, so they can only say "at
//! least"; [`super::history`] prefers the window's counters.

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::{PodInfo, pod_info};

/// The owner kinds the command names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Kind {
    Deployment,
    ReplicaSet,
    StatefulSet,
    Job,
    DaemonSet,
    /// Another controller kind, as the reference names it.
    Other(String),
    Pod,
}

impl Kind {
    pub fn as_str(&self) -> &str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            Kind::Job => "Job",
            Kind::DaemonSet => "DaemonSet",
            Kind::Other(k) => k,
            Kind::Pod => "Pod",
        }
    }
}

/// A workload: namespace, kind and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    pub namespace: String,
    pub kind: Kind,
    pub name: String,
}

/// What `rightsize` needs of one pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodFacts {
    pub info: PodInfo,
    /// `None` until [`workload`] is asked (kept here so tests can build pods by hand).
    pub owner: Option<(String, String)>,
    /// The `pod-template-hash` label.
    pub template_hash: Option<String>,
    /// Restarts of its containers since the pod started.
    pub restarts: u32,
    /// Containers whose last termination was an OOM kill.
    pub oom_killed: u32,
    /// Whether the pod has DRA resource claims (its GPUs are not in its limits).
    pub has_claims: bool,
}

impl PodFacts {
    /// Whether the pod may hold a GPU: NVIDIA limits, or resource claims (DRA).
    pub fn may_hold_gpus(&self) -> bool {
        self.info.wants_gpus() || self.has_claims
    }
}

/// Reads a pod.
pub fn pod_facts(pod: &Pod) -> PodFacts {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()));
    let statuses = pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten());
    let (mut restarts, mut oom_killed) = (0u32, 0u32);
    for s in statuses {
        restarts = restarts.saturating_add(u32::try_from(s.restart_count).unwrap_or(0));
        let last = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
        if last.is_some_and(|t| t.reason.as_deref() == Some("OOMKilled")) {
            oom_killed += 1;
        }
    }
    PodFacts {
        info: pod_info(pod),
        owner,
        template_hash: pod.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash").cloned()),
        restarts,
        oom_killed,
        has_claims: pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).is_some_and(|c| !c.is_empty()),
    }
}

/// The workload a pod belongs to.
pub fn workload(pod: &PodFacts) -> WorkloadKey {
    let namespace = pod.info.namespace.clone();
    let (kind, name) = match &pod.owner {
        None => (Kind::Pod, pod.info.name.clone()),
        Some((kind, name)) => match kind.as_str() {
            "ReplicaSet" => match pod.template_hash.as_deref().and_then(|h| name.strip_suffix(h)?.strip_suffix('-')) {
                Some(deployment) if !deployment.is_empty() => (Kind::Deployment, deployment.to_string()),
                _ => (Kind::ReplicaSet, name.clone()),
            },
            "StatefulSet" => (Kind::StatefulSet, name.clone()),
            "Job" => (Kind::Job, name.clone()),
            "DaemonSet" => (Kind::DaemonSet, name.clone()),
            other => (Kind::Other(other.to_string()), name.clone()),
        },
    };
    WorkloadKey { namespace, kind, name }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(owner: Option<(&str, &str)>, hash: Option<&str>) -> Pod {
        let mut meta = json!({"name": "p-1", "namespace": "ai"});
        if let Some((kind, name)) = owner {
            meta["ownerReferences"] =
                json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": true}]);
        }
        if let Some(h) = hash {
            meta["labels"] = json!({"pod-template-hash": h});
        }
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 2,
                 "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ]}
        }))
        .unwrap()
    }

    fn key(kind: Kind, name: &str) -> WorkloadKey {
        WorkloadKey { namespace: "ai".into(), kind, name: name.into() }
    }

    #[test]
    fn owners_are_found_through_the_controller_reference() {
        let facts = pod_facts(&pod(Some(("ReplicaSet", "chat-7d9f8b6c5")), Some("7d9f8b6c5")));
        assert_eq!(workload(&facts), key(Kind::Deployment, "chat"));
        assert_eq!((facts.restarts, facts.oom_killed), (2, 1));
        // A ReplicaSet of its own: its name does not end with the hash.
        let own = pod_facts(&pod(Some(("ReplicaSet", "workers")), Some("abc")));
        assert_eq!(workload(&own), key(Kind::ReplicaSet, "workers"));
        let own = pod_facts(&pod(Some(("ReplicaSet", "abc")), Some("abc")));
        assert_eq!(workload(&own), key(Kind::ReplicaSet, "abc"), "no name left");
        assert_eq!(workload(&pod_facts(&pod(Some(("StatefulSet", "llm")), None))), key(Kind::StatefulSet, "llm"));
        assert_eq!(workload(&pod_facts(&pod(Some(("Job", "train-1")), None))), key(Kind::Job, "train-1"));
        assert_eq!(
            workload(&pod_facts(&pod(Some(("RayCluster", "ray")), None))),
            key(Kind::Other("RayCluster".into()), "ray")
        );
        let bare = pod_facts(&pod(None, None));
        assert_eq!(workload(&bare), key(Kind::Pod, "p-1"));
        assert!(bare.may_hold_gpus() && !bare.has_claims);
    }
}
