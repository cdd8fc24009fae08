//! What the simulated kubelet answers: the scenario's pods as pod-resources messages.
//!
//! Like a real kubelet, `List` names every container of every pod, with or without
//! devices; device ids are what the NVIDIA device plugin reports (GPU UUID, MIG UUID, or
//! `<uuid>::<replica>` under time-slicing). `GetAllocatableResources` lists each device
//! the node offers: every MIG instance, every whole GPU, and for time-sliced GPUs the
//! replicas the scenario allocates.

use std::collections::BTreeSet;

use fake_nvml::scenario::Scenario;

use crate::proto::{AllocatableResourcesResponse, ContainerDevices, ContainerResources, PodResources};

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
                    }
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
    for gpu in &scenario.gpus {
        let bases: Vec<(String, String)> = match &gpu.mig {
            Some(instances) => {
                instances.iter().map(|i| (format!("nvidia.com/mig-{}", i.profile.name), i.uuid.clone())).collect()
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
