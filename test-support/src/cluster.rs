//! Kubernetes objects for tests, typed (k8s-openapi): GPU nodes as the GPU operator and
//! the health loop leave them, exporter pods as the DaemonSet makes them, and the pods of
//! a fake-nvml scenario as the kubelet runs them (their GPU limits are the devices the
//! scenario allocates), so the API server and the simulated node tell the same story.

use std::collections::BTreeMap;

use fake_nvml::scenario::Scenario;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
    Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta, Time};
use serde_json::{Value, json};

/// The exporters' namespace and labels, as `deploy/` installs them.
pub const EXPORTER_NAMESPACE: &str = "gpu-telemetry";
pub const EXPORTER_LABEL: (&str, &str) = ("app.kubernetes.io/name", "gpu-exporter");

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
}

fn epoch() -> Time {
    Time(jiff::Timestamp::UNIX_EPOCH)
}

/// A ready GPU node labelled as GPU feature discovery labels it, with `count` GPUs of
/// `product` (`NVIDIA-A100-SXM4-80GB`) and these NVIDIA resources in its capacity.
pub fn gpu_node(name: &str, product: &str, count: u32, resources: &[(&str, u32)]) -> Node {
    let capacity: BTreeMap<String, Quantity> =
        resources.iter().map(|(r, n)| ((*r).to_string(), Quantity(n.to_string()))).collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(&[
                ("kubernetes.io/hostname", name),
                ("nvidia.com/gpu.present", "true"),
                ("nvidia.com/gpu.product", product),
                ("nvidia.com/gpu.count", &count.to_string()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            conditions: Some(vec![condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")]),
            ..NodeStatus::default()
        }),
    }
}

/// A plain node without GPUs.
pub fn cpu_node(name: &str) -> Node {
    let mut node = gpu_node(name, "", 0, &[]);
    node.metadata.labels = Some(labels(&[("kubernetes.io/hostname", name)]));
    node
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(epoch()),
        ..NodeCondition::default()
    }
}

/// Sets the health loop's `GPUHealthy` condition.
pub fn set_gpu_healthy(node: &mut Node, status: &str, reason: &str, message: &str) {
    let conditions = node.status.get_or_insert_with(NodeStatus::default).conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "GPUHealthy");
    conditions.push(condition("GPUHealthy", status, reason, message));
}

/// Cordons the node as field manager `manager` (`kubectl-cordon`, `gpu-exporter-health`).
pub fn cordon(node: &mut Node, manager: &str) {
    node.spec.get_or_insert_with(NodeSpec::default).unschedulable = Some(true);
    let entry = ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        api_version: Some("v1".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": {"f:unschedulable": {}}}))),
        time: Some(epoch()),
        ..ManagedFieldsEntry::default()
    };
    node.metadata.managed_fields.get_or_insert_with(Vec::new).push(entry);
}

/// Adds the health loop's taint `gpu-telemetry.io/gpu-unhealthy=<reason>:NoSchedule`.
pub fn taint(node: &mut Node, reason: &str) {
    let taint = Taint {
        key: "gpu-telemetry.io/gpu-unhealthy".into(),
        value: Some(reason.into()),
        effect: "NoSchedule".into(),
        time_added: None,
    };
    node.spec.get_or_insert_with(NodeSpec::default).taints.get_or_insert_with(Vec::new).push(taint);
}

/// Sets an annotation (the health loop's claim is `gpu-telemetry.io/gpu-health`).
pub fn annotate(node: &mut Node, key: &str, value: &str) {
    node.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
}

/// A node the health loop quarantined for `reason`: condition, taint, its own cordon
/// and its claim, as `gpu-health-kube` writes them.
pub fn quarantine(node: &mut Node, reason: &str, message: &str) {
    set_gpu_healthy(node, "False", reason, message);
    taint(node, reason);
    cordon(node, "gpu-exporter-health");
    let claim = serde_json::json!({
        "state": "quarantined", "since": "2026-01-01T00:00:00Z",
        "reasons": [{"code": reason, "detail": message}],
        "applied": {"cordon": true, "taint": reason},
    });
    annotate(node, "gpu-telemetry.io/gpu-health", &claim.to_string());
}

fn running(ip: &str) -> PodStatus {
    PodStatus { phase: Some("Running".into()), pod_ip: Some(ip.into()), ..PodStatus::default() }
}

/// The exporter DaemonSet's pod on `node`, port `metrics` 9400, running at `ip`.
pub fn exporter_pod(node: &str, ip: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("gpu-exporter-{node}")),
            namespace: Some(EXPORTER_NAMESPACE.into()),
            labels: Some(labels(&[EXPORTER_LABEL, ("app.kubernetes.io/part-of", "gpu-telemetry")])),
            creation_timestamp: Some(epoch()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "gpu-exporter".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("metrics".into()),
                    container_port: 9400,
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(running(ip)),
    }
}

/// The scenario's pods as the API server has them, on `node`: one container per
/// scenario container, limits counting its devices per resource.
pub fn scenario_pods(scenario: &Scenario, node: &str) -> Vec<Pod> {
    scenario
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let containers = p
                .containers
                .iter()
                .map(|c| {
                    let mut limits: BTreeMap<String, Quantity> = BTreeMap::new();
                    for (resource, _) in &c.devices {
                        let n = limits.get(resource).map_or(0, |q| q.0.parse::<u32>().unwrap_or(0)) + 1;
                        limits.insert(resource.clone(), Quantity(n.to_string()));
                    }
                    Container {
                        name: c.name.clone(),
                        resources: Some(ResourceRequirements {
                            limits: Some(limits),
                            ..ResourceRequirements::default()
                        }),
                        ..Container::default()
                    }
                })
                .collect();
            Pod {
                metadata: ObjectMeta {
                    name: Some(p.name.clone()),
                    namespace: Some(p.namespace.clone()),
                    uid: Some(p.uid.clone()),
                    labels: Some(p.labels.clone()),
                    creation_timestamp: Some(epoch()),
                    ..ObjectMeta::default()
                },
                spec: Some(PodSpec { node_name: Some(node.into()), containers, ..PodSpec::default() }),
                status: Some(running(&format!("10.1.{}.{}", node.len() % 250, i + 10))),
            }
        })
        .collect()
}

/// [`scenario_pods`] of the scenario file at `path`.
pub fn scenario_file_pods(path: &std::path::Path, node: &str) -> Vec<Pod> {
    scenario_pods(&Scenario::load(path).unwrap(), node)
}

/// A pod asking for `resources` (e.g. `nvidia.com/gpu: 1`) in `phase`, on `node` if any.
pub fn gpu_pod(namespace: &str, name: &str, node: Option<&str>, phase: &str, resources: &[(&str, u32)]) -> Pod {
    let limits = resources.iter().map(|(r, n)| ((*r).to_string(), Quantity(n.to_string()))).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            creation_timestamp: Some(epoch()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(str::to_string),
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements { limits: Some(limits), ..ResourceRequirements::default() }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() }),
    }
}

/// Pod `namespace/name` with these labels, UID `uid-<namespace>-<name>` and the kubelet's
/// managed fields (which a metadata-only client should not keep), for a client that
/// reads only pods' metadata (the metrics adapter's label cache).
pub fn labelled_pod(namespace: &str, name: &str, pairs: &[(&str, &str)]) -> Pod {
    let kubelet = ManagedFieldsEntry {
        manager: Some("kubelet".into()),
        operation: Some("Update".into()),
        api_version: Some("v1".into()),
        ..ManagedFieldsEntry::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(format!("uid-{namespace}-{name}")),
            labels: Some(labels(pairs)),
            managed_fields: Some(vec![kubelet]),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

/// A GPU node as the kubelet registers it (no GPU labels beyond `nvidia.com/gpu.present`,
/// the GPU operator's taint), as JSON for a test to shape before
/// [`ApiServer::add_node`](crate::apiserver::ApiServer::add_node).
pub fn registered_node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}
        },
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "ok"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ],
            "nodeInfo": {
                "architecture": "amd64", "bootID": format!("boot-{name}"), "containerRuntimeVersion": "containerd://1.7",
                "kernelVersion": "6.1", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0", "machineID": "m",
                "operatingSystem": "linux", "osImage": "Debian", "systemUUID": "s"
            }
        }
    })
}
