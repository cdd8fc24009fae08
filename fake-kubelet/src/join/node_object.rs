//! The Node object a simulated GPU node registers, as its kubelet, the NVIDIA device
//! plugin and GPU feature discovery together leave it: capacity for every device the
//! plugin offers, GPU feature discovery's labels, Ready conditions and an address.
//!
//! Labels follow NVIDIA/k8s-device-plugin `internal/lm/resource.go`: the product is the
//! NVML device name with spaces turned into dashes, with `-SHARED` appended when
//! time-slicing shares the GPU without renaming the resource; `count`, `replicas`
//! (1 without sharing) and `memory` (MiB) per resource; `<model>-MIG-<profile>` as a
//! MIG resource's product. `nvidia.com/gpu.present` is the GPU operator's node label,
//! `nvidia.com/mig.config` the layout mig-manager applied (given by the caller).

use fake_nvml::scenario::mig::mixed_resource;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::devices::DeviceTable;
use fake_nvml::scenario::Scenario;

/// What the caller decides about a node; the rest comes from its scenario.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub name: String,
    /// The address the node reports (`InternalIP`).
    pub address: String,
    /// The node's pod network, `a.b.c.0/24`.
    pub pod_cidr: String,
    /// Time-slicing replicas per whole GPU (1: not shared).
    pub replicas: u32,
    /// `nvidia.com/mig.config`: `all-disabled` where no GPU is in MIG mode.
    pub mig_config: String,
    pub kubelet_version: String,
}

/// The Node as registered, with Ready conditions stamped `now`.
pub fn node(settings: &NodeSettings, scenario: &Scenario, table: &DeviceTable, now: jiff::Timestamp) -> Node {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", settings.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("nvidia.com/gpu.present", "true"),
        ("nvidia.com/mig.config", settings.mig_config.as_str()),
        ("nvidia.com/mig.config.state", "success"),
        ("nvidia.com/mig.strategy", "mixed"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let whole: Vec<_> = scenario.gpus.iter().filter(|g| g.mig.is_none()).collect();
    if let Some(first) = whole.first() {
        let shared = settings.replicas > 1;
        let mut product = first.model.name.replace(' ', "-");
        if shared {
            product.push_str("-SHARED");
        }
        labels.insert("nvidia.com/gpu.product".into(), product);
        labels.insert("nvidia.com/gpu.count".into(), whole.len().to_string());
        labels.insert("nvidia.com/gpu.replicas".into(), settings.replicas.max(1).to_string());
        labels.insert("nvidia.com/gpu.memory".into(), (first.model.memory_total_bytes >> 20).to_string());
        if shared {
            labels.insert("nvidia.com/gpu.sharing-strategy".into(), "time-slicing".into());
        }
    } else if let Some(first) = scenario.gpus.first() {
        labels.insert("nvidia.com/gpu.product".into(), first.model.name.replace(' ', "-"));
    }
    for gpu in &scenario.gpus {
        for instance in gpu.mig.iter().flatten() {
            let resource = mixed_resource(&instance.profile, &gpu.mig_profiles);
            labels.insert(
                format!("{resource}.product"),
                format!("{}-MIG-{}", gpu.model.name.replace(' ', "-"), instance.profile.name),
            );
        }
    }
    let mut capacity: BTreeMap<String, Quantity> = [
        ("cpu", "64".to_string()),
        ("memory", "1056Gi".to_string()),
        ("pods", "110".to_string()),
        ("ephemeral-storage", "3500Gi".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    for (resource, count) in table.capacity() {
        if let Some(profile) = resource.strip_prefix("nvidia.com/mig-") {
            labels.insert(format!("nvidia.com/mig-{profile}.count"), count.to_string());
        }
        capacity.insert(resource, Quantity(count.to_string()));
    }
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    Node {
        metadata: ObjectMeta { name: Some(settings.name.clone()), labels: Some(labels), ..ObjectMeta::default() },
        spec: Some(NodeSpec {
            pod_cidr: Some(settings.pod_cidr.clone()),
            pod_cidrs: Some(vec![settings.pod_cidr.clone()]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            conditions: Some(conditions(&condition)),
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".into(), address: settings.address.clone() },
                NodeAddress { type_: "Hostname".into(), address: settings.name.clone() },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: String::new(),
                container_runtime_version: "containerd://2.1.4".into(),
                kernel_version: "6.8.0-simulated".into(),
                kube_proxy_version: String::new(),
                kubelet_version: settings.kubelet_version.clone(),
                machine_id: String::new(),
                operating_system: "linux".into(),
                os_image: format!("simulated GPU node (fake-kubelet, driver {})", scenario.driver_version),
                system_uuid: String::new(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

/// The conditions a healthy kubelet reports.
pub fn conditions(condition: &dyn Fn(&str, &str, &str, &str) -> NodeCondition) -> Vec<NodeCondition> {
    vec![
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(replicas: u32) -> NodeSettings {
        NodeSettings {
            name: "gpu-node-1".into(),
            address: "10.0.0.11".into(),
            pod_cidr: "10.244.1.0/24".into(),
            replicas,
            mig_config: "all-disabled".into(),
            kubelet_version: "v1.37.2".into(),
        }
    }

    #[test]
    fn a_time_sliced_node_carries_the_device_plugins_capacity_and_labels() {
        let scenario = Scenario::parse("n.yaml", "gpus: [{model: H100-SXM5-80GB}, {model: H100-SXM5-80GB}]").unwrap();
        let table = DeviceTable::new(&scenario, 4);
        let node = node(&settings(4), &scenario, &table, jiff::Timestamp::UNIX_EPOCH);
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3-SHARED");
        assert_eq!(labels["nvidia.com/gpu.count"], "2");
        assert_eq!(labels["nvidia.com/gpu.replicas"], "4");
        assert_eq!(labels["nvidia.com/gpu.memory"], "81559");
        assert_eq!(labels["nvidia.com/gpu.sharing-strategy"], "time-slicing");
        let status = node.status.unwrap();
        assert_eq!(status.capacity.unwrap()["nvidia.com/gpu"], Quantity("8".into()));
        let ready = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn a_mig_node_offers_each_profile_as_its_own_resource() {
        let scenario = Scenario::parse(
            "n.yaml",
            "gpus: [{model: A100-SXM4-80GB, mig: {layout: all-1g.10gb}}, {model: A100-SXM4-80GB, mig: {layout: \
             all-3g.40gb}}]",
        )
        .unwrap();
        let table = DeviceTable::new(&scenario, 1);
        let node = node(&settings(1), &scenario, &table, jiff::Timestamp::UNIX_EPOCH);
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["nvidia.com/mig-1g.10gb.count"], "7");
        assert_eq!(labels["nvidia.com/mig-3g.40gb.product"], "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb");
        assert!(!labels.contains_key("nvidia.com/gpu.count"));
        let capacity = node.status.unwrap().capacity.unwrap();
        assert_eq!(capacity["nvidia.com/mig-3g.40gb"], Quantity("2".into()));
        assert!(!capacity.contains_key("nvidia.com/gpu"));
    }
}
