//! The loop's input: one collection cycle as plain data, the readings the signals
//! are computed from. The exporter fills it from its `Snapshot`; nothing here knows
//! NVML, and a test builds one by hand.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One collection cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub generation: u64,
    pub nvml: Nvml,
    pub gpus: Vec<GpuReadings>,
}

/// What can be said about NVML this cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Nvml {
    /// Up; `read` is false until a first cycle has read the GPUs.
    Up { driver_version: String, read: bool },
    /// Not initialised yet.
    #[default]
    Starting,
    /// Down in a way that says the GPUs or the driver are broken (init hung, driver
    /// not loaded): the description says which.
    Failed(String),
    /// Down for a reason that is not the GPUs' fault (a missing library, ...):
    /// nothing can be said about them.
    Unusable,
}

/// Whether a GPU answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GpuState {
    Ok,
    /// Not read yet.
    #[default]
    Unknown,
    /// Fallen off the bus.
    Lost,
    /// Its handle could not be had.
    Failed {
        error: String,
    },
    /// `call` is past its deadline.
    Stale {
        call: String,
    },
}

/// What the driver asks for to recover the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    Reset,
    Reboot,
}

/// Volatile ECC error counts (since the last reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ecc {
    pub corrected: u64,
    pub uncorrected: u64,
}

/// Row remapping state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemappedRows {
    pub failed: bool,
    pub pending: bool,
}

/// Page retirement state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetiredPages {
    /// Single- plus double-bit ECC retirements.
    pub retired: u64,
    pub pending: bool,
}

/// One GPU's readings; a reading the GPU does not support, or that failed, is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuReadings {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub state: GpuState,
    pub ecc: Option<Ecc>,
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages: Option<RetiredPages>,
    pub recovery: Option<Recovery>,
    pub temperature_celsius: Option<u32>,
    pub temperature_slowdown_celsius: Option<u32>,
    /// NVML clock-event reasons active now (bit set).
    pub clock_events_active: Option<u64>,
    /// XID counts since the exporter started, by code.
    pub xid_counts: BTreeMap<u64, u64>,
    /// The GPU's NVLink links; empty on a GPU without NVLink.
    pub nvlinks: Vec<NvLink>,
    /// The DRA devices the node's ResourceSlices publish for this GPU: the whole GPU and
    /// each of its MIG instances. Empty where a device plugin hands the GPU out (or no
    /// slice names it): then the GPU cannot be kept from the scheduler on its own.
    pub dra_devices: Vec<DraDevice>,
}

/// One NVLink link of a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvLink {
    pub link: u32,
    /// Whether NVML reports the link active; `None` when it could not be read.
    pub active: Option<bool>,
    /// Data-link errors (CRC flit + CRC data + replay + recovery) since the driver
    /// loaded or the GPU was reset; `None` where the driver reports none of them.
    pub errors: Option<u64>,
}

/// A device as DRA names it: the driver, the pool within the driver and the device
/// within the pool (a DeviceTaintRule selects on these three).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DraDevice {
    pub driver: String,
    pub pool: String,
    pub device: String,
}
