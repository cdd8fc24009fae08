//! Reads a MIG-mode GPU: its MIG devices (UUID, GPU and compute instance ids,
//! profile, memory, processes, GPM activity) and the capacity left.
//!
//! `nvml-wrapper` lacks the instance-id and GPU-instance calls, so those go through
//! the raw library. The profile name (`3g.40gb`) comes from the driver's profile table
//! via the GPU instance's profile id, exactly as `nvidia-smi` names it; identities are
//! cached by MIG UUID because a layout only changes when an administrator rebuilds it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstanceProfileInfo_v2_t};

use super::calls::{Calls, Lost, raw};
use super::gpm::{GpmTracker, Scope};
use super::processes;
use crate::snapshot::{MemoryReading, MigInstance, MigState, ProcessUsage};

/// Highest GPU-instance profile id probed (NVML 12 defines 0-14).
const MAX_PROFILE_ID: u32 = 15;

#[derive(Debug, Clone)]
struct Profile {
    name: String,
    compute_slices: u32,
}

#[derive(Debug, Clone)]
struct Identity {
    profile: String,
    gpu_instance_id: u32,
    compute_instance_id: u32,
    compute_slices: u32,
}

/// MIG state kept between cycles for one GPU.
#[derive(Debug, Default)]
pub struct MigReader {
    profiles: Option<BTreeMap<u32, Profile>>,
    identities: HashMap<String, Identity>,
}

fn symbol<T: Copy>(f: &Result<T, impl std::fmt::Display>) -> Result<T, NvmlError> {
    f.as_ref().map(|f| *f).map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))
}

impl MigReader {
    /// Reads the layout; `gpm` is `None` on GPUs without GPM.
    pub fn read(
        &mut self,
        nvml: &Nvml,
        calls: &mut Calls<'_>,
        device: &Device<'_>,
        mut gpm: Option<&mut GpmTracker>,
    ) -> Result<MigState, Lost> {
        if self.profiles.is_none() {
            self.profiles = Some(read_profiles(nvml, calls, device)?);
        }
        let profiles = self.profiles.clone().unwrap_or_default();
        let max = calls.get("nvmlDeviceGetMaxMigDeviceCount", || device.mig_device_count())?.unwrap_or(0);
        let mut instances = Vec::new();
        for index in 0..max {
            let Some(mig) =
                calls.get_optional("nvmlDeviceGetMigDeviceHandleByIndex", || device.mig_device_by_index(index))?
            else {
                continue;
            };
            let Some(uuid) = calls.get("nvmlDeviceGetUUID", || mig.uuid())? else { continue };
            let identity = match self.identities.get(&uuid) {
                Some(identity) => identity.clone(),
                None => {
                    let Some(identity) = read_identity(nvml, calls, device, &mig, &profiles)? else { continue };
                    self.identities.insert(uuid.clone(), identity.clone());
                    identity
                }
            };
            let memory = calls.get("nvmlDeviceGetMemoryInfo_v2", || mig.memory_info())?.map(|m| MemoryReading {
                total_bytes: m.total,
                used_bytes: m.used,
                reserved_bytes: m.reserved,
            });
            let processes = processes::list(calls, &mig)?
                .into_iter()
                .map(|(info, used)| ProcessUsage {
                    pid: info.pid,
                    used_memory_bytes: used,
                    sm_utilization_percent: None,
                })
                .collect();
            let activity = match gpm.as_deref_mut() {
                Some(tracker) => tracker.sample(nvml, calls, device, Scope::Instance(identity.gpu_instance_id))?,
                None => Default::default(),
            };
            instances.push(MigInstance {
                uuid,
                profile: identity.profile,
                gpu_instance_id: identity.gpu_instance_id,
                compute_instance_id: identity.compute_instance_id,
                compute_slices: identity.compute_slices,
                memory,
                sm_activity_percent: activity.sm,
                tensor_activity_percent: activity.tensor,
                dram_activity_percent: activity.dram,
                processes,
            });
        }
        if let Some(tracker) = gpm {
            let live: Vec<u32> = instances.iter().map(|i| i.gpu_instance_id).collect();
            tracker.retain(nvml, |scope| match scope {
                Scope::Instance(gi) => live.contains(gi),
                Scope::Gpu => false,
            });
        }
        self.identities.retain(|uuid, _| instances.iter().any(|i| &i.uuid == uuid));
        let total = profiles.values().map(|p| p.compute_slices).max().unwrap_or(0);
        let used: u32 = instances.iter().map(|i| i.compute_slices).sum();
        let mut available = BTreeMap::new();
        for (id, profile) in &profiles {
            let count = calls.get_optional("nvmlDeviceGetGpuInstanceRemainingCapacity", || {
                let f = symbol(&nvml.lib().nvmlDeviceGetGpuInstanceRemainingCapacity)?;
                let mut count = 0u32;
                // SAFETY: valid handle and out-pointer.
                raw(unsafe { f(device.handle(), *id, &mut count) }).map(|()| count)
            })?;
            if let Some(count) = count {
                available.insert(profile.name.clone(), count);
            }
        }
        Ok(MigState {
            instances,
            free_compute_slices: total.saturating_sub(used),
            total_compute_slices: total,
            available_by_profile: available,
        })
    }
}

fn read_profiles(nvml: &Nvml, calls: &mut Calls<'_>, device: &Device<'_>) -> Result<BTreeMap<u32, Profile>, Lost> {
    let mut profiles = BTreeMap::new();
    for id in 0..MAX_PROFILE_ID {
        let info = calls.get_optional("nvmlDeviceGetGpuInstanceProfileInfoV", || {
            let f = symbol(&nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV)?;
            // SAFETY: a plain C struct; all-zero is valid.
            let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
            info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
            // SAFETY: valid handle, out-pointer to a versioned struct.
            match raw(unsafe { f(device.handle(), id, &mut info) }) {
                // Unknown profile ids answer INVALID_ARGUMENT on real drivers.
                Err(NvmlError::InvalidArg) => Err(NvmlError::NotSupported),
                other => other.map(|()| info),
            }
        })?;
        if let Some(info) = info {
            // SAFETY: the driver NUL-terminates the name within its 96 bytes.
            let name = unsafe { CStr::from_ptr(info.name.as_ptr()) }.to_string_lossy();
            let name = name.strip_prefix("MIG ").unwrap_or(&name).to_string();
            profiles.insert(info.id, Profile { name, compute_slices: info.sliceCount });
        }
    }
    Ok(profiles)
}

fn read_identity(
    nvml: &Nvml,
    calls: &mut Calls<'_>,
    parent: &Device<'_>,
    mig: &Device<'_>,
    profiles: &BTreeMap<u32, Profile>,
) -> Result<Option<Identity>, Lost> {
    let lib = nvml.lib();
    let read_id = |f: Result<unsafe extern "C" fn(_, *mut u32) -> u32, NvmlError>| -> Result<u32, NvmlError> {
        let f = f?;
        let mut id = 0u32;
        // SAFETY: valid MIG handle and out-pointer.
        raw(unsafe { f(mig.handle(), &mut id) }).map(|()| id)
    };
    let Some(gi) = calls.get("nvmlDeviceGetGpuInstanceId", || read_id(symbol(&lib.nvmlDeviceGetGpuInstanceId)))? else {
        return Ok(None);
    };
    let ci = calls.get("nvmlDeviceGetComputeInstanceId", || read_id(symbol(&lib.nvmlDeviceGetComputeInstanceId)))?;
    let info = calls.get("nvmlGpuInstanceGetInfo", || {
        let by_id = symbol(&lib.nvmlDeviceGetGpuInstanceById)?;
        let get_info = symbol(&lib.nvmlGpuInstanceGetInfo)?;
        let mut instance: nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: valid parent handle and out-pointers.
        raw(unsafe { by_id(parent.handle(), gi, &mut instance) })?;
        // SAFETY: a plain C struct; all-zero is valid.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `instance` came from the driver just above.
        raw(unsafe { get_info(instance, &mut info) }).map(|()| info)
    })?;
    let attributes = calls.get("nvmlDeviceGetAttributes_v2", || mig.attributes())?;
    let profile = info.and_then(|i| profiles.get(&i.profileId));
    let gi_slices = profile.map(|p| p.compute_slices).or(attributes.as_ref().map(|a| a.gpu_instance_slice_count));
    let ci_slices = attributes.as_ref().map(|a| a.compute_instance_slice_count);
    let mut name = profile.map(|p| p.name.clone()).unwrap_or_else(|| "unknown".into());
    // A compute instance smaller than its GPU instance is named like nvidia-smi does.
    if let (Some(g), Some(c)) = (gi_slices, ci_slices)
        && c < g
    {
        name = format!("{c}c.{name}");
    }
    Ok(Some(Identity {
        profile: name,
        gpu_instance_id: gi,
        compute_instance_id: ci.unwrap_or(0),
        compute_slices: gi_slices.unwrap_or(0),
    }))
}
