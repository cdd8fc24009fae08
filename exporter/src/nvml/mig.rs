//! Reads a MIG-mode GPU: its MIG devices (UUID, GPU and compute instance ids,
//! profile, memory, processes, GPM activity) and the capacity left.
//!
//! `nvml-wrapper` lacks the instance-id and GPU-instance calls, so those go through
//! the raw library. The profile name (`3g.40gb`, `1g.10gb+me`) comes from the
//! driver's profile table, exactly as `nvidia-smi` names it:
//! - The table is enumerated the forward-compatible way `nvml.h` describes for
//!   `nvmlDeviceGetGpuInstanceProfileInfoV`: profile indices from 0 until the driver
//!   answers `INVALID_ARGUMENT` (`NOT_SUPPORTED` only skips an index this GPU lacks).
//!   So the `+me`, `-me`, `+me.all` and `+gfx` variants of newer drivers, and indices
//!   this exporter was never built with, are all read. The table is kept once every
//!   index answered; an index that failed otherwise makes the next cycle read it again.
//! - A GPU instance reports the driver's profile *id* (`nvidia-smi`'s ID column, e.g.
//!   19 for `1g.10gb`), which is what the table is keyed by. An id the table lacks is
//!   looked up with `nvmlDeviceGetGpuInstanceProfileInfoByIdV`, and failing that named
//!   from the MIG device's own name (`... MIG 3g.40gb`) with the slice count from its
//!   attributes: an instance of an unknown profile is reported, never dropped.
//!
//! Identities are cached by MIG UUID because a layout only changes when an
//! administrator rebuilds it, and only once every part of them is settled (answered,
//! or `NOT_SUPPORTED`); an identity read with a transient error is read again.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_char;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstanceProfileInfo_v2_t};

use super::calls::{Answer, CallKey, Calls, Lost, raw};
use super::gpm::{GpmTracker, Scope};
use super::processes;
use crate::snapshot::{MemoryReading, MigInstance, MigState, ProcessUsage};

/// Profile indices probed at most, whatever a driver answers. NVML 12 defines 17
/// (`NVML_GPU_INSTANCE_PROFILE_COUNT`), NVML 13.3 defines 18; the enumeration stops
/// earlier, at the driver's `INVALID_ARGUMENT`.
const PROFILE_PROBE_LIMIT: u32 = 64;

#[derive(Debug, Clone, PartialEq)]
struct Profile {
    name: String,
    compute_slices: u32,
    /// `memorySizeMB` of the profile info.
    memory_mib: u64,
}

#[derive(Debug, Clone)]
struct Identity {
    profile: String,
    gpu_instance_id: u32,
    compute_instance_id: u32,
    compute_slices: u32,
    /// The GPU instance profile's memory, when the profile is in the driver's table.
    memory_mib: Option<u64>,
}

/// MIG state kept between cycles for one GPU.
#[derive(Debug, Default)]
pub struct MigReader {
    /// The driver's profile table by profile id, once every index answered.
    profiles: Option<BTreeMap<u32, Profile>>,
    identities: HashMap<String, Identity>,
}

fn symbol<T: Copy>(f: &Result<T, impl std::fmt::Display>) -> Result<T, NvmlError> {
    f.as_ref().map(|f| *f).map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))
}

/// The profile name in a `char[96]`, read up to its NUL or the end of the buffer
/// (never past it), without the driver's `MIG ` prefix.
fn profile_name(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    let name = String::from_utf8_lossy(&bytes);
    name.strip_prefix("MIG ").unwrap_or(&name).trim().to_string()
}

/// The profile part of a MIG device's name (`NVIDIA H100 80GB HBM3 MIG 3g.40gb`).
fn profile_from_device_name(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once("MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then(|| profile.to_string())
}

/// A profile as the driver's table describes it.
fn profile(info: &nvmlGpuInstanceProfileInfo_v2_t) -> Profile {
    Profile { name: profile_name(&info.name), compute_slices: info.sliceCount, memory_mib: info.memorySizeMB }
}

fn new_info() -> nvmlGpuInstanceProfileInfo_v2_t {
    // SAFETY: a plain C struct of integers and a char array; all-zero is valid.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
    info
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
        let mut profiles = self.profile_table(nvml, calls, device)?;
        let max = calls
            .get(CallKey::on("nvmlDeviceGetMaxMigDeviceCount", device), || device.mig_device_count())?
            .unwrap_or(0);
        let mut instances = Vec::new();
        for index in 0..max {
            if let Some(instance) = self.read_instance(nvml, calls, device, index, &mut profiles, gpm.as_deref_mut())? {
                instances.push(instance);
            }
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
        Ok(MigState {
            instances,
            free_compute_slices: total.saturating_sub(used),
            total_compute_slices: total,
            available_by_profile: available_by_profile(nvml, calls, device, &profiles)?,
        })
    }

    /// The kept profile table, or a fresh read (kept once complete).
    fn profile_table(
        &mut self,
        nvml: &Nvml,
        calls: &mut Calls<'_>,
        device: &Device<'_>,
    ) -> Result<BTreeMap<u32, Profile>, Lost> {
        if let Some(table) = &self.profiles {
            return Ok(table.clone());
        }
        let (table, complete) = read_profiles(nvml, calls, device)?;
        if complete {
            self.profiles = Some(table.clone());
        }
        Ok(table)
    }

    /// One MIG device by index: `None` when the slot is empty or its identity is unknown.
    fn read_instance(
        &mut self,
        nvml: &Nvml,
        calls: &mut Calls<'_>,
        device: &Device<'_>,
        index: u32,
        profiles: &mut BTreeMap<u32, Profile>,
        gpm: Option<&mut GpmTracker>,
    ) -> Result<Option<MigInstance>, Lost> {
        let Some(mig) =
            calls.get_optional("nvmlDeviceGetMigDeviceHandleByIndex", || device.mig_device_by_index(index))?
        else {
            return Ok(None);
        };
        let Some(uuid) = calls.get(CallKey::on("nvmlDeviceGetUUID", &mig), || mig.uuid())? else { return Ok(None) };
        let Some(identity) = self.identity(nvml, calls, device, &mig, &uuid, profiles)? else { return Ok(None) };
        let key = CallKey::on("nvmlDeviceGetMemoryInfo_v2", &mig);
        let memory = calls.get(key, || mig.memory_info())?.map(|m| MemoryReading {
            total_bytes: m.total,
            used_bytes: m.used,
            reserved_bytes: m.reserved,
        });
        let processes = processes::list(calls, &mig)?
            .into_iter()
            .map(|(info, used)| ProcessUsage { pid: info.pid, used_memory_bytes: used, sm_utilization_percent: None })
            .collect();
        let activity = match gpm {
            Some(tracker) => tracker.sample(nvml, calls, device, Scope::Instance(identity.gpu_instance_id))?,
            None => Default::default(),
        };
        Ok(Some(MigInstance {
            uuid,
            profile: identity.profile,
            gpu_instance_id: identity.gpu_instance_id,
            compute_instance_id: identity.compute_instance_id,
            compute_slices: identity.compute_slices,
            gpu_instance_memory_mib: identity.memory_mib,
            memory,
            sm_activity_percent: activity.sm,
            tensor_activity_percent: activity.tensor,
            dram_activity_percent: activity.dram,
            graphics_activity_percent: activity.graphics,
            processes,
        }))
    }

    /// A MIG device's identity, kept by UUID once every part of it settled.
    fn identity(
        &mut self,
        nvml: &Nvml,
        calls: &mut Calls<'_>,
        device: &Device<'_>,
        mig: &Device<'_>,
        uuid: &str,
        profiles: &mut BTreeMap<u32, Profile>,
    ) -> Result<Option<Identity>, Lost> {
        if let Some(identity) = self.identities.get(uuid) {
            return Ok(Some(identity.clone()));
        }
        let known = profiles.len();
        let Some((identity, settled)) = read_identity(nvml, calls, device, mig, profiles)? else {
            return Ok(None);
        };
        if settled {
            self.identities.insert(uuid.to_string(), identity.clone());
        }
        // A profile found by id joins the kept table.
        if profiles.len() != known
            && let Some(table) = &mut self.profiles
        {
            table.clone_from(profiles);
        }
        Ok(Some(identity))
    }
}

/// Instances that could still be created, by profile name.
fn available_by_profile(
    nvml: &Nvml,
    calls: &mut Calls<'_>,
    device: &Device<'_>,
    profiles: &BTreeMap<u32, Profile>,
) -> Result<BTreeMap<String, u32>, Lost> {
    let mut available = BTreeMap::new();
    for (id, profile) in profiles {
        // Takes the profile id (as go-nvml passes `info.Id`), not the profile index.
        let count = calls.get_optional("nvmlDeviceGetGpuInstanceRemainingCapacity", || {
            let f = symbol(&nvml.lib().nvmlDeviceGetGpuInstanceRemainingCapacity)?;
            let mut count = 0u32;
            // SAFETY: `f` is the library's own symbol; the handle comes from this
            // `nvml` and outlives the call; `count` is a valid out-pointer.
            raw(unsafe { f(device.handle(), *id, &mut count) }).map(|()| count)
        })?;
        if let Some(count) = count {
            available.insert(profile.name.clone(), count);
        }
    }
    Ok(available)
}

/// The profile table by profile id, and whether every index answered (or said
/// `NOT_SUPPORTED`) up to the driver's `INVALID_ARGUMENT`.
fn read_profiles(
    nvml: &Nvml,
    calls: &mut Calls<'_>,
    device: &Device<'_>,
) -> Result<(BTreeMap<u32, Profile>, bool), Lost> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceProfileInfoV";
    let mut profiles = BTreeMap::new();
    let mut complete = true;
    for index in 0..PROFILE_PROBE_LIMIT {
        let answer = calls.raw(CALL, || {
            let f = symbol(&nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV)?;
            let mut info = new_info();
            // SAFETY: `f` is the library's own symbol; the handle comes from this `nvml`
            // and outlives the call; `info` is a versioned struct the driver fills.
            raw(unsafe { f(device.handle(), index, &mut info) }).map(|()| info)
        })?;
        match answer {
            Ok(info) => {
                profiles.insert(info.id, profile(&info));
            }
            // This GPU does not offer the profile at this index.
            Err(NvmlError::NotSupported) => {}
            // Past the last index the driver knows: the end of the table.
            Err(NvmlError::InvalidArg) => break,
            // A driver without the call: nothing to read, and nothing to retry.
            Err(e @ NvmlError::FailedToLoadSymbol(_)) => {
                calls.fail(CALL, &e);
                break;
            }
            Err(e) => {
                calls.fail(CALL, &e);
                complete = false;
            }
        }
    }
    Ok((profiles, complete))
}

/// Reads a MIG device's identity; `None` when not even its GPU instance id answered.
/// The flag says whether every part settled, so that the identity can be kept.
fn read_identity(
    nvml: &Nvml,
    calls: &mut Calls<'_>,
    parent: &Device<'_>,
    mig: &Device<'_>,
    profiles: &mut BTreeMap<u32, Profile>,
) -> Result<Option<(Identity, bool)>, Lost> {
    let lib = nvml.lib();
    let read_id = |f: Result<unsafe extern "C" fn(_, *mut u32) -> u32, NvmlError>| -> Result<u32, NvmlError> {
        let f = f?;
        let mut id = 0u32;
        // SAFETY: `f` is the library's own symbol; the MIG handle comes from this `nvml`
        // and outlives the call; `id` is a valid out-pointer.
        raw(unsafe { f(mig.handle(), &mut id) }).map(|()| id)
    };
    let mut settled = true;
    let mut note = |answer: &Answer<_>| {
        if matches!(answer, Answer::Failed) {
            settled = false;
        }
    };
    let gi = calls
        .answer(CallKey::on("nvmlDeviceGetGpuInstanceId", mig), || read_id(symbol(&lib.nvmlDeviceGetGpuInstanceId)))?;
    let Answer::Value(gi) = gi else { return Ok(None) };
    let ci = calls.answer(CallKey::on("nvmlDeviceGetComputeInstanceId", mig), || {
        read_id(symbol(&lib.nvmlDeviceGetComputeInstanceId))
    })?;
    note(&ci);
    let info = match gpu_instance_info(nvml, calls, parent, gi)? {
        Answer::Value(info) => Some(info),
        other => {
            settled &= !matches!(other, Answer::Failed);
            None
        }
    };
    let attributes = calls.answer(CallKey::on("nvmlDeviceGetAttributes_v2", mig), || mig.attributes())?;
    if matches!(attributes, Answer::Failed) {
        settled = false;
    }
    let attributes = attributes.value();
    let profile = match info.map(|i| i.profileId) {
        Some(id) => match known_profile(nvml, calls, parent, id, profiles)? {
            Answer::Value(p) => Some(p),
            Answer::NotSupported => None,
            Answer::Failed => {
                settled = false;
                None
            }
        },
        None => None,
    };
    let gi_slices =
        profile.as_ref().map(|p| p.compute_slices).or(attributes.as_ref().map(|a| a.gpu_instance_slice_count));
    let ci_slices = attributes.as_ref().map(|a| a.compute_instance_slice_count);
    let mut name = match &profile {
        Some(p) => Some(p.name.clone()),
        // Not in the driver's table: the MIG device's own name carries the profile.
        None => {
            calls.get(CallKey::on("nvmlDeviceGetName", mig), || mig.name())?.and_then(|n| profile_from_device_name(&n))
        }
    }
    .unwrap_or_else(|| {
        settled = false;
        "unknown".into()
    });
    // A compute instance smaller than its GPU instance is named like nvidia-smi does.
    if let (Some(g), Some(c)) = (gi_slices, ci_slices)
        && c < g
    {
        name = format!("{c}c.{name}");
    }
    Ok(Some((
        Identity {
            profile: name,
            gpu_instance_id: gi,
            compute_instance_id: ci.value().unwrap_or(0),
            compute_slices: gi_slices.unwrap_or(0),
            memory_mib: profile.as_ref().map(|p| p.memory_mib),
        },
        settled,
    )))
}

/// The GPU instance's info (its profile id), through the parent GPU's handle.
fn gpu_instance_info(
    nvml: &Nvml,
    calls: &mut Calls<'_>,
    parent: &Device<'_>,
    gi: u32,
) -> Result<Answer<nvmlGpuInstanceInfo_t>, Lost> {
    let lib = nvml.lib();
    calls.answer(CallKey::on("nvmlGpuInstanceGetInfo", parent).arg(gi), || {
        let by_id = symbol(&lib.nvmlDeviceGetGpuInstanceById)?;
        let get_info = symbol(&lib.nvmlGpuInstanceGetInfo)?;
        let mut instance: nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: `by_id` is the library's own symbol; the parent handle comes from this
        // `nvml` and outlives the call; `instance` is a valid out-pointer.
        raw(unsafe { by_id(parent.handle(), gi, &mut instance) })?;
        // SAFETY: a plain C struct of integers and a handle; all-zero is valid.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `instance` came from the driver just above; `info` is a valid out-pointer.
        raw(unsafe { get_info(instance, &mut info) }).map(|()| info)
    })
}

/// A profile from the table, or asked of the driver by id and added to the table.
fn known_profile(
    nvml: &Nvml,
    calls: &mut Calls<'_>,
    parent: &Device<'_>,
    id: u32,
    profiles: &mut BTreeMap<u32, Profile>,
) -> Result<Answer<Profile>, Lost> {
    if let Some(profile) = profiles.get(&id) {
        return Ok(Answer::Value(profile.clone()));
    }
    let found = profile_by_id(nvml, calls, parent, id)?;
    if let Answer::Value(p) = &found {
        profiles.insert(id, p.clone());
    }
    Ok(found)
}

/// One profile by the driver's profile id (`nvmlDeviceGetGpuInstanceProfileInfoByIdV`);
/// a driver without the call counts as not supporting it.
fn profile_by_id(nvml: &Nvml, calls: &mut Calls<'_>, parent: &Device<'_>, id: u32) -> Result<Answer<Profile>, Lost> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceProfileInfoByIdV";
    let answer = calls.answer(CallKey::on(CALL, parent).arg(id), || {
        let f = match symbol(&nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoByIdV) {
            Ok(f) => f,
            Err(_) => return Err(NvmlError::NotSupported),
        };
        let mut info = new_info();
        // SAFETY: `f` is the library's own symbol; the parent handle comes from this
        // `nvml` and outlives the call; `info` is a versioned struct the driver fills.
        raw(unsafe { f(parent.handle(), id, &mut info) }).map(|()| info)
    })?;
    Ok(match answer {
        Answer::Value(info) => Answer::Value(profile(&info)),
        Answer::NotSupported => Answer::NotSupported,
        Answer::Failed => Answer::Failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(text: &[u8]) -> [c_char; 96] {
        let mut b = [0 as c_char; 96];
        for (d, s) in b.iter_mut().zip(text) {
            *d = *s as c_char;
        }
        b
    }

    #[test]
    fn a_profile_name_is_read_within_its_buffer() {
        assert_eq!(profile_name(&buffer(b"MIG 1g.10gb+me")), "1g.10gb+me");
        assert_eq!(profile_name(&buffer(b"2g.20gb-me")), "2g.20gb-me");
        // No NUL in all 96 bytes: read to the end of the buffer, not past it.
        let full = buffer(&[b'x'; 96]);
        assert_eq!(profile_name(&full).len(), 96);
        assert_eq!(profile_name(&buffer(b"")), "");
    }

    #[test]
    fn a_mig_device_name_carries_its_profile() {
        assert_eq!(profile_from_device_name("NVIDIA H100 80GB HBM3 MIG 3g.40gb").as_deref(), Some("3g.40gb"));
        assert_eq!(profile_from_device_name("NVIDIA RTX PRO 6000 MIG 1g.24gb+gfx").as_deref(), Some("1g.24gb+gfx"));
        assert_eq!(profile_from_device_name("NVIDIA H100 80GB HBM3"), None);
    }
}
