//! The simulated load on the fleet's GPU pods, as a load balancer in front of a
//! Deployment would spread it.
//!
//! A load file names workloads (a namespace and a label selector) and each one's
//! demand: the SM time it needs in total, in percent of one GPU (`728` keeps eight GPUs
//! 91 % busy). The demand is split evenly over the workload's Ready pods on every
//! simulated node, so that when the HPA adds replicas each one's utilization falls, as
//! it does behind a real Service. A pod can use at most what its device gives: a MIG
//! instance or a whole GPU 100 %, and the replicas of a time-sliced GPU share its 100 %
//! in proportion to what they want (NVML's per-process SM utilization on a time-sliced
//! GPU sums to at most 100). Pods of no workload, and pods not Ready, are idle.
//!
//! ```yaml
//! workloads:
//!   - namespace: ai-inference
//!     selector: {app: inference}
//!     demand: 728            # percent of one GPU, over all Ready pods
//!     memory_used_mib: 15500 # per pod; default 1024
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The load file as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadFile {
    #[serde(default)]
    pub workloads: Vec<Workload>,
}

/// One workload's demand.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub namespace: String,
    /// Labels a pod must all carry.
    pub selector: BTreeMap<String, String>,
    pub demand: f64,
    #[serde(default = "default_memory")]
    pub memory_used_mib: f64,
}

fn default_memory() -> f64 {
    1024.0
}

/// Why a load file was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: cannot read the load file: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {field}: {reason}")]
    Invalid { file: String, field: String, reason: String },
}

impl LoadFile {
    /// Reads and checks `path`; a missing file is no load at all.
    pub fn read(path: &Path) -> Result<LoadFile, LoadError> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => LoadFile::parse(&file, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LoadFile::default()),
            Err(source) => Err(LoadError::Read { file, source }),
        }
    }

    /// Parses load text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<LoadFile, LoadError> {
        let invalid = |field: String, reason: String| LoadError::Invalid { file: file.to_string(), field, reason };
        let load: LoadFile = serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text))
            .map_err(|e| invalid(e.path().to_string(), e.into_inner().to_string()))?;
        for (i, w) in load.workloads.iter().enumerate() {
            if !(w.demand.is_finite() && w.demand >= 0.0) {
                return Err(invalid(format!("workloads[{i}].demand"), format!("{} is not a number >= 0", w.demand)));
            }
            if !(w.memory_used_mib.is_finite() && w.memory_used_mib >= 0.0) {
                return Err(invalid(
                    format!("workloads[{i}].memory_used_mib"),
                    format!("{} is not a number >= 0", w.memory_used_mib),
                ));
            }
            if w.selector.is_empty() {
                return Err(invalid(format!("workloads[{i}].selector"), "must name at least one label".into()));
            }
        }
        Ok(load)
    }

    fn workload_of(&self, pod: &PodSeat) -> Option<&Workload> {
        self.workloads
            .iter()
            .find(|w| w.namespace == pod.namespace && w.selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v)))
    }
}

/// Where one pod sits, as the load sees it.
#[derive(Debug, Clone)]
pub struct PodSeat {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
    /// The node and the devices the pod holds: (GPU index, MIG instance); a time-sliced
    /// GPU's replicas all name the GPU alone.
    pub node: String,
    pub devices: Vec<(u32, Option<u32>)>,
}

/// What one pod's processes do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodLoad {
    /// SM utilization of the pod's process on each of its devices, percent.
    pub sm_utilization: f64,
    pub memory_used_mib: f64,
}

/// Each pod's load, in the order of `pods`.
pub fn spread(load: &LoadFile, pods: &[PodSeat]) -> Vec<PodLoad> {
    let ready_count = |w: &Workload| pods.iter().filter(|p| p.ready && load.workload_of(p) == Some(w)).count();
    let wanted: Vec<f64> = pods
        .iter()
        .map(|p| match load.workload_of(p) {
            Some(w) if p.ready && !p.devices.is_empty() => (w.demand / ready_count(w) as f64).min(100.0),
            _ => 0.0,
        })
        .collect();
    // What each whole (possibly time-sliced) GPU is asked for, by its pods together.
    let mut per_gpu: BTreeMap<(&str, u32), f64> = BTreeMap::new();
    for (p, want) in pods.iter().zip(&wanted) {
        for (gpu, mig) in &p.devices {
            if mig.is_none() {
                *per_gpu.entry((p.node.as_str(), *gpu)).or_insert(0.0) += want;
            }
        }
    }
    pods.iter()
        .zip(&wanted)
        .map(|(p, want)| {
            let squeeze = p
                .devices
                .iter()
                .filter(|(_, mig)| mig.is_none())
                .map(|(gpu, _)| per_gpu[&(p.node.as_str(), *gpu)])
                .map(|asked| if asked > 100.0 { 100.0 / asked } else { 1.0 })
                .fold(1.0, f64::min);
            PodLoad {
                sm_utilization: want * squeeze,
                memory_used_mib: load.workload_of(p).map_or(0.0, |w| w.memory_used_mib),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(node: &str, app: &str, ready: bool, devices: &[(u32, Option<u32>)]) -> PodSeat {
        PodSeat {
            namespace: "ai-inference".into(),
            labels: [("app".to_string(), app.to_string())].into(),
            ready,
            node: node.into(),
            devices: devices.to_vec(),
        }
    }

    fn load(text: &str) -> LoadFile {
        LoadFile::parse("load.yaml", text).unwrap()
    }

    #[test]
    fn demand_is_split_over_the_ready_pods_of_every_node() {
        let l = load("workloads: [{namespace: ai-inference, selector: {app: inference}, demand: 300}]");
        let pods = [
            seat("a", "inference", true, &[(0, None)]),
            seat("b", "inference", true, &[(0, None)]),
            seat("b", "inference", true, &[(1, None)]),
            seat("b", "inference", false, &[(2, None)]),
            seat("a", "other", true, &[(1, None)]),
        ];
        let got: Vec<f64> = spread(&l, &pods).iter().map(|p| p.sm_utilization).collect();
        assert_eq!(got, [100.0, 100.0, 100.0, 0.0, 0.0]);
        let l = load("workloads: [{namespace: ai-inference, selector: {app: inference}, demand: 150}]");
        assert_eq!(spread(&l, &pods)[0].sm_utilization, 50.0);
        assert_eq!(spread(&l, &pods)[0].memory_used_mib, 1024.0);
    }

    #[test]
    fn replicas_of_one_gpu_share_its_hundred_percent_and_mig_instances_do_not() {
        let l = load("workloads: [{namespace: ai-inference, selector: {app: inference}, demand: 240}]");
        let pods = [
            seat("a", "inference", true, &[(0, None)]),
            seat("a", "inference", true, &[(0, None)]),
            seat("a", "inference", true, &[(1, Some(0))]),
        ];
        let got: Vec<f64> = spread(&l, &pods).iter().map(|p| p.sm_utilization).collect();
        assert_eq!(got, [50.0, 50.0, 80.0]);
    }

    #[test]
    fn a_wrong_load_file_is_refused_naming_the_field() {
        let err = LoadFile::parse("l.yaml", "workloads: [{namespace: x, selector: {a: b}, demand: -1}]").unwrap_err();
        assert_eq!(err.to_string(), "l.yaml: workloads[0].demand: -1 is not a number >= 0");
        let err = LoadFile::parse("l.yaml", "workloads: [{namespace: x, selector: {}, demand: 1}]").unwrap_err();
        assert_eq!(err.to_string(), "l.yaml: workloads[0].selector: must name at least one label");
        let err = LoadFile::parse("l.yaml", "workloads: [{namespace: x, selecter: {}, demand: 1}]").unwrap_err();
        assert!(err.to_string().starts_with("l.yaml: workloads[0].selecter: "), "{err}");
        assert!(err.to_string().contains("unknown field `selecter`"), "{err}");
    }
}
