//! The result of one collection cycle: plain data, no NVML types.
//!
//! Everything downstream (rendering, the health loop, tests) reads a [`Snapshot`];
//! nothing downstream talks to NVML. A reading is `None` when the GPU cannot give it
//! (`NOT_SUPPORTED` on that model) or the call failed this cycle; failures are
//! counted in [`CollectorStats`].
//!
//! Plain data at the bottom of the crate: this module names no other module of it
//! (`tests/module_cycles.rs` keeps every module import one-directional), so the
//! collector, attribution, rendering and the health loop all build on it without
//! pulling each other in. [`attribution`] holds what the attribution stage attaches.

pub mod attribution;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use self::attribution::AttributionResult;

/// Everything known after a cycle.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases with every published snapshot; caches key on it.
    pub generation: u64,
    /// When the cycle that produced it ended.
    pub taken_at: Option<SystemTime>,
    pub nvml: NvmlStatus,
    pub gpus: Vec<GpuSnapshot>,
    pub stats: CollectorStats,
    /// Device owners and per-pod usage for these GPUs; `None` when attribution is not
    /// running (or before the first cycle).
    pub attribution: Option<AttributionResult>,
}

/// Whether NVML is usable, and if not why.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum NvmlStatus {
    /// No attempt yet (the exporter just started).
    #[default]
    Starting,
    Up(DriverInfo),
    Down {
        error: NvmlDownReason,
        message: String,
    },
}

/// Why NVML is down, in a few stable words for a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmlDownReason {
    /// The library could not be loaded (missing file, wrong architecture, missing symbol).
    LibraryNotLoaded,
    DriverNotLoaded,
    NoPermission,
    /// `nvmlInit` did not return within the call deadline.
    InitHung,
    Other,
}

impl NvmlDownReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LibraryNotLoaded => "library_not_loaded",
            Self::DriverNotLoaded => "driver_not_loaded",
            Self::NoPermission => "no_permission",
            Self::InitHung => "init_hung",
            Self::Other => "other",
        }
    }
}

/// Driver-wide facts read once after init.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverInfo {
    pub driver_version: String,
    /// `MAJOR.MINOR`, e.g. `12.4`.
    pub cuda_version: String,
}

/// One GPU in a snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSnapshot {
    pub index: u32,
    pub identity: GpuIdentity,
    pub state: GpuState,
    /// When the GPU last answered a full cycle.
    pub last_success: Option<SystemTime>,
    /// This cycle's readings; `None` unless `state` is `Ok`, so that a stale or lost
    /// GPU never shows an old number as if it were current.
    pub readings: Option<GpuReadings>,
    /// XID errors seen on this GPU since the exporter started, by code.
    pub xids: BTreeMap<u64, XidRecord>,
    /// MIG instances, when the GPU is in MIG mode and they could be read.
    pub mig: Option<MigState>,
    /// Compute processes NVML reports on the whole GPU (not in MIG mode) this cycle.
    pub processes: Vec<ProcessUsage>,
}

/// A MIG-mode GPU's layout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigState {
    pub instances: Vec<MigInstance>,
    /// Compute slices no GPU instance uses.
    pub free_compute_slices: u32,
    /// Compute slices of the GPU (7 on A100/H100/H200).
    pub total_compute_slices: u32,
    /// How many more instances of each profile would fit now, by profile name.
    pub available_by_profile: BTreeMap<String, u32>,
}

/// One MIG device (a GPU instance with one compute instance).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigInstance {
    /// `MIG-...`, the id the device plugin allocates.
    pub uuid: String,
    /// e.g. `3g.40gb`; `1c.3g.40gb` when the compute instance is smaller than its GPU instance.
    pub profile: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    /// Compute slices of the GPU instance.
    pub compute_slices: u32,
    /// The GPU instance profile's memory as the driver's profile table gives it
    /// (`nvmlGpuInstanceProfileInfo_v2_t.memorySizeMB`, MiB); `None` where the profile
    /// is not in the table. DCGM names the instance from it (`GPU_I_PROFILE`).
    pub gpu_instance_memory_mib: Option<u64>,
    pub memory: Option<MemoryReading>,
    /// GPM, percent of the instance's capacity over the last collection interval;
    /// `None` where the GPU has no GPM (before Hopper) or no interval has passed yet.
    pub sm_activity_percent: Option<f64>,
    pub tensor_activity_percent: Option<f64>,
    pub dram_activity_percent: Option<f64>,
    /// GPM graphics engine activity (`NVML_GPM_METRIC_GRAPHICS_UTIL`): percent of time
    /// any compute or graphics work was active on the instance, over the last interval.
    pub graphics_activity_percent: Option<f64>,
    pub processes: Vec<ProcessUsage>,
}

/// A compute process on a GPU or MIG instance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUsage {
    pub pid: u32,
    /// `None` when the driver withholds it (e.g. without privileges).
    pub used_memory_bytes: Option<u64>,
    /// Mean SM utilization of the process over the collection interval, percent of the
    /// GPU; `None` where NVML has no per-process samples (MIG devices).
    pub sm_utilization_percent: Option<f64>,
}

/// Static identity, read when the GPU is first seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuIdentity {
    pub uuid: String,
    /// NVML's product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    pub pci_bus_id: String,
    pub architecture: String,
    /// `MAJOR.MINOR`.
    pub compute_capability: String,
}

/// How the last cycle went for a GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum GpuState {
    /// Not read yet.
    #[default]
    Unknown,
    Ok,
    /// A call did not return within its deadline; the GPU's worker is still blocked in
    /// `call` and the GPU is skipped until it returns.
    Stale {
        call: &'static str,
        since: SystemTime,
    },
    /// NVML answered `GPU_IS_LOST`.
    Lost {
        since: SystemTime,
    },
    /// The handle could not be obtained for another reason.
    Failed {
        error: String,
    },
}

/// Count and last time of one XID code.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XidRecord {
    pub count: u64,
    pub last_seen: SystemTime,
}

/// One cycle's readings of a GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReadings {
    pub utilization_percent: Option<u32>,
    /// NVML's memory utilization: percent of time memory was read or written.
    pub memory_controller_percent: Option<u32>,
    pub memory: Option<MemoryReading>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub energy_joules: Option<f64>,
    pub temperature_celsius: Option<u32>,
    pub temperature_slowdown_celsius: Option<u32>,
    pub temperature_shutdown_celsius: Option<u32>,
    /// Device memory (HBM) temperature, `NVML_FI_DEV_MEMORY_TEMP`; `None` on boards
    /// without a memory sensor (GDDR boards answer `NOT_SUPPORTED`).
    pub memory_temperature_celsius: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    pub mem_clock_max_mhz: Option<u32>,
    pub encoder_percent: Option<u32>,
    pub decoder_percent: Option<u32>,
    pub pcie_tx_bytes_per_second: Option<u64>,
    pub pcie_rx_bytes_per_second: Option<u64>,
    pub pcie_replays: Option<u64>,
    pub performance_state: Option<u32>,
    pub ecc_enabled: Option<bool>,
    pub ecc: Option<EccCounts>,
    pub retired_pages: Option<RetiredPages>,
    pub remapped_rows: Option<RemappedRows>,
    pub clock_events: Option<ClockEvents>,
    pub recovery_action: Option<RecoveryAction>,
    pub mig_enabled: Option<bool>,
    /// GPM activity of the whole GPU over the last collection interval, percent
    /// (Hopper and newer, outside MIG mode).
    pub sm_activity_percent: Option<f64>,
    pub tensor_activity_percent: Option<f64>,
    pub dram_activity_percent: Option<f64>,
    /// GPM graphics engine activity of the whole GPU (`NVML_GPM_METRIC_GRAPHICS_UTIL`),
    /// percent of time any compute or graphics work was active, over the last interval.
    pub graphics_activity_percent: Option<f64>,
    /// The GPU's NVLink links, by link number; empty on a GPU without NVLink (PCIe
    /// boards) or where the driver does not report them.
    pub nvlinks: Vec<NvLinkReading>,
    /// TX plus RX NVLink data bytes per second over all links, between the previous
    /// cycle's counters and this one's (`None` on the first cycle and without NVLink):
    /// the reading behind `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`.
    pub nvlink_data_bytes_per_second: Option<f64>,
}

/// One NVLink link of a GPU in one cycle. Each part is `None` where the driver
/// answered `NOT_SUPPORTED` or the call failed this cycle: absent, never zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvLinkReading {
    /// Link number, 0 to the GPU's link count - 1.
    pub link: u32,
    /// `nvmlDeviceGetNvLinkState`: whether the link is up.
    pub active: Option<bool>,
    /// Data payload bytes sent since the driver loaded (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`,
    /// which NVML counts in KiB).
    pub tx_bytes: Option<u64>,
    /// Data payload bytes received (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`).
    pub rx_bytes: Option<u64>,
    /// `nvmlDeviceGetNvLinkErrorCounter`, counts since the driver loaded.
    pub errors: NvLinkErrors,
}

/// The NVLink data-link error counters of one link (`nvmlNvLinkErrorCounter_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvLinkErrors {
    /// `NVML_NVLINK_ERROR_DL_CRC_FLIT`: flow-control digits received with a bad CRC.
    pub crc_flit: Option<u64>,
    /// `NVML_NVLINK_ERROR_DL_CRC_DATA`: data received with a bad CRC.
    pub crc_data: Option<u64>,
    /// `NVML_NVLINK_ERROR_DL_REPLAY`: transmissions replayed.
    pub replay: Option<u64>,
    /// `NVML_NVLINK_ERROR_DL_RECOVERY`: link recoveries (retraining after errors).
    pub recovery: Option<u64>,
}

impl NvLinkErrors {
    /// The four counters with their `error_type` label value, in render order.
    pub fn by_type(&self) -> [(&'static str, Option<u64>); 4] {
        [("crc_flit", self.crc_flit), ("crc_data", self.crc_data), ("replay", self.replay), ("recovery", self.recovery)]
    }

    /// The sum of the counters the link reports; `None` when it reports none.
    pub fn total(&self) -> Option<u64> {
        self.by_type().iter().filter_map(|(_, v)| *v).reduce(u64::saturating_add)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryReading {
    pub total_bytes: u64,
    pub used_bytes: u64,
    /// Held by the driver; neither used nor free.
    pub reserved_bytes: u64,
}

impl MemoryReading {
    /// Used over total, in percent.
    pub fn utilization_percent(&self) -> f64 {
        if self.total_bytes == 0 { 0.0 } else { self.used_bytes as f64 * 100.0 / self.total_bytes as f64 }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EccCounts {
    pub corrected_volatile: u64,
    pub uncorrected_volatile: u64,
    pub corrected_aggregate: u64,
    pub uncorrected_aggregate: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetiredPages {
    pub single_bit_ecc: u64,
    pub double_bit_ecc: u64,
    pub pending: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    pub pending: bool,
    pub failed: bool,
}

/// Clock-event (throttle) reasons as NVML bit masks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockEvents {
    pub supported: u64,
    pub active: u64,
}

/// The clock-event reasons NVML defines, with the label value each gets.
pub const CLOCK_EVENT_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`: what the driver says the GPU needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    DrainP2p,
    DrainAndReset,
    Unknown(u32),
}

impl RecoveryAction {
    pub fn from_code(code: u32) -> Self {
        match code {
            0 => Self::None,
            1 => Self::GpuReset,
            2 => Self::NodeReboot,
            3 => Self::DrainP2p,
            4 => Self::DrainAndReset,
            other => Self::Unknown(other),
        }
    }

    pub fn code(self) -> u32 {
        match self {
            Self::None => 0,
            Self::GpuReset => 1,
            Self::NodeReboot => 2,
            Self::DrainP2p => 3,
            Self::DrainAndReset => 4,
            Self::Unknown(c) => c,
        }
    }
}

/// The collector's own health.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectorStats {
    pub cycles_total: u64,
    pub last_cycle_duration: Duration,
    pub init_attempts_total: u64,
    /// Failed NVML calls by (GPU index, call, error), since start.
    pub errors: BTreeMap<CallErrorKey, u64>,
    /// Time spent in each NVML call and how often it ran, since start.
    pub calls: BTreeMap<&'static str, CallTiming>,
}

/// Identifies a kind of failed call for the error counter.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CallErrorKey {
    /// `None` for calls that concern no single GPU (init, device count).
    pub gpu: Option<u32>,
    pub call: &'static str,
    pub error: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallTiming {
    pub count: u64,
    pub total: Duration,
}
