//! The ResourceSlice the node's DRA driver publishes, from the scenario: one slice of
//! the driver's pool (named after the node, as NVIDIA's driver names it) with a device per whole GPU and per MIG instance, carrying the
//! attributes NVIDIA's DRA driver sets (`type`, `uuid`, `productName`, and on MIG
//! devices `parentUUID` and `profile`). The in-test API servers serve it; the exporter
//! maps the kubelet's `dynamic_resources` to GPUs through it.

use std::collections::BTreeMap;

use fake_nvml::scenario::Scenario;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The node's slices (none without a `dra` section), as a driver on `node` would write them.
pub fn resource_slices(scenario: &Scenario, node: &str) -> Vec<ResourceSlice> {
    let Some(dra) = &scenario.dra else { return Vec::new() };
    let devices = dra
        .devices(&scenario.gpus)
        .into_iter()
        .map(|published| {
            let model = scenario
                .gpus
                .iter()
                .find(|g| g.uuid == published.uuid || published.parent_uuid.as_deref() == Some(g.uuid.as_str()));
            let mut attributes = BTreeMap::new();
            let kind = if published.parent_uuid.is_some() { "mig" } else { "gpu" };
            attributes.insert("type".to_string(), text(kind));
            attributes.insert("uuid".to_string(), text(&published.uuid));
            if let Some(gpu) = model {
                attributes.insert("productName".to_string(), text(gpu.model.name));
            }
            if let Some(parent) = &published.parent_uuid {
                attributes.insert("parentUUID".to_string(), text(parent));
            }
            if let Some(profile) = &published.profile {
                attributes.insert("profile".to_string(), text(profile));
            }
            Device { name: published.name, attributes: Some(attributes), ..Device::default() }
        })
        .collect();
    let name = format!("{node}-{}-gpus", dra.driver.replace('.', "-"));
    vec![ResourceSlice {
        metadata: ObjectMeta { name: Some(name), ..ObjectMeta::default() },
        spec: ResourceSliceSpec {
            driver: dra.driver.clone(),
            node_name: Some(node.to_string()),
            pool: ResourcePool { name: node.to_string(), generation: 1, resource_slice_count: 1 },
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        },
    }]
}

fn text(value: &str) -> DeviceAttribute {
    DeviceAttribute { string: Some(value.to_string()), ..DeviceAttribute::default() }
}
