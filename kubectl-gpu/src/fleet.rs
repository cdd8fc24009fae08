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
        }
    }
}

/// What a node's exporter gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Exporter {
    Read(NodeReadings),
    Unknown { reason: UnknownReason, detail: String },
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
