//! Every metric family the exporter serves: name, type, unit and help.
//!
//! `docs/metrics.md` documents the same list with labels and the NVML call behind
//! each; a test checks the two agree.

use crate::exposition::Family;

// GPU identity and state.
pub const GPU_INFO: Family =
    Family::info("gpu", "GPU identity: model, UUID, PCI bus id, driver and CUDA version. Always 1.");
pub const GPU_UP: Family =
    Family::gauge("gpu_up", None, "1 if the GPU answered in the last collection cycle, 0 otherwise.");
pub const GPU_LOST: Family = Family::gauge("gpu_lost", None, "1 if NVML reports the GPU as lost (fallen off the bus).");
pub const GPU_STALE: Family = Family::gauge(
    "gpu_collection_stale",
    None,
    "1 while an NVML call on this GPU is past its deadline; its readings are withheld until it returns.",
);
pub const GPU_LAST_SUCCESS: Family = Family::gauge(
    "gpu_last_collection_success_timestamp_seconds",
    Some("seconds"),
    "Unix time of the last cycle in which the GPU answered.",
);

// The seed's metric contract.
pub const UTILIZATION: Family =
    Family::gauge("gpu_utilization", None, "Percent of time over the last sample period a kernel was running (0-100).");
pub const MEMORY_UTILIZATION: Family =
    Family::gauge("gpu_memory_utilization", None, "Device memory used as a percent of the total (0-100).");
pub const MEMORY_USED: Family =
    Family::gauge("gpu_memory_used_bytes", Some("bytes"), "Device memory allocated by processes, in bytes.");
pub const MEMORY_TOTAL: Family =
    Family::gauge("gpu_memory_total_bytes", Some("bytes"), "Total device memory, in bytes.");
pub const POWER_USAGE: Family =
    Family::gauge("gpu_power_usage_watts", Some("watts"), "Current board power draw, in watts.");
pub const TEMPERATURE: Family =
    Family::gauge("gpu_temperature_celsius", Some("celsius"), "GPU core temperature, in degrees Celsius.");
pub const SM_CLOCK: Family = Family::gauge("gpu_sm_clock_mhz", None, "Current SM clock, in MHz.");
pub const MEM_CLOCK: Family = Family::gauge("gpu_mem_clock_mhz", None, "Current memory clock, in MHz.");

// More readings.
pub const MEMORY_RESERVED: Family =
    Family::gauge("gpu_memory_reserved_bytes", Some("bytes"), "Device memory reserved by the driver, in bytes.");
pub const MEMORY_CONTROLLER: Family = Family::gauge(
    "gpu_memory_controller_utilization",
    None,
    "Percent of time over the last sample period device memory was read or written (0-100).",
);
pub const POWER_LIMIT: Family =
    Family::gauge("gpu_power_limit_watts", Some("watts"), "Power limit the driver enforces, in watts.");
pub const ENERGY: Family = Family::counter(
    "gpu_energy_consumption_joules",
    Some("joules"),
    "Energy consumed since the driver was loaded, in joules.",
);
pub const TEMP_SLOWDOWN: Family = Family::gauge(
    "gpu_temperature_slowdown_threshold_celsius",
    Some("celsius"),
    "Temperature at which the GPU starts to slow its clocks, in degrees Celsius.",
);
pub const TEMP_SHUTDOWN: Family = Family::gauge(
    "gpu_temperature_shutdown_threshold_celsius",
    Some("celsius"),
    "Temperature at which the GPU shuts down, in degrees Celsius.",
);
pub const MEMORY_TEMPERATURE: Family = Family::gauge(
    "gpu_memory_temperature_celsius",
    Some("celsius"),
    "Device memory (HBM) temperature, in degrees Celsius; absent on boards without a memory sensor.",
);
pub const SM_CLOCK_MAX: Family = Family::gauge("gpu_sm_clock_max_mhz", None, "Maximum SM clock, in MHz.");
pub const MEM_CLOCK_MAX: Family = Family::gauge("gpu_mem_clock_max_mhz", None, "Maximum memory clock, in MHz.");
pub const ENCODER: Family = Family::gauge("gpu_encoder_utilization", None, "NVENC utilization, percent (0-100).");
pub const DECODER: Family = Family::gauge("gpu_decoder_utilization", None, "NVDEC utilization, percent (0-100).");
pub const PCIE_TX: Family = Family::gauge(
    "gpu_pcie_tx_bytes_per_second",
    None,
    "PCIe transmit throughput over NVML's 20 ms sample, in bytes per second.",
);
pub const PCIE_RX: Family = Family::gauge(
    "gpu_pcie_rx_bytes_per_second",
    None,
    "PCIe receive throughput over NVML's 20 ms sample, in bytes per second.",
);
pub const PCIE_REPLAYS: Family =
    Family::counter("gpu_pcie_replays", None, "PCIe replays (link-level retransmissions).");
pub const PSTATE: Family =
    Family::gauge("gpu_performance_state", None, "Performance state, 0 (fastest) to 15 (slowest).");
pub const ECC_ENABLED: Family = Family::gauge("gpu_ecc_enabled", None, "1 if ECC is enabled on the device memory.");
pub const ECC_ERRORS: Family =
    Family::counter("gpu_ecc_errors", None, "ECC errors over the life of the GPU (aggregate counter), by error type.");
pub const ECC_VOLATILE: Family = Family::counter(
    "gpu_ecc_volatile_errors",
    None,
    "ECC errors since the driver was loaded or the GPU was reset (volatile counter), by error type.",
);
pub const RETIRED_PAGES: Family =
    Family::gauge("gpu_retired_pages", None, "Memory pages retired, by cause (GPUs before Ampere).");
pub const RETIRED_PENDING: Family =
    Family::gauge("gpu_retired_pages_pending", None, "1 if a page retirement waits for the next driver reload.");
pub const REMAPPED_ROWS: Family = Family::gauge(
    "gpu_remapped_rows",
    None,
    "Memory rows remapped, by the kind of error that caused it (Ampere and newer).",
);
pub const REMAP_PENDING: Family =
    Family::gauge("gpu_remapped_rows_pending", None, "1 if a row remapping waits for a GPU reset.");
pub const REMAP_FAILED: Family =
    Family::gauge("gpu_remapped_rows_failed", None, "1 if a row remapping failed (the GPU needs service).");
pub const CLOCK_EVENTS: Family = Family::gauge(
    "gpu_clock_event_active",
    None,
    "1 if this reason is currently lowering the clocks (throttling), per reason the GPU supports.",
);
pub const RECOVERY_ACTION: Family = Family::gauge(
    "gpu_recovery_action",
    None,
    "Recovery the driver asks for: 0 none, 1 GPU reset, 2 node reboot, 3 drain peer-to-peer, 4 drain and reset.",
);
pub const NVLINK_UP: Family =
    Family::gauge("gpu_nvlink_up", None, "1 if the NVLink link is active, 0 if it is down, per link.");
pub const NVLINK_TX: Family = Family::counter(
    "gpu_nvlink_tx_bytes",
    Some("bytes"),
    "NVLink data payload sent since the driver loaded, in bytes, per link.",
);
pub const NVLINK_RX: Family = Family::counter(
    "gpu_nvlink_rx_bytes",
    Some("bytes"),
    "NVLink data payload received since the driver loaded, in bytes, per link.",
);
pub const NVLINK_ERRORS: Family = Family::counter(
    "gpu_nvlink_errors",
    None,
    "NVLink data-link errors since the driver loaded, per link and error type (crc_flit, crc_data, replay, recovery).",
);
pub const XID_ERRORS: Family =
    Family::counter("gpu_xid_errors", None, "XID errors seen since the exporter started, by code.");
pub const XID_LAST_SEEN: Family = Family::gauge(
    "gpu_xid_last_seen_timestamp_seconds",
    Some("seconds"),
    "Unix time at which this XID code was last seen.",
);

// GPM activity, MIG layout and processes.
pub const SM_ACTIVITY: Family = Family::gauge(
    "gpu_sm_activity",
    None,
    "Percent of time the SMs had work over the last collection interval (GPM; Hopper and newer), per GPU or MIG instance.",
);
pub const TENSOR_ACTIVITY: Family = Family::gauge(
    "gpu_tensor_activity",
    None,
    "Percent of time a tensor pipe was active over the last collection interval (GPM), per GPU or MIG instance.",
);
pub const DRAM_ACTIVITY: Family = Family::gauge(
    "gpu_dram_activity",
    None,
    "Percent of peak DRAM bandwidth used over the last collection interval (GPM), per GPU or MIG instance.",
);
pub const GRAPHICS_ACTIVITY: Family = Family::gauge(
    "gpu_graphics_activity",
    None,
    "Percent of time any compute or graphics work was active over the last collection interval (GPM graphics engine), per GPU or MIG instance.",
);
pub const MIG_ENABLED: Family = Family::gauge("gpu_mig_enabled", None, "1 if the GPU is in MIG mode.");
pub const MIG_INSTANCE_INFO: Family =
    Family::info("gpu_mig_instance", "A MIG device: profile, GPU and compute instance ids, MIG UUID. Always 1.");
pub const MIG_INSTANCE_SLICES: Family =
    Family::gauge("gpu_mig_instance_compute_slices", None, "Compute slices the MIG instance's GPU instance occupies.");
pub const MIG_SLICES_FREE: Family =
    Family::gauge("gpu_mig_compute_slices_free", None, "Compute slices of a MIG-mode GPU that no GPU instance uses.");
pub const MIG_SLICES_TOTAL: Family =
    Family::gauge("gpu_mig_compute_slices", None, "Compute slices of a MIG-mode GPU, used or not.");
pub const MIG_PROFILE_AVAILABLE: Family = Family::gauge(
    "gpu_mig_profile_available",
    None,
    "How many more GPU instances of this profile the driver could create now.",
);
pub const PROCESSES: Family =
    Family::gauge("gpu_processes", None, "Compute processes (MPS clients included) on the GPU or MIG instance.");

// The exporter itself.
pub const BUILD_INFO: Family = Family::info("gpu_exporter_build", "Exporter version and revision. Always 1.");
pub const NVML_UP: Family = Family::gauge("gpu_exporter_nvml_up", None, "1 if NVML is loaded and initialised.");
pub const NVML_ERROR: Family = Family::info(
    "gpu_exporter_nvml_error",
    "Why NVML is down; present only while gpu_exporter_nvml_up is 0. Always 1.",
);
pub const NVML_INIT_ATTEMPTS: Family =
    Family::counter("gpu_exporter_nvml_init_attempts", None, "Attempts to load and initialise NVML.");
pub const GPUS: Family = Family::gauge("gpu_exporter_gpus", None, "GPUs NVML reports on this node.");
pub const CYCLE_DURATION: Family = Family::gauge(
    "gpu_exporter_collection_duration_seconds",
    Some("seconds"),
    "Wall time of the last collection cycle, in seconds.",
);
pub const CYCLES: Family = Family::counter("gpu_exporter_collections", None, "Collection cycles run.");
pub const LAST_CYCLE: Family = Family::gauge(
    "gpu_exporter_last_collection_timestamp_seconds",
    Some("seconds"),
    "Unix time at which the last collection cycle ended.",
);
pub const NVML_ERRORS: Family = Family::counter(
    "gpu_exporter_nvml_errors",
    None,
    "Failed NVML calls by GPU, call and error (NOT_SUPPORTED is not an error).",
);
pub const NVML_CALLS: Family = Family::counter("gpu_exporter_nvml_calls", None, "NVML calls made, by call.");
pub const NVML_CALL_SECONDS: Family = Family::counter(
    "gpu_exporter_nvml_call_seconds",
    Some("seconds"),
    "Time spent in NVML calls, by call, in seconds.",
);

// ---------------------------------------------------------------------------------------
// Pod attribution (rendered by `render/pods.rs`; see docs/attribution.md).
// ---------------------------------------------------------------------------------------
pub const POD_INFO: Family = Family::info(
    "gpu_pod",
    "A pod that owns or uses a GPU or MIG instance on this node, with its allow-listed labels. Always 1.",
);
pub const DEVICE_POD_INFO: Family = Family::info(
    "gpu_device_pod",
    "The container that alone holds a GPU or MIG instance, on the device's labels; join counters with it to name the holder. Always 1.",
);
pub const POD_UTILIZATION: Family = Family::gauge(
    "gpu_pod_utilization",
    None,
    "A container's GPU utilization, percent: the device's own figure when it holds the device alone, else the sum of its processes' SM utilization.",
);
pub const POD_MEMORY_USED: Family = Family::gauge(
    "gpu_pod_memory_used_bytes",
    Some("bytes"),
    "Device memory used by a container's processes (all of the device's used memory when it holds the device alone), in bytes.",
);
pub const POD_MEMORY_SCALED: Family = Family::gauge(
    "gpu_pod_memory_scaled",
    None,
    "1 if the GPU's pods' memory was scaled down this cycle to what the GPU reports used.",
);
pub const POD_RESOURCES_UP: Family =
    Family::gauge("gpu_exporter_pod_resources_up", None, "1 if the last kubelet pod-resources List succeeded.");
pub const POD_RESOURCES_LAST_SUCCESS: Family = Family::gauge(
    "gpu_exporter_pod_resources_last_success_timestamp_seconds",
    Some("seconds"),
    "Unix time of the last successful kubelet pod-resources List.",
);
pub const POD_RESOURCES_ERRORS: Family =
    Family::counter("gpu_exporter_pod_resources_errors", None, "Failed kubelet pod-resources refreshes, by reason.");
pub const POD_RESOURCES_UNKNOWN_DEVICES: Family = Family::gauge(
    "gpu_exporter_pod_resources_unknown_devices",
    None,
    "GPU allocations the kubelet reports that match no GPU or MIG instance of this node: device plugin ids NVML \
     does not report, and DRA devices no ResourceSlice maps to one.",
);
pub const POD_WATCH_UP: Family =
    Family::gauge("gpu_exporter_pod_watch_up", None, "1 while the Kubernetes API pod watch is listed and watching.");
pub const POD_WATCH_PODS: Family =
    Family::gauge("gpu_exporter_pod_watch_pods", None, "Pods on this node the pod watch knows.");
pub const SLICE_WATCH_UP: Family = Family::gauge(
    "gpu_exporter_resource_slice_watch_up",
    None,
    "1 while the Kubernetes API ResourceSlice watch is listed and watching.",
);
pub const SLICE_DEVICES: Family = Family::gauge(
    "gpu_exporter_resource_slice_devices",
    None,
    "GPU and MIG devices the node's ResourceSlices publish for the DRA GPU drivers.",
);
pub const UNATTRIBUTED_PROCESSES: Family = Family::gauge(
    "gpu_exporter_unattributed_processes",
    None,
    "GPU processes in the last cycle that could not be attributed to a pod, by reason.",
);

/// Every family, in the order they are rendered.
pub const ALL: &[Family] = &[
    GPU_INFO,
    GPU_UP,
    GPU_LOST,
    GPU_STALE,
    GPU_LAST_SUCCESS,
    UTILIZATION,
    MEMORY_UTILIZATION,
    MEMORY_USED,
    MEMORY_TOTAL,
    POWER_USAGE,
    TEMPERATURE,
    SM_CLOCK,
    MEM_CLOCK,
    MEMORY_RESERVED,
    MEMORY_CONTROLLER,
    POWER_LIMIT,
    ENERGY,
    TEMP_SLOWDOWN,
    TEMP_SHUTDOWN,
    MEMORY_TEMPERATURE,
    SM_CLOCK_MAX,
    MEM_CLOCK_MAX,
    ENCODER,
    DECODER,
    PCIE_TX,
    PCIE_RX,
    PCIE_REPLAYS,
    PSTATE,
    ECC_ENABLED,
    ECC_ERRORS,
    ECC_VOLATILE,
    RETIRED_PAGES,
    RETIRED_PENDING,
    REMAPPED_ROWS,
    REMAP_PENDING,
    REMAP_FAILED,
    CLOCK_EVENTS,
    RECOVERY_ACTION,
    NVLINK_UP,
    NVLINK_TX,
    NVLINK_RX,
    NVLINK_ERRORS,
    SM_ACTIVITY,
    TENSOR_ACTIVITY,
    DRAM_ACTIVITY,
    GRAPHICS_ACTIVITY,
    MIG_ENABLED,
    MIG_INSTANCE_INFO,
    MIG_INSTANCE_SLICES,
    MIG_SLICES_FREE,
    MIG_SLICES_TOTAL,
    MIG_PROFILE_AVAILABLE,
    PROCESSES,
    XID_ERRORS,
    XID_LAST_SEEN,
    BUILD_INFO,
    NVML_UP,
    NVML_ERROR,
    NVML_INIT_ATTEMPTS,
    GPUS,
    CYCLE_DURATION,
    CYCLES,
    LAST_CYCLE,
    NVML_ERRORS,
    NVML_CALLS,
    NVML_CALL_SECONDS,
    // Pod attribution.
    POD_INFO,
    DEVICE_POD_INFO,
    POD_UTILIZATION,
    POD_MEMORY_USED,
    POD_MEMORY_SCALED,
    POD_RESOURCES_UP,
    POD_RESOURCES_LAST_SUCCESS,
    POD_RESOURCES_ERRORS,
    POD_RESOURCES_UNKNOWN_DEVICES,
    POD_WATCH_UP,
    POD_WATCH_PODS,
    SLICE_WATCH_UP,
    SLICE_DEVICES,
    UNATTRIBUTED_PROCESSES,
];
