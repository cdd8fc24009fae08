//! GPU processes: the running compute (and MPS client) processes of a GPU or MIG
//! instance, and per-process utilization samples, with NVML's count protocol
//! (`NVML_ERROR_INSUFFICIENT_SIZE` and the needed count when the buffer is too small).
//! Scenario processes are compute processes: the graphics list (which gpustat and
//! pynvml users ask for) is always empty, as on a headless data-center node.

use std::ffi::{c_uint, c_ulonglong};
use std::time::{SystemTime, UNIX_EPOCH};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlProcessInfo_t, nvmlProcessUtilizationSample_t, nvmlReturn_t};

use super::{Target, loaded, ret, target_call};
use crate::node::{process_memory_bytes, process_sm_utilization};
use crate::scenario::Process;

/// GPU/compute instance id NVML reports for a process outside MIG.
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// Which process list a call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Compute,
    Mps,
    Graphics,
}

/// Fills `infos` (room for `*count` entries) or reports the count needed.
///
/// # Safety
/// `count` is null or valid; `infos` is null or holds `*count` entries.
unsafe fn list_processes(
    call: &str,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
    kind: Kind,
) -> nvmlReturn_t {
    target_call(call, device, |target, t| {
        if count.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        let state = loaded()?;
        let (gpu, instance) = match target {
            Target::Gpu(g) => (g, None),
            Target::Mig(g, m) => (g, Some(m)),
        };
        let instances = gpu.spec.mig.as_deref().unwrap_or_default();
        let found: Vec<&Process> = state
            .node
            .processes_on(gpu.spec.index, instance.map(|m| m.index), t)
            .filter(|p| match kind {
                Kind::Compute => !p.mps,
                Kind::Mps => p.mps,
                Kind::Graphics => false,
            })
            .collect();
        // SAFETY: non-null, caller contract.
        let room = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = found.len() as c_uint };
        if found.is_empty() {
            return Ok(());
        }
        if infos.is_null() || room < found.len() {
            return Err(ret::INSUFFICIENT_SIZE);
        }
        for (i, p) in found.iter().enumerate() {
            let (gi, ci) = match p.mig.and_then(|m| instances.get(m as usize)) {
                Some(m) => (m.gpu_instance_id, m.compute_instance_id),
                None => (NO_INSTANCE, NO_INSTANCE),
            };
            let info = nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: process_memory_bytes(p, t),
                gpuInstanceId: gi,
                computeInstanceId: ci,
            };
            // SAFETY: the buffer holds `room >= found.len()` entries.
            unsafe { infos.add(i).write(info) };
        }
        Ok(())
    })
}

/// # Safety
/// `info_count` is null or valid; `infos` is null or holds `*info_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: forwarded caller contract.
    unsafe { list_processes("nvmlDeviceGetComputeRunningProcesses_v3", device, info_count, infos, Kind::Compute) }
}

/// # Safety
/// `info_count` is null or valid; `infos` is null or holds `*info_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: forwarded caller contract.
    unsafe { list_processes("nvmlDeviceGetMPSComputeRunningProcesses_v3", device, info_count, infos, Kind::Mps) }
}

/// # Safety
/// `info_count` is null or valid; `infos` is null or holds `*info_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: forwarded caller contract.
    unsafe { list_processes("nvmlDeviceGetGraphicsRunningProcesses_v3", device, info_count, infos, Kind::Graphics) }
}

/// One sample per running process, stamped now; none (and `NVML_ERROR_NOT_FOUND`)
/// when nothing is newer than `last_seen_time_stamp`. Not supported in MIG mode.
///
/// # Safety
/// `samples_count` is null or valid; `utilization` is null or holds `*samples_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> nvmlReturn_t {
    target_call("nvmlDeviceGetProcessUtilization", device, |target, t| {
        let gpu = match target {
            Target::Gpu(g) if g.spec.mig.is_none() => g,
            _ => return Err(ret::NOT_SUPPORTED),
        };
        if samples_count.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        let now_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let state = loaded()?;
        let found: Vec<&Process> = if now_us > last_seen_time_stamp {
            state.node.processes_on(gpu.spec.index, None, t).collect()
        } else {
            Vec::new()
        };
        // SAFETY: non-null, caller contract.
        let room = unsafe { *samples_count } as usize;
        // SAFETY: as above.
        unsafe { *samples_count = found.len() as c_uint };
        if found.is_empty() {
            return Err(ret::NOT_FOUND);
        }
        if utilization.is_null() || room < found.len() {
            return Err(ret::INSUFFICIENT_SIZE);
        }
        for (i, p) in found.iter().enumerate() {
            let sample = nvmlProcessUtilizationSample_t {
                pid: p.pid,
                timeStamp: now_us,
                smUtil: process_sm_utilization(p, t),
                memUtil: 0,
                encUtil: 0,
                decUtil: 0,
            };
            // SAFETY: the buffer holds `room >= found.len()` entries.
            unsafe { utilization.add(i).write(sample) };
        }
        Ok(())
    })
}
