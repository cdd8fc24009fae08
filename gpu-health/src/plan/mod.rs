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
//! - One primary reason ([`verdict::primary`]: most severe, then first seen) is the
//!   taint's value, the condition's reason and the `primary reason` every Event about
//!   the unhealthy node names. When it moves (a more severe reason joins, or the
//!   primary one clears), the taint the loop owns, the condition and a
//!   `GPUReasonChanged` Event move with it in the same reconcile.
//! - Where the verdict holds only GPUs ([`Verdict::holds_node`] false), the node is not
//!   cordoned or tainted: each held GPU gets DeviceTaintRules ([`gpus`]), and a node the
//!   loop had held as a whole is released (`GPUQuarantineNarrowed`) once every held GPU
//!   is held by its own rules. The condition says which: the GPUs held on their own, or
//!   why the whole node is (a device plugin, a node-wide signal, too many GPUs).

mod gpus;

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::api::resource::v1::DeviceTaintRule;
use serde_json::{Map, Value, json};

use crate::device_rules::{Effect, RuleView};
use crate::names::Names;
use crate::node_state::{Applied, Claim, Found, NodeView, QuarantineState};
use crate::verdict::{self, Health, Verdict};

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Permit {
    #[default]
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

/// A write of one of the loop's DeviceTaintRules.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleWrite {
    Create(Box<DeviceTaintRule>),
    /// Set the taint's value (the GPU's primary reason moved), if the rule is still the
    /// version read.
    SetValue {
        name: String,
        resource_version: String,
        value: String,
    },
    /// Delete the rule, if it is still the object and version read.
    Delete {
        name: String,
        uid: String,
        resource_version: String,
    },
}

/// What a plan reads about device taints.
#[derive(Debug, Clone, Default)]
pub struct Devices<'a> {
    /// The loop's rules for this node as listed; `None`: not listed (no device taints
    /// served, or the listing failed): nothing is planned for them.
    pub rules: Option<&'a [RuleView]>,
    /// The GPU breaker's answer for the GPUs that want a new place.
    pub permit: Permit,
    pub effect: Effect,
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
    /// Actions for the metrics: cordon, uncordon, taint, untaint, device_taint,
    /// device_untaint, condition, dry_run, blocked, overridden.
    pub actions: Vec<&'static str>,
    /// DeviceTaintRule writes: the loop sends creates and value changes before the node
    /// patch (a GPU is held before the claim says so, and before a cordon is lifted) and
    /// deletes after it (the claim lets go first, so a restart in between finds no
    /// rule the claim names and calls it deleted by someone else).
    pub rules: Vec<RuleWrite>,
    /// GPUs (UUIDs) that want a new place in the GPU breaker: ask, and plan again.
    pub needs_gpu_permit: Vec<String>,
    /// GPUs (UUIDs) that hold rules once this plan is written: the GPU breaker keeps
    /// their places and gives back this node's others.
    pub gpus_owned: Vec<String>,
    /// The rules were not listed but are needed (a GPU to hold or to release): nothing
    /// is done to them; the reconcile is retried.
    pub rules_unknown: bool,
    /// A rule the claim names was not in the listing: deleted by someone else, or a
    /// cached listing behind. The loop lists again, fresh, before it believes it.
    pub rules_missing: bool,
}

impl Plan {
    pub fn writes_anything(&self) -> bool {
        self.node_patch.is_some() || self.status_patch.is_some() || !self.events.is_empty() || !self.rules.is_empty()
    }
}

/// Plans the writes that bring `node` in line with `verdict`, for a node without device
/// taints (see [`plan_with`]).
pub fn plan(node: &NodeView, verdict: &Verdict, mode: Mode, permit: &Permit, names: &Names, now: SystemTime) -> Plan {
    plan_with(node, verdict, mode, permit, names, now, &Devices::default())
}

/// Plans the writes that bring `node` and the loop's DeviceTaintRules in line with
/// `verdict`.
pub fn plan_with(
    node: &NodeView,
    verdict: &Verdict,
    mode: Mode,
    permit: &Permit,
    names: &Names,
    now: SystemTime,
    devices: &Devices,
) -> Plan {
    let mut out = Plan::default();
    if node.labels.get(&names.opt_out_label).map(String::as_str) == Some("true") {
        out.opted_out = true;
        return out;
    }
    if verdict.health == Health::Unknown {
        return out;
    }
    let scene = Scene { node, verdict, mode, permit, names, now, devices };
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
            Ok(c) => claim = Some(c),
            Err(Wait::NodePermit) => return Plan { needs_permit: true, ..Plan::default() },
            Err(Wait::GpuPermit(uuids)) => return Plan { needs_gpu_permit: uuids, ..Plan::default() },
        },
        Health::Healthy => {
            let mut gpus = claim.as_ref().map(|c| c.gpus.clone()).unwrap_or_default();
            let lifted = if mode == Mode::DryRun {
                Vec::new()
            } else {
                gpus::plan_gpus(&scene, &mut gpus, None, &mut out).map(|o| o.lifted).unwrap_or_default()
            };
            if out.rules_unknown {
                return Plan { rules_unknown: true, ..Plan::default() };
            }
            if let Some(c) = claim.take() {
                plan_lift(&scene, &c, &mut out, &mut writes, &lifted);
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
    // A dry run's record outlives its mode otherwise: once the loop acts or only
    // reports, `kubectl gpu nodes` would go on showing what a dry run once intended.
    let stale_dry_run = (mode != Mode::DryRun && node.annotations.contains_key(&names.dry_run_annotation))
        .then_some(names.dry_run_annotation.as_str());
    let annotations = AnnotationWrites { key, new_text: new_text.as_ref(), old_text, stale: stale_dry_run };
    out.node_patch = node_patch(node, annotations, writes);
    out
}

/// The loop's annotations as a plan leaves them: its record under `key` (written,
/// changed or removed), and the record of another mode (`stale`), removed.
struct AnnotationWrites<'a> {
    key: &'a str,
    new_text: Option<&'a String>,
    old_text: Option<&'a String>,
    stale: Option<&'a str>,
}

/// What a plan reads: the Node as found, the verdict, and how the loop may act.
struct Scene<'a> {
    node: &'a NodeView,
    verdict: &'a Verdict,
    mode: Mode,
    permit: &'a Permit,
    names: &'a Names,
    now: SystemTime,
    devices: &'a Devices<'a>,
}

/// A plan that cannot be made yet: a breaker must be asked first.
enum Wait {
    NodePermit,
    /// The GPUs (UUIDs) that want places.
    GpuPermit(Vec<String>),
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
/// so, and the condition. `Err`: a breaker must be asked first.
fn plan_unhealthy(
    s: &Scene,
    old: Option<&Claim>,
    claim: Option<Claim>,
    out: &mut Plan,
    writes: &mut SpecWrites,
) -> Result<Claim, Wait> {
    let (node, names, verdict) = (s.node, s.names, s.verdict);
    let primary = verdict.primary_code().to_string();
    let text = Wording { named: format!("primary reason {primary}"), reasons: describe(verdict), primary };
    let previous = old.and_then(|o| verdict::primary(&o.reasons)).map(|r| r.code.clone());
    let mut c = claim.unwrap_or_else(|| new_claim(s));
    c.since = verdict.since.unwrap_or(s.now);
    c.reasons = verdict.reasons.clone();
    c.latches = verdict.latches.clone();
    c.node_scope = verdict.node_scope.clone();
    // Whether an Event of this plan already names the primary reason, and the taint
    // value the loop's taint moved from.
    let (told, moved_taint) = plan_mode(s, old, &mut c, &text, out, writes)?;
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
        plan_condition(out, node, names, "False", primary, &condition_message(s, &text), s.now);
    }
    Ok(c)
}

/// A claim for a node the loop has not recorded anything on yet.
fn new_claim(s: &Scene) -> Claim {
    // Every mode sets the state it records.
    let since = s.verdict.since.unwrap_or(s.now);
    Claim {
        found: Found { unschedulable: s.node.unschedulable },
        ..Claim::new(QuarantineState::Unhealthy, since, &s.node.boot_id)
    }
}

/// The mode's writes and Events: whether an Event named the primary reason, and the
/// value the loop's node taint moved from.
fn plan_mode(
    s: &Scene,
    old: Option<&Claim>,
    c: &mut Claim,
    text: &Wording,
    out: &mut Plan,
    writes: &mut SpecWrites,
) -> Result<(bool, Option<String>), Wait> {
    match s.mode {
        Mode::DryRun => {
            gpus::record(&mut c.gpus, &s.verdict.gpus);
            Ok((plan_dry_run(s, old, c, text, out), None))
        }
        Mode::ConditionOnly => {
            let outcome = gpus::plan_gpus(s, &mut c.gpus, Some(text), out).unwrap_or_default();
            recovered_gpus(&outcome.lifted, out);
            c.state = state_of(c);
            if old.is_none() {
                out.events.push(EventSpec {
                    kind: EventType::Warning,
                    reason: "GPUUnhealthy",
                    message: format!("auto-cordon is off, scheduling left alone; {}; {}", text.named, text.reasons),
                });
            }
            Ok((old.is_none(), None))
        }
        Mode::Enforce => {
            let Some(outcome) = gpus::plan_gpus(s, &mut c.gpus, Some(text), out) else {
                return Err(Wait::GpuPermit(out.needs_gpu_permit.clone()));
            };
            let (told, moved) = if s.verdict.holds_node() {
                plan_enforce(s, c, text, out, writes).ok_or(Wait::NodePermit)?
            } else {
                (plan_narrow(s, c, text, out, writes), None)
            };
            recovered_gpus(&outcome.lifted, out);
            c.state = state_of(c);
            Ok((told || outcome.told, moved))
        }
    }
}

/// The claim's state from what it holds.
fn state_of(c: &Claim) -> QuarantineState {
    if c.applied.anything() {
        QuarantineState::Quarantined
    } else if c.gpus.iter().any(|g| !g.rules.is_empty()) {
        QuarantineState::GpusQuarantined
    } else {
        QuarantineState::Unhealthy
    }
}

/// One `GPURecovered` Event per GPU whose device taints were lifted while others stay held.
fn recovered_gpus(lifted: &[String], out: &mut Plan) {
    for what in lifted {
        out.events.push(EventSpec {
            kind: EventType::Normal,
            reason: "GPURecovered",
            message: format!("passes the health checks again: {what}; the node's other held GPUs stay held"),
        });
    }
}

/// Only GPUs are held now: a node the loop had held as a whole is released (its cordon
/// and taint lifted), once every held GPU is held by its own rules (or an admin took
/// them off). Returns whether an Event named the primary reason.
fn plan_narrow(s: &Scene, c: &mut Claim, text: &Wording, out: &mut Plan, writes: &mut SpecWrites) -> bool {
    if !c.applied.anything() {
        return false;
    }
    let ready = s.verdict.gpus.iter().all(|h| c.gpu(&h.uuid).is_some_and(|g| !g.rules.is_empty() || g.overridden));
    if !ready {
        return false;
    }
    let (node, names) = (s.node, s.names);
    let lifted = lift_node_actions(c, node, names, writes, out);
    c.applied = Applied::default();
    let held: Vec<String> = s.verdict.gpus.iter().map(|g| format!("GPU {} ({})", g.index, g.uuid)).collect();
    out.events.push(EventSpec {
        kind: EventType::Normal,
        reason: "GPUQuarantineNarrowed",
        message: format!(
            "the fault is down to {}, held by device taints: {}; {}; {}",
            held.join(", "),
            if lifted.is_empty() { "nothing of the loop's left to lift".to_string() } else { lifted.join(" and ") },
            text.named,
            text.reasons
        ),
    });
    true
}

/// The condition's message: the reasons, after what is held: only the named GPUs, or
/// the whole node and why.
fn condition_message(s: &Scene, text: &Wording) -> String {
    match &s.verdict.node_scope {
        Some(why) => format!("the whole node is held: {why}; {}", text.reasons),
        None if s.verdict.gpus.is_empty() => text.reasons.clone(),
        None => {
            let held: Vec<String> = s.verdict.gpus.iter().map(|g| format!("GPU {} ({})", g.index, g.uuid)).collect();
            let how = if s.mode == Mode::Enforce {
                "by device taints"
            } else {
                "(device taints are not applied in this mode)"
            };
            format!("only {} held, {how}; the node stays schedulable; {}", held.join(", "), text.reasons)
        }
    }
}

/// Dry-run: record what would be done, and tell when that or the reasons change.
/// Always names the primary reason.
fn plan_dry_run(s: &Scene, old: Option<&Claim>, c: &mut Claim, text: &Wording, out: &mut Plan) -> bool {
    let (node, names, primary) = (s.node, s.names, &text.primary);
    let mut intended = Vec::new();
    if !s.verdict.holds_node() {
        for g in &s.verdict.gpus {
            let effect = s.devices.effect.as_str();
            intended.push(format!(
                "device-taint GPU {} ({}) {}={}:{effect}",
                g.index,
                g.uuid,
                names.taint_key,
                g.primary_code()
            ));
        }
    } else {
        if !node.unschedulable {
            intended.push("cordon".to_string());
        }
        if node.taint(&names.taint_key).is_none() {
            intended.push(format!("taint {}={primary}:NoSchedule", names.taint_key));
        }
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
fn plan_lift(s: &Scene, c: &Claim, out: &mut Plan, writes: &mut SpecWrites, gpus_lifted: &[String]) {
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
    let mut lifted = lift_node_actions(c, node, names, writes, out);
    lifted.extend(gpus_lifted.iter().cloned());
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
fn node_patch(node: &NodeView, a: AnnotationWrites, writes: SpecWrites) -> Option<Value> {
    let mut annotations = Map::new();
    if a.new_text != a.old_text {
        annotations.insert(a.key.into(), a.new_text.map_or(Value::Null, |t| Value::String(t.clone())));
    }
    if let Some(stale) = a.stale {
        annotations.insert(stale.into(), Value::Null);
    }
    if annotations.is_empty() && writes.unschedulable.is_none() && writes.taints.is_none() {
        return None;
    }
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), Value::String(node.resource_version.clone()));
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
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

/// Plans lifting what the claim says the loop applied to the Node (its cordon, its
/// taint while the Node still has it); returns what was lifted, in Event words.
fn lift_node_actions(
    c: &Claim,
    node: &NodeView,
    names: &Names,
    writes: &mut SpecWrites,
    out: &mut Plan,
) -> Vec<String> {
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
    lifted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_rules;
    use crate::node_state::ConditionView;
    use crate::verdict::{Needs, Reason};
    use std::time::{Duration, UNIX_EPOCH};

    fn names() -> Names {
        Names::new("gpu-telemetry.io")
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_714_564_800)
    }

    fn sick() -> Verdict {
        crate::fixtures::unhealthy(now())
    }

    fn well() -> Verdict {
        crate::fixtures::healthy()
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
    fn the_dry_run_record_goes_once_the_loop_acts_or_the_node_recovers() {
        let dry = apply(&node(), &plan(&node(), &sick(), Mode::DryRun, &Permit::NotAsked, &names(), now()));
        let dry_key = "gpu-telemetry.io/gpu-health-dry-run";
        assert!(dry.annotations.contains_key(dry_key));
        // Enforcement turned on while the GPU is still sick: the quarantine's own record
        // replaces the dry run's in the same write.
        let p = plan(&dry, &sick(), Mode::Enforce, &Permit::Granted, &names(), now());
        let ann = &p.node_patch.as_ref().unwrap()["metadata"]["annotations"];
        assert_eq!(ann[dry_key], Value::Null, "{ann}");
        assert!(ann["gpu-telemetry.io/gpu-health"].is_string(), "{ann}");
        let q = apply(&dry, &p);
        assert!(!q.annotations.contains_key(dry_key));
        assert!(plan(&q, &sick(), Mode::Enforce, &Permit::NotAsked, &names(), now()).node_patch.is_none());
        // Enforcement turned on after the node recovered, and condition-only mode: the
        // record goes and nothing else is written to the Node.
        for mode in [Mode::Enforce, Mode::ConditionOnly] {
            let p = plan(&dry, &well(), mode, &Permit::NotAsked, &names(), now());
            let patch = p.node_patch.as_ref().unwrap();
            assert_eq!(patch["metadata"]["annotations"].as_object().unwrap().len(), 1, "{patch}");
            assert_eq!(patch["metadata"]["annotations"][dry_key], Value::Null);
            assert!(patch.get("spec").is_none(), "{patch}");
            assert!(!apply(&dry, &p).annotations.contains_key(dry_key));
        }
        // The dry run itself drops its record when the node recovers.
        let p = plan(&dry, &well(), Mode::DryRun, &Permit::NotAsked, &names(), now());
        assert_eq!(p.node_patch.as_ref().unwrap()["metadata"]["annotations"][dry_key], Value::Null);
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
        reasons.sort_by(crate::verdict::primary_order);
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

    // ---- GPUs held on their own: DeviceTaintRules ------------------------------------

    use crate::device_rules::read_rule;
    use crate::observation::DraDevice;
    use crate::verdict::HeldGpu;

    fn dev(i: u32) -> DraDevice {
        DraDevice { driver: "gpu.nvidia.com".into(), pool: "gpu-1".into(), device: format!("gpu-{i}") }
    }

    fn gpu_reason(i: u32, code: &str) -> Reason {
        Reason {
            gpu: Some(i),
            uuid: format!("GPU-{i}"),
            code: code.into(),
            detail: format!("{code} seen"),
            needs: Needs::Reset,
            first_seen: Some(now()),
        }
    }

    /// GPUs `held` held with XID 79 each; the whole node when `scope` says why.
    fn holding(held: &[u32], scope: Option<&str>) -> Verdict {
        let gpus: Vec<HeldGpu> = held
            .iter()
            .map(|i| HeldGpu {
                index: *i,
                uuid: format!("GPU-{i}"),
                since: now(),
                reasons: vec![gpu_reason(*i, "Xid79")],
                devices: vec![dev(*i)],
            })
            .collect();
        let reasons = gpus.iter().flat_map(|g| g.reasons.clone()).collect();
        Verdict { reasons, gpus, node_scope: scope.map(String::from), ..sick() }
    }

    /// The rules after `p` is written.
    fn rules_after(before: &[RuleView], p: &Plan) -> Vec<RuleView> {
        let mut rules = before.to_vec();
        for w in &p.rules {
            match w {
                RuleWrite::Create(rule) => {
                    let mut rule = (**rule).clone();
                    rule.metadata.uid = Some(format!("uid-{}", rule.metadata.name.clone().unwrap()));
                    rule.metadata.resource_version = Some("1".into());
                    rules.push(read_rule(&rule, &names(), "gpu-1").unwrap());
                }
                RuleWrite::SetValue { name, value, .. } => {
                    rules.iter_mut().filter(|r| &r.name == name).for_each(|r| r.value = value.clone());
                }
                RuleWrite::Delete { name, .. } => rules.retain(|r| &r.name != name),
            }
        }
        rules
    }

    fn with_rules<'a>(rules: &'a [RuleView], permit: Permit) -> Devices<'a> {
        Devices { rules: Some(rules), permit, effect: Effect::NoSchedule }
    }

    fn gpu_plan(n: &NodeView, v: &Verdict, rules: &[RuleView], gpu_permit: Permit) -> Plan {
        plan_with(n, v, Mode::Enforce, &Permit::NotAsked, &names(), now(), &with_rules(rules, gpu_permit))
    }

    #[test]
    fn one_gpu_is_held_by_a_device_taint_and_the_node_stays_schedulable() {
        let v = holding(&[3], None);
        let first = gpu_plan(&node(), &v, &[], Permit::NotAsked);
        assert_eq!(first.needs_gpu_permit, vec!["GPU-3".to_string()], "asks the GPU breaker first");
        assert!(!first.needs_permit, "not the node breaker");
        assert!(!first.writes_anything());
        let p = gpu_plan(&node(), &v, &[], Permit::Granted);
        assert_eq!(p.rules.len(), 1);
        let RuleWrite::Create(rule) = &p.rules[0] else { panic!("{:?}", p.rules) };
        assert_eq!(rule.spec.device_selector.as_ref().unwrap().device.as_deref(), Some("gpu-3"));
        assert_eq!(rule.spec.taint.value.as_deref(), Some("Xid79"));
        let patch = p.node_patch.as_ref().unwrap();
        assert!(patch.get("spec").is_none(), "no cordon, no node taint: {patch}");
        let condition = &p.status_patch.as_ref().unwrap()["status"]["conditions"][0];
        assert_eq!(condition["reason"], "Xid79");
        let message = condition["message"].as_str().unwrap();
        assert!(
            message.starts_with("only GPU 3 (GPU-3) held, by device taints; the node stays schedulable"),
            "{message}"
        );
        assert_eq!(p.events[0].reason, "GPUQuarantined");
        assert!(p.events[0].message.contains("device-tainted GPU 3 (GPU-3)"), "{}", p.events[0].message);
        assert_eq!(named(&p), vec!["Xid79"]);
        assert_eq!(p.gpus_owned, vec!["GPU-3".to_string()]);
        assert!(p.owns_nothing, "no node breaker place");
        let q = apply(&node(), &p);
        let c = claim(&q);
        assert_eq!(c.state, QuarantineState::GpusQuarantined);
        assert_eq!(c.gpus[0].rules, vec![device_rules::rule_name("gpu-1", &dev(3))]);
        let rules = rules_after(&[], &p);
        assert!(!gpu_plan(&q, &v, &rules, Permit::NotAsked).writes_anything(), "settled: nothing to write");
    }

    #[test]
    fn recovery_lets_the_claim_go_and_deletes_the_rule() {
        let v = holding(&[3], None);
        let p = gpu_plan(&node(), &v, &[], Permit::Granted);
        let (q, rules) = (apply(&node(), &p), rules_after(&[], &p));
        let r = gpu_plan(&q, &well(), &rules, Permit::NotAsked);
        assert!(matches!(&r.rules[..], [RuleWrite::Delete { uid, .. }] if uid.starts_with("uid-")), "{:?}", r.rules);
        assert_eq!(
            r.node_patch.as_ref().unwrap()["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"],
            Value::Null
        );
        let recovered = r.events.iter().find(|e| e.reason == "GPURecovered").unwrap();
        assert!(
            recovered.message.contains("GPU 3 (GPU-3): removed DeviceTaintRule gpu-health.gpu-1.gpu-3-"),
            "{}",
            recovered.message
        );
        assert!(r.gpus_owned.is_empty());
        let after = (apply(&q, &r), rules_after(&rules, &r));
        assert!(!gpu_plan(&after.0, &well(), &after.1, Permit::NotAsked).writes_anything());
    }

    #[test]
    fn one_gpu_recovering_while_another_stays_lifts_only_its_rule() {
        let p = gpu_plan(&node(), &holding(&[2], None), &[], Permit::Granted);
        let (q, rules) = (apply(&node(), &p), rules_after(&[], &p));
        // GPU 2 recovers as GPU 6 fails: GPU 6 asks for a place, GPU 2's rule goes.
        let v = holding(&[6], None);
        assert_eq!(gpu_plan(&q, &v, &rules, Permit::NotAsked).needs_gpu_permit, vec!["GPU-6".to_string()]);
        let r = gpu_plan(&q, &v, &rules, Permit::Granted);
        let after = rules_after(&rules, &r);
        assert_eq!(after.iter().map(|r| r.gpu_index).collect::<Vec<_>>(), vec![6]);
        assert!(r.events.iter().any(|e| e.reason == "GPURecovered" && e.message.contains("GPU 2 (GPU-2)")));
        assert_eq!(claim(&apply(&q, &r)).gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![6]);
    }

    #[test]
    fn a_rule_an_admin_deleted_is_not_put_back() {
        let v = holding(&[3], None);
        let p = gpu_plan(&node(), &v, &[], Permit::Granted);
        let q = apply(&node(), &p);
        let r = gpu_plan(&q, &v, &[], Permit::NotAsked);
        assert!(r.rules_missing, "the loop lists again before it believes it");
        assert!(r.rules.is_empty(), "not created again: {:?}", r.rules);
        assert_eq!(r.events[0].reason, "GPUQuarantineOverridden");
        let q = apply(&q, &r);
        assert!(claim(&q).gpus[0].overridden);
        assert!(!gpu_plan(&q, &v, &[], Permit::NotAsked).writes_anything(), "told once");
    }

    #[test]
    fn a_rule_the_claim_does_not_name_is_adopted_or_deleted() {
        let v = holding(&[3], None);
        let p = gpu_plan(&node(), &v, &[], Permit::Granted);
        let rules = rules_after(&[], &p);
        // The exporter stopped after the create, before the node patch.
        let adopted = gpu_plan(&node(), &v, &rules, Permit::NotAsked);
        assert!(adopted.rules.is_empty() && adopted.needs_gpu_permit.is_empty(), "{adopted:?}");
        assert_eq!(claim(&apply(&node(), &adopted)).gpus[0].rules.len(), 1);
        // A rule of a GPU that is not held: left over, deleted.
        let orphan = gpu_plan(&node(), &holding(&[5], None), &rules, Permit::Granted);
        assert!(orphan.rules.iter().any(|w| matches!(w, RuleWrite::Delete { name, .. } if name.contains("gpu-3"))));
    }

    #[test]
    fn the_taint_value_follows_the_gpus_primary_reason() {
        let v = holding(&[3], None);
        let p = gpu_plan(&node(), &v, &[], Permit::Granted);
        let (q, rules) = (apply(&node(), &p), rules_after(&[], &p));
        let mut moved = holding(&[3], None);
        moved.gpus[0].reasons = vec![gpu_reason(3, "Xid62")];
        moved.gpus[0].reasons[0].needs = Needs::Reboot;
        moved.reasons = moved.gpus[0].reasons.clone();
        let r = gpu_plan(&q, &moved, &rules, Permit::NotAsked);
        assert!(
            matches!(&r.rules[..], [RuleWrite::SetValue { value, resource_version, .. }] if value == "Xid62" && resource_version == "1"),
            "{:?}",
            r.rules
        );
        assert!(r.events.iter().any(|e| e.reason == "GPUReasonChanged"));
    }

    #[test]
    fn the_gpu_breaker_blocks_with_one_event_and_no_fallback_to_the_node() {
        let v = holding(&[3], None);
        let denied = Permit::Denied { quarantined: 4, limit: 4, fleet: 160 };
        let p = gpu_plan(&node(), &v, &[], denied.clone());
        assert!(p.rules.is_empty());
        assert!(p.node_patch.as_ref().unwrap().get("spec").is_none(), "a full GPU breaker never becomes a cordon");
        assert_eq!(p.events.iter().map(|e| e.reason).collect::<Vec<_>>(), vec!["GPUQuarantineBlocked"]);
        assert!(
            p.events[0].message.contains("4 of 160 GPUs are held by device taints (limit 4)"),
            "{}",
            p.events[0].message
        );
        let q = apply(&node(), &p);
        assert_eq!(claim(&q).state, QuarantineState::Unhealthy);
        assert!(!gpu_plan(&q, &v, &[], denied).writes_anything(), "told once");
    }

    #[test]
    fn rules_that_could_not_be_listed_hold_the_gpu_plan() {
        let v = holding(&[3], None);
        let p = plan_with(&node(), &v, Mode::Enforce, &Permit::NotAsked, &names(), now(), &Devices::default());
        assert!(p.rules_unknown);
        assert!(p.rules.is_empty());
        let granted = gpu_plan(&node(), &v, &[], Permit::Granted);
        let q = apply(&node(), &granted);
        let r = plan_with(&q, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now(), &Devices::default());
        assert!(r.rules_unknown && !r.writes_anything(), "no recovery without deleting the rule: {r:?}");
    }

    #[test]
    fn widening_cordons_and_keeps_the_rules_narrowing_lifts_the_cordon() {
        let p = gpu_plan(&node(), &holding(&[3], None), &[], Permit::Granted);
        let (q, rules) = (apply(&node(), &p), rules_after(&[], &p));
        let wide = holding(&[1, 3, 5], Some("3 of 8 GPUs failed"));
        assert!(gpu_plan(&q, &wide, &rules, Permit::NotAsked).needs_permit, "a cordon asks the node breaker");
        let w = plan_with(
            &q,
            &wide,
            Mode::Enforce,
            &Permit::Granted,
            &names(),
            now(),
            &with_rules(&rules, Permit::NotAsked),
        );
        assert_eq!(w.node_patch.as_ref().unwrap()["spec"]["unschedulable"], true);
        assert!(w.rules.is_empty(), "GPU 3's rule stays, no rules for 1 and 5: {:?}", w.rules);
        let condition =
            w.status_patch.as_ref().unwrap()["status"]["conditions"][0]["message"].as_str().unwrap().to_string();
        assert!(condition.starts_with("the whole node is held: 3 of 8 GPUs failed"), "{condition}");
        let q = apply(&q, &w);
        assert_eq!(claim(&q).state, QuarantineState::Quarantined);
        // Down to GPU 1 (the policy narrowed): GPU 1 gets its rule first, then the cordon goes.
        let narrow = holding(&[1], None);
        let n1 = gpu_plan(&q, &narrow, &rules, Permit::NotAsked);
        assert_eq!(n1.needs_gpu_permit, vec!["GPU-1".to_string()]);
        let n = gpu_plan(&q, &narrow, &rules, Permit::Granted);
        assert_eq!(n.node_patch.as_ref().unwrap()["spec"]["unschedulable"], Value::Null);
        assert!(n.events.iter().any(|e| e.reason == "GPUQuarantineNarrowed"), "{:?}", n.events);
        assert!(n.owns_nothing, "the node's breaker place is given back");
        let after = rules_after(&rules, &n);
        assert_eq!(
            after.iter().map(|r| r.gpu_index).collect::<Vec<_>>(),
            vec![1],
            "GPU 3's rule goes with its recovery"
        );
    }

    #[test]
    fn a_device_plugin_node_is_quarantined_whole_and_the_condition_says_why() {
        let why = "GPU 3 is handed out by a device plugin, which cannot keep a single GPU from the scheduler";
        let mut v = holding(&[3], Some(why));
        v.gpus[0].devices.clear();
        let p = gpu_plan(&node(), &v, &[], Permit::NotAsked);
        assert!(p.needs_permit);
        let p = plan_with(&node(), &v, Mode::Enforce, &Permit::Granted, &names(), now(), &Devices::default());
        assert_eq!(p.node_patch.as_ref().unwrap()["spec"]["unschedulable"], true);
        assert!(!p.rules_unknown, "no rule wanted");
        let message =
            p.status_patch.as_ref().unwrap()["status"]["conditions"][0]["message"].as_str().unwrap().to_string();
        assert!(message.contains(why), "{message}");
    }

    #[test]
    fn dry_run_says_which_gpu_it_would_taint() {
        let v = holding(&[3], None);
        let p = plan_with(
            &node(),
            &v,
            Mode::DryRun,
            &Permit::NotAsked,
            &names(),
            now(),
            &with_rules(&[], Permit::NotAsked),
        );
        assert!(p.rules.is_empty());
        assert!(
            p.events[0]
                .message
                .contains("would device-taint GPU 3 (GPU-3) gpu-telemetry.io/gpu-unhealthy=Xid79:NoSchedule"),
            "{}",
            p.events[0].message
        );
    }

    #[test]
    fn a_device_plugin_node_recovers() {
        let why = "GPU 3 is handed out by a device plugin, which cannot keep a single GPU from the scheduler";
        let mut v = holding(&[3], Some(why));
        v.gpus[0].devices.clear();
        let p = plan_with(&node(), &v, Mode::Enforce, &Permit::Granted, &names(), now(), &Devices::default());
        let q = apply(&node(), &p);
        let text = &q.annotations["gpu-telemetry.io/gpu-health"];
        Claim::parse("k", text).unwrap();
        let r = plan_with(&q, &well(), Mode::Enforce, &Permit::NotAsked, &names(), now(), &Devices::default());
        assert!(!r.rules_unknown, "no rule to wait for on a device-plugin node");
        assert_eq!(r.node_patch.as_ref().unwrap()["spec"]["unschedulable"], Value::Null);
        assert_eq!(r.events.iter().map(|e| e.reason).collect::<Vec<_>>(), vec!["GPURecovered"]);
    }

    #[test]
    fn a_mig_gpu_gets_a_rule_per_device_and_one_place() {
        let mut v = holding(&[3], None);
        v.gpus[0].devices.push(DraDevice { device: "gpu-3-mig-1g10gb-0".into(), ..dev(3) });
        let first = gpu_plan(&node(), &v, &[], Permit::NotAsked);
        assert_eq!(first.needs_gpu_permit, vec!["GPU-3".to_string()], "one place for the GPU");
        let p = gpu_plan(&node(), &v, &[], Permit::Granted);
        assert_eq!(p.rules.len(), 2, "the GPU and its MIG instance: {:?}", p.rules);
        let rules = rules_after(&[], &p);
        let q = apply(&node(), &p);
        assert_eq!(claim(&q).gpus[0].rules.len(), 2);
        // A MIG instance made later, while the GPU is held, is tainted too, without a new place.
        v.gpus[0].devices.push(DraDevice { device: "gpu-3-mig-1g10gb-1".into(), ..dev(3) });
        let later = gpu_plan(&q, &v, &rules, Permit::NotAsked);
        assert!(later.needs_gpu_permit.is_empty());
        assert_eq!(later.rules.len(), 1);
    }
}
