//! From a verdict and the Node as found to the writes that make the Node match:
//! pure, so every rule about what the loop may touch is unit-tested here.
//!
//! Rules:
//! - Only the loop's own pieces are written: `spec.unschedulable` when the loop set
//!   it, its taint (`<domain>/gpu-unhealthy`), its annotation, its condition.
//! - A node someone else cordoned stays cordoned: the loop records that it found it
//!   so and never sends `unschedulable: false` for it.
//! - If someone else lifts the loop's cordon or taint (or rewrites
//!   `spec.unschedulable`), the loop drops that piece of its claim and does not put
//!   it back in this quarantine.
//! - Taints have no merge key, so the whole list is sent with the node's
//!   `resourceVersion`: a concurrent change makes the API server answer 409 and the
//!   loop plans again from a fresh read instead of overwriting it.
//! - A new quarantine (from owning nothing to owning something) asks the circuit
//!   breaker first; lifting never does.
//! - A write is planned only when something differs, so a restart, a repeated check
//!   or a retried reconcile sends nothing new.
//! - One primary reason ([`policy::primary`]: most severe, then first seen) is the
//!   taint's value, the condition's reason and the `primary reason` every Event about
//!   the unhealthy node names. When it moves (a more severe reason joins, or the
//!   primary one clears), the taint the loop owns, the condition and a
//!   `GPUReasonChanged` Event move with it in the same reconcile.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Taint;
use serde_json::{Map, Value, json};

use crate::names::Names;
use crate::node_state::{Applied, Claim, Found, NodeView, Overridden, QuarantineState};
use crate::policy::{self, Health, Verdict};

/// How far the loop may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Cordon, taint, condition, Events, annotation.
    Enforce,
    /// `AUTO_CORDON=false`: condition, Events and annotation only.
    ConditionOnly,
    /// Annotation and Event recording the intended action, nothing else.
    DryRun,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::ConditionOnly => "condition_only",
            Self::DryRun => "dry_run",
        }
    }
}

/// The circuit breaker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    NotAsked,
    Granted,
    Denied {
        quarantined: usize,
        limit: usize,
        fleet: usize,
    },
    /// The breaker could not be asked (its ConfigMap cannot be read or written):
    /// nothing new is applied, and the reconcile is retried.
    Unavailable,
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// A Kubernetes Event to write on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub kind: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// What to write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Strategic-merge patch of the Node (metadata and spec), carrying the
    /// `resourceVersion` it was planned from.
    pub node_patch: Option<Value>,
    /// Strategic-merge patch of `nodes/status` (the condition, merged by type).
    pub status_patch: Option<Value>,
    pub events: Vec<EventSpec>,
    /// A new quarantine is wanted: ask the breaker and plan again with its answer.
    pub needs_permit: bool,
    /// The loop owns nothing any more: leave the breaker's count.
    pub owns_nothing: bool,
    /// The node carries the opt-out label: nothing is written.
    pub opted_out: bool,
    /// Actions for the metrics: cordon, uncordon, taint, untaint, condition,
    /// dry_run, blocked, overridden.
    pub actions: Vec<&'static str>,
}

impl Plan {
    pub fn writes_anything(&self) -> bool {
        self.node_patch.is_some() || self.status_patch.is_some() || !self.events.is_empty()
    }
}

/// Plans the writes that bring `node` in line with `verdict`.
pub fn plan(node: &NodeView, verdict: &Verdict, mode: Mode, permit: &Permit, names: &Names, now: SystemTime) -> Plan {
    let mut out = Plan::default();
    if node.labels.get(&names.opt_out_label).map(String::as_str) == Some("true") {
        out.opted_out = true;
        return out;
    }
    if verdict.health == Health::Unknown {
        return out;
    }
    let scene = Scene { node, verdict, mode, permit, names, now };
    let key = if mode == Mode::DryRun { &names.dry_run_annotation } else { &names.state_annotation };
    let old_text = node.annotations.get(key);
    let old = old_text.and_then(|t| Claim::parse(key, t).ok());
    let mut claim = old.clone();
    let mut writes = SpecWrites::default();

    if mode != Mode::DryRun
        && let Some(c) = claim.as_mut()
    {
        notice_overrides(c, node, names, &mut out);
    }

    match verdict.health {
        Health::Unhealthy => match plan_unhealthy(&scene, old.as_ref(), claim.take(), &mut out, &mut writes) {
            Some(c) => claim = Some(c),
            None => return Plan { needs_permit: true, ..Plan::default() },
        },
        Health::Healthy => {
            if let Some(c) = claim.take() {
                plan_lift(&scene, &c, &mut out, &mut writes);
            }
            out.owns_nothing = true;
            if mode != Mode::DryRun {
                plan_condition(&mut out, node, names, "True", "GPUsHealthy", "all GPUs pass the health checks", now);
            }
        }
        Health::Unknown => {}
    }

    if mode == Mode::Enforce {
        out.owns_nothing = claim.as_ref().is_none_or(|c| !c.applied.anything());
    }
    let new_text = claim.as_ref().map(Claim::to_json);
    out.node_patch = node_patch(node, key, new_text.as_ref(), old_text, writes);
    out
}

/// What a plan reads: the Node as found, the verdict, and how the loop may act.
struct Scene<'a> {
    node: &'a NodeView,
    verdict: &'a Verdict,
    mode: Mode,
    permit: &'a Permit,
    names: &'a Names,
    now: SystemTime,
}

/// The spec writes a plan collects; `None` leaves a field alone.
#[derive(Default)]
struct SpecWrites {
    unschedulable: Option<bool>,
    taints: Option<Vec<Taint>>,
}

/// How the Events about an unhealthy node name it.
struct Wording {
    primary: String,
    /// `primary reason <code>`.
    named: String,
    /// Every reason, described.
    reasons: String,
}

/// The unhealthy node: the claim to record, the mode's writes and Events, a
/// `GPUReasonChanged` Event when the primary reason moved and no other Event said
/// so, and the condition. `None`: a new quarantine needs the breaker's permit first.
fn plan_unhealthy(
    s: &Scene,
    old: Option<&Claim>,
    claim: Option<Claim>,
    out: &mut Plan,
    writes: &mut SpecWrites,
) -> Option<Claim> {
    let (node, names, verdict) = (s.node, s.names, s.verdict);
    let primary = verdict.primary_code().to_string();
    let text = Wording { named: format!("primary reason {primary}"), reasons: describe(verdict), primary };
    let previous = old.and_then(|o| policy::primary(&o.reasons)).map(|r| r.code.clone());
    let since = verdict.since.unwrap_or(s.now);
    let mut c = claim.unwrap_or_else(|| Claim {
        // Set by every mode below.
        state: QuarantineState::Unhealthy,
        since,
        reasons: Vec::new(),
        latches: Vec::new(),
        applied: Applied::default(),
        found: Found { unschedulable: node.unschedulable },
        overridden: Overridden::default(),
        blocked: false,
        intended: Vec::new(),
        boot_id: node.boot_id.clone(),
    });
    c.since = since;
    c.reasons = verdict.reasons.clone();
    c.latches = verdict.latches.clone();
    // Whether an Event of this plan already names the primary reason, and the taint
    // value the loop's taint moved from.
    let (told, moved_taint) = match s.mode {
        Mode::DryRun => (plan_dry_run(s, old, &mut c, &text, out), None),
        Mode::ConditionOnly => {
            c.state = QuarantineState::Unhealthy;
            if old.is_none() {
                out.events.push(EventSpec {
                    kind: EventType::Warning,
                    reason: "GPUUnhealthy",
                    message: format!("auto-cordon is off, scheduling left alone; {}; {}", text.named, text.reasons),
                });
            }
            (old.is_none(), None)
        }
        Mode::Enforce => plan_enforce(s, &mut c, &text, out, writes)?,
    };
    let primary = &text.primary;
    let moved = previous.as_ref().is_some_and(|p| p != primary) || moved_taint.is_some();
    if s.mode != Mode::DryRun && moved && !told {
        let was = previous.or(moved_taint.clone()).unwrap_or_default();
        let taint = match &moved_taint {
            Some(_) => format!("; taint {}={primary}:NoSchedule", names.taint_key),
            None => String::new(),
        };
        out.events.push(EventSpec {
            kind: EventType::Warning,
            reason: "GPUReasonChanged",
            message: format!("{} (was {was}){taint}; {}", text.named, text.reasons),
        });
    }
    if s.mode != Mode::DryRun {
        plan_condition(out, node, names, "False", primary, &text.reasons, s.now);
    }
    Some(c)
}

/// Dry-run: record what would be done, and tell when that or the reasons change.
/// Always names the primary reason.
fn plan_dry_run(s: &Scene, old: Option<&Claim>, c: &mut Claim, text: &Wording, out: &mut Plan) -> bool {
    let (node, names, primary) = (s.node, s.names, &text.primary);
    let mut intended = Vec::new();
    if !node.unschedulable {
        intended.push("cordon".to_string());
    }
    if node.taint(&names.taint_key).is_none() {
        intended.push(format!("taint {}={primary}:NoSchedule", names.taint_key));
    }
    intended.push(format!("condition {}=False reason {primary}", names.condition_type));
    let first = old.is_none_or(|o| o.intended != intended);
    c.state = QuarantineState::DryRun;
    c.intended = intended;
    if first || old.is_some_and(|o| o.reasons != c.reasons) {
        out.actions.push("dry_run");
        out.events.push(EventSpec {
            kind: EventType::Normal,
            reason: "GPUQuarantineDryRun",
            message: format!(
                "dry run, nothing changed: would {}; {}; {}",
                c.intended.join(", "),
                text.named,
                text.reasons
            ),
        });
    }
    true
}

/// Enforce: cordon and taint, unless the node already is or someone else undid the
/// loop's, and for a new quarantine only with the breaker's permit. Returns whether
/// an Event named the primary reason and the value the loop's taint moved from;
/// `None` asks for the permit.
fn plan_enforce(
    s: &Scene,
    c: &mut Claim,
    text: &Wording,
    out: &mut Plan,
    writes: &mut SpecWrites,
) -> Option<(bool, Option<String>)> {
    let (node, names, primary) = (s.node, s.names, &text.primary);
    let has_taint = node.taint(&names.taint_key).is_some();
    let mut cordon = !c.applied.cordon && !c.overridden.cordon && !node.unschedulable;
    let mut taint = c.applied.taint.is_none() && !c.overridden.taint && !has_taint;
    let mut told = false;
    if (cordon || taint) && !c.applied.anything() {
        let (allowed, told_blocked) = admit(s.permit, c, text, out)?;
        told = told_blocked;
        cordon &= allowed;
        taint &= allowed;
    }
    let mut done = Vec::new();
    if cordon {
        writes.unschedulable = Some(true);
        c.applied.cordon = true;
        out.actions.push("cordon");
        done.push("cordoned".to_string());
    }
    let mut moved_taint = None;
    if taint {
        let mut list = node.taints.clone();
        list.push(Taint {
            key: names.taint_key.clone(),
            value: Some(primary.clone()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        writes.taints = Some(list);
        c.applied.taint = Some(primary.clone());
        out.actions.push("taint");
        done.push(format!("tainted {}={primary}:NoSchedule", names.taint_key));
    } else if let Some(value) = c.applied.taint.clone().filter(|v| v != primary)
        && has_taint
    {
        // The loop's own taint follows the primary reason.
        writes.taints = Some(retainted(node, names, primary));
        c.applied.taint = Some(primary.clone());
        out.actions.push("taint");
        moved_taint = Some(value);
    }
    if c.found.unschedulable && cordon {
        c.found.unschedulable = false;
    }
    c.state = if c.applied.anything() { QuarantineState::Quarantined } else { QuarantineState::Unhealthy };
    if !done.is_empty() {
        let already = if node.unschedulable && !c.applied.cordon {
            " (the node was already cordoned by someone else; that cordon stays theirs)"
        } else {
            ""
        };
        out.events.push(EventSpec {
            kind: EventType::Warning,
            reason: "GPUQuarantined",
            message: format!("{}{already}; {}; {}", done.join(" and "), text.named, text.reasons),
        });
        told = true;
    }
    Some((told, moved_taint))
}

/// The breaker's answer for a new quarantine: whether it may go ahead, and whether
/// an Event (a refusal) named the primary reason. `None`: not asked yet.
fn admit(permit: &Permit, c: &mut Claim, text: &Wording, out: &mut Plan) -> Option<(bool, bool)> {
    match permit {
        Permit::NotAsked => None,
        Permit::Denied { quarantined, limit, fleet } => {
            let told = !c.blocked;
            if told {
                out.actions.push("blocked");
                out.events.push(EventSpec {
                    kind: EventType::Warning,
                    reason: "GPUQuarantineBlocked",
                    message: format!(
                        "circuit breaker open: {quarantined} of {fleet} GPU nodes are quarantined (limit {limit}); not \
                         cordoning; {}; {}",
                        text.named, text.reasons
                    ),
                });
            }
            c.blocked = true;
            Some((false, told))
        }
        Permit::Unavailable => Some((false, false)),
        Permit::Granted => {
            c.blocked = false;
            Some((true, false))
        }
    }
}

/// The node's taints with the loop's own set to `primary`.
fn retainted(node: &NodeView, names: &Names, primary: &str) -> Vec<Taint> {
    node.taints
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if t.key == names.taint_key {
                t.value = Some(primary.to_string());
            }
            t
        })
        .collect()
}

/// Healthy again: lift what the loop applied (never someone else's cordon) and say
/// so; in dry-run only say what would be lifted.
fn plan_lift(s: &Scene, c: &Claim, out: &mut Plan, writes: &mut SpecWrites) {
    let (node, names) = (s.node, s.names);
    if s.mode == Mode::DryRun {
        out.actions.push("dry_run");
        out.events.push(EventSpec {
            kind: EventType::Normal,
            reason: "GPUQuarantineDryRun",
            message: "dry run, nothing changed: GPUs healthy again, would lift the quarantine".into(),
        });
        return;
    }
    let mut lifted = Vec::new();
    if c.applied.cordon {
        writes.unschedulable = Some(false);
        out.actions.push("uncordon");
        lifted.push("uncordoned".to_string());
    }
    if c.applied.taint.is_some() && node.taint(&names.taint_key).is_some() {
        writes.taints = Some(node.taints.iter().filter(|t| t.key != names.taint_key).cloned().collect());
        out.actions.push("untaint");
        lifted.push(format!("removed taint {}", names.taint_key));
    }
    let kept = if node.unschedulable && !c.applied.cordon {
        "; the node stays cordoned: that cordon is not the health loop's"
    } else {
        ""
    };
    let what = if lifted.is_empty() { "nothing of the loop's left to lift".into() } else { lifted.join(" and ") };
    out.events.push(EventSpec {
        kind: EventType::Normal,
        reason: "GPURecovered",
        message: format!("GPUs pass the health checks again: {what}{kept}"),
    });
}

/// The Node patch: the claim annotation when it changed, and the spec writes, with
/// the `resourceVersion` planned from. `None` when nothing differs.
fn node_patch(
    node: &NodeView,
    key: &str,
    new_text: Option<&String>,
    old_text: Option<&String>,
    writes: SpecWrites,
) -> Option<Value> {
    let annotation_changes = new_text != old_text;
    if !annotation_changes && writes.unschedulable.is_none() && writes.taints.is_none() {
        return None;
    }
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), Value::String(node.resource_version.clone()));
    if annotation_changes {
        let value = new_text.map_or(Value::Null, |t| Value::String(t.clone()));
        metadata.insert("annotations".into(), json!({ key: value }));
    }
    let mut patch = Map::new();
    patch.insert("metadata".into(), Value::Object(metadata));
    let mut spec = Map::new();
    if let Some(u) = writes.unschedulable {
        // `null` removes the field, as `kubectl uncordon` leaves it.
        spec.insert("unschedulable".into(), if u { Value::Bool(true) } else { Value::Null });
    }
    if let Some(t) = writes.taints {
        spec.insert("taints".into(), json!(t));
    }
    if !spec.is_empty() {
        patch.insert("spec".into(), Value::Object(spec));
    }
    Some(Value::Object(patch))
}

fn notice_overrides(c: &mut Claim, node: &NodeView, names: &Names, out: &mut Plan) {
    if c.applied.cordon && !node.cordon_is_ours(&names.field_manager) {
        c.applied.cordon = false;
        c.overridden.cordon = true;
        out.actions.push("overridden");
        let how = if node.unschedulable {
            format!("spec.unschedulable was rewritten by {}", node.unschedulable_managers.join(", "))
        } else {
            "the node was uncordoned".to_string()
        };
        out.events.push(EventSpec {
            kind: EventType::Normal,
            reason: "GPUQuarantineOverridden",
            message: format!("{how} by someone else; the health loop lets go of its cordon and will not cordon again"),
        });
    }
    if c.applied.taint.is_some() && node.taint(&names.taint_key).is_none() {
        c.applied.taint = None;
        c.overridden.taint = true;
        out.actions.push("overridden");
        out.events.push(EventSpec {
            kind: EventType::Normal,
            reason: "GPUQuarantineOverridden",
            message: format!(
                "taint {} was removed by someone else; the health loop will not taint again",
                names.taint_key
            ),
        });
    }
}

fn describe(verdict: &Verdict) -> String {
    let parts: Vec<String> = verdict.reasons.iter().map(|r| r.describe()).collect();
    if parts.is_empty() { "GPUs unhealthy".into() } else { parts.join("; ") }
}

fn plan_condition(
    out: &mut Plan,
    node: &NodeView,
    names: &Names,
    status: &str,
    reason: &str,
    message: &str,
    now: SystemTime,
) {
    let same =
        node.condition.as_ref().is_some_and(|c| c.status == status && c.reason == reason && c.message == message);
    if same {
        return;
    }
    let now_text = crate::time::format(now);
    let transition = node
        .condition
        .as_ref()
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now_text.clone());
    out.actions.push("condition");
    out.status_patch = Some(json!({
        "status": {
            "conditions": [{
                "type": names.condition_type,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now_text,
                "lastTransitionTime": transition,
            }]
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_state::ConditionView;
    use crate::policy::{Needs, Reason};
    use std::time::{Duration, UNIX_EPOCH};

    fn names() -> Names {
        Names::new("gpu-telemetry.io")
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_714_564_800)
    }

    fn sick() -> Verdict {
        Verdict {
            health: Health::Unhealthy,
            since: Some(now()),
            reasons: vec![Reason {
                gpu: Some(0),
                uuid: "GPU-a".into(),
                code: "Xid79".into(),
                detail: "XID 79: GPU has fallen off the bus".into(),
                needs: Needs::Reset,
                first_seen: None,
            }],
            latches: vec![],
            pending: vec![],
            notes: vec![],
            changed: true,
        }
    }

    fn well() -> Verdict {
        Verdict { health: Health::Healthy, since: None, reasons: vec![], ..sick() }
    }

    fn node() -> NodeView {
        NodeView {
            name: "gpu-1".into(),
            uid: "u1".into(),
            resource_version: "7".into(),
            boot_id: "boot-1".into(),
            taints: vec![Taint { key: "other".into(), effect: "NoExecute".into(), ..Taint::default() }],
            ..NodeView::default()
        }
    }

    /// Applies a planned node patch the way the API server would (enough for these tests).
    fn apply(node: &NodeView, p: &Plan) -> NodeView {
        let mut n = node.clone();
        n.resource_version = format!("{}0", n.resource_version);
        if let Some(patch) = &p.node_patch {
            if let Some(ann) = patch["metadata"]["annotations"].as_object() {
                for (k, v) in ann {
                    match v.as_str() {
                        Some(s) => n.annotations.insert(k.clone(), s.to_string()),
                        None => n.annotations.remove(k),
                    };
                }
            }
            match patch["spec"].get("unschedulable") {
                Some(Value::Bool(b)) => n.unschedulable = *b,
                Some(Value::Null) => n.unschedulable = false,
                _ => {}
            }
            if let Some(t) = patch["spec"].get("taints") {
                n.taints = serde_json::from_value(t.clone()).unwrap();
            }
        }
        if let Some(s) = &p.status_patch {
            let c = &s["status"]["conditions"][0];
            n.condition = Some(ConditionView {
                status: c["status"].as_str().unwrap().into(),
                reason: c["reason"].as_str().unwrap().into(),
                message: c["message"].as_str().unwrap().into(),
                last_transition_time: c["lastTransitionTime"].as_str().map(String::from),
            });
        }
        n
    }

    fn claim(n: &NodeView) -> Claim {
        Claim::parse("k", &n.annotations["gpu-telemetry.io/gpu-health"]).unwrap()
    }

    #[test]
    fn a_new_quarantine_asks_the_breaker_first() {
        let p = plan(&node(), &sick(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(p.needs_permit);
        assert!(!p.writes_anything());
    }

    #[test]
    fn quarantine_cordons_taints_and_records_keeping_other_taints() {
        let p = plan(&node(), &sick(), Mode::Enforce, &Permit::Granted, &names(), now());
        let patch = p.node_patch.as_ref().unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["spec"]["unschedulable"], true);
        assert_eq!(
            patch["spec"]["taints"],
            json!([{"key": "other", "effect": "NoExecute"},
                   {"key": "gpu-telemetry.io/gpu-unhealthy", "value": "Xid79", "effect": "NoSchedule"}])
        );
        let status = p.status_patch.as_ref().unwrap();
        assert_eq!(status["status"]["conditions"][0]["type"], "GPUHealthy");
        assert_eq!(status["status"]["conditions"][0]["status"], "False");
        assert_eq!(status["status"]["conditions"][0]["reason"], "Xid79");
        assert_eq!(p.events[0].reason, "GPUQuarantined");
        assert_eq!(p.actions, vec!["cordon", "taint", "condition"]);
        let after = apply(&node(), &p);
        let c = claim(&after);
        assert_eq!(c.state, QuarantineState::Quarantined);
        assert_eq!(c.applied, Applied { cordon: true, taint: Some("Xid79".into()) });
        assert_eq!(c.boot_id, "boot-1");
        // The same verdict again plans nothing: no duplicated action.
        let again = plan(&after, &sick(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(!again.writes_anything(), "{again:?}");
        assert!(!again.needs_permit);
    }

    #[test]
    fn recovery_lifts_only_what_the_loop_applied() {
        let q = apply(&node(), &plan(&node(), &sick(), Mode::Enforce, &Permit::Granted, &names(), now()));
        let p = plan(&q, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        let patch = p.node_patch.as_ref().unwrap();
        assert_eq!(patch["spec"]["unschedulable"], Value::Null);
        assert_eq!(patch["spec"]["taints"], json!([{"key": "other", "effect": "NoExecute"}]));
        assert_eq!(patch["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"], Value::Null);
        assert!(p.owns_nothing);
        assert_eq!(p.status_patch.as_ref().unwrap()["status"]["conditions"][0]["status"], "True");
        let after = apply(&q, &p);
        assert!(!after.unschedulable);
        assert!(!plan(&after, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now()).writes_anything());
    }

    #[test]
    fn a_node_cordoned_by_someone_else_is_never_uncordoned() {
        let mut admin = node();
        admin.unschedulable = true;
        admin.unschedulable_managers = vec!["kubectl-cordon".into()];
        let p = plan(&admin, &sick(), Mode::Enforce, &Permit::Granted, &names(), now());
        let patch = p.node_patch.as_ref().unwrap();
        assert!(patch["spec"].get("unschedulable").is_none(), "{patch}");
        assert!(patch["spec"]["taints"].is_array());
        assert!(p.events[0].message.contains("already cordoned by someone else"), "{:?}", p.events);
        let q = apply(&admin, &p);
        let c = claim(&q);
        assert!(c.found.unschedulable);
        assert!(!c.applied.cordon);
        let r = plan(&q, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        let patch = r.node_patch.as_ref().unwrap();
        assert!(patch["spec"].get("unschedulable").is_none(), "{patch}");
        assert!(r.events[0].message.contains("stays cordoned"), "{:?}", r.events);
        assert!(apply(&q, &r).unschedulable);
    }

    #[test]
    fn a_cordon_rewritten_by_someone_else_during_quarantine_is_theirs() {
        let mut q = apply(&node(), &plan(&node(), &sick(), Mode::Enforce, &Permit::Granted, &names(), now()));
        q.unschedulable_managers = vec!["kubectl-cordon".into()];
        let p = plan(&q, &sick(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert_eq!(p.actions, vec!["overridden"]);
        let q = apply(&q, &p);
        assert!(claim(&q).overridden.cordon);
        let r = plan(&q, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(r.node_patch.as_ref().unwrap()["spec"].get("unschedulable").is_none());
        assert!(apply(&q, &r).unschedulable);
    }

    #[test]
    fn an_admin_who_lifts_the_cordon_is_not_fought() {
        let mut q = apply(&node(), &plan(&node(), &sick(), Mode::Enforce, &Permit::Granted, &names(), now()));
        q.unschedulable = false;
        let p = plan(&q, &sick(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(!p.needs_permit, "still owns the taint; no new quarantine");
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none(), "no cordon again");
        assert_eq!(p.events[0].reason, "GPUQuarantineOverridden");
        let q = apply(&q, &p);
        let c = claim(&q);
        assert_eq!((c.applied.cordon, c.overridden.cordon), (false, true));
        assert!(!plan(&q, &sick(), Mode::Enforce, &Permit::NotAsked, &names(), now()).writes_anything());
    }

    #[test]
    fn the_breaker_blocks_with_one_event_and_the_condition_still_tells() {
        let denied = Permit::Denied { quarantined: 2, limit: 2, fleet: 20 };
        let p = plan(&node(), &sick(), Mode::Enforce, &denied, &names(), now());
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none());
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].reason, "GPUQuarantineBlocked");
        assert!(p.events[0].message.contains("2 of 20 GPU nodes"), "{}", p.events[0].message);
        assert!(p.status_patch.is_some());
        let q = apply(&node(), &p);
        assert!(claim(&q).blocked);
        let again = plan(&q, &sick(), Mode::Enforce, &denied, &names(), now());
        assert!(!again.writes_anything(), "blocked once, told once");
        let granted = plan(&q, &sick(), Mode::Enforce, &Permit::Granted, &names(), now());
        assert_eq!(granted.actions, vec!["cordon", "taint"]);
    }

    #[test]
    fn without_the_breaker_nothing_is_applied_but_the_condition_tells() {
        let p = plan(&node(), &sick(), Mode::Enforce, &Permit::Unavailable, &names(), now());
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none());
        assert!(p.events.is_empty());
        assert_eq!(p.actions, vec!["condition"]);
        let q = apply(&node(), &p);
        assert_eq!(claim(&q).state, QuarantineState::Unhealthy);
        assert!(!claim(&q).blocked);
    }

    #[test]
    fn dry_run_writes_only_its_annotation_and_an_event() {
        let p = plan(&node(), &sick(), Mode::DryRun, &Permit::NotAsked, &names(), now());
        assert!(!p.needs_permit);
        assert!(p.status_patch.is_none());
        let patch = p.node_patch.as_ref().unwrap();
        assert!(patch.get("spec").is_none());
        let ann = patch["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(ann.keys().collect::<Vec<_>>(), vec!["gpu-telemetry.io/gpu-health-dry-run"]);
        assert!(p.events[0].message.contains("would cordon, taint gpu-telemetry.io/gpu-unhealthy=Xid79:NoSchedule"));
        let q = apply(&node(), &p);
        assert!(!plan(&q, &sick(), Mode::DryRun, &Permit::NotAsked, &names(), now()).writes_anything());
    }

    #[test]
    fn condition_only_leaves_scheduling_alone() {
        let p = plan(&node(), &sick(), Mode::ConditionOnly, &Permit::NotAsked, &names(), now());
        assert!(!p.needs_permit);
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none());
        assert!(p.status_patch.is_some());
        assert_eq!(p.events[0].reason, "GPUUnhealthy");
    }

    #[test]
    fn an_opted_out_node_is_left_alone() {
        let mut n = node();
        n.labels.insert("gpu-telemetry.io/gpu-health-opt-out".into(), "true".into());
        let p = plan(&n, &sick(), Mode::Enforce, &Permit::Granted, &names(), now());
        assert!(p.opted_out);
        assert!(!p.writes_anything());
    }

    #[test]
    fn a_healthy_node_gets_its_condition_once() {
        let p = plan(&node(), &well(), Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(p.node_patch.is_none());
        assert_eq!(p.status_patch.as_ref().unwrap()["status"]["conditions"][0]["reason"], "GPUsHealthy");
        let n = apply(&node(), &p);
        assert!(!plan(&n, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now()).writes_anything());
        let unknown = Verdict { health: Health::Unknown, ..well() };
        assert!(!plan(&node(), &unknown, Mode::Enforce, &Permit::NotAsked, &names(), now()).writes_anything());
    }

    fn reason(code: &str, needs: Needs, seen: u64) -> Reason {
        Reason {
            gpu: Some(0),
            uuid: "GPU-a".into(),
            code: code.into(),
            detail: format!("{code} seen"),
            needs,
            first_seen: Some(now() + Duration::from_secs(seen)),
        }
    }

    fn unhealthy(reasons: Vec<Reason>) -> Verdict {
        let mut reasons = reasons;
        reasons.sort_by(crate::policy::primary_order);
        Verdict { reasons, ..sick() }
    }

    fn our_taint(n: &NodeView) -> Option<String> {
        n.taint("gpu-telemetry.io/gpu-unhealthy").and_then(|t| t.value.clone())
    }

    /// The primary reason each Event of `p` names.
    fn named(p: &Plan) -> Vec<String> {
        p.events
            .iter()
            .filter_map(|e| e.message.split("primary reason ").nth(1))
            .map(|rest| rest.split([';', ' ']).next().unwrap_or("").to_string())
            .collect()
    }

    #[test]
    fn taint_condition_and_events_name_one_primary_reason_and_move_together() {
        let lost = reason("GpuLost", Needs::Nothing, 0);
        let ecc = reason("EccUncorrected", Needs::Nothing, 5);
        let xid = reason("Xid79", Needs::Reset, 9);
        let p = plan(&node(), &unhealthy(vec![lost.clone()]), Mode::Enforce, &Permit::Granted, &names(), now());
        assert_eq!(named(&p), vec!["GpuLost"]);
        let q = apply(&node(), &p);
        assert_eq!(our_taint(&q).as_deref(), Some("GpuLost"));
        assert_eq!(q.condition.as_ref().unwrap().reason, "GpuLost");

        // A fatal reason of the same rank joins later: nothing moves (its code sorts first).
        let v = unhealthy(vec![lost.clone(), ecc.clone()]);
        assert_eq!(v.primary_code(), "GpuLost");
        let p = plan(&q, &v, Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none(), "taint untouched: {p:?}");
        assert!(p.events.is_empty(), "{:?}", p.events);
        let q = apply(&q, &p);
        assert_eq!(q.condition.as_ref().unwrap().reason, "GpuLost");

        // A reason that needs a reset joins: taint, condition and an Event move together.
        let v = unhealthy(vec![lost.clone(), ecc.clone(), xid.clone()]);
        let p = plan(&q, &v, Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert!(!p.needs_permit, "a quarantine in place is not a new one");
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].reason, "GPUReasonChanged");
        assert!(p.events[0].message.contains("(was GpuLost)"), "{}", p.events[0].message);
        assert_eq!(named(&p), vec!["Xid79"]);
        assert_eq!(p.actions, vec!["taint", "condition"]);
        let r = apply(&q, &p);
        assert_eq!(our_taint(&r).as_deref(), Some("Xid79"));
        assert!(r.taint("other").is_some(), "other taints kept");
        assert_eq!(r.condition.as_ref().unwrap().reason, "Xid79");
        assert_eq!(claim(&r).applied.taint.as_deref(), Some("Xid79"));
        assert!(!plan(&r, &v, Mode::Enforce, &Permit::NotAsked, &names(), now()).writes_anything());

        // The primary reason clears: the next one takes over, all three again.
        let v = unhealthy(vec![ecc.clone(), lost.clone()]);
        let p = plan(&r, &v, Mode::Enforce, &Permit::NotAsked, &names(), now());
        assert_eq!(named(&p), vec!["GpuLost"]);
        let r = apply(&r, &p);
        assert_eq!(our_taint(&r).as_deref(), Some("GpuLost"));
        assert_eq!(r.condition.as_ref().unwrap().reason, "GpuLost");
    }

    #[test]
    fn a_blocked_node_moves_its_condition_and_tells_but_taints_nothing() {
        let denied = Permit::Denied { quarantined: 2, limit: 2, fleet: 20 };
        let lost = reason("GpuLost", Needs::Nothing, 0);
        let xid = reason("Xid79", Needs::Reset, 9);
        let p = plan(&node(), &unhealthy(vec![lost.clone()]), Mode::Enforce, &denied, &names(), now());
        assert_eq!(named(&p), vec!["GpuLost"]);
        let q = apply(&node(), &p);
        let p = plan(&q, &unhealthy(vec![lost, xid]), Mode::Enforce, &denied, &names(), now());
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none());
        assert_eq!(p.events.iter().map(|e| e.reason).collect::<Vec<_>>(), vec!["GPUReasonChanged"]);
        assert_eq!(named(&p), vec!["Xid79"]);
        assert_eq!(apply(&q, &p).condition.unwrap().reason, "Xid79");
    }

    #[test]
    fn a_status_that_stays_keeps_its_transition_time() {
        let mut n = node();
        n.condition = Some(ConditionView {
            status: "False".into(),
            reason: "Temperature".into(),
            message: "old".into(),
            last_transition_time: Some("2024-01-01T00:00:00Z".into()),
        });
        let p = plan(&n, &sick(), Mode::ConditionOnly, &Permit::NotAsked, &names(), now());
        let c = &p.status_patch.as_ref().unwrap()["status"]["conditions"][0];
        assert_eq!(c["lastTransitionTime"], "2024-01-01T00:00:00Z");
        assert_eq!(c["lastHeartbeatTime"], "2024-05-01T12:00:00Z");
    }
}
