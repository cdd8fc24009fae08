//! What the simulated kubelet answers: the scenario's pods as pod-resources messages.
//!
//! Like a real kubelet, `List` names every container of every pod, with or without
//! devices; device ids are what the NVIDIA device plugin reports (GPU UUID, MIG UUID, or
//! `<uuid>::<replica>` under time-slicing), and devices held through ResourceClaims are
//! in `dynamic_resources`, one entry per claim, by driver, pool and device name. `GetAllocatableResources` lists each device
//! the node offers: every MIG instance, every whole GPU, and for time-sliced GPUs the
//! replicas the scenario allocates, except the GPUs the DRA driver publishes.

use fake_nvml::scenario::mig::mixed_resource;
use std::collections::BTreeSet;

use fake_nvml::scenario::{Container, Scenario};

use crate::proto::{
    AllocatableResourcesResponse, CdiDevice, ClaimResource, ContainerDevices, ContainerResources, DynamicResource,
    PodResources,
};

/// The `List` answer for a scenario.
pub fn pod_resources(scenario: &Scenario) -> Vec<PodResources> {
    scenario
        .pods
        .iter()
        .map(|pod| PodResources {
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            containers: pod
                .containers
                .iter()
                .map(|c| {
                    let resources: BTreeSet<&str> = c.devices.iter().map(|(r, _)| r.as_str()).collect();
                    ContainerResources {
                        name: c.name.clone(),
                        devices: resources
                            .into_iter()
                            .map(|resource| ContainerDevices {
                                resource_name: resource.to_string(),
                                device_ids: c
                                    .devices
                                    .iter()
                                    .filter(|(r, _)| r == resource)
                                    .map(|(_, id)| id.clone())
                                    .collect(),
                                topology: None,
                            })
                            .collect(),
                        cpu_ids: Vec::new(),
                        memory: Vec::new(),
                        dynamic_resources: dynamic_resources(scenario, &pod.namespace, c),
                    }
                })
                .collect(),
        })
        .collect()
}

/// A container's claims as pod-resources reports them: one entry per claim.
fn dynamic_resources(scenario: &Scenario, namespace: &str, container: &Container) -> Vec<DynamicResource> {
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
                    pool_name: dra.pool.clone(),
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
    let mut add = |resource: String, id: String| match devices.iter_mut().find(|d| d.resource_name == resource) {
        Some(d) => d.device_ids.push(id),
        None => devices.push(ContainerDevices { resource_name: resource, device_ids: vec![id], topology: None }),
    };
    // The DRA driver's GPUs are not the device plugin's to offer.
    let dra_gpu = |index: u32| scenario.dra.as_ref().is_some_and(|d| d.publishes(index));
    for gpu in scenario.gpus.iter().filter(|g| !dra_gpu(g.index)) {
        let bases: Vec<(String, String)> = match &gpu.mig {
            Some(instances) => {
                instances.iter().map(|i| (mixed_resource(&i.profile, &gpu.mig_profiles), i.uuid.clone())).collect()
            }
            None => vec![("nvidia.com/gpu".to_string(), gpu.uuid.clone())],
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
