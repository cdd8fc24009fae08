//! dcgm-exporter 4.8's default fields: each name, Prometheus type and help string as
//! `etc/default-counters.csv` of NVIDIA/dcgm-exporter writes it at tag `4.5.3-4.8.2`
//! (commit 691c92762eb551313c825f6efe4ceeee20982801), in the file's order, with the
//! snapshot reading behind it and the conversion to the file's unit.
//!
//! The file's `counter` rows are [`Family::bare_counter`]s: dcgm-exporter writes their
//! samples without `_total`. Its one `label` row, `DCGM_FI_DRIVER_VERSION`, is a label
//! (`super::label_set`), and `DCGM_FI_DEV_XID_ERRORS` is [`Reading::LastXid`].

use super::{GpuValue, InstanceValue, mib};
use crate::exposition::Family;
use crate::snapshot::{GpuReadings, MemoryReading};

/// Where a field's value comes from.
#[derive(Clone, Copy)]
pub enum Reading {
    /// A reading of the whole GPU, written once per GPU.
    Device(GpuValue),
    /// A reading NVML gives per GPU instance: on a GPU with GPU instances written per
    /// instance (`instance`), else once per GPU (`gpu`).
    PerInstance { gpu: GpuValue, instance: InstanceValue },
    /// The last XID code, with `err_code` and `err_msg`.
    LastXid,
}

/// A field of the default set.
#[derive(Clone, Copy)]
pub struct Field {
    pub family: Family,
    pub reading: Reading,
}

const fn gauge(name: &'static str, help: &'static str, reading: Reading) -> Field {
    Field { family: Family::gauge(name, None, help), reading }
}

const fn counter(name: &'static str, help: &'static str, reading: Reading) -> Field {
    Field { family: Family::bare_counter(name, help), reading }
}

fn free(m: MemoryReading) -> f64 {
    mib(m.total_bytes.saturating_sub(m.used_bytes).saturating_sub(m.reserved_bytes))
}

fn ratio(percent: Option<f64>) -> Option<f64> {
    percent.map(|p| p / 100.0)
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
    gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", Reading::Device(|r| r.utilization_percent.map(f64::from))),
    gauge(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        Reading::Device(|r| r.memory_controller_percent.map(f64::from)),
    ),
    gauge("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", Reading::Device(|r| r.encoder_percent.map(f64::from))),
    gauge("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", Reading::Device(|r| r.decoder_percent.map(f64::from))),
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
    gauge(
        "DCGM_FI_DEV_FB_RESERVED",
        "Framebuffer memory reserved (in MiB).",
        Reading::PerInstance {
            gpu: |r| memory(r).map(|m| mib(m.reserved_bytes)),
            instance: |i| i.memory.map(|m| mib(m.reserved_bytes)),
        },
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
    gauge(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        Reading::PerInstance {
            gpu: |r| ratio(r.tensor_activity_percent),
            instance: |i| ratio(i.tensor_activity_percent),
        },
    ),
    gauge(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        Reading::PerInstance { gpu: |r| ratio(r.dram_activity_percent), instance: |i| ratio(i.dram_activity_percent) },
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        Reading::Device(|r| r.pcie_tx_bytes_per_second.map(|v| v as f64)),
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        Reading::Device(|r| r.pcie_rx_bytes_per_second.map(|v| v as f64)),
    ),
];
