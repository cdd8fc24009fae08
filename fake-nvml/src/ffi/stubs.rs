//! Calls NVIDIA's NVML consumers make that the simulator does not model. Each is
//! exported with its `nvml.h` signature, runs the usual prologue (uninitialised
//! library, bad handle, lost GPU, scheduled faults) and then answers
//! `NVML_ERROR_NOT_SUPPORTED`, which every consumer on the lists in
//! `docs/nvml-consumers.md` already handles (the driver answers the same where a board
//! lacks the feature). A consumer that finds a symbol missing fails instead: go-nvml
//! binds lazily and kills the process at the first call, pynvml raises
//! `NVMLError_FunctionNotFound`.
//!
//! - `nvmlDeviceGetFanSpeed` (gpustat's default view, `gpustat/core.py`): the boards
//!   the simulator knows are shown without a fan reading, as data-center boards are.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use super::{device_call, ret};

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetFanSpeed(device: nvmlDevice_t, _speed: *mut c_uint) -> nvmlReturn_t {
    device_call("nvmlDeviceGetFanSpeed", device, |_, _| Err(ret::NOT_SUPPORTED))
}
