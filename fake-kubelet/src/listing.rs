//! What the simulated kubelet answers: the scenario's pods as pod-resources messages.
//!
//! Like a real kubelet, `List` names every container of every pod, with or without
//! devices; device ids are what the NVIDIA device plugin reports (GPU UUID, MIG UUID, or
//! `<uuid>::<replica>` under time-slicing), each in a `ContainerDevices` of its own with
//! its GPU's NUMA node, as the kubelet v1.37 answers for NVIDIA's plugin, which reports
//! each device's NUMA node from the GPU's PCI `numa_node` (pkg/kubelet/cm/
//! container_manager.go `containerDevicesFromResourceDeviceInstances`: an entry per
//! device and NUMA node; fake-nvml's host tree places GPUs as
//! `fake_nvml::topology::numa_node` does; found by real-cluster/tests/real_kubelet.rs).
//! Devices held through ResourceClaims are in `dynamic_resources`, one entry per claim,
//! by driver, pool (the node's name, as NVIDIA's DRA driver names its pool) and device
//! name. `GetAllocatableResources` lists each device the node offers, one per entry too:
//! every MIG instance and every whole GPU, except the GPUs the DRA driver publishes;
//! under the scenario's `time_slicing` each whole GPU's replicas, as the plugin offers
//! them, and without it the replicas the scenario's pods hold.

use fake_nvml::scenario::mig::offered_as;
use std::collections::BTreeSet;

use fake_nvml::scenario::{Container, Scenario};

use crate::proto::{
    AllocatableResourcesResponse, CdiDevice, ClaimResource, ContainerDevices, ContainerResources, DynamicResource,
    NumaNode, PodResources, TopologyInfo,
};

/// The `List` answer for a scenario on node `node`.
pub fn pod_resources(scenario: &Scenario, node: &str) -> Vec<PodResources> {
    scenario
        .pods
        .iter()
        .map(|pod| PodResources {
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            containers: pod
                .containers
                .iter()
                .map(|c| ContainerResources {
                    name: c.name.clone(),
                    devices: c.devices.iter().map(|(resource, id)| one_device(scenario, resource, id)).collect(),
                    cpu_ids: Vec::new(),
                    memory: Vec::new(),
                    dynamic_resources: dynamic_resources(scenario, node, &pod.namespace, c),
                })
                .collect(),
        })
        .collect()
}

/// One device as the kubelet lists it: alone in its entry, with its GPU's NUMA node.
fn one_device(scenario: &Scenario, resource: &str, id: &str) -> ContainerDevices {
    let uuid = id.split_once("::").map_or(id, |(uuid, _)| uuid);
    let gpu = scenario.gpus.iter().find(|g| g.uuid == uuid || g.mig.iter().flatten().any(|i| i.uuid == uuid));
    let count = u32::try_from(scenario.gpus.len()).unwrap_or(u32::MAX);
    let topology = gpu.map(|g| TopologyInfo {
        nodes: vec![NumaNode { id: i64::from(fake_nvml::topology::numa_node(g.index, count)) }],
    });
    ContainerDevices { resource_name: resource.to_string(), device_ids: vec![id.to_string()], topology }
}

/// A container's claims as pod-resources reports them: one entry per claim.
fn dynamic_resources(scenario: &Scenario, node: &str, namespace: &str, container: &Container) -> Vec<DynamicResource> {
    let Some(dra) = &scenario.dra else { return Vec::new() };
    let claims: BTreeSet<&str> = container.claims.iter().map(|c| c.claim.as_str()).collect();
    claims
        .into_iter()
        .map(|claim| DynamicResource {
            claim_name: claim.to_string(),
            claim_namespace: namespace.to_string(),
            claim_resources: container
                .claims
                .iter()
                .filter(|c| c.claim == claim)
                .map(|c| ClaimResource {
                    cdi_devices: vec![CdiDevice { name: format!("k8s.{}/claim={}-{}", dra.driver, claim, c.device) }],
                    driver_name: dra.driver.clone(),
                    pool_name: node.to_string(),
                    device_name: c.device.clone(),
                    share_id: None,
                })
                .collect(),
        })
        .collect()
}

/// The `GetAllocatableResources` answer for a scenario.
pub fn allocatable(scenario: &Scenario) -> AllocatableResourcesResponse {
    let allocated: Vec<(&str, &str)> = scenario
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.devices)
        .map(|(r, id)| (r.as_str(), id.as_str()))
        .collect();
    let mut devices: Vec<ContainerDevices> = Vec::new();
    let mut add = |resource: String, id: String| devices.push(one_device(scenario, &resource, &id));
    // The DRA driver's GPUs are not the device plugin's to offer.
    let dra_gpu = |index: u32| scenario.dra.as_ref().is_some_and(|d| d.publishes(index));
    for gpu in scenario.gpus.iter().filter(|g| !dra_gpu(g.index)) {
        let plugin = scenario.device_plugin;
        let bases: Vec<(String, String)> = match (&gpu.mig, plugin.time_slicing) {
            (Some(instances), _) => instances
                .iter()
                .map(|i| (offered_as(plugin.mig_strategy, &i.profile, &gpu.mig_profiles), i.uuid.clone()))
                .collect(),
            (None, Some(shared)) => {
                for n in 0..shared.replicas {
                    add(shared.resource().to_string(), format!("{}::{n}", gpu.uuid));
                }
                continue;
            }
            (None, None) => vec![("nvidia.com/gpu".to_string(), gpu.uuid.clone())],
        };
        for (resource, uuid) in bases {
            let replicas: Vec<&str> = allocated
                .iter()
                .filter(|(_, id)| id.split_once("::").is_some_and(|(u, _)| u == uuid))
                .map(|(_, id)| *id)
                .collect();
            if replicas.is_empty() {
                add(resource, uuid);
            } else {
                for id in replicas {
                    add(resource.clone(), id.to_string());
                }
            }
        }
    }
    AllocatableResourcesResponse { devices, cpu_ids: Vec::new(), memory: Vec::new() }
}
