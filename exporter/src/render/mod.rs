//! Snapshot to exposition text: a pure function, so the scrape path never touches NVML.
//!
//! Labels: every per-GPU series has `node`, `gpu` (index), `uuid`, `model`, then the
//! constant labels from `--label`; the exporter's own series have `node` and the
//! constant labels. A GPU that is stale or lost keeps its state series but shows no
//! readings: a number that is not current must not reach dashboards or the HPA.
//!
//! Series identity: a device held by one container adds `namespace`, `pod` and
//! `container` to its gauges (the HPA reads them there), but never to a counter or to
//! the XID last-seen time. Those record the device's history: a label that changed with
//! the holder would make Prometheus see a new series starting at the full value, so
//! `increase()` and `rate()` would jump and alerts fire again. Who holds a device is the
//! join with `gpu_device_pod_info` (rendered by [`pods`]); see docs/metrics.md.
//!
//! Encoding: the families, the exporter's own and the [`Section`]s' (the health loop's),
//! are described once, through [`sink::Exposition`], and [`Encoding`] picks who writes
//! them: prometheus-client (`client`) or our own leaf encoder ([`crate::exposition`]).
//! docs/design.md records which serves and why.
//!
//! Naming: [`Naming`] picks our names, dcgm-exporter's ([`dcgm`]) or both. Either way the
//! exporter's own `gpu_exporter_*` families and the sections (`gpu_health_*`) are
//! written; dcgm-exporter's families come last, after the sections, and always through
//! our encoder, because prometheus-client cannot write a counter without `_total`
//! (docs/design.md).

mod client;
pub mod dcgm;
pub mod families;
pub mod labels;
mod mig;
mod nvlink;
mod pods;
pub mod sink;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use families as f;
use labels::LabelSet;
use sink::Exposition;

use crate::exposition::{Encoder, Family, Format, Kind};
use crate::snapshot::{CLOCK_EVENT_REASONS, GpuReadings, GpuSnapshot, GpuState, NvmlStatus, Snapshot};

/// What rendering needs besides the snapshot.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    pub node: String,
    /// Constant labels added to every series, in order.
    pub extra_labels: Vec<(String, String)>,
    pub version: String,
    pub revision: String,
    /// Whose metric names to serve.
    pub naming: Naming,
    /// The dcgm-exporter release whose page dcgm-exporter's naming copies.
    pub dcgm_version: dcgm::version::Version,
}

/// Whose metric names the GPU families are served under (`--metrics.naming`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Naming {
    /// Ours (docs/metrics.md).
    #[default]
    Native,
    /// dcgm-exporter's default counters instead of ours, as the release in
    /// [`RenderContext::dcgm_version`] writes them (docs/replacing-dcgm-exporter.md).
    #[value(name = "dcgm-exporter")]
    DcgmExporter,
    /// Both, for the weeks of a migration.
    Both,
}

impl Naming {
    /// Whether our GPU and pod families are served.
    pub fn native(self) -> bool {
        matches!(self, Naming::Native | Naming::Both)
    }

    /// Whether dcgm-exporter's families are served.
    pub fn dcgm(self) -> bool {
        matches!(self, Naming::DcgmExporter | Naming::Both)
    }
}

/// Families that another part of the exporter renders after the exporter's own (the
/// health loop's, `crate::health::metrics`). Rendered on every scrape that misses the
/// cache; the cache key includes [`Section::generation`]. A section writes through
/// [`Exposition`] like the exporter's own families, so the same encoder writes both.
pub trait Section: Send + Sync + std::fmt::Debug {
    /// Changes whenever the section's output would.
    fn generation(&self) -> u64;
    fn render(&self, out: &mut dyn Exposition, ctx: &RenderContext);
}

/// The sections rendered after the exporter's own families.
pub type Sections = [Arc<dyn Section>];

/// Who writes the exporter's own families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// Our leaf encoder, [`crate::exposition::Encoder`].
    Ours,
    /// prometheus-client, through a per-render `Collector`. The default; the figures
    /// behind that (render time, code size) are in docs/design.md.
    #[default]
    PrometheusClient,
}

/// Renders the whole exposition of a snapshot that is not shared yet (tests, tools).
pub fn render(snapshot: &Snapshot, ctx: &RenderContext, format: Format) -> String {
    render_with(&Arc::new(snapshot.clone()), ctx, format, &[])
}

/// Renders the whole exposition followed by `sections`.
pub fn render_with(snapshot: &Arc<Snapshot>, ctx: &RenderContext, format: Format, sections: &Sections) -> String {
    render_encoded(snapshot, ctx, format, sections, Encoding::default())
}

/// Renders the whole exposition followed by `sections`, every family written by
/// `encoding`. The snapshot is shared, not copied: prometheus-client's registry keeps
/// only `'static` collectors, and an `Arc` is that without a copy of the readings.
pub fn render_encoded(
    snapshot: &Arc<Snapshot>,
    ctx: &RenderContext,
    format: Format,
    sections: &Sections,
    encoding: Encoding,
) -> String {
    let mut out = String::with_capacity(16 * 1024 + snapshot.gpus.len() * 8 * 1024);
    match encoding {
        Encoding::PrometheusClient => {
            // Writing into a String cannot fail; an error here would be a bug in a family.
            if let Err(error) = client::encode(snapshot, ctx, sections, format, &mut out) {
                tracing::error!(%error, "prometheus-client failed to encode the exposition");
            }
            let mut enc = Encoder::new(&mut out, format);
            write_dcgm(&mut enc, snapshot, ctx);
            enc.finish();
        }
        Encoding::Ours => {
            let mut enc = Encoder::new(&mut out, format);
            write_all(&mut enc, snapshot, ctx, sections);
            write_dcgm(&mut enc, snapshot, ctx);
            enc.finish();
        }
    }
    out
}

/// dcgm-exporter's families, when the naming asks for them; always our encoder's.
fn write_dcgm(enc: &mut Encoder<'_>, snapshot: &Snapshot, ctx: &RenderContext) {
    if ctx.naming.dcgm() {
        dcgm::write(enc, snapshot, ctx);
    }
}

/// Writes the exporter's own families, then each section's.
fn write_all(out: &mut dyn Exposition, snapshot: &Snapshot, ctx: &RenderContext, sections: &Sections) {
    write_families(out, snapshot, ctx);
    for section in sections {
        section.render(out, ctx);
    }
}

/// Writes the exporter's own families, in the documented order: the GPU and pod
/// families only in our naming, the `gpu_exporter_*` ones in every naming.
fn write_families(enc: &mut dyn Exposition, snapshot: &Snapshot, ctx: &RenderContext) {
    let native = ctx.naming.native();
    // Device labels only: counters and event records use these.
    let base_labels: Vec<LabelSet> =
        if native { snapshot.gpus.iter().map(|g| gpu_label_set(g, ctx)).collect() } else { Vec::new() };
    let own = own_label_set(ctx);
    if native {
        // Pod attribution: the gauges of a device held by one container carry its owner's labels.
        let gpu_labels = pods::with_owner_labels(snapshot, &base_labels);
        let instance_labels = mig::instance_labels(snapshot, &base_labels);
        render_gpu_state(enc, snapshot, &gpu_labels);
        render_readings(enc, snapshot, GpuLabels { held: &gpu_labels, device: &base_labels }, &instance_labels);
        nvlink::render(enc, snapshot, &gpu_labels, &base_labels);
        mig::render_mig(enc, snapshot, &gpu_labels, &instance_labels);
        render_xids(enc, snapshot, &base_labels);
    }
    render_self(enc, snapshot, ctx, &own);
    pods::render_pods(enc, snapshot, native.then_some(base_labels.as_slice()), &own);
}

fn gpu_label_set(gpu: &GpuSnapshot, ctx: &RenderContext) -> LabelSet {
    device_label_set(ctx, gpu.index, &gpu.identity.uuid, &gpu.identity.model)
}

/// A GPU's label set: `node`, `gpu`, `uuid`, `model`, then the constant labels.
pub fn device_label_set(ctx: &RenderContext, index: u32, uuid: &str, model: &str) -> LabelSet {
    let mut labels =
        LabelSet::of(&[("node", &ctx.node), ("gpu", &index.to_string()), ("uuid", uuid), ("model", model)]);
    for (name, value) in &ctx.extra_labels {
        labels.push(name.clone(), value.as_str());
    }
    labels
}

/// The exporter's own label set: `node`, then the constant labels.
pub fn own_label_set(ctx: &RenderContext) -> LabelSet {
    let mut labels = LabelSet::of(&[("node", &ctx.node)]);
    for (name, value) in &ctx.extra_labels {
        labels.push(name.clone(), value.as_str());
    }
    labels
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

fn render_gpu_state(enc: &mut dyn Exposition, snapshot: &Snapshot, labels: &[LabelSet]) {
    let (driver, cuda) = match &snapshot.nvml {
        NvmlStatus::Up(info) => (info.driver_version.as_str(), info.cuda_version.as_str()),
        _ => ("", ""),
    };
    let gpus = || snapshot.gpus.iter().zip(labels);
    enc.emit(&f::GPU_INFO, &mut |s| {
        for (gpu, l) in gpus() {
            let id = &gpu.identity;
            let extra = [
                ("pci_bus_id", id.pci_bus_id.as_str()),
                ("architecture", id.architecture.as_str()),
                ("compute_capability", id.compute_capability.as_str()),
                ("driver_version", driver),
                ("cuda_version", cuda),
            ];
            s.sample(l, &extra, 1.0);
        }
    });
    enc.emit(&f::GPU_UP, &mut |s| gpus().for_each(|(gpu, l)| s.sample(l, &[], flag(gpu.state == GpuState::Ok))));
    enc.emit(&f::GPU_LOST, &mut |s| {
        gpus().for_each(|(gpu, l)| s.sample(l, &[], flag(matches!(gpu.state, GpuState::Lost { .. }))));
    });
    enc.emit(&f::GPU_STALE, &mut |s| {
        gpus().for_each(|(gpu, l)| s.sample(l, &[], flag(matches!(gpu.state, GpuState::Stale { .. }))));
    });
    enc.emit(&f::GPU_LAST_SUCCESS, &mut |s| {
        for (gpu, l) in gpus() {
            if let Some(t) = gpu.last_success {
                s.sample(l, &[], unix_seconds(t));
            }
        }
    });
}

/// The label sets of every GPU, in snapshot order, in the two forms a family can need.
#[derive(Clone, Copy)]
struct GpuLabels<'a> {
    /// With the owner's `namespace`, `pod`, `container` where one container holds the GPU:
    /// for gauges.
    held: &'a [LabelSet],
    /// The device's labels alone: for counters, whose identity must not follow the holder.
    device: &'a [LabelSet],
}

impl<'a> GpuLabels<'a> {
    /// The label sets `family` is rendered with.
    fn of(self, family: &Family) -> &'a [LabelSet] {
        match family.kind {
            Kind::Counter | Kind::BareCounter => self.device,
            Kind::Gauge | Kind::Info => self.held,
        }
    }
}

type Reading = fn(&GpuReadings) -> Option<f64>;

/// Families with one sample per GPU and no label of their own, in render order.
const SINGLE_VALUE: &[(Family, Reading)] = &[
    (f::UTILIZATION, |r| r.utilization_percent.map(f64::from)),
    (f::MEMORY_UTILIZATION, |r| r.memory.map(|m| m.utilization_percent())),
    (f::MEMORY_USED, |r| r.memory.map(|m| m.used_bytes as f64)),
    (f::MEMORY_TOTAL, |r| r.memory.map(|m| m.total_bytes as f64)),
    (f::POWER_USAGE, |r| r.power_watts),
    (f::TEMPERATURE, |r| r.temperature_celsius.map(f64::from)),
    (f::SM_CLOCK, |r| r.sm_clock_mhz.map(f64::from)),
    (f::MEM_CLOCK, |r| r.mem_clock_mhz.map(f64::from)),
    (f::MEMORY_RESERVED, |r| r.memory.map(|m| m.reserved_bytes as f64)),
    (f::MEMORY_CONTROLLER, |r| r.memory_controller_percent.map(f64::from)),
    (f::POWER_LIMIT, |r| r.power_limit_watts),
    (f::ENERGY, |r| r.energy_joules),
    (f::TEMP_SLOWDOWN, |r| r.temperature_slowdown_celsius.map(f64::from)),
    (f::TEMP_SHUTDOWN, |r| r.temperature_shutdown_celsius.map(f64::from)),
    (f::MEMORY_TEMPERATURE, |r| r.memory_temperature_celsius.map(f64::from)),
    (f::SM_CLOCK_MAX, |r| r.sm_clock_max_mhz.map(f64::from)),
    (f::MEM_CLOCK_MAX, |r| r.mem_clock_max_mhz.map(f64::from)),
    (f::ENCODER, |r| r.encoder_percent.map(f64::from)),
    (f::DECODER, |r| r.decoder_percent.map(f64::from)),
    (f::PCIE_TX, |r| r.pcie_tx_bytes_per_second.map(|v| v as f64)),
    (f::PCIE_RX, |r| r.pcie_rx_bytes_per_second.map(|v| v as f64)),
    (f::PCIE_REPLAYS, |r| r.pcie_replays.map(|v| v as f64)),
    (f::PSTATE, |r| r.performance_state.map(f64::from)),
    (f::ECC_ENABLED, |r| r.ecc_enabled.map(flag)),
];

/// The answering GPUs' readings with their label sets.
fn answered<'a>(snapshot: &'a Snapshot, sets: &'a [LabelSet]) -> Vec<(&'a GpuReadings, &'a LabelSet)> {
    snapshot.gpus.iter().zip(sets).filter_map(|(g, l)| g.readings.as_ref().map(|r| (r, l))).collect()
}

fn render_readings(
    enc: &mut dyn Exposition,
    snapshot: &Snapshot,
    labels: GpuLabels<'_>,
    instances: &[(LabelSet, &crate::snapshot::MigInstance)],
) {
    for (family, reading) in SINGLE_VALUE {
        let gpus = answered(snapshot, labels.of(family));
        enc.emit(family, &mut |s| {
            for (r, l) in &gpus {
                if let Some(v) = reading(r) {
                    s.sample(l, &[], v);
                }
            }
            // Only gauges have per-instance values (and instance label sets carry the owner).
            for (l, instance) in instances {
                if let Some(v) = mig::instance_value(family.name, instance) {
                    s.sample(l, &[], v);
                }
            }
        });
    }
    render_memory_health(enc, &answered(snapshot, labels.held), &answered(snapshot, labels.of(&f::ECC_ERRORS)));
}

/// ECC, retired pages, remapped rows, clock events and the recovery action. `current`
/// carries the holder (gauges), `counters` the device's labels alone.
fn render_memory_health(
    enc: &mut dyn Exposition,
    current: &[(&GpuReadings, &LabelSet)],
    counters: &[(&GpuReadings, &LabelSet)],
) {
    enc.emit(&f::ECC_ERRORS, &mut |s| {
        for (r, l) in counters {
            if let Some(e) = r.ecc {
                s.sample(l, &[("error_type", "corrected")], e.corrected_aggregate as f64);
                s.sample(l, &[("error_type", "uncorrected")], e.uncorrected_aggregate as f64);
            }
        }
    });
    enc.emit(&f::ECC_VOLATILE, &mut |s| {
        for (r, l) in counters {
            if let Some(e) = r.ecc {
                s.sample(l, &[("error_type", "corrected")], e.corrected_volatile as f64);
                s.sample(l, &[("error_type", "uncorrected")], e.uncorrected_volatile as f64);
            }
        }
    });
    enc.emit(&f::RETIRED_PAGES, &mut |s| {
        for (r, l) in current {
            if let Some(p) = r.retired_pages {
                s.sample(l, &[("cause", "single_bit_ecc")], p.single_bit_ecc as f64);
                s.sample(l, &[("cause", "double_bit_ecc")], p.double_bit_ecc as f64);
            }
        }
    });
    enc.emit(&f::RETIRED_PENDING, &mut |s| {
        for (r, l) in current {
            if let Some(p) = r.retired_pages {
                s.sample(l, &[], flag(p.pending));
            }
        }
    });
    enc.emit(&f::REMAPPED_ROWS, &mut |s| {
        for (r, l) in current {
            if let Some(rows) = r.remapped_rows {
                s.sample(l, &[("error_type", "correctable")], rows.correctable as f64);
                s.sample(l, &[("error_type", "uncorrectable")], rows.uncorrectable as f64);
            }
        }
    });
    enc.emit(&f::REMAP_PENDING, &mut |s| {
        for (r, l) in current {
            if let Some(rows) = r.remapped_rows {
                s.sample(l, &[], flag(rows.pending));
            }
        }
    });
    enc.emit(&f::REMAP_FAILED, &mut |s| {
        for (r, l) in current {
            if let Some(rows) = r.remapped_rows {
                s.sample(l, &[], flag(rows.failed));
            }
        }
    });
    enc.emit(&f::CLOCK_EVENTS, &mut |s| {
        for (r, l) in current {
            let Some(events) = r.clock_events else { continue };
            for (bit, reason) in CLOCK_EVENT_REASONS {
                if events.supported & bit != 0 {
                    s.sample(l, &[("reason", reason)], flag(events.active & bit != 0));
                }
            }
        }
    });
    enc.emit(&f::RECOVERY_ACTION, &mut |s| {
        for (r, l) in current {
            if let Some(action) = r.recovery_action {
                s.sample(l, &[], f64::from(action.code()));
            }
        }
    });
}

/// `labels` are the device's alone: an XID belongs to the GPU's history, so neither the
/// counter nor its last-seen time moves to a new series when the holder changes.
fn render_xids(enc: &mut dyn Exposition, snapshot: &Snapshot, labels: &[LabelSet]) {
    // XIDs are events, not readings: they stay visible on stale and lost GPUs.
    enc.emit(&f::XID_ERRORS, &mut |s| {
        for (gpu, l) in snapshot.gpus.iter().zip(labels) {
            for (code, record) in &gpu.xids {
                s.sample(l, &[("xid", &code.to_string())], record.count as f64);
            }
        }
    });
    enc.emit(&f::XID_LAST_SEEN, &mut |s| {
        for (gpu, l) in snapshot.gpus.iter().zip(labels) {
            for (code, record) in &gpu.xids {
                s.sample(l, &[("xid", &code.to_string())], unix_seconds(record.last_seen));
            }
        }
    });
}

fn render_self(enc: &mut dyn Exposition, snapshot: &Snapshot, ctx: &RenderContext, own: &LabelSet) {
    enc.emit(&f::BUILD_INFO, &mut |s| {
        s.sample(own, &[("version", &ctx.version), ("revision", &ctx.revision)], 1.0);
    });
    enc.emit(&f::NVML_UP, &mut |s| s.sample(own, &[], flag(matches!(snapshot.nvml, NvmlStatus::Up(_)))));
    enc.emit(&f::NVML_ERROR, &mut |s| {
        if let NvmlStatus::Down { error, message } = &snapshot.nvml {
            s.sample(own, &[("error", error.as_str()), ("message", message)], 1.0);
        }
    });
    let stats = &snapshot.stats;
    enc.emit(&f::NVML_INIT_ATTEMPTS, &mut |s| s.sample(own, &[], stats.init_attempts_total as f64));
    enc.emit(&f::GPUS, &mut |s| s.sample(own, &[], snapshot.gpus.len() as f64));
    enc.emit(&f::CYCLE_DURATION, &mut |s| s.sample(own, &[], stats.last_cycle_duration.as_secs_f64()));
    enc.emit(&f::CYCLES, &mut |s| s.sample(own, &[], stats.cycles_total as f64));
    enc.emit(&f::LAST_CYCLE, &mut |s| {
        if let Some(t) = snapshot.taken_at {
            s.sample(own, &[], unix_seconds(t));
        }
    });
    enc.emit(&f::NVML_ERRORS, &mut |s| {
        for (key, count) in &stats.errors {
            let gpu = key.gpu.map(|g| g.to_string()).unwrap_or_default();
            s.sample(own, &[("gpu", &gpu), ("call", key.call), ("error", &key.error)], *count as f64);
        }
    });
    enc.emit(&f::NVML_CALLS, &mut |s| {
        for (call, timing) in &stats.calls {
            s.sample(own, &[("call", call)], timing.count as f64);
        }
    });
    enc.emit(&f::NVML_CALL_SECONDS, &mut |s| {
        for (call, timing) in &stats.calls {
            s.sample(own, &[("call", call)], timing.total.as_secs_f64());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{DriverInfo, GpuIdentity, MemoryReading, NvmlDownReason};

    fn ctx() -> RenderContext {
        RenderContext {
            node: "gpu-node-1".into(),
            extra_labels: vec![("cluster".into(), "production".into()), ("region".into(), "cn-east".into())],
            version: "0.1.0".into(),
            revision: "abc".into(),
            ..RenderContext::default()
        }
    }

    fn gpu(index: u32, state: GpuState) -> GpuSnapshot {
        GpuSnapshot {
            index,
            identity: GpuIdentity {
                uuid: format!("GPU-{index}"),
                model: "NVIDIA H100 80GB HBM3".into(),
                ..GpuIdentity::default()
            },
            readings: (state == GpuState::Ok).then(|| GpuReadings {
                utilization_percent: Some(70),
                memory: Some(MemoryReading { total_bytes: 1000, used_bytes: 250, reserved_bytes: 10 }),
                ..GpuReadings::default()
            }),
            state,
            ..GpuSnapshot::default()
        }
    }

    #[test]
    fn every_series_carries_the_gpu_and_constant_labels() {
        let snapshot = Snapshot {
            nvml: NvmlStatus::Up(DriverInfo { driver_version: "550".into(), cuda_version: "12.4".into() }),
            gpus: vec![gpu(0, GpuState::Ok)],
            ..Snapshot::default()
        };
        let text = render(&snapshot, &ctx(), Format::PrometheusText);
        assert!(
            text.contains(
                "gpu_utilization{node=\"gpu-node-1\",gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA H100 80GB HBM3\",cluster=\"production\",region=\"cn-east\"} 70\n"
            ),
            "{text}"
        );
        assert!(text.contains("gpu_memory_utilization{") && text.contains("} 25\n"), "{text}");
    }

    #[test]
    fn stale_and_lost_gpus_show_state_but_no_readings() {
        let since = UNIX_EPOCH;
        let snapshot = Snapshot {
            gpus: vec![
                gpu(0, GpuState::Ok),
                gpu(1, GpuState::Stale { call: "nvmlDeviceGetPowerUsage", since }),
                gpu(2, GpuState::Lost { since }),
            ],
            ..Snapshot::default()
        };
        let text = render(&snapshot, &ctx(), Format::PrometheusText);
        assert_eq!(text.matches("gpu_utilization{").count(), 1);
        assert!(text.contains("gpu_collection_stale{node=\"gpu-node-1\",gpu=\"1\""), "{text}");
        let lost_line = text.lines().find(|l| l.starts_with("gpu_lost{") && l.contains("gpu=\"2\"")).unwrap();
        assert!(lost_line.ends_with(" 1"), "{lost_line}");
    }

    #[test]
    fn nvml_down_reason_is_exposed() {
        let snapshot = Snapshot {
            nvml: NvmlStatus::Down {
                error: NvmlDownReason::LibraryNotLoaded,
                message: "libnvidia-ml.so.1: cannot open shared object file".into(),
            },
            ..Snapshot::default()
        };
        let text = render(&snapshot, &ctx(), Format::OpenMetrics);
        assert!(text.contains("gpu_exporter_nvml_up{node=\"gpu-node-1\",cluster=\"production\",region=\"cn-east\"} 0"));
        assert!(
            text.contains(
                "error=\"library_not_loaded\",message=\"libnvidia-ml.so.1: cannot open shared object file\"} 1"
            )
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn families_render_in_the_documented_order() {
        let snapshot = Snapshot { gpus: vec![gpu(0, GpuState::Ok)], ..Snapshot::default() };
        let text = render(&snapshot, &ctx(), Format::OpenMetrics);
        let seen: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap_or("")).collect();
        let order: Vec<&str> = families::ALL.iter().map(|f| f.name).filter(|n| seen.contains(n)).collect();
        assert_eq!(seen, order);
    }

    /// prometheus-client and our encoder write the same exposition for the same
    /// families, in both formats, escapes and fractional values included.
    #[test]
    fn both_encodings_write_the_same_exposition() {
        let mut ctx = ctx();
        ctx.extra_labels.push(("team".into(), "a\"b\\c\nd".into()));
        let mut odd = gpu(1, GpuState::Ok);
        if let Some(r) = odd.readings.as_mut() {
            r.power_watts = Some(312.457);
            r.energy_joules = Some(1.5e9 + 0.25);
        }
        let snapshot = Arc::new(Snapshot {
            nvml: NvmlStatus::Up(DriverInfo { driver_version: "550".into(), cuda_version: "12.4".into() }),
            gpus: vec![gpu(0, GpuState::Ok), odd, gpu(2, GpuState::Lost { since: UNIX_EPOCH })],
            ..Snapshot::default()
        });
        let sections: Vec<Arc<dyn Section>> = vec![Arc::new(OneFamily)];
        for format in [Format::PrometheusText, Format::OpenMetrics] {
            let ours = render_encoded(&snapshot, &ctx, format, &sections, Encoding::Ours);
            let client = render_encoded(&snapshot, &ctx, format, &sections, Encoding::PrometheusClient);
            assert_same_exposition(&client, &ours);
            let last = client.lines().rfind(|l| !l.starts_with('#')).unwrap_or_default();
            assert!(last.starts_with("section_probe_total{node=\"gpu-node-1\""), "the section comes last: {last}");
        }
    }

    /// A section with one counter family, to show sections go through the same encoder.
    #[derive(Debug)]
    struct OneFamily;

    impl Section for OneFamily {
        fn generation(&self) -> u64 {
            1
        }

        fn render(&self, out: &mut dyn Exposition, ctx: &RenderContext) {
            let family = Family { name: "section_probe", kind: Kind::Counter, help: "A probe.", unit: None };
            out.emit(&family, &mut |s| s.sample(&own_label_set(ctx), &[("kind", "x\"y")], 7.0));
        }
    }

    /// Line by line: the same text, and the same value where the value is a number. Two
    /// spellings of one `f64` are the same value (the crate's `dtoa` and Rust's `Display`
    /// may pick different shortest digits, e.g. `…424` and `…425`).
    pub(super) fn assert_same_exposition(client: &str, ours: &str) {
        assert_eq!(client.lines().count(), ours.lines().count(), "{client}\n---\n{ours}");
        for (c, o) in client.lines().zip(ours.lines()) {
            if c == o {
                continue;
            }
            let (c_series, c_value) = c.rsplit_once(' ').unwrap_or((c, ""));
            let (o_series, o_value) = o.rsplit_once(' ').unwrap_or((o, ""));
            assert_eq!(c_series, o_series);
            let parsed = |v: &str| v.parse::<f64>().unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(parsed(c_value).to_bits(), parsed(o_value).to_bits(), "{c} vs {o}");
        }
    }

    #[test]
    fn different_spellings_of_one_value_are_the_same_exposition() {
        assert_same_exposition("a 83.37522529702425\n", "a 83.37522529702424\n");
    }

    #[test]
    #[should_panic]
    fn different_values_are_not_the_same_exposition() {
        assert_same_exposition("a 83.3752252970243\n", "a 83.37522529702424\n");
    }
}
