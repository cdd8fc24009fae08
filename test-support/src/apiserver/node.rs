//! What an exporter on one node finds in the in-test API server: the node it is named
//! ([`NODE`], its `--node-name` in the tests' launchers) and its pods as the kubelet
//! reports them, with container statuses carrying the container IDs `/proc` names (the
//! pod watch maps a process to its container by them). A kubeconfig for the exporter is
//! [`kubeconfig`](super::kubeconfig) with [`ADMIN_TOKEN`](super::ADMIN_TOKEN).

use fake_nvml::scenario::Scenario;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// The node the exporter under test is named.
pub const NODE: &str = "test-node";

/// A pod on [`NODE`] in namespace `ai` with UID `uid-<name>`, label `app=<name>` and one
/// container `main`, whose ID is the length of `name` zero-padded to 64 digits.
pub fn node_pod(name: &str, phase: &str) -> Pod {
    let statuses = [("main".to_string(), format!("{:0>64}", name.len()))];
    pod(
        json!({"name": name, "namespace": "ai", "uid": format!("uid-{name}"), "labels": {"app": name}}),
        &statuses,
        phase,
    )
}

/// Pod `index` of the scenario as the API server has it, on [`NODE`].
pub fn scenario_pod(scenario: &Scenario, index: usize, phase: &str) -> Pod {
    let p = &scenario.pods[index];
    let statuses: Vec<(String, String)> = p.containers.iter().map(|c| (c.name.clone(), c.id.clone())).collect();
    pod(json!({"name": p.name, "namespace": p.namespace, "uid": p.uid, "labels": p.labels}), &statuses, phase)
}

/// A running-as-`phase` pod on [`NODE`] with this metadata and these (container, ID).
fn pod(metadata: serde_json::Value, containers: &[(String, String)], phase: &str) -> Pod {
    let specs: Vec<_> = containers.iter().map(|(name, _)| json!({"name": name})).collect();
    let statuses: Vec<_> = containers
        .iter()
        .map(|(name, id)| {
            json!({"name": name, "containerID": format!("containerd://{id}"), "image": "i", "imageID": "",
                   "ready": true, "restartCount": 0})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": {"nodeName": NODE, "containers": specs},
        "status": {"phase": phase, "containerStatuses": statuses}
    }))
    .unwrap()
}
