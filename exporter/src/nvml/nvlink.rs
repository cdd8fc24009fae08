//! Reads a GPU's NVLink links: state, data throughput counters and data-link error
//! counters, per link.
//!
//! Calls and ids as NVIDIA's `nvml.h` declares them (checked against the header vendored
//! by NVIDIA/go-nvml, `gen/nvml/nvml.h`, and `nvml-wrapper-sys`'s bindings of it):
//! - `NVML_FI_DEV_NVLINK_LINK_COUNT` (91), "Number of NVLinks present on the device",
//!   read once: a GPU without NVLink answers `NOT_SUPPORTED` or 0, and no NVLink call
//!   is ever made on it again.
//! - `NVML_FI_DEV_NVLINK_GET_STATE` (165), "NVLink State - Active,Inactive", link in
//!   `scopeId`: asked in the same `nvmlDeviceGetFieldValues` call as the data counters
//!   rather than by `nvmlDeviceGetNvLinkState` per link, 18 calls a GPU fewer.
//! - `nvmlDeviceGetNvLinkErrorCounter(device, link, nvmlNvLinkErrorCounter_t counter,
//!   unsigned long long *counterValue)` per link for `NVML_NVLINK_ERROR_DL_REPLAY` (0),
//!   `_DL_RECOVERY` (1), `_DL_CRC_FLIT` (2) and `_DL_CRC_DATA` (3): the four counters
//!   DCGM reads the same way for its `DCGM_FI_DEV_NVLINK_*_ERROR_*` fields
//!   (NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp`, `ReadAndCacheNvLinkData`).
//!   `NOT_SUPPORTED` is remembered per link and counter (Blackwell drops some).
//!   NVML has no field for them beyond link 11, so they stay per-link calls, spread
//!   over [`ERROR_SWEEP_CYCLES`] cycles.
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
//!
//! The cost decided the shape: reading state and four error counters per link with
//! their own calls took the 8-GPU H100 node from 200 to 928 calls a cycle (467 µs
//! mean); one field-values call per GPU plus the error sweep brings it to 304
//! (docs/benchmarks.md).

use std::collections::HashMap;

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_NVLINK_GET_STATE, NVML_FI_DEV_NVLINK_LINK_COUNT, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
};
use nvml_wrapper_sys::bindings::nvmlFieldValue_t;

use super::calls::{CallKey, Calls, Lost, Settled, raw};
use crate::snapshot::{NvLinkErrors, NvLinkReading};

/// `NVML_NVLINK_MAX_LINKS` of the 13.x header; a larger link count is not believed.
pub const MAX_LINKS: u32 = 36;

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

/// How many cycles it takes to read every link's error counters once. Each cycle reads
/// the counters of the links whose number is the cycle's remainder, so an 18-link GPU
/// makes 12 error-counter calls a cycle instead of 72; the first cycle reads them all.
/// At the default 5 s interval a counter is at most 30 s old, the default collection
/// interval of dcgm-exporter (`-c 30000`). Figures in docs/benchmarks.md.
pub const ERROR_SWEEP_CYCLES: u32 = 6;

/// What the NVLink reads of one GPU carry from one cycle to the next: the last error
/// counters read per link and the last data counter total, for the throughput rate.
#[derive(Debug, Default)]
pub struct NvLinkTracker {
    cycle: u64,
    errors: HashMap<u32, NvLinkErrors>,
    /// TX+RX bytes over all links, and the newest NVML timestamp of those counters (µs).
    last_total: Option<(u64, i64)>,
}

/// One cycle's NVLink reading of a GPU.
#[derive(Debug, Default)]
pub struct NvLinkRead {
    pub links: Vec<NvLinkReading>,
    /// TX plus RX data bytes per second over every link since the previous cycle;
    /// `None` on the first cycle, after a counter went backwards (driver reload) or
    /// when a link's counter is missing.
    pub data_bytes_per_second: Option<f64>,
}

impl NvLinkTracker {
    /// Reads links `0..count`; empty when `count` is 0.
    pub fn read(&mut self, calls: &mut Calls<'_>, device: &Device<'_>, count: u32) -> Result<NvLinkRead, Lost> {
        if count == 0 {
            return Ok(NvLinkRead::default());
        }
        let mut links: Vec<NvLinkReading> =
            (0..count).map(|link| NvLinkReading { link, ..NvLinkReading::default() }).collect();
        let stamp = read_fields(calls, device, &mut links)?;
        let sweep = self.cycle % u64::from(ERROR_SWEEP_CYCLES);
        let first = self.cycle == 0;
        for reading in &mut links {
            let link = reading.link;
            if first || u64::from(link % ERROR_SWEEP_CYCLES) == sweep {
                let errors = read_errors(calls, device, link)?;
                self.errors.insert(link, errors);
            }
            reading.errors = self.errors.get(&link).copied().unwrap_or_default();
        }
        self.cycle += 1;
        let data_bytes_per_second = self.rate(&links, stamp);
        Ok(NvLinkRead { links, data_bytes_per_second })
    }

    /// Bytes per second between the previous total and this one, timed by NVML's own
    /// sample timestamps, as DCGM times its bandwidth field.
    fn rate(&mut self, links: &[NvLinkReading], stamp_us: Option<i64>) -> Option<f64> {
        let total = links.iter().try_fold(0u64, |sum, l| Some(sum.saturating_add(l.tx_bytes? + l.rx_bytes?)));
        let now = total.zip(stamp_us);
        let ((before, then), (total, at)) = (std::mem::replace(&mut self.last_total, now)?, now?);
        let seconds = (at - then) as f64 / 1e6;
        (total >= before && seconds > 0.0).then(|| (total - before) as f64 / seconds)
    }
}

/// The four data-link error counters of one link.
fn read_errors(calls: &mut Calls<'_>, device: &Device<'_>, link: u32) -> Result<NvLinkErrors, Lost> {
    let nvlink = device.link_wrapper_for(link);
    let mut counter = |counter: ErrorCounter| -> Result<Option<u64>, Lost> {
        let key = CallKey::on(ERROR_COUNTER, device).arg(link * 8 + counter.as_c());
        calls.get(key, || nvlink.error_counter(counter))
    };
    Ok(NvLinkErrors {
        crc_flit: counter(ErrorCounter::DlCrcFlit)?,
        crc_data: counter(ErrorCounter::DlCrcData)?,
        replay: counter(ErrorCounter::DlReplay)?,
        recovery: counter(ErrorCounter::DlRecovery)?,
    })
}

/// Fills each link's state and TX and RX byte counters from one field-values call;
/// returns the newest timestamp among the data counters read.
fn read_fields(calls: &mut Calls<'_>, device: &Device<'_>, links: &mut [NvLinkReading]) -> Result<Option<i64>, Lost> {
    let request: Vec<(u32, u32)> = links
        .iter()
        .flat_map(|l| {
            [
                (NVML_FI_DEV_NVLINK_GET_STATE, l.link),
                (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, l.link),
                (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, l.link),
            ]
        })
        .collect();
    let key = CallKey::on(FIELDS, device).arg(THROUGHPUT_KEY);
    let Some(samples) = calls.get(key, || scoped_field_values(device, &request))? else { return Ok(None) };
    let mut failed: Option<NvmlError> = None;
    let mut stamp: Option<i64> = None;
    for ((field, link), sample) in request.iter().zip(samples) {
        if let Ok(s) = &sample
            && s.value.is_ok()
            && *field != NVML_FI_DEV_NVLINK_GET_STATE
        {
            stamp = stamp.max(Some(s.timestamp));
        }
        let value = match sample.and_then(|s| s.value) {
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
        let Some(reading) = links.iter_mut().find(|l| l.link == *link) else { continue };
        match *field {
            NVML_FI_DEV_NVLINK_GET_STATE => reading.active = value.map(|v| v != 0),
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX => reading.tx_bytes = value.map(|k| k.saturating_mul(1024)),
            _ => reading.rx_bytes = value.map(|k| k.saturating_mul(1024)),
        }
    }
    if let Some(e) = failed {
        calls.fail(FIELDS, &e);
    }
    Ok(stamp)
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

    fn links(bytes: &[(Option<u64>, Option<u64>)]) -> Vec<NvLinkReading> {
        bytes
            .iter()
            .zip(0..)
            .map(|(&(tx_bytes, rx_bytes), link)| NvLinkReading { link, tx_bytes, rx_bytes, ..NvLinkReading::default() })
            .collect()
    }

    #[test]
    fn the_rate_sums_every_links_tx_and_rx_over_nvmls_timestamps() {
        let mut t = NvLinkTracker::default();
        assert_eq!(t.rate(&links(&[(Some(1000), Some(0)), (Some(0), Some(1000))]), Some(1_000_000)), None, "first");
        let later = links(&[(Some(3000), Some(500)), (Some(100), Some(2400))]);
        // 4000 bytes more in half a second.
        assert_eq!(t.rate(&later, Some(1_500_000)), Some(8000.0));
    }

    #[test]
    fn no_rate_without_time_passing_a_missing_counter_or_a_reset() {
        let mut t = NvLinkTracker::default();
        t.rate(&links(&[(Some(1000), Some(1000))]), Some(10));
        assert_eq!(t.rate(&links(&[(Some(2000), Some(1000))]), Some(10)), None, "no time passed");
        assert_eq!(t.rate(&links(&[(Some(2000), None)]), Some(20)), None, "a counter missing");
        assert_eq!(t.rate(&links(&[(Some(3000), Some(1000))]), Some(30)), None, "no previous total");
        assert_eq!(t.rate(&links(&[(Some(10), Some(10))]), Some(40)), None, "counters went back: driver reload");
        assert_eq!(t.rate(&links(&[(Some(20), Some(20))]), Some(1_000_040)), Some(20.0));
    }

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
