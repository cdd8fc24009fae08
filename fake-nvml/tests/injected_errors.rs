//! Scheduled `error` faults through `nvml-wrapper`: the named call answers the code for
//! the window, on the handle the fault names, and answers again afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureThreshold;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_REMAPPED_COR;

const SCENARIO: &str = r#"
gpus:
  - model: H100-SXM5-80GB
    mig: {layout: all-3g.40gb}
    faults:
      - {at_s: 10, error: {call: nvmlDeviceGetMemoryInfo_v2, code: TIMEOUT, for_s: 5, mig: 0}}
      - {at_s: 10, error: {call: nvmlDeviceGetComputeRunningProcesses_v3, code: INSUFFICIENT_SIZE, for_s: 5, mig: 1}}
  - model: A100-SXM4-80GB
    faults:
      - {at_s: 10, error: {call: nvmlDeviceGetEccMode, code: UNKNOWN, for_s: 5}}
      - {at_s: 10, error: {call: nvmlDeviceGetFieldValues, code: GPU_IS_LOST, for_s: 5}}
      - {at_s: 20, error: {call: nvmlDeviceGetHandleByIndex_v2, code: NO_PERMISSION, for_s: 5}}
      - {at_s: 30, error: {call: "*", code: UNKNOWN, for_s: 5}}
"#;

#[test]
fn errors_answer_for_their_window_on_their_handle() {
    // SAFETY: this test binary has a single test, so no other thread uses the environment.
    let node = unsafe { common::SteppedNode::start(SCENARIO) };
    let clock = node.clock.clone();
    let nvml = Nvml::builder().lib_path(common::library().as_os_str()).init().unwrap();
    let h100 = nvml.device_by_index(0).unwrap();
    let (first, second) = (h100.mig_device_by_index(0).unwrap(), h100.mig_device_by_index(1).unwrap());
    let a100 = nvml.device_by_index(1).unwrap();
    let remapped = || a100.field_values_for(&[FieldId(NVML_FI_DEV_REMAPPED_COR)]).unwrap().remove(0);

    assert!(first.memory_info().is_ok());
    assert!(a100.is_ecc_enabled().is_ok());
    assert!(remapped().and_then(|s| s.value).is_ok());

    std::fs::write(&clock, "11").unwrap();
    assert!(matches!(first.memory_info(), Err(NvmlError::Timeout)), "the named MIG device");
    assert!(second.memory_info().is_ok(), "not its sibling");
    assert!(h100.memory_info().is_ok(), "not its parent");
    // nvml-wrapper's count probe takes INSUFFICIENT_SIZE with a count of 0 as "no
    // processes", so this error reads as an empty list rather than as a failure.
    assert!(second.running_compute_processes().unwrap().is_empty());
    assert!(first.running_compute_processes().is_ok());
    assert!(matches!(a100.is_ecc_enabled(), Err(NvmlError::Unknown)));
    assert!(a100.power_usage().is_ok(), "other calls answer");
    assert!(
        matches!(remapped().and_then(|s| s.value), Err(NvmlError::GpuLost)),
        "field values carry the code per field; the call itself succeeds"
    );

    std::fs::write(&clock, "16").unwrap();
    assert!(first.memory_info().is_ok(), "the window ended");
    assert!(a100.is_ecc_enabled().unwrap().currently_enabled);

    std::fs::write(&clock, "21").unwrap();
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::NoPermission)));
    assert!(nvml.device_by_index(0).is_ok());

    std::fs::write(&clock, "31").unwrap();
    assert!(matches!(a100.power_usage(), Err(NvmlError::Unknown)), "`*` names every call");
    assert!(matches!(a100.temperature_threshold(TemperatureThreshold::Slowdown), Err(NvmlError::Unknown)));
    assert!(h100.power_usage().is_ok(), "on that GPU only");

    nvml.shutdown().unwrap();
}
