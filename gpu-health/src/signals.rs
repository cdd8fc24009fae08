//! Readings to health signals: what is wrong with each GPU right now, as plain data.
//!
//! A signal is a condition seen in one snapshot: a level (an ECC counter, a flag, a
//! temperature) or a state (lost, hung). XIDs are events, not levels: the observation
//! carries their counts and the policy ([`crate::policy`]) turns new occurrences into
//! signals through the classification table ([`crate::xid`]). Nothing here keeps
//! state or does I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::observation::{DraDevice, GpuReadings, GpuState, Nvml, Observation, Recovery};

/// NVML clock-event bit: hardware thermal slowdown.
pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
/// NVML clock-event bit: hardware power-brake slowdown (the board's power supply asked).
pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;

/// The limits a reading is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// A GPU at or over this temperature is too hot (`TEMPERATURE_THRESHOLD`).
    pub temperature_c: u32,
    /// A GPU within this many degrees of its own slowdown threshold is too hot.
    pub slowdown_margin_c: u32,
    /// Corrected ECC errors since the last reset at or over which the memory is
    /// suspect (`MEMORY_ERROR_THRESHOLD`); 0 turns the signal off.
    pub corrected_ecc: u64,
    /// Retired pages (single- plus double-bit) at or over which the GPU needs service.
    pub retired_pages: u64,
    /// Whether an NVLink link NVML reports down is a signal (`--health.nvlink-down`).
    /// Off by default: a board whose links are not all wired (or a link an
    /// administrator turned off) would read as broken.
    pub nvlink_down: bool,
    /// NVLink data-link errors on one link since the driver loaded or the last reset
    /// (CRC flit + CRC data + replay + recovery) at or over which the link is failing
    /// (`--health.nvlink-error-threshold`); 0 turns the signal off, the default.
    pub nvlink_errors: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            temperature_c: 90,
            slowdown_margin_c: 5,
            corrected_ecc: 10,
            retired_pages: 60,
            nvlink_down: false,
            nvlink_errors: 0,
        }
    }
}

/// What a signal says, without the GPU it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SignalKind {
    /// NVML answers `GPU_IS_LOST`: the GPU fell off the bus.
    GpuLost,
    /// An XID code of class quarantine, reset or reboot was reported.
    Xid(u64),
    /// Uncorrectable ECC errors since the last reset (volatile counter above 0).
    EccUncorrected,
    /// A row remapping failed: the GPU has no spare rows left.
    RowRemapFailed,
    /// A row remapping waits for a GPU reset.
    RowRemapPending,
    /// A page retirement waits for the next driver reload.
    RetiredPagesPending,
    /// More pages retired than the limit.
    RetiredPagesLimit,
    /// The driver's recovery action asks for a GPU reset.
    RecoveryReset,
    /// The driver's recovery action asks for a node reboot.
    RecoveryReboot,
    /// Corrected ECC errors since the last reset at or over the threshold.
    EccCorrected,
    /// Temperature at or over the threshold, or within the margin of slowdown.
    Temperature,
    /// The GPU's hardware thermal slowdown is lowering its clocks.
    ThermalSlowdown,
    /// The board's power brake is lowering the clocks.
    PowerBrakeSlowdown,
    /// An NVLink link is down (only with `Thresholds::nvlink_down`).
    NvLinkDown,
    /// An NVLink link's error count since the last reset is at or over the threshold.
    NvLinkErrors,
    /// An NVML call on the GPU is past its deadline.
    NvmlHung,
    /// The GPU could not be read for another reason.
    GpuUnreadable,
}

/// How a signal is acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Act on the first check that sees it.
    Fatal,
    /// Act only after `--health.debounce-checks` consecutive checks see it.
    Noisy,
}

impl SignalKind {
    /// A short CamelCase word for the taint value, the condition reason and labels.
    pub fn code(self) -> String {
        match self {
            Self::Xid(code) => format!("Xid{code}"),
            other => other.static_code().to_string(),
        }
    }

    /// The signal a [`code`](Self::code) names; `None` for a code this version does
    /// not know (a claim written by another version).
    pub fn from_code(code: &str) -> Option<SignalKind> {
        if let Some(n) = code.strip_prefix("Xid") {
            return n.parse().ok().map(Self::Xid);
        }
        const ALL: [SignalKind; 16] = [
            SignalKind::GpuLost,
            SignalKind::EccUncorrected,
            SignalKind::RowRemapFailed,
            SignalKind::RowRemapPending,
            SignalKind::RetiredPagesPending,
            SignalKind::RetiredPagesLimit,
            SignalKind::RecoveryReset,
            SignalKind::RecoveryReboot,
            SignalKind::EccCorrected,
            SignalKind::Temperature,
            SignalKind::ThermalSlowdown,
            SignalKind::PowerBrakeSlowdown,
            SignalKind::NvLinkDown,
            SignalKind::NvLinkErrors,
            SignalKind::NvmlHung,
            SignalKind::GpuUnreadable,
        ];
        ALL.into_iter().find(|k| k.static_code() == code)
    }

    fn static_code(self) -> &'static str {
        match self {
            Self::GpuLost => "GpuLost",
            Self::Xid(_) => "Xid",
            Self::EccUncorrected => "EccUncorrected",
            Self::RowRemapFailed => "RowRemapFailed",
            Self::RowRemapPending => "RowRemapPending",
            Self::RetiredPagesPending => "RetiredPagesPending",
            Self::RetiredPagesLimit => "RetiredPagesLimit",
            Self::RecoveryReset => "RecoveryActionReset",
            Self::RecoveryReboot => "RecoveryActionReboot",
            Self::EccCorrected => "EccCorrected",
            Self::Temperature => "Temperature",
            Self::ThermalSlowdown => "ThermalSlowdown",
            Self::PowerBrakeSlowdown => "PowerBrakeSlowdown",
            Self::NvLinkDown => "NvLinkDown",
            Self::NvLinkErrors => "NvLinkErrors",
            Self::NvmlHung => "NvmlHung",
            Self::GpuUnreadable => "GpuUnreadable",
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            Self::GpuLost
            | Self::Xid(_)
            | Self::EccUncorrected
            | Self::RowRemapFailed
            | Self::RowRemapPending
            | Self::RetiredPagesPending
            | Self::RetiredPagesLimit
            | Self::RecoveryReset
            | Self::RecoveryReboot => Severity::Fatal,
            Self::EccCorrected
            | Self::Temperature
            | Self::ThermalSlowdown
            | Self::PowerBrakeSlowdown
            | Self::NvLinkDown
            | Self::NvLinkErrors
            | Self::NvmlHung
            | Self::GpuUnreadable => Severity::Noisy,
        }
    }
}

/// One signal seen on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub kind: SignalKind,
    /// What was seen, for the condition message and logs.
    pub detail: String,
}

/// Whether the GPU answered this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Ok,
    /// Lost, or its handle could not be had: if it answers again later, it was reset
    /// (or the driver reloaded).
    Gone,
    /// A call is past its deadline.
    Hung,
    /// Not read yet.
    Unknown,
}

/// One GPU as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAssessment {
    pub index: u32,
    pub uuid: String,
    pub availability: Availability,
    /// Level signals present now.
    pub signals: Vec<Signal>,
    /// XID counts since the exporter started, by code.
    pub xid_counts: BTreeMap<u64, u64>,
    /// Volatile ECC errors (corrected plus uncorrected); a reset zeroes them, so a
    /// drop is evidence of one.
    pub ecc_volatile: Option<u64>,
    /// The DRA devices published for the GPU (empty on a device-plugin node): what a
    /// device taint would select to keep this GPU alone from the scheduler.
    pub dra_devices: Vec<DraDevice>,
}

/// One observation as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub generation: u64,
    /// False while nothing can be said about the GPUs (NVML starting, or unusable for
    /// a reason that is not the GPUs' fault, such as a missing library).
    pub observable: bool,
    /// NVML is down in a way that says the GPUs or the driver are broken.
    pub nvml_failed: Option<String>,
    pub driver_version: Option<String>,
    pub gpus: Vec<GpuAssessment>,
}

impl Assessment {
    /// Whether a GPU reported an XID that `acts` says is acted on more often than in
    /// `earlier`, or was lost since `earlier`: such a snapshot is checked at once, not
    /// at the interval. (A flood of application XIDs does not turn into a flood of checks.)
    pub fn has_news_since(&self, earlier: &Assessment, acts: impl Fn(u64) -> bool) -> bool {
        self.gpus.iter().any(|gpu| {
            let before = earlier.gpus.iter().find(|g| g.index == gpu.index);
            let new_xid = gpu.xid_counts.iter().any(|(code, count)| {
                acts(*code)
                    && before.and_then(|b| b.xid_counts.get(code)).is_none_or(|earlier_count| count > earlier_count)
            });
            let newly_gone = gpu.signals.iter().any(|s| s.kind == SignalKind::GpuLost)
                && !before.is_some_and(|b| b.signals.iter().any(|s| s.kind == SignalKind::GpuLost));
            new_xid || newly_gone
        })
    }
}

/// Reads the signals out of an observation.
pub fn assess(observation: &Observation, limits: &Thresholds) -> Assessment {
    let (observable, nvml_failed, driver_version) = match &observation.nvml {
        Nvml::Up { driver_version, read } => (*read, None, Some(driver_version.clone())),
        Nvml::Starting | Nvml::Unusable => (false, None, None),
        Nvml::Failed(why) => (true, Some(why.clone()), None),
    };
    Assessment {
        generation: observation.generation,
        observable,
        nvml_failed,
        driver_version,
        gpus: observation.gpus.iter().map(|g| assess_gpu(g, limits)).collect(),
    }
}

fn assess_gpu(gpu: &GpuReadings, limits: &Thresholds) -> GpuAssessment {
    let mut signals = Vec::new();
    let mut push = |kind, detail: String| signals.push(Signal { kind, detail });
    let availability = availability(gpu, &mut push);
    memory_signals(gpu, limits, &mut push);
    match gpu.recovery {
        Some(Recovery::Reset) => push(SignalKind::RecoveryReset, "the driver asks for a GPU reset".into()),
        Some(Recovery::Reboot) => push(SignalKind::RecoveryReboot, "the driver asks for a node reboot".into()),
        None => {}
    }
    thermal_signals(gpu, limits, &mut push);
    nvlink_signals(gpu, limits, &mut push);
    GpuAssessment {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        availability,
        signals,
        xid_counts: gpu.xid_counts.clone(),
        ecc_volatile: gpu.ecc.map(|ecc| ecc.corrected.saturating_add(ecc.uncorrected)),
        dra_devices: gpu.dra_devices.clone(),
    }
}

/// Whether the GPU answered, and the signal when it did not.
fn availability(gpu: &GpuReadings, push: &mut impl FnMut(SignalKind, String)) -> Availability {
    match &gpu.state {
        GpuState::Ok => Availability::Ok,
        GpuState::Unknown => Availability::Unknown,
        GpuState::Lost => {
            push(SignalKind::GpuLost, "NVML reports the GPU lost (fallen off the bus)".into());
            Availability::Gone
        }
        GpuState::Failed { error } => {
            push(SignalKind::GpuUnreadable, format!("the GPU cannot be read: {error}"));
            Availability::Gone
        }
        GpuState::Stale { call } => {
            push(SignalKind::NvmlHung, format!("{call} is past its deadline"));
            Availability::Hung
        }
    }
}

/// ECC errors, row remapping and page retirement.
fn memory_signals(gpu: &GpuReadings, limits: &Thresholds, push: &mut impl FnMut(SignalKind, String)) {
    if let Some(ecc) = gpu.ecc {
        if ecc.uncorrected > 0 {
            push(
                SignalKind::EccUncorrected,
                format!("{} uncorrectable ECC errors since the last reset", ecc.uncorrected),
            );
        }
        if limits.corrected_ecc > 0 && ecc.corrected >= limits.corrected_ecc {
            push(
                SignalKind::EccCorrected,
                format!(
                    "{} corrected ECC errors since the last reset (threshold {})",
                    ecc.corrected, limits.corrected_ecc
                ),
            );
        }
    }
    if let Some(rows) = gpu.remapped_rows {
        if rows.failed {
            push(SignalKind::RowRemapFailed, "a row remapping failed: no spare rows left".into());
        }
        if rows.pending {
            push(SignalKind::RowRemapPending, "a row remapping waits for a GPU reset".into());
        }
    }
    if let Some(pages) = gpu.retired_pages {
        if limits.retired_pages > 0 && pages.retired >= limits.retired_pages {
            push(
                SignalKind::RetiredPagesLimit,
                format!("{} pages retired (limit {})", pages.retired, limits.retired_pages),
            );
        }
        if pages.pending {
            push(SignalKind::RetiredPagesPending, "a page retirement waits for a driver reload".into());
        }
    }
}

/// Temperature against the threshold and the GPU's own slowdown point, and the
/// hardware slowdowns the clocks report.
fn thermal_signals(gpu: &GpuReadings, limits: &Thresholds, push: &mut impl FnMut(SignalKind, String)) {
    if let Some(t) = gpu.temperature_celsius {
        let slowdown_near =
            gpu.temperature_slowdown_celsius.filter(|s| t.saturating_add(limits.slowdown_margin_c) >= *s && *s > 0);
        if t >= limits.temperature_c {
            push(SignalKind::Temperature, format!("{t} °C, at or over the threshold of {} °C", limits.temperature_c));
        } else if let Some(slowdown) = slowdown_near {
            push(
                SignalKind::Temperature,
                format!("{t} °C, within {} °C of the slowdown threshold {slowdown} °C", limits.slowdown_margin_c),
            );
        }
    }
    if let Some(active) = gpu.clock_events_active {
        if active & HW_THERMAL_SLOWDOWN != 0 {
            push(SignalKind::ThermalSlowdown, "hardware thermal slowdown is lowering the clocks".into());
        }
        if active & HW_POWER_BRAKE_SLOWDOWN != 0 {
            push(SignalKind::PowerBrakeSlowdown, "the power brake is lowering the clocks".into());
        }
    }
}

/// NVLink links down and links whose errors reached the threshold, one signal each
/// naming every link it concerns.
fn nvlink_signals(gpu: &GpuReadings, limits: &Thresholds, push: &mut impl FnMut(SignalKind, String)) {
    let list = |links: Vec<String>| links.join(", ");
    if limits.nvlink_down {
        let down: Vec<String> =
            gpu.nvlinks.iter().filter(|l| l.active == Some(false)).map(|l| l.link.to_string()).collect();
        if !down.is_empty() {
            push(SignalKind::NvLinkDown, format!("NVLink link {} down", list(down)));
        }
    }
    if limits.nvlink_errors > 0 {
        let failing: Vec<String> = gpu
            .nvlinks
            .iter()
            .filter_map(|l| l.errors.filter(|e| *e >= limits.nvlink_errors).map(|e| format!("{} ({e} errors)", l.link)))
            .collect();
        if !failing.is_empty() {
            push(
                SignalKind::NvLinkErrors,
                format!(
                    "NVLink link {} at or over {} data-link errors since the last reset",
                    list(failing),
                    limits.nvlink_errors
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::{Ecc, NvLink, RemappedRows, RetiredPages};

    fn observation(gpu: GpuReadings) -> Observation {
        Observation {
            nvml: Nvml::Up { driver_version: String::new(), read: true },
            gpus: vec![gpu],
            ..Observation::default()
        }
    }

    fn ok_gpu(readings: GpuReadings) -> GpuReadings {
        GpuReadings { uuid: "GPU-a".into(), state: GpuState::Ok, ..readings }
    }

    fn kinds(readings: GpuReadings, limits: &Thresholds) -> Vec<SignalKind> {
        assess(&observation(ok_gpu(readings)), limits).gpus[0].signals.iter().map(|s| s.kind).collect()
    }

    #[test]
    fn codes_name_their_signal_back() {
        for kind in [SignalKind::GpuLost, SignalKind::Xid(79), SignalKind::RecoveryReboot, SignalKind::GpuUnreadable] {
            assert_eq!(SignalKind::from_code(&kind.code()), Some(kind));
        }
        assert_eq!(SignalKind::from_code("Xid"), None);
        assert_eq!(SignalKind::from_code("Nope"), None);
    }

    #[test]
    fn a_healthy_gpu_has_no_signals() {
        let r = GpuReadings {
            temperature_celsius: Some(60),
            temperature_slowdown_celsius: Some(87),
            ecc: Some(Ecc { corrected: 9, uncorrected: 0 }),
            remapped_rows: Some(RemappedRows::default()),
            clock_events_active: Some(0x1 | 0x4),
            ..GpuReadings::default()
        };
        assert!(kinds(r, &Thresholds::default()).is_empty());
    }

    #[test]
    fn temperature_counts_at_the_threshold_and_near_slowdown() {
        let limits = Thresholds::default();
        let at = GpuReadings { temperature_celsius: Some(90), ..GpuReadings::default() };
        assert_eq!(kinds(at, &limits), vec![SignalKind::Temperature]);
        let below = GpuReadings { temperature_celsius: Some(89), ..GpuReadings::default() };
        assert!(kinds(below, &limits).is_empty());
        let near = GpuReadings {
            temperature_celsius: Some(82),
            temperature_slowdown_celsius: Some(87),
            ..GpuReadings::default()
        };
        let o = assess(&observation(ok_gpu(near)), &limits);
        assert_eq!(o.gpus[0].signals[0].kind, SignalKind::Temperature);
        assert!(o.gpus[0].signals[0].detail.contains("slowdown threshold 87"), "{:?}", o.gpus[0].signals);
    }

    fn links(links: &[(u32, Option<bool>, Option<u64>)]) -> GpuReadings {
        let nvlinks = links.iter().map(|&(link, active, errors)| NvLink { link, active, errors }).collect();
        GpuReadings { nvlinks, ..GpuReadings::default() }
    }

    #[test]
    fn nvlink_signals_are_off_by_default() {
        let r = links(&[(0, Some(false), Some(1_000_000)), (1, Some(true), Some(0))]);
        assert!(kinds(r, &Thresholds::default()).is_empty());
    }

    #[test]
    fn a_link_down_is_a_signal_when_asked_for() {
        let limits = Thresholds { nvlink_down: true, ..Thresholds::default() };
        let r = links(&[(0, Some(true), None), (3, Some(false), None), (7, Some(false), None), (8, None, None)]);
        let o = assess(&observation(ok_gpu(r)), &limits);
        let signals = &o.gpus[0].signals;
        assert_eq!(signals.len(), 1, "{signals:?}");
        assert_eq!(signals[0].kind, SignalKind::NvLinkDown);
        assert_eq!(signals[0].detail, "NVLink link 3, 7 down", "an unread state is not a link down");
        assert!(kinds(links(&[(0, Some(true), None)]), &limits).is_empty());
        assert_eq!(SignalKind::NvLinkDown.severity(), Severity::Noisy);
    }

    #[test]
    fn link_errors_count_at_the_threshold_and_absent_counters_never_do() {
        let limits = Thresholds { nvlink_errors: 100, ..Thresholds::default() };
        assert!(kinds(links(&[(0, Some(true), Some(99)), (1, Some(true), None)]), &limits).is_empty());
        let r = links(&[(0, Some(true), Some(99)), (1, Some(true), Some(100)), (2, Some(true), Some(5000))]);
        let o = assess(&observation(ok_gpu(r)), &limits);
        assert_eq!(o.gpus[0].signals.len(), 1);
        assert_eq!(o.gpus[0].signals[0].kind, SignalKind::NvLinkErrors);
        assert!(o.gpus[0].signals[0].detail.contains("1 (100 errors), 2 (5000 errors)"), "{:?}", o.gpus[0].signals);
        assert_eq!(SignalKind::from_code("NvLinkErrors"), Some(SignalKind::NvLinkErrors));
        assert_eq!(SignalKind::from_code("NvLinkDown"), Some(SignalKind::NvLinkDown));
    }

    #[test]
    fn memory_signals() {
        let limits = Thresholds::default();
        let r = GpuReadings {
            ecc: Some(Ecc { corrected: 10, uncorrected: 1 }),
            remapped_rows: Some(RemappedRows { pending: true, failed: true }),
            retired_pages: Some(RetiredPages { retired: 60, pending: true }),
            ..GpuReadings::default()
        };
        assert_eq!(
            kinds(r, &limits),
            vec![
                SignalKind::EccUncorrected,
                SignalKind::EccCorrected,
                SignalKind::RowRemapFailed,
                SignalKind::RowRemapPending,
                SignalKind::RetiredPagesLimit,
                SignalKind::RetiredPagesPending,
            ]
        );
        let off = Thresholds { corrected_ecc: 0, ..limits };
        let r = GpuReadings { ecc: Some(Ecc { corrected: 1000, uncorrected: 0 }), ..GpuReadings::default() };
        assert!(kinds(r, &off).is_empty(), "threshold 0 turns the corrected-ECC signal off");
    }

    #[test]
    fn clocks_and_recovery_action() {
        let r = GpuReadings {
            clock_events_active: Some(HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN | 0x8),
            recovery: Some(Recovery::Reboot),
            ..GpuReadings::default()
        };
        assert_eq!(
            kinds(r, &Thresholds::default()),
            vec![SignalKind::RecoveryReboot, SignalKind::ThermalSlowdown, SignalKind::PowerBrakeSlowdown]
        );
    }

    #[test]
    fn states_become_signals_and_xids_are_counted() {
        let mut lost = GpuReadings { state: GpuState::Lost, ..GpuReadings::default() };
        lost.xid_counts.insert(79, 2);
        let o = assess(&observation(lost), &Thresholds::default());
        assert_eq!(o.gpus[0].availability, Availability::Gone);
        assert_eq!(o.gpus[0].signals[0].kind, SignalKind::GpuLost);
        assert_eq!(o.gpus[0].xid_counts[&79], 2);
        let hung =
            GpuReadings { state: GpuState::Stale { call: "nvmlDeviceGetPowerUsage".into() }, ..GpuReadings::default() };
        let o = assess(&observation(hung), &Thresholds::default());
        assert_eq!(o.gpus[0].signals[0].kind, SignalKind::NvmlHung);
        assert_eq!(o.gpus[0].availability, Availability::Hung);
    }

    #[test]
    fn news_is_a_new_xid_or_a_newly_lost_gpu() {
        let limits = Thresholds::default();
        let base = assess(&observation(ok_gpu(GpuReadings::default())), &limits);
        let mut with_xid = ok_gpu(GpuReadings::default());
        with_xid.xid_counts.insert(13, 1);
        let xid = assess(&observation(with_xid), &limits);
        assert!(xid.has_news_since(&base, |_| true));
        assert!(!xid.has_news_since(&base, |code| code != 13), "an XID that is only recorded is no news");
        assert!(!xid.has_news_since(&xid, |_| true));
        let lost = assess(&observation(GpuReadings { state: GpuState::Lost, ..GpuReadings::default() }), &limits);
        assert!(lost.has_news_since(&base, |_| true));
        assert!(!lost.has_news_since(&lost, |_| true));
    }

    #[test]
    fn nvml_down_is_unobservable_unless_the_driver_is_at_fault() {
        let limits = Thresholds::default();
        let missing = Observation { nvml: Nvml::Unusable, ..Observation::default() };
        assert!(!assess(&missing, &limits).observable);
        let hung = Observation {
            nvml: Nvml::Failed("NVML is down (init_hung): nvmlInit hung".into()),
            ..Observation::default()
        };
        let o = assess(&hung, &limits);
        assert!(o.observable);
        assert!(o.nvml_failed.unwrap().contains("init_hung"));
        assert!(!assess(&Observation::default(), &limits).observable, "starting");
    }
}
