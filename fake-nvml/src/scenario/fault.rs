//! Faults a scenario schedules on a GPU: what happens, and at which scenario second.
//!
//! Each list entry has `at_s` and exactly one fault key, for example
//! `{at_s: 30, xid: 79}`, `{at_s: 10, hang: {call: nvmlDeviceGetPowerUsage, for_s: 5}}`
//! or `{at_s: 0, error: {call: nvmlDeviceGetEccMode, code: UNKNOWN, for_s: 3}}`.

use serde::Deserialize;

use crate::calls::{DEVICE_CALLS, mig_handle_answers};
use crate::models::Model;

/// A scheduled fault.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawFault")]
pub struct Fault {
    /// Scenario time (seconds since `nvmlInit`) at which it starts.
    pub at_s: f64,
    pub kind: FaultKind,
}

/// What goes wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// An XID error, delivered once to every event set registered for XID events.
    Xid(u64),
    /// The GPU falls off the bus: every call on it answers `NVML_ERROR_GPU_IS_LOST`
    /// until a `reset`.
    Lost,
    /// Calls to one NVML function (or `"*"`: all of them) on this GPU block until the
    /// window ends.
    Hang { call: String, for_s: f64 },
    /// Calls to one NVML function (or `"*"`) answer an NVML error code for `for_s`
    /// seconds: on the GPU's own handle, or with `mig` on that MIG device's handle
    /// only. `nvmlDeviceGetFieldValues` reports the code in each requested field and
    /// the call itself succeeds, as the driver reports per-field failures.
    Error(ErrorFault),
    /// ECC errors counted at once in both the volatile and the aggregate counters.
    EccErrors { corrected: u64, uncorrected: u64 },
    /// The temperature climbs linearly from its value at `at_s` to `to` over `over_s`,
    /// then stays there until a `reset`.
    TemperatureRamp { to: f64, over_s: f64 },
    /// Clock-event (throttle) reasons held active, for `for_s` seconds or for good.
    ClockEvents { reasons: Vec<ClockEventReason>, for_s: Option<f64> },
    /// Rows remapped (added to the counts) and the pending / failure flags set.
    RemappedRows { correctable: u32, uncorrectable: u32, pending: bool, failed: bool },
    /// Pages retired (pre-Ampere), added to the counts, and the pending flag.
    RetiredPages { single_bit: u32, double_bit: u32, pending: bool },
    /// The driver asks for a recovery action (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`).
    RecoveryAction(RecoveryAction),
    /// PCIe replays added to the replay counter.
    PcieReplays(u64),
    /// NVLink link `link` goes down (`nvmlDeviceGetNvLinkState` answers disabled and it
    /// carries no data) for `for_s` seconds, or until a `reset`.
    NvLinkDown { link: u32, for_s: Option<f64> },
    /// NVLink data-link errors added to link `link`'s counters.
    NvLinkErrors { link: u32, counts: NvLinkErrorCounts },
    /// A GPU reset: the GPU is back if it was lost, volatile ECC counters and NVLink
    /// error counters clear, NVLink links come back up, pending row remaps and page
    /// retirements are applied, the recovery action and any temperature ramp end.
    Reset,
}

/// NVLink error counts, by `nvmlNvLinkErrorCounter_t` counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvLinkErrorCounts {
    pub crc_flit: u64,
    pub crc_data: u64,
    pub replay: u64,
    pub recovery: u64,
}

impl NvLinkErrorCounts {
    /// The count of `NVML_NVLINK_ERROR_DL_*` counter `counter` (0 replay, 1 recovery,
    /// 2 CRC flit, 3 CRC data; `nvml.h`'s `nvmlNvLinkErrorCounter_t`).
    pub fn of(&self, counter: u32) -> Option<u64> {
        match counter {
            0 => Some(self.replay),
            1 => Some(self.recovery),
            2 => Some(self.crc_flit),
            3 => Some(self.crc_data),
            _ => None,
        }
    }
}

/// A transient error on one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorFault {
    pub call: String,
    pub code: ErrorCode,
    pub for_s: f64,
    /// Position of the MIG device in the GPU's `mig` list; `None`: the GPU's own handle.
    pub mig: Option<u32>,
}

/// NVML error codes a scenario can inject, named as in `NVML_ERROR_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    Uninitialized,
    InvalidArgument,
    /// Not transient on a real driver: a consumer that remembers it is right to.
    NotSupported,
    NoPermission,
    NotFound,
    InsufficientSize,
    InsufficientPower,
    DriverNotLoaded,
    Timeout,
    IrqIssue,
    GpuIsLost,
    ResetRequired,
    OperatingSystem,
    LibRmVersionMismatch,
    InUse,
    Memory,
    NoData,
    Unknown,
}

impl ErrorCode {
    /// The `nvmlReturn_t` value.
    pub fn code(self) -> u32 {
        match self {
            Self::Uninitialized => 1,
            Self::InvalidArgument => 2,
            Self::NotSupported => 3,
            Self::NoPermission => 4,
            Self::NotFound => 6,
            Self::InsufficientSize => 7,
            Self::InsufficientPower => 8,
            Self::DriverNotLoaded => 9,
            Self::Timeout => 10,
            Self::IrqIssue => 11,
            Self::GpuIsLost => 15,
            Self::ResetRequired => 16,
            Self::OperatingSystem => 17,
            Self::LibRmVersionMismatch => 18,
            Self::InUse => 19,
            Self::Memory => 20,
            Self::NoData => 21,
            Self::Unknown => 999,
        }
    }
}

/// `nvmlClocksEventReasons` bits, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockEventReason {
    GpuIdle,
    ApplicationsClocksSetting,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
}

impl ClockEventReason {
    /// The reason's bit in NVML's mask.
    pub fn bit(self) -> u64 {
        match self {
            Self::GpuIdle => 0x1,
            Self::ApplicationsClocksSetting => 0x2,
            Self::SwPowerCap => 0x4,
            Self::HwSlowdown => 0x8,
            Self::SyncBoost => 0x10,
            Self::SwThermalSlowdown => 0x20,
            Self::HwThermalSlowdown => 0x40,
            Self::HwPowerBrakeSlowdown => 0x80,
            Self::DisplayClockSetting => 0x100,
        }
    }
}

/// `nvmlDeviceGpuRecoveryAction_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    DrainP2p,
    DrainAndReset,
}

impl RecoveryAction {
    pub fn code(self) -> u32 {
        match self {
            Self::None => 0,
            Self::GpuReset => 1,
            Self::NodeReboot => 2,
            Self::DrainP2p => 3,
            Self::DrainAndReset => 4,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at_s: f64,
    xid: Option<u64>,
    lost: Option<bool>,
    hang: Option<RawHang>,
    error: Option<RawError>,
    ecc_errors: Option<RawEcc>,
    temperature_ramp: Option<RawRamp>,
    clock_events: Option<RawClockEvents>,
    remapped_rows: Option<RawRemap>,
    retired_pages: Option<RawRetired>,
    recovery_action: Option<RecoveryAction>,
    pcie_replays: Option<u64>,
    nvlink_down: Option<RawNvLinkDown>,
    nvlink_errors: Option<RawNvLinkErrors>,
    reset: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNvLinkDown {
    link: u32,
    for_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNvLinkErrors {
    link: u32,
    #[serde(default)]
    crc_flit: u64,
    #[serde(default)]
    crc_data: u64,
    #[serde(default)]
    replay: u64,
    #[serde(default)]
    recovery: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHang {
    call: String,
    for_s: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawError {
    call: String,
    code: ErrorCode,
    for_s: f64,
    mig: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEcc {
    #[serde(default)]
    corrected: u64,
    #[serde(default)]
    uncorrected: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRamp {
    to: f64,
    over_s: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClockEvents {
    reasons: Vec<ClockEventReason>,
    for_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemap {
    #[serde(default)]
    correctable: u32,
    #[serde(default)]
    uncorrectable: u32,
    #[serde(default)]
    pending: bool,
    #[serde(default)]
    failed: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetired {
    #[serde(default)]
    single_bit: u32,
    #[serde(default)]
    double_bit: u32,
    #[serde(default)]
    pending: bool,
}

impl TryFrom<RawFault> for Fault {
    type Error = String;

    fn try_from(raw: RawFault) -> Result<Self, String> {
        let mut kinds = Vec::new();
        if let Some(x) = raw.xid {
            kinds.push(("xid", FaultKind::Xid(x)));
        }
        match raw.lost {
            Some(true) => kinds.push(("lost", FaultKind::Lost)),
            Some(false) => return Err("`lost: false` schedules nothing; use `reset: true` to bring a GPU back".into()),
            None => {}
        }
        if let Some(h) = raw.hang {
            kinds.push(("hang", FaultKind::Hang { call: h.call, for_s: h.for_s }));
        }
        if let Some(e) = raw.error {
            kinds.push((
                "error",
                FaultKind::Error(ErrorFault { call: e.call, code: e.code, for_s: e.for_s, mig: e.mig }),
            ));
        }
        if let Some(e) = raw.ecc_errors {
            kinds.push(("ecc_errors", FaultKind::EccErrors { corrected: e.corrected, uncorrected: e.uncorrected }));
        }
        if let Some(r) = raw.temperature_ramp {
            kinds.push(("temperature_ramp", FaultKind::TemperatureRamp { to: r.to, over_s: r.over_s }));
        }
        if let Some(c) = raw.clock_events {
            kinds.push(("clock_events", FaultKind::ClockEvents { reasons: c.reasons, for_s: c.for_s }));
        }
        if let Some(r) = raw.remapped_rows {
            kinds.push((
                "remapped_rows",
                FaultKind::RemappedRows {
                    correctable: r.correctable,
                    uncorrectable: r.uncorrectable,
                    pending: r.pending,
                    failed: r.failed,
                },
            ));
        }
        if let Some(r) = raw.retired_pages {
            kinds.push((
                "retired_pages",
                FaultKind::RetiredPages { single_bit: r.single_bit, double_bit: r.double_bit, pending: r.pending },
            ));
        }
        if let Some(a) = raw.recovery_action {
            kinds.push(("recovery_action", FaultKind::RecoveryAction(a)));
        }
        if let Some(n) = raw.pcie_replays {
            kinds.push(("pcie_replays", FaultKind::PcieReplays(n)));
        }
        if let Some(d) = raw.nvlink_down {
            kinds.push(("nvlink_down", FaultKind::NvLinkDown { link: d.link, for_s: d.for_s }));
        }
        if let Some(e) = raw.nvlink_errors {
            let counts = NvLinkErrorCounts {
                crc_flit: e.crc_flit,
                crc_data: e.crc_data,
                replay: e.replay,
                recovery: e.recovery,
            };
            kinds.push(("nvlink_errors", FaultKind::NvLinkErrors { link: e.link, counts }));
        }
        match raw.reset {
            Some(true) => kinds.push(("reset", FaultKind::Reset)),
            Some(false) => return Err("`reset: false` schedules nothing".into()),
            None => {}
        }
        match kinds.len() {
            1 => Ok(Fault { at_s: raw.at_s, kind: kinds.remove(0).1 }),
            0 => Err("a fault needs one of xid, lost, hang, error, ecc_errors, temperature_ramp, clock_events, \
                      remapped_rows, retired_pages, recovery_action, pcie_replays, nvlink_down, nvlink_errors, reset"
                .into()),
            _ => Err(format!(
                "a fault has exactly one kind; this one has {}: split it into several entries",
                kinds.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(" and ")
            )),
        }
    }
}

impl Fault {
    /// Checks the fault against the GPU it is scheduled on (`mig_instances`: how many
    /// MIG devices it has; `nvlink_links`: how many NVLink links); the error is
    /// `(field within the fault, reason)`.
    pub fn validate(
        &self,
        model: &Model,
        ecc_enabled: bool,
        mig_instances: usize,
        nvlink_links: u32,
    ) -> Result<(), (String, String)> {
        let err = |field: &str, reason: String| Err((field.to_string(), reason));
        if !(self.at_s.is_finite() && self.at_s >= 0.0) {
            return err("at_s", format!("{} is not a time >= 0", self.at_s));
        }
        match &self.kind {
            FaultKind::Hang { call, for_s } => {
                if !DEVICE_CALLS.contains(&call.as_str()) {
                    return err("hang.call", format!("{call:?} is not one of: {}", DEVICE_CALLS.join(", ")));
                }
                if !(for_s.is_finite() && *for_s > 0.0) {
                    return err("hang.for_s", format!("{for_s} must be > 0"));
                }
            }
            FaultKind::Error(e) => {
                if !DEVICE_CALLS.contains(&e.call.as_str()) {
                    return err("error.call", format!("{:?} is not one of: {}", e.call, DEVICE_CALLS.join(", ")));
                }
                if !(e.for_s.is_finite() && e.for_s > 0.0) {
                    return err("error.for_s", format!("{} must be > 0", e.for_s));
                }
                if let Some(m) = e.mig {
                    if m as usize >= mig_instances {
                        return err("error.mig", format!("the GPU has {mig_instances} MIG devices; there is no {m}"));
                    }
                    if e.call != "*" && !mig_handle_answers(&e.call) {
                        return err(
                            "error.call",
                            format!("a MIG device handle answers {} with NOT_SUPPORTED anyway", e.call),
                        );
                    }
                }
            }
            FaultKind::EccErrors { .. } if !ecc_enabled => {
                return err("ecc_errors", format!("ECC is not enabled on this {}", model.key));
            }
            FaultKind::TemperatureRamp { to, over_s } => {
                if !(to.is_finite() && (-40.0..=150.0).contains(to)) {
                    return err("temperature_ramp.to", format!("{to} is not a temperature in [-40, 150]"));
                }
                if !(over_s.is_finite() && *over_s > 0.0) {
                    return err("temperature_ramp.over_s", format!("{over_s} must be > 0"));
                }
            }
            FaultKind::ClockEvents { reasons, for_s } => {
                if reasons.is_empty() {
                    return err("clock_events.reasons", "name at least one reason".into());
                }
                if let Some(f) = for_s
                    && !(f.is_finite() && *f > 0.0)
                {
                    return err("clock_events.for_s", format!("{f} must be > 0"));
                }
            }
            FaultKind::RemappedRows { .. } if !model.row_remapping => {
                return err("remapped_rows", format!("{} has no row remapping", model.key));
            }
            FaultKind::RetiredPages { .. } if !model.page_retirement => {
                return err(
                    "retired_pages",
                    format!("{} does not retire pages (row remapping replaced it)", model.key),
                );
            }
            FaultKind::NvLinkDown { link, for_s } => {
                check_link("nvlink_down", *link, nvlink_links, model)?;
                if let Some(f) = for_s
                    && !(f.is_finite() && *f > 0.0)
                {
                    return err("nvlink_down.for_s", format!("{f} must be > 0"));
                }
            }
            FaultKind::NvLinkErrors { link, .. } => check_link("nvlink_errors", *link, nvlink_links, model)?,
            _ => {}
        }
        Ok(())
    }
}

fn check_link(kind: &str, link: u32, links: u32, model: &Model) -> Result<(), (String, String)> {
    let field = format!("{kind}.link");
    match links {
        0 => Err((field, format!("{} has no NVLink", model.key))),
        n if link >= n => Err((field, format!("the GPU has {n} links (0 to {}); there is no {link}", n - 1))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

    fn parse(text: &str) -> Result<Fault, String> {
        serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn one_kind_per_entry() {
        assert_eq!(parse("{at_s: 3, xid: 79}").unwrap(), Fault { at_s: 3.0, kind: FaultKind::Xid(79) });
        let err = parse("{at_s: 3, xid: 79, lost: true}").unwrap_err();
        assert!(err.contains("xid and lost"), "{err}");
        let err = parse("{at_s: 3}").unwrap_err();
        assert!(err.contains("needs one of"), "{err}");
    }

    #[test]
    fn hang_must_name_a_known_call() {
        let h100 = models::find("H100-SXM5-80GB").unwrap();
        let f = parse("{at_s: 1, hang: {call: nvmlDeviceGetFoo, for_s: 2}}").unwrap();
        assert_eq!(f.validate(h100, true, 0, 18).unwrap_err().0, "hang.call");
        let f = parse("{at_s: 1, hang: {call: nvmlDeviceGetPowerUsage, for_s: 2}}").unwrap();
        assert!(f.validate(h100, true, 0, 18).is_ok());
    }

    #[test]
    fn faults_the_hardware_cannot_have_are_refused() {
        let rtx = models::find("RTX-4090-24GB").unwrap();
        let f = parse("{at_s: 1, ecc_errors: {uncorrected: 1}}").unwrap();
        assert_eq!(f.validate(rtx, false, 0, 0).unwrap_err().0, "ecc_errors");
        let a100 = models::find("A100-SXM4-80GB").unwrap();
        let f = parse("{at_s: 1, retired_pages: {double_bit: 1}}").unwrap();
        assert!(f.validate(a100, true, 0, 12).unwrap_err().1.contains("row remapping"));
    }

    #[test]
    fn errors_name_a_call_a_code_and_a_handle() {
        let h100 = models::find("H100-SXM5-80GB").unwrap();
        let f = parse("{at_s: 2, error: {call: nvmlDeviceGetEccMode, code: TIMEOUT, for_s: 3}}").unwrap();
        let FaultKind::Error(e) = &f.kind else { panic!("{f:?}") };
        assert_eq!((e.code.code(), e.mig), (10, None));
        assert!(f.validate(h100, true, 0, 18).is_ok());
        let err = parse("{at_s: 2, error: {call: nvmlDeviceGetEccMode, code: OOPS, for_s: 3}}").unwrap_err();
        assert!(err.contains("unknown variant `OOPS`"), "{err}");
        let on_mig = parse("{at_s: 0, error: {call: nvmlDeviceGetMemoryInfo_v2, code: UNKNOWN, for_s: 1, mig: 2}}");
        let on_mig = on_mig.unwrap();
        assert!(on_mig.validate(h100, true, 3, 18).is_ok());
        assert_eq!(on_mig.validate(h100, true, 2, 18).unwrap_err().0, "error.mig");
        let gpu_wide = parse("{at_s: 0, error: {call: nvmlDeviceGetPowerUsage, code: UNKNOWN, for_s: 1, mig: 0}}");
        let (field, reason) = gpu_wide.unwrap().validate(h100, true, 1, 18).unwrap_err();
        assert_eq!(field, "error.call");
        assert!(reason.contains("NOT_SUPPORTED anyway"), "{reason}");
    }
}
