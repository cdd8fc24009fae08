//! The device-taint half of a plan: the DeviceTaintRules that hold each held GPU, as
//! the claim records them and as listed ([`RuleView`]).
//!
//! Rules:
//! - Only the loop's own rules are written ([`crate::device_rules::read_rule`]); an
//!   admin's rule, on the same device or another, is never touched.
//! - A held GPU gets one rule per DRA device when only GPUs are held (not while the
//!   whole node is, where the cordon covers them), in enforce mode, and for a GPU that
//!   holds no rule yet only with the GPU breaker's place.
//! - A rule the claim names but the API no longer has was deleted by someone else: the
//!   loop lets go of that GPU's device taints for this quarantine and says so once
//!   (`GPUQuarantineOverridden`), as it does for the node's cordon.
//! - A rule of the loop that the claim does not name (the exporter stopped between
//!   creating it and recording it) is taken as the held GPU's, or deleted when its GPU
//!   is not held.
//! - The taint's value follows the GPU's primary reason, by a patch carrying the
//!   rule's `resourceVersion`.
//! - A GPU that recovers has its rules deleted, each only if still the version read.
//! - Nothing is written when the rules already are as they should be.

use crate::device_rules::{self, Hold, RuleView};
use crate::node_state::GpuClaim;
use crate::observation::DraDevice;
use crate::verdict::{Health, HeldGpu};

use super::{EventSpec, EventType, Mode, Permit, Plan, RuleWrite, Scene, Wording};

/// What the device-taint half did, for the rest of the plan.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// An Event of it named the primary reason.
    pub told: bool,
    /// The GPUs whose rules were deleted, described, for the recovery's Event.
    pub lifted: Vec<String>,
}

/// Plans the rule writes for `gpus` (the claim's entries, updated in place). `None`:
/// a GPU needs a new place in the GPU breaker first ([`Plan::needs_gpu_permit`]).
pub(super) fn plan_gpus(
    s: &Scene,
    gpus: &mut Vec<GpuClaim>,
    text: Option<&Wording>,
    out: &mut Plan,
) -> Option<Outcome> {
    let held: &[HeldGpu] = if s.verdict.health == Health::Unhealthy { &s.verdict.gpus } else { &[] };
    let taint_now = s.mode == Mode::Enforce && !held.is_empty() && !s.verdict.holds_node();
    refresh_entries(gpus, held);
    let Some(rules) = s.devices.rules else {
        // Not listed: change nothing, and keep the entries whose rules could not be lifted.
        let lift_waits = gpus.iter().any(|g| !g.rules.is_empty() && !held.iter().any(|h| h.uuid == g.uuid));
        let taint_waits = taint_now && gpus.iter().any(|g| g.rules.is_empty() && !g.overridden);
        out.rules_unknown = lift_waits || taint_waits;
        gpus.retain(|g| held.iter().any(|h| h.uuid == g.uuid) || !g.rules.is_empty());
        out.gpus_owned = owned(gpus);
        return Some(Outcome::default());
    };
    let mut outcome = Outcome::default();
    let (keep, gone): (Vec<GpuClaim>, Vec<GpuClaim>) =
        std::mem::take(gpus).into_iter().partition(|g| held.iter().any(|h| h.uuid == g.uuid));
    *gpus = keep;
    for g in &gone {
        if let Some(lifted) = lift(g, rules, out) {
            outcome.lifted.push(lifted);
        }
    }
    let mut wanted = Vec::new();
    for h in held {
        let Some(g) = gpus.iter_mut().find(|g| g.uuid == h.uuid) else { continue };
        notice_deleted(g, rules, out);
        adopt(g, rules);
        if s.mode == Mode::Enforce {
            follow_primary(g, h, rules, out);
        }
        if taint_now && !g.overridden {
            let missing = missing_devices(g, rules);
            if !missing.is_empty() && g.rules.is_empty() {
                wanted.push(h.uuid.clone());
            } else {
                create(s, g, h, &missing, out);
            }
        }
    }
    if !wanted.is_empty() {
        outcome.told |= admit_gpus(s, gpus, held, &wanted, text, out)?;
    }
    delete_orphans(gpus, rules, out);
    out.gpus_owned = owned(gpus);
    Some(outcome)
}

/// The UUIDs of the GPUs that hold rules.
fn owned(gpus: &[GpuClaim]) -> Vec<String> {
    gpus.iter().filter(|g| !g.rules.is_empty()).map(|g| g.uuid.clone()).collect()
}

/// Dry-run: the entries only, no rule.
pub(super) fn record(gpus: &mut Vec<GpuClaim>, held: &[HeldGpu]) {
    refresh_entries(gpus, held);
    gpus.retain(|g| held.iter().any(|h| h.uuid == g.uuid));
}

/// An entry per held GPU, with its `since` and its devices.
fn refresh_entries(gpus: &mut Vec<GpuClaim>, held: &[HeldGpu]) {
    for h in held {
        match gpus.iter_mut().find(|g| g.uuid == h.uuid) {
            Some(g) => {
                g.index = h.index;
                g.since = crate::time::whole_seconds(h.since);
                for d in &h.devices {
                    if !g.devices.contains(d) {
                        g.devices.push(d.clone());
                    }
                }
            }
            None => gpus.push(GpuClaim {
                index: h.index,
                uuid: h.uuid.clone(),
                since: crate::time::whole_seconds(h.since),
                devices: h.devices.clone(),
                rules: Vec::new(),
                overridden: false,
                blocked: false,
            }),
        }
    }
    gpus.sort_by_key(|g| g.index);
}

fn describe(g: &GpuClaim) -> String {
    format!("GPU {} ({})", g.index, g.uuid)
}

/// Rules the claim names that are gone: someone else deleted them.
fn notice_deleted(g: &mut GpuClaim, rules: &[RuleView], out: &mut Plan) {
    let (found, deleted): (Vec<String>, Vec<String>) =
        std::mem::take(&mut g.rules).into_iter().partition(|name| rules.iter().any(|r| &r.name == name));
    g.rules = found;
    if deleted.is_empty() {
        return;
    }
    out.rules_missing = true;
    g.overridden = true;
    out.actions.push("overridden");
    out.events.push(EventSpec {
        kind: EventType::Normal,
        reason: "GPUQuarantineOverridden",
        message: format!(
            "DeviceTaintRule {} of {} was deleted by someone else; the health loop will not taint the GPU again in \
             this quarantine",
            deleted.join(", "),
            describe(g)
        ),
    });
}

/// The loop's rules for the GPU that the claim does not name yet.
fn adopt(g: &mut GpuClaim, rules: &[RuleView]) {
    for r in rules.iter().filter(|r| r.gpu_uuid == g.uuid) {
        if !g.rules.contains(&r.name) {
            g.rules.push(r.name.clone());
        }
        if !g.devices.contains(&r.device) {
            g.devices.push(r.device.clone());
        }
    }
    g.rules.sort();
}

/// The GPU's devices that no rule of the loop holds yet.
fn missing_devices(g: &GpuClaim, rules: &[RuleView]) -> Vec<DraDevice> {
    g.devices.iter().filter(|d| !rules.iter().any(|r| r.gpu_uuid == g.uuid && &r.device == *d)).cloned().collect()
}

/// The taint's value moves with the GPU's primary reason.
fn follow_primary(g: &GpuClaim, h: &HeldGpu, rules: &[RuleView], out: &mut Plan) {
    let primary = h.primary_code();
    for r in rules.iter().filter(|r| g.rules.contains(&r.name) && r.value != primary) {
        out.rules.push(RuleWrite::SetValue {
            name: r.name.clone(),
            resource_version: r.resource_version.clone(),
            value: primary.to_string(),
        });
        out.actions.push("device_taint");
    }
}

/// Creates the rules for `devices` of the GPU. Returns whether any was.
fn create(s: &Scene, g: &mut GpuClaim, h: &HeldGpu, devices: &[DraDevice], out: &mut Plan) -> bool {
    for d in devices {
        let hold = Hold {
            index: h.index,
            uuid: &h.uuid,
            device: d,
            value: h.primary_code(),
            effect: s.devices.effect,
            since: h.since,
        };
        let rule = device_rules::desired_rule(s.names, &s.node.name, hold);
        g.rules.push(device_rules::rule_name(&s.node.name, d));
        out.rules.push(RuleWrite::Create(Box::new(rule)));
        out.actions.push("device_taint");
    }
    g.rules.sort();
    !devices.is_empty()
}

/// New GPU quarantines, with the GPU breaker's answer (all or none of this node's
/// GPUs). Returns whether an Event named the primary reason; `None`: not asked yet.
fn admit_gpus(
    s: &Scene,
    gpus: &mut [GpuClaim],
    held: &[HeldGpu],
    wanted: &[String],
    text: Option<&Wording>,
    out: &mut Plan,
) -> Option<bool> {
    let (named, reasons) = text.map_or((String::new(), String::new()), |t| (t.named.clone(), t.reasons.clone()));
    match &s.devices.permit {
        Permit::NotAsked => {
            out.needs_gpu_permit = wanted.to_vec();
            None
        }
        Permit::Unavailable => Some(false),
        Permit::Denied { quarantined, limit, fleet } => {
            let mut told = false;
            for g in gpus.iter_mut().filter(|g| wanted.contains(&g.uuid)) {
                if !g.blocked {
                    out.actions.push("blocked");
                    out.events.push(EventSpec {
                        kind: EventType::Warning,
                        reason: "GPUQuarantineBlocked",
                        message: format!(
                            "circuit breaker open: {quarantined} of {fleet} GPUs are held by device taints (limit \
                             {limit}); not tainting {}; {named}; {reasons}",
                            describe(g)
                        ),
                    });
                    told = true;
                }
                g.blocked = true;
            }
            Some(told)
        }
        Permit::Granted => {
            let mut done = Vec::new();
            for g in gpus.iter_mut().filter(|g| wanted.contains(&g.uuid)) {
                let Some(h) = held.iter().find(|h| h.uuid == g.uuid) else { continue };
                g.blocked = false;
                let missing = g.devices.clone();
                if create(s, g, h, &missing, out) {
                    done.push(format!(
                        "{} ({}={}:{})",
                        describe(g),
                        s.names.taint_key,
                        h.primary_code(),
                        s.devices.effect.as_str()
                    ));
                }
            }
            if done.is_empty() {
                return Some(false);
            }
            out.events.push(EventSpec {
                kind: EventType::Warning,
                reason: "GPUQuarantined",
                message: format!(
                    "device-tainted {}; the node stays schedulable for its other GPUs; {named}; {reasons}",
                    done.join(" and ")
                ),
            });
            Some(true)
        }
    }
}

/// Deletes a recovered GPU's rules; a description of what was lifted, if anything was
/// or had been the loop's.
fn lift(g: &GpuClaim, rules: &[RuleView], out: &mut Plan) -> Option<String> {
    let mine: Vec<&RuleView> = rules.iter().filter(|r| r.gpu_uuid == g.uuid || g.rules.contains(&r.name)).collect();
    for r in &mine {
        out.rules.push(RuleWrite::Delete {
            name: r.name.clone(),
            uid: r.uid.clone(),
            resource_version: r.resource_version.clone(),
        });
        out.actions.push("device_untaint");
    }
    if mine.is_empty() && !g.overridden {
        return None;
    }
    let names: Vec<&str> = mine.iter().map(|r| r.name.as_str()).collect();
    Some(if names.is_empty() {
        format!("{}: nothing of the loop's left to lift", describe(g))
    } else {
        format!("{}: removed DeviceTaintRule {}", describe(g), names.join(", "))
    })
}

/// The loop's rules of GPUs it no longer records: left over, deleted.
fn delete_orphans(gpus: &[GpuClaim], rules: &[RuleView], out: &mut Plan) {
    for r in rules {
        let known = gpus.iter().any(|g| g.uuid == r.gpu_uuid || g.rules.contains(&r.name));
        let deleting = out.rules.iter().any(|w| matches!(w, RuleWrite::Delete { name, .. } if *name == r.name));
        if !known && !deleting {
            out.rules.push(RuleWrite::Delete {
                name: r.name.clone(),
                uid: r.uid.clone(),
                resource_version: r.resource_version.clone(),
            });
            out.actions.push("device_untaint");
        }
    }
}
