//! MIG: enumerating a GPU's MIG devices, their GPU/compute instance ids, profiles and
//! the capacity left. MIG device handles answer the calls `nvml.h` says a MIG device
//! answers ([`crate::calls::MIG_HANDLE_CALLS`]: UUID, name, memory, attributes,
//! processes, instance ids, GPM).
//!
//! Profiles are looked up as the driver does: `nvmlDeviceGetGpuInstanceProfileInfoV`
//! by profile index (`NVML_GPU_INSTANCE_PROFILE_*`), answering `NOT_SUPPORTED` for an
//! index this GPU does not offer and `INVALID_ARGUMENT` past the last index the driver
//! knows (the end of a forward-compatible enumeration); everything else by the
//! driver's profile id.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlDeviceAttributes_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlReturn_t,
};

use super::{
    GPU_INSTANCE_SLOTS, MAX_MIG, Target, device_call, device_handle, guard, loaded, mig_handle, put, ret, slot_offset,
    target_call,
};
use crate::models::{MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, MigProfile, PROFILE_INDEX_COUNT};
use crate::node::SimGpu;

/// `NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)`.
const PROFILE_INFO_V2_VERSION: c_uint = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as c_uint) | (2 << 24);

macro_rules! out {
    ($ptr:expr, $value:expr) => {
        // SAFETY: the exported function's caller provides a valid pointer or null.
        unsafe { put($ptr, $value) }
    };
}

fn mig_capable(gpu: &SimGpu) -> Result<(), nvmlReturn_t> {
    if gpu.spec.model.mig_capable { Ok(()) } else { Err(ret::NOT_SUPPORTED) }
}

/// # Safety
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMaxMigDeviceCount", device, |gpu, _| {
        mig_capable(gpu)?;
        out!(count, MIG_COMPUTE_SLICES)
    })
}

/// # Safety
/// `mig_device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigDeviceHandleByIndex", device, |gpu, _| {
        mig_capable(gpu)?;
        if index >= MIG_COMPUTE_SLICES {
            return Err(ret::INVALID_ARGUMENT);
        }
        let instances = gpu.spec.mig.as_ref().ok_or(ret::INVALID_ARGUMENT)?;
        if (index as usize) >= instances.len() {
            return Err(ret::NOT_FOUND);
        }
        out!(mig_device, mig_handle(gpu.spec.index as usize, index as usize))
    })
}

/// # Safety
/// `is_mig_device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, is_mig_device: *mut c_uint) -> nvmlReturn_t {
    target_call("nvmlDeviceIsMigDeviceHandle", device, |target, _| {
        out!(is_mig_device, c_uint::from(matches!(target, Target::Mig(..))))
    })
}

/// # Safety
/// `parent` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    parent: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    target_call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig_device, |target, _| match target {
        Target::Mig(gpu, _) => out!(parent, device_handle(gpu.spec.index as usize)),
        Target::Gpu(_) => Err(ret::INVALID_ARGUMENT),
    })
}

/// # Safety
/// `id` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    target_call("nvmlDeviceGetGpuInstanceId", device, |target, _| match target {
        Target::Mig(_, mig) => out!(id, mig.gpu_instance_id),
        Target::Gpu(_) => Err(ret::NOT_SUPPORTED),
    })
}

/// # Safety
/// `id` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    target_call("nvmlDeviceGetComputeInstanceId", device, |target, _| match target {
        Target::Mig(_, mig) => out!(id, mig.compute_instance_id),
        Target::Gpu(_) => Err(ret::NOT_SUPPORTED),
    })
}

/// # Safety
/// `attributes` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: nvmlDevice_t,
    attributes: *mut nvmlDeviceAttributes_t,
) -> nvmlReturn_t {
    target_call("nvmlDeviceGetAttributes_v2", device, |target, _| {
        let (slices, memory_mib, sms) = match target {
            Target::Mig(_, mig) => (mig.profile.compute_slices, mig.profile.memory_mib, mig.profile.multiprocessors),
            // nvml.h: "This API currently only supports MIG device handles."
            Target::Gpu(_) => return Err(ret::NOT_SUPPORTED),
        };
        out!(
            attributes,
            nvmlDeviceAttributes_t {
                multiprocessorCount: sms,
                sharedCopyEngineCount: slices,
                sharedDecoderCount: slices.div_ceil(2),
                sharedEncoderCount: 0,
                sharedJpegCount: slices.div_ceil(7),
                sharedOfaCount: slices.div_ceil(7),
                gpuInstanceSliceCount: slices,
                computeInstanceSliceCount: slices,
                memorySizeMB: memory_mib,
            }
        )
    })
}

fn copy_name(dst: &mut [std::ffi::c_char; 96], text: &str) {
    for (d, s) in dst.iter_mut().zip(text.bytes().take(95)) {
        *d = s as std::ffi::c_char;
    }
}

/// Fills a profile-info answer, checking the caller's struct version first.
///
/// # Safety
/// `info` is null or valid for a read and a write.
unsafe fn profile_info(info: *mut nvmlGpuInstanceProfileInfo_v2_t, p: &MigProfile) -> Result<(), nvmlReturn_t> {
    if info.is_null() {
        return Err(ret::INVALID_ARGUMENT);
    }
    // SAFETY: non-null; the caller sets `version`.
    if unsafe { (*info).version } != PROFILE_INFO_V2_VERSION {
        return Err(ret::ARGUMENT_VERSION_MISMATCH);
    }
    // SAFETY: a plain C struct; all-zero is a valid value.
    let mut answer: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    answer.version = PROFILE_INFO_V2_VERSION;
    answer.id = p.profile_id;
    answer.sliceCount = p.compute_slices;
    answer.instanceCount = p.max_instances;
    answer.multiprocessorCount = p.multiprocessors;
    answer.copyEngineCount = p.compute_slices;
    answer.decoderCount = p.compute_slices.div_ceil(2);
    answer.memorySizeMB = p.memory_mib;
    copy_name(&mut answer.name, &format!("MIG {}", p.name));
    out!(info, answer)
}

/// Profile indices this GPU's driver knows: NVML's count, or more where the scenario
/// gives the GPU a newer driver's profiles.
fn index_count(gpu: &SimGpu) -> u32 {
    gpu.spec.mig_profiles.iter().map(|p| p.index + 1).max().unwrap_or(0).max(PROFILE_INDEX_COUNT)
}

fn by_id(gpu: &SimGpu, id: c_uint) -> Result<&MigProfile, nvmlReturn_t> {
    gpu.spec.mig_profiles.iter().find(|p| p.profile_id == id).ok_or(ret::NOT_SUPPORTED)
}

/// # Safety
/// `info` is null or valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceProfileInfoV", device, |gpu, _| {
        mig_capable(gpu)?;
        if profile >= index_count(gpu) {
            return Err(ret::INVALID_ARGUMENT);
        }
        let p = gpu.spec.mig_profiles.iter().find(|p| p.index == profile).ok_or(ret::NOT_SUPPORTED)?;
        // SAFETY: caller contract.
        unsafe { profile_info(info, p) }
    })
}

/// # Safety
/// `info` is null or valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    device: nvmlDevice_t,
    profile_id: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceProfileInfoByIdV", device, |gpu, _| {
        mig_capable(gpu)?;
        let p = by_id(gpu, profile_id)?;
        // SAFETY: caller contract.
        unsafe { profile_info(info, p) }
    })
}

/// How many more instances of `profile` fit in the free compute and memory slices.
/// Real placement is also constrained by alignment; this counts slices only.
///
/// # Safety
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: nvmlDevice_t,
    profile: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceRemainingCapacity", device, |gpu, _| {
        mig_capable(gpu)?;
        let instances = gpu.spec.mig.as_ref().ok_or(ret::INVALID_ARGUMENT)?;
        let p = by_id(gpu, profile)?;
        let used_compute: u32 = instances.iter().map(|i| i.profile.compute_slices).sum();
        let used_memory: u32 = instances.iter().map(|i| i.profile.memory_slices).sum();
        let same = instances.iter().filter(|i| i.profile.profile_id == profile).count() as u32;
        let fit = ((MIG_COMPUTE_SLICES - used_compute) / p.compute_slices)
            .min((MIG_MEMORY_SLICES - used_memory) / p.memory_slices)
            .min(p.max_instances.saturating_sub(same));
        out!(count, fit)
    })
}

/// # Safety
/// `gpu_instance` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceById", device, |gpu, _| {
        mig_capable(gpu)?;
        let instances = gpu.spec.mig.as_ref().ok_or(ret::INVALID_ARGUMENT)?;
        let position = instances.iter().position(|i| i.gpu_instance_id == id).ok_or(ret::NOT_FOUND)?;
        let slot = gpu.spec.index as usize * MAX_MIG + position;
        out!(gpu_instance, GPU_INSTANCE_SLOTS[slot.min(GPU_INSTANCE_SLOTS.len() - 1)..].as_ptr() as nvmlGpuInstance_t)
    })
}

/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let slot = slot_offset(gpu_instance as usize, &GPU_INSTANCE_SLOTS).ok_or(ret::INVALID_ARGUMENT)?;
        let gpu = state.node.gpus.get(slot / MAX_MIG).ok_or(ret::INVALID_ARGUMENT)?;
        let instance = gpu.spec.mig.as_ref().and_then(|m| m.get(slot % MAX_MIG)).ok_or(ret::INVALID_ARGUMENT)?;
        let t = state.clock.now();
        if gpu.is_lost(t) {
            return Err(ret::GPU_IS_LOST);
        }
        if let Some(code) = gpu.injected_error("nvmlGpuInstanceGetInfo", None, t) {
            return Err(code);
        }
        out!(
            info,
            nvmlGpuInstanceInfo_t {
                device: device_handle(gpu.spec.index as usize),
                id: instance.gpu_instance_id,
                profileId: instance.profile.profile_id,
                placement: nvmlGpuInstancePlacement_t {
                    start: instance.placement_start,
                    size: instance.profile.compute_slices,
                },
            }
        )
    })
}
