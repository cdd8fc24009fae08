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
}
