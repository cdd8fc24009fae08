//! Per-GPU queries. Each answers what the GPU's model would answer, including
//! `NVML_ERROR_NOT_SUPPORTED` for features the model lacks.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{
    nvmlClockType_t, nvmlDevice_t, nvmlDeviceArchitecture_t, nvmlEccCounterType_t, nvmlEnableState_t, nvmlGpmSupport_t,
    nvmlMemory_t, nvmlMemory_v2_t, nvmlMemoryErrorType_t, nvmlPageRetirementCause_t, nvmlPciInfo_t,
    nvmlPcieUtilCounter_t, nvmlPstates_t, nvmlReturn_t, nvmlTemperatureSensors_t, nvmlTemperatureThresholds_t,
    nvmlUtilization_t,
};

use super::{Target, device_call, loaded, put, put_str, ret, target_call};
use crate::node::instance_memory_used_bytes;

const CLOCK_GRAPHICS: nvmlClockType_t = 0;
const CLOCK_SM: nvmlClockType_t = 1;
const CLOCK_MEM: nvmlClockType_t = 2;
const CLOCK_VIDEO: nvmlClockType_t = 3;

/// `nvmlMemory_v2` as `NVML_STRUCT_VERSION(Memory, 2)` encodes it.
const MEMORY_V2_VERSION: c_uint = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);
const GPM_SUPPORT_VERSION: c_uint = 1;

/// Every clock-event reason an NVML 12 driver can report on these boards.
const SUPPORTED_CLOCK_EVENT_REASONS: u64 = 0x1ff;

/// Encoder and decoder utilization sampling period NVML reports (microseconds).
const CODEC_SAMPLING_PERIOD_US: c_uint = 167_000;

macro_rules! out {
    ($ptr:expr, $value:expr) => {
        // SAFETY: the exported function's caller provides a valid pointer or null.
        unsafe { put($ptr, $value) }
    };
}

/// # Safety
/// `index` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    target_call("nvmlDeviceGetIndex", device, |target, _| match target {
        Target::Gpu(gpu) => out!(index, gpu.spec.index),
        // The MIG device's index under its parent (`nvmlDeviceGetMigDeviceHandleByIndex`).
        Target::Mig(_, mig) => out!(index, mig.index),
    })
}

/// # Safety
/// `name` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    target_call("nvmlDeviceGetName", device, |target, _| {
        let text = match target {
            Target::Gpu(gpu) => gpu.spec.model.name.to_string(),
            Target::Mig(gpu, mig) => format!("{} MIG {}", gpu.spec.model.name, mig.profile.name),
        };
        // SAFETY: caller contract.
        unsafe { put_str(name, length, &text) }
    })
}

/// # Safety
/// `uuid` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    target_call("nvmlDeviceGetUUID", device, |target, _| {
        let text = match target {
            Target::Gpu(gpu) => &gpu.spec.uuid,
            Target::Mig(_, mig) => &mig.uuid,
        };
        // SAFETY: caller contract.
        unsafe { put_str(uuid, length, text) }
    })
}

/// # Safety
/// `serial` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: nvmlDevice_t,
    serial: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetSerial", device, |gpu, _| {
        // SAFETY: caller contract.
        unsafe { put_str(serial, length, &gpu.spec.serial) }
    })
}

/// Copies `text` into a fixed C string field, truncated to leave its NUL.
pub(super) fn copy_into<const N: usize>(dst: &mut [c_char; N], text: &str) {
    for (d, s) in dst.iter_mut().zip(text.bytes().take(N - 1)) {
        *d = s as c_char;
    }
}

/// # Safety
/// `pci` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPciInfo_v3", device, |gpu, _| {
        let a = gpu.spec.pci;
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: a.domain,
            bus: a.bus,
            device: a.device,
            pciDeviceId: gpu.spec.model.pci_device_id,
            pciSubSystemId: 0x1839_10DE,
            busId: [0; 32],
        };
        let full = format!("{:08X}:{:02X}:{:02X}.{:X}", a.domain, a.bus, a.device, a.function);
        let legacy = format!("{:04X}:{:02X}:{:02X}.{:X}", a.domain, a.bus, a.device, a.function);
        copy_into(&mut info.busId, &full);
        copy_into(&mut info.busIdLegacy, &legacy);
        out!(pci, info)
    })
}

/// # Safety
/// `memory` is null or valid for a read and a write of `nvmlMemory_v2_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    target_call("nvmlDeviceGetMemoryInfo_v2", device, |target, t| {
        if memory.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller sets `version` before the call.
        if unsafe { (*memory).version } != MEMORY_V2_VERSION {
            return Err(ret::ARGUMENT_VERSION_MISMATCH);
        }
        let state = loaded()?;
        let (total, reserved, used) = match target {
            Target::Gpu(gpu) => (
                gpu.spec.model.memory_total_bytes,
                gpu.spec.model.memory_reserved_bytes,
                gpu.memory_used_bytes(t, state.node.processes_on(gpu.spec.index, None, t)),
            ),
            Target::Mig(gpu, mig) => (
                mig.profile.memory_mib * 1024 * 1024,
                0,
                instance_memory_used_bytes(&state.node, gpu.spec.index, mig, t),
            ),
        };
        out!(
            memory,
            nvmlMemory_v2_t { version: MEMORY_V2_VERSION, total, reserved, free: total - reserved - used, used }
        )
    })
}

/// The v1 struct, where the driver counts its reservation as used. A MIG device
/// handle answers its instance's memory (the device plugin reads a MIG device's total
/// this way, `internal/rm/nvml_devices.go`).
///
/// # Safety
/// `memory` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> nvmlReturn_t {
    target_call("nvmlDeviceGetMemoryInfo", device, |target, t| {
        let state = loaded()?;
        let (total, used) = match target {
            Target::Gpu(gpu) => (
                gpu.spec.model.memory_total_bytes,
                gpu.memory_used_bytes(t, state.node.processes_on(gpu.spec.index, None, t))
                    + gpu.spec.model.memory_reserved_bytes,
            ),
            Target::Mig(gpu, mig) => {
                (mig.profile.memory_mib * 1024 * 1024, instance_memory_used_bytes(&state.node, gpu.spec.index, mig, t))
            }
        };
        out!(memory, nvmlMemory_t { total, free: total.saturating_sub(used), used })
    })
}

/// The GPU's device minor (`/dev/nvidia<minor>`), [`crate::scenario::Gpu::minor_number`].
///
/// # Safety
/// `minor_number` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minor_number: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMinorNumber", device, |gpu, _| out!(minor_number, gpu.spec.minor_number()))
}

/// # Safety
/// `utilization` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUtilizationRates", device, |gpu, t| {
        // In MIG mode the driver has no GPU-wide utilization; GPM gives it per instance.
        if gpu.spec.mig.is_some() {
            return Err(ret::NOT_SUPPORTED);
        }
        out!(utilization, nvmlUtilization_t { gpu: gpu.utilization(t), memory: gpu.memory_activity(t) })
    })
}

/// Milliwatts.
///
/// # Safety
/// `power` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPowerUsage", device, |gpu, t| {
        out!(power, (gpu.power_watts(t) * 1000.0).round() as c_uint)
    })
}

/// Millijoules since the driver loaded.
///
/// # Safety
/// `energy` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEnergyConsumption", device, |gpu, t| {
        out!(energy, (gpu.energy_joules(t) * 1000.0).round() as c_ulonglong)
    })
}

/// # Safety
/// `limit` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, limit: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetEnforcedPowerLimit", device, |gpu, _| {
        out!(limit, (gpu.spec.power_limit_watts * 1000.0).round() as c_uint)
    })
}

/// # Safety
/// `limit` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, limit: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPowerManagementLimit", device, |gpu, _| {
        out!(limit, (gpu.spec.power_limit_watts * 1000.0).round() as c_uint)
    })
}

/// # Safety
/// `temp` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor_type: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTemperature", device, |gpu, t| {
        if sensor_type != 0 {
            return Err(ret::INVALID_ARGUMENT);
        }
        out!(temp, gpu.temperature_c(t))
    })
}

/// # Safety
/// `temp` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: nvmlDevice_t,
    threshold_type: nvmlTemperatureThresholds_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTemperatureThreshold", device, |gpu, _| {
        let value = match threshold_type {
            0 => Some(gpu.spec.temperature_shutdown_c),
            1 => Some(gpu.spec.temperature_slowdown_c),
            2 => gpu.spec.model.temp_mem_max_c,
            3 => Some(gpu.spec.model.temp_gpu_max_c),
            _ => None,
        };
        out!(temp, value.ok_or(ret::NOT_SUPPORTED)?)
    })
}

fn clock_of(gpu: &crate::node::SimGpu, clock: nvmlClockType_t, t: f64, max: bool) -> Result<c_uint, nvmlReturn_t> {
    let model = gpu.spec.model;
    Ok(match (clock, max) {
        (CLOCK_GRAPHICS | CLOCK_SM, false) => gpu.sm_clock_mhz(t),
        (CLOCK_GRAPHICS | CLOCK_SM, true) => model.max_sm_clock_mhz,
        (CLOCK_MEM, false) => gpu.mem_clock_mhz(t),
        (CLOCK_MEM, true) => model.max_mem_clock_mhz,
        (CLOCK_VIDEO, false) => gpu.sm_clock_mhz(t) * 9 / 10,
        (CLOCK_VIDEO, true) => model.max_sm_clock_mhz * 9 / 10,
        _ => return Err(ret::INVALID_ARGUMENT),
    })
}

/// # Safety
/// `clock` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    type_: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetClockInfo", device, |gpu, t| out!(clock, clock_of(gpu, type_, t, false)?))
}

/// # Safety
/// `clock` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    type_: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMaxClockInfo", device, |gpu, t| out!(clock, clock_of(gpu, type_, t, true)?))
}

/// Encoder or decoder utilization, on models that have the engine.
fn codec_utilization(
    call: &str,
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
    has_engine: fn(&crate::models::Model) -> bool,
    reading: fn(&crate::node::SimGpu, f64) -> u32,
) -> nvmlReturn_t {
    device_call(call, device, |gpu, t| {
        if !has_engine(gpu.spec.model) {
            return Err(ret::NOT_SUPPORTED);
        }
        out!(sampling_period_us, CODEC_SAMPLING_PERIOD_US)?;
        out!(utilization, reading(gpu, t))
    })
}

/// # Safety
/// Both pointers are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    let call = "nvmlDeviceGetEncoderUtilization";
    codec_utilization(call, device, utilization, sampling_period_us, |m| m.nvenc, |g, t| g.encoder_utilization(t))
}

/// # Safety
/// Both pointers are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    let call = "nvmlDeviceGetDecoderUtilization";
    codec_utilization(call, device, utilization, sampling_period_us, |m| m.nvdec, |g, t| g.decoder_utilization(t))
}

/// KB/s over NVML's 20 ms window.
///
/// # Safety
/// `value` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPcieThroughput", device, |gpu, t| {
        let kbps = match counter {
            0 => gpu.pcie_kbps(true, t),
            1 => gpu.pcie_kbps(false, t),
            _ => return Err(ret::INVALID_ARGUMENT),
        };
        out!(value, kbps)
    })
}

/// # Safety
/// `value` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(device: nvmlDevice_t, value: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPcieReplayCounter", device, |gpu, t| {
        out!(value, gpu.pcie_replays(t).min(u64::from(u32::MAX)) as c_uint)
    })
}

/// # Safety
/// Both pointers are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetEccMode", device, |gpu, _| {
        if !gpu.spec.model.ecc_supported {
            return Err(ret::NOT_SUPPORTED);
        }
        let mode = nvmlEnableState_t::from(gpu.spec.ecc_enabled);
        out!(current, mode)?;
        out!(pending, mode)
    })
}

/// # Safety
/// `ecc_counts` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    ecc_counts: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEccErrors", device, |gpu, t| {
        if !gpu.spec.model.ecc_supported {
            return Err(ret::NOT_SUPPORTED);
        }
        let c = gpu.ecc_counts(t);
        let value = match (error_type, counter_type) {
            (0, 0) => c.corrected_volatile,
            (1, 0) => c.uncorrected_volatile,
            (0, 1) => c.corrected_aggregate,
            (1, 1) => c.uncorrected_aggregate,
            _ => return Err(ret::INVALID_ARGUMENT),
        };
        out!(ecc_counts, value)
    })
}

/// Shared body of both retired-pages calls: the count protocol with
/// `NVML_ERROR_INSUFFICIENT_SIZE`, then addresses (and timestamps) per page.
fn retired_pages(
    call: &str,
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    page_count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(call, device, |gpu, t| {
        if !gpu.spec.model.page_retirement {
            return Err(ret::NOT_SUPPORTED);
        }
        if page_count.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        let pages = gpu.retired_pages(t);
        let found = match cause {
            0 => pages.single_bit,
            1 => pages.double_bit,
            _ => return Err(ret::INVALID_ARGUMENT),
        };
        // SAFETY: non-null, caller contract.
        let room = unsafe { *page_count };
        out!(page_count, found)?;
        if room < found {
            return Err(ret::INSUFFICIENT_SIZE);
        }
        for i in 0..found as usize {
            let address = 0x7f00_0000u64 + (u64::from(cause) << 20) + i as u64 * 0x1000;
            // SAFETY: the caller's buffers hold `room >= found` entries.
            unsafe {
                if !addresses.is_null() {
                    addresses.add(i).write(address);
                }
                if !timestamps.is_null() {
                    timestamps.add(i).write(1_700_000_000 + i as u64);
                }
            }
        }
        Ok(())
    })
}

/// # Safety
/// `page_count` is null or valid; `addresses` holds `*page_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    page_count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> nvmlReturn_t {
    retired_pages("nvmlDeviceGetRetiredPages", device, cause, page_count, addresses, std::ptr::null_mut())
}

/// # Safety
/// `page_count` is null or valid; `addresses` and `timestamps` hold `*page_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    page_count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    retired_pages("nvmlDeviceGetRetiredPages_v2", device, cause, page_count, addresses, timestamps)
}

/// # Safety
/// `is_pending` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: nvmlDevice_t,
    is_pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetRetiredPagesPendingStatus", device, |gpu, t| {
        if !gpu.spec.model.page_retirement {
            return Err(ret::NOT_SUPPORTED);
        }
        out!(is_pending, nvmlEnableState_t::from(gpu.retired_pages(t).pending))
    })
}

/// # Safety
/// Every pointer is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    corr_rows: *mut c_uint,
    unc_rows: *mut c_uint,
    is_pending: *mut c_uint,
    failure_occurred: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetRemappedRows", device, |gpu, t| {
        if !gpu.spec.model.row_remapping {
            return Err(ret::NOT_SUPPORTED);
        }
        let rows = gpu.remapped_rows(t);
        out!(corr_rows, rows.correctable)?;
        out!(unc_rows, rows.uncorrectable)?;
        out!(is_pending, c_uint::from(rows.pending))?;
        out!(failure_occurred, c_uint::from(rows.failed))
    })
}

fn clock_event_reasons(call: &str, device: nvmlDevice_t, out: *mut c_ulonglong, supported: bool) -> nvmlReturn_t {
    device_call(call, device, |gpu, t| {
        let mask = if supported { SUPPORTED_CLOCK_EVENT_REASONS } else { gpu.clock_event_reasons(t) };
        out!(out, mask)
    })
}

/// # Safety
/// `reasons` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_event_reasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons, false)
}

/// The pre-12.2 name of the same call.
///
/// # Safety
/// `reasons` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_event_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons, false)
}

/// # Safety
/// `reasons` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedClocksEventReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_event_reasons("nvmlDeviceGetSupportedClocksEventReasons", device, reasons, true)
}

/// # Safety
/// `reasons` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_event_reasons("nvmlDeviceGetSupportedClocksThrottleReasons", device, reasons, true)
}

/// # Safety
/// `p_state` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: nvmlDevice_t,
    p_state: *mut nvmlPstates_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPerformanceState", device, |gpu, t| out!(p_state, gpu.performance_state(t)))
}

/// MIG mode: enabled when the scenario gives the GPU a MIG layout.
///
/// # Safety
/// Both pointers are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current_mode: *mut c_uint,
    pending_mode: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigMode", device, |gpu, _| {
        if !gpu.spec.model.mig_capable {
            return Err(ret::NOT_SUPPORTED);
        }
        let mode = c_uint::from(gpu.spec.mig.is_some());
        out!(current_mode, mode)?;
        out!(pending_mode, mode)
    })
}

/// # Safety
/// `arch` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: nvmlDevice_t,
    arch: *mut nvmlDeviceArchitecture_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetArchitecture", device, |gpu, _| out!(arch, gpu.spec.model.architecture))
}

/// # Safety
/// Both pointers are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetCudaComputeCapability", device, |gpu, _| {
        let (ma, mi) = gpu.spec.model.compute_capability;
        out!(major, ma)?;
        out!(minor, mi)
    })
}

/// # Safety
/// `gpm_support` is null or valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    gpm_support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    target_call("nvmlGpmQueryDeviceSupport", device, |target, _| {
        let gpu = match target {
            Target::Gpu(g) | Target::Mig(g, _) => g,
        };
        if gpm_support.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller sets `version`.
        if unsafe { (*gpm_support).version } != GPM_SUPPORT_VERSION {
            return Err(ret::ARGUMENT_VERSION_MISMATCH);
        }
        out!(
            gpm_support,
            nvmlGpmSupport_t { version: GPM_SUPPORT_VERSION, isSupportedDevice: c_uint::from(gpu.spec.model.gpm) }
        )
    })
}
