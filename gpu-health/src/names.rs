//! The names the loop writes on the node, and the circuit breaker's limits: plain
//! settings the plan, the node state and the breaker's decision read.

use std::time::Duration;

/// The names the loop writes on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub domain: String,
    /// `<domain>/gpu-unhealthy`.
    pub taint_key: String,
    /// `<domain>/gpu-health`: what the loop applied and why.
    pub state_annotation: String,
    /// `<domain>/gpu-health-dry-run`: what it would have applied.
    pub dry_run_annotation: String,
    /// `<domain>/gpu-health-reset`: an operator writes the RFC 3339 time at which the
    /// GPUs were reset, to clear reset-needing reasons older than that which NVML
    /// could not show (a reset the exporter never saw).
    pub reset_annotation: String,
    /// `<domain>/gpu-health-opt-out`: set to `true` on a node to keep the loop's hands off it.
    pub opt_out_label: String,
    pub condition_type: String,
    /// `fieldManager` of every write.
    pub field_manager: String,
    /// `app.kubernetes.io/managed-by` value on every DeviceTaintRule the loop creates.
    pub managed_by: String,
    /// `<domain>/gpu-health-node`: label (selectable) and annotation (the full name) on a
    /// DeviceTaintRule naming the node whose exporter owns it.
    pub rule_node_key: String,
    /// `<domain>/gpu-health-gpu`: annotation on a DeviceTaintRule, `<index>/<uuid>` of
    /// the GPU it holds.
    pub rule_gpu_key: String,
    /// `<domain>/gpu-health-since`: annotation on a DeviceTaintRule, when the GPU was held.
    pub rule_since_key: String,
}

impl Names {
    pub fn new(domain: &str) -> Self {
        Names {
            domain: domain.to_string(),
            taint_key: format!("{domain}/gpu-unhealthy"),
            state_annotation: format!("{domain}/gpu-health"),
            dry_run_annotation: format!("{domain}/gpu-health-dry-run"),
            reset_annotation: format!("{domain}/gpu-health-reset"),
            opt_out_label: format!("{domain}/gpu-health-opt-out"),
            condition_type: "GPUHealthy".into(),
            field_manager: "gpu-exporter-health".into(),
            managed_by: "gpu-exporter-health".into(),
            rule_node_key: format!("{domain}/gpu-health-node"),
            rule_gpu_key: format!("{domain}/gpu-health-gpu"),
            rule_since_key: format!("{domain}/gpu-health-since"),
        }
    }
}

/// The circuit breaker's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSettings {
    pub max_fraction: f64,
    pub max_nodes: Option<u32>,
    pub node_selector: String,
    pub config_map: String,
    /// How long a place taken but not yet shown on its node counts.
    pub grace: Duration,
    /// Share of the fleet's GPUs that may be held by device taints at once.
    pub max_gpu_fraction: f64,
    /// A count instead of the share.
    pub max_gpus: Option<u32>,
    /// The node label that says how many GPUs a node has (GPU feature discovery's);
    /// a node without it counts as many as this node has.
    pub gpu_count_label: String,
}

impl BreakerSettings {
    /// Most GPU nodes that may be quarantined at once in a fleet of `fleet`: the
    /// count if given, else the share rounded down but at least one, so a small
    /// cluster can still take one broken node out.
    pub fn limit(&self, fleet: usize) -> usize {
        match self.max_nodes {
            Some(n) => n as usize,
            None => ((fleet as f64 * self.max_fraction).floor() as usize).max(1),
        }
    }

    /// Most GPUs that may be held by device taints at once among `fleet_gpus`: the
    /// count if given, else the share rounded down but at least one.
    pub fn gpu_limit(&self, fleet_gpus: usize) -> usize {
        match self.max_gpus {
            Some(n) => n as usize,
            None => ((fleet_gpus as f64 * self.max_gpu_fraction).floor() as usize).max(1),
        }
    }

    /// The ConfigMap GPU places are taken in: `<config-map>-gpus`. Separate from the
    /// nodes' one, so that each limit has its own optimistic concurrency and an older
    /// exporter, which rewrites the nodes' map with only node entries, never drops a
    /// GPU place.
    pub fn gpu_config_map(&self) -> String {
        format!("{}-gpus", self.config_map)
    }
}
