//! dcgm-exporter's default fields: each name, Prometheus type and help string as
//! `etc/default-counters.csv` of NVIDIA/dcgm-exporter writes it at tag `4.5.3-4.8.2`
//! (commit 691c92762eb551313c825f6efe4ceeee20982801), in the file's order, with the
//! snapshot reading behind it and the conversion to the file's unit. The older
//! releases' sets differ in two places, each marked on its field: `DCGM_FI_DEV_FB_RESERVED`
//! joined at 4.4.0, and the `DCGM_FI_PROF_*` ratios' help strings said "(in %)" to
//! 3.4.2 (the GPU operator's `etc/dcp-metrics-included.csv` at those tags; see
//! [`super::version::Shape`]).
//!
//! The file's `counter` rows are [`Family::bare_counter`]s: dcgm-exporter writes their
//! samples without `_total`. Its one `label` row, `DCGM_FI_DRIVER_VERSION`, is a label
//! (`super::label_set`), and `DCGM_FI_DEV_XID_ERRORS` is [`Reading::LastXid`].

use super::version::Shape;
use super::{GpuValue, InstanceValue, mib};
use crate::exposition::Family;
use crate::snapshot::{GpuReadings, MemoryReading};

/// Where a field's value comes from, and on which series. On a GPU read through its GPU
/// instances (dcgm-exporter's default, see [`super`]) each instance is a series of its
/// own; otherwise the GPU is the one series.
#[derive(Clone, Copy)]
pub enum Reading {
    /// A reading of the whole GPU: DCGM reads a GPU-level field asked of a GPU instance
    /// from the instance's GPU, so each instance's series carries the GPU's value.
    Device(GpuValue),
    /// A reading NVML has no value for while the GPU is cut into GPU instances
    /// (utilization, encoder and decoder, the profiling module's PCIe rates): written for
    /// a whole GPU only, never on an instance's series, as on every MIG page seen.
    WholeGpu(GpuValue),
    /// A reading NVML gives per GPU instance: an instance's own (`instance`), or the
    /// whole GPU's (`gpu`).
    PerInstance { gpu: GpuValue, instance: InstanceValue },
    /// The last XID code, with `err_code` and `err_msg` where the release writes them;
    /// on every series, stale GPUs' included.
    LastXid,
}

/// A field of the default set.
#[derive(Clone, Copy)]
pub struct Field {
    pub family: Family,
    pub reading: Reading,
    /// Whether the release's default set has the field.
    pub served: fn(&Shape) -> bool,
    /// The help string of releases whose `DCGM_FI_PROF_*` help names the unit
    /// ([`Shape::prof_help_in_percent`]).
    pub help_in_percent: Option<&'static str>,
}

impl Field {
    /// The family as `shape`'s release writes it.
    pub fn family(&self, shape: &Shape) -> Family {
        match self.help_in_percent {
            Some(help) if shape.prof_help_in_percent => Family { help, ..self.family },
            _ => self.family,
        }
    }
}

fn always(_: &Shape) -> bool {
    true
}

const fn gauge(name: &'static str, help: &'static str, reading: Reading) -> Field {
    Field { family: Family::gauge(name, None, help), reading, served: always, help_in_percent: None }
}

const fn counter(name: &'static str, help: &'static str, reading: Reading) -> Field {
    Field { family: Family::bare_counter(name, help), reading, served: always, help_in_percent: None }
}

/// A `DCGM_FI_PROF_*` ratio, whose help ended "(in %)." to 3.4.2.
const fn ratio_gauge(name: &'static str, help: &'static str, old_help: &'static str, reading: Reading) -> Field {
    Field { help_in_percent: Some(old_help), ..gauge(name, help, reading) }
}

fn free(m: MemoryReading) -> f64 {
    mib(m.total_bytes.saturating_sub(m.used_bytes).saturating_sub(m.reserved_bytes))
}

fn ratio(percent: Option<f64>) -> Option<f64> {
    percent.map(|p| p / 100.0)
}

/// Bytes per second to DCGM's NVLink bandwidth value: KiB per second over 1000, whole.
pub fn nvlink_mb_per_second(bytes_per_second: f64) -> f64 {
    (bytes_per_second / 1024.0 / 1000.0).trunc()
}

fn memory(r: &GpuReadings) -> Option<MemoryReading> {
    r.memory
}

/// The fields we serve, in the order of `default-counters.csv`.
pub const FIELDS: &[Field] = &[
    gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", Reading::Device(|r| r.sm_clock_mhz.map(f64::from))),
    gauge(
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        Reading::Device(|r| r.mem_clock_mhz.map(f64::from)),
    ),
    gauge(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "Memory temperature (in C).",
        Reading::Device(|r| r.memory_temperature_celsius.map(f64::from)),
    ),
    gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", Reading::Device(|r| r.temperature_celsius.map(f64::from))),
    gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", Reading::Device(|r| r.power_watts)),
    // NVML counts whole millijoules; the native family divided by 1000, so this rounds back.
    counter(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        Reading::Device(|r| r.energy_joules.map(|j| (j * 1000.0).round())),
    ),
    counter(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        Reading::Device(|r| r.pcie_replays.map(|v| v as f64)),
    ),
    gauge(
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization (in %).",
        Reading::WholeGpu(|r| r.utilization_percent.map(f64::from)),
    ),
    gauge(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        Reading::WholeGpu(|r| r.memory_controller_percent.map(f64::from)),
    ),
    gauge(
        "DCGM_FI_DEV_ENC_UTIL",
        "Encoder utilization (in %).",
        Reading::WholeGpu(|r| r.encoder_percent.map(f64::from)),
    ),
    gauge(
        "DCGM_FI_DEV_DEC_UTIL",
        "Decoder utilization (in %).",
        Reading::WholeGpu(|r| r.decoder_percent.map(f64::from)),
    ),
    gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", Reading::LastXid),
    gauge(
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        Reading::PerInstance { gpu: |r| memory(r).map(free), instance: |i| i.memory.map(free) },
    ),
    gauge(
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        Reading::PerInstance {
            gpu: |r| memory(r).map(|m| mib(m.used_bytes)),
            instance: |i| i.memory.map(|m| mib(m.used_bytes)),
        },
    ),
    Field {
        served: |shape| shape.fb_reserved,
        ..gauge(
            "DCGM_FI_DEV_FB_RESERVED",
            "Framebuffer memory reserved (in MiB).",
            Reading::PerInstance {
                gpu: |r| memory(r).map(|m| mib(m.reserved_bytes)),
                instance: |i| i.memory.map(|m| mib(m.reserved_bytes)),
            },
        )
    },
    // Typed counter by the file, but DCGM publishes a rate: the TX+RX KiB of all links
    // since its previous read, per second, divided by 1000 and truncated, in MB/s
    // (NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp`, `ReadAndCacheNvLinkBandwidth`;
    // unit `DCGM_FIELD_UNIT_BW_MBPS` in `dcgmlib/src/dcgm_fields.cpp`).
    counter(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "Total number of NVLink bandwidth counters for all lanes.",
        Reading::Device(|r| r.nvlink_data_bytes_per_second.map(nvlink_mb_per_second)),
    ),
    counter(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        Reading::Device(|r| r.remapped_rows.map(|rows| rows.uncorrectable as f64)),
    ),
    counter(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        Reading::Device(|r| r.remapped_rows.map(|rows| rows.correctable as f64)),
    ),
    gauge(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed",
        Reading::Device(|r| r.remapped_rows.map(|rows| if rows.failed { 1.0 } else { 0.0 })),
    ),
    ratio_gauge(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        "Ratio of time the graphics engine is active (in %).",
        Reading::PerInstance {
            gpu: |r| ratio(r.graphics_activity_percent),
            instance: |i| ratio(i.graphics_activity_percent),
        },
    ),
    ratio_gauge(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "Ratio of cycles the tensor (HMMA) pipe is active (in %).",
        Reading::PerInstance {
            gpu: |r| ratio(r.tensor_activity_percent),
            instance: |i| ratio(i.tensor_activity_percent),
        },
    ),
    ratio_gauge(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "Ratio of cycles the device memory interface is active sending or receiving data (in %).",
        Reading::PerInstance { gpu: |r| ratio(r.dram_activity_percent), instance: |i| ratio(i.dram_activity_percent) },
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        Reading::WholeGpu(|r| r.pcie_tx_bytes_per_second.map(|v| v as f64)),
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        Reading::WholeGpu(|r| r.pcie_rx_bytes_per_second.map(|v| v as f64)),
    ),
];
