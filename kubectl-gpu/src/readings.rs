//! One exporter's `/metrics` page as plain data: its GPUs, their MIG instances, the
//! pods that hold each device, and the health loop's own view of the node.
//!
//! The page is parsed by the project's one exposition parser (`exposition-parser`),
//! keeping only the families read here ([`FAMILIES`]). A GPU is whatever `gpu_info`
//! lists; a reading the exporter leaves out (NOT_SUPPORTED, a stale or lost GPU, no GPM
//! on an A100's MIG instances) stays `None` and is shown as unknown, never as zero.
//!
//! Holders: the pods that hold a device are those with a `gpu_pod_memory_used_bytes`
//! series on it (the exporter writes one for every container holding the device, 0
//! when it runs nothing) together with the exclusive holder of `gpu_device_pod_info`
//! (kept on stale and lost GPUs). The `gpu-cost` recording rules count holders the same
//! way ([`crate::rules`]).

use std::collections::BTreeMap;

use exposition_parser::{Format, Limits, Sample};

/// The families this crate reads from an exporter.
pub const FAMILIES: &[&str] = &[
    "gpu_info",
    "gpu_up",
    "gpu_lost",
    "gpu_collection_stale",
    "gpu_utilization",
    "gpu_memory_used_bytes",
    "gpu_memory_total_bytes",
    "gpu_power_usage_watts",
    "gpu_power_limit_watts",
    "gpu_temperature_celsius",
    "gpu_temperature_slowdown_threshold_celsius",
    "gpu_sm_clock_mhz",
    "gpu_mem_clock_mhz",
    "gpu_clock_event_active",
    "gpu_ecc_volatile_errors_total",
    "gpu_remapped_rows",
    "gpu_remapped_rows_pending",
    "gpu_remapped_rows_failed",
    "gpu_xid_errors_total",
    "gpu_xid_last_seen_timestamp_seconds",
    "gpu_mig_enabled",
    "gpu_mig_compute_slices",
    "gpu_mig_compute_slices_free",
    "gpu_mig_instance_info",
    "gpu_mig_instance_compute_slices",
    "gpu_processes",
    "gpu_device_pod_info",
    "gpu_pod_utilization",
    "gpu_pod_memory_used_bytes",
    "gpu_exporter_nvml_up",
    "gpu_exporter_nvml_error_info",
    "gpu_health_node_healthy",
    "gpu_health_node_quarantined",
    "gpu_health_breaker_open",
    "gpu_health_node_reason_info",
    "gpu_health_gpu_quarantined",
];

/// Why a page could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReadingsError {
    #[error("the exporter's page does not parse: {0}")]
    Parse(#[from] exposition_parser::Error),
}

pub type Result<T, E = ReadingsError> = std::result::Result<T, E>;

/// A pod holding a device, with its figures on that device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holder {
    pub namespace: String,
    pub pod: String,
    /// Containers of the pod on the device, sorted.
    pub containers: Vec<String>,
    /// Sum over the pod's containers of `gpu_pod_utilization` (percent of the device).
    pub utilization: Option<f64>,
    /// Sum over the pod's containers of `gpu_pod_memory_used_bytes`.
    pub memory_used_bytes: Option<f64>,
}

/// One MIG instance (a GPU instance, or a compute instance inside one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigInstance {
    pub profile: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub mig_uuid: String,
    /// Compute slices of the instance (`gpu_mig_instance_compute_slices`).
    pub slices: Option<f64>,
    /// GPM SM activity; absent on GPUs without GPM (A100).
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub memory_total_bytes: Option<f64>,
    pub processes: Option<f64>,
    pub holders: Vec<Holder>,
}

/// One XID code seen on a GPU since the exporter started.
#[derive(Debug, Clone, PartialEq)]
pub struct Xid {
    pub code: u32,
    pub count: f64,
    /// Unix time of the last event with this code.
    pub last_seen: Option<f64>,
}

/// One GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub up: Option<bool>,
    pub lost: bool,
    pub stale: bool,
    /// Held alone by the health loop's device taints (`gpu_health_gpu_quarantined`).
    pub held: bool,
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub memory_total_bytes: Option<f64>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub temperature_celsius: Option<f64>,
    pub slowdown_celsius: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub mem_clock_mhz: Option<f64>,
    /// Clock-event (throttle) reasons active now, in the exporter's order.
    pub throttle: Vec<String>,
    pub ecc_corrected: Option<f64>,
    pub ecc_uncorrected: Option<f64>,
    pub remapped_correctable: Option<f64>,
    pub remapped_uncorrectable: Option<f64>,
    pub remap_pending: bool,
    pub remap_failed: bool,
    pub xids: Vec<Xid>,
    pub mig_enabled: bool,
    /// Compute slices of the GPU (7 on A100/H100/H200), MIG-capable GPUs only.
    pub mig_slices: Option<f64>,
    pub mig_slices_free: Option<f64>,
    pub instances: Vec<MigInstance>,
    pub processes: Option<f64>,
    /// Pods holding the whole GPU (one if exclusive, several if time-sliced or MPS).
    pub holders: Vec<Holder>,
}

/// The health loop's view of the node, as the exporter reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopHealth {
    pub healthy: Option<bool>,
    pub quarantined: Option<bool>,
    pub breaker_open: Option<bool>,
    pub reasons: Vec<String>,
}

/// Everything read from one exporter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeReadings {
    pub gpus: Vec<Gpu>,
    pub nvml_up: Option<bool>,
    /// `gpu_exporter_nvml_error_info`'s message while NVML is down.
    pub nvml_error: Option<String>,
    pub health: LoopHealth,
}

/// Which device of the node a sample is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct DeviceKey {
    gpu: u32,
    /// (gpu_instance_id, compute_instance_id) on a MIG instance.
    mig: Option<(u32, u32)>,
}

fn device_key(s: &Sample) -> Option<DeviceKey> {
    let gpu = s.label("gpu")?.parse().ok()?;
    let mig = match s.label("mig_profile") {
        Some(p) if !p.is_empty() => {
            Some((s.label("gpu_instance_id")?.parse().ok()?, s.label("compute_instance_id")?.parse().ok()?))
        }
        _ => None,
    };
    Some(DeviceKey { gpu, mig })
}

/// Parses an exporter's page. `content_type` picks the text format.
pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<NodeReadings> {
    let samples = exposition_parser::parse(body, Format::from_content_type(content_type), &Limits::default(), |f| {
        FAMILIES.contains(&f)
    })?;
    Ok(from_samples(&samples))
}

/// Builds the node from parsed samples.
pub fn from_samples(samples: &[Sample]) -> NodeReadings {
    let mut node = NodeReadings::default();
    let mut gpus: BTreeMap<u32, Gpu> = BTreeMap::new();
    let mut instances: BTreeMap<DeviceKey, MigInstance> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == "gpu_info") {
        let Some(key) = device_key(s) else { continue };
        gpus.entry(key.gpu).or_insert_with(|| Gpu {
            index: key.gpu,
            uuid: s.label("uuid").unwrap_or_default().into(),
            model: s.label("model").unwrap_or_default().into(),
            ..Gpu::default()
        });
    }
    for s in samples.iter().filter(|s| s.name == "gpu_mig_instance_info") {
        let Some(key @ DeviceKey { mig: Some((gi, ci)), .. }) = device_key(s) else { continue };
        instances.entry(key).or_insert_with(|| MigInstance {
            profile: s.label("mig_profile").unwrap_or_default().into(),
            gpu_instance_id: gi,
            compute_instance_id: ci,
            mig_uuid: s.label("mig_uuid").unwrap_or_default().into(),
            ..MigInstance::default()
        });
    }
    let mut holders: BTreeMap<DeviceKey, BTreeMap<(String, String), Holder>> = BTreeMap::new();
    for s in samples {
        // The health loop's families are the node's, except the per-GPU hold.
        let node_wide = s.name.starts_with("gpu_exporter_")
            || (s.name.starts_with("gpu_health_") && s.name != "gpu_health_gpu_quarantined");
        if node_wide {
            node_sample(&mut node, s);
        } else if let Some(key) = device_key(s) {
            if let Some(gpu) = gpus.get_mut(&key.gpu) {
                match key.mig {
                    None => gpu_sample(gpu, s),
                    Some(_) => {
                        if let Some(instance) = instances.get_mut(&key) {
                            instance_sample(instance, s);
                        }
                    }
                }
                holder_sample(holders.entry(key).or_default(), s);
            }
        }
    }
    for (key, found) in holders {
        let list: Vec<Holder> = found.into_values().collect();
        match key.mig {
            None => {
                if let Some(gpu) = gpus.get_mut(&key.gpu) {
                    gpu.holders = list;
                }
            }
            Some(_) => {
                if let Some(instance) = instances.get_mut(&key) {
                    instance.holders = list;
                }
            }
        }
    }
    for (key, instance) in instances {
        if let Some(gpu) = gpus.get_mut(&key.gpu) {
            gpu.instances.push(instance);
        }
    }
    node.health.reasons.sort();
    node.health.reasons.dedup();
    node.gpus = gpus.into_values().collect();
    node
}

fn flag(v: f64) -> bool {
    v >= 0.5
}

fn gpu_sample(gpu: &mut Gpu, s: &Sample) {
    let v = Some(s.value).filter(|v| !v.is_nan());
    match s.name.as_str() {
        "gpu_up" => gpu.up = v.map(flag),
        "gpu_health_gpu_quarantined" => gpu.held = v.is_some_and(flag),
        "gpu_lost" => gpu.lost = v.is_some_and(flag),
        "gpu_collection_stale" => gpu.stale = v.is_some_and(flag),
        "gpu_utilization" => gpu.utilization = v,
        "gpu_memory_used_bytes" => gpu.memory_used_bytes = v,
        "gpu_memory_total_bytes" => gpu.memory_total_bytes = v,
        "gpu_power_usage_watts" => gpu.power_watts = v,
        "gpu_power_limit_watts" => gpu.power_limit_watts = v,
        "gpu_temperature_celsius" => gpu.temperature_celsius = v,
        "gpu_temperature_slowdown_threshold_celsius" => gpu.slowdown_celsius = v,
        "gpu_sm_clock_mhz" => gpu.sm_clock_mhz = v,
        "gpu_mem_clock_mhz" => gpu.mem_clock_mhz = v,
        "gpu_clock_event_active" => {
            if v.is_some_and(flag)
                && let Some(reason) = s.label("reason")
            {
                gpu.throttle.push(reason.to_string());
            }
        }
        "gpu_ecc_volatile_errors_total" => match s.label("error_type") {
            Some("corrected") => gpu.ecc_corrected = v,
            Some("uncorrected") => gpu.ecc_uncorrected = v,
            _ => {}
        },
        "gpu_remapped_rows" => match s.label("error_type") {
            Some("correctable") => gpu.remapped_correctable = v,
            Some("uncorrectable") => gpu.remapped_uncorrectable = v,
            _ => {}
        },
        "gpu_remapped_rows_pending" => gpu.remap_pending = v.is_some_and(flag),
        "gpu_remapped_rows_failed" => gpu.remap_failed = v.is_some_and(flag),
        "gpu_xid_errors_total" | "gpu_xid_last_seen_timestamp_seconds" => xid_sample(gpu, s, v),
        "gpu_mig_enabled" => gpu.mig_enabled = v.is_some_and(flag),
        "gpu_mig_compute_slices" => gpu.mig_slices = v,
        "gpu_mig_compute_slices_free" => gpu.mig_slices_free = v,
        "gpu_processes" => gpu.processes = v,
        _ => {}
    }
}

fn xid_sample(gpu: &mut Gpu, s: &Sample, v: Option<f64>) {
    let Some(code) = s.label("xid").and_then(|x| x.parse::<u32>().ok()) else { return };
    let index = match gpu.xids.iter().position(|x| x.code == code) {
        Some(i) => i,
        None => {
            gpu.xids.push(Xid { code, count: 0.0, last_seen: None });
            gpu.xids.len() - 1
        }
    };
    let xid = &mut gpu.xids[index];
    if s.name == "gpu_xid_errors_total" {
        xid.count = v.unwrap_or(0.0);
    } else {
        xid.last_seen = v;
    }
    gpu.xids.sort_by_key(|x| x.code);
}

fn instance_sample(instance: &mut MigInstance, s: &Sample) {
    let v = Some(s.value).filter(|v| !v.is_nan());
    match s.name.as_str() {
        "gpu_utilization" => instance.utilization = v,
        "gpu_memory_used_bytes" => instance.memory_used_bytes = v,
        "gpu_memory_total_bytes" => instance.memory_total_bytes = v,
        "gpu_mig_instance_compute_slices" => instance.slices = v,
        "gpu_processes" => instance.processes = v,
        _ => {}
    }
}

fn holder_sample(holders: &mut BTreeMap<(String, String), Holder>, s: &Sample) {
    let family = s.name.as_str();
    if !matches!(family, "gpu_pod_utilization" | "gpu_pod_memory_used_bytes" | "gpu_device_pod_info") {
        return;
    }
    let (Some(namespace), Some(pod)) = (s.label("namespace"), s.label("pod")) else { return };
    if namespace.is_empty() || pod.is_empty() {
        return;
    }
    let holder = holders.entry((namespace.to_string(), pod.to_string())).or_insert_with(|| Holder {
        namespace: namespace.into(),
        pod: pod.into(),
        ..Holder::default()
    });
    if let Some(container) = s.label("container").filter(|c| !c.is_empty())
        && !holder.containers.iter().any(|c| c == container)
    {
        holder.containers.push(container.to_string());
        holder.containers.sort();
    }
    let v = Some(s.value).filter(|v| !v.is_nan());
    let add = |slot: &mut Option<f64>| {
        if let Some(v) = v {
            *slot = Some(slot.unwrap_or(0.0) + v);
        }
    };
    match family {
        "gpu_pod_utilization" => add(&mut holder.utilization),
        "gpu_pod_memory_used_bytes" => add(&mut holder.memory_used_bytes),
        _ => {}
    }
}

fn node_sample(node: &mut NodeReadings, s: &Sample) {
    let v = Some(s.value).filter(|v| !v.is_nan());
    match s.name.as_str() {
        "gpu_exporter_nvml_up" => node.nvml_up = v.map(flag),
        "gpu_exporter_nvml_error_info" => node.nvml_error = s.label("message").map(str::to_string),
        "gpu_health_node_healthy" => node.health.healthy = v.map(flag),
        "gpu_health_node_quarantined" => node.health.quarantined = v.map(flag),
        "gpu_health_breaker_open" => node.health.breaker_open = v.map(flag),
        "gpu_health_node_reason_info" => {
            if let Some(reason) = s.label("reason") {
                node.health.reasons.push(reason.to_string());
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP gpu_info x
# TYPE gpu_info gauge
gpu_info{node="n",gpu="0",uuid="GPU-0",model="NVIDIA A100-SXM4-80GB"} 1
gpu_info{node="n",gpu="1",uuid="GPU-1",model="NVIDIA A100-SXM4-80GB",namespace="a",pod="p",container="c"} 1
gpu_up{node="n",gpu="0",uuid="GPU-0"} 1
gpu_up{node="n",gpu="1",uuid="GPU-1"} 0
gpu_lost{node="n",gpu="1",uuid="GPU-1"} 1
gpu_memory_used_bytes{node="n",gpu="0",uuid="GPU-0"} 100
gpu_memory_total_bytes{node="n",gpu="0",uuid="GPU-0"} 1000
gpu_mig_enabled{node="n",gpu="0",uuid="GPU-0"} 1
gpu_mig_compute_slices{node="n",gpu="0",uuid="GPU-0"} 7
gpu_mig_instance_info{node="n",gpu="0",uuid="GPU-0",mig_profile="3g.40gb",gpu_instance_id="1",compute_instance_id="0",mig_uuid="MIG-1",namespace="ns",pod="llm",container="main"} 1
gpu_mig_instance_compute_slices{node="n",gpu="0",uuid="GPU-0",mig_profile="3g.40gb",gpu_instance_id="1",compute_instance_id="0",mig_uuid="MIG-1",namespace="ns",pod="llm",container="main"} 3
gpu_memory_used_bytes{node="n",gpu="0",uuid="GPU-0",mig_profile="3g.40gb",gpu_instance_id="1",compute_instance_id="0",mig_uuid="MIG-1",namespace="ns",pod="llm",container="main"} 90
gpu_pod_memory_used_bytes{node="n",gpu="0",uuid="GPU-0",mig_profile="3g.40gb",gpu_instance_id="1",compute_instance_id="0",mig_uuid="MIG-1",namespace="ns",pod="llm",container="main"} 90
gpu_device_pod_info{node="n",gpu="1",uuid="GPU-1",namespace="a",pod="p",container="c"} 1
gpu_clock_event_active{node="n",gpu="0",uuid="GPU-0",reason="gpu_idle"} 1
gpu_clock_event_active{node="n",gpu="0",uuid="GPU-0",reason="sw_power_cap"} 0
gpu_xid_errors_total{node="n",gpu="1",uuid="GPU-1",xid="79"} 2
gpu_xid_last_seen_timestamp_seconds{node="n",gpu="1",uuid="GPU-1",xid="79"} 1700000000
gpu_xid_errors_total{node="n",gpu="1",uuid="GPU-1",xid="13"} 1
gpu_utilization{node="n",gpu="x",uuid="GPU-x"} 50
gpu_exporter_nvml_up{node="n"} 1
gpu_health_node_healthy{node="n"} 0
gpu_health_node_reason_info{node="n",gpu="1",reason="Xid79",needs="reset"} 1
gpu_health_node_reason_info{node="n",gpu="1",reason="GpuLost",needs="nothing"} 1
gpu_temperature_celsius{node="n",gpu="0",uuid="GPU-0"} NaN
gpu_health_gpu_quarantined{node="n",gpu="0",uuid="GPU-0",model="m"} 0
gpu_health_gpu_quarantined{node="n",gpu="1",uuid="GPU-1",model="m"} 1
other_family{a="b"} 3
"#;

    #[test]
    fn a_page_becomes_gpus_instances_and_holders() {
        let node = parse(PAGE.as_bytes(), None).unwrap();
        assert_eq!(node.gpus.len(), 2, "a sample with gpu=\"x\" names no GPU");
        let g0 = &node.gpus[0];
        assert_eq!((g0.index, g0.uuid.as_str(), g0.up), (0, "GPU-0", Some(true)));
        assert_eq!((g0.memory_used_bytes, g0.memory_total_bytes, g0.utilization), (Some(100.0), Some(1000.0), None));
        assert_eq!(g0.temperature_celsius, None, "NaN is no reading");
        assert!(g0.mig_enabled);
        assert_eq!(g0.throttle, ["gpu_idle"]);
        assert_eq!(g0.instances.len(), 1);
        let i = &g0.instances[0];
        assert_eq!(
            (i.profile.as_str(), i.gpu_instance_id, i.slices, i.memory_used_bytes),
            ("3g.40gb", 1, Some(3.0), Some(90.0))
        );
        assert_eq!(i.holders.len(), 1);
        assert_eq!((i.holders[0].pod.as_str(), i.holders[0].memory_used_bytes), ("llm", Some(90.0)));
        assert!(g0.holders.is_empty(), "the instance's holder is not the GPU's");
        let g1 = &node.gpus[1];
        assert!(g1.lost && g1.up == Some(false));
        assert_eq!(g1.holders.len(), 1, "gpu_device_pod_info names the holder of a lost GPU");
        assert_eq!(g1.holders[0].containers, ["c"]);
        assert_eq!(g1.holders[0].memory_used_bytes, None);
        assert_eq!(
            g1.xids.iter().map(|x| (x.code, x.count, x.last_seen)).collect::<Vec<_>>(),
            [(13, 1.0, None), (79, 2.0, Some(1.7e9))]
        );
        assert_eq!(node.nvml_up, Some(true));
        assert_eq!(node.health.healthy, Some(false));
        assert_eq!(node.health.reasons, ["GpuLost", "Xid79"]);
        assert_eq!((g0.held, g1.held), (false, true), "gpu_health_gpu_quarantined is per GPU");
    }

    #[test]
    fn shared_holders_sum_their_containers() {
        let page = r#"gpu_info{gpu="2",uuid="G",model="m"} 1
gpu_pod_utilization{gpu="2",uuid="G",namespace="a",pod="p",container="x"} 10
gpu_pod_utilization{gpu="2",uuid="G",namespace="a",pod="p",container="y"} 5
gpu_pod_memory_used_bytes{gpu="2",uuid="G",namespace="a",pod="p",container="x"} 1
gpu_pod_memory_used_bytes{gpu="2",uuid="G",namespace="a",pod="p",container="y"} 2
gpu_pod_memory_used_bytes{gpu="2",uuid="G",namespace="b",pod="q",container="z"} 0
"#;
        let node = parse(page.as_bytes(), None).unwrap();
        let holders = &node.gpus[0].holders;
        assert_eq!(holders.len(), 2);
        assert_eq!((holders[0].utilization, holders[0].memory_used_bytes), (Some(15.0), Some(3.0)));
        assert_eq!(holders[0].containers, ["x", "y"]);
        assert_eq!((holders[1].utilization, holders[1].memory_used_bytes), (None, Some(0.0)));
    }

    #[test]
    fn a_malformed_page_is_an_error() {
        let e = parse(b"gpu_info{gpu=\"0\" 1\n", None).unwrap_err();
        assert!(e.to_string().starts_with("the exporter's page does not parse: line 1"), "{e}");
    }
}
