//! What attribution attaches to each [`Snapshot`](super::Snapshot): plain data that the
//! renderer reads, with no handle on any source. It lives with the snapshot rather than
//! with the attribution stage so that the snapshot names nothing above it: the stage
//! (`crate::attribution`) writes these types, rendering reads them, and neither imports
//! the other.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// A container, by the names Kubernetes users know it by.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerRef {
    pub namespace: String,
    pub pod: String,
    /// Empty when a process's pod is known but not which of its containers runs it.
    pub container: String,
}

/// The MIG instance a usage figure is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigRef {
    pub uuid: String,
    pub profile: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// One container's use of one GPU or MIG instance this cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct PodUsage {
    /// NVML index of the GPU (the `gpu` label).
    pub gpu: u32,
    pub mig: Option<MigRef>,
    pub owner: ContainerRef,
    /// True when the container is the device's only holder and gets the device's numbers.
    pub exclusive: bool,
    /// Percent: the device's utilization (exclusive), or the sum of the container's
    /// processes' SM utilization (shared). `None` where NVML has no figure (per-process
    /// samples on MIG instances, per-instance utilization without GPM).
    pub utilization_percent: Option<f64>,
    /// Bytes, after the memory cap (see [`AttributionResult::memory_scaled_gpus`]).
    pub memory_used_bytes: Option<f64>,
    /// The ResourceClaim through which the container holds the device (DRA).
    pub claim: Option<String>,
}

/// A pod that appears in the per-pod families, for `gpu_pod_info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub pod: String,
    /// Empty when no source gave it.
    pub uid: String,
    /// Allow-listed pod labels, with Prometheus-safe names (`label_<name>`).
    pub labels: Vec<(String, String)>,
}

/// Why a GPU process was not attributed to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unattributed {
    /// It left `/proc` between NVML's list and the cgroup read.
    Exited,
    /// It runs outside any pod (a host process).
    NotInPod,
    /// Its pod UID is known to no source (no API server, no log directory for it).
    UnknownPod,
    /// `/proc` could not be read.
    ProcfsUnreadable,
}

impl Unattributed {
    pub const ALL: [Unattributed; 4] =
        [Unattributed::Exited, Unattributed::NotInPod, Unattributed::UnknownPod, Unattributed::ProcfsUnreadable];

    pub fn as_str(self) -> &'static str {
        match self {
            Unattributed::Exited => "exited",
            Unattributed::NotInPod => "not_in_pod",
            Unattributed::UnknownPod => "unknown_pod",
            Unattributed::ProcfsUnreadable => "procfs_unreadable",
        }
    }
}

/// The kubelet pod-resources source's health.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodResourcesHealth {
    /// Whether the last `List` succeeded.
    pub up: bool,
    pub last_success: Option<SystemTime>,
    /// Failed refreshes since start, by reason.
    pub errors: BTreeMap<&'static str, u64>,
}

/// The Kubernetes API pod watch's health; `None` in [`AttributionResult`] when no watch runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodWatchHealth {
    /// Listed and watching, with no error since the last list.
    pub up: bool,
    /// Pods on this node the watch knows.
    pub pods: usize,
}

/// The ResourceSlice watch's health; `None` in [`AttributionResult`] when no watch runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceWatchHealth {
    /// Listed and watching, with no error since the last list.
    pub up: bool,
    /// False while the cluster answers that it serves no ResourceSlices.
    pub served: bool,
    /// GPU devices (whole GPUs and MIG devices) the node's slices publish.
    pub devices: usize,
}

/// The join's result for one snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttributionResult {
    /// Device UUID (GPU `GPU-...` or MIG `MIG-...`) to its only holder.
    pub owners: BTreeMap<String, ContainerRef>,
    pub usage: Vec<PodUsage>,
    pub pods: Vec<PodInfo>,
    /// GPU processes not attributed this cycle, by reason.
    pub unattributed: BTreeMap<Unattributed, u64>,
    /// Device ids the kubelet allocates under a GPU resource name that match no GPU or MIG
    /// instance NVML reports on this node.
    pub unknown_devices: u64,
    /// GPUs (by index) whose pods' memory was scaled down to what the GPU reports used.
    pub memory_scaled_gpus: Vec<u32>,
    /// `None` when pod-resources is disabled.
    pub pod_resources: Option<PodResourcesHealth>,
    /// `None` when no API watch runs.
    pub pod_watch: Option<PodWatchHealth>,
    /// `None` when no ResourceSlice watch runs.
    pub slice_watch: Option<SliceWatchHealth>,
    /// Device UUID to the claim through which its only holder holds it (DRA).
    pub owner_claims: BTreeMap<String, String>,
    /// GPU UUID to the DRA devices the node's ResourceSlices publish for it (the GPU and
    /// its MIG instances); empty on a node where no DRA driver publishes GPUs.
    pub dra_devices: BTreeMap<String, Vec<DraDeviceName>>,
}

/// A device as DRA names it (driver, pool, device), as published in a ResourceSlice.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DraDeviceName {
    pub driver: String,
    pub pool: String,
    pub device: String,
}
