//! A node's GPU health in one cell, as `kubectl get nodes` writes `Ready,SchedulingDisabled`:
//! comma-separated states, the worst colour wins.
//!
//! - `Healthy` / `Unhealthy(<reason>)`: the `GPUHealthy` condition the health loop
//!   writes; without one (the loop in dry-run or report-only mode, or not run yet), the
//!   exporter's own verdict (`gpu_health_node_healthy`), and `-` when neither says.
//! - `Quarantined(<reason>)`: the loop holds a cordon or its taint (its claim says
//!   `quarantined`); the reason is the taint's value, the primary reason.
//! - `GPUsHeld(<indexes>:<reason>)`: the loop keeps only those GPUs from the scheduler, by DRA
//!   device taints; the node stays schedulable (its claim says `gpus-quarantined`).
//! - `BreakerOpen`: the circuit breaker held the quarantine back (the claim's `blocked`,
//!   or `gpu_health_breaker_open` from the exporter); `GPUBreakerOpen` for a GPU's place.
//! - `Cordoned(by <who>)`: `spec.unschedulable`, with who set it ([`crate::cluster`]).
//! - `DryRun(<intended>)`, `OptedOut`, `BadClaim` (the claim annotation does not parse).

use gpu_health::node_state::QuarantineState;
use serde_json::{Value, json};

use crate::cluster::NodeInfo;
use crate::readings::NodeReadings;
use crate::table::{Cell, Tone};

fn worse(a: Tone, b: Tone) -> Tone {
    let rank = |t: Tone| match t {
        Tone::Plain | Tone::Dim => 0,
        Tone::Good => 1,
        Tone::Warn => 2,
        Tone::Bad => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The health cell of a node.
pub fn cell(info: &NodeInfo, readings: Option<&NodeReadings>) -> Cell {
    let h = &info.health;
    let loop_health = readings.map(|r| &r.health);
    let mut parts: Vec<(String, Tone)> = Vec::new();
    let reason = h.taint.clone().filter(|t| !t.is_empty()).or_else(|| h.reason.clone());
    let quarantined = h.state == Some(QuarantineState::Quarantined);
    let held = (!h.held_gpus.is_empty()).then(|| {
        let indexes: Vec<String> = h.held_gpus.iter().map(u32::to_string).collect();
        let why = reason.as_deref().map(|r| format!(":{r}")).unwrap_or_default();
        (format!("GPUsHeld({}{why})", indexes.join(",")), Tone::Warn)
    });
    match h.condition.as_deref() {
        _ if quarantined => parts.push((format!("Quarantined({})", reason.unwrap_or_default()), Tone::Bad)),
        _ if held.is_some() => parts.extend(held),
        Some("True") => parts.push(("Healthy".into(), Tone::Good)),
        Some("False") => parts.push((format!("Unhealthy({})", reason.unwrap_or_default()), Tone::Bad)),
        Some(other) => parts.push((format!("GPUHealthy={other}"), Tone::Warn)),
        None => match loop_health.and_then(|l| l.healthy) {
            Some(true) => parts.push(("Healthy".into(), Tone::Good)),
            Some(false) => {
                let first = loop_health.and_then(|l| l.reasons.first()).cloned().unwrap_or_default();
                parts.push((format!("Unhealthy({first})"), Tone::Bad));
            }
            None => {}
        },
    }
    if h.breaker_open || loop_health.and_then(|l| l.breaker_open) == Some(true) {
        parts.push(("BreakerOpen".into(), Tone::Bad));
    }
    if h.gpu_breaker_open {
        parts.push(("GPUBreakerOpen".into(), Tone::Bad));
    }
    if let Some(by) = &info.cordoned_by {
        parts.push((format!("Cordoned(by {by})"), Tone::Warn));
    }
    if !h.dry_run.is_empty() {
        parts.push((format!("DryRun({})", h.dry_run.join("+")), Tone::Warn));
    }
    if h.opted_out {
        parts.push(("OptedOut".into(), Tone::Dim));
    }
    if h.claim_error.is_some() {
        parts.push(("BadClaim".into(), Tone::Warn));
    }
    if parts.is_empty() {
        return Cell::text("-");
    }
    let tone = parts.iter().fold(Tone::Plain, |t, (_, p)| worse(t, *p));
    let text: Vec<String> = parts.into_iter().map(|(t, _)| t).collect();
    Cell::text(text.join(",")).tone(tone)
}

/// The health of a node as JSON.
pub fn json(info: &NodeInfo, readings: Option<&NodeReadings>) -> Value {
    let h = &info.health;
    let loop_health = readings.map(|r| &r.health);
    json!({
        "gpuHealthy": h.condition,
        "reason": h.reason,
        "message": h.message,
        "quarantined": h.state == Some(QuarantineState::Quarantined),
        "quarantineReason": h.taint,
        "heldGpus": h.held_gpus,
        "gpuBreakerOpen": h.gpu_breaker_open,
        "claimState": h.state.map(|s| s.as_str()),
        "cordoned": info.unschedulable,
        "cordonedBy": info.cordoned_by,
        "breakerOpen": h.breaker_open || loop_health.and_then(|l| l.breaker_open) == Some(true),
        "dryRun": h.dry_run,
        "optedOut": h.opted_out,
        "claimError": h.claim_error,
        "exporterHealthy": loop_health.and_then(|l| l.healthy),
        "exporterReasons": loop_health.map(|l| l.reasons.clone()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeHealth;
    use crate::readings::LoopHealth;

    fn info(health: NodeHealth, cordoned_by: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: "n".into(),
            unschedulable: cordoned_by.is_some(),
            cordoned_by: cordoned_by.map(str::to_string),
            health,
            ..NodeInfo::default()
        }
    }

    #[test]
    fn each_state_has_its_word_and_the_worst_colour_wins() {
        let quarantined = NodeHealth {
            condition: Some("False".into()),
            reason: Some("Xid79".into()),
            taint: Some("Xid79".into()),
            state: Some(QuarantineState::Quarantined),
            ..NodeHealth::default()
        };
        let c = cell(&info(quarantined, Some("gpu-health")), None);
        assert_eq!((c.text.as_str(), c.tone), ("Quarantined(Xid79),Cordoned(by gpu-health)", Tone::Bad));
        let blocked = NodeHealth {
            condition: Some("False".into()),
            reason: Some("Temperature".into()),
            state: Some(QuarantineState::Unhealthy),
            breaker_open: true,
            ..NodeHealth::default()
        };
        assert_eq!(
            cell(&info(blocked, Some("kubectl-cordon")), None).text,
            "Unhealthy(Temperature),BreakerOpen,Cordoned(by kubectl-cordon)"
        );
        let healthy = NodeHealth { condition: Some("True".into()), ..NodeHealth::default() };
        let c = cell(&info(healthy, None), None);
        assert_eq!((c.text.as_str(), c.tone), ("Healthy", Tone::Good));
        assert_eq!(cell(&info(NodeHealth::default(), None), None).text, "-");
        let dry =
            NodeHealth { dry_run: vec!["cordon".into(), "taint".into()], opted_out: true, ..NodeHealth::default() };
        assert_eq!(cell(&info(dry, None), None).text, "DryRun(cordon+taint),OptedOut");
    }

    #[test]
    fn gpus_held_by_device_taints_name_their_indexes_and_the_node_stays_schedulable() {
        let held = NodeHealth {
            condition: Some("False".into()),
            reason: Some("Xid79".into()),
            state: Some(QuarantineState::GpusQuarantined),
            held_gpus: vec![3, 5],
            gpu_breaker_open: true,
            ..NodeHealth::default()
        };
        let i = info(held, None);
        let c = cell(&i, None);
        assert_eq!((c.text.as_str(), c.tone), ("GPUsHeld(3,5:Xid79),GPUBreakerOpen", Tone::Bad));
        let j = json(&i, None);
        assert_eq!(
            (j["heldGpus"].clone(), j["gpuBreakerOpen"].clone(), j["quarantined"].clone()),
            (json!([3, 5]), json!(true), json!(false))
        );
    }

    #[test]
    fn without_a_condition_the_exporters_verdict_is_shown() {
        let readings = NodeReadings {
            health: LoopHealth {
                healthy: Some(false),
                reasons: vec!["GpuLost".into()],
                breaker_open: Some(true),
                ..LoopHealth::default()
            },
            ..NodeReadings::default()
        };
        let i = info(NodeHealth::default(), None);
        assert_eq!(cell(&i, Some(&readings)).text, "Unhealthy(GpuLost),BreakerOpen");
        let j = json(&i, Some(&readings));
        assert_eq!(j["breakerOpen"], true);
        assert_eq!(j["gpuHealthy"], Value::Null);
        assert_eq!(j["exporterReasons"], json!(["GpuLost"]));
    }
}
