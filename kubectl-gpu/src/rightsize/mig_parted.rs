//! The node plan as a mig-parted config, for the GPU operator's MIG manager to apply.
//!
//! The format is mig-parted's `v1` spec (NVIDIA/mig-parted `api/spec/v1/spec.go`,
//! `examples/config.yaml`), the one the seed's `nvidia-mig-config.yaml` uses:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   rightsize-gpu-node-1:
//!     - devices: [0]
//!       mig-enabled: true
//!       mig-devices:
//!         "1g.20gb": 2
//!     - devices: [1]
//!       mig-enabled: false
//! ```
//!
//! `mig-devices` is a count per profile, not a placement: mig-parted creates the
//! instances in each order of the list until the driver accepts one
//! (`iteratePermutationsUntilSuccess` in `pkg/mig/config/config.go`), so a count the
//! plan has a valid placement for ([`super::plan::place`]) is one it can apply. Each node
//! gets one config, named `rightsize-<node>` (a valid label value: at most 63
//! characters, cut with a hash suffix where the node's name is longer). GPUs that are
//! whole, time-sliced or freed get `mig-enabled: false`.
//!
//! To apply: add the configs to the ConfigMap the MIG manager reads (the one the GPU
//! operator's ClusterPolicy names in `migManager.config.name`, key `config.yaml`), then
//! label the node `nvidia.com/mig.config=<config>`; the MIG manager reconfigures the
//! node's GPUs to it. Nothing here touches the cluster.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::plan::{GpuUse, NodePlan};

/// The node label the GPU operator's MIG manager applies configs by.
pub const LABEL: &str = "nvidia.com/mig.config";

/// A mig-parted config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub version: String,
    #[serde(rename = "mig-configs")]
    pub mig_configs: BTreeMap<String, Vec<Entry>>,
}

/// One entry of a named config: which GPUs, and how they are cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub devices: Vec<u32>,
    #[serde(rename = "mig-enabled")]
    pub mig_enabled: bool,
    /// Instances per profile; absent where MIG is off (mig-parted refuses both a
    /// disabled entry with devices and an enabled one without).
    #[serde(rename = "mig-devices", default, skip_serializing_if = "Option::is_none")]
    pub mig_devices: Option<BTreeMap<String, u32>>,
}

/// The config name for a node: `rightsize-<node>`, kept a valid label value.
pub fn config_name(node: &str) -> String {
    let name = format!("rightsize-{node}");
    if name.len() <= 63 {
        return name;
    }
    // FNV-1a, so that two long names with one prefix stay apart.
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut cut: String = name.chars().take(54).collect();
    while cut.ends_with(['-', '.', '_']) {
        cut.pop();
    }
    format!("{cut}-{:08x}", hash as u32)
}

/// Instances per profile on one GPU.
type Counts = BTreeMap<String, u32>;

/// The config for a set of node plans, one named config per node.
pub fn config(plans: &[NodePlan]) -> Config {
    let mut mig_configs = BTreeMap::new();
    for plan in plans {
        // GPUs with the same cut share an entry, as the seed's `devices: [2, 3]` does.
        let mut groups: Vec<(Option<Counts>, Vec<u32>)> = Vec::new();
        for gpu in &plan.gpus {
            let devices = match &gpu.gpu_use {
                GpuUse::Mig(instances) => {
                    let mut counts = BTreeMap::new();
                    for i in instances {
                        *counts.entry(i.profile.name.to_string()).or_insert(0) += 1;
                    }
                    Some(counts)
                }
                GpuUse::Whole(_) | GpuUse::TimeSliced { .. } | GpuUse::Free => None,
            };
            match groups.iter_mut().find(|(d, _)| *d == devices) {
                Some((_, indices)) => indices.push(gpu.index),
                None => groups.push((devices, vec![gpu.index])),
            }
        }
        let entries = groups
            .into_iter()
            .map(|(mig_devices, devices)| Entry { devices, mig_enabled: mig_devices.is_some(), mig_devices })
            .collect();
        mig_configs.insert(config_name(&plan.node), entries);
    }
    Config { version: "v1".into(), mig_configs }
}

/// The file to hand a person: the config, after comments that say how to apply it.
pub fn render(plans: &[NodePlan]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::from(
        "# mig-parted config from `kubectl gpu rightsize --plan`. It changes nothing by itself:\n\
         # add these configs to the ConfigMap the GPU operator's MIG manager reads (the\n\
         # ClusterPolicy's migManager.config.name, key config.yaml), then label each node:\n",
    );
    for plan in plans {
        out.push_str(&format!(
            "#   kubectl label node {} {LABEL}={} --overwrite\n",
            plan.node,
            config_name(&plan.node)
        ));
    }
    out.push_str("# The MIG manager drains the node's GPU pods while it reconfigures them.\n");
    out.push_str(&serde_yaml_ng::to_string(&config(plans))?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rightsize::catalog;
    use crate::rightsize::plan::{Demand, NodeGpus, place, plan_node};
    use crate::rightsize::recommend::Device;

    fn seed_like_plan() -> NodePlan {
        // The seed's mixed node: GPU 0 two 3g.40gb, GPU 1 seven 1g.10gb, GPUs 2-3 without MIG.
        let m = catalog::model("A100-80GB").unwrap();
        let mut demands: Vec<Demand> = (0..2)
            .map(|i| Demand { holder: format!("ai/llm-{i}"), device: Device::Mig(m.profile("3g.40gb").unwrap()) })
            .collect();
        demands.extend(
            (0..7).map(|i| Demand { holder: format!("ai/e{i}"), device: Device::Mig(m.profile("1g.10gb").unwrap()) }),
        );
        demands.push(Demand { holder: "ai/train".into(), device: Device::Whole });
        let node =
            NodeGpus { node: "gpu-node-1".into(), model: "NVIDIA A100-SXM4-80GB".into(), indices: vec![0, 1, 2, 3] };
        plan_node(&node, &demands).unwrap()
    }

    #[test]
    fn the_seed_layout_comes_out_in_the_seeds_format() {
        let plan = seed_like_plan();
        let text = render(std::slice::from_ref(&plan)).unwrap();
        assert!(
            text.contains("#   kubectl label node gpu-node-1 nvidia.com/mig.config=rightsize-gpu-node-1 --overwrite\n")
        );
        let yaml = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
        assert_eq!(
            yaml,
            "version: v1\n\
             mig-configs:\n  \
               rightsize-gpu-node-1:\n  \
               - devices:\n    - 0\n    \
                 mig-enabled: true\n    \
                 mig-devices:\n      \
                   3g.40gb: 2\n  \
               - devices:\n    - 1\n    \
                 mig-enabled: true\n    \
                 mig-devices:\n      \
                   1g.10gb: 7\n  \
               - devices:\n    - 2\n    - 3\n    \
                 mig-enabled: false"
        );
    }

    #[test]
    fn every_emitted_config_reads_back_and_is_placeable() {
        let plan = seed_like_plan();
        let text = render(std::slice::from_ref(&plan)).unwrap();
        let back: Config = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back, config(std::slice::from_ref(&plan)));
        for entries in back.mig_configs.values() {
            for e in entries {
                let Some(counts) = &e.mig_devices else {
                    assert!(!e.mig_enabled);
                    continue;
                };
                assert!(e.mig_enabled);
                let mut profiles: Vec<&'static catalog::Profile> = Vec::new();
                for (name, n) in counts {
                    profiles.extend(std::iter::repeat_n(plan.model.profile(name).unwrap(), *n as usize));
                }
                profiles.sort_by_key(|p| std::cmp::Reverse(p.memory_slices));
                let starts = place(&profiles).expect("a placement exists");
                let layout: Vec<(&str, u8)> = profiles.iter().map(|p| p.name).zip(starts).collect();
                catalog::validate_layout(plan.model, &layout).unwrap();
            }
        }
        plan.validate().unwrap();
    }

    #[test]
    fn config_names_stay_label_values() {
        assert_eq!(config_name("gpu-node-1"), "rightsize-gpu-node-1");
        let long = format!("{}.compute.internal", "ip-10-0-0-1".repeat(6));
        let a = config_name(&long);
        let b = config_name(&format!("{long}x"));
        assert!(a.len() <= 63 && b.len() <= 63, "{a}");
        assert_ne!(a, b);
        assert!(a.starts_with("rightsize-ip-10-0-0-1") && a.chars().last().unwrap().is_ascii_alphanumeric());
    }
}
