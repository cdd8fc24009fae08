//! Reads one GPU: every NVML call of a collection cycle, in one place.
//!
//! Per call: `NOT_SUPPORTED` means the model lacks the feature, so the reading stays
//! absent and the call is not made again on that handle with that argument (see
//! [`super::calls`]); `GPU_IS_LOST` ends the read and marks the GPU lost, wherever it
//! comes from (a call, or one field of `nvmlDeviceGetFieldValues`); any other error
//! leaves that reading absent for this cycle and is reported for the error counter
//! (`gpu_exporter_nvml_errors_total`). Facts that do not change while the driver is
//! loaded (identity, thresholds, maximum clocks, supported clock-event reasons, ECC
//! mode, GPM support, the NVLink link count) are kept once settled: once the driver answered or said
//! `NOT_SUPPORTED`. A fact whose call failed otherwise is asked again every cycle, so
//! a transient error at start-up (an ECC mode `UNKNOWN`, say) does not switch the
//! readings that depend on it, and the health signals fed by them, off for good.
//!
//! Queries that NVML does not answer while a GPU is in MIG mode (utilization, encoder
//! and decoder utilization) are not remembered as unsupported: MIG mode can be turned
//! off again.

use std::collections::HashSet;
use std::sync::Arc;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureThreshold;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, PcieUtilCounter, RetirementCause};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_REMAPPED_COR,
    NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING, NVML_FI_DEV_REMAPPED_UNC,
};

use super::calls::{CallFailure, CallKey, Calls, Lost, Settled};
use super::errors::error_label;
use super::gpm::{GpmTracker, Scope};
use super::mig::MigReader;
use super::nvlink::NvLinkTracker;
use super::tracker::CallTracker;
use crate::snapshot::{
    ClockEvents, EccCounts, GpuIdentity, GpuReadings, MemoryReading, MigState, ProcessUsage, RecoveryAction,
    RemappedRows, RetiredPages,
};

/// The readings of the per-cycle `nvmlDeviceGetFieldValues` call.
#[derive(Debug, Default)]
struct FieldReadings {
    remapped_rows: Option<RemappedRows>,
    recovery_action: Option<RecoveryAction>,
    memory_temperature_celsius: Option<u32>,
}

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

/// Identity, each part settled on its own.
#[derive(Debug, Clone, Default)]
struct Identity {
    uuid: Settled<String>,
    model: Settled<String>,
    pci_bus_id: Settled<String>,
    architecture: Settled<String>,
    compute_capability: Settled<String>,
}

impl Identity {
    fn snapshot(&self) -> GpuIdentity {
        GpuIdentity {
            uuid: self.uuid.get().unwrap_or_default(),
            model: self.model.get().unwrap_or_default(),
            pci_bus_id: self.pci_bus_id.get().unwrap_or_default(),
            architecture: self.architecture.get().unwrap_or_default(),
            compute_capability: self.compute_capability.get().unwrap_or_default(),
        }
    }
}

/// Facts that do not change while the driver is loaded, each settled on its own.
#[derive(Debug, Clone, Default)]
struct Statics {
    slowdown: Settled<u32>,
    shutdown: Settled<u32>,
    sm_max: Settled<u32>,
    mem_max: Settled<u32>,
    supported_clock_events: Settled<u64>,
    ecc_enabled: Settled<bool>,
    gpm_supported: Settled<bool>,
    /// NVLink links the GPU has (`NVML_FI_DEV_NVLINK_LINK_COUNT`); 0 or `NOT_SUPPORTED`
    /// on boards without NVLink.
    nvlink_count: Settled<u32>,
}

// NVML's argument values, for the keys of calls that take one.
const THRESHOLD_SHUTDOWN: u32 = 0;
const THRESHOLD_SLOWDOWN: u32 = 1;
const CLOCK_SM: u32 = 1;
const CLOCK_MEM: u32 = 2;
const PCIE_TX: u32 = 0;
const PCIE_RX: u32 = 1;

/// Reads GPU `index`; one per worker thread.
#[derive(Debug)]
pub struct GpuReader {
    nvml: Arc<Nvml>,
    index: u32,
    identity: Identity,
    /// Whether a read got as far as the identity (so it can be reported).
    identity_read: bool,
    statics: Statics,
    unsupported: HashSet<CallKey>,
    mig: MigReader,
    gpm: GpmTracker,
    nvlink: NvLinkTracker,
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
            identity: Identity::default(),
            identity_read: false,
            statics: Statics::default(),
            unsupported: HashSet::new(),
            mig: MigReader::default(),
            gpm: GpmTracker::default(),
            nvlink: NvLinkTracker::default(),
            last_sample_us: 0,
        }
    }

    /// The identity as far as it is known, once a read got to it.
    fn known_identity(&self) -> Option<GpuIdentity> {
        self.identity_read.then(|| self.identity.snapshot())
    }

    /// One full read of the GPU.
    pub fn read(&mut self, tracker: &CallTracker) -> ReadReport {
        let nvml = self.nvml.clone();
        let device = match tracker.run("nvmlDeviceGetHandleByIndex_v2", || nvml.device_by_index(self.index)) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => {
                return ReadReport::without_readings(ReadOutcome::Lost, self.known_identity(), vec![]);
            }
            Err(e) => {
                let label = error_label(&e);
                return ReadReport::without_readings(
                    ReadOutcome::Failed(label.to_string()),
                    self.known_identity(),
                    vec![("nvmlDeviceGetHandleByIndex_v2", label)],
                );
            }
        };
        let mut calls = Calls { tracker, unsupported: &mut self.unsupported, failures: Vec::new() };
        let mut mig = None;
        let mut processes = Vec::new();
        let identity = &mut self.identity;
        let identity_read = &mut self.identity_read;
        let statics = &mut self.statics;
        let nvlink = &mut self.nvlink;
        let (gpm_tracker, mig_reader, last_sample_us) = (&mut self.gpm, &mut self.mig, &mut self.last_sample_us);
        let result = (|| {
            read_identity(&mut calls, &device, identity)?;
            *identity_read = true;
            read_statics(&mut calls, &device, statics)?;
            // MIG mode can be switched by an administrator (with a GPU reset), so it is read each cycle.
            let mig_enabled =
                calls.get(CallKey::on("nvmlDeviceGetMigMode", &device), || device.mig_mode())?.map(|m| m.current == 1);
            let mut readings = read_dynamic(&mut calls, &device, statics, nvlink, mig_enabled == Some(true))?;
            readings.mig_enabled = mig_enabled;
            let gpm = statics.gpm_supported.get().unwrap_or(false).then_some(gpm_tracker);
            if mig_enabled == Some(true) {
                mig = Some(mig_reader.read(&nvml, &mut calls, &device, gpm)?);
            } else {
                processes = super::processes::read_whole_gpu(&mut calls, &device, last_sample_us)?;
                if let Some(tracker) = gpm {
                    let activity = tracker.sample(&nvml, &mut calls, &device, Scope::Gpu)?;
                    tracker.retain(&nvml, |scope| *scope == Scope::Gpu);
                    readings.sm_activity_percent = activity.sm;
                    readings.tensor_activity_percent = activity.tensor;
                    readings.dram_activity_percent = activity.dram;
                    readings.graphics_activity_percent = activity.graphics;
                }
            }
            Ok(readings)
        })();
        let failures = std::mem::take(&mut calls.failures);
        let outcome = match result {
            Ok(readings) => ReadOutcome::Read(Box::new(readings)),
            Err(Lost) => ReadOutcome::Lost,
        };
        ReadReport { outcome, identity: self.known_identity(), failures, mig, processes }
    }
}

fn read_identity(calls: &mut Calls<'_>, device: &Device<'_>, id: &mut Identity) -> Result<(), Lost> {
    let key = |call| CallKey::on(call, device);
    id.uuid.read(calls, key("nvmlDeviceGetUUID"), || device.uuid())?;
    id.model.read(calls, key("nvmlDeviceGetName"), || device.name())?;
    id.pci_bus_id.read(calls, key("nvmlDeviceGetPciInfo_v3"), || device.pci_info().map(|p| p.bus_id))?;
    id.architecture.read(calls, key("nvmlDeviceGetArchitecture"), || {
        device.architecture().map(|a| a.to_string().to_lowercase())
    })?;
    id.compute_capability.read(calls, key("nvmlDeviceGetCudaComputeCapability"), || {
        device.cuda_compute_capability().map(|c| format!("{}.{}", c.major, c.minor))
    })?;
    Ok(())
}

fn read_statics(calls: &mut Calls<'_>, device: &Device<'_>, s: &mut Statics) -> Result<(), Lost> {
    let key = |call| CallKey::on(call, device);
    const THRESHOLD: &str = "nvmlDeviceGetTemperatureThreshold";
    s.slowdown.read(calls, key(THRESHOLD).arg(THRESHOLD_SLOWDOWN), || {
        device.temperature_threshold(TemperatureThreshold::Slowdown)
    })?;
    s.shutdown.read(calls, key(THRESHOLD).arg(THRESHOLD_SHUTDOWN), || {
        device.temperature_threshold(TemperatureThreshold::Shutdown)
    })?;
    const MAX_CLOCK: &str = "nvmlDeviceGetMaxClockInfo";
    s.sm_max.read(calls, key(MAX_CLOCK).arg(CLOCK_SM), || device.max_clock_info(Clock::SM))?;
    s.mem_max.read(calls, key(MAX_CLOCK).arg(CLOCK_MEM), || device.max_clock_info(Clock::Memory))?;
    s.supported_clock_events.read(calls, key("nvmlDeviceGetSupportedClocksThrottleReasons"), || {
        device.supported_throttle_reasons().map(|r| r.bits())
    })?;
    s.ecc_enabled.read(calls, key("nvmlDeviceGetEccMode"), || device.is_ecc_enabled().map(|m| m.currently_enabled))?;
    s.gpm_supported.read(calls, key("nvmlGpmQueryDeviceSupport"), || device.gpm_support())?;
    if !s.nvlink_count.is_settled() {
        super::nvlink::read_link_count(calls, device, &mut s.nvlink_count)?;
    }
    Ok(())
}

fn read_dynamic(
    calls: &mut Calls<'_>,
    device: &Device<'_>,
    statics: &Statics,
    nvlink: &mut NvLinkTracker,
    mig_mode: bool,
) -> Result<GpuReadings, Lost> {
    let key = |call| CallKey::on(call, device);
    let utilization;
    let encoder;
    let decoder;
    if mig_mode {
        // nvml.h: not supported on MIG-enabled GPUs. Not remembered: MIG mode can be
        // switched off again.
        utilization = calls.get_optional("nvmlDeviceGetUtilizationRates", || device.utilization_rates())?;
        encoder = calls.get_optional("nvmlDeviceGetEncoderUtilization", || device.encoder_utilization())?;
        decoder = calls.get_optional("nvmlDeviceGetDecoderUtilization", || device.decoder_utilization())?;
    } else {
        utilization = calls.get(key("nvmlDeviceGetUtilizationRates"), || device.utilization_rates())?;
        encoder = calls.get(key("nvmlDeviceGetEncoderUtilization"), || device.encoder_utilization())?;
        decoder = calls.get(key("nvmlDeviceGetDecoderUtilization"), || device.decoder_utilization())?;
    }
    let memory = calls.get(key("nvmlDeviceGetMemoryInfo_v2"), || device.memory_info())?.map(|m| MemoryReading {
        total_bytes: m.total,
        used_bytes: m.used,
        reserved_bytes: m.reserved,
    });
    let power_mw = calls.get(key("nvmlDeviceGetPowerUsage"), || device.power_usage())?;
    let limit_mw = calls.get(key("nvmlDeviceGetEnforcedPowerLimit"), || device.enforced_power_limit())?;
    let energy_mj = calls.get(key("nvmlDeviceGetTotalEnergyConsumption"), || device.total_energy_consumption())?;
    let temperature = calls.get(key("nvmlDeviceGetTemperature"), || device.temperature(TemperatureSensor::Gpu))?;
    const CLOCK: &str = "nvmlDeviceGetClockInfo";
    let sm_clock = calls.get(key(CLOCK).arg(CLOCK_SM), || device.clock_info(Clock::SM))?;
    let mem_clock = calls.get(key(CLOCK).arg(CLOCK_MEM), || device.clock_info(Clock::Memory))?;
    const PCIE: &str = "nvmlDeviceGetPcieThroughput";
    let pcie_tx = calls.get(key(PCIE).arg(PCIE_TX), || device.pcie_throughput(PcieUtilCounter::Send))?;
    let pcie_rx = calls.get(key(PCIE).arg(PCIE_RX), || device.pcie_throughput(PcieUtilCounter::Receive))?;
    let replays = calls.get(key("nvmlDeviceGetPcieReplayCounter"), || device.pcie_replay_counter())?;
    let pstate = calls.get(key("nvmlDeviceGetPerformanceState"), || device.performance_state())?;
    let ecc_enabled = statics.ecc_enabled.get();
    let ecc = if ecc_enabled == Some(true) { read_ecc(calls, device)? } else { None };
    let retired_pages = read_retired_pages(calls, device)?;
    let fields = read_fields(calls, device)?;
    let nvlinks = nvlink.read(calls, device, statics.nvlink_count.get().unwrap_or(0))?;
    let active_events = calls
        .get(key("nvmlDeviceGetCurrentClocksThrottleReasons"), || device.current_throttle_reasons())?
        .map(|r| r.bits());
    Ok(GpuReadings {
        utilization_percent: utilization.as_ref().map(|u| u.gpu),
        memory_controller_percent: utilization.as_ref().map(|u| u.memory),
        memory,
        power_watts: power_mw.map(|mw| f64::from(mw) / 1000.0),
        power_limit_watts: limit_mw.map(|mw| f64::from(mw) / 1000.0),
        energy_joules: energy_mj.map(|mj| mj as f64 / 1000.0),
        temperature_celsius: temperature,
        temperature_slowdown_celsius: statics.slowdown.get(),
        temperature_shutdown_celsius: statics.shutdown.get(),
        sm_clock_mhz: sm_clock,
        mem_clock_mhz: mem_clock,
        sm_clock_max_mhz: statics.sm_max.get(),
        mem_clock_max_mhz: statics.mem_max.get(),
        encoder_percent: encoder.map(|e| e.utilization),
        decoder_percent: decoder.map(|d| d.utilization),
        // NVML reports KB/s.
        pcie_tx_bytes_per_second: pcie_tx.map(|kb| u64::from(kb) * 1024),
        pcie_rx_bytes_per_second: pcie_rx.map(|kb| u64::from(kb) * 1024),
        pcie_replays: replays.map(u64::from),
        performance_state: pstate.map(|p| p.as_c()),
        ecc_enabled,
        ecc,
        retired_pages,
        remapped_rows: fields.remapped_rows,
        memory_temperature_celsius: fields.memory_temperature_celsius,
        nvlinks: nvlinks.links,
        nvlink_data_bytes_per_second: nvlinks.data_bytes_per_second,
        clock_events: match (statics.supported_clock_events.get(), active_events) {
            (Some(supported), Some(active)) => Some(ClockEvents { supported, active }),
            _ => None,
        },
        recovery_action: fields.recovery_action,
        ..GpuReadings::default()
    })
}

fn read_ecc(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<Option<EccCounts>, Lost> {
    let key = |error: u32, counter: u32| CallKey::on("nvmlDeviceGetTotalEccErrors", device).arg(error * 2 + counter);
    // Arguments: nvmlMemoryErrorType_t (0 corrected, 1 uncorrected) and
    // nvmlEccCounterType_t (0 volatile, 1 aggregate).
    let cv = calls.get(key(0, 0), || device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile))?;
    let uv = calls.get(key(1, 0), || device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile))?;
    let ca = calls.get(key(0, 1), || device.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate))?;
    let ua = calls.get(key(1, 1), || device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate))?;
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
    // Argument: nvmlPageRetirementCause_t (0 multiple single-bit, 1 double-bit).
    let key = CallKey::on("nvmlDeviceGetRetiredPages_v2", device);
    let single = calls.get(key.arg(0), || device.retired_pages(RetirementCause::MultipleSingleBitEccErrors))?;
    let double = calls.get(key.arg(1), || device.retired_pages(RetirementCause::DoubleBitEccError))?;
    let pending = calls
        .get(CallKey::on("nvmlDeviceGetRetiredPagesPendingStatus", device), || device.are_pages_pending_retired())?;
    Ok(match (single, double, pending) {
        (Some(s), Some(d), Some(p)) => {
            Some(RetiredPages { single_bit_ecc: s.len() as u64, double_bit_ecc: d.len() as u64, pending: p })
        }
        _ => None,
    })
}

/// Row remapping, the recovery action and the memory temperature, in one
/// `nvmlDeviceGetFieldValues` call (`nvml-wrapper` does not wrap
/// `nvmlDeviceGetRemappedRows`; `nvml.h` has no temperature sensor for memory, only
/// the field `NVML_FI_DEV_MEMORY_TEMP`, 82, which is what DCGM reads for
/// `DCGM_FI_DEV_MEMORY_TEMP`: NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp`). A field
/// that answers `GPU_IS_LOST` ends the read as Lost, as the call itself would; any
/// other per-field error leaves that field absent and is counted.
fn read_fields(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<FieldReadings, Lost> {
    const CALL: &str = "nvmlDeviceGetFieldValues";
    let ids = [
        FieldId(NVML_FI_DEV_REMAPPED_COR),
        FieldId(NVML_FI_DEV_REMAPPED_UNC),
        FieldId(NVML_FI_DEV_REMAPPED_PENDING),
        FieldId(NVML_FI_DEV_REMAPPED_FAILURE),
        FieldId(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
        FieldId(NVML_FI_DEV_MEMORY_TEMP),
    ];
    let Some(samples) = calls.get(CallKey::on(CALL, device), || device.field_values_for(&ids))? else {
        return Ok(FieldReadings::default());
    };
    let mut values: Vec<Option<u64>> = Vec::with_capacity(samples.len());
    let mut failed: Option<NvmlError> = None;
    for (i, sample) in samples.into_iter().enumerate() {
        match sample.and_then(|s| s.value) {
            Ok(v) if i == MEMORY_TEMP_SLOT => values.push(memory_temperature(&v)),
            Ok(v) => values.push(as_u64(&v)),
            Err(NvmlError::GpuLost) => return Err(Lost),
            // A board without row remapping (or a recovery action) says so per field.
            Err(NvmlError::NotSupported) => values.push(None),
            Err(e) => {
                failed.get_or_insert(e);
                values.push(None);
            }
        }
    }
    if let Some(e) = failed {
        calls.fail(CALL, &e);
    }
    let rows = match values.get(..4) {
        Some([Some(cor), Some(unc), Some(pending), Some(failed)]) => {
            Some(RemappedRows { correctable: *cor, uncorrectable: *unc, pending: *pending != 0, failed: *failed != 0 })
        }
        _ => None,
    };
    let action = values.get(4).copied().flatten().map(|code| RecoveryAction::from_code(code as u32));
    let memory_temperature_celsius = values.get(MEMORY_TEMP_SLOT).copied().flatten().map(|c| c as u32);
    Ok(FieldReadings { remapped_rows: rows, recovery_action: action, memory_temperature_celsius })
}

/// Position of `NVML_FI_DEV_MEMORY_TEMP` in [`read_fields`]' request.
const MEMORY_TEMP_SLOT: usize = 5;

/// The memory temperature in a field value. Some drivers (r545, NVIDIA bug 4300930,
/// noted in DCGM's `DcgmCacheManager.cpp`) label the value a double while writing an
/// unsigned int: a "double" whose upper 32 bits are zero is that integer. DCGM also
/// treats a reading over 200 °C as no reading; so does this.
fn memory_temperature(value: &SampleValue) -> Option<u64> {
    let celsius = match *value {
        SampleValue::F64(v) if v.to_bits() >> 32 == 0 => v.to_bits(),
        ref other => as_u64(other)?,
    };
    (celsius <= 200).then_some(celsius)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_temperature_mislabelled_as_a_double_is_read_as_its_integer() {
        assert_eq!(memory_temperature(&SampleValue::U32(71)), Some(71));
        // The driver wrote uiVal = 68 into the union but said "double".
        assert_eq!(memory_temperature(&SampleValue::F64(f64::from_bits(68))), Some(68));
        assert_eq!(memory_temperature(&SampleValue::F64(70.0)), Some(70), "a real double is taken as it is");
        assert_eq!(memory_temperature(&SampleValue::U32(201)), None, "over 200 °C is no reading");
        assert_eq!(memory_temperature(&SampleValue::I64(-5)), None);
    }
}
