//! `nvmlDeviceGetFieldValues`: the field ids the exporter reads this way (remapped
//! rows, the recovery action, ECC mode, PCIe replays, the memory temperature, the
//! NVLink link count, per-link state and data counters). Ids as `nvml.h` numbers them
//! (NVIDIA/go-nvml `gen/nvml/nvml.h`). The NVLink data counters take the link in
//! `scopeId` (`UINT_MAX`: the sum over all links, as DCGM asks for
//! `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`) and count KiB. Every other id answers
//! `NVML_ERROR_NOT_SUPPORTED` in its own slot, as a real driver does for ids a board
//! lacks, while the call itself succeeds. A scheduled `error` fault on this call
//! likewise puts its code in every requested slot.

use std::ffi::c_int;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFieldValue_t, nvmlReturn_t, nvmlValue_t};

use super::{device_call, ret};
use crate::node::SimGpu;

const FI_ECC_CURRENT: u32 = 1;
const FI_ECC_PENDING: u32 = 2;
const FI_PCIE_REPLAY_COUNTER: u32 = 94;
const FI_REMAPPED_COR: u32 = 142;
const FI_REMAPPED_UNC: u32 = 143;
const FI_REMAPPED_PENDING: u32 = 144;
const FI_REMAPPED_FAILURE: u32 = 145;
const FI_GPU_RECOVERY_ACTION: u32 = 230;
const FI_MEMORY_TEMP: u32 = 82;
const FI_NVLINK_LINK_COUNT: u32 = 91;
const FI_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
const FI_NVLINK_GET_STATE: u32 = 165;
/// `scopeId` meaning every link.
const ALL_LINKS: u32 = u32::MAX;

const VALUE_UNSIGNED_INT: u32 = 1;
const VALUE_UNSIGNED_LONG_LONG: u32 = 3;

enum Answer {
    Uint(u32),
    Ull(u64),
}

fn answer(gpu: &SimGpu, field: u32, scope: u32, t: f64) -> Result<Answer, nvmlReturn_t> {
    let model = gpu.spec.model;
    let links = gpu.spec.nvlink.links;
    let nvlink_bytes = |transmit: bool| -> Result<Answer, nvmlReturn_t> {
        let bytes = match scope {
            _ if links == 0 => return Err(ret::NOT_SUPPORTED),
            ALL_LINKS => (0..links).map(|l| gpu.nvlink_bytes(l, transmit, t)).sum(),
            l if l < links => gpu.nvlink_bytes(l, transmit, t),
            _ => return Err(ret::INVALID_ARGUMENT),
        };
        Ok(Answer::Ull((bytes / 1024.0) as u64))
    };
    let rows = || if model.row_remapping { Ok(gpu.remapped_rows(t)) } else { Err(ret::NOT_SUPPORTED) };
    Ok(match field {
        FI_ECC_CURRENT | FI_ECC_PENDING if model.ecc_supported => Answer::Uint(u32::from(gpu.spec.ecc_enabled)),
        FI_PCIE_REPLAY_COUNTER => Answer::Ull(gpu.pcie_replays(t)),
        FI_REMAPPED_COR => Answer::Uint(rows()?.correctable),
        FI_REMAPPED_UNC => Answer::Uint(rows()?.uncorrectable),
        FI_REMAPPED_PENDING => Answer::Uint(u32::from(rows()?.pending)),
        FI_REMAPPED_FAILURE => Answer::Uint(u32::from(rows()?.failed)),
        FI_GPU_RECOVERY_ACTION => Answer::Uint(gpu.recovery_action(t).code()),
        FI_MEMORY_TEMP => Answer::Uint(gpu.memory_temperature_c(t).ok_or(ret::NOT_SUPPORTED)?),
        FI_NVLINK_LINK_COUNT if links > 0 => Answer::Uint(links),
        FI_NVLINK_THROUGHPUT_DATA_TX => nvlink_bytes(true)?,
        FI_NVLINK_THROUGHPUT_DATA_RX => nvlink_bytes(false)?,
        // 1 active, 0 inactive, like `nvmlDeviceGetNvLinkState`'s `nvmlEnableState_t`.
        FI_NVLINK_GET_STATE => match scope {
            _ if links == 0 => return Err(ret::NOT_SUPPORTED),
            l if l < links => Answer::Uint(u32::from(gpu.nvlink_active(l, t))),
            _ => return Err(ret::INVALID_ARGUMENT),
        },
        _ => return Err(ret::NOT_SUPPORTED),
    })
}

/// A sample's timestamp: Unix time in µs that moves with scenario time, so that a
/// reader timing counters by it (as DCGM does for NVLink bandwidth) sees the
/// scenario's rates, also under a stepped or frozen clock.
fn timestamp_us(t: f64) -> i64 {
    static EPOCH_S: OnceLock<f64> = OnceLock::new();
    let epoch =
        *EPOCH_S.get_or_init(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()) - t);
    ((epoch + t) * 1e6) as i64
}

/// # Safety
/// `values` is null or points to `values_count` initialised entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    values_count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetFieldValues", device, |gpu, t| {
        if values.is_null() || values_count < 0 {
            return Err(ret::INVALID_ARGUMENT);
        }
        let now_us = timestamp_us(t);
        let injected = gpu.injected_error("nvmlDeviceGetFieldValues", None, t);
        // SAFETY: the caller passes `values_count` entries with `fieldId` set.
        let slots = unsafe { std::slice::from_raw_parts_mut(values, values_count as usize) };
        for slot in slots {
            slot.timestamp = now_us;
            slot.latencyUsec = 0;
            let result = match injected {
                Some(code) => Err(code),
                None => answer(gpu, slot.fieldId, slot.scopeId, t),
            };
            match result {
                Ok(Answer::Uint(v)) => {
                    slot.valueType = VALUE_UNSIGNED_INT;
                    slot.value = nvmlValue_t { uiVal: v };
                    slot.nvmlReturn = ret::SUCCESS;
                }
                Ok(Answer::Ull(v)) => {
                    slot.valueType = VALUE_UNSIGNED_LONG_LONG;
                    slot.value = nvmlValue_t { ullVal: v };
                    slot.nvmlReturn = ret::SUCCESS;
                }
                Err(code) => slot.nvmlReturn = code,
            }
        }
        Ok(())
    })
}
