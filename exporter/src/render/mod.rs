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

pub mod families;
mod mig;
mod pods;

use std::time::{SystemTime, UNIX_EPOCH};

use families as f;

use crate::exposition::{Encoder, Family, Format, Kind, label_list, push_label};
use crate::snapshot::{CLOCK_EVENT_REASONS, GpuReadings, GpuSnapshot, GpuState, NvmlStatus, Snapshot};

/// What rendering needs besides the snapshot.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    pub node: String,
    /// Constant labels added to every series, in order.
    pub extra_labels: Vec<(String, String)>,
    pub version: String,
    pub revision: String,
}

/// Families that another part of the exporter renders after the exporter's own (the
/// health loop's, `crate::health::metrics`). Rendered on every scrape that misses the
/// cache; the cache key includes [`Section::generation`].
pub trait Section: Send + Sync + std::fmt::Debug {
    /// Changes whenever the section's output would.
    fn generation(&self) -> u64;
    fn render(&self, enc: &mut Encoder<'_>, ctx: &RenderContext);
}

/// Renders the whole exposition.
pub fn render(snapshot: &Snapshot, ctx: &RenderContext, format: Format) -> String {
    render_with(snapshot, ctx, format, &[])
}

/// Renders the whole exposition followed by `sections`.
pub fn render_with(
    snapshot: &Snapshot,
    ctx: &RenderContext,
    format: Format,
    sections: &[std::sync::Arc<dyn Section>],
) -> String {
    let mut out = String::with_capacity(16 * 1024 + snapshot.gpus.len() * 8 * 1024);
    // Device labels only: counters and event records use these.
    let base_labels: Vec<String> = snapshot.gpus.iter().map(|g| gpu_label_list(g, ctx)).collect();
    // Pod attribution: the gauges of a device held by one container carry its owner's labels.
    let gpu_labels = pods::with_owner_labels(snapshot, &base_labels);
    let own = own_label_list(ctx);
    let mut enc = Encoder::new(&mut out, format);
    let instance_labels = mig::instance_labels(snapshot, &base_labels);
    render_gpu_state(&mut enc, snapshot, &gpu_labels);
    render_readings(&mut enc, snapshot, GpuLabels { held: &gpu_labels, device: &base_labels }, &instance_labels);
    mig::render_mig(&mut enc, snapshot, &gpu_labels, &instance_labels);
    render_xids(&mut enc, snapshot, &base_labels);
    render_self(&mut enc, snapshot, ctx, &own);
    pods::render_pods(&mut enc, snapshot, &base_labels, &own);
    for section in sections {
        section.render(&mut enc, ctx);
    }
    enc.finish();
    out
}

fn gpu_label_list(gpu: &GpuSnapshot, ctx: &RenderContext) -> String {
    let index = gpu.index.to_string();
    let mut labels = label_list(&[
        ("node", &ctx.node),
        ("gpu", &index),
        ("uuid", &gpu.identity.uuid),
        ("model", &gpu.identity.model),
    ]);
    for (name, value) in &ctx.extra_labels {
        labels.push(',');
        push_label(&mut labels, name, value);
    }
    labels
}

fn own_label_list(ctx: &RenderContext) -> String {
    let mut labels = label_list(&[("node", &ctx.node)]);
    for (name, value) in &ctx.extra_labels {
        labels.push(',');
        push_label(&mut labels, name, value);
    }
    labels
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

fn render_gpu_state(enc: &mut Encoder<'_>, snapshot: &Snapshot, labels: &[String]) {
    let (driver, cuda) = match &snapshot.nvml {
        NvmlStatus::Up(info) => (info.driver_version.as_str(), info.cuda_version.as_str()),
        _ => ("", ""),
    };
    enc.family(&f::GPU_INFO);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        let id = &gpu.identity;
        let extra = [
            ("pci_bus_id", id.pci_bus_id.as_str()),
            ("architecture", id.architecture.as_str()),
            ("compute_capability", id.compute_capability.as_str()),
            ("driver_version", driver),
            ("cuda_version", cuda),
        ];
        enc.sample(l, &extra, 1.0);
    }
    enc.family(&f::GPU_UP);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        enc.sample(l, &[], flag(gpu.state == GpuState::Ok));
    }
    enc.family(&f::GPU_LOST);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        enc.sample(l, &[], flag(matches!(gpu.state, GpuState::Lost { .. })));
    }
    enc.family(&f::GPU_STALE);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        enc.sample(l, &[], flag(matches!(gpu.state, GpuState::Stale { .. })));
    }
    enc.family(&f::GPU_LAST_SUCCESS);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        if let Some(t) = gpu.last_success {
            enc.sample(l, &[], unix_seconds(t));
        }
    }
}

/// The label lists of every GPU, in snapshot order, in the two forms a family can need.
#[derive(Clone, Copy)]
struct GpuLabels<'a> {
    /// With the owner's `namespace`, `pod`, `container` where one container holds the GPU:
    /// for gauges.
    held: &'a [String],
    /// The device's labels alone: for counters, whose identity must not follow the holder.
    device: &'a [String],
}

impl<'a> GpuLabels<'a> {
    /// The label lists `family` is rendered with.
    fn of(self, family: &Family) -> &'a [String] {
        match family.kind {
            Kind::Counter => self.device,
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

fn render_readings(
    enc: &mut Encoder<'_>,
    snapshot: &Snapshot,
    labels: GpuLabels<'_>,
    instances: &[(String, &crate::snapshot::MigInstance)],
) {
    fn answered<'a>(snapshot: &'a Snapshot, lists: &'a [String]) -> Vec<(&'a GpuReadings, &'a String)> {
        snapshot.gpus.iter().zip(lists).filter_map(|(g, l)| g.readings.as_ref().map(|r| (r, l))).collect()
    }
    for (family, reading) in SINGLE_VALUE {
        enc.family(family);
        for (r, l) in answered(snapshot, labels.of(family)) {
            if let Some(v) = reading(r) {
                enc.sample(l, &[], v);
            }
        }
        // Only gauges have per-instance values (and instance label lists carry the owner).
        for (l, instance) in instances {
            if let Some(v) = mig::instance_value(family.name, instance) {
                enc.sample(l, &[], v);
            }
        }
    }
    let current = answered(snapshot, labels.held);
    let counters = answered(snapshot, labels.of(&f::ECC_ERRORS));
    enc.family(&f::ECC_ERRORS);
    for (r, l) in &counters {
        if let Some(e) = r.ecc {
            enc.sample(l, &[("error_type", "corrected")], e.corrected_aggregate as f64);
            enc.sample(l, &[("error_type", "uncorrected")], e.uncorrected_aggregate as f64);
        }
    }
    enc.family(&f::ECC_VOLATILE);
    for (r, l) in &counters {
        if let Some(e) = r.ecc {
            enc.sample(l, &[("error_type", "corrected")], e.corrected_volatile as f64);
            enc.sample(l, &[("error_type", "uncorrected")], e.uncorrected_volatile as f64);
        }
    }
    enc.family(&f::RETIRED_PAGES);
    for (r, l) in &current {
        if let Some(p) = r.retired_pages {
            enc.sample(l, &[("cause", "single_bit_ecc")], p.single_bit_ecc as f64);
            enc.sample(l, &[("cause", "double_bit_ecc")], p.double_bit_ecc as f64);
        }
    }
    enc.family(&f::RETIRED_PENDING);
    for (r, l) in &current {
        if let Some(p) = r.retired_pages {
            enc.sample(l, &[], flag(p.pending));
        }
    }
    enc.family(&f::REMAPPED_ROWS);
    for (r, l) in &current {
        if let Some(rows) = r.remapped_rows {
            enc.sample(l, &[("error_type", "correctable")], rows.correctable as f64);
            enc.sample(l, &[("error_type", "uncorrectable")], rows.uncorrectable as f64);
        }
    }
    enc.family(&f::REMAP_PENDING);
    for (r, l) in &current {
        if let Some(rows) = r.remapped_rows {
            enc.sample(l, &[], flag(rows.pending));
        }
    }
    enc.family(&f::REMAP_FAILED);
    for (r, l) in &current {
        if let Some(rows) = r.remapped_rows {
            enc.sample(l, &[], flag(rows.failed));
        }
    }
    enc.family(&f::CLOCK_EVENTS);
    for (r, l) in &current {
        if let Some(events) = r.clock_events {
            for (bit, reason) in CLOCK_EVENT_REASONS {
                if events.supported & bit != 0 {
                    enc.sample(l, &[("reason", reason)], flag(events.active & bit != 0));
                }
            }
        }
    }
    enc.family(&f::RECOVERY_ACTION);
    for (r, l) in &current {
        if let Some(action) = r.recovery_action {
            enc.sample(l, &[], f64::from(action.code()));
        }
    }
}

/// `labels` are the device's alone: an XID belongs to the GPU's history, so neither the
/// counter nor its last-seen time moves to a new series when the holder changes.
fn render_xids(enc: &mut Encoder<'_>, snapshot: &Snapshot, labels: &[String]) {
    // XIDs are events, not readings: they stay visible on stale and lost GPUs.
    enc.family(&f::XID_ERRORS);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        for (code, record) in &gpu.xids {
            enc.sample(l, &[("xid", &code.to_string())], record.count as f64);
        }
    }
    enc.family(&f::XID_LAST_SEEN);
    for (gpu, l) in snapshot.gpus.iter().zip(labels) {
        for (code, record) in &gpu.xids {
            enc.sample(l, &[("xid", &code.to_string())], unix_seconds(record.last_seen));
        }
    }
}

fn render_self(enc: &mut Encoder<'_>, snapshot: &Snapshot, ctx: &RenderContext, own: &str) {
    enc.family(&f::BUILD_INFO);
    enc.sample(own, &[("version", &ctx.version), ("revision", &ctx.revision)], 1.0);
    enc.family(&f::NVML_UP);
    enc.sample(own, &[], flag(matches!(snapshot.nvml, NvmlStatus::Up(_))));
    enc.family(&f::NVML_ERROR);
    if let NvmlStatus::Down { error, message } = &snapshot.nvml {
        enc.sample(own, &[("error", error.as_str()), ("message", message)], 1.0);
    }
    let stats = &snapshot.stats;
    enc.family(&f::NVML_INIT_ATTEMPTS);
    enc.sample(own, &[], stats.init_attempts_total as f64);
    enc.family(&f::GPUS);
    enc.sample(own, &[], snapshot.gpus.len() as f64);
    enc.family(&f::CYCLE_DURATION);
    enc.sample(own, &[], stats.last_cycle_duration.as_secs_f64());
    enc.family(&f::CYCLES);
    enc.sample(own, &[], stats.cycles_total as f64);
    enc.family(&f::LAST_CYCLE);
    if let Some(t) = snapshot.taken_at {
        enc.sample(own, &[], unix_seconds(t));
    }
    enc.family(&f::NVML_ERRORS);
    for (key, count) in &stats.errors {
        let gpu = key.gpu.map(|g| g.to_string()).unwrap_or_default();
        enc.sample(own, &[("gpu", &gpu), ("call", key.call), ("error", &key.error)], *count as f64);
    }
    enc.family(&f::NVML_CALLS);
    for (call, timing) in &stats.calls {
        enc.sample(own, &[("call", call)], timing.count as f64);
    }
    enc.family(&f::NVML_CALL_SECONDS);
    for (call, timing) in &stats.calls {
        enc.sample(own, &[("call", call)], timing.total.as_secs_f64());
    }
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
}
