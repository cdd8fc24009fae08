//! Loads the built `libfake_nvml.so` through `nvml-wrapper`, as the exporter does, and
//! checks what each call answers, ABI details included (buffer sizes, struct
//! versions, NOT_SUPPORTED per model, the retired-pages count protocol, events).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::library;
use std::time::Duration;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::*;

const SCENARIO: &str = r#"
driver_version: "550.90.07"
cuda_version: "12.4"
gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-11111111-2222-3333-4444-555555555555
    values:
      utilization: 63
      memory_activity: 20
      memory_used_mib: 40960
      power_watts: 350.5
      temperature_c: 61
      sm_clock_mhz: 1755
    counters: {energy_joules: 1000}
    faults:
      - {at_s: 10, xid: 79}
      - {at_s: 10, ecc_errors: {uncorrected: 2, corrected: 5}}
      - {at_s: 10, remapped_rows: {uncorrectable: 1, pending: true}}
      - {at_s: 10, recovery_action: gpu_reset}
      - {at_s: 20, lost: true}
  - model: L40S-48GB
    values: {encoder_utilization: 12}
    faults:
      - {at_s: 5, hang: {call: nvmlDeviceGetPowerUsage, for_s: 1}}
  - model: V100-SXM2-32GB
    faults:
      - {at_s: 1, retired_pages: {double_bit: 3, pending: true}}
"#;

#[test]
fn the_wrapper_reads_the_simulated_node() {
    // SAFETY: this test binary has a single test, so no other thread uses the environment.
    let node = unsafe { common::SteppedNode::start(SCENARIO) };
    let clock = node.clock.clone();
    let nvml = Nvml::builder().lib_path(library().as_os_str()).init().expect("init through the fake");

    assert_eq!(nvml.sys_driver_version().unwrap(), "550.90.07");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12040);
    assert_eq!(nvml.device_count().unwrap(), 3);

    let h100 = nvml.device_by_index(0).unwrap();
    // Registered at scenario time 0: XIDs from then on are delivered.
    let set = h100.register_events(EventTypes::CRITICAL_XID_ERROR, nvml.create_event_set().unwrap()).unwrap();
    assert_eq!(h100.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(h100.uuid().unwrap(), "GPU-11111111-2222-3333-4444-555555555555");
    assert_eq!(h100.pci_info().unwrap().bus_id, "00000000:18:00.0");
    let mem = h100.memory_info().unwrap();
    assert_eq!(mem.total, 81559 * 1024 * 1024);
    assert_eq!(mem.used, 40960 * 1024 * 1024);
    assert_eq!(mem.free + mem.used + mem.reserved, mem.total);
    let util = h100.utilization_rates().unwrap();
    assert_eq!((util.gpu, util.memory), (63, 20));
    assert_eq!(h100.power_usage().unwrap(), 350_500);
    assert_eq!(h100.enforced_power_limit().unwrap(), 700_000);
    assert_eq!(h100.total_energy_consumption().unwrap(), 1_000_000);
    assert_eq!(h100.temperature(TemperatureSensor::Gpu).unwrap(), 61);
    assert_eq!(h100.temperature_threshold(TemperatureThreshold::Slowdown).unwrap(), 89);
    assert_eq!(h100.temperature_threshold(TemperatureThreshold::Shutdown).unwrap(), 92);
    assert_eq!(h100.clock_info(Clock::SM).unwrap(), 1755);
    assert_eq!(h100.clock_info(Clock::Memory).unwrap(), 2619);
    assert!(matches!(h100.encoder_utilization(), Err(NvmlError::NotSupported)), "no NVENC on H100");
    assert!(h100.decoder_utilization().is_ok());
    assert!(matches!(h100.retired_pages(RetirementCause::DoubleBitEccError), Err(NvmlError::NotSupported)));
    assert!(h100.is_ecc_enabled().unwrap().currently_enabled);
    assert_eq!(h100.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).unwrap(), 0);

    // Time passes: the faults at 10 s happen.
    std::fs::write(&clock, "12").unwrap();
    assert_eq!(h100.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).unwrap(), 2);
    assert_eq!(h100.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate).unwrap(), 5);
    let fields = h100
        .field_values_for(&[
            FieldId(NVML_FI_DEV_REMAPPED_UNC),
            FieldId(NVML_FI_DEV_REMAPPED_PENDING),
            FieldId(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
            FieldId(NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL),
        ])
        .unwrap();
    let values: Vec<String> = fields.iter().map(|f| format!("{:?}", f.as_ref().map(|s| &s.value))).collect();
    assert_eq!(values[0], "Ok(Ok(U32(1)))");
    assert_eq!(values[1], "Ok(Ok(U32(1)))");
    assert_eq!(values[2], "Ok(Ok(U32(1)))", "GPU reset asked for");
    assert!(values[3].contains("NotSupported"), "{}", values[3]);
    // SAFETY: the handle and pointers are valid for the call.
    let (mut cor, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
    let raw = nvml.lib();
    let code = unsafe {
        (raw.nvmlDeviceGetRemappedRows.as_ref().expect("symbol"))(
            h100.handle(),
            &mut cor,
            &mut unc,
            &mut pending,
            &mut failed,
        )
    };
    assert_eq!((code, cor, unc, pending, failed), (0, 0, 1, 1, 0));

    let event = set.wait(1000).expect("the XID at 10 s is due");
    assert_eq!(event.event_data, Some(XidError::Value(79)));
    assert!(matches!(set.wait(50), Err(NvmlError::Timeout)), "each event is delivered once");
    let late = h100.register_events(EventTypes::CRITICAL_XID_ERROR, nvml.create_event_set().unwrap()).unwrap();
    assert!(
        matches!(late.wait(100), Err(NvmlError::Timeout)),
        "a set registered at 12 s is not handed the XID of 10 s, as nvmlEventSetWait would not"
    );
    drop(late);

    // The GPU falls off the bus at 20 s; the others keep answering.
    std::fs::write(&clock, "21").unwrap();
    assert!(matches!(h100.power_usage(), Err(NvmlError::GpuLost)));
    assert!(matches!(nvml.device_by_index(0), Err(NvmlError::GpuLost)));
    let l40s = nvml.device_by_index(1).unwrap();
    assert_eq!(l40s.encoder_utilization().unwrap().utilization, 12);
    assert!(matches!(l40s.mig_mode(), Err(NvmlError::NotSupported)), "no MIG on L40S");

    // A scheduled hang blocks the named call only.
    std::fs::write(&clock, "5").unwrap();
    let started = std::time::Instant::now();
    assert!(l40s.temperature(TemperatureSensor::Gpu).is_ok());
    assert!(started.elapsed() < Duration::from_millis(500));
    let started = std::time::Instant::now();
    assert!(l40s.power_usage().is_ok());
    assert!(started.elapsed() >= Duration::from_millis(900), "hung for the scheduled second");

    // Pre-Ampere page retirement, through the count protocol.
    std::fs::write(&clock, "2").unwrap();
    let v100 = nvml.device_by_index(2).unwrap();
    assert_eq!(v100.retired_pages(RetirementCause::DoubleBitEccError).unwrap().len(), 3);
    assert!(v100.are_pages_pending_retired().unwrap());
    assert!(matches!(v100.memory_info().map(|m| m.used), Ok(0)));

    // ABI details a wrong caller would hit.
    let mut small = [0 as std::ffi::c_char; 8];
    // SAFETY: the buffer is 8 bytes long, as passed.
    let code = unsafe { (raw.nvmlDeviceGetName.as_ref().expect("symbol"))(l40s.handle(), small.as_mut_ptr(), 8) };
    assert_eq!(code, 7, "NVML_ERROR_INSUFFICIENT_SIZE");
    let mut wrong_version: nvml_wrapper_sys::bindings::nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
    wrong_version.version = 1;
    // SAFETY: valid struct pointer.
    let code = unsafe { (raw.nvmlDeviceGetMemoryInfo_v2.as_ref().expect("symbol"))(l40s.handle(), &mut wrong_version) };
    assert_eq!(code, 25, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH");

    drop((h100, l40s, v100, set));
    nvml.shutdown().expect("nvmlShutdown is exported");
}
