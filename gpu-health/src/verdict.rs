//! The verdict's vocabulary: what the policy says about a node and its GPUs, and what
//! the node's claim, the plan, the metrics and the log name. A [`Verdict`] lists
//! [`Reason`]s (a code, a detail, what it takes to clear it: [`Needs`]), the GPUs held
//! on their own ([`HeldGpu`]) and the [`Latch`]es that hold a GPU until a reset or
//! reboot; [`primary_order`] picks the one reason the taint, the condition and the
//! Events name. How a verdict is reached is the policy's ([`crate::policy`], which
//! re-exports these names); this module only says what the words mean, so that the
//! claim, the plan and the metrics read it without the policy's state.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::observation::DraDevice;
use crate::signals::{Severity, SignalKind};

/// What it takes to clear a reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Needs {
    /// Clears when the signal is gone.
    #[default]
    Nothing,
    /// Clears once the GPU has been reset (or the node rebooted).
    Reset,
    /// Clears once the node has been rebooted.
    Reboot,
}

/// One reason the node is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reason {
    /// GPU index; `None` for the node as a whole (NVML itself failing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// `Xid79`, `EccUncorrected`, ...: the taint value and condition reason.
    pub code: String,
    pub detail: String,
    #[serde(default, skip_serializing_if = "is_nothing")]
    pub needs: Needs,
    /// When the policy first confirmed it in this episode, to the second (as it is
    /// kept on the node); it decides between reasons of equal severity (see [`primary`]). `None` in claims written before it was
    /// recorded: taken as older than any recorded one.
    #[serde(default, rename = "firstSeen", skip_serializing_if = "Option::is_none", with = "crate::time::rfc3339_opt")]
    pub first_seen: Option<SystemTime>,
}

fn is_nothing(n: &Needs) -> bool {
    *n == Needs::Nothing
}

impl Reason {
    /// `GPU 0 (GPU-…): Xid79: detail`.
    pub fn describe(&self) -> String {
        let needs = match self.needs {
            Needs::Nothing => "",
            Needs::Reset => "; needs a GPU reset",
            Needs::Reboot => "; needs a node reboot",
        };
        match self.gpu {
            Some(i) if self.uuid.is_empty() => format!("GPU {i}: {}: {}{needs}", self.code, self.detail),
            Some(i) => format!("GPU {i} ({}): {}: {}{needs}", self.uuid, self.code, self.detail),
            None => format!("node: {}: {}{needs}", self.code, self.detail),
        }
    }
}

/// How much a reason says about the node, for choosing the primary reason: what it
/// takes to clear it first (a node reboot, a GPU reset, nothing), then whether it is
/// fatal or a noisy reading that was debounced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// A noisy signal (temperature, corrected ECC, slowdown, a hung call), or a code
    /// this version does not know.
    Noisy,
    /// A fatal signal that clears when it is gone (lost GPU, uncorrectable ECC, an
    /// XID of class quarantine, ...).
    Fatal,
    /// Held until the GPU is reset (an XID of class reset).
    NeedsReset,
    /// Held until the node reboots (an XID of class reboot).
    NeedsReboot,
}

impl Rank {
    pub fn of(reason: &Reason) -> Rank {
        match reason.needs {
            Needs::Reboot => Rank::NeedsReboot,
            Needs::Reset => Rank::NeedsReset,
            Needs::Nothing => match SignalKind::from_code(&reason.code).map(SignalKind::severity) {
                Some(Severity::Fatal) => Rank::Fatal,
                Some(Severity::Noisy) | None => Rank::Noisy,
            },
        }
    }
}

/// The order reasons are listed in: the primary reason first.
///
/// Most severe first ([`Rank`]); among equals, the one seen first; then by GPU and
/// code, so that the order never depends on the order of discovery within a check.
/// Hence the primary reason is stable: a reason that joins later with the same or a
/// lower rank never displaces it, and it moves only when a more severe reason joins or
/// it clears itself. The taint value, the condition reason and the Events all name
/// this one reason.
pub fn primary_order(a: &Reason, b: &Reason) -> std::cmp::Ordering {
    Rank::of(b)
        .cmp(&Rank::of(a))
        .then_with(|| a.first_seen.cmp(&b.first_seen))
        .then_with(|| a.gpu.cmp(&b.gpu))
        .then_with(|| a.code.cmp(&b.code))
        .then_with(|| a.detail.cmp(&b.detail))
}

/// The primary reason among `reasons`: the first by [`primary_order`].
pub fn primary(reasons: &[Reason]) -> Option<&Reason> {
    reasons.iter().min_by(|a, b| primary_order(a, b))
}

/// A condition that holds the node unhealthy until evidence of a reset or reboot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Latch {
    pub reason: Reason,
    #[serde(with = "crate::time::rfc3339")]
    pub since: SystemTime,
    /// Volatile ECC errors when it was set; fewer later means the GPU was reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_baseline: Option<u64>,
    /// Driver version when it was set; another one later means the driver reloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The GPU went away (lost, unreadable) after it was set.
    #[serde(default)]
    pub seen_gone: bool,
}

/// The node's health as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Nothing observed yet.
    Unknown,
    Healthy,
    Unhealthy,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
        }
    }
}

/// A GPU the policy holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldGpu {
    pub index: u32,
    pub uuid: String,
    /// When it was held.
    pub since: SystemTime,
    /// Its reasons, in [`primary_order`].
    pub reasons: Vec<Reason>,
    /// Its DRA devices, as last published while it was held; empty on a device-plugin node.
    pub devices: Vec<DraDevice>,
}

impl HeldGpu {
    /// The reason its device taint names.
    pub fn primary_code(&self) -> &str {
        primary(&self.reasons).map_or("Unknown", |r| r.code.as_str())
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub health: Health,
    /// When the node became unhealthy (its earliest held GPU, or the node itself).
    pub since: Option<SystemTime>,
    /// Why it is unhealthy, in [`primary_order`]: the first is the primary reason.
    pub reasons: Vec<Reason>,
    /// Latched reasons, to be persisted on the node.
    pub latches: Vec<Latch>,
    /// Noisy signals seen but not (yet) confirmed.
    pub pending: Vec<Reason>,
    /// XIDs recorded without action, and latches cleared by evidence: for the log.
    pub notes: Vec<String>,
    /// Health, reasons or scope differ from the previous verdict.
    pub changed: bool,
    /// The GPUs held, by index.
    pub gpus: Vec<HeldGpu>,
    /// Why the whole node is held rather than only its GPUs; `None` while only GPUs are
    /// held, or nothing is.
    pub node_scope: Option<String>,
}

impl Verdict {
    /// The reason the taint, the condition and the Events name (see [`primary_order`]).
    pub fn primary(&self) -> Option<&Reason> {
        primary(&self.reasons)
    }

    /// The primary reason's code, `Unknown` when there is none.
    pub fn primary_code(&self) -> &str {
        self.primary().map_or("Unknown", |r| r.code.as_str())
    }

    /// Whether the quarantine is the node's (cordon and taint) rather than device taints
    /// on the held GPUs: the node is unhealthy, and either the policy widened to the
    /// node or there is no GPU to hold on its own.
    pub fn holds_node(&self) -> bool {
        self.health == Health::Unhealthy && (self.node_scope.is_some() || self.gpus.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn reason(code: &str, needs: Needs, seen: Option<u64>) -> Reason {
        Reason {
            gpu: Some(0),
            uuid: "GPU-a".into(),
            code: code.into(),
            detail: "d".into(),
            needs,
            first_seen: seen.map(at),
        }
    }

    #[test]
    fn the_primary_reason_is_the_most_severe_then_the_first_seen() {
        let codes = |rs: &[Reason]| primary(rs).map(|r| r.code.clone());
        // Needs a reset beats a fatal signal, whichever came first.
        let xid = reason("Xid79", Needs::Reset, Some(10));
        let lost = reason("GpuLost", Needs::Nothing, Some(0));
        assert_eq!(codes(&[lost.clone(), xid.clone()]).as_deref(), Some("Xid79"));
        assert_eq!(codes(&[xid.clone(), lost.clone()]).as_deref(), Some("Xid79"));
        // A reboot beats a reset.
        let reboot = reason("Xid62", Needs::Reboot, Some(20));
        assert_eq!(codes(&[xid.clone(), reboot.clone()]).as_deref(), Some("Xid62"));
        // Equal rank: the first seen, not the first in the alphabet.
        let ecc = reason("EccUncorrected", Needs::Nothing, Some(5));
        assert_eq!(codes(&[ecc.clone(), lost.clone()]).as_deref(), Some("GpuLost"));
        let early_ecc = reason("EccUncorrected", Needs::Nothing, Some(0));
        let late_lost = reason("GpuLost", Needs::Nothing, Some(5));
        assert_eq!(codes(&[late_lost, early_ecc]).as_deref(), Some("EccUncorrected"));
        // Fatal beats noisy, even a noisy reason seen long before.
        let hot = reason("Temperature", Needs::Nothing, Some(0));
        assert_eq!(codes(&[hot.clone(), ecc.clone()]).as_deref(), Some("EccUncorrected"));
        // An unknown code ranks as noisy; a reason from an older claim (no time) is the oldest.
        assert_eq!(Rank::of(&reason("SomethingNew", Needs::Nothing, None)), Rank::Noisy);
        let old = reason("RowRemapFailed", Needs::Nothing, None);
        assert_eq!(codes(&[ecc, old]).as_deref(), Some("RowRemapFailed"));
        assert_eq!(codes(&[]), None);
    }
}
