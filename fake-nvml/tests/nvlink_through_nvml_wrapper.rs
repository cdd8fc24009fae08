//! NVLink, the memory temperature and GPM graphics activity through `nvml-wrapper`, as
//! the exporter reads them: per-link state and error counters, per-link data counters
//! in `nvmlDeviceGetFieldValues` with the link in `scopeId`, and `NOT_SUPPORTED` where
//! the board lacks the feature or the scenario says the driver does not report it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::library;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::*;
use nvml_wrapper_sys::bindings::nvmlFieldValue_t;

const SCENARIO: &str = r#"
gpus:
  - model: H100-SXM5-80GB
    values: {utilization: 40, graphics_activity: 55, temperature_c: 60, memory_temperature_c: 71}
    nvlink: {tx_bytes_per_second: 1048576, rx_bytes_per_second: 2048}
    faults:
      - {at_s: 5, nvlink_down: {link: 3}}
      - {at_s: 5, nvlink_errors: {link: 3, crc_flit: 7, crc_data: 2, replay: 4, recovery: 1}}
  - model: L40S-48GB
  - model: H200-SXM-141GB
    nvlink: {links: 2, error_counters: false}
"#;

/// `nvmlDeviceGetFieldValues` with scopes: (field, scope) -> value or NVML code.
fn scoped(nvml: &Nvml, device: &nvml_wrapper::Device<'_>, request: &[(u32, u32)]) -> Vec<Result<u64, u32>> {
    let f = nvml.lib().nvmlDeviceGetFieldValues.as_ref().unwrap();
    let mut values: Vec<nvmlFieldValue_t> = request
        .iter()
        .map(|(field, scope)| {
            // SAFETY: a plain C struct; all-zero is valid.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = *field;
            v.scopeId = *scope;
            v
        })
        .collect();
    // SAFETY: the library's own symbol, a live handle, `values` holds every entry.
    let code = unsafe { f(device.handle(), values.len() as i32, values.as_mut_ptr()) };
    assert_eq!(code, 0);
    // SAFETY: the fake writes `ullVal` for these fields on success.
    values.iter().map(|v| if v.nvmlReturn == 0 { Ok(unsafe { v.value.ullVal }) } else { Err(v.nvmlReturn) }).collect()
}

#[test]
fn nvlink_memory_temperature_and_graphics_activity() {
    // SAFETY: this test binary has a single test, so no other thread uses the environment.
    let node = unsafe { common::SteppedNode::start(SCENARIO) };
    let nvml = Nvml::builder().lib_path(library().as_os_str()).init().expect("init through the fake");
    let h100 = nvml.device_by_index(0).unwrap();
    let l40s = nvml.device_by_index(1).unwrap();
    let h200 = nvml.device_by_index(2).unwrap();

    // The link count and the memory temperature, where the board has them.
    let fields = h100.field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_LINK_COUNT), FieldId(NVML_FI_DEV_MEMORY_TEMP)]);
    let values: Vec<SampleValue> = fields.unwrap().into_iter().map(|s| s.unwrap().value.unwrap()).collect();
    assert_eq!(values, [SampleValue::U32(18), SampleValue::U32(71)]);
    let fields = l40s.field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_LINK_COUNT), FieldId(NVML_FI_DEV_MEMORY_TEMP)]);
    for sample in fields.unwrap() {
        assert!(matches!(sample.unwrap().value, Err(NvmlError::NotSupported)));
    }
    assert!(matches!(l40s.link_wrapper_for(0).is_active(), Err(NvmlError::NotSupported)));
    assert!(matches!(l40s.link_wrapper_for(0).error_counter(ErrorCounter::DlReplay), Err(NvmlError::NotSupported)));

    // Before the fault every link is up and clean.
    std::fs::write(&node.clock, "4").unwrap();
    assert!(h100.link_wrapper_for(3).is_active().unwrap());
    assert_eq!(h100.link_wrapper_for(3).error_counter(ErrorCounter::DlCrcFlit).unwrap(), 0);
    assert!(matches!(h100.link_wrapper_for(18).is_active(), Err(NvmlError::InvalidArg)), "past the link count");

    std::fs::write(&node.clock, "10").unwrap();
    let link3 = h100.link_wrapper_for(3);
    assert!(!link3.is_active().unwrap());
    assert!(h100.link_wrapper_for(2).is_active().unwrap());
    let counts: Vec<u64> =
        [ErrorCounter::DlCrcFlit, ErrorCounter::DlCrcData, ErrorCounter::DlReplay, ErrorCounter::DlRecovery]
            .into_iter()
            .map(|c| link3.error_counter(c).unwrap())
            .collect();
    assert_eq!(counts, [7, 2, 4, 1]);

    // Data counters in KiB: link 2 carried 1 MiB/s for 10 s, link 3 only for 5 s.
    let data = scoped(
        &nvml,
        &h100,
        &[
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 2),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 2),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, u32::MAX),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 18),
        ],
    );
    assert_eq!(data[..4], [Ok(10 * 1024), Ok(5 * 1024), Ok(20), Ok(17 * 10 * 1024 + 5 * 1024)]);
    assert_eq!(data[4], Err(2), "a link past the count is an invalid argument");
    assert_eq!(scoped(&nvml, &l40s, &[(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0)]), [Err(3)], "no NVLink");

    // A driver that reports no NVLink error counters; two links only.
    assert!(h200.link_wrapper_for(1).is_active().unwrap());
    assert!(matches!(h200.link_wrapper_for(1).error_counter(ErrorCounter::DlReplay), Err(NvmlError::NotSupported)));
    assert!(matches!(h200.link_wrapper_for(2).is_active(), Err(NvmlError::InvalidArg)));

    // GPM graphics engine activity between two samples.
    let first = h100.gpm_sample().unwrap();
    std::fs::write(&node.clock, "20").unwrap();
    let second = h100.gpm_sample().unwrap();
    let metrics = gpm_metrics_get(&nvml, &first, &second, &[GpmMetricId::GraphicsUtil, GpmMetricId::SmUtil]).unwrap();
    let values: Vec<f64> = metrics.into_iter().map(|m| m.unwrap().value).collect();
    assert_eq!(values, [55.0, 40.0]);
}
