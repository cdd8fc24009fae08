//! Reads a GPU's NVLink links: state, data throughput counters and data-link error
//! counters, per link.
//!
//! Calls and ids as NVIDIA's `nvml.h` declares them (checked against the header vendored
//! by NVIDIA/go-nvml, `gen/nvml/nvml.h`, and `nvml-wrapper-sys`'s bindings of it):
//! - `NVML_FI_DEV_NVLINK_LINK_COUNT` (91), "Number of NVLinks present on the device",
//!   read once: a GPU without NVLink answers `NOT_SUPPORTED` or 0, and no NVLink call
//!   is ever made on it again.
//! - `nvmlDeviceGetNvLinkState(device, link, nvmlEnableState_t *isActive)` per link.
//! - `nvmlDeviceGetNvLinkErrorCounter(device, link, nvmlNvLinkErrorCounter_t counter,
//!   unsigned long long *counterValue)` per link for `NVML_NVLINK_ERROR_DL_REPLAY` (0),
//!   `_DL_RECOVERY` (1), `_DL_CRC_FLIT` (2) and `_DL_CRC_DATA` (3): the four counters
//!   DCGM reads the same way for its `DCGM_FI_DEV_NVLINK_*_ERROR_*` fields
//!   (NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp`, `ReadAndCacheNvLinkData`).
//!   `NOT_SUPPORTED` is remembered per link and counter (Blackwell drops some).
//! - `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` (138) and `_RX` (139), "NVLink TX/RX Data
//!   throughput in KiB", with the link in `scopeId`: cumulative counters of payload
//!   data. DCGM sums the same two fields over all links (`scopeId` `UINT_MAX`) for
//!   `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` (`ReadAndCacheNvLinkBandwidth`); reading them
//!   per link gives that sum and the per-link split. Every link's pair comes in one
//!   `nvmlDeviceGetFieldValues` call (nvml-wrapper's `field_values_for` cannot set
//!   `scopeId`, so the raw call is made; these ids are outside the range nvml-wrapper
//!   renumbers for 13.x drivers).
//!
//! Every call goes through [`Calls`], so each has the reader's deadline and its error
//! accounting. Links are read on every cycle whatever their state, so that a link that
//! goes down keeps its counters' series.

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_NVLINK_LINK_COUNT, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
};
use nvml_wrapper_sys::bindings::nvmlFieldValue_t;

use super::calls::{CallKey, Calls, Lost, Settled, raw};
use crate::snapshot::{NvLinkErrors, NvLinkReading};

/// `NVML_NVLINK_MAX_LINKS` of the 13.x header; a larger link count is not believed.
pub const MAX_LINKS: u32 = 36;

const STATE: &str = "nvmlDeviceGetNvLinkState";
const ERROR_COUNTER: &str = "nvmlDeviceGetNvLinkErrorCounter";
const FIELDS: &str = "nvmlDeviceGetFieldValues";
/// The `CallKey` argument of the throughput request, apart from the per-cycle fields.
const THROUGHPUT_KEY: u32 = 1;
/// The `CallKey` argument of the link-count request.
const LINK_COUNT_KEY: u32 = 2;

/// Reads the link count once; it is settled when the driver answers or says
/// `NOT_SUPPORTED`, in the call or in the field.
pub fn read_link_count(calls: &mut Calls<'_>, device: &Device<'_>, count: &mut Settled<u32>) -> Result<(), Lost> {
    count.read(calls, CallKey::on(FIELDS, device).arg(LINK_COUNT_KEY), || {
        let mut samples = device.field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_LINK_COUNT)])?;
        let sample = samples.pop().ok_or(NvmlError::Unknown)??;
        match sample.value? {
            SampleValue::U32(n) => Ok(n.min(MAX_LINKS)),
            SampleValue::U64(n) => Ok(n.min(u64::from(MAX_LINKS)) as u32),
            SampleValue::I64(n) => Ok(n.clamp(0, i64::from(MAX_LINKS)) as u32),
            _ => Err(NvmlError::Unknown),
        }
    })?;
    Ok(())
}

/// Reads links `0..count`; empty when `count` is 0.
pub fn read(calls: &mut Calls<'_>, device: &Device<'_>, count: u32) -> Result<Vec<NvLinkReading>, Lost> {
    let mut links = Vec::with_capacity(count as usize);
    for link in 0..count {
        let nvlink = device.link_wrapper_for(link);
        let active = calls.get(CallKey::on(STATE, device).arg(link), || nvlink.is_active())?;
        let mut counter = |counter: ErrorCounter| -> Result<Option<u64>, Lost> {
            let key = CallKey::on(ERROR_COUNTER, device).arg(link * 8 + counter.as_c());
            calls.get(key, || nvlink.error_counter(counter))
        };
        let errors = NvLinkErrors {
            crc_flit: counter(ErrorCounter::DlCrcFlit)?,
            crc_data: counter(ErrorCounter::DlCrcData)?,
            replay: counter(ErrorCounter::DlReplay)?,
            recovery: counter(ErrorCounter::DlRecovery)?,
        };
        links.push(NvLinkReading { link, active, tx_bytes: None, rx_bytes: None, errors });
    }
    if !links.is_empty() {
        read_throughput(calls, device, &mut links)?;
    }
    Ok(links)
}

/// Fills each link's TX and RX byte counters from one field-values call.
fn read_throughput(calls: &mut Calls<'_>, device: &Device<'_>, links: &mut [NvLinkReading]) -> Result<(), Lost> {
    let request: Vec<(u32, u32)> = links
        .iter()
        .flat_map(|l| {
            [(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, l.link), (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, l.link)]
        })
        .collect();
    let key = CallKey::on(FIELDS, device).arg(THROUGHPUT_KEY);
    let Some(samples) = calls.get(key, || scoped_field_values(device, &request))? else { return Ok(()) };
    let mut failed: Option<NvmlError> = None;
    for (((_, link), sample), slot) in request.iter().zip(samples).zip(0..) {
        let kib = match sample.and_then(|s| s.value) {
            Ok(SampleValue::U64(v)) => Some(v),
            Ok(SampleValue::U32(v)) => Some(u64::from(v)),
            Ok(SampleValue::I64(v)) => u64::try_from(v).ok(),
            Ok(_) => None,
            Err(NvmlError::GpuLost) => return Err(Lost),
            Err(NvmlError::NotSupported) => None,
            Err(e) => {
                failed.get_or_insert(e);
                None
            }
        };
        let bytes = kib.map(|k| k.saturating_mul(1024));
        if let Some(reading) = links.iter_mut().find(|l| l.link == *link) {
            if slot % 2 == 0 {
                reading.tx_bytes = bytes;
            } else {
                reading.rx_bytes = bytes;
            }
        }
    }
    if let Some(e) = failed {
        calls.fail(FIELDS, &e);
    }
    Ok(())
}

/// `nvmlDeviceGetFieldValues` with a `scopeId` per field: `(field id, scope)` pairs.
fn scoped_field_values(
    device: &Device<'_>,
    request: &[(u32, u32)],
) -> Result<Vec<Result<FieldValueSample, NvmlError>>, NvmlError> {
    let lib = device.nvml().lib();
    let f = lib.nvmlDeviceGetFieldValues.as_ref().map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut values: Vec<nvmlFieldValue_t> = request
        .iter()
        .map(|(field, scope)| {
            // SAFETY: a plain C struct of integers and a union of numbers; all-zero is valid.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = *field;
            v.scopeId = *scope;
            v
        })
        .collect();
    let count = i32::try_from(values.len()).map_err(|_| NvmlError::InvalidArg)?;
    // SAFETY: `f` is the library's own symbol; the handle comes from this device's
    // `Nvml` and outlives the call; `values` holds `count` initialised entries.
    raw(unsafe { f(device.handle(), count, values.as_mut_ptr()) })?;
    Ok(values.into_iter().map(FieldValueSample::try_from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_counter_keys_are_distinct_per_link_and_counter() {
        let mut seen = std::collections::HashSet::new();
        for link in 0..MAX_LINKS {
            for c in
                [ErrorCounter::DlReplay, ErrorCounter::DlRecovery, ErrorCounter::DlCrcFlit, ErrorCounter::DlCrcData]
            {
                assert!(seen.insert(link * 8 + c.as_c()), "link {link} {c:?}");
            }
        }
    }
}
