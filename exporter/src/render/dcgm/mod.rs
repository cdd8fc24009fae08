//! The snapshot in dcgm-exporter's names, labels and units (`--metrics.naming
//! dcgm-exporter` or `both`), so that dashboards, alerts and HPA rules written against
//! dcgm-exporter keep working unchanged.
//!
//! The contract copied, read at its source (NVIDIA/dcgm-exporter, tag `4.5.3-4.8.2`,
//! commit 691c92762eb551313c825f6efe4ceeee20982801):
//! - `etc/default-counters.csv`: which fields, their names, Prometheus types and help
//!   strings, and so their units ([`fields`]). The file is the same at
//!   d5e5f510a1b6b393f39a43293ccd9dc985defc79, the commit after the tag.
//! - `internal/pkg/rendermetrics/render_metrics.go`: the label names and their order,
//!   `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, on GPU instances `GPU_I_PROFILE`
//!   and `GPU_I_ID`, then the host label, then the label fields
//!   (`DCGM_FI_DRIVER_VERSION`) and the attributes (`container`, `err_code`, `err_msg`,
//!   `namespace`, `pod`), each group in name order. The host label is `Hostname` at
//!   4.8.2 and `hostname` from commit d5e5f51 ("Rename Hostname label to hostname
//!   (#655)") on; [`HostLabel`] picks either.
//! - `internal/pkg/collector/gpu_collector.go` (`toMetric`): `gpu` and `device`
//!   (`nvidia<index>`) are the GPU's index, `UUID` its `GPU-…` UUID, also on its GPU
//!   instances, whose `GPU_I_ID` is NVML's GPU instance id; `DCGM_FI_DEV_XID_ERRORS`
//!   gets `err_code` (the code) and `err_msg` (from [`xid_text`]); a blank value is
//!   left out, never written as 0.
//! - `internal/pkg/devicemonitoring/device_monitoring.go`: by default (`--devices f`)
//!   a GPU with GPU instances is read only through them.
//! - `internal/pkg/transformation/kubernetes.go`: `pod`, `namespace`, `container` on
//!   every field of a device a container holds.
//!
//! Values are the native families' readings from the same [`Snapshot`], converted:
//! bytes to MiB (exact division, so a value equals its native twin over 2^20), percent
//! to the 0-1 ratios of the `DCGM_FI_PROF_*` fields, joules to millijoules. No reading is
//! made for this naming, and a reading the snapshot lacks is absent here too. The one
//! value present without a reading is `DCGM_FI_DEV_XID_ERRORS`: 0 (`err_msg="No Error"`)
//! until the GPU's first XID, then the last code seen.
//!
//! Where we differ from dcgm-exporter, and why (docs/replacing-dcgm-exporter.md):
//! - On a GPU with GPU instances, the fields whose readings NVML gives per instance
//!   (framebuffer and the GPM activities) are written per instance, as dcgm-exporter
//!   does; the device-wide ones (clocks, temperature, power, energy, PCIe, utilization,
//!   remapped rows, XID) once on the GPU, without `GPU_I_*` labels, rather than copied
//!   onto each instance, so that `sum()` over a node counts a GPU's power once.
//! - A device shared by several containers (time-slicing, MPS) carries no pod labels:
//!   dcgm-exporter without `--kubernetes-virtual-gpus` names one of the sharers
//!   arbitrarily, and with it repeats the device's whole value once per sharer. The
//!   per-container split is our `gpu_pod_*` families.
//! - Counters are typed `unknown` in OpenMetrics, which dcgm-exporter does not serve
//!   (`crate::exposition::Kind::BareCounter`); sample names are the same.
//!
//! - `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` is, as DCGM computes it, a rate between two
//!   reads (MB/s), typed counter only by the file; ours is between two collection
//!   cycles, so it is absent in the first one. Its native twin is the `rate()` of
//!   `gpu_nvlink_tx_bytes_total` plus `gpu_nvlink_rx_bytes_total` over the GPU's links.
//!
//! Not served, because we do not read it: `DCGM_FI_DEV_VGPU_LICENSE_STATUS` (vGPU
//! guests only).

pub mod fields;
pub mod xid_text;

use super::RenderContext;
use super::labels::LabelSet;
use super::sink::{Exposition, Samples};
use crate::snapshot::attribution::ContainerRef;
use crate::snapshot::{GpuReadings, GpuSnapshot, MigInstance, NvmlStatus, Snapshot};
use fields::{FIELDS, Reading};

/// The name of the host label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HostLabel {
    /// `hostname`, as dcgm-exporter writes it after 4.8.2.
    #[default]
    #[value(name = "hostname")]
    Lowercase,
    /// `Hostname`, as dcgm-exporter 4.8.2 and before write it.
    #[value(name = "Hostname")]
    Capitalized,
}

impl HostLabel {
    pub fn name(self) -> &'static str {
        match self {
            HostLabel::Lowercase => "hostname",
            HostLabel::Capitalized => "Hostname",
        }
    }
}

/// Every label name this naming writes; `--label` may not reuse them while it is served.
pub const LABELS: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "hostname",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "container",
    "err_code",
    "err_msg",
    "namespace",
    "pod",
];

/// Writes the default counters of dcgm-exporter 4.8 for `snapshot`, in the order of
/// its `default-counters.csv`.
pub fn write(out: &mut dyn Exposition, snapshot: &Snapshot, ctx: &RenderContext) {
    let driver = match &snapshot.nvml {
        NvmlStatus::Up(info) => info.driver_version.as_str(),
        _ => "",
    };
    let gpus: Vec<GpuRows<'_>> = snapshot.gpus.iter().map(|gpu| GpuRows::new(gpu, snapshot, ctx, driver)).collect();
    for field in FIELDS {
        out.emit(&field.family, &mut |s| gpus.iter().for_each(|gpu| gpu.write(field.reading, s)));
    }
}

/// One GPU's label sets: its own, and its GPU instances' when it is read through them.
struct GpuRows<'a> {
    gpu: &'a GpuSnapshot,
    labels: LabelSet,
    /// Empty unless the GPU has GPU instances and answered this cycle.
    instances: Vec<(LabelSet, &'a MigInstance)>,
    /// Whether the GPU has GPU instances (dcgm-exporter then reads it through them).
    has_instances: bool,
}

impl<'a> GpuRows<'a> {
    fn new(gpu: &'a GpuSnapshot, snapshot: &Snapshot, ctx: &RenderContext, driver: &str) -> Self {
        let owner = |uuid: &str| snapshot.attribution.as_ref().and_then(|a| a.owners.get(uuid));
        let all: Vec<&MigInstance> = gpu.mig.iter().flat_map(|m| &m.instances).collect();
        let instances = match gpu.readings {
            Some(_) => all.iter().map(|i| (label_set(gpu, Some(i), ctx, driver, owner(&i.uuid)), *i)).collect(),
            None => Vec::new(),
        };
        GpuRows {
            gpu,
            labels: label_set(gpu, None, ctx, driver, owner(&gpu.identity.uuid)),
            instances,
            has_instances: !all.is_empty(),
        }
    }

    fn write(&self, reading: Reading, s: &mut dyn Samples) {
        match reading {
            Reading::Device(value) => {
                if let Some(v) = self.gpu.readings.as_ref().and_then(value) {
                    s.sample(&self.labels, &[], v);
                }
            }
            Reading::PerInstance { gpu, instance } => {
                if self.has_instances {
                    for (labels, i) in &self.instances {
                        if let Some(v) = instance(i) {
                            s.sample(labels, &[], v);
                        }
                    }
                } else if let Some(v) = self.gpu.readings.as_ref().and_then(gpu) {
                    s.sample(&self.labels, &[], v);
                }
            }
            // An event record, not a reading: written for stale and lost GPUs too.
            Reading::LastXid => {
                let code = last_xid(self.gpu);
                let text = code.to_string();
                s.sample(&self.labels, &[("err_code", &text), ("err_msg", xid_text::message(code))], code as f64);
            }
        }
    }
}

/// The code of the XID seen last on `gpu`, 0 before any.
pub fn last_xid(gpu: &GpuSnapshot) -> u64 {
    gpu.xids.iter().max_by_key(|(code, record)| (record.last_seen, **code)).map_or(0, |(code, _)| *code)
}

/// A device's labels in dcgm-exporter's order; `instance` for a GPU instance's.
fn label_set(
    gpu: &GpuSnapshot,
    instance: Option<&MigInstance>,
    ctx: &RenderContext,
    driver: &str,
    owner: Option<&ContainerRef>,
) -> LabelSet {
    let index = gpu.index.to_string();
    let mut labels = LabelSet::of(&[
        ("gpu", &index),
        ("UUID", &gpu.identity.uuid),
        ("pci_bus_id", &gpu.identity.pci_bus_id),
        ("device", &format!("nvidia{index}")),
        ("modelName", &gpu.identity.model),
    ]);
    if let Some(instance) = instance {
        labels.push("GPU_I_PROFILE", gpu_instance_profile(&instance.profile));
        labels.push("GPU_I_ID", instance.gpu_instance_id.to_string());
    }
    // dcgm-exporter leaves out a blank host name and a blank label field.
    if !ctx.node.is_empty() {
        labels.push(ctx.dcgm_host_label.name(), ctx.node.as_str());
    }
    if !driver.is_empty() {
        labels.push("DCGM_FI_DRIVER_VERSION", driver);
    }
    if let Some(owner) = owner {
        labels.push("container", owner.container.as_str());
        labels.push("namespace", owner.namespace.as_str());
        labels.push("pod", owner.pod.as_str());
    }
    for (name, value) in &ctx.extra_labels {
        labels.push(name.clone(), value.as_str());
    }
    labels
}

/// The GPU instance's profile (`3g.40gb`) from a MIG device's (`1c.3g.40gb` when its
/// compute instance is smaller): `GPU_I_PROFILE` names the GPU instance.
fn gpu_instance_profile(profile: &str) -> &str {
    match profile.split_once('.') {
        Some((head, rest))
            if head.len() > 1 && head.ends_with('c') && head[..head.len() - 1].bytes().all(|b| b.is_ascii_digit()) =>
        {
            rest
        }
        _ => profile,
    }
}

/// Bytes to MiB, dcgm-exporter's framebuffer unit.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The readings of the whole GPU that [`fields`] converts.
pub type GpuValue = fn(&GpuReadings) -> Option<f64>;
/// The readings of one GPU instance that [`fields`] converts.
pub type InstanceValue = fn(&MigInstance) -> Option<f64>;

#[cfg(test)]
mod tests;
