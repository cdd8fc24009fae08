//! `nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t, nvmlDevice_t,
//! nvmlGpuTopologyLevel_t *)`, answered from the simulated board's layout
//! ([`crate::topology`]). NVIDIA's device plugin asks it for every pair of GPUs when it
//! computes a preferred allocation (go-gpuallocator `internal/links/device.go`,
//! `GetP2PLink`), and fails the allocation when a pair does not answer, so it is
//! modelled rather than refused.

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlGpuTopologyLevel_t, nvmlReturn_t};

use super::{Target, device_call, loaded, put, ret};
use crate::topology::common_ancestor;

/// # Safety
/// `path_info` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: nvmlDevice_t,
    device2: nvmlDevice_t,
    path_info: *mut nvmlGpuTopologyLevel_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTopologyCommonAncestor", device1, |gpu, _| {
        let state = loaded()?;
        let other = match state.target(device2)? {
            Target::Gpu(other) => other,
            Target::Mig(..) => return Err(ret::NOT_SUPPORTED),
        };
        let level = common_ancestor(gpu.spec.index, other.spec.index, state.node.gpus.len() as u32);
        // SAFETY: the caller provides a valid pointer or null.
        unsafe { put(path_info, level as nvmlGpuTopologyLevel_t) }
    })
}
