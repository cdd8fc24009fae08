//! GPU instances and compute instances of a GPU in MIG mode: their handles, what they
//! say about themselves, and the compute-instance profiles a GPU instance offers.
//!
//! NVIDIA's device plugin names each MIG device through these (go-nvlib
//! `pkg/nvlib/device/mig_device.go` `GetProfile`, vendored by k8s-device-plugin
//! v0.17.4): MIG device -> GPU instance id -> `nvmlDeviceGetGpuInstanceById` ->
//! `nvmlGpuInstanceGetInfo` (profile id) and `nvmlGpuInstanceGetComputeInstanceById` ->
//! `nvmlComputeInstanceGetInfo_v2` (compute profile id), then it looks for the profile
//! indices whose ids match (`nvmlDeviceGetGpuInstanceProfileInfo`,
//! `nvmlGpuInstanceGetComputeInstanceProfileInfo`) and builds the name (`3g.40gb`,
//! `1g.10gb+me`) from those indices and the memory size.
//!
//! The simulator's GPU instances each hold one compute instance (id 0) of the same
//! size, so a compute instance has the full-size compute profile of its GPU instance.
//! Compute-instance profiles (`NVML_COMPUTE_INSTANCE_PROFILE_*`): index `i` has `i` as
//! its profile id, as `nvidia-smi mig -lcip` lists them; a GPU instance of `g` slices
//! offers the `c`-slice profile where `c == g`, or `c < g` and `2c <= g + 1` (the rule
//! go-nvlib's `VisitMigProfiles` uses for which `<c>c.<g>g` profiles exist), with the
//! shared engine profile only. `1_SLICE_REV1` answers `NOT_SUPPORTED`; an index or
//! engine profile past the count the driver knows, `INVALID_ARGUMENT`.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT, NVML_COMPUTE_INSTANCE_PROFILE_COUNT, nvmlComputeInstance_t,
    nvmlComputeInstanceInfo_t, nvmlComputeInstancePlacement_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstanceProfileInfo_v2_t, nvmlDevice_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t,
    nvmlGpuInstancePlacement_t, nvmlReturn_t,
};

use super::mig::{copy_name, engines, mig_capable};
use super::{
    COMPUTE_INSTANCE_SLOTS, GPU_INSTANCE_SLOTS, device_call, device_handle, guard, instance_handle, loaded, put, ret,
};
use crate::node::SimGpu;
use crate::scenario::MigInstance;

/// `NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)`.
const CI_PROFILE_INFO_V2_VERSION: c_uint =
    (std::mem::size_of::<nvmlComputeInstanceProfileInfo_v2_t>() as c_uint) | (2 << 24);

/// Compute slices of each `NVML_COMPUTE_INSTANCE_PROFILE_*` index: `1_SLICE`,
/// `2_SLICE`, `3_SLICE`, `4_SLICE`, `7_SLICE`, `8_SLICE`, `6_SLICE`, `1_SLICE_REV1`.
const CI_PROFILE_SLICES: [u32; NVML_COMPUTE_INSTANCE_PROFILE_COUNT as usize] = [1, 2, 3, 4, 7, 8, 6, 1];
const CI_PROFILE_1_SLICE_REV1: u32 = 7;

macro_rules! out {
    ($ptr:expr, $value:expr) => {
        // SAFETY: the exported function's caller provides a valid pointer or null.
        unsafe { put($ptr, $value) }
    };
}

/// The common prologue of a call on a GPU or compute instance handle (an address in
/// `slots`): state, handle, lost GPU, injected error on the instance's MIG device.
fn instance_call(
    call: &str,
    handle: usize,
    slots: &'static [u8],
    body: impl FnOnce(&SimGpu, &MigInstance) -> Result<(), nvmlReturn_t>,
) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let (gpu, instance) = state.instance_at(handle, slots)?;
        let t = state.clock.now();
        if gpu.is_lost(t) {
            return Err(ret::GPU_IS_LOST);
        }
        if let Some(code) = gpu.injected_error(call, None, t) {
            return Err(code);
        }
        body(gpu, instance)
    })
}

/// The compute-instance profile index of `slices` slices (the first that has them).
fn ci_profile_of(slices: u32) -> Option<u32> {
    CI_PROFILE_SLICES.iter().position(|s| *s == slices).map(|i| i as u32)
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
        out!(gpu_instance, instance_handle(&GPU_INSTANCE_SLOTS, gpu.spec.index as usize, position))
    })
}

/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    instance_call("nvmlGpuInstanceGetInfo", gpu_instance as usize, &GPU_INSTANCE_SLOTS, |gpu, instance| {
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

/// # Safety
/// `compute_instance` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: nvmlGpuInstance_t,
    id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    let call = "nvmlGpuInstanceGetComputeInstanceById";
    instance_call(call, gpu_instance as usize, &GPU_INSTANCE_SLOTS, |gpu, instance| {
        if id >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            return Err(ret::INVALID_ARGUMENT);
        }
        if id != instance.compute_instance_id {
            return Err(ret::NOT_FOUND);
        }
        let handle = instance_handle(&COMPUTE_INSTANCE_SLOTS, gpu.spec.index as usize, instance.index as usize);
        out!(compute_instance, handle)
    })
}

/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    let call = "nvmlComputeInstanceGetInfo_v2";
    instance_call(call, compute_instance as usize, &COMPUTE_INSTANCE_SLOTS, |gpu, instance| {
        let slices = instance.profile.compute_slices;
        let gpu_index = gpu.spec.index as usize;
        out!(
            info,
            nvmlComputeInstanceInfo_t {
                device: device_handle(gpu_index),
                gpuInstance: instance_handle(&GPU_INSTANCE_SLOTS, gpu_index, instance.index as usize),
                id: instance.compute_instance_id,
                profileId: ci_profile_of(slices).ok_or(ret::UNKNOWN)?,
                placement: nvmlComputeInstancePlacement_t { start: 0, size: slices },
            }
        )
    })
}

/// Compute-instance profile `profile` of `instance`'s GPU instance, as the v1 struct.
fn ci_profile(
    instance: &MigInstance,
    profile: c_uint,
    engine_profile: c_uint,
) -> Result<nvmlComputeInstanceProfileInfo_t, nvmlReturn_t> {
    if profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engine_profile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
        return Err(ret::INVALID_ARGUMENT);
    }
    let g = instance.profile.compute_slices;
    let c = CI_PROFILE_SLICES[profile as usize];
    if profile == CI_PROFILE_1_SLICE_REV1 || c > g || (c < g && 2 * c > g + 1) {
        return Err(ret::NOT_SUPPORTED);
    }
    let e = engines(g);
    Ok(nvmlComputeInstanceProfileInfo_t {
        id: profile,
        sliceCount: c,
        instanceCount: g / c,
        multiprocessorCount: instance.profile.multiprocessors * c / g,
        sharedCopyEngineCount: e.copy,
        sharedDecoderCount: e.decoders,
        sharedEncoderCount: e.encoders,
        sharedJpegCount: e.jpeg,
        sharedOfaCount: e.ofa,
    })
}

/// The v1 call (go-nvml's `GetComputeInstanceProfileInfo`).
///
/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    let call = "nvmlGpuInstanceGetComputeInstanceProfileInfo";
    instance_call(call, gpu_instance as usize, &GPU_INSTANCE_SLOTS, |gpu, instance| {
        mig_capable(gpu)?;
        out!(info, ci_profile(instance, profile, eng_profile)?)
    })
}

/// The v2 call, with the struct version checked and the profile's name
/// (`MIG 1c.3g.40gb`, or `MIG 3g.40gb` for the full-size profile), as pynvml calls it.
///
/// # Safety
/// `info` is null or valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    let call = "nvmlGpuInstanceGetComputeInstanceProfileInfoV";
    instance_call(call, gpu_instance as usize, &GPU_INSTANCE_SLOTS, |gpu, instance| {
        mig_capable(gpu)?;
        if info.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller sets `version`.
        if unsafe { (*info).version } != CI_PROFILE_INFO_V2_VERSION {
            return Err(ret::ARGUMENT_VERSION_MISMATCH);
        }
        let v1 = ci_profile(instance, profile, eng_profile)?;
        let name = if v1.sliceCount == instance.profile.compute_slices {
            format!("MIG {}", instance.profile.name)
        } else {
            format!("MIG {}c.{}", v1.sliceCount, instance.profile.name)
        };
        let mut answer = nvmlComputeInstanceProfileInfo_v2_t {
            version: CI_PROFILE_INFO_V2_VERSION,
            id: v1.id,
            sliceCount: v1.sliceCount,
            instanceCount: v1.instanceCount,
            multiprocessorCount: v1.multiprocessorCount,
            sharedCopyEngineCount: v1.sharedCopyEngineCount,
            sharedDecoderCount: v1.sharedDecoderCount,
            sharedEncoderCount: v1.sharedEncoderCount,
            sharedJpegCount: v1.sharedJpegCount,
            sharedOfaCount: v1.sharedOfaCount,
            name: [0; 96],
        };
        copy_name(&mut answer.name, &name);
        out!(info, answer)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_size_compute_profiles_exist_for_every_gpu_instance_size() {
        for slices in [1, 2, 3, 4, 7] {
            let index = ci_profile_of(slices).unwrap();
            assert_eq!(CI_PROFILE_SLICES[index as usize], slices);
        }
        assert_eq!(ci_profile_of(7), Some(4), "NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE");
    }
}
