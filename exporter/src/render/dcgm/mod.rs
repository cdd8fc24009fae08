//! The snapshot in dcgm-exporter's names, labels and units (`--metrics.naming
//! dcgm-exporter` or `both`), so that dashboards, alerts and HPA rules written against
//! dcgm-exporter keep working unchanged; the page of the release the user ran
//! (`--metrics.dcgm-exporter-version`, [`version`]).
//!
//! The contract copied, read at its source (NVIDIA/dcgm-exporter, tag `4.5.3-4.8.2`,
//! commit 691c92762eb551313c825f6efe4ceeee20982801, unless a release is named):
//! - `etc/default-counters.csv`: which fields, their names, Prometheus types and help
//!   strings, and so their units ([`fields`]).
//! - `internal/pkg/rendermetrics/render_metrics.go`: the label names and their order,
//!   `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, on GPU instances `GPU_I_PROFILE`
//!   and `GPU_I_ID`, then the host label, then the label fields
//!   (`DCGM_FI_DRIVER_VERSION`) and the attributes (`container`, `err_code`, `err_msg`,
//!   `namespace`, `pod`, `pod_uid`), each group in name order (Go ranges over a map).
//!   What older releases leave out or name otherwise is [`version::Shape`].
//! - `internal/pkg/collector/gpu_collector.go` (`toMetric`): `gpu` and `device`
//!   (`nvidia<index>`) are the GPU's index, `UUID` its `GPU-…` UUID, also on its GPU
//!   instances, whose `GPU_I_ID` is NVML's GPU instance id and `GPU_I_PROFILE` DCGM's
//!   name of the instance (`DCGM_FI_DEV_NAME` of the instance entity, read in
//!   `populateMigProfileNames` of `internal/pkg/deviceinfo/device_info.go`; see
//!   [`dcgm_profile_name`]); `DCGM_FI_DEV_XID_ERRORS` gets `err_code` (the code) and
//!   `err_msg` (from [`xid_text`]); a blank value is left out, never written as 0.
//! - `internal/pkg/devicemonitoring/device_monitoring.go` (`GetMonitoredEntities`,
//!   `monitorAllGPUInstances`) and `internal/pkg/collector/gpu_collector.go`
//!   (`GetMetrics`): by default (`--devices f`, flex) a GPU with GPU instances is
//!   monitored only as its instances, each an entity of its own whose every field is
//!   read (`EntityGetLatestValues` on the `FE_GPU_I` entity). DCGM answers a GPU-level
//!   field asked of an instance from the instance's GPU (NVIDIA/DCGM
//!   `dcgmlib/src/DcgmCacheManager.cpp`, where a watch of a `DCGM_FE_GPU`-level field on
//!   a `DCGM_FE_GPU_I` entity is moved to the parent GPU): so every device-level field
//!   (clocks, temperatures, power, energy, PCIe replays, XID, NVLink, remapped rows) is
//!   repeated on each instance's series, with that instance's `GPU_I_*` and pod labels,
//!   and no series of such a GPU lacks `GPU_I_*`. A GPU without instances is one series.
//! - `internal/pkg/transformation/kubernetes.go`: `pod`, `namespace`, `container` on
//!   every field of a device a container holds (and `pod_uid`, [`version::Shape`]).
//!
//! Values are the native families' readings from the same [`Snapshot`], converted:
//! bytes to MiB (exact division, so a value equals its native twin over 2^20), percent
//! to the 0-1 ratios of the `DCGM_FI_PROF_*` fields, joules to millijoules. No reading is
//! made for this naming, and a reading the snapshot lacks is absent here too. The one
//! value present without a reading is `DCGM_FI_DEV_XID_ERRORS`: 0 (`err_msg="No Error"`)
//! until the GPU's first XID, then the last code seen.
//!
//! Where we differ from dcgm-exporter, and why (docs/replacing-dcgm-exporter.md):
//! - A device shared by several containers (time-slicing, MPS) carries no pod labels:
//!   dcgm-exporter without `--kubernetes-virtual-gpus` names one of the sharers
//!   arbitrarily, and with it repeats the device's whole value once per sharer. The
//!   per-container split is our `gpu_pod_*` families.
//! - NVML's XID event does not say which GPU instance it hit, so each instance of a GPU
//!   carries the GPU's last XID.
//! - Counters are typed `unknown` in OpenMetrics, which dcgm-exporter does not serve
//!   (`crate::exposition::Kind::BareCounter`); sample names are the same.
//! - `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` is, as DCGM computes it, a rate between two
//!   reads (MB/s), typed counter only by the file; ours is between two collection
//!   cycles, so it is absent in the first one. Its native twin is the `rate()` of
//!   `gpu_nvlink_tx_bytes_total` plus `gpu_nvlink_rx_bytes_total` over the GPU's links.
//!
//! Not served, because we do not read it: `DCGM_FI_DEV_VGPU_LICENSE_STATUS` (vGPU
//! guests only).

pub mod fields;
pub mod version;
pub mod xid_text;

use super::RenderContext;
use super::labels::LabelSet;
use super::sink::{Exposition, Samples};
use crate::snapshot::attribution::ContainerRef;
use crate::snapshot::{GpuReadings, GpuSnapshot, MigInstance, NvmlStatus, Snapshot};
use fields::{FIELDS, Reading};
use version::Shape;

/// Every label name this naming writes, in any release; `--label` may not reuse them
/// while it is served.
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
    "pod_uid",
];

/// Writes the default counters of the release `ctx.dcgm_version` for `snapshot`, in
/// the order of its counters file.
pub fn write(out: &mut dyn Exposition, snapshot: &Snapshot, ctx: &RenderContext) {
    let shape = ctx.dcgm_version.shape();
    let driver = match &snapshot.nvml {
        NvmlStatus::Up(info) => info.driver_version.as_str(),
        _ => "",
    };
    let page = Page { snapshot, ctx, shape: &shape, driver };
    let gpus: Vec<GpuRows<'_>> = snapshot.gpus.iter().map(|gpu| GpuRows::new(gpu, &page)).collect();
    for field in FIELDS.iter().filter(|f| (f.served)(&shape)) {
        out.emit(&field.family(&shape), &mut |s| gpus.iter().for_each(|gpu| gpu.write(field.reading, &page, s)));
    }
}

/// What every series of one page is built from.
struct Page<'a> {
    snapshot: &'a Snapshot,
    ctx: &'a RenderContext,
    shape: &'a Shape,
    driver: &'a str,
}

impl<'a> Page<'a> {
    /// Who holds the device `uuid`, when one container does.
    fn owner(&self, uuid: &str) -> Holder<'a> {
        match &self.snapshot.attribution {
            None => Holder::Unknown,
            Some(a) => a.owners.get(uuid).map_or(Holder::Nobody, Holder::Container),
        }
    }
}

/// What the exporter knows of a device's holder.
#[derive(Clone, Copy)]
enum Holder<'a> {
    /// No pod attribution (not on Kubernetes, or the kubelet not read yet).
    Unknown,
    /// Attribution ran and no single container holds the device.
    Nobody,
    Container(&'a ContainerRef),
}

/// One series of a GPU: the GPU itself, or one of its GPU instances.
struct Entity<'a> {
    instance: Option<&'a MigInstance>,
    holder: Holder<'a>,
    labels: LabelSet,
}

/// One GPU's series: itself, or each of its GPU instances (dcgm-exporter's default
/// device mode, see the module doc).
struct GpuRows<'a> {
    gpu: &'a GpuSnapshot,
    entities: Vec<Entity<'a>>,
}

impl<'a> GpuRows<'a> {
    fn new(gpu: &'a GpuSnapshot, page: &Page<'a>) -> Self {
        let instances: Vec<&MigInstance> = gpu.mig.iter().flat_map(|m| &m.instances).collect();
        let entities = if instances.is_empty() {
            let holder = page.owner(&gpu.identity.uuid);
            vec![Entity { instance: None, holder, labels: label_set(gpu, None, page, holder, None) }]
        } else {
            instances
                .into_iter()
                .map(|i| {
                    let holder = page.owner(&i.uuid);
                    Entity { instance: Some(i), holder, labels: label_set(gpu, Some(i), page, holder, None) }
                })
                .collect()
        };
        GpuRows { gpu, entities }
    }

    fn write(&self, reading: Reading, page: &Page<'_>, s: &mut dyn Samples) {
        // A GPU that did not answer this cycle shows no readings, on any of its series.
        let readings = self.gpu.readings.as_ref();
        for entity in &self.entities {
            let value = match (reading, entity.instance) {
                (Reading::Device(value), _) | (Reading::WholeGpu(value), None) => readings.and_then(value),
                (Reading::WholeGpu(_), Some(_)) => None,
                (Reading::PerInstance { gpu, .. }, None) => readings.and_then(gpu),
                (Reading::PerInstance { instance, .. }, Some(i)) => readings.and_then(|_| instance(i)),
                // An event record, not a reading: written for stale and lost GPUs too.
                (Reading::LastXid, instance) => {
                    let code = last_xid(self.gpu);
                    let text = code.to_string();
                    let xid = page.shape.xid_error_labels.then(|| (text.as_str(), xid_text::message(code)));
                    s.sample(&label_set(self.gpu, instance, page, entity.holder, xid), &[], code as f64);
                    continue;
                }
            };
            if let Some(v) = value {
                s.sample(&entity.labels, &[], v);
            }
        }
    }
}

/// The code of the XID seen last on `gpu`, 0 before any.
pub fn last_xid(gpu: &GpuSnapshot) -> u64 {
    gpu.xids.iter().max_by_key(|(code, record)| (record.last_seen, **code)).map_or(0, |(code, _)| *code)
}

/// A series' labels in dcgm-exporter's order; `instance` for a GPU instance's, `xid`
/// the `err_code` and `err_msg` of `DCGM_FI_DEV_XID_ERRORS`.
fn label_set(
    gpu: &GpuSnapshot,
    instance: Option<&MigInstance>,
    page: &Page<'_>,
    holder: Holder<'_>,
    xid: Option<(&str, &str)>,
) -> LabelSet {
    let (ctx, shape) = (page.ctx, page.shape);
    let index = gpu.index.to_string();
    let mut labels = LabelSet::of(&[("gpu", &index), ("UUID", &gpu.identity.uuid)]);
    if shape.pci_bus_id {
        labels.push("pci_bus_id", gpu.identity.pci_bus_id.as_str());
    }
    labels.push("device", format!("nvidia{index}"));
    labels.push("modelName", gpu.identity.model.as_str());
    if let Some(instance) = instance {
        labels.push("GPU_I_PROFILE", dcgm_profile_name(instance));
        labels.push("GPU_I_ID", instance.gpu_instance_id.to_string());
    }
    // dcgm-exporter leaves out a blank host name and a blank label field.
    if !ctx.node.is_empty() {
        labels.push(shape.host_label, ctx.node.as_str());
    }
    if !page.driver.is_empty() {
        labels.push("DCGM_FI_DRIVER_VERSION", page.driver);
    }
    // The attributes, in name order: container, err_code, err_msg, namespace, pod, pod_uid.
    let pod = match holder {
        Holder::Container(owner) => Some((owner.container.as_str(), owner.namespace.as_str(), owner.pod.as_str())),
        Holder::Nobody if shape.idle_pod_labels => Some(("", "", "")),
        Holder::Nobody | Holder::Unknown => None,
    };
    if let Some((container, _, _)) = pod {
        labels.push("container", container);
    }
    if let Some((code, message)) = xid {
        labels.push("err_code", code);
        labels.push("err_msg", message);
    }
    if let Some((_, namespace, pod_name)) = pod {
        labels.push("namespace", namespace);
        labels.push("pod", pod_name);
    }
    // The UID is looked up only when dcgm-exporter is told to, and it is not by default.
    if shape.pod_uid && matches!(holder, Holder::Container(_)) {
        labels.push("pod_uid", "");
    }
    for (name, value) in &ctx.extra_labels {
        labels.push(name.clone(), value.as_str());
    }
    labels
}

/// DCGM's name of a GPU instance, which `GPU_I_PROFILE` carries: the GPU instance
/// profile's slice count and its memory in GiB rounded up, `7g.79gb` for the profile
/// `nvidia-smi` calls `7g.80gb` (80,384 MiB on an 80 GB A100). NVIDIA/DCGM
/// `dcgmlib/src/DcgmCacheManager.cpp`, `GpuInstanceProfiles::Iterator::operator++`:
/// `memSizeGB = (memorySizeMB + 1024 - 1) / 1024` and the name
/// `sliceCount + "g." + memSizeGB + "gb"`, from `nvmlDeviceGetGpuInstanceProfileInfo`
/// (unchanged from DCGM 2.4.7 to 4.6.0). So the `+me` variants have no suffix, and a smaller compute instance does
/// not show. Where the driver's profile table gave no memory size, the GPU instance's
/// profile as the driver names it is the nearest we have.
pub fn dcgm_profile_name(instance: &MigInstance) -> String {
    match instance.gpu_instance_memory_mib {
        Some(mib) if instance.compute_slices > 0 => {
            format!("{}g.{}gb", instance.compute_slices, mib.div_ceil(1024))
        }
        _ => gpu_instance_profile(&instance.profile).to_string(),
    }
}

/// The GPU instance's profile (`3g.40gb`) from a MIG device's (`1c.3g.40gb` when its
/// compute instance is smaller).
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
