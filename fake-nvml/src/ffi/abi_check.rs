//! Compile-time proof that every exported function has exactly the signature
//! `nvml-wrapper-sys` expects for its symbol: each line below only compiles if the
//! function coerces to the type of the loader's field of the same name.

use nvml_wrapper_sys::bindings::NvmlLib;

use super::{
    device as d, events as e, fields as f, gpm as g, instances as i, mig as m, nvlink as n, processes as p, stubs as x,
    system as s, topology as t,
};

fn same_signature<T, E>(_loader_field: &Result<T, E>, _export: T) {}

#[allow(dead_code)]
fn check(lib: &NvmlLib) {
    same_signature(&lib.nvmlInit_v2, s::nvmlInit_v2);
    same_signature(&lib.nvmlInitWithFlags, s::nvmlInitWithFlags);
    same_signature(&lib.nvmlShutdown, s::nvmlShutdown);
    same_signature(&lib.nvmlErrorString, s::nvmlErrorString);
    same_signature(&lib.nvmlSystemGetDriverVersion, s::nvmlSystemGetDriverVersion);
    same_signature(&lib.nvmlSystemGetNVMLVersion, s::nvmlSystemGetNVMLVersion);
    same_signature(&lib.nvmlSystemGetCudaDriverVersion, s::nvmlSystemGetCudaDriverVersion);
    same_signature(&lib.nvmlSystemGetCudaDriverVersion_v2, s::nvmlSystemGetCudaDriverVersion_v2);
    same_signature(&lib.nvmlDeviceGetCount_v2, s::nvmlDeviceGetCount_v2);
    same_signature(&lib.nvmlDeviceGetHandleByIndex_v2, s::nvmlDeviceGetHandleByIndex_v2);
    same_signature(&lib.nvmlDeviceGetHandleByUUID, s::nvmlDeviceGetHandleByUUID);
    same_signature(&lib.nvmlDeviceGetHandleByPciBusId_v2, s::nvmlDeviceGetHandleByPciBusId_v2);
    same_signature(&lib.nvmlDeviceGetIndex, d::nvmlDeviceGetIndex);
    same_signature(&lib.nvmlDeviceGetName, d::nvmlDeviceGetName);
    same_signature(&lib.nvmlDeviceGetUUID, d::nvmlDeviceGetUUID);
    same_signature(&lib.nvmlDeviceGetSerial, d::nvmlDeviceGetSerial);
    same_signature(&lib.nvmlDeviceGetPciInfo_v3, d::nvmlDeviceGetPciInfo_v3);
    same_signature(&lib.nvmlDeviceGetMemoryInfo, d::nvmlDeviceGetMemoryInfo);
    same_signature(&lib.nvmlDeviceGetMemoryInfo_v2, d::nvmlDeviceGetMemoryInfo_v2);
    same_signature(&lib.nvmlDeviceGetUtilizationRates, d::nvmlDeviceGetUtilizationRates);
    same_signature(&lib.nvmlDeviceGetPowerUsage, d::nvmlDeviceGetPowerUsage);
    same_signature(&lib.nvmlDeviceGetTotalEnergyConsumption, d::nvmlDeviceGetTotalEnergyConsumption);
    same_signature(&lib.nvmlDeviceGetEnforcedPowerLimit, d::nvmlDeviceGetEnforcedPowerLimit);
    same_signature(&lib.nvmlDeviceGetPowerManagementLimit, d::nvmlDeviceGetPowerManagementLimit);
    same_signature(&lib.nvmlDeviceGetTemperature, d::nvmlDeviceGetTemperature);
    same_signature(&lib.nvmlDeviceGetTemperatureThreshold, d::nvmlDeviceGetTemperatureThreshold);
    same_signature(&lib.nvmlDeviceGetClockInfo, d::nvmlDeviceGetClockInfo);
    same_signature(&lib.nvmlDeviceGetMaxClockInfo, d::nvmlDeviceGetMaxClockInfo);
    same_signature(&lib.nvmlDeviceGetEncoderUtilization, d::nvmlDeviceGetEncoderUtilization);
    same_signature(&lib.nvmlDeviceGetDecoderUtilization, d::nvmlDeviceGetDecoderUtilization);
    same_signature(&lib.nvmlDeviceGetPcieThroughput, d::nvmlDeviceGetPcieThroughput);
    same_signature(&lib.nvmlDeviceGetPcieReplayCounter, d::nvmlDeviceGetPcieReplayCounter);
    same_signature(&lib.nvmlDeviceGetEccMode, d::nvmlDeviceGetEccMode);
    same_signature(&lib.nvmlDeviceGetTotalEccErrors, d::nvmlDeviceGetTotalEccErrors);
    same_signature(&lib.nvmlDeviceGetRetiredPages, d::nvmlDeviceGetRetiredPages);
    same_signature(&lib.nvmlDeviceGetRetiredPages_v2, d::nvmlDeviceGetRetiredPages_v2);
    same_signature(&lib.nvmlDeviceGetRetiredPagesPendingStatus, d::nvmlDeviceGetRetiredPagesPendingStatus);
    same_signature(&lib.nvmlDeviceGetRemappedRows, d::nvmlDeviceGetRemappedRows);
    same_signature(&lib.nvmlDeviceGetFieldValues, f::nvmlDeviceGetFieldValues);
    same_signature(&lib.nvmlDeviceGetCurrentClocksEventReasons, d::nvmlDeviceGetCurrentClocksEventReasons);
    same_signature(&lib.nvmlDeviceGetCurrentClocksThrottleReasons, d::nvmlDeviceGetCurrentClocksThrottleReasons);
    same_signature(&lib.nvmlDeviceGetSupportedClocksEventReasons, d::nvmlDeviceGetSupportedClocksEventReasons);
    same_signature(&lib.nvmlDeviceGetSupportedClocksThrottleReasons, d::nvmlDeviceGetSupportedClocksThrottleReasons);
    same_signature(&lib.nvmlDeviceGetPerformanceState, d::nvmlDeviceGetPerformanceState);
    same_signature(&lib.nvmlDeviceGetMigMode, d::nvmlDeviceGetMigMode);
    same_signature(&lib.nvmlDeviceGetArchitecture, d::nvmlDeviceGetArchitecture);
    same_signature(&lib.nvmlDeviceGetCudaComputeCapability, d::nvmlDeviceGetCudaComputeCapability);
    same_signature(&lib.nvmlGpmQueryDeviceSupport, d::nvmlGpmQueryDeviceSupport);
    same_signature(&lib.nvmlEventSetCreate, e::nvmlEventSetCreate);
    same_signature(&lib.nvmlEventSetFree, e::nvmlEventSetFree);
    same_signature(&lib.nvmlDeviceGetSupportedEventTypes, e::nvmlDeviceGetSupportedEventTypes);
    same_signature(&lib.nvmlDeviceRegisterEvents, e::nvmlDeviceRegisterEvents);
    same_signature(&lib.nvmlEventSetWait_v2, e::nvmlEventSetWait_v2);
    same_signature(&lib.nvmlDeviceGetMaxMigDeviceCount, m::nvmlDeviceGetMaxMigDeviceCount);
    same_signature(&lib.nvmlDeviceGetMigDeviceHandleByIndex, m::nvmlDeviceGetMigDeviceHandleByIndex);
    same_signature(&lib.nvmlDeviceIsMigDeviceHandle, m::nvmlDeviceIsMigDeviceHandle);
    same_signature(&lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, m::nvmlDeviceGetDeviceHandleFromMigDeviceHandle);
    same_signature(&lib.nvmlDeviceGetGpuInstanceId, m::nvmlDeviceGetGpuInstanceId);
    same_signature(&lib.nvmlDeviceGetComputeInstanceId, m::nvmlDeviceGetComputeInstanceId);
    same_signature(&lib.nvmlDeviceGetAttributes_v2, m::nvmlDeviceGetAttributes_v2);
    same_signature(&lib.nvmlDeviceGetGpuInstanceProfileInfoV, m::nvmlDeviceGetGpuInstanceProfileInfoV);
    same_signature(&lib.nvmlDeviceGetGpuInstanceProfileInfoByIdV, m::nvmlDeviceGetGpuInstanceProfileInfoByIdV);
    same_signature(&lib.nvmlDeviceGetGpuInstanceRemainingCapacity, m::nvmlDeviceGetGpuInstanceRemainingCapacity);
    same_signature(&lib.nvmlDeviceGetGpuInstanceById, i::nvmlDeviceGetGpuInstanceById);
    same_signature(&lib.nvmlGpuInstanceGetInfo, i::nvmlGpuInstanceGetInfo);
    same_signature(&lib.nvmlDeviceGetGpuInstanceProfileInfo, m::nvmlDeviceGetGpuInstanceProfileInfo);
    same_signature(&lib.nvmlGpuInstanceGetComputeInstanceById, i::nvmlGpuInstanceGetComputeInstanceById);
    same_signature(&lib.nvmlComputeInstanceGetInfo_v2, i::nvmlComputeInstanceGetInfo_v2);
    same_signature(&lib.nvmlGpuInstanceGetComputeInstanceProfileInfo, i::nvmlGpuInstanceGetComputeInstanceProfileInfo);
    same_signature(
        &lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV,
        i::nvmlGpuInstanceGetComputeInstanceProfileInfoV,
    );
    same_signature(&lib.nvmlDeviceGetMinorNumber, d::nvmlDeviceGetMinorNumber);
    same_signature(&lib.nvmlDeviceGetTopologyCommonAncestor, t::nvmlDeviceGetTopologyCommonAncestor);
    same_signature(&lib.nvmlDeviceGetNvLinkRemotePciInfo_v2, n::nvmlDeviceGetNvLinkRemotePciInfo_v2);
    same_signature(&lib.nvmlDeviceGetGraphicsRunningProcesses_v3, p::nvmlDeviceGetGraphicsRunningProcesses_v3);
    same_signature(&lib.nvmlDeviceGetFanSpeed, x::nvmlDeviceGetFanSpeed);
    same_signature(&lib.nvmlDeviceGetComputeRunningProcesses_v3, p::nvmlDeviceGetComputeRunningProcesses_v3);
    same_signature(&lib.nvmlDeviceGetMPSComputeRunningProcesses_v3, p::nvmlDeviceGetMPSComputeRunningProcesses_v3);
    same_signature(&lib.nvmlDeviceGetProcessUtilization, p::nvmlDeviceGetProcessUtilization);
    same_signature(&lib.nvmlGpmSampleAlloc, g::nvmlGpmSampleAlloc);
    same_signature(&lib.nvmlGpmSampleFree, g::nvmlGpmSampleFree);
    same_signature(&lib.nvmlGpmSampleGet, g::nvmlGpmSampleGet);
    same_signature(&lib.nvmlGpmMigSampleGet, g::nvmlGpmMigSampleGet);
    same_signature(&lib.nvmlGpmMetricsGet, g::nvmlGpmMetricsGet);
    same_signature(&lib.nvmlDeviceGetNvLinkState, n::nvmlDeviceGetNvLinkState);
    same_signature(&lib.nvmlDeviceGetNvLinkErrorCounter, n::nvmlDeviceGetNvLinkErrorCounter);
}
