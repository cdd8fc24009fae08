//! The node plan: where each pod's recommended device goes on its node's GPUs, so that
//! as many whole GPUs as possible are left free, with every MIG layout one the model's
//! placement rules allow ([`catalog::validate_layout`]).
//!
//! - A pod given a whole GPU takes one, with MIG off.
//! - Time-slice shares: a GPU's time-slicing replicas are one number, so a node's
//!   shares are all given the largest of them (no pod gets less than recommended):
//!   with shares of 1/4 and 1/8, each GPU is cut in 4, and the pods fill them in turn.
//! - MIG profiles are packed first-fit, largest memory first, into the GPUs already
//!   opened; a profile goes on a GPU when the instances there and it have a placement
//!   ([`place`], an exact search: at most 7 instances, a handful of starts each), and on
//!   a fresh GPU otherwise. Largest first matters because a 4-slice profile can only
//!   start at slice 0 (4g) or 0 and 4 (3g).
//! - GPUs nothing lands on are **freed**; pods that find no GPU are listed as unplaced.
//!
//! The plan changes nothing; [`super::mig_parted`] writes it as a config to apply.

use super::catalog::{self, COMPUTE_SLICES, CatalogError, LayoutError, MEMORY_SLICES, Model, Profile};
use super::recommend::Device;

/// Why a node could not be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("node {node}: {holder} is to get MIG {profile}, but its GPUs ({model}) have no MIG")]
    NoMig { node: String, holder: String, profile: String, model: String },
    #[error("node {node}: {holder} is to get MIG {profile}, which is not a profile of {model}")]
    Profile { node: String, holder: String, profile: String, model: String },
    #[error("node {node}: GPU {index} is listed twice")]
    Duplicate { node: String, index: u32 },
}

pub type Result<T, E = PlanError> = std::result::Result<T, E>;

/// A node's GPUs (all of one model, as GPU nodes are).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGpus {
    pub node: String,
    /// NVML model name or catalog key.
    pub model: String,
    pub indices: Vec<u32>,
}

/// A pod and the device it is to get.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// `namespace/pod`.
    pub holder: String,
    pub device: Device,
}

/// One MIG instance of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub profile: &'static Profile,
    /// First memory slice.
    pub start: u8,
    pub holder: String,
}

/// What a GPU is given to.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuUse {
    Mig(Vec<Instance>),
    Whole(String),
    TimeSliced {
        replicas: u32,
        holders: Vec<String>,
    },
    /// Nothing: the GPU is freed.
    Free,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlan {
    pub index: u32,
    pub gpu_use: GpuUse,
}

/// The plan of one node.
#[derive(Debug, Clone)]
pub struct NodePlan {
    pub node: String,
    pub model: &'static Model,
    pub gpus: Vec<GpuPlan>,
    /// Pods for which the node has no GPU left.
    pub unplaced: Vec<Demand>,
}

impl NodePlan {
    /// GPUs nothing is placed on.
    pub fn freed(&self) -> usize {
        self.gpus.iter().filter(|g| g.gpu_use == GpuUse::Free).count()
    }

    /// Checks every MIG layout of the plan against the model's placement rules.
    pub fn validate(&self) -> Result<(), (u32, LayoutError)> {
        for g in &self.gpus {
            if let GpuUse::Mig(instances) = &g.gpu_use {
                let layout: Vec<(&str, u8)> = instances.iter().map(|i| (i.profile.name, i.start)).collect();
                catalog::validate_layout(self.model, &layout).map_err(|e| (g.index, e))?;
            }
        }
        Ok(())
    }
}

/// A placement of `profiles` (in this order) on one empty GPU: each one's first memory
/// slice, or `None` if they do not fit together.
pub fn place(profiles: &[&'static Profile]) -> Option<Vec<u8>> {
    let compute: u32 = profiles.iter().map(|p| u32::from(p.compute_slices)).sum();
    if compute > u32::from(COMPUTE_SLICES) {
        return None;
    }
    for p in profiles {
        if profiles.iter().filter(|q| q.name == p.name).count() > usize::from(p.max_instances) {
            return None;
        }
    }
    fn search(profiles: &[&'static Profile], used: u8, starts: &mut Vec<u8>) -> bool {
        let Some((p, rest)) = profiles.split_first() else { return true };
        for &start in p.starts {
            let mask = ((1u16 << p.memory_slices) - 1) << start;
            if start + p.memory_slices > MEMORY_SLICES || u16::from(used) & mask != 0 {
                continue;
            }
            starts.push(start);
            // The mask stays within the eight slices, checked above.
            if search(rest, used | mask as u8, starts) {
                return true;
            }
            starts.pop();
        }
        false
    }
    let mut starts = Vec::with_capacity(profiles.len());
    search(profiles, 0, &mut starts).then_some(starts)
}

/// Largest first: memory slices, then compute slices, then name (for a stable plan).
fn larger_first(a: &&'static Profile, b: &&'static Profile) -> std::cmp::Ordering {
    b.memory_slices.cmp(&a.memory_slices).then(b.compute_slices.cmp(&a.compute_slices)).then(a.name.cmp(b.name))
}

/// Plans one node.
pub fn plan_node(node: &NodeGpus, demands: &[Demand]) -> Result<NodePlan> {
    let model = catalog::model(&node.model)?;
    let mut indices = node.indices.clone();
    indices.sort_unstable();
    if let Some(w) = indices.windows(2).find(|w| w[0] == w[1]) {
        return Err(PlanError::Duplicate { node: node.node.clone(), index: w[0] });
    }
    let mut whole = Vec::new();
    let mut shares = Vec::new();
    let mut migs: Vec<(&'static Profile, String)> = Vec::new();
    for d in demands {
        match d.device {
            Device::Whole => whole.push(d.holder.clone()),
            Device::Share { denominator } => shares.push((denominator, d.holder.clone())),
            Device::Mig(p) => {
                let refuse =
                    |name: &str| (node.node.clone(), d.holder.clone(), name.to_string(), model.key.to_string());
                if !model.has_mig() {
                    let (node, holder, profile, model) = refuse(p.name);
                    return Err(PlanError::NoMig { node, holder, profile, model });
                }
                // The profile must be this model's own (same name is not enough: 1g.10gb
                // of an H100 is not an A100's).
                if !model.profiles.iter().any(|q| q == p) {
                    let (node, holder, profile, model) = refuse(p.name);
                    return Err(PlanError::Profile { node, holder, profile, model });
                }
                migs.push((p, d.holder.clone()));
            }
        }
    }
    migs.sort_by(|a, b| larger_first(&a.0, &b.0).then(a.1.cmp(&b.1)));

    // MIG GPUs: each a list of (profile, holder) that has a placement.
    let mut bins: Vec<Vec<(&'static Profile, String)>> = Vec::new();
    let mut unplaced = Vec::new();
    let available = indices.len();
    for (p, holder) in migs {
        let fits = |bin: &Vec<(&'static Profile, String)>| {
            let mut ps: Vec<&'static Profile> = bin.iter().map(|(q, _)| *q).collect();
            ps.push(p);
            ps.sort_by(larger_first);
            place(&ps).is_some()
        };
        if let Some(bin) = bins.iter_mut().find(|b| fits(b)) {
            bin.push((p, holder));
        } else if bins.len() + whole.len() < available {
            bins.push(vec![(p, holder)]);
        } else {
            unplaced.push(Demand { holder, device: Device::Mig(p) });
        }
    }

    let mut uses: Vec<GpuUse> = Vec::new();
    for mut bin in bins {
        bin.sort_by(|a, b| larger_first(&a.0, &b.0).then(a.1.cmp(&b.1)));
        let profiles: Vec<&'static Profile> = bin.iter().map(|(p, _)| *p).collect();
        // Every bin was built from placeable sets.
        let starts = place(&profiles).unwrap_or_default();
        let mut instances: Vec<Instance> =
            bin.into_iter().zip(starts).map(|((profile, holder), start)| Instance { profile, start, holder }).collect();
        instances.sort_by_key(|i| i.start);
        uses.push(GpuUse::Mig(instances));
    }
    for holder in whole {
        if uses.len() < available {
            uses.push(GpuUse::Whole(holder));
        } else {
            unplaced.push(Demand { holder, device: Device::Whole });
        }
    }
    if let Some(replicas) = shares.iter().map(|(d, _)| *d).min() {
        shares.sort_by(|a, b| a.1.cmp(&b.1));
        for chunk in shares.chunks(replicas as usize) {
            if uses.len() < available {
                uses.push(GpuUse::TimeSliced { replicas, holders: chunk.iter().map(|(_, h)| h.clone()).collect() });
            } else {
                unplaced.extend(
                    chunk.iter().map(|(d, h)| Demand { holder: h.clone(), device: Device::Share { denominator: *d } }),
                );
            }
        }
    }
    uses.resize(available, GpuUse::Free);
    let gpus = indices.into_iter().zip(uses).map(|(index, gpu_use)| GpuPlan { index, gpu_use }).collect();
    Ok(NodePlan { node: node.node.clone(), model, gpus, unplaced })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rightsize::recommend::tests::observed;
    use crate::rightsize::recommend::{Holding, Rules, recommend};

    fn a100() -> &'static Model {
        catalog::model("A100-80GB").unwrap()
    }

    fn mig(model: &'static Model, name: &str) -> Device {
        Device::Mig(model.profile(name).unwrap())
    }

    fn node(model: &str, n: u32) -> NodeGpus {
        NodeGpus { node: "gpu-node-1".into(), model: model.into(), indices: (0..n).collect() }
    }

    fn demand(holder: &str, device: Device) -> Demand {
        Demand { holder: holder.into(), device }
    }

    fn layout(plan: &NodePlan, index: u32) -> Vec<(&'static str, u8)> {
        match &plan.gpus.iter().find(|g| g.index == index).unwrap().gpu_use {
            GpuUse::Mig(instances) => instances.iter().map(|i| (i.profile.name, i.start)).collect(),
            other => panic!("GPU {index} is not MIG: {other:?}"),
        }
    }

    #[test]
    fn two_whole_gpus_that_moved_to_1g_20gb_share_one_and_free_the_other() {
        // Two pods each on a whole A100 at 12 % with a 14 GiB peak: both to 1g.20gb
        // (the hand-computed case), which fit one GPU at memory slices 0 and 2.
        let rules = Rules::default();
        let demands: Vec<Demand> = ["ml/a", "ml/b"]
            .iter()
            .map(|holder| {
                let r =
                    recommend(&observed("NVIDIA A100-SXM4-80GB", Holding::Whole, 14.0, Some(12.0)), &rules).unwrap();
                demand(holder, r.target())
            })
            .collect();
        let plan = plan_node(&node("NVIDIA A100-SXM4-80GB", 2), &demands).unwrap();
        assert_eq!(layout(&plan, 0), [("1g.20gb", 0), ("1g.20gb", 2)]);
        assert_eq!(plan.gpus[1].gpu_use, GpuUse::Free);
        assert_eq!((plan.freed(), plan.unplaced.len()), (1, 0));
        plan.validate().unwrap();
    }

    #[test]
    fn a_mixed_node_packs_by_the_placement_rules() {
        // Four A100s: an LLM on 3g.40gb, a 2g.20gb, a 1g.20gb and a 1g.10gb, and one pod
        // that keeps a whole GPU. 3g (0-3) + 2g (4-5) + 1g.20gb (6-7) fill GPU 0; the
        // 1g.10gb opens GPU 1; the whole GPU is 2; GPU 3 is freed.
        let m = a100();
        let demands = [
            demand("ai/embed", mig(m, "1g.10gb")),
            demand("ai/small", mig(m, "1g.20gb")),
            demand("ai/llm", mig(m, "3g.40gb")),
            demand("ai/mid", mig(m, "2g.20gb")),
            demand("ai/train", Device::Whole),
        ];
        let plan = plan_node(&node("A100-80GB", 4), &demands).unwrap();
        assert_eq!(layout(&plan, 0), [("3g.40gb", 0), ("2g.20gb", 4), ("1g.20gb", 6)]);
        assert_eq!(layout(&plan, 1), [("1g.10gb", 0)]);
        assert_eq!(plan.gpus[2].gpu_use, GpuUse::Whole("ai/train".into()));
        assert_eq!(plan.freed(), 1);
        plan.validate().unwrap();
    }

    #[test]
    fn the_search_finds_placements_lowest_starts_miss() {
        let m = a100();
        let p = |n: &str| m.profile(n).unwrap();
        // 3g.40gb at 0 leaves 2g starts {4} only; at 4 it leaves {0, 2}.
        assert_eq!(place(&[p("3g.40gb"), p("2g.20gb"), p("2g.20gb")]), Some(vec![4, 0, 2]));
        assert_eq!(place(&[p("4g.40gb"), p("3g.40gb")]), Some(vec![0, 4]));
        assert_eq!(place(&[p("3g.40gb"), p("3g.40gb"), p("1g.10gb")]), None, "no memory slice left");
        assert_eq!(place(&[p("4g.40gb"), p("2g.20gb"), p("2g.20gb")]), None, "4 + 2 + 2 compute slices");
        assert_eq!(place(&[p("1g.10gb+me"), p("1g.10gb+me")]), None, "one +me per GPU");
        let seven = vec![p("1g.10gb"); 7];
        assert_eq!(place(&seven), Some((0..7).collect()));
        let mut eight = seven.clone();
        eight.push(p("1g.10gb"));
        assert_eq!(place(&eight), None);
    }

    #[test]
    fn every_packed_layout_obeys_the_placement_rules() {
        // A deterministic spread of demand mixes on each MIG model: every plan validates,
        // every pod is placed or listed, and no GPU is used that a pod does not need.
        for key in ["A100-80GB", "H100-80GB", "H200-141GB"] {
            let m = catalog::model(key).unwrap();
            let ladder = m.ladder();
            let mut seed = 7u64;
            for _ in 0..300 {
                let n = 1 + (seed % 12) as usize;
                let demands: Vec<Demand> = (0..n)
                    .map(|i| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        demand(&format!("ns/p{i}"), Device::Mig(ladder[(seed >> 33) as usize % (ladder.len() - 1)]))
                    })
                    .collect();
                let plan = plan_node(&node(key, 4), &demands).unwrap();
                plan.validate().unwrap_or_else(|e| panic!("{key} {demands:?}: {e:?}"));
                let placed: usize = plan
                    .gpus
                    .iter()
                    .map(|g| match &g.gpu_use {
                        GpuUse::Mig(i) => i.len(),
                        _ => 0,
                    })
                    .sum();
                assert_eq!(placed + plan.unplaced.len(), n, "{key} {demands:?}");
                assert!(plan.gpus.len() - plan.freed() <= n);
                if !plan.unplaced.is_empty() {
                    assert_eq!(plan.freed(), 0, "a pod is left out only when no GPU is free");
                }
            }
        }
    }

    #[test]
    fn time_slice_shares_take_the_largest_share_on_the_node() {
        let l40s = "NVIDIA L40S";
        let demands: Vec<Demand> = (0..6)
            .map(|i| demand(&format!("inf/r{i}"), Device::Share { denominator: if i == 0 { 4 } else { 8 } }))
            .collect();
        let plan = plan_node(&node(l40s, 3), &demands).unwrap();
        let sliced: Vec<(u32, usize)> = plan
            .gpus
            .iter()
            .filter_map(|g| match &g.gpu_use {
                GpuUse::TimeSliced { replicas, holders } => Some((*replicas, holders.len())),
                _ => None,
            })
            .collect();
        assert_eq!(sliced, [(4, 4), (4, 2)]);
        assert_eq!(plan.freed(), 1);
    }

    #[test]
    fn what_does_not_fit_is_listed_and_bad_input_refused() {
        let m = a100();
        let demands =
            [demand("a/x", Device::Whole), demand("a/y", mig(m, "4g.40gb")), demand("a/z", mig(m, "7g.80gb"))];
        // The whole GPU is kept aside first; 7g.80gb takes the other; 4g.40gb finds none.
        let plan = plan_node(&node("A100-80GB", 2), &demands).unwrap();
        assert_eq!(plan.unplaced, [demand("a/y", mig(m, "4g.40gb"))]);
        assert_eq!(plan.freed(), 0);

        let e = plan_node(&node("NVIDIA L40S", 1), &[demand("a/x", mig(m, "1g.10gb"))]).unwrap_err();
        assert_eq!(e.to_string(), "node gpu-node-1: a/x is to get MIG 1g.10gb, but its GPUs (L40S) have no MIG");
        let h100 = catalog::model("H100-80GB").unwrap();
        let e = plan_node(&node("A100-80GB", 1), &[demand("a/x", mig(h100, "1g.10gb"))]).unwrap_err();
        assert!(e.to_string().contains("which is not a profile of A100-80GB"), "{e}");
        let e =
            plan_node(&NodeGpus { node: "n".into(), model: "A100-80GB".into(), indices: vec![1, 1] }, &[]).unwrap_err();
        assert_eq!(e, PlanError::Duplicate { node: "n".into(), index: 1 });
        let e = plan_node(&node("Quadro P1000", 1), &[]).unwrap_err();
        assert!(e.to_string().contains("\"Quadro P1000\" is not one rightsize knows"));
    }
}
