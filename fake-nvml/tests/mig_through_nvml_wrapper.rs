//! MIG devices, GPU processes and GPM through `nvml-wrapper` and the raw calls it
//! lacks, on the simulated seed-style node.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstanceProfileInfo_v2_t};

const SCENARIO: &str = r#"
gpus:
  - model: H100-SXM5-80GB
    mig:
      instances:
        - {profile: 3g.40gb, values: {sm_activity: 40, tensor_activity: 25, memory_used_mib: 1000}}
        - {profile: 1g.10gb, values: {sm_activity: {ramp: {from: 0, to: 100, over_s: 10}}}}
  - model: H100-SXM5-80GB
    values: {utilization: 50}
  - model: A100-SXM4-80GB
    mig: {layout: all-1g.10gb}
pods:
  - namespace: ml
    name: llm
    containers:
      - name: server
        devices: [{resource: nvidia.com/mig-3g.40gb, gpu: 0, mig: 0}]
        processes: [{pid: 501, gpu: 0, mig: 0, memory_used_mib: 900}]
host_processes:
  - {pid: 601, gpu: 1, memory_used_mib: 2048, sm_utilization: 30}
  - {pid: 602, gpu: 1, memory_used_mib: 1024, sm_utilization: 15, start_s: 100}
  - {pid: 603, gpu: 1, memory_used_mib: 512, mps: true}
"#;

#[test]
fn mig_processes_and_gpm_answer_like_a_driver() {
    // SAFETY: this test binary has a single test, so no other thread uses the environment.
    let node = unsafe { common::SteppedNode::start(SCENARIO) };
    let clock = node.clock.clone();
    let nvml = Nvml::builder().lib_path(common::library().as_os_str()).init().unwrap();
    let raw = nvml.lib();

    let h100 = nvml.device_by_index(0).unwrap();
    assert_eq!(h100.mig_mode().unwrap().current, 1);
    assert_eq!(h100.mig_device_count().unwrap(), 7);
    let large = h100.mig_device_by_index(0).unwrap();
    let small = h100.mig_device_by_index(1).unwrap();
    assert!(matches!(h100.mig_device_by_index(2), Err(NvmlError::NotFound)));
    assert!(large.uuid().unwrap().starts_with("MIG-"));
    assert_ne!(large.uuid().unwrap(), small.uuid().unwrap());
    assert_eq!(large.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
    let memory = large.memory_info().unwrap();
    assert_eq!((memory.total, memory.used), (40320 * 1024 * 1024, 1000 * 1024 * 1024));
    assert!(matches!(large.power_usage(), Err(NvmlError::NotSupported)), "GPU-wide readings are not on instances");
    let (mut gi, mut ci) = (0u32, 0u32);
    // SAFETY: valid handle and out-pointers.
    unsafe {
        assert_eq!((raw.nvmlDeviceGetGpuInstanceId.as_ref().unwrap())(small.handle(), &mut gi), 0);
        assert_eq!((raw.nvmlDeviceGetComputeInstanceId.as_ref().unwrap())(small.handle(), &mut ci), 0);
    }
    assert_eq!((gi, ci), (2, 0));
    assert_eq!(small.attributes().unwrap().gpu_instance_slice_count, 1);

    // GPU instance -> profile id -> profile name, as the exporter resolves it. The
    // instance reports the driver's profile id (9 for 3g.40gb, as `nvidia-smi mig -lgip`
    // shows it), which is not the profile index (`NVML_GPU_INSTANCE_PROFILE_3_SLICE`, 2).
    let mut instance: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: plain C structs and valid handles.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    unsafe {
        assert_eq!((raw.nvmlDeviceGetGpuInstanceById.as_ref().unwrap())(h100.handle(), 1, &mut instance), 0);
        assert_eq!((raw.nvmlGpuInstanceGetInfo.as_ref().unwrap())(instance, &mut info), 0);
    }
    assert_eq!(info.profileId, 9);
    let by_id = profile_by(&nvml, &h100, info.profileId, true);
    assert_eq!(by_id.as_ref().map(|p| (name(p), p.id)), Ok(("MIG 3g.40gb".to_string(), 9)));
    let by_index = profile_by(&nvml, &h100, 2, false);
    assert_eq!(by_index.as_ref().map(|p| (name(p), p.id, p.sliceCount)), Ok(("MIG 3g.40gb".to_string(), 9, 3)));
    let media = profile_by(&nvml, &h100, 7, false).unwrap();
    assert_eq!((name(&media), media.id), ("MIG 1g.10gb+me".to_string(), 20), "1_SLICE_REV1 is the +me profile");
    assert_eq!(profile_by(&nvml, &h100, 5, false).unwrap_err(), 3, "8_SLICE: NOT_SUPPORTED on this GPU");
    assert_eq!(profile_by(&nvml, &h100, 17, false).unwrap_err(), 2, "past the driver's profiles: INVALID_ARGUMENT");
    assert_eq!((info.placement.start, info.placement.size), (0, 3));
    let mut left = 0u32;
    // SAFETY: valid handle and out-pointer; profile id 19 is 1g.10gb.
    unsafe {
        assert_eq!((raw.nvmlDeviceGetGpuInstanceRemainingCapacity.as_ref().unwrap())(h100.handle(), 19, &mut left), 0)
    };
    assert_eq!(left, 3, "7 compute slices, 4 used");

    // What a MIG device handle answers (nvml.h): per-instance queries yes, GPU-wide ones no.
    assert!(matches!(large.temperature(TemperatureSensor::Gpu), Err(NvmlError::NotSupported)));
    assert!(matches!(large.is_ecc_enabled(), Err(NvmlError::NotSupported)));
    assert!(h100.temperature(TemperatureSensor::Gpu).is_ok(), "the parent answers GPU-wide queries");
    assert!(matches!(h100.attributes(), Err(NvmlError::NotSupported)), "attributes: MIG device handles only");
    assert_eq!(small.index().unwrap(), 1, "a MIG device's index under its parent");
    assert!(matches!(h100.decoder_utilization(), Err(NvmlError::NotSupported)), "none in MIG mode");
    assert!(nvml.device_by_index(1).unwrap().decoder_utilization().is_ok(), "a whole GPU has it");
    let on_handle = large.gpm_sample().expect("GPM samples a MIG device handle");
    drop(on_handle);

    // Processes: the parent lists every instance's processes with their ids.
    let on_parent = h100.running_compute_processes().unwrap();
    assert_eq!(on_parent.len(), 1);
    assert_eq!((on_parent[0].pid, on_parent[0].gpu_instance_id), (501, Some(1)));
    assert!(matches!(on_parent[0].used_gpu_memory, UsedGpuMemory::Used(b) if b == 900 * 1024 * 1024));
    assert_eq!(large.running_compute_processes().unwrap().len(), 1);
    assert!(small.running_compute_processes().unwrap().is_empty());
    assert!(
        matches!(h100.process_utilization_stats(None), Err(NvmlError::NotSupported)),
        "no per-process samples in MIG mode"
    );

    let whole = nvml.device_by_index(1).unwrap();
    let procs = whole.running_compute_processes().unwrap();
    assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), [601], "602 has not started; 603 is an MPS client");
    assert_eq!(whole.mps_running_compute_processes().unwrap().iter().map(|p| p.pid).collect::<Vec<_>>(), [603]);
    let samples = whole.process_utilization_stats(None).unwrap();
    assert_eq!(samples.iter().map(|s| (s.pid, s.sm_util)).collect::<Vec<_>>(), [(601, 30), (603, 0)]);
    let latest = samples.iter().map(|s| s.timestamp).max().unwrap();
    assert!(matches!(whole.process_utilization_stats(latest + 60_000_000), Err(NvmlError::NotFound)));

    // GPM between two samples averages the instance's activity over the interval.
    let first = h100.gpm_mig_sample(2).unwrap();
    std::fs::write(&clock, "10").unwrap();
    let second = h100.gpm_mig_sample(2).unwrap();
    let metrics = gpm_metrics_get(&nvml, &first, &second, &[GpmMetricId::SmUtil, GpmMetricId::AnyTensorUtil]).unwrap();
    let sm = metrics[0].as_ref().unwrap().value;
    assert!((sm - 50.0).abs() < 1.0, "mean of a 0-100 ramp: {sm}");
    assert_eq!(metrics[1].as_ref().unwrap().value, 0.0);
    let a100 = nvml.device_by_index(2).unwrap();
    assert!(matches!(a100.gpm_mig_sample(1), Err(NvmlError::NotSupported)), "no GPM before Hopper");
    assert_eq!(a100.mig_device_by_index(6).unwrap().name().unwrap(), "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
}

fn name(info: &nvmlGpuInstanceProfileInfo_v2_t) -> String {
    let bytes: Vec<u8> = info.name.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8(bytes).unwrap()
}

/// Profile info by profile index (`by_id` false) or by the driver's profile id; the
/// error is the raw NVML code.
fn profile_by(
    nvml: &Nvml,
    device: &Device<'_>,
    which: u32,
    by_id: bool,
) -> Result<nvmlGpuInstanceProfileInfo_v2_t, u32> {
    let raw = nvml.lib();
    // SAFETY: a plain C struct; all-zero is valid.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
    let f = if by_id {
        raw.nvmlDeviceGetGpuInstanceProfileInfoByIdV.as_ref().unwrap()
    } else {
        raw.nvmlDeviceGetGpuInstanceProfileInfoV.as_ref().unwrap()
    };
    // SAFETY: valid handle and out-pointer to a versioned struct.
    match unsafe { f(device.handle(), which, &mut info) } {
        0 => Ok(info),
        code => Err(code),
    }
}
