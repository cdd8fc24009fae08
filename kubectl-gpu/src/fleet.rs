//! The cluster as one run of `kubectl gpu` saw it: every GPU node from the core API,
//! each joined with its exporter's readings or with why there are none, and the GPU
//! pods in scope. Plain data; the edge (`kube`) fills it, the views read it.
//!
//! **Unknown.** A node whose exporter could not be read this time (no exporter pod on
//! it, the pod not running, the read refused by RBAC, timed out, unreachable, or its
//! page malformed) has [`Exporter::Unknown`] with the reason. Its readings are shown as
//! `unknown`, never as zero: they are left out of every mean, sum and cost total, and
//! each view says how many nodes it left out and why. What the core API says of the
//! node (its GPU labels, capacity, health condition, taint, cordon) is still shown.

use crate::cluster::{NodeInfo, PodInfo};
use crate::readings::NodeReadings;

/// Why a node's exporter gave no readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownReason {
    /// No exporter pod is scheduled on the node.
    NoExporter,
    /// The exporter pod is not running (pending, crash-looping, failed).
    NotRunning,
    /// The API server refused the `pods/proxy` read (RBAC).
    Forbidden,
    /// No answer within the per-request timeout, or the run's deadline passed first.
    Timeout,
    /// The API server could not reach the exporter (it answered 502/503), or another error.
    Unreachable,
    /// The exporter answered with a page that does not parse.
    BadPage,
    /// The exporter's page went past a limit (size, samples, line length, ...): the
    /// read stopped there ([`crate::page`]).
    OverLimit,
    /// The exporter answered but NVML is down on the node (no driver, no library): it
    /// has no GPU to report.
    NvmlDown,
}

impl UnknownReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoExporter => "no exporter pod",
            Self::NotRunning => "exporter not running",
            Self::Forbidden => "forbidden",
            Self::Timeout => "timed out",
            Self::Unreachable => "unreachable",
            Self::BadPage => "bad page",
            Self::OverLimit => "page over limit",
            Self::NvmlDown => "NVML down",
        }
    }
}

/// What a node's exporter gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Exporter {
    Read(NodeReadings),
    Unknown { reason: UnknownReason, detail: String },
}

impl Exporter {
    /// What a page that parsed says: its readings, or unknown when NVML is down and the
    /// exporter lists no GPU (a node without a driver is not a node with no GPUs).
    pub fn from_readings(readings: NodeReadings) -> Exporter {
        if readings.nvml_up == Some(false) && readings.gpus.is_empty() {
            let detail = readings.nvml_error.unwrap_or_else(|| "gpu_exporter_nvml_up is 0".into());
            return Exporter::Unknown { reason: UnknownReason::NvmlDown, detail };
        }
        Exporter::Read(readings)
    }
}

/// One GPU node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEntry {
    pub info: NodeInfo,
    pub exporter: Exporter,
}

impl NodeEntry {
    pub fn readings(&self) -> Option<&NodeReadings> {
        match &self.exporter {
            Exporter::Read(r) => Some(r),
            Exporter::Unknown { .. } => None,
        }
    }

    pub fn unknown(&self) -> Option<(UnknownReason, &str)> {
        match &self.exporter {
            Exporter::Read(_) => None,
            Exporter::Unknown { reason, detail } => Some((*reason, detail)),
        }
    }
}

/// Everything one run looked at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fleet {
    /// GPU nodes, sorted by name.
    pub nodes: Vec<NodeEntry>,
    /// Pods in scope (namespace, label selector) that ask for NVIDIA resources.
    pub pods: Vec<PodInfo>,
    /// Unix time of the reads, for "XIDs in the last hour".
    pub now: f64,
}

impl Fleet {
    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.info.name == name)
    }

    /// The nodes left out of figures, with why.
    pub fn unknown_nodes(&self) -> Vec<(&str, UnknownReason, &str)> {
        self.nodes.iter().filter_map(|n| n.unknown().map(|(r, d)| (n.info.name.as_str(), r, d))).collect()
    }
}

/// The short model name the views show: NVML's name without the `NVIDIA ` prefix.
pub fn short_model(model: &str) -> &str {
    model.strip_prefix("NVIDIA ").unwrap_or(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readings::Gpu;

    #[test]
    fn nvml_down_without_gpus_is_unknown_not_an_empty_node() {
        let down = NodeReadings {
            nvml_up: Some(false),
            nvml_error: Some("driver not loaded".into()),
            ..NodeReadings::default()
        };
        assert_eq!(
            Exporter::from_readings(down),
            Exporter::Unknown { reason: UnknownReason::NvmlDown, detail: "driver not loaded".into() }
        );
        let up = NodeReadings { nvml_up: Some(true), gpus: vec![Gpu::default()], ..NodeReadings::default() };
        assert!(matches!(Exporter::from_readings(up), Exporter::Read(_)));
        assert_eq!(short_model("NVIDIA H100 80GB HBM3"), "H100 80GB HBM3");
        assert_eq!(short_model("Tesla V100-SXM2-32GB"), "Tesla V100-SXM2-32GB");
    }
}
