//! GPUs handed out through Dynamic Resource Allocation on the simulated node.
//!
//! ```yaml
//! dra: {driver: gpu.nvidia.com, gpus: [0, 1]}
//! pods:
//!   - namespace: inference
//!     name: llm-0
//!     containers:
//!       - name: server
//!         claims: [{name: llm-0-gpu, gpu: 0}, {name: llm-0-slice, gpu: 1, mig: 2}]
//! ```
//! The driver publishes every listed GPU (default: all): each whole GPU that is not in
//! MIG mode, and each MIG instance of one that is, named as NVIDIA's DRA driver names
//! them, by the GPU's minor number (`gpu-<minor>`,
//! `gpu-<minor>-mig-<profile, a DNS label>-<profile id>-<placement start>`:
//! NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go `CanonicalName` and
//! mig.go `ToCanonicalName`) with the driver's attributes (`type`, `uuid`, and for MIG
//! `parentUUID` and `profile`), in one pool named after the node, as that driver names
//! its pool (driver.go `GenerateDriverResources`: `Pools` keyed by the node's name); the
//! node's name is the simulated kubelet's to give, so the scenario has no pool. The
//! simulated kubelet reports claimed devices in pod-resources' `dynamic_resources`.
//! Pods of one namespace that name the same claim share its device, as pods that
//! reference one ResourceClaim do.

use serde::Deserialize;

use super::Gpu;
use super::mig::MigInstance;

/// The `dra` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DraSpec {
    #[serde(default = "default_driver")]
    pub driver: String,
    /// Indexes of the GPUs the driver publishes; every GPU when absent.
    pub gpus: Option<Vec<u32>>,
}

fn default_driver() -> String {
    "gpu.nvidia.com".into()
}

/// The DRA driver of the node, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dra {
    pub driver: String,
    /// Sorted GPU indexes.
    pub gpus: Vec<u32>,
}

/// One device a ResourceSlice publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedDevice {
    /// The device's name within the pool.
    pub name: String,
    /// `GPU-...` or `MIG-...`.
    pub uuid: String,
    /// The GPU's UUID, for a MIG instance.
    pub parent_uuid: Option<String>,
    /// The MIG profile, e.g. `1g.10gb`.
    pub profile: Option<String>,
}

impl Dra {
    pub fn publishes(&self, gpu: u32) -> bool {
        self.gpus.binary_search(&gpu).is_ok()
    }

    /// Every device the driver publishes, GPUs in index order.
    pub fn devices(&self, gpus: &[Gpu]) -> Vec<PublishedDevice> {
        gpus.iter()
            .filter(|g| self.publishes(g.index))
            .flat_map(|gpu| match &gpu.mig {
                Some(instances) => instances.iter().map(|i| mig_device(gpu, i)).collect(),
                None => vec![PublishedDevice {
                    name: device_name(gpu, None),
                    uuid: gpu.uuid.clone(),
                    parent_uuid: None,
                    profile: None,
                }],
            })
            .collect()
    }
}

/// The name the driver gives a whole GPU (`instance` `None`) or one of its MIG instances.
pub fn device_name(gpu: &Gpu, instance: Option<&MigInstance>) -> String {
    match instance {
        None => format!("gpu-{}", gpu.minor_number()),
        Some(instance) => {
            // A device name is a DNS label: `1g.10gb+me` becomes `1g10gb-me`.
            let profile = instance.profile.name.replace('.', "").replace('+', "-");
            format!(
                "gpu-{}-mig-{profile}-{}-{}",
                gpu.minor_number(),
                instance.profile.profile_id,
                instance.placement_start
            )
        }
    }
}

fn mig_device(gpu: &Gpu, instance: &MigInstance) -> PublishedDevice {
    PublishedDevice {
        name: device_name(gpu, Some(instance)),
        uuid: instance.uuid.clone(),
        parent_uuid: Some(gpu.uuid.clone()),
        profile: Some(instance.profile.name.to_string()),
    }
}

/// Checks the section against the GPUs; the error is (field, reason).
pub(super) fn resolve(spec: DraSpec, gpus: &[Gpu]) -> Result<Dra, (String, String)> {
    if spec.driver.is_empty() || !spec.driver.contains('.') {
        return Err(("dra.driver".into(), format!("{:?} is not a driver name (a DNS subdomain)", spec.driver)));
    }
    let mut indexes = spec.gpus.unwrap_or_else(|| gpus.iter().map(|g| g.index).collect());
    if let Some(missing) = indexes.iter().find(|i| !gpus.iter().any(|g| g.index == **i)) {
        return Err(("dra.gpus".into(), format!("there is no GPU {missing}")));
    }
    indexes.sort_unstable();
    indexes.dedup();
    Ok(Dra { driver: spec.driver, gpus: indexes })
}
