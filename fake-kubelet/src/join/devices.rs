//! The devices a simulated node's device plugin offers, and how it hands them to pods.
//!
//! A GPU in MIG mode offers each instance as `nvidia.com/mig-<profile>` (the plugin's
//! `mixed` strategy); a whole GPU offers `nvidia.com/gpu`, once, or `replicas` times
//! under time-slicing, with device ids `<uuid>::<n>` as the plugin names replicas. GPUs
//! the node's DRA driver publishes are not the plugin's to offer.
//!
//! Replicas are handed out as the NVIDIA device plugin's default `distributed` policy
//! does (NVIDIA/k8s-device-plugin `internal/rm/allocate.go`): the next one comes from
//! the GPU with the fewest replicas allocated, ties going to the GPU this allocation
//! touched least, then to the lower index. MIG instances and whole GPUs go in index
//! order. Pure: the caller keeps the table and says which devices are taken.

use fake_nvml::scenario::mig::mixed_resource;
use std::collections::{BTreeMap, BTreeSet};

use fake_nvml::scenario::Scenario;

/// One device the plugin offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `nvidia.com/gpu` or `nvidia.com/mig-<profile>`.
    pub resource: String,
    /// What pod-resources reports: `GPU-…`, `MIG-…` or `GPU-…::<n>`.
    pub id: String,
    /// The GPU's index.
    pub gpu: u32,
    /// The MIG instance's position on its GPU.
    pub mig: Option<u32>,
    /// The time-slicing replica.
    pub replica: Option<u32>,
    /// The ResourceClaim it is held through, for a device of the node's DRA driver
    /// (`resource` is then the driver and `id` the device's name in its pool); `None`
    /// for the device plugin's.
    pub claim: Option<String>,
}

/// Every device of a node, in index order.
#[derive(Debug, Clone)]
pub struct DeviceTable {
    pub devices: Vec<Device>,
}

/// Why a container's request cannot be met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{resource}: {wanted} requested, {free} free of {offered} on this node")]
pub struct Shortage {
    pub resource: String,
    pub wanted: u64,
    pub free: u64,
    pub offered: u64,
}

impl DeviceTable {
    /// The devices of `scenario`'s GPUs, with `replicas` time-slicing replicas per whole
    /// GPU (1: no sharing, the GPU's UUID is the device id).
    pub fn new(scenario: &Scenario, replicas: u32) -> DeviceTable {
        let mut devices = Vec::new();
        let dra = |index: u32| scenario.dra.as_ref().is_some_and(|d| d.publishes(index));
        for gpu in scenario.gpus.iter().filter(|g| !dra(g.index)) {
            match &gpu.mig {
                Some(instances) => devices.extend(instances.iter().map(|i| Device {
                    resource: mixed_resource(&i.profile, &gpu.mig_profiles),
                    id: i.uuid.clone(),
                    gpu: gpu.index,
                    mig: Some(i.index),
                    replica: None,
                    claim: None,
                })),
                None if replicas <= 1 => devices.push(Device {
                    resource: "nvidia.com/gpu".into(),
                    id: gpu.uuid.clone(),
                    gpu: gpu.index,
                    mig: None,
                    replica: None,
                    claim: None,
                }),
                None => devices.extend((0..replicas).map(|r| Device {
                    resource: "nvidia.com/gpu".into(),
                    id: format!("{}::{r}", gpu.uuid),
                    gpu: gpu.index,
                    mig: None,
                    replica: Some(r),
                    claim: None,
                })),
            }
        }
        DeviceTable { devices }
    }

    /// How many devices of each resource the node offers (its capacity).
    pub fn capacity(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for d in &self.devices {
            *out.entry(d.resource.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Picks `wanted` devices of `resource` that are not in `taken`.
    pub fn allocate(&self, resource: &str, wanted: u64, taken: &BTreeSet<String>) -> Result<Vec<Device>, Shortage> {
        let offered: Vec<&Device> = self.devices.iter().filter(|d| d.resource == resource).collect();
        let free: Vec<&Device> = offered.iter().copied().filter(|d| !taken.contains(&d.id)).collect();
        let (free_count, offered_count) = (free.len() as u64, offered.len() as u64);
        let shortage = || Shortage { resource: resource.to_string(), wanted, free: free_count, offered: offered_count };
        if free_count < wanted {
            return Err(shortage());
        }
        if free.iter().all(|d| d.replica.is_none()) {
            return Ok(free.into_iter().take(wanted as usize).cloned().collect());
        }
        // distributed: per GPU, the replicas allocated (node-wide) and picked (this time).
        let mut allocated: BTreeMap<u32, usize> = BTreeMap::new();
        for d in offered.iter().filter(|d| taken.contains(&d.id)) {
            *allocated.entry(d.gpu).or_insert(0) += 1;
        }
        let mut picked_from: BTreeMap<u32, usize> = BTreeMap::new();
        let mut remaining = free;
        let mut out = Vec::new();
        for _ in 0..wanted {
            let best = remaining
                .iter()
                .enumerate()
                .min_by_key(|(_, d)| {
                    (allocated.get(&d.gpu).copied().unwrap_or(0), picked_from.get(&d.gpu).copied().unwrap_or(0), d.gpu)
                })
                .map(|(i, _)| i)
                .ok_or_else(shortage)?;
            let device = remaining.remove(best);
            *allocated.entry(device.gpu).or_insert(0) += 1;
            *picked_from.entry(device.gpu).or_insert(0) += 1;
            out.push(device.clone());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(gpus: &str) -> Scenario {
        Scenario::parse("test.yaml", &format!("gpus: {gpus}\n")).unwrap()
    }

    fn taken(devices: &[Device]) -> BTreeSet<String> {
        devices.iter().map(|d| d.id.clone()).collect()
    }

    #[test]
    fn replicas_spread_over_the_gpus_with_the_fewest_allocated() {
        let table = DeviceTable::new(
            &scenario("[{model: H100-SXM5-80GB}, {model: H100-SXM5-80GB}, {model: H100-SXM5-80GB}]"),
            4,
        );
        assert_eq!(table.capacity()["nvidia.com/gpu"], 12);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.extend(table.allocate("nvidia.com/gpu", 1, &taken(&held)).unwrap());
        }
        let gpus: Vec<u32> = held.iter().map(|d| d.gpu).collect();
        assert_eq!(gpus, [0, 1, 2, 0], "one per GPU before any GPU gets a second");
        // Two at once come from two GPUs, the least loaded first.
        let two = table.allocate("nvidia.com/gpu", 2, &taken(&held)).unwrap();
        assert_eq!(two.iter().map(|d| d.gpu).collect::<Vec<_>>(), [1, 2]);
        assert!(two.iter().all(|d| d.id.contains("::")));
    }

    #[test]
    fn whole_gpus_and_mig_instances_go_in_index_order_and_run_out_clearly() {
        let table = DeviceTable::new(
            &scenario("[{model: A100-SXM4-80GB, mig: {layout: all-3g.40gb}}, {model: A100-SXM4-80GB}]"),
            1,
        );
        assert_eq!(table.capacity()["nvidia.com/mig-3g.40gb"], 2);
        assert_eq!(table.capacity()["nvidia.com/gpu"], 1);
        let first = table.allocate("nvidia.com/mig-3g.40gb", 1, &BTreeSet::new()).unwrap();
        assert_eq!((first[0].gpu, first[0].mig), (0, Some(0)));
        assert!(first[0].id.starts_with("MIG-"));
        let second = table.allocate("nvidia.com/mig-3g.40gb", 1, &taken(&first)).unwrap();
        assert_eq!(second[0].mig, Some(1));
        let all = [first, second].concat();
        let err = table.allocate("nvidia.com/mig-3g.40gb", 1, &taken(&all)).unwrap_err();
        assert_eq!(err.to_string(), "nvidia.com/mig-3g.40gb: 1 requested, 0 free of 2 on this node");
        let unknown = table.allocate("nvidia.com/mig-1g.10gb", 1, &BTreeSet::new()).unwrap_err();
        assert_eq!(unknown.offered, 0);
    }
}
