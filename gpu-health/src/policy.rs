//! The health policy: from the history of observations to a verdict for the node and
//! for each of its GPUs (the verdict's words, [`Reason`], [`Verdict`] and the rest, are
//! [`crate::verdict`]'s).
//!
//! Pure: no clock, no I/O. The loop feeds it one [`Assessment`] per check with the
//! time of the check, and restores it from the node after a restart.
//!
//! - The policy decides **per GPU first**: each GPU with a confirmed reason is *held*
//!   from the check that confirmed it (its own `since`) until its own recovery; a
//!   reason of the node as a whole (NVML itself failing) holds the node.
//! - A **fatal** signal (lost GPU, uncorrectable ECC, failed row remap, an actionable
//!   XID, the driver asking for a reset or reboot, ...) holds its GPU on the first
//!   check that sees it, scheduled or event-driven.
//! - A **noisy** signal (temperature, corrected ECC, slowdown, a hung call) must be
//!   seen on `debounce_checks` consecutive scheduled checks (debounce); a single check
//!   without it starts the count again, so a reading flapping around its threshold
//!   never acts.
//! - **Recovery** of a held GPU needs `recovery_checks` consecutive scheduled checks in
//!   which it answers with no signal at all (confirmed or not) and no node-wide signal
//!   is seen, and `min_quarantine` since it was held (hysteresis). A check that does
//!   not see the GPU does not count.
//! - An XID of class reset or reboot is **latched**: it holds its GPU until evidence
//!   shows the GPU was reset (it went away and answered again, its volatile ECC
//!   counters dropped, the driver version changed) or the node rebooted (its boot id
//!   changed, seen when the state is restored). Reboot latches need the reboot.
//! - **Scope.** Only the held GPUs are quarantined (device taints) while no node-wide
//!   signal fires, every held GPU can be kept from the scheduler on its own (it has DRA
//!   devices and the cluster serves device taints) and the held GPUs are at most
//!   `gpu_max_fraction` of the node's GPUs (default one of eight: more failing at once
//!   points at something they share, a PCIe switch, power, the driver). Otherwise the
//!   whole node is held, and the verdict says why ([`Verdict::node_scope`]). Widening
//!   is immediate; narrowing back to the GPUs needs the same hysteresis as a recovery:
//!   `recovery_checks` scheduled checks without a reason to hold the node and
//!   `min_quarantine` since the node was held, so a node does not flap between a
//!   cordon and device taints.
//! - A check that cannot see the GPUs (NVML starting or missing) changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::observation::DraDevice;
use crate::signals::{Assessment, Availability, Severity, SignalKind};
use crate::xid::{XidClass, XidTable};

// The verdict's vocabulary is its own module; these names stay reachable here, where the
// policy that produces them is.
pub use crate::verdict::{Health, HeldGpu, Latch, Needs, Rank, Reason, Verdict, primary, primary_order};

/// The policy's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicySettings {
    /// Consecutive scheduled checks a noisy signal needs before it acts.
    pub debounce_checks: u32,
    /// Consecutive healthy scheduled checks before recovery.
    pub recovery_checks: u32,
    /// Shortest quarantine.
    pub min_quarantine: Duration,
    /// Largest share of the node's GPUs held one by one; past it the node is held as a
    /// whole. 0: always the whole node.
    pub gpu_max_fraction: f64,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            debounce_checks: 3,
            recovery_checks: 3,
            min_quarantine: Duration::from_secs(600),
            gpu_max_fraction: 0.125,
        }
    }
}

/// What started a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    /// The check interval passed: debounce and recovery counts advance.
    Scheduled,
    /// An XID or a lost GPU: fatal signals act, counts do not advance.
    Event,
}

/// Whether the cluster can keep one device from the scheduler, as the Kubernetes edge
/// found out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DeviceTaints {
    /// Not known (report-only, or not asked yet): a GPU with DRA devices is taken to be
    /// one a device taint can hold.
    #[default]
    Unknown,
    /// The API server serves DeviceTaintRules.
    Available,
    /// It does not, or refused the loop's rule; why, for the condition message.
    Unavailable(String),
}

/// A unit the policy holds: the node (NVML failing) or one GPU.
#[derive(Debug, Clone)]
struct Held {
    since: SystemTime,
    reasons: Vec<Reason>,
    healthy_streak: u32,
    uuid: String,
    devices: Vec<DraDevice>,
}

/// The node held as a whole, why, and the scheduled checks since without a reason to.
#[derive(Debug, Clone)]
struct NodeScope {
    since: SystemTime,
    why: String,
    calm: u32,
}

/// Everything the policy remembers between checks.
#[derive(Debug, Clone)]
pub struct PolicyState {
    settings: PolicySettings,
    table: XidTable,
    /// A check has seen the GPUs (or a state was restored).
    observed: bool,
    /// What is held, by GPU index (`None`: the node itself).
    units: BTreeMap<Option<u32>, Held>,
    /// Consecutive scheduled checks each noisy signal was seen, by (GPU index, kind).
    streaks: BTreeMap<(Option<u32>, SignalKind), u32>,
    latches: Vec<Latch>,
    /// XID counts already acted on, by (GPU index, code).
    xid_seen: BTreeMap<(u32, u64), u64>,
    scope: Option<NodeScope>,
    device_taints: DeviceTaints,
    last: Option<(Health, Vec<Reason>, Option<String>)>,
}

/// One held GPU as kept on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredGpu {
    pub index: u32,
    pub since: SystemTime,
    pub devices: Vec<DraDevice>,
}

/// The part of the state kept on the node across restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub since: SystemTime,
    pub reasons: Vec<Reason>,
    pub latches: Vec<Latch>,
    /// The node rebooted since the state was written.
    pub rebooted: bool,
    /// When each held GPU was held; a GPU not listed takes `since`.
    pub gpus: Vec<RestoredGpu>,
    /// The node was held as a whole, and why.
    pub node_scope: Option<String>,
}

impl PolicyState {
    pub fn new(settings: PolicySettings, table: XidTable) -> Self {
        PolicyState {
            settings,
            table,
            observed: false,
            units: BTreeMap::new(),
            streaks: BTreeMap::new(),
            latches: Vec::new(),
            xid_seen: BTreeMap::new(),
            scope: None,
            device_taints: DeviceTaints::Unknown,
            last: None,
        }
    }

    pub fn table(&self) -> &XidTable {
        &self.table
    }

    /// What the edge found out about device taints; read at the next check.
    pub fn set_device_taints(&mut self, device_taints: DeviceTaints) {
        self.device_taints = device_taints;
    }

    pub fn device_taints(&self) -> &DeviceTaints {
        &self.device_taints
    }

    /// Takes back a quarantine written on the node by an earlier run (or found in its
    /// DeviceTaintRules). A reboot clears every latch; what was held still needs its
    /// healthy checks and its minimum time, counted from when it was held.
    pub fn restore(&mut self, restored: Restored) -> Vec<String> {
        let mut notes = Vec::new();
        for latch in restored.latches {
            if restored.rebooted {
                notes.push(format!("{}: cleared by the node's reboot", latch.reason.describe()));
                continue;
            }
            let known =
                self.latches.iter().any(|l| l.reason.gpu == latch.reason.gpu && l.reason.code == latch.reason.code);
            if !known {
                self.latches.push(latch);
            }
        }
        let mut by_unit: BTreeMap<Option<u32>, Vec<Reason>> = BTreeMap::new();
        for reason in restored.reasons {
            by_unit.entry(reason.gpu).or_default().push(reason);
        }
        for (unit, mut reasons) in by_unit {
            let kept = unit.and_then(|i| restored.gpus.iter().find(|g| g.index == i));
            let since = kept.map_or(restored.since, |g| g.since);
            reasons.sort_by(primary_order);
            let held = self.units.entry(unit).or_insert_with(|| Held {
                since,
                uuid: reasons.first().map(|r| r.uuid.clone()).unwrap_or_default(),
                reasons: Vec::new(),
                healthy_streak: 0,
                devices: kept.map(|g| g.devices.clone()).unwrap_or_default(),
            });
            held.since = held.since.min(since);
            if held.reasons.is_empty() {
                held.reasons = reasons;
            }
            self.observed = true;
        }
        for held in self.units.values_mut() {
            held.healthy_streak = 0;
        }
        if let Some(why) = restored.node_scope {
            let since = self.scope.as_ref().map_or(restored.since, |s| s.since.min(restored.since));
            self.scope = Some(NodeScope { since, why, calm: 0 });
        }
        notes
    }

    /// An operator says the GPUs were reset (or the node serviced) at `at`: latches
    /// set before then are cleared. Recovery still needs its healthy checks.
    pub fn acknowledge_reset(&mut self, at: SystemTime) -> Vec<String> {
        let mut notes = Vec::new();
        self.latches.retain(|l| {
            let cleared = l.since <= at;
            if cleared {
                notes.push(format!("{}: cleared by the operator's reset acknowledgement", l.reason.describe()));
            }
            !cleared
        });
        notes
    }

    /// Runs one check.
    pub fn step(&mut self, obs: &Assessment, kind: CheckKind, at: SystemTime) -> Verdict {
        if !obs.observable {
            return self.verdict(Vec::new(), Vec::new());
        }
        self.observed = true;
        let mut notes = self.clear_latches_with_evidence(obs);
        let mut confirmed = Vec::new();
        self.read_xids(obs, at, &mut confirmed, &mut notes);
        let present = present_signals(obs, at);
        if kind == CheckKind::Scheduled {
            self.count_streaks(&present);
        }
        let mut pending = Vec::new();
        for (gpu, signal, reason) in present {
            let streak = self.streaks.get(&(gpu, signal)).copied().unwrap_or(0);
            if signal.severity() == Severity::Fatal || streak >= self.settings.debounce_checks.max(1) {
                confirmed.push(reason);
            } else {
                pending.push(reason);
            }
        }
        confirmed.extend(self.latches.iter().map(|l| l.reason.clone()));
        confirmed.sort();
        confirmed.dedup();
        pending.sort();
        pending.dedup();
        let confirmed_units = self.hold(obs, confirmed, at);
        self.release(obs, &confirmed_units, &pending, kind, at, &mut notes);
        self.widen_or_narrow(obs, kind, at, &mut notes);
        self.verdict(pending, notes)
    }

    /// Noisy signals seen on this scheduled check extend their streak; any other
    /// streak starts again.
    fn count_streaks(&mut self, present: &[(Option<u32>, SignalKind, Reason)]) {
        let mut streaks = BTreeMap::new();
        for (gpu, signal, _) in present {
            if signal.severity() == Severity::Noisy {
                let before = self.streaks.get(&(*gpu, *signal)).copied().unwrap_or(0);
                streaks.insert((*gpu, *signal), before.saturating_add(1));
            }
        }
        self.streaks = streaks;
    }

    /// Each unit with a confirmed reason is held (from now, or since it already was);
    /// its reasons keep the wording they were first seen with. A held GPU's DRA devices
    /// follow what is published, and are kept when a cycle publishes none (a slice
    /// watch that resyncs must not turn a device taint into a cordon). Returns the units
    /// confirmed on this check.
    fn hold(&mut self, obs: &Assessment, confirmed: Vec<Reason>, at: SystemTime) -> BTreeSet<Option<u32>> {
        let mut by_unit: BTreeMap<Option<u32>, Vec<Reason>> = BTreeMap::new();
        for reason in confirmed {
            by_unit.entry(reason.gpu).or_default().push(reason);
        }
        let units: BTreeSet<Option<u32>> = by_unit.keys().copied().collect();
        for (unit, mut reasons) in by_unit {
            match self.units.get_mut(&unit) {
                Some(held) => {
                    held.healthy_streak = 0;
                    held.reasons = keep_first_details(&held.reasons, reasons);
                }
                None => {
                    reasons.sort_by(primary_order);
                    let uuid = reasons.first().map(|r| r.uuid.clone()).unwrap_or_default();
                    self.units.insert(unit, Held { since: at, reasons, healthy_streak: 0, uuid, devices: Vec::new() });
                }
            }
        }
        for (unit, held) in &mut self.units {
            let Some(index) = unit else { continue };
            if let Some(gpu) = obs.gpus.iter().find(|g| g.index == *index)
                && !gpu.dra_devices.is_empty()
            {
                held.devices = gpu.dra_devices.clone();
            }
        }
        units
    }

    /// Held units without a confirmed reason count towards their recovery: a
    /// scheduled check that sees the unit answer, with no signal on it and no node-wide
    /// signal, adds one; a signal still debouncing on it (or a node-wide one) starts
    /// the count again; a check that does not see the GPU changes nothing.
    fn release(
        &mut self,
        obs: &Assessment,
        confirmed: &BTreeSet<Option<u32>>,
        pending: &[Reason],
        kind: CheckKind,
        at: SystemTime,
        notes: &mut Vec<String>,
    ) {
        let pending_units: BTreeSet<Option<u32>> = pending.iter().map(|r| r.gpu).collect();
        let node_wide = confirmed.contains(&None) || pending_units.contains(&None);
        let settings = self.settings;
        let mut recovered = Vec::new();
        for (unit, held) in &mut self.units {
            if confirmed.contains(unit) {
                continue;
            }
            if pending_units.contains(unit) || (unit.is_some() && node_wide) {
                held.healthy_streak = 0;
                continue;
            }
            let seen = match unit {
                None => true,
                Some(i) => obs.gpus.iter().any(|g| g.index == *i && g.availability == Availability::Ok),
            };
            if kind != CheckKind::Scheduled || !seen {
                continue;
            }
            held.healthy_streak = held.healthy_streak.saturating_add(1);
            let served = at.duration_since(held.since).unwrap_or(Duration::ZERO) >= settings.min_quarantine;
            if held.healthy_streak >= settings.recovery_checks.max(1) && served {
                recovered.push(*unit);
            }
        }
        for unit in recovered {
            self.units.remove(&unit);
            let what = unit.map_or_else(|| "the node".to_string(), |i| format!("GPU {i}"));
            notes.push(format!("{what} recovered: healthy checks and minimum quarantine time passed"));
        }
    }

    /// Holds the whole node at once when the held GPUs cannot be held on their own
    /// ([`Self::widening`]); lets go of the node, keeping only the GPUs, after
    /// `recovery_checks` scheduled checks without such a reason and `min_quarantine`.
    fn widen_or_narrow(&mut self, obs: &Assessment, kind: CheckKind, at: SystemTime, notes: &mut Vec<String>) {
        if self.units.is_empty() {
            self.scope = None;
            return;
        }
        let why = self.widening(obs);
        let settings = self.settings;
        match (why, self.scope.as_mut()) {
            (Some(why), Some(scope)) => {
                scope.why = why;
                scope.calm = 0;
            }
            (Some(why), None) => self.scope = Some(NodeScope { since: at, why, calm: 0 }),
            (None, Some(scope)) if kind == CheckKind::Scheduled => {
                scope.calm = scope.calm.saturating_add(1);
                let served = at.duration_since(scope.since).unwrap_or(Duration::ZERO) >= settings.min_quarantine;
                if scope.calm >= settings.recovery_checks.max(1) && served {
                    self.scope = None;
                    let gpus: Vec<String> = self.units.keys().flatten().map(|i| format!("GPU {i}")).collect();
                    notes.push(format!(
                        "the fault is down to {}: releasing the node, holding only those GPUs",
                        gpus.join(", ")
                    ));
                }
            }
            (None, _) => {}
        }
    }

    /// Why the held GPUs cannot be held one by one, if they cannot: a node-wide
    /// signal; a GPU a device plugin hands out (no DRA device); a cluster without
    /// device taints; more GPUs held than `gpu_max_fraction` of the node's.
    fn widening(&self, obs: &Assessment) -> Option<String> {
        if let Some(node) = self.units.get(&None) {
            let code = primary(&node.reasons).map_or("Unknown", |r| r.code.as_str());
            return Some(format!("a node-wide signal ({code})"));
        }
        let held: Vec<(u32, &Held)> = self.units.iter().filter_map(|(u, h)| u.map(|i| (i, h))).collect();
        if held.is_empty() {
            return None;
        }
        if let Some((i, _)) = held.iter().find(|(_, h)| h.devices.is_empty()) {
            return Some(format!(
                "GPU {i} is handed out by a device plugin, which cannot keep a single GPU from the scheduler"
            ));
        }
        if let DeviceTaints::Unavailable(why) = &self.device_taints {
            return Some(why.clone());
        }
        let total = obs.gpus.len().max(held.len());
        let fraction = self.settings.gpu_max_fraction;
        if fraction <= 0.0 {
            return Some("per-GPU quarantine is off (--health.gpu-quarantine.max-fraction 0)".into());
        }
        if held.len() as f64 > fraction * total as f64 + 1e-9 {
            return Some(format!(
                "{} of {total} GPUs failed, more than --health.gpu-quarantine.max-fraction {fraction} allows to hold \
                 one by one",
                held.len()
            ));
        }
        None
    }

    /// Healthy checks so far towards recovery (the fewest among what is held).
    pub fn healthy_streak(&self) -> u32 {
        self.units.values().map(|h| h.healthy_streak).min().unwrap_or(0)
    }

    fn verdict(&mut self, pending: Vec<Reason>, notes: Vec<String>) -> Verdict {
        let health = if !self.observed {
            Health::Unknown
        } else if self.units.is_empty() {
            Health::Healthy
        } else {
            Health::Unhealthy
        };
        let mut reasons: Vec<Reason> = self.units.values().flat_map(|h| h.reasons.iter().cloned()).collect();
        reasons.sort_by(primary_order);
        let since = self.units.values().map(|h| h.since).min();
        let gpus = self
            .units
            .iter()
            .filter_map(|(unit, h)| {
                unit.map(|index| HeldGpu {
                    index,
                    uuid: h.uuid.clone(),
                    since: h.since,
                    reasons: h.reasons.clone(),
                    devices: h.devices.clone(),
                })
            })
            .collect();
        let node_scope = if health == Health::Unhealthy { self.scope.as_ref().map(|s| s.why.clone()) } else { None };
        let now = (health, reasons.clone(), node_scope.clone());
        let changed = self.last.as_ref() != Some(&now);
        self.last = Some(now);
        Verdict { health, since, reasons, latches: self.latches.clone(), pending, notes, changed, gpus, node_scope }
    }

    fn clear_latches_with_evidence(&mut self, obs: &Assessment) -> Vec<String> {
        let mut notes = Vec::new();
        self.latches.retain_mut(|latch| {
            let Some(gpu) = obs.gpus.iter().find(|g| Some(g.index) == latch.reason.gpu) else { return true };
            if latch.reason.needs == Needs::Reboot {
                return true;
            }
            if gpu.availability == Availability::Gone {
                latch.seen_gone = true;
                return true;
            }
            let evidence = if gpu.availability == Availability::Ok && latch.seen_gone {
                Some("the GPU went away and answers again")
            } else if matches!((gpu.ecc_volatile, latch.ecc_baseline), (Some(now), Some(then)) if now < then) {
                Some("its volatile ECC counters were cleared")
            } else if matches!((&obs.driver_version, &latch.driver), (Some(now), Some(then)) if now != then) {
                Some("the driver was reloaded")
            } else {
                None
            };
            match evidence {
                Some(why) => {
                    notes.push(format!("{}: reset seen ({why})", latch.reason.describe()));
                    false
                }
                None => true,
            }
        });
        notes
    }

    fn read_xids(&mut self, obs: &Assessment, at: SystemTime, confirmed: &mut Vec<Reason>, notes: &mut Vec<String>) {
        for gpu in &obs.gpus {
            for (code, count) in &gpu.xid_counts {
                let seen = self.xid_seen.entry((gpu.index, *code)).or_insert(0);
                if *count <= *seen {
                    continue;
                }
                let new = *count - *seen;
                *seen = *count;
                let class = self.table.class(*code);
                let meaning = self.table.meaning(*code).to_string();
                let needs = match class {
                    XidClass::Event => {
                        notes.push(format!("GPU {} XID {code} x{new} recorded, no action: {meaning}", gpu.index));
                        continue;
                    }
                    XidClass::Quarantine => Needs::Nothing,
                    XidClass::Reset => Needs::Reset,
                    XidClass::Reboot => Needs::Reboot,
                };
                let reason = Reason {
                    gpu: Some(gpu.index),
                    uuid: gpu.uuid.clone(),
                    code: SignalKind::Xid(*code).code(),
                    detail: format!("XID {code}: {meaning}"),
                    needs,
                    first_seen: Some(crate::time::whole_seconds(at)),
                };
                if needs == Needs::Nothing {
                    confirmed.push(reason);
                    continue;
                }
                let latched = self.latches.iter().any(|l| l.reason.gpu == reason.gpu && l.reason.code == reason.code);
                if !latched {
                    self.latches.push(Latch {
                        reason,
                        since: at,
                        ecc_baseline: gpu.ecc_volatile,
                        driver: obs.driver_version.clone(),
                        seen_gone: gpu.availability == Availability::Gone,
                    });
                }
            }
        }
    }
}

/// The level signals of this check, per GPU (and NVML itself when it failed), as
/// reasons first seen now.
fn present_signals(obs: &Assessment, at: SystemTime) -> Vec<(Option<u32>, SignalKind, Reason)> {
    let first_seen = Some(crate::time::whole_seconds(at));
    let mut present = Vec::new();
    for gpu in &obs.gpus {
        for s in &gpu.signals {
            let reason = Reason {
                gpu: Some(gpu.index),
                uuid: gpu.uuid.clone(),
                code: s.kind.code(),
                detail: s.detail.clone(),
                needs: Needs::Nothing,
                first_seen,
            };
            present.push((Some(gpu.index), s.kind, reason));
        }
    }
    if let Some(failed) = &obs.nvml_failed {
        let reason = Reason {
            gpu: None,
            uuid: String::new(),
            code: SignalKind::NvmlHung.code(),
            detail: failed.clone(),
            needs: Needs::Nothing,
            first_seen,
        };
        present.push((None, SignalKind::NvmlHung, reason));
    }
    present
}

/// A reason already known keeps the detail and the time it was first seen with, so
/// that a moving reading (a temperature, a counter) does not rewrite the node every
/// check and the primary reason does not move; the result is in [`primary_order`].
fn keep_first_details(known: &[Reason], now: Vec<Reason>) -> Vec<Reason> {
    let mut out: Vec<Reason> = now
        .into_iter()
        .map(|r| known.iter().find(|k| k.gpu == r.gpu && k.code == r.code && k.needs == r.needs).cloned().unwrap_or(r))
        .collect();
    out.sort_by(primary_order);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::DraDevice;
    use crate::signals::{GpuAssessment, Signal};
    use std::time::UNIX_EPOCH;

    const T0: u64 = 1_700_000_000;

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(T0 + s)
    }

    fn settings() -> PolicySettings {
        PolicySettings {
            debounce_checks: 3,
            recovery_checks: 2,
            min_quarantine: Duration::from_secs(300),
            gpu_max_fraction: 0.125,
        }
    }

    fn policy() -> PolicyState {
        PolicyState::new(settings(), XidTable::default())
    }

    fn gpu(signals: &[SignalKind]) -> GpuAssessment {
        GpuAssessment {
            index: 0,
            uuid: "GPU-a".into(),
            availability: if signals.contains(&SignalKind::GpuLost) { Availability::Gone } else { Availability::Ok },
            signals: signals.iter().map(|k| Signal { kind: *k, detail: "seen".into() }).collect(),
            xid_counts: BTreeMap::new(),
            ecc_volatile: Some(0),
            dra_devices: Vec::new(),
        }
    }

    fn obs(gpus: Vec<GpuAssessment>) -> Assessment {
        Assessment {
            generation: 1,
            observable: true,
            nvml_failed: None,
            driver_version: Some("550.90.07".into()),
            gpus,
        }
    }

    fn with_xid(mut g: GpuAssessment, code: u64, count: u64) -> GpuAssessment {
        g.xid_counts.insert(code, count);
        g
    }

    #[test]
    fn a_fatal_signal_acts_on_the_first_check_even_an_event_check() {
        let mut p = policy();
        assert_eq!(p.step(&obs(vec![gpu(&[])]), CheckKind::Scheduled, at(0)).health, Health::Healthy);
        let v = p.step(&obs(vec![gpu(&[SignalKind::EccUncorrected])]), CheckKind::Event, at(5));
        assert_eq!(v.health, Health::Unhealthy);
        assert_eq!(v.since, Some(at(5)));
        assert_eq!(v.reasons[0].code, "EccUncorrected");
        assert!(v.changed);
    }

    #[test]
    fn a_noisy_signal_needs_consecutive_scheduled_checks() {
        let mut p = policy();
        let hot = obs(vec![gpu(&[SignalKind::Temperature])]);
        assert_eq!(p.step(&hot, CheckKind::Scheduled, at(0)).health, Health::Healthy);
        let v = p.step(&hot, CheckKind::Scheduled, at(60));
        assert_eq!(v.health, Health::Healthy);
        assert_eq!(v.pending.len(), 1, "seen but not confirmed");
        assert_eq!(p.step(&hot, CheckKind::Event, at(61)).health, Health::Healthy, "events do not count");
        assert_eq!(p.step(&hot, CheckKind::Scheduled, at(120)).health, Health::Unhealthy);
    }

    #[test]
    fn a_flapping_reading_never_acts() {
        let mut p = policy();
        let hot = obs(vec![gpu(&[SignalKind::Temperature])]);
        let cool = obs(vec![gpu(&[])]);
        for i in 0..20 {
            let o = if i % 3 == 2 { &cool } else { &hot };
            let v = p.step(o, CheckKind::Scheduled, at(i * 60));
            assert_eq!(v.health, Health::Healthy, "check {i}");
        }
    }

    #[test]
    fn recovery_needs_healthy_checks_and_the_minimum_time() {
        let mut p = policy();
        p.step(&obs(vec![gpu(&[SignalKind::RowRemapFailed])]), CheckKind::Scheduled, at(0));
        let fine = obs(vec![gpu(&[])]);
        assert_eq!(p.step(&fine, CheckKind::Scheduled, at(60)).health, Health::Unhealthy);
        assert_eq!(p.step(&fine, CheckKind::Scheduled, at(120)).health, Health::Unhealthy, "2 checks, 120 s < 300 s");
        assert_eq!(p.step(&fine, CheckKind::Event, at(301)).health, Health::Unhealthy, "event checks do not count");
        let v = p.step(&fine, CheckKind::Scheduled, at(302));
        assert_eq!(v.health, Health::Healthy);
        assert!(v.changed);
    }

    #[test]
    fn an_unconfirmed_noisy_signal_during_quarantine_holds_recovery() {
        let mut p = policy();
        p.step(&obs(vec![gpu(&[SignalKind::GpuLost])]), CheckKind::Scheduled, at(0));
        let fine = obs(vec![gpu(&[])]);
        let warm = obs(vec![gpu(&[SignalKind::Temperature])]);
        p.step(&fine, CheckKind::Scheduled, at(400));
        let v = p.step(&warm, CheckKind::Scheduled, at(460));
        assert_eq!(v.health, Health::Unhealthy);
        assert_eq!(v.reasons[0].code, "GpuLost", "the reasons stay those that caused the quarantine");
        assert_eq!(p.healthy_streak(), 0);
        p.step(&fine, CheckKind::Scheduled, at(520));
        assert_eq!(p.step(&fine, CheckKind::Scheduled, at(580)).health, Health::Healthy);
    }

    #[test]
    fn a_moving_reading_keeps_its_first_detail() {
        let mut p = policy();
        let mut g = gpu(&[SignalKind::EccUncorrected]);
        g.signals[0].detail = "1 error".into();
        p.step(&obs(vec![g.clone()]), CheckKind::Scheduled, at(0));
        g.signals[0].detail = "2 errors".into();
        let v = p.step(&obs(vec![g]), CheckKind::Scheduled, at(60));
        assert_eq!(v.reasons[0].detail, "1 error");
        assert!(!v.changed);
    }

    #[test]
    fn application_xids_are_recorded_only() {
        let mut p = policy();
        let v = p.step(&obs(vec![with_xid(gpu(&[]), 13, 4)]), CheckKind::Event, at(0));
        assert_eq!(v.health, Health::Healthy);
        assert!(v.notes[0].contains("XID 13 x4 recorded, no action"), "{:?}", v.notes);
    }

    #[test]
    fn a_reset_xid_stays_until_the_gpu_went_away_and_came_back() {
        let mut p = policy();
        p.step(&obs(vec![gpu(&[])]), CheckKind::Scheduled, at(0));
        let v = p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Event, at(10));
        assert_eq!(v.health, Health::Unhealthy);
        assert_eq!(v.reasons[0].code, "Xid79");
        assert_eq!(v.reasons[0].needs, Needs::Reset);
        assert_eq!(v.latches.len(), 1);
        // Healthy-looking checks do not clear it: no reset happened.
        for i in 1..10 {
            let v = p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Scheduled, at(10 + i * 60));
            assert_eq!(v.health, Health::Unhealthy, "check {i}");
        }
        p.step(&obs(vec![with_xid(gpu(&[SignalKind::GpuLost]), 79, 1)]), CheckKind::Scheduled, at(700));
        let v = p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Scheduled, at(760));
        assert!(v.latches.is_empty(), "reset seen");
        assert!(v.notes.iter().any(|n| n.contains("answers again")), "{:?}", v.notes);
        assert_eq!(v.health, Health::Unhealthy, "still needs its healthy checks");
        assert_eq!(
            p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Scheduled, at(820)).health,
            Health::Healthy
        );
    }

    #[test]
    fn cleared_volatile_ecc_or_a_new_driver_is_evidence_of_a_reset() {
        let mut p = policy();
        let mut g = with_xid(gpu(&[]), 48, 1);
        g.ecc_volatile = Some(3);
        p.step(&obs(vec![g.clone()]), CheckKind::Event, at(0));
        g.ecc_volatile = Some(0);
        assert!(p.step(&obs(vec![g.clone()]), CheckKind::Scheduled, at(60)).latches.is_empty());

        let mut p = policy();
        p.step(&obs(vec![with_xid(gpu(&[]), 74, 1)]), CheckKind::Event, at(0));
        let mut reloaded = obs(vec![with_xid(gpu(&[]), 74, 1)]);
        reloaded.driver_version = Some("560.1".into());
        assert!(p.step(&reloaded, CheckKind::Scheduled, at(60)).latches.is_empty());
    }

    #[test]
    fn a_reboot_latch_is_cleared_only_by_a_reboot() {
        let table = XidTable::with_overrides(&["79=reboot"]).unwrap();
        let mut p = PolicyState::new(settings(), table.clone());
        p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Event, at(0));
        p.step(&obs(vec![with_xid(gpu(&[SignalKind::GpuLost]), 79, 1)]), CheckKind::Scheduled, at(60));
        let v = p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Scheduled, at(120));
        assert_eq!(v.latches.len(), 1, "a GPU reset is not enough");
        let saved = Restored {
            since: v.since.unwrap(),
            reasons: v.reasons,
            latches: v.latches,
            rebooted: true,
            gpus: vec![],
            node_scope: None,
        };
        let mut after = PolicyState::new(settings(), table);
        let notes = after.restore(saved);
        assert!(notes[0].contains("reboot"), "{notes:?}");
        let fine = obs(vec![gpu(&[])]);
        assert_eq!(after.step(&fine, CheckKind::Scheduled, at(400)).health, Health::Unhealthy);
        assert_eq!(after.step(&fine, CheckKind::Scheduled, at(460)).health, Health::Healthy);
    }

    #[test]
    fn an_operator_acknowledgement_clears_older_latches_only() {
        let mut p = policy();
        p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Event, at(0));
        assert!(p.acknowledge_reset(at(0) - Duration::from_secs(1)).is_empty(), "an older reset says nothing");
        let notes = p.acknowledge_reset(at(30));
        assert!(notes[0].contains("acknowledgement"), "{notes:?}");
        let fine = obs(vec![with_xid(gpu(&[]), 79, 1)]);
        p.step(&fine, CheckKind::Scheduled, at(300));
        assert_eq!(p.step(&fine, CheckKind::Scheduled, at(360)).health, Health::Healthy);
    }

    #[test]
    fn restoring_keeps_the_quarantine_and_its_start() {
        let mut p = policy();
        let latch = Latch {
            reason: Reason {
                gpu: Some(0),
                uuid: "GPU-a".into(),
                code: "Xid79".into(),
                detail: "XID 79".into(),
                needs: Needs::Reset,
                first_seen: None,
            },
            since: at(0),
            ecc_baseline: Some(0),
            driver: Some("550.90.07".into()),
            seen_gone: false,
        };
        p.restore(Restored {
            since: at(0),
            reasons: vec![latch.reason.clone()],
            latches: vec![latch],
            rebooted: false,
            gpus: vec![],
            node_scope: None,
        });
        let v = p.step(&obs(vec![gpu(&[])]), CheckKind::Scheduled, at(1000));
        assert_eq!(v.health, Health::Unhealthy, "the latch survives the restart");
        assert_eq!(v.since, Some(at(0)));
        assert_eq!(v.reasons[0].code, "Xid79");
        assert_eq!(v.reasons.len(), 1);
    }

    #[test]
    fn nothing_changes_while_the_gpus_cannot_be_seen() {
        let mut p = policy();
        p.step(&obs(vec![gpu(&[SignalKind::GpuLost])]), CheckKind::Scheduled, at(0));
        let mut blind = obs(vec![]);
        blind.observable = false;
        for i in 1..10 {
            let v = p.step(&blind, CheckKind::Scheduled, at(i * 600));
            assert_eq!(v.health, Health::Unhealthy);
        }
        let mut fresh = policy();
        assert_eq!(fresh.step(&blind, CheckKind::Scheduled, at(0)).health, Health::Unknown);
    }

    #[test]
    fn a_reason_that_joins_moves_the_primary_only_if_more_severe() {
        // GPU lost, then uncorrectable ECC (same rank, sorts first by name): stays GpuLost.
        let mut p = policy();
        p.step(&obs(vec![gpu(&[SignalKind::GpuLost])]), CheckKind::Event, at(0));
        let v =
            p.step(&obs(vec![gpu(&[SignalKind::GpuLost, SignalKind::EccUncorrected])]), CheckKind::Scheduled, at(60));
        assert_eq!(v.reasons.len(), 2);
        assert_eq!(v.primary_code(), "GpuLost");
        assert_eq!(v.reasons[0].code, "GpuLost", "the list starts with the primary reason");
        // XID 79, then the GPU is lost: Xid79 (needs a reset) stays.
        let mut p = policy();
        p.step(&obs(vec![with_xid(gpu(&[]), 79, 1)]), CheckKind::Event, at(0));
        let v = p.step(&obs(vec![with_xid(gpu(&[SignalKind::GpuLost]), 79, 1)]), CheckKind::Event, at(1));
        assert_eq!(v.primary_code(), "Xid79");
        // The reverse: lost first, then XID 79 (more severe) takes over.
        let mut p = policy();
        p.step(&obs(vec![gpu(&[SignalKind::GpuLost])]), CheckKind::Event, at(0) + Duration::from_millis(250));
        let v = p.step(&obs(vec![with_xid(gpu(&[SignalKind::GpuLost]), 79, 1)]), CheckKind::Event, at(1));
        assert_eq!(v.primary_code(), "Xid79");
        // Kept, and to the second: as the claim on the node writes it and reads it back.
        assert_eq!(v.reasons.iter().find(|r| r.code == "GpuLost").unwrap().first_seen, Some(at(0)));
    }

    #[test]
    fn a_driver_that_hangs_is_a_noisy_node_signal() {
        let mut p = policy();
        let mut hung = obs(vec![]);
        hung.nvml_failed = Some("NVML is down (init_hung)".into());
        p.step(&hung, CheckKind::Scheduled, at(0));
        p.step(&hung, CheckKind::Scheduled, at(60));
        let v = p.step(&hung, CheckKind::Scheduled, at(120));
        assert_eq!(v.health, Health::Unhealthy);
        assert_eq!(v.reasons[0].gpu, None);
        assert!(v.reasons[0].describe().starts_with("node: NvmlHung"));
    }

    /// GPU `i` of a node, with a DRA device of its own.
    fn dra_gpu(i: u32, signals: &[SignalKind]) -> GpuAssessment {
        let mut g = gpu(signals);
        g.index = i;
        g.uuid = format!("GPU-{i}");
        g.dra_devices =
            vec![DraDevice { driver: "gpu.nvidia.com".into(), pool: "node-a".into(), device: format!("gpu-{i}") }];
        g
    }

    /// Eight GPUs, the ones in `sick` with `signal`.
    fn eight(sick: &[u32], signal: SignalKind) -> Assessment {
        let one = [signal];
        obs((0..8).map(|i| dra_gpu(i, if sick.contains(&i) { &one[..] } else { &[] })).collect())
    }

    #[test]
    fn one_failed_gpu_of_eight_is_held_alone() {
        let mut p = policy();
        p.step(&eight(&[], SignalKind::GpuLost), CheckKind::Scheduled, at(0));
        let v = p.step(&eight(&[3], SignalKind::EccUncorrected), CheckKind::Event, at(5));
        assert_eq!(v.health, Health::Unhealthy);
        assert_eq!(v.node_scope, None, "only the GPU");
        assert!(!v.holds_node());
        assert_eq!(v.gpus.len(), 1);
        assert_eq!((v.gpus[0].index, v.gpus[0].since, v.gpus[0].primary_code()), (3, at(5), "EccUncorrected"));
        assert_eq!(v.gpus[0].devices[0].device, "gpu-3");
    }

    #[test]
    fn each_gpu_recovers_on_its_own_schedule() {
        let mut p = policy();
        let both =
            obs((0..8).map(|i| dra_gpu(i, if i == 1 { &[SignalKind::EccUncorrected][..] } else { &[] })).collect());
        p.step(&both, CheckKind::Scheduled, at(0));
        let mut later = both.clone();
        later.gpus[1].signals.clear();
        later.gpus[2].signals.push(Signal { kind: SignalKind::RowRemapFailed, detail: "seen".into() });
        // GPU 2 fails while GPU 1 is still held: two of eight, so the node is held for now.
        let v = p.step(&later, CheckKind::Scheduled, at(200));
        assert_eq!(v.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![1, 2]);
        assert!(v.holds_node(), "two of eight: the node");
        let mut calm = later.clone();
        calm.gpus[2].signals.clear();
        // GPU 1: healthy at 200, 260, 320; its 300 s are served at 320.
        p.step(&calm, CheckKind::Scheduled, at(260));
        let v = p.step(&calm, CheckKind::Scheduled, at(320));
        assert_eq!(v.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![2], "GPU 1 released, GPU 2 not yet");
        assert!(v.notes.iter().any(|n| n.starts_with("GPU 1 recovered")), "{:?}", v.notes);
        let v = p.step(&calm, CheckKind::Scheduled, at(520));
        assert_eq!(v.health, Health::Healthy);
        assert!(v.gpus.is_empty());
    }

    #[test]
    fn three_of_eight_hold_the_node_and_say_why() {
        let mut p = policy();
        let v = p.step(&eight(&[1, 4, 6], SignalKind::GpuLost), CheckKind::Event, at(0));
        assert!(v.holds_node());
        let why = v.node_scope.unwrap();
        assert!(why.contains("3 of 8 GPUs failed"), "{why}");
        assert!(why.contains("--health.gpu-quarantine.max-fraction 0.125"), "{why}");
        assert_eq!(v.gpus.len(), 3, "the GPUs are still named");
    }

    #[test]
    fn a_device_plugin_gpu_holds_the_node() {
        let mut p = policy();
        let mut o = eight(&[2], SignalKind::GpuLost);
        for g in &mut o.gpus {
            g.dra_devices.clear();
        }
        let v = p.step(&o, CheckKind::Event, at(0));
        let why = v.node_scope.unwrap();
        assert!(why.contains("GPU 2 is handed out by a device plugin"), "{why}");
    }

    #[test]
    fn a_cluster_without_device_taints_holds_the_node() {
        let mut p = policy();
        p.set_device_taints(DeviceTaints::Unavailable("the API server serves no DeviceTaintRule".into()));
        let v = p.step(&eight(&[2], SignalKind::GpuLost), CheckKind::Event, at(0));
        assert!(v.node_scope.unwrap().starts_with("the API server serves no DeviceTaintRule"));
        let mut off = PolicyState::new(PolicySettings { gpu_max_fraction: 0.0, ..settings() }, XidTable::default());
        let v = off.step(&eight(&[2], SignalKind::GpuLost), CheckKind::Event, at(0));
        assert!(v.node_scope.unwrap().contains("per-GPU quarantine is off"));
    }

    #[test]
    fn a_node_wide_signal_holds_the_node() {
        let mut p = policy();
        let mut hung = eight(&[], SignalKind::GpuLost);
        hung.nvml_failed = Some("NVML is down (init_hung)".into());
        for (i, t) in [0, 60, 120].into_iter().enumerate() {
            let v = p.step(&hung, CheckKind::Scheduled, at(t));
            assert_eq!(v.health == Health::Unhealthy, i == 2);
        }
        assert!(
            p.step(&hung, CheckKind::Scheduled, at(180)).node_scope.unwrap().contains("node-wide signal (NvmlHung)")
        );
    }

    #[test]
    fn the_node_is_let_go_only_after_the_hysteresis() {
        let mut p = policy();
        p.step(&eight(&[1, 2], SignalKind::EccUncorrected), CheckKind::Event, at(0));
        // GPU 2's reason clears, GPU 1's stays; GPU 2 is held until it recovers.
        let one = eight(&[1], SignalKind::EccUncorrected);
        assert!(p.step(&one, CheckKind::Scheduled, at(60)).holds_node(), "two of eight still held");
        assert!(p.step(&one, CheckKind::Scheduled, at(120)).holds_node());
        let v = p.step(&one, CheckKind::Scheduled, at(300));
        assert_eq!(v.gpus.len(), 1, "GPU 2 served its time");
        assert!(v.holds_node(), "one calm check of two");
        assert!(p.step(&one, CheckKind::Event, at(301)).holds_node(), "events do not count");
        let v = p.step(&one, CheckKind::Scheduled, at(360));
        assert!(!v.holds_node());
        assert!(v.notes.iter().any(|n| n.contains("the fault is down to GPU 1")), "{:?}", v.notes);
        // Widening again is immediate.
        assert!(p.step(&eight(&[1, 5], SignalKind::EccUncorrected), CheckKind::Event, at(361)).holds_node());
    }

    #[test]
    fn a_held_gpu_keeps_its_devices_when_a_cycle_publishes_none() {
        let mut p = policy();
        p.step(&eight(&[3], SignalKind::EccUncorrected), CheckKind::Event, at(0));
        let mut blank = eight(&[3], SignalKind::EccUncorrected);
        for g in &mut blank.gpus {
            g.dra_devices.clear();
        }
        let v = p.step(&blank, CheckKind::Scheduled, at(60));
        assert!(!v.holds_node(), "no cordon because the slices were briefly not known");
        assert_eq!(v.gpus[0].devices[0].device, "gpu-3");
    }

    #[test]
    fn a_gpu_not_seen_does_not_count_towards_its_recovery() {
        let mut p = policy();
        p.step(&eight(&[3], SignalKind::GpuLost), CheckKind::Event, at(0));
        let mut without = eight(&[], SignalKind::GpuLost);
        without.gpus.retain(|g| g.index != 3);
        for t in [400, 460, 520] {
            assert_eq!(p.step(&without, CheckKind::Scheduled, at(t)).health, Health::Unhealthy);
        }
        let fine = eight(&[], SignalKind::GpuLost);
        p.step(&fine, CheckKind::Scheduled, at(580));
        assert_eq!(p.step(&fine, CheckKind::Scheduled, at(640)).health, Health::Healthy);
    }

    #[test]
    fn restoring_keeps_each_gpus_start_and_the_scope() {
        let mut p = policy();
        let reason = |i: u32| Reason {
            gpu: Some(i),
            uuid: format!("GPU-{i}"),
            code: "EccUncorrected".into(),
            detail: "d".into(),
            needs: Needs::Nothing,
            first_seen: None,
        };
        p.restore(Restored {
            since: at(0),
            reasons: vec![reason(1), reason(2)],
            latches: vec![],
            rebooted: false,
            gpus: vec![RestoredGpu { index: 2, since: at(100), devices: vec![] }],
            node_scope: Some("2 of 8 GPUs failed".into()),
        });
        let fine = eight(&[], SignalKind::GpuLost);
        let v = p.step(&fine, CheckKind::Scheduled, at(250));
        assert_eq!(v.gpus.iter().map(|g| g.since).collect::<Vec<_>>(), vec![at(0), at(100)]);
        assert!(v.holds_node());
        p.step(&fine, CheckKind::Scheduled, at(310));
        let v = p.step(&fine, CheckKind::Scheduled, at(370));
        assert_eq!(v.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![2], "GPU 1 served its 300 s, GPU 2 not");
        assert!(!v.holds_node(), "1 of 8 with its device: narrowed");
    }
}
