//! Cost arithmetic: dollars per hour allocated, idle and unallocated, per holder, GPU,
//! node and namespace, from the fleet and the price table.
//!
//! - A holder's cost is its share of the GPU ([`crate::share`]) times the GPU's price.
//! - **Allocated** is the sum over holders. **Idle** ("waste") is the part of it whose
//!   holder is idle under the floor (`--idle-below`, 10 % by default); a holder whose
//!   idleness is unknown (no utilization figure while processes run) is counted in
//!   allocated only and reported as such, never guessed.
//! - **Capacity** is the sum of the GPUs' prices; **unallocated** is capacity less what
//!   holders have: GPUs and MIG instances nobody holds, and free MIG slices.
//! - A GPU whose model has no price is **unpriced**: it adds nothing to any sum, and
//!   each sum that leaves some out says how many ([`Sum::unpriced`]).
//! - Nodes whose exporter gave no readings are unknown and left out; the report lists
//!   them ([`CostReport::unknown_nodes`]).

use std::collections::BTreeMap;

use crate::fleet::{Fleet, UnknownReason, short_model};
use crate::prices::PriceTable;
use crate::share::{Device, Idle, share_text};

/// One holder on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderCost {
    pub node: String,
    pub namespace: String,
    pub pod: String,
    pub model: String,
    /// `GPU 2`, `MIG 3g.40gb`.
    pub device: String,
    pub gpu: u32,
    /// `1`, `3/7`, `1/4`.
    pub share_text: String,
    pub share: Option<f64>,
    /// `None` when the model has no price or the share is unknown.
    pub dollars_per_hour: Option<f64>,
    pub idle: Idle,
    /// Utilization of its share, percent.
    pub utilization: Option<f64>,
}

/// One GPU's capacity and what of it is held.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCost {
    pub node: String,
    pub gpu: u32,
    pub model: String,
    pub price: Option<f64>,
    /// Fraction of the GPU its holders have (0 to 1).
    pub allocated_fraction: f64,
}

impl GpuCost {
    pub fn unallocated(&self) -> Option<f64> {
        self.price.map(|p| p * (1.0 - self.allocated_fraction).max(0.0))
    }
}

/// Models without a price, and where they are.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Unpriced {
    pub model: String,
    pub gpus: usize,
    pub nodes: Vec<String>,
}

/// Everything the cost views group.
#[derive(Debug, Clone, PartialEq)]
pub struct CostReport {
    pub holders: Vec<HolderCost>,
    pub gpus: Vec<GpuCost>,
    pub unpriced: Vec<Unpriced>,
    pub unknown_nodes: Vec<(String, UnknownReason)>,
    pub idle_below_percent: f64,
}

/// A sum of dollars that may leave out unpriced devices.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sum {
    pub dollars_per_hour: f64,
    /// Devices (or GPUs) left out because their model has no price.
    pub unpriced: usize,
    /// Devices (or GPUs) counted.
    pub priced: usize,
}

impl Sum {
    pub fn add(&mut self, value: Option<f64>) {
        match value {
            Some(v) => {
                self.dollars_per_hour += v;
                self.priced += 1;
            }
            None => self.unpriced += 1,
        }
    }

    /// `None` when everything in it was unpriced (it is then not zero but unknown).
    pub fn value(&self) -> Option<f64> {
        if self.priced == 0 && self.unpriced > 0 { None } else { Some(self.dollars_per_hour) }
    }
}

/// Builds the report.
pub fn report(fleet: &Fleet, table: &PriceTable, idle_below_percent: f64) -> CostReport {
    let mut holders = Vec::new();
    let mut gpus = Vec::new();
    let mut unpriced: BTreeMap<String, Unpriced> = BTreeMap::new();
    for node in &fleet.nodes {
        let Some(readings) = node.readings() else { continue };
        for gpu in &readings.gpus {
            let price = table.price(&gpu.model);
            if price.is_none() {
                let u = unpriced.entry(gpu.model.clone()).or_insert_with(|| Unpriced {
                    model: gpu.model.clone(),
                    gpus: 0,
                    nodes: Vec::new(),
                });
                u.gpus += 1;
                if !u.nodes.contains(&node.info.name) {
                    u.nodes.push(node.info.name.clone());
                }
            }
            let mut allocated_fraction = 0.0;
            for device in Device::of(gpu) {
                if !device.holders().is_empty() {
                    allocated_fraction += device.fraction().unwrap_or(0.0);
                }
                let share = device.share();
                for holder in device.holders() {
                    holders.push(HolderCost {
                        node: node.info.name.clone(),
                        namespace: holder.namespace.clone(),
                        pod: holder.pod.clone(),
                        model: gpu.model.clone(),
                        device: device.label(),
                        gpu: gpu.index,
                        share_text: share_text(&device),
                        share,
                        dollars_per_hour: price.zip(share).map(|(p, s)| p * s),
                        idle: device.idle(holder, idle_below_percent),
                        utilization: device.utilization_of_share(holder),
                    });
                }
            }
            gpus.push(GpuCost {
                node: node.info.name.clone(),
                gpu: gpu.index,
                model: gpu.model.clone(),
                price,
                allocated_fraction: allocated_fraction.min(1.0),
            });
        }
    }
    CostReport {
        holders,
        gpus,
        unpriced: unpriced.into_values().collect(),
        unknown_nodes: fleet.unknown_nodes().into_iter().map(|(n, r, _)| (n.to_string(), r)).collect(),
        idle_below_percent,
    }
}

/// Allocated and idle dollars of a group of holders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupCost {
    pub allocated: Sum,
    pub idle: Sum,
    /// Allocated devices whose idleness is unknown.
    pub idle_unknown: usize,
    /// Sum of shares: GPUs' worth held.
    pub gpus: f64,
    pub devices: Vec<String>,
    pub nodes: Vec<String>,
}

impl GroupCost {
    pub fn add(&mut self, h: &HolderCost) {
        self.allocated.add(h.dollars_per_hour);
        match h.idle {
            Idle::Idle => self.idle.add(h.dollars_per_hour),
            Idle::Unknown => self.idle_unknown += 1,
            Idle::Busy => {}
        }
        self.gpus += h.share.unwrap_or(0.0);
        let device = if h.device.starts_with("GPU") && h.share_text != "1" {
            format!("{} ({})", h.device, h.share_text)
        } else {
            h.device.clone()
        };
        self.devices.push(device);
        if !self.nodes.contains(&h.node) {
            self.nodes.push(h.node.clone());
        }
    }
}

/// Holders grouped by `key` (namespace, or namespace/pod), in key order.
pub fn group_by<K: Ord>(holders: &[HolderCost], key: impl Fn(&HolderCost) -> K) -> BTreeMap<K, GroupCost> {
    let mut out: BTreeMap<K, GroupCost> = BTreeMap::new();
    for h in holders {
        out.entry(key(h)).or_default().add(h);
    }
    out
}

/// One node's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeCost {
    pub models: Vec<String>,
    pub capacity: Sum,
    pub unallocated: Sum,
    pub group: GroupCost,
}

/// Figures per node, in node order.
pub fn by_node(report: &CostReport) -> BTreeMap<String, NodeCost> {
    let mut out: BTreeMap<String, NodeCost> = BTreeMap::new();
    for gpu in &report.gpus {
        let node = out.entry(gpu.node.clone()).or_default();
        node.capacity.add(gpu.price);
        node.unallocated.add(gpu.unallocated());
        let model = short_model(&gpu.model).to_string();
        if !node.models.contains(&model) {
            node.models.push(model);
        }
    }
    for h in &report.holders {
        out.entry(h.node.clone()).or_default().group.add(h);
    }
    out
}

/// The fleet's capacity and unallocated dollars.
pub fn fleet_capacity(report: &CostReport) -> (Sum, Sum) {
    let mut capacity = Sum::default();
    let mut unallocated = Sum::default();
    for gpu in &report.gpus {
        capacity.add(gpu.price);
        unallocated.add(gpu.unallocated());
    }
    (capacity, unallocated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeInfo;
    use crate::fleet::{Exporter, NodeEntry};
    use crate::readings::{Gpu, Holder, MigInstance, NodeReadings};

    fn holder(ns: &str, pod: &str, util: Option<f64>) -> Holder {
        Holder {
            namespace: ns.into(),
            pod: pod.into(),
            utilization: util,
            memory_used_bytes: Some(1.0),
            ..Holder::default()
        }
    }

    fn fleet(gpus: Vec<Gpu>) -> Fleet {
        let info = NodeInfo { name: "n1".into(), ..NodeInfo::default() };
        let down = NodeInfo { name: "n2".into(), ..NodeInfo::default() };
        Fleet {
            nodes: vec![
                NodeEntry { info, exporter: Exporter::Read(NodeReadings { gpus, ..NodeReadings::default() }) },
                NodeEntry {
                    info: down,
                    exporter: Exporter::Unknown { reason: UnknownReason::Timeout, detail: String::new() },
                },
            ],
            ..Fleet::default()
        }
    }

    fn a100_mig() -> Gpu {
        Gpu {
            index: 0,
            model: "NVIDIA A100-SXM4-80GB".into(),
            mig_enabled: true,
            mig_slices: Some(7.0),
            instances: vec![
                MigInstance {
                    slices: Some(3.0),
                    gpu_instance_id: 1,
                    processes: Some(1.0),
                    holders: vec![holder("ai", "llm", None)],
                    ..MigInstance::default()
                },
                MigInstance { slices: Some(3.0), gpu_instance_id: 2, processes: Some(0.0), ..MigInstance::default() },
            ],
            ..Gpu::default()
        }
    }

    #[test]
    fn mig_shares_shared_gpus_and_unallocated_slices_add_up() {
        let shared = Gpu {
            index: 1,
            model: "NVIDIA H100 80GB HBM3".into(),
            holders: vec![holder("ai", "a", Some(1.0)), holder("ml", "b", Some(20.0))],
            ..Gpu::default()
        };
        let table = PriceTable::defaults().unwrap();
        let r = report(&fleet(vec![a100_mig(), shared]), &table, 10.0);
        assert_eq!(r.holders.len(), 3);
        let llm = &r.holders[0];
        assert!((llm.dollars_per_hour.unwrap() - 1.5).abs() < 1e-9, "3/7 of $3.50");
        assert_eq!(llm.idle, Idle::Unknown);
        assert_eq!(r.holders[1].dollars_per_hour, Some(2.25));
        assert_eq!(r.holders[1].idle, Idle::Idle, "1 % of the GPU is 2 % of a half");
        assert_eq!(r.holders[2].idle, Idle::Busy);
        let by_ns = group_by(&r.holders, |h| h.namespace.clone());
        assert!((by_ns["ai"].allocated.dollars_per_hour - 3.75).abs() < 1e-9);
        assert_eq!(by_ns["ai"].idle.dollars_per_hour, 2.25);
        assert_eq!(by_ns["ai"].idle_unknown, 1);
        assert_eq!(by_ns["ml"].idle.value(), Some(0.0));
        let (capacity, unallocated) = fleet_capacity(&r);
        assert_eq!(capacity.dollars_per_hour, 8.0);
        assert!((unallocated.dollars_per_hour - 2.0).abs() < 1e-9, "4/7 of the A100 is nobody's");
        assert_eq!(r.unknown_nodes, [("n2".to_string(), UnknownReason::Timeout)]);
        let nodes = by_node(&r);
        assert_eq!(nodes["n1"].models, ["A100-SXM4-80GB", "H100 80GB HBM3"]);
        assert!(!nodes.contains_key("n2"), "an unknown node has no figures");
    }

    #[test]
    fn an_unpriced_model_is_never_zero() {
        let v100 = Gpu {
            index: 0,
            model: "Tesla V100-SXM2-32GB".into(),
            holders: vec![holder("ai", "x", Some(50.0))],
            ..Gpu::default()
        };
        let spare = Gpu { index: 1, model: "Tesla V100-SXM2-32GB".into(), ..Gpu::default() };
        let r = report(&fleet(vec![v100, spare]), &PriceTable::defaults().unwrap(), 10.0);
        assert_eq!(r.holders[0].dollars_per_hour, None);
        assert_eq!(r.unpriced, [Unpriced { model: "Tesla V100-SXM2-32GB".into(), gpus: 2, nodes: vec!["n1".into()] }]);
        let by_ns = group_by(&r.holders, |h| h.namespace.clone());
        assert_eq!(by_ns["ai"].allocated.value(), None, "all unpriced: unknown, not $0");
        assert_eq!(by_ns["ai"].allocated.unpriced, 1);
        let (capacity, _) = fleet_capacity(&r);
        assert_eq!((capacity.value(), capacity.unpriced), (None, 2));
        let mut mixed = Sum::default();
        mixed.add(Some(1.0));
        mixed.add(None);
        assert_eq!((mixed.value(), mixed.unpriced), (Some(1.0), 1));
        assert_eq!(Sum::default().value(), Some(0.0), "nothing at all is zero");
    }
}
