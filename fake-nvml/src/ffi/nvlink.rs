//! NVLink per-link queries. Signatures as NVIDIA's `nvml.h` declares them (NVIDIA/go-nvml
//! `gen/nvml/nvml.h`; checked at compile time against `nvml-wrapper-sys` in
//! [`super::abi_check`]):
//! `nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int link, nvmlEnableState_t *isActive)`
//! and `nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t, unsigned int link,
//! nvmlNvLinkErrorCounter_t counter, unsigned long long *counterValue)`.
//!
//! A GPU without NVLink answers `NVML_ERROR_NOT_SUPPORTED`; a link past the GPU's count
//! or a counter `nvml.h` does not define, `NVML_ERROR_INVALID_ARGUMENT`. A scenario can
//! say the driver reports no error counters (`nvlink.error_counters: false`): then the
//! counter query answers `NOT_SUPPORTED` on every link. `NVML_NVLINK_ERROR_DL_ECC_DATA`
//! (4) is defined but not simulated: it answers `NOT_SUPPORTED`.
//!
//! `nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned int link, nvmlPciInfo_t
//! *pci)`: every link leads to an NVSwitch of the baseboard ([`crate::topology`]), whose
//! PCI address it reports (`pciSubSystemId` left 0: `nvml.h` says it is not filled in).
//! NVIDIA's device plugin walks every link this way for its preferred allocation
//! (go-gpuallocator `internal/links/device.go`, `getAllNvLinkRemotePciInfo`).

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEnableState_t, nvmlNvLinkErrorCounter_t, nvmlPciInfo_t, nvmlReturn_t,
};

use super::device::copy_into;
use super::{device_call, put, ret};
use crate::node::SimGpu;
use crate::topology::{NVSWITCH_DOMAIN, nvswitch_bus, nvswitch_of_link};

const FEATURE_DISABLED: nvmlEnableState_t = 0;
const FEATURE_ENABLED: nvmlEnableState_t = 1;
const ERROR_DL_ECC_DATA: nvmlNvLinkErrorCounter_t = 4;

fn check_link(gpu: &SimGpu, link: c_uint) -> Result<(), nvmlReturn_t> {
    match gpu.spec.nvlink.links {
        0 => Err(ret::NOT_SUPPORTED),
        n if link >= n => Err(ret::INVALID_ARGUMENT),
        _ => Ok(()),
    }
}

/// # Safety
/// `is_active` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: nvmlDevice_t,
    link: c_uint,
    is_active: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetNvLinkState", device, |gpu, t| {
        check_link(gpu, link)?;
        let state = if gpu.nvlink_active(link, t) { FEATURE_ENABLED } else { FEATURE_DISABLED };
        // SAFETY: the caller provides a valid pointer or null.
        unsafe { put(is_active, state) }
    })
}

/// # Safety
/// `counter_value` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    device: nvmlDevice_t,
    link: c_uint,
    counter: nvmlNvLinkErrorCounter_t,
    counter_value: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetNvLinkErrorCounter", device, |gpu, t| {
        check_link(gpu, link)?;
        if !gpu.spec.nvlink.error_counters || counter == ERROR_DL_ECC_DATA {
            return Err(ret::NOT_SUPPORTED);
        }
        let value = gpu.nvlink_errors(link, t).of(counter).ok_or(ret::INVALID_ARGUMENT)?;
        // SAFETY: the caller provides a valid pointer or null.
        unsafe { put(counter_value, value) }
    })
}

/// PCI device id of the NVSwitch on the baseboard: third generation on Hopper boards,
/// second generation on the others.
fn nvswitch_device_id(gpu: &SimGpu) -> c_uint {
    if gpu.spec.model.architecture >= 9 { 0x22A3_10DE } else { 0x1AF1_10DE }
}

/// # Safety
/// `pci` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: nvmlDevice_t,
    link: c_uint,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, |gpu, _| {
        check_link(gpu, link)?;
        let bus = nvswitch_bus(nvswitch_of_link(link, gpu.spec.nvlink.links));
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: NVSWITCH_DOMAIN,
            bus,
            device: 0,
            pciDeviceId: nvswitch_device_id(gpu),
            pciSubSystemId: 0,
            busId: [0; 32],
        };
        copy_into(&mut info.busId, &format!("{NVSWITCH_DOMAIN:08X}:{bus:02X}:00.0"));
        copy_into(&mut info.busIdLegacy, &format!("{NVSWITCH_DOMAIN:04X}:{bus:02X}:00.0"));
        // SAFETY: the caller provides a valid pointer or null.
        unsafe { put(pci, info) }
    })
}
