//! MIG: enumerating a GPU's MIG devices, their GPU/compute instance ids, profiles and
//! the capacity left. MIG device handles answer the calls `nvml.h` says a MIG device
//! answers ([`crate::calls::MIG_HANDLE_CALLS`]: UUID, name, memory, attributes,
//! processes, instance ids, GPM). GPU and compute instance handles are in
//! [`super::instances`].
//!
//! Profiles are looked up as the driver does: `nvmlDeviceGetGpuInstanceProfileInfo`
//! (the v1 struct, what go-nvlib's `VisitMigProfiles` and `GetProfile` call for the
//! device plugin) and `...InfoV` (v2, with the name) by profile index
//! (`NVML_GPU_INSTANCE_PROFILE_*`), answering `NOT_SUPPORTED` for an index this GPU does
//! not offer and `INVALID_ARGUMENT` past the last index the driver knows (the end of a
//! forward-compatible enumeration); everything else by the driver's profile id.
//!
//! Engine counts of an instance (copy engines, decoders, JPEG and OFA units) follow
//! its compute slices ([`engines`]), the same in the profile info and a MIG device's
//! attributes.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlDeviceAttributes_t, nvmlGpuInstanceProfileInfo_t, nvmlGpuInstanceProfileInfo_v2_t, nvmlReturn_t,
};

use super::{Target, device_call, device_handle, mig_handle, put, ret, target_call};
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

pub(super) fn mig_capable(gpu: &SimGpu) -> Result<(), nvmlReturn_t> {
    if gpu.spec.model.mig_capable { Ok(()) } else { Err(ret::NOT_SUPPORTED) }
}

/// Engines an instance of `compute_slices` slices holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Engines {
    pub copy: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg: u32,
    pub ofa: u32,
}

pub(super) fn engines(compute_slices: u32) -> Engines {
    Engines {
        copy: compute_slices,
        decoders: compute_slices.div_ceil(2),
        encoders: 0,
        jpeg: compute_slices.div_ceil(7),
        ofa: compute_slices.div_ceil(7),
    }
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
        let e = engines(slices);
        out!(
            attributes,
            nvmlDeviceAttributes_t {
                multiprocessorCount: sms,
                sharedCopyEngineCount: e.copy,
                sharedDecoderCount: e.decoders,
                sharedEncoderCount: e.encoders,
                sharedJpegCount: e.jpeg,
                sharedOfaCount: e.ofa,
                gpuInstanceSliceCount: slices,
                computeInstanceSliceCount: slices,
                memorySizeMB: memory_mib,
            }
        )
    })
}

pub(super) fn copy_name(dst: &mut [std::ffi::c_char; 96], text: &str) {
    for (d, s) in dst.iter_mut().zip(text.bytes().take(95)) {
        *d = s as std::ffi::c_char;
    }
}

/// A profile as the v1 struct describes it.
fn profile_info_v1(p: &MigProfile) -> nvmlGpuInstanceProfileInfo_t {
    let e = engines(p.compute_slices);
    nvmlGpuInstanceProfileInfo_t {
        id: p.profile_id,
        isP2pSupported: 0,
        sliceCount: p.compute_slices,
        instanceCount: p.max_instances,
        multiprocessorCount: p.multiprocessors,
        copyEngineCount: e.copy,
        decoderCount: e.decoders,
        encoderCount: e.encoders,
        jpegCount: e.jpeg,
        ofaCount: e.ofa,
        memorySizeMB: p.memory_mib,
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
    let v1 = profile_info_v1(p);
    // SAFETY: a plain C struct; all-zero is a valid value.
    let mut answer: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    answer.version = PROFILE_INFO_V2_VERSION;
    answer.id = v1.id;
    answer.sliceCount = v1.sliceCount;
    answer.instanceCount = v1.instanceCount;
    answer.multiprocessorCount = v1.multiprocessorCount;
    answer.copyEngineCount = v1.copyEngineCount;
    answer.decoderCount = v1.decoderCount;
    answer.encoderCount = v1.encoderCount;
    answer.jpegCount = v1.jpegCount;
    answer.ofaCount = v1.ofaCount;
    answer.memorySizeMB = v1.memorySizeMB;
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

/// The profile at index `profile` of this GPU.
fn by_index(gpu: &SimGpu, profile: c_uint) -> Result<&MigProfile, nvmlReturn_t> {
    mig_capable(gpu)?;
    if profile >= index_count(gpu) {
        return Err(ret::INVALID_ARGUMENT);
    }
    gpu.spec.mig_profiles.iter().find(|p| p.index == profile).ok_or(ret::NOT_SUPPORTED)
}

/// The v1 call, without a struct version or name (go-nvml's `GetGpuInstanceProfileInfo`).
///
/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceProfileInfo", device, |gpu, _| {
        let p = by_index(gpu, profile)?;
        out!(info, profile_info_v1(p))
    })
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
        let p = by_index(gpu, profile)?;
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
