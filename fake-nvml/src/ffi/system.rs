//! Library lifetime, system queries and device enumeration.

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::sync::Arc;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use super::{INIT_COUNT, Loaded, STATE, device_handle, guard, hang_then_now, loaded, mig_handle, put, put_str, ret};
use crate::clock::Clock;
use crate::host;
use crate::node::Node;
use crate::scenario::{Scenario, parse_pci_bus_id};

fn init() -> nvmlReturn_t {
    guard(|| {
        let mut count = INIT_COUNT.lock().map_err(|_| ret::UNKNOWN)?;
        if *count == 0 {
            if let Ok(kind) = std::env::var("FAKE_NVML_INIT_ERROR") {
                return Err(match kind.as_str() {
                    "driver_not_loaded" => ret::DRIVER_NOT_LOADED,
                    "no_permission" => ret::NO_PERMISSION,
                    _ => ret::UNKNOWN,
                });
            }
            let scenario = Scenario::from_env().map_err(|e| {
                // The only channel a C API has for the reason: the process's stderr.
                eprintln!("fake-nvml: nvmlInit refused the scenario: {e}");
                ret::UNKNOWN
            })?;
            let clock = Clock::from_env().map_err(|e| {
                eprintln!("fake-nvml: nvmlInit refused the clock settings: {e}");
                ret::UNKNOWN
            })?;
            host::write_from_env(&scenario).map_err(|e| {
                eprintln!("fake-nvml: nvmlInit could not write the simulated host: {e}");
                ret::UNKNOWN
            })?;
            let live = super::live::Live::from_env(std::env::var_os("FAKE_NVML_SCENARIO").map(Into::into));
            let loaded = Loaded { node: Node::new(scenario), clock, live };
            *STATE.write().map_err(|_| ret::UNKNOWN)? = Some(Arc::new(loaded));
        }
        *count += 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| {
        let mut count = INIT_COUNT.lock().map_err(|_| ret::UNKNOWN)?;
        if *count == 0 {
            return Err(ret::UNINITIALIZED);
        }
        *count -= 1;
        if *count == 0 {
            *STATE.write().map_err(|_| ret::UNKNOWN)? = None;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let text: &'static CStr = match result {
        ret::SUCCESS => c"Success",
        ret::UNINITIALIZED => c"Uninitialized",
        ret::INVALID_ARGUMENT => c"Invalid Argument",
        ret::NOT_SUPPORTED => c"Not Supported",
        ret::NO_PERMISSION => c"Insufficient Permissions",
        ret::NOT_FOUND => c"Not Found",
        ret::INSUFFICIENT_SIZE => c"Insufficient Size",
        ret::DRIVER_NOT_LOADED => c"Driver Not Loaded",
        ret::TIMEOUT => c"Timeout",
        ret::GPU_IS_LOST => c"GPU is lost",
        ret::ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

/// # Safety
/// `version` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        // SAFETY: caller contract.
        unsafe { put_str(version, length, &state.node.scenario.driver_version) }
    })
}

/// # Safety
/// `version` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let scenario = &state.node.scenario;
        let text = format!("{}.{}", scenario.cuda_driver_version / 1000, scenario.driver_version);
        // SAFETY: caller contract.
        unsafe { put_str(version, length, &text) }
    })
}

fn cuda_version(out: *mut c_int) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        // SAFETY: the exported wrappers pass the caller's pointer.
        unsafe { put(out, state.node.scenario.cuda_driver_version) }
    })
}

/// # Safety
/// `cuda_driver_version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(cuda_driver_version: *mut c_int) -> nvmlReturn_t {
    cuda_version(cuda_driver_version)
}

/// # Safety
/// `cuda_driver_version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version: *mut c_int) -> nvmlReturn_t {
    cuda_version(cuda_driver_version)
}

/// # Safety
/// `device_count` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        // SAFETY: caller contract.
        unsafe { put(device_count, state.node.gpus.len() as c_uint) }
    })
}

/// # Safety
/// `device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let gpu = state.node.gpus.get(index as usize).ok_or(ret::INVALID_ARGUMENT)?;
        let t = hang_then_now(&state, gpu, "nvmlDeviceGetHandleByIndex_v2");
        if gpu.is_lost(t) {
            return Err(ret::GPU_IS_LOST);
        }
        if let Some(code) = gpu.injected_error("nvmlDeviceGetHandleByIndex_v2", None, t) {
            return Err(code);
        }
        // SAFETY: caller contract.
        unsafe { put(device, device_handle(index as usize)) }
    })
}

fn handle_where(device: *mut nvmlDevice_t, matches: impl Fn(&crate::scenario::Gpu) -> bool) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let (index, gpu) = state.node.gpus.iter().enumerate().find(|(_, g)| matches(&g.spec)).ok_or(ret::NOT_FOUND)?;
        if gpu.is_lost(state.clock.now()) {
            return Err(ret::GPU_IS_LOST);
        }
        // SAFETY: the exported wrappers pass the caller's pointer.
        unsafe { put(device, device_handle(index)) }
    })
}

/// A GPU's UUID gives the GPU's handle, a MIG device's UUID the MIG device handle
/// (`nvml.h`: "The UUID of the target GPU or MIG instance"); the device plugin's health
/// check looks MIG devices up this way.
///
/// # Safety
/// `uuid` is null or a NUL-terminated string; `device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    if uuid.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: caller contract.
    let Ok(uuid) = unsafe { CStr::from_ptr(uuid) }.to_str() else {
        return ret::INVALID_ARGUMENT;
    };
    if uuid.starts_with("MIG-") {
        return mig_by_uuid(uuid, device);
    }
    handle_where(device, |g| g.uuid == uuid)
}

fn mig_by_uuid(uuid: &str, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let (gpu, instance) = state
            .node
            .gpus
            .iter()
            .find_map(|g| g.spec.mig.iter().flatten().find(|m| m.uuid == uuid).map(|m| (g, m)))
            .ok_or(ret::NOT_FOUND)?;
        if gpu.is_lost(state.clock.now()) {
            return Err(ret::GPU_IS_LOST);
        }
        // SAFETY: the exported wrapper passes the caller's pointer.
        unsafe { put(device, mig_handle(gpu.spec.index as usize, instance.index as usize)) }
    })
}

/// # Safety
/// `pci_bus_id` is null or a NUL-terminated string; `device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    pci_bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    if pci_bus_id.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: caller contract.
    let Some(wanted) = unsafe { CStr::from_ptr(pci_bus_id) }.to_str().ok().and_then(parse_pci_bus_id) else {
        return ret::INVALID_ARGUMENT;
    };
    handle_where(device, |g| g.pci == wanted)
}
