//! The per-device NVML functions the simulator exports, and which of them a MIG device
//! handle answers.
//!
//! Source: the notes in NVIDIA's `nvml.h` (checked against the 13.3 header, as vendored
//! by `github.com/NVIDIA/go-nvml` in `gen/nvml/nvml.h`). The header states per function
//! when a MIG device handle is accepted; [`MIG_HANDLE_CALLS`] lists those, each with
//! the note that says so. Every other per-device query is a GPU-wide query: on a MIG
//! device handle the simulator answers `NVML_ERROR_NOT_SUPPORTED` while the parent GPU
//! answers it. [`MIG_MODE_UNSUPPORTED`] lists the queries the header says a GPU in MIG
//! mode does not answer at all, not even on the parent's handle.

/// Every per-device function a scenario fault (`hang`, `error`) may name; `"*"` is
/// every one of them.
pub const DEVICE_CALLS: &[&str] = &[
    "*",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetSupportedClocksEventReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
];

/// The per-device functions a MIG device handle answers, with the `nvml.h` note that
/// says so. A MIG device handle answers every other one `NVML_ERROR_NOT_SUPPORTED`.
pub const MIG_HANDLE_CALLS: &[(&str, &str)] = &[
    ("nvmlDeviceGetName", "When used with MIG device handles the API returns MIG device names"),
    ("nvmlDeviceGetIndex", "When used with MIG device handles this API returns indices"),
    ("nvmlDeviceGetUUID", "When used with MIG device handles the API returns globally unique UUIDs"),
    ("nvmlDeviceGetMemoryInfo", MIG_PER_INSTANCE),
    ("nvmlDeviceGetMemoryInfo_v2", MIG_PER_INSTANCE),
    ("nvmlDeviceGetComputeRunningProcesses_v3", MIG_PER_INSTANCE),
    ("nvmlDeviceGetMPSComputeRunningProcesses_v3", MIG_PER_INSTANCE),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", MIG_PER_INSTANCE),
    ("nvmlDeviceGetAttributes_v2", "This API currently only supports MIG device handles."),
    ("nvmlDeviceIsMigDeviceHandle", "Test if the given handle refers to a MIG device."),
    ("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "Get parent device handle from a MIG device handle."),
    ("nvmlDeviceGetGpuInstanceId", "Get GPU instance ID for the given MIG device handle."),
    ("nvmlDeviceGetComputeInstanceId", "Get compute instance ID for the given MIG device handle."),
    ("nvmlGpmQueryDeviceSupport", "This API supports the device handle and MIG device handle."),
    ("nvmlGpmSampleGet", "This API supports the device handle and MIG device handle."),
];

const MIG_PER_INSTANCE: &str = "In MIG mode, if device handle is provided, the API returns aggregate information, \
     only if the caller has appropriate privileges. Per-instance information can be queried by using specific MIG \
     device handles.";

/// Queries a GPU in MIG mode answers `NVML_ERROR_NOT_SUPPORTED` on any handle, with the
/// `nvml.h` note that says so.
pub const MIG_MODE_UNSUPPORTED: &[(&str, &str)] = &[
    (
        "nvmlDeviceGetUtilizationRates",
        "On MIG-enabled GPUs, querying device utilization rates is not currently supported.",
    ),
    (
        "nvmlDeviceGetEncoderUtilization",
        "On MIG-enabled GPUs, querying encoder utilization is not currently supported.",
    ),
    (
        "nvmlDeviceGetDecoderUtilization",
        "On MIG-enabled GPUs, querying decoder utilization is not currently supported.",
    ),
    (
        "nvmlDeviceGetProcessUtilization",
        "On MIG-enabled GPUs, querying process utilization is not currently supported.",
    ),
];

/// Whether a MIG device handle answers `call`.
pub fn mig_handle_answers(call: &str) -> bool {
    MIG_HANDLE_CALLS.iter().any(|(c, _)| *c == call)
}

/// Whether a GPU in MIG mode answers `call` on its own handle.
pub fn mig_mode_answers(call: &str) -> bool {
    !MIG_MODE_UNSUPPORTED.iter().any(|(c, _)| *c == call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_call_is_a_device_call() {
        for (call, _) in MIG_HANDLE_CALLS.iter().chain(MIG_MODE_UNSUPPORTED) {
            assert!(DEVICE_CALLS.contains(call), "{call}");
        }
        assert!(mig_handle_answers("nvmlDeviceGetUUID"));
        assert!(!mig_handle_answers("nvmlDeviceGetPowerUsage"));
    }
}
