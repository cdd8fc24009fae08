//! Reads one GPU: every NVML call of a collection cycle, in one place.
//!
//! Per call: `NOT_SUPPORTED` means the model lacks the feature, so the reading stays
//! absent and the call is not made again on this GPU; `GPU_IS_LOST` ends the read and
//! marks the GPU lost; any other error leaves that reading absent for this cycle and
//! is reported for the error counter. Facts that do not change while the driver is
//! loaded (identity, thresholds, maximum clocks, supported clock-event reasons, ECC
//! mode) are read once.

use std::collections::HashSet;
use std::sync::Arc;

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, PcieUtilCounter, RetirementCause};
use nvml_wrapper::enum_wrappers::device::{TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE,
    NVML_FI_DEV_REMAPPED_PENDING, NVML_FI_DEV_REMAPPED_UNC,
};

use super::calls::{CallFailure, Calls, Lost};
use super::errors::error_label;
use super::gpm::{GpmTracker, Scope};
use super::mig::MigReader;
use super::tracker::CallTracker;
use crate::snapshot::{
    ClockEvents, EccCounts, GpuIdentity, GpuReadings, MemoryReading, MigState, ProcessUsage, RecoveryAction,
    RemappedRows, RetiredPages,
};

/// How reading a GPU ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadOutcome {
    Read(Box<GpuReadings>),
    Lost,
    /// No handle could be had for another reason.
    Failed(String),
}

/// What one read produced.
#[derive(Debug, Clone)]
pub struct ReadReport {
    pub outcome: ReadOutcome,
    pub identity: Option<GpuIdentity>,
    pub failures: Vec<CallFailure>,
    /// The MIG layout, when the GPU is in MIG mode.
    pub mig: Option<MigState>,
    /// Processes on the whole GPU (outside MIG mode).
    pub processes: Vec<ProcessUsage>,
}

impl ReadReport {
    fn without_readings(outcome: ReadOutcome, identity: Option<GpuIdentity>, failures: Vec<CallFailure>) -> Self {
        ReadReport { outcome, identity, failures, mig: None, processes: Vec::new() }
    }
}

/// Static facts cached after the first successful read.
#[derive(Debug, Clone, Default)]
struct Statics {
    slowdown: Option<u32>,
    shutdown: Option<u32>,
    sm_max: Option<u32>,
    mem_max: Option<u32>,
    supported_clock_events: Option<u64>,
    ecc_enabled: Option<bool>,
    gpm_supported: bool,
}

/// Reads GPU `index`; one per worker thread.
#[derive(Debug)]
pub struct GpuReader {
    nvml: Arc<Nvml>,
    index: u32,
    identity: Option<GpuIdentity>,
    statics: Option<Statics>,
    unsupported: HashSet<&'static str>,
    mig: MigReader,
    gpm: GpmTracker,
    /// Newest per-process utilization sample seen, microseconds.
    last_sample_us: u64,
}

impl Drop for GpuReader {
    fn drop(&mut self) {
        self.gpm.clear(&self.nvml);
    }
}

impl GpuReader {
    pub fn new(nvml: Arc<Nvml>, index: u32) -> Self {
        GpuReader {
            nvml,
            index,
            identity: None,
            statics: None,
            unsupported: HashSet::new(),
            mig: MigReader::default(),
            gpm: GpmTracker::default(),
            last_sample_us: 0,
        }
    }

    /// One full read of the GPU.
    pub fn read(&mut self, tracker: &CallTracker) -> ReadReport {
        let nvml = self.nvml.clone();
        let mut calls = Calls { tracker, unsupported: &mut self.unsupported, failures: Vec::new() };
        let device = match tracker.run("nvmlDeviceGetHandleByIndex_v2", || nvml.device_by_index(self.index)) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => {
                return ReadReport::without_readings(ReadOutcome::Lost, self.identity.clone(), vec![]);
            }
            Err(e) => {
                let label = error_label(&e);
                return ReadReport::without_readings(
                    ReadOutcome::Failed(label.to_string()),
                    self.identity.clone(),
                    vec![("nvmlDeviceGetHandleByIndex_v2", label)],
                );
            }
        };
        let mut mig = None;
        let mut processes = Vec::new();
        let result = (|| {
            if self.identity.is_none() {
                self.identity = Some(read_identity(&mut calls, &device)?);
            }
            if self.statics.is_none() {
                self.statics = Some(read_statics(&mut calls, &device)?);
            }
            let statics = self.statics.clone().unwrap_or_default();
            let mut readings = read_dynamic(&mut calls, &device, &statics)?;
            // MIG mode can be switched by an administrator (with a GPU reset), so it is read each cycle.
            let mig_enabled = calls.get("nvmlDeviceGetMigMode", || device.mig_mode())?.map(|m| m.current == 1);
            readings.mig_enabled = mig_enabled;
            let gpm = statics.gpm_supported.then_some(&mut self.gpm);
            if mig_enabled == Some(true) {
                mig = Some(self.mig.read(&nvml, &mut calls, &device, gpm)?);
            } else {
                processes = super::processes::read_whole_gpu(&mut calls, &device, &mut self.last_sample_us)?;
                if let Some(tracker) = gpm {
                    let activity = tracker.sample(&nvml, &mut calls, &device, Scope::Gpu)?;
                    tracker.retain(&nvml, |scope| *scope == Scope::Gpu);
                    readings.sm_activity_percent = activity.sm;
                    readings.tensor_activity_percent = activity.tensor;
                    readings.dram_activity_percent = activity.dram;
                }
            }
            Ok(readings)
        })();
        let failures = std::mem::take(&mut calls.failures);
        let outcome = match result {
            Ok(readings) => ReadOutcome::Read(Box::new(readings)),
            Err(Lost) => ReadOutcome::Lost,
        };
        ReadReport { outcome, identity: self.identity.clone(), failures, mig, processes }
    }
}

fn read_identity(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<GpuIdentity, Lost> {
    let uuid = calls.get("nvmlDeviceGetUUID", || device.uuid())?.unwrap_or_default();
    let model = calls.get("nvmlDeviceGetName", || device.name())?.unwrap_or_default();
    let pci_bus_id = calls.get("nvmlDeviceGetPciInfo_v3", || device.pci_info())?.map(|p| p.bus_id).unwrap_or_default();
    let architecture =
        calls.get("nvmlDeviceGetArchitecture", || device.architecture())?.map(|a| a.to_string()).unwrap_or_default();
    let compute_capability = calls
        .get("nvmlDeviceGetCudaComputeCapability", || device.cuda_compute_capability())?
        .map(|c| format!("{}.{}", c.major, c.minor))
        .unwrap_or_default();
    Ok(GpuIdentity { uuid, model, pci_bus_id, architecture: architecture.to_lowercase(), compute_capability })
}

fn read_statics(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<Statics, Lost> {
    Ok(Statics {
        slowdown: calls.get("nvmlDeviceGetTemperatureThreshold", || {
            device.temperature_threshold(TemperatureThreshold::Slowdown)
        })?,
        shutdown: calls.get("nvmlDeviceGetTemperatureThreshold", || {
            device.temperature_threshold(TemperatureThreshold::Shutdown)
        })?,
        sm_max: calls.get("nvmlDeviceGetMaxClockInfo", || device.max_clock_info(Clock::SM))?,
        mem_max: calls.get("nvmlDeviceGetMaxClockInfo", || device.max_clock_info(Clock::Memory))?,
        supported_clock_events: calls
            .get("nvmlDeviceGetSupportedClocksThrottleReasons", || device.supported_throttle_reasons())?
            .map(|r| r.bits()),
        ecc_enabled: calls.get("nvmlDeviceGetEccMode", || device.is_ecc_enabled())?.map(|m| m.currently_enabled),
        gpm_supported: calls.get("nvmlGpmQueryDeviceSupport", || device.gpm_support())?.unwrap_or(false),
    })
}

fn read_dynamic(calls: &mut Calls<'_>, device: &Device<'_>, statics: &Statics) -> Result<GpuReadings, Lost> {
    // Not remembered as unsupported: MIG mode (where it is) can be switched off.
    let utilization = calls.get_optional("nvmlDeviceGetUtilizationRates", || device.utilization_rates())?;
    let memory = calls.get("nvmlDeviceGetMemoryInfo_v2", || device.memory_info())?.map(|m| MemoryReading {
        total_bytes: m.total,
        used_bytes: m.used,
        reserved_bytes: m.reserved,
    });
    let power_mw = calls.get("nvmlDeviceGetPowerUsage", || device.power_usage())?;
    let limit_mw = calls.get("nvmlDeviceGetEnforcedPowerLimit", || device.enforced_power_limit())?;
    let energy_mj = calls.get("nvmlDeviceGetTotalEnergyConsumption", || device.total_energy_consumption())?;
    let temperature = calls.get("nvmlDeviceGetTemperature", || device.temperature(TemperatureSensor::Gpu))?;
    let sm_clock = calls.get("nvmlDeviceGetClockInfo", || device.clock_info(Clock::SM))?;
    let mem_clock = calls.get("nvmlDeviceGetClockInfo", || device.clock_info(Clock::Memory))?;
    let encoder = calls.get("nvmlDeviceGetEncoderUtilization", || device.encoder_utilization())?;
    let decoder = calls.get("nvmlDeviceGetDecoderUtilization", || device.decoder_utilization())?;
    let pcie_tx = calls.get("nvmlDeviceGetPcieThroughput", || device.pcie_throughput(PcieUtilCounter::Send))?;
    let pcie_rx = calls.get("nvmlDeviceGetPcieThroughput", || device.pcie_throughput(PcieUtilCounter::Receive))?;
    let replays = calls.get("nvmlDeviceGetPcieReplayCounter", || device.pcie_replay_counter())?;
    let pstate = calls.get("nvmlDeviceGetPerformanceState", || device.performance_state())?;
    let ecc = if statics.ecc_enabled == Some(true) { read_ecc(calls, device)? } else { None };
    let retired_pages = read_retired_pages(calls, device)?;
    let (remapped_rows, recovery_action) = read_fields(calls, device)?;
    let active_events =
        calls.get("nvmlDeviceGetCurrentClocksThrottleReasons", || device.current_throttle_reasons())?.map(|r| r.bits());
    Ok(GpuReadings {
        utilization_percent: utilization.as_ref().map(|u| u.gpu),
        memory_controller_percent: utilization.as_ref().map(|u| u.memory),
        memory,
        power_watts: power_mw.map(|mw| f64::from(mw) / 1000.0),
        power_limit_watts: limit_mw.map(|mw| f64::from(mw) / 1000.0),
        energy_joules: energy_mj.map(|mj| mj as f64 / 1000.0),
        temperature_celsius: temperature,
        temperature_slowdown_celsius: statics.slowdown,
        temperature_shutdown_celsius: statics.shutdown,
        sm_clock_mhz: sm_clock,
        mem_clock_mhz: mem_clock,
        sm_clock_max_mhz: statics.sm_max,
        mem_clock_max_mhz: statics.mem_max,
        encoder_percent: encoder.map(|e| e.utilization),
        decoder_percent: decoder.map(|d| d.utilization),
        // NVML reports KB/s.
        pcie_tx_bytes_per_second: pcie_tx.map(|kb| u64::from(kb) * 1024),
        pcie_rx_bytes_per_second: pcie_rx.map(|kb| u64::from(kb) * 1024),
        pcie_replays: replays.map(u64::from),
        performance_state: pstate.map(|p| p.as_c()),
        ecc_enabled: statics.ecc_enabled,
        ecc,
        retired_pages,
        remapped_rows,
        clock_events: match (statics.supported_clock_events, active_events) {
            (Some(supported), Some(active)) => Some(ClockEvents { supported, active }),
            _ => None,
        },
        recovery_action,
        ..GpuReadings::default()
    })
}

fn read_ecc(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<Option<EccCounts>, Lost> {
    const CALL: &str = "nvmlDeviceGetTotalEccErrors";
    let cv = calls.get(CALL, || device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile))?;
    let uv = calls.get(CALL, || device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile))?;
    let ca = calls.get(CALL, || device.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate))?;
    let ua = calls.get(CALL, || device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate))?;
    Ok(match (cv, uv, ca, ua) {
        (Some(cv), Some(uv), Some(ca), Some(ua)) => Some(EccCounts {
            corrected_volatile: cv,
            uncorrected_volatile: uv,
            corrected_aggregate: ca,
            uncorrected_aggregate: ua,
        }),
        _ => None,
    })
}

fn read_retired_pages(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<Option<RetiredPages>, Lost> {
    const CALL: &str = "nvmlDeviceGetRetiredPages_v2";
    let single = calls.get(CALL, || device.retired_pages(RetirementCause::MultipleSingleBitEccErrors))?;
    let double = calls.get(CALL, || device.retired_pages(RetirementCause::DoubleBitEccError))?;
    let pending = calls.get("nvmlDeviceGetRetiredPagesPendingStatus", || device.are_pages_pending_retired())?;
    Ok(match (single, double, pending) {
        (Some(s), Some(d), Some(p)) => {
            Some(RetiredPages { single_bit_ecc: s.len() as u64, double_bit_ecc: d.len() as u64, pending: p })
        }
        _ => None,
    })
}

/// Row remapping and the recovery action, in one `nvmlDeviceGetFieldValues` call
/// (`nvml-wrapper` does not wrap `nvmlDeviceGetRemappedRows`).
fn read_fields(
    calls: &mut Calls<'_>,
    device: &Device<'_>,
) -> Result<(Option<RemappedRows>, Option<RecoveryAction>), Lost> {
    let ids = [
        FieldId(NVML_FI_DEV_REMAPPED_COR),
        FieldId(NVML_FI_DEV_REMAPPED_UNC),
        FieldId(NVML_FI_DEV_REMAPPED_PENDING),
        FieldId(NVML_FI_DEV_REMAPPED_FAILURE),
        FieldId(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
    ];
    let Some(samples) = calls.get("nvmlDeviceGetFieldValues", || device.field_values_for(&ids))? else {
        return Ok((None, None));
    };
    let values: Vec<Option<u64>> = samples
        .into_iter()
        .map(|s| match s.and_then(|s| s.value) {
            Ok(v) => as_u64(&v),
            Err(NvmlError::GpuLost) => None,
            Err(_) => None,
        })
        .collect();
    let rows = match values[..4] {
        [Some(cor), Some(unc), Some(pending), Some(failed)] => {
            Some(RemappedRows { correctable: cor, uncorrectable: unc, pending: pending != 0, failed: failed != 0 })
        }
        _ => None,
    };
    let action = values.get(4).copied().flatten().map(|code| RecoveryAction::from_code(code as u32));
    Ok((rows, action))
}

fn as_u64(value: &SampleValue) -> Option<u64> {
    match *value {
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::U64(v) => Some(v),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(v) if v >= 0.0 => Some(v as u64),
        _ => None,
    }
}
