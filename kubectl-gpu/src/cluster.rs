//! Nodes and pods as the core API has them, reduced to what the views show: a node's
//! GPU labels and capacity, its health as the health loop wrote it (the `GPUHealthy`
//! condition, the `<domain>/gpu-unhealthy` taint, the claim annotation), who cordoned
//! it, and the pods' GPU requests.
//!
//! The node is read through `gpu-health`'s own [`NodeView`] and [`Claim`], so this
//! reading and the loop's writing cannot drift apart. "Cordoned by" is, in order: the
//! health loop when its claim says it applied the cordon and nobody else has written
//! `spec.unschedulable` since; otherwise the field managers `metadata.managedFields`
//! names for `spec.unschedulable` (`kubectl-cordon`, a drain tool, ...); otherwise
//! unknown (a server that keeps no managed fields).

use std::collections::BTreeMap;

use gpu_health::names::Names;
use gpu_health::node_state::{Claim, NodeView, QuarantineState};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::quantity;

/// GPU feature discovery's label of the GPU model (`NVIDIA-A100-SXM4-80GB`).
pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// GPU feature discovery's label of the GPU count.
pub const COUNT_LABEL: &str = "nvidia.com/gpu.count";
/// The label the GPU operator puts on GPU nodes (the exporter's DaemonSet selects it).
pub const PRESENT_LABEL: &str = "nvidia.com/gpu.present";

/// How the health loop left the node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeHealth {
    /// `GPUHealthy`: `True`, `False`, `Unknown`; `None` when the loop never wrote it.
    pub condition: Option<String>,
    /// The condition's reason (the primary reason code when unhealthy).
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The loop's taint value (its primary reason), if the taint is there.
    pub taint: Option<String>,
    /// The claim's state, if the loop holds one.
    pub state: Option<QuarantineState>,
    /// The circuit breaker refused the quarantine (per the claim).
    pub breaker_open: bool,
    /// Dry-run: what the loop would have done.
    pub dry_run: Vec<String>,
    /// The node carries the loop's opt-out label.
    pub opted_out: bool,
    /// The claim annotation is there but unreadable.
    pub claim_error: Option<String>,
    /// GPUs the loop holds alone by device taints (per the claim), by index.
    pub held_gpus: Vec<u32>,
    /// The circuit breaker refused a GPU's place (per the claim).
    pub gpu_breaker_open: bool,
}

/// A node, as the views need it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `nvidia.com/*` resources in the node's capacity.
    pub gpu_capacity: BTreeMap<String, f64>,
    pub unschedulable: bool,
    /// Who cordoned it; `None` when not cordoned.
    pub cordoned_by: Option<String>,
    pub ready: Option<bool>,
    pub health: NodeHealth,
}

impl NodeInfo {
    /// Whether this is a GPU node: labelled as one or offering NVIDIA resources.
    pub fn is_gpu_node(&self) -> bool {
        self.labels.get(PRESENT_LABEL).is_some_and(|v| v == "true")
            || self.labels.contains_key(PRODUCT_LABEL)
            || self.gpu_capacity.values().any(|v| *v > 0.0)
    }

    /// The model and count GPU feature discovery labelled the node with.
    pub fn labelled_gpus(&self) -> Option<(String, u32)> {
        let product = self.labels.get(PRODUCT_LABEL)?;
        let count = self.labels.get(COUNT_LABEL).and_then(|c| c.parse().ok()).unwrap_or(0);
        Some((product.replace('-', " ").replace("NVIDIA ", ""), count))
    }
}

/// Reads a node object.
pub fn node_info(node: &Node, names: &Names) -> NodeInfo {
    let view = NodeView::from_node(node, names);
    let gpu_capacity = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .map(|c| {
            c.iter()
                .filter(|(k, _)| k.starts_with("nvidia.com/"))
                .filter_map(|(k, q)| quantity::parse(&q.0).ok().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    let (claim, claim_error) = match view.claim(&names.state_annotation) {
        Some(Ok(claim)) => (Some(claim), None),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (None, None),
    };
    let dry_run = match view.claim(&names.dry_run_annotation) {
        Some(Ok(c)) => c.intended,
        _ => Vec::new(),
    };
    let cordoned_by = cordoned_by(&view, claim.as_ref(), names);
    let health = NodeHealth {
        condition: view.condition.as_ref().map(|c| c.status.clone()),
        reason: view.condition.as_ref().map(|c| c.reason.clone()).filter(|r| !r.is_empty()),
        message: view.condition.as_ref().map(|c| c.message.clone()).filter(|m| !m.is_empty()),
        taint: view.taint(&names.taint_key).map(|t| t.value.clone().unwrap_or_default()),
        state: claim.as_ref().map(|c| c.state),
        breaker_open: claim.as_ref().is_some_and(|c| c.blocked),
        dry_run,
        opted_out: view.labels.get(&names.opt_out_label).is_some_and(|v| v == "true"),
        claim_error,
        held_gpus: claim.iter().flat_map(|c| &c.gpus).filter(|g| !g.blocked).map(|g| g.index).collect(),
        gpu_breaker_open: claim.iter().flat_map(|c| &c.gpus).any(|g| g.blocked),
    };
    NodeInfo {
        name: view.name.clone(),
        labels: view.labels.clone(),
        gpu_capacity,
        unschedulable: view.unschedulable,
        cordoned_by,
        ready,
        health,
    }
}

fn cordoned_by(view: &NodeView, claim: Option<&Claim>, names: &Names) -> Option<String> {
    if !view.unschedulable {
        return None;
    }
    if claim.is_some_and(|c| c.applied.cordon) && view.cordon_is_ours(&names.field_manager) {
        return Some("gpu-health".into());
    }
    let others: Vec<&str> =
        view.unschedulable_managers.iter().map(String::as_str).filter(|m| *m != names.field_manager).collect();
    if others.is_empty() { Some("unknown".into()) } else { Some(others.join("+")) }
}

/// A pod, as the views need it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub phase: String,
    pub pod_ip: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// `nvidia.com/*` limits summed over the pod's containers.
    pub gpu_requests: BTreeMap<String, f64>,
    /// Container ports by name (and `""` for the first port), for exporter pods.
    pub ports: BTreeMap<String, u16>,
}

impl PodInfo {
    /// Whether the pod asks for any NVIDIA resource.
    pub fn wants_gpus(&self) -> bool {
        self.gpu_requests.values().any(|v| *v > 0.0)
    }
}

/// Reads a pod object.
pub fn pod_info(pod: &Pod) -> PodInfo {
    let spec = pod.spec.as_ref();
    let mut gpu_requests: BTreeMap<String, f64> = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for container in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        let resources = container.resources.as_ref();
        let limits = resources.and_then(|r| r.limits.as_ref()).or_else(|| resources.and_then(|r| r.requests.as_ref()));
        for (name, q) in limits.into_iter().flatten().filter(|(k, _)| k.starts_with("nvidia.com/")) {
            if let Ok(v) = quantity::parse(&q.0) {
                *gpu_requests.entry(name.clone()).or_default() += v;
            }
        }
        for port in container.ports.iter().flatten() {
            let Ok(number) = u16::try_from(port.container_port) else { continue };
            ports.entry(String::new()).or_insert(number);
            if let Some(name) = &port.name {
                ports.entry(name.clone()).or_insert(number);
            }
        }
    }
    let status = pod.status.as_ref();
    PodInfo {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        node: spec.and_then(|s| s.node_name.clone()),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Unknown".into()),
        pod_ip: status.and_then(|s| s.pod_ip.clone()),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        gpu_requests,
        ports,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Names {
        Names::new("gpu-telemetry.io")
    }

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn cordon_by(manager: &str) -> serde_json::Value {
        json!({"manager": manager, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
               "fieldsV1": {"f:spec": {"f:unschedulable": {}}}})
    }

    #[test]
    fn a_quarantined_node_says_why_and_who_cordoned_it() {
        let claim = r#"{"state":"quarantined","since":"2026-01-01T00:00:00Z","reasons":[],"applied":{"cordon":true,"taint":"Xid79"}}"#;
        let n = node(json!({
            "metadata": {"name": "gpu-2", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
                         "annotations": {"gpu-telemetry.io/gpu-health": claim},
                         "managedFields": [cordon_by("gpu-exporter-health")]},
            "spec": {"unschedulable": true, "taints": [{"key": "gpu-telemetry.io/gpu-unhealthy", "value": "Xid79", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
                       "conditions": [{"type": "Ready", "status": "True"},
                                      {"type": "GPUHealthy", "status": "False", "reason": "Xid79", "message": "GPU 3: XID 79"}]}
        }));
        let info = node_info(&n, &names());
        assert!(info.is_gpu_node());
        assert_eq!(info.labelled_gpus(), Some(("H100 80GB HBM3".into(), 8)));
        assert_eq!(info.gpu_capacity, BTreeMap::from([("nvidia.com/gpu".into(), 8.0)]));
        assert_eq!(info.cordoned_by.as_deref(), Some("gpu-health"));
        assert_eq!(info.ready, Some(true));
        assert_eq!(info.health.condition.as_deref(), Some("False"));
        assert_eq!(info.health.reason.as_deref(), Some("Xid79"));
        assert_eq!(info.health.taint.as_deref(), Some("Xid79"));
        assert_eq!(info.health.state, Some(QuarantineState::Quarantined));
        assert!(!info.health.breaker_open);
    }

    #[test]
    fn gpus_held_by_device_taints_are_read_from_the_claim() {
        let claim = r#"{"state":"gpus-quarantined","since":"2026-01-01T00:00:00Z","reasons":[],"applied":{"cordon":false},
            "gpus":[{"index":3,"uuid":"GPU-3","since":"2026-01-01T00:00:00Z","rules":["gpu-health.gpu-4.gpu-3-ab12"]},
                    {"index":5,"uuid":"GPU-5","since":"2026-01-01T00:00:00Z","blocked":true}]}"#;
        let n = node(json!({
            "metadata": {"name": "gpu-4", "annotations": {"gpu-telemetry.io/gpu-health": claim}},
            "status": {"conditions": [{"type": "GPUHealthy", "status": "False", "reason": "Xid79", "message": "only GPU 3 held"}]}
        }));
        let info = node_info(&n, &names());
        assert_eq!(info.health.state, Some(QuarantineState::GpusQuarantined));
        assert_eq!(info.health.held_gpus, vec![3], "GPU 5's place was refused: not held");
        assert!(info.health.gpu_breaker_open);
        assert!(!info.unschedulable && info.cordoned_by.is_none());
    }

    #[test]
    fn someone_elses_cordon_is_named_and_a_blocked_claim_is_a_breaker() {
        let claim = r#"{"state":"unhealthy","since":"2026-01-01T00:00:00Z","reasons":[],"blocked":true}"#;
        let n = node(json!({
            "metadata": {"name": "gpu-3", "annotations": {"gpu-telemetry.io/gpu-health": claim},
                         "managedFields": [cordon_by("kubectl-cordon")]},
            "spec": {"unschedulable": true}
        }));
        let info = node_info(&n, &names());
        assert_eq!(info.cordoned_by.as_deref(), Some("kubectl-cordon"));
        assert!(info.health.breaker_open);
        assert!(!info.is_gpu_node(), "no GPU label or capacity");
        let bare = node(json!({"metadata": {"name": "x"}, "spec": {"unschedulable": true}}));
        assert_eq!(node_info(&bare, &names()).cordoned_by.as_deref(), Some("unknown"));
        let uncordoned = node(json!({"metadata": {"name": "x", "annotations": {"gpu-telemetry.io/gpu-health": "{"}}}));
        let info = node_info(&uncordoned, &names());
        assert_eq!(info.cordoned_by, None);
        assert!(info.health.claim_error.as_deref().is_some_and(|e| e.contains("gpu-telemetry.io/gpu-health")));
    }

    #[test]
    fn a_pods_gpu_limits_and_ports_are_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}},
                 "ports": [{"containerPort": 9400, "name": "metrics"}]},
                {"name": "b", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "2"}}}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        }))
        .unwrap();
        let info = pod_info(&pod);
        assert_eq!(info.node.as_deref(), Some("n1"));
        assert_eq!(info.gpu_requests.get("nvidia.com/gpu"), Some(&1.0));
        assert_eq!(info.gpu_requests.get("nvidia.com/mig-1g.10gb"), Some(&2.0));
        assert!(!info.gpu_requests.contains_key("memory"));
        assert_eq!(info.ports.get("metrics"), Some(&9400));
        assert_eq!(info.ports.get(""), Some(&9400));
        assert!(info.wants_gpus());
        assert_eq!(info.phase, "Running");
    }
}
