//! Compute processes on a GPU or MIG device, with their memory and, on whole GPUs,
//! their SM utilization averaged over the samples NVML took since the last cycle.

use std::collections::BTreeMap;

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::calls::{CallKey, Calls, Lost};
use crate::snapshot::ProcessUsage;

fn memory(info: &ProcessInfo) -> Option<u64> {
    match info.used_gpu_memory {
        UsedGpuMemory::Used(bytes) => Some(bytes),
        UsedGpuMemory::Unavailable => None,
    }
}

/// Compute and MPS-client processes of `device` (a GPU or a MIG device), merged by PID.
pub fn list(calls: &mut Calls<'_>, device: &Device<'_>) -> Result<Vec<(ProcessInfo, Option<u64>)>, Lost> {
    let mut all: BTreeMap<u32, (ProcessInfo, Option<u64>)> = BTreeMap::new();
    let compute = calls
        .get(CallKey::on("nvmlDeviceGetComputeRunningProcesses_v3", device), || device.running_compute_processes())?;
    let mps = calls.get(CallKey::on("nvmlDeviceGetMPSComputeRunningProcesses_v3", device), || {
        device.mps_running_compute_processes()
    })?;
    for info in compute.into_iter().flatten().chain(mps.into_iter().flatten()) {
        let used = memory(&info);
        all.entry(info.pid).or_insert((info, used));
    }
    Ok(all.into_values().collect())
}

/// Per-PID mean SM utilization from the samples newer than `*last_seen_us`, which
/// moves forward to the newest sample. `None` where the GPU keeps no per-process
/// samples; a process without samples in the interval was idle.
pub fn utilization(
    calls: &mut Calls<'_>,
    device: &Device<'_>,
    last_seen_us: &mut u64,
) -> Result<Option<BTreeMap<u32, f64>>, Lost> {
    let since = *last_seen_us;
    // NOT_FOUND means no process ran a kernel since `since`.
    let key = CallKey::on("nvmlDeviceGetProcessUtilization", device);
    let samples = calls.get(key, || match device.process_utilization_stats(since) {
        Err(NvmlError::NotFound) => Ok(Vec::new()),
        other => other,
    })?;
    let Some(samples) = samples else { return Ok(None) };
    let mut sums: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
    for s in &samples {
        let entry = sums.entry(s.pid).or_default();
        entry.0 += f64::from(s.sm_util);
        entry.1 += 1;
        *last_seen_us = (*last_seen_us).max(s.timestamp);
    }
    Ok(Some(sums.into_iter().map(|(pid, (sum, n))| (pid, sum / f64::from(n))).collect()))
}

/// Whole-GPU processes with memory and SM utilization.
pub fn read_whole_gpu(
    calls: &mut Calls<'_>,
    device: &Device<'_>,
    last_seen_us: &mut u64,
) -> Result<Vec<ProcessUsage>, Lost> {
    let listed = list(calls, device)?;
    if listed.is_empty() {
        return Ok(Vec::new());
    }
    let utilization = utilization(calls, device, last_seen_us)?;
    Ok(listed
        .into_iter()
        .map(|(info, used)| ProcessUsage {
            pid: info.pid,
            used_memory_bytes: used,
            sm_utilization_percent: utilization.as_ref().map(|u| u.get(&info.pid).copied().unwrap_or(0.0)),
        })
        .collect())
}
