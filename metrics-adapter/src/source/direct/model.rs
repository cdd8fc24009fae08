//! The direct source's data model, pure and I/O free: turning one exporter payload into a
//! [`Report`] of devices and per-pod shares, merging the reports of all exporters into a
//! [`Snapshot`] indexed by namespace/pod and node, and aggregating a metric over a pod,
//! a namespace or a node.
//!
//! Attribution rules:
//! * A per-device series (`gpu_utilization`, `gpu_memory_*`, `gpu_power_usage_watts`) that
//!   carries `namespace` and `pod` is a device (whole GPU or MIG instance) held by exactly
//!   that pod's container.
//! * `gpu_pod_utilization` / `gpu_pod_memory_used_bytes` (labels `namespace`, `pod`,
//!   `container`, `uuid`, plus MIG ids) are a pod's share of a device. Where present they
//!   are authoritative for that pod and device: this is how time-sliced and MPS GPUs shared
//!   by many pods are attributed. Their device labels (`model`, `node`, `mig_profile`...) are
//!   joined from the device series with the same `uuid` (and MIG ids).
//! * Power is a property of a physical GPU: a pod gets `gpu_power_usage_watts` only for
//!   whole GPUs it holds alone.
//!
//! * `metricLabelSelector` values can only be Kubernetes label values, so device label
//!   values are matched in that form: `model="NVIDIA H100 80GB HBM3"` is selected by
//!   `model=NVIDIA-H100-80GB-HBM3`, as GPU feature discovery writes `nvidia.com/gpu.product`.
//!
//! Aggregation per metric and object is in [`GpuMetric`]. Every value carries the time it
//! was observed; values older than the max age are skipped, and an object whose values are
//! all skipped has no value at all: missing, never zero.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::selector::{self, Selector};
use exposition_parser::Sample;

/// A label set shared between the structures that refer to it.
pub type Labels = Arc<[(Arc<str>, Arc<str>)]>;

fn get<'a>(labels: &'a Labels, key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
}

/// The exporter families the direct source reads.
pub const FAMILIES: [&str; 7] = [
    "gpu_utilization",
    "gpu_memory_utilization",
    "gpu_memory_used_bytes",
    "gpu_memory_total_bytes",
    "gpu_power_usage_watts",
    "gpu_pod_utilization",
    "gpu_pod_memory_used_bytes",
];

/// A value and the time it was observed (ms since the epoch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Value {
    /// The value.
    pub v: f64,
    /// Observation time, ms since the epoch.
    pub at_ms: i64,
}

/// Who holds a device exclusively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Pod namespace.
    pub namespace: Arc<str>,
    /// Pod name.
    pub pod: Arc<str>,
}

/// One GPU or MIG instance as an exporter reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// The labels of its series.
    pub labels: Labels,
    /// `uuid` label (empty if absent).
    pub uuid: Arc<str>,
    /// `gpu_instance_id` label, on MIG instances.
    pub gpu_instance: Option<Arc<str>>,
    /// `compute_instance_id` label, on MIG instances.
    pub compute_instance: Option<Arc<str>>,
    /// `node` label.
    pub node: Option<Arc<str>>,
    /// Whether this is a MIG instance.
    pub mig: bool,
    /// The pod that holds it alone, if any.
    pub owner: Option<Owner>,
    /// `gpu_utilization`, percent.
    pub utilization: Option<Value>,
    /// `gpu_memory_used_bytes`.
    pub memory_used: Option<Value>,
    /// `gpu_memory_total_bytes`.
    pub memory_total: Option<Value>,
    /// `gpu_memory_utilization`, percent.
    pub memory_utilization: Option<Value>,
    /// `gpu_power_usage_watts`.
    pub power: Option<Value>,
}

/// A pod's share of a device, from the `gpu_pod_*` families.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// The labels of its series.
    pub labels: Labels,
    /// Pod namespace.
    pub namespace: Arc<str>,
    /// Pod name.
    pub pod: Arc<str>,
    /// Device `uuid`.
    pub uuid: Arc<str>,
    /// `gpu_instance_id`, on MIG instances.
    pub gpu_instance: Option<Arc<str>>,
    /// `compute_instance_id`, on MIG instances.
    pub compute_instance: Option<Arc<str>>,
    /// `gpu_pod_utilization`, percent.
    pub utilization: Option<Value>,
    /// `gpu_pod_memory_used_bytes`.
    pub memory_used: Option<Value>,
}

/// What one exporter payload said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Devices.
    pub devices: Vec<Arc<Device>>,
    /// Per-pod shares of devices.
    pub shares: Vec<Arc<Share>>,
}

/// Deduplicates strings within one report so repeated label keys and values share memory.
#[derive(Debug, Default)]
struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.0.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.0.insert(a.clone());
        a
    }

    /// Label values are kept in label-value form (see [`selector::to_label_value`]) because
    /// they are only ever compared with `metricLabelSelector` values.
    fn labels(&mut self, pairs: &[(String, String)]) -> Labels {
        pairs.iter().map(|(k, v)| (self.get(k), self.get(&selector::to_label_value(v)))).collect()
    }
}

type DeviceKey = (String, String, String, String, String);

fn device_key(s: &Sample) -> DeviceKey {
    let l = |k| s.label(k).unwrap_or_default().to_owned();
    (l("node"), l("gpu"), l("uuid"), l("gpu_instance_id"), l("compute_instance_id"))
}

impl Report {
    /// Builds a report from the samples of one payload. `fetched_at_ms` stamps samples that
    /// carry no timestamp of their own. Non-finite values are dropped.
    pub fn from_samples(samples: &[Sample], fetched_at_ms: i64) -> Self {
        let mut interner = Interner::default();
        let mut devices: BTreeMap<DeviceKey, Device> = BTreeMap::new();
        let mut shares: BTreeMap<DeviceKey, Share> = BTreeMap::new();
        for s in samples {
            if !s.value.is_finite() {
                continue;
            }
            // A timestamp from the future (a skewed exporter clock) must not keep a value
            // alive past max age: it counts as observed when fetched.
            let value = Value { v: s.value, at_ms: s.timestamp_ms.map_or(fetched_at_ms, |t| t.min(fetched_at_ms)) };
            let opt = |k: &str, i: &mut Interner| s.label(k).filter(|v| !v.is_empty()).map(|v| i.get(v));
            match s.name.as_str() {
                "gpu_pod_utilization" | "gpu_pod_memory_used_bytes" => {
                    let (Some(namespace), Some(pod)) = (opt("namespace", &mut interner), opt("pod", &mut interner))
                    else {
                        continue;
                    };
                    let key = (
                        namespace.to_string(),
                        pod.to_string(),
                        s.label("uuid").unwrap_or_default().to_owned(),
                        s.label("gpu_instance_id").unwrap_or_default().to_owned(),
                        s.label("compute_instance_id").unwrap_or_default().to_owned(),
                    );
                    let share = shares.entry(key).or_insert_with(|| Share {
                        labels: interner.labels(&s.labels),
                        uuid: interner.get(s.label("uuid").unwrap_or_default()),
                        gpu_instance: opt("gpu_instance_id", &mut interner),
                        compute_instance: opt("compute_instance_id", &mut interner),
                        namespace,
                        pod,
                        utilization: None,
                        memory_used: None,
                    });
                    if s.name == "gpu_pod_utilization" {
                        share.utilization = Some(value);
                    } else {
                        share.memory_used = Some(value);
                    }
                }
                family => {
                    let device = devices.entry(device_key(s)).or_insert_with(|| Device {
                        labels: interner.labels(&s.labels),
                        uuid: interner.get(s.label("uuid").unwrap_or_default()),
                        gpu_instance: opt("gpu_instance_id", &mut interner),
                        compute_instance: opt("compute_instance_id", &mut interner),
                        node: opt("node", &mut interner),
                        mig: s.label("mig_profile").is_some() || s.label("gpu_instance_id").is_some(),
                        owner: None,
                        utilization: None,
                        memory_used: None,
                        memory_total: None,
                        memory_utilization: None,
                        power: None,
                    });
                    if device.owner.is_none()
                        && let (Some(namespace), Some(pod)) =
                            (opt("namespace", &mut interner), opt("pod", &mut interner))
                    {
                        device.owner = Some(Owner { namespace, pod });
                    }
                    let slot = match family {
                        "gpu_utilization" => &mut device.utilization,
                        "gpu_memory_used_bytes" => &mut device.memory_used,
                        "gpu_memory_total_bytes" => &mut device.memory_total,
                        "gpu_memory_utilization" => &mut device.memory_utilization,
                        "gpu_power_usage_watts" => &mut device.power,
                        _ => continue,
                    };
                    *slot = Some(value);
                }
            }
        }
        Report {
            devices: devices.into_values().map(Arc::new).collect(),
            shares: shares.into_values().map(Arc::new).collect(),
        }
    }
}

/// A metric the direct source serves, with how it aggregates per object kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuMetric {
    /// `gpu_utilization`, percent. Pod: mean over its devices. Namespace: sum (GPU-percent
    /// in use). Node: mean over its devices.
    Utilization,
    /// `gpu_memory_used_bytes`. Sum everywhere.
    MemoryUsedBytes,
    /// `gpu_memory_utilization`, percent. Pod and node: mean. Not served per namespace.
    MemoryUtilization,
    /// `gpu_power_usage_watts`. Pods holding whole GPUs: sum. Namespace and node: sum.
    PowerUsageWatts,
}

/// How values of several devices combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// Arithmetic mean.
    Mean,
    /// Sum.
    Sum,
}

/// The object kinds the direct source describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `pods` (namespaced).
    Pods,
    /// `namespaces` (the namespace itself).
    Namespaces,
    /// `nodes` (root-scoped).
    Nodes,
}

impl GpuMetric {
    /// All metrics.
    pub const ALL: [GpuMetric; 4] =
        [GpuMetric::Utilization, GpuMetric::MemoryUsedBytes, GpuMetric::MemoryUtilization, GpuMetric::PowerUsageWatts];

    /// The custom metric name.
    pub fn name(self) -> &'static str {
        match self {
            GpuMetric::Utilization => "gpu_utilization",
            GpuMetric::MemoryUsedBytes => "gpu_memory_used_bytes",
            GpuMetric::MemoryUtilization => "gpu_memory_utilization",
            GpuMetric::PowerUsageWatts => "gpu_power_usage_watts",
        }
    }

    /// Looks a metric up by name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// How it aggregates over the devices of one object of `kind`; `None` if not served.
    pub fn aggregation(self, kind: Kind) -> Option<Agg> {
        match (self, kind) {
            (GpuMetric::MemoryUtilization, Kind::Namespaces) => None,
            (GpuMetric::Utilization, Kind::Namespaces) => Some(Agg::Sum),
            (GpuMetric::Utilization | GpuMetric::MemoryUtilization, _) => Some(Agg::Mean),
            (GpuMetric::MemoryUsedBytes | GpuMetric::PowerUsageWatts, _) => Some(Agg::Sum),
        }
    }
}

/// A pod's view of one device: the device it holds alone, its share of a device, or both.
#[derive(Debug, Clone)]
pub struct PodEntry {
    device: Option<Arc<Device>>,
    share: Option<Arc<Share>>,
    exclusive: bool,
}

impl PodEntry {
    /// Label lookup for `metricLabelSelector`: the share's labels, then the device's.
    fn label(&self, key: &str) -> Option<&str> {
        self.share
            .as_ref()
            .and_then(|s| get(&s.labels, key))
            .or_else(|| self.device.as_ref().and_then(|d| get(&d.labels, key)))
    }

    fn value(&self, metric: GpuMetric) -> Option<Value> {
        let device = self.device.as_deref();
        let exclusive = if self.exclusive { device } else { None };
        let share = self.share.as_deref();
        match metric {
            GpuMetric::Utilization => {
                share.and_then(|s| s.utilization).or_else(|| exclusive.and_then(|d| d.utilization))
            }
            GpuMetric::MemoryUsedBytes => {
                share.and_then(|s| s.memory_used).or_else(|| exclusive.and_then(|d| d.memory_used))
            }
            GpuMetric::MemoryUtilization => {
                let total = device.and_then(|d| d.memory_total).filter(|t| t.v > 0.0);
                match (share.and_then(|s| s.memory_used), total) {
                    (Some(used), Some(total)) => {
                        Some(Value { v: 100.0 * used.v / total.v, at_ms: used.at_ms.min(total.at_ms) })
                    }
                    _ => exclusive.and_then(|d| {
                        d.memory_utilization.or_else(|| match (d.memory_used, total) {
                            (Some(used), Some(total)) => {
                                Some(Value { v: 100.0 * used.v / total.v, at_ms: used.at_ms.min(total.at_ms) })
                            }
                            _ => None,
                        })
                    }),
                }
            }
            GpuMetric::PowerUsageWatts => exclusive.filter(|d| !d.mig).and_then(|d| d.power),
        }
    }
}

/// A device as it counts towards its node.
#[derive(Debug, Clone)]
struct NodeDevice {
    device: Arc<Device>,
    /// A GPU whose MIG instances are also reported: its own utilization and memory would
    /// double count the instances, so only its power counts.
    has_instances: bool,
}

impl NodeDevice {
    fn value(&self, metric: GpuMetric) -> Option<Value> {
        let d = &self.device;
        match metric {
            GpuMetric::PowerUsageWatts => (!d.mig).then_some(d.power).flatten(),
            _ if self.has_instances => None,
            GpuMetric::Utilization => d.utilization,
            GpuMetric::MemoryUsedBytes => d.memory_used,
            GpuMetric::MemoryUtilization => d.memory_utilization.or_else(|| match (d.memory_used, d.memory_total) {
                (Some(used), Some(total)) if total.v > 0.0 => {
                    Some(Value { v: 100.0 * used.v / total.v, at_ms: used.at_ms.min(total.at_ms) })
                }
                _ => None,
            }),
        }
    }
}

/// Combines values; the timestamp is the oldest contributing one. `None` when no value is
/// fresh enough.
pub fn aggregate(values: impl Iterator<Item = Value>, agg: Agg, fresh_after_ms: i64) -> Option<Value> {
    let mut n = 0u32;
    let mut sum = 0.0;
    let mut oldest = i64::MAX;
    for v in values.filter(|v| v.at_ms >= fresh_after_ms) {
        n += 1;
        sum += v.v;
        oldest = oldest.min(v.at_ms);
    }
    if n == 0 {
        return None;
    }
    let v = match agg {
        Agg::Sum => sum,
        Agg::Mean => sum / f64::from(n),
    };
    // Finite inputs can still overflow (1e308 + 1e308): no value rather than infinity.
    v.is_finite().then_some(Value { v, at_ms: oldest })
}

/// All exporters' reports merged and indexed for queries.
#[derive(Debug, Default)]
pub struct Snapshot {
    pods: HashMap<Arc<str>, BTreeMap<Arc<str>, Vec<PodEntry>>>,
    nodes: BTreeMap<Arc<str>, Vec<NodeDevice>>,
}

/// Which objects of an index to visit.
#[derive(Debug, Clone, Copy)]
pub enum Names<'a> {
    /// All of them.
    All,
    /// One by name.
    One(&'a str),
    /// Those named, given in ascending order (as the label store returns them): visited by
    /// a merge join, with no hashing.
    Sorted(&'a [Arc<str>]),
}

impl<'a> Names<'a> {
    fn pick<'m, V>(self, map: &'m BTreeMap<Arc<str>, V>) -> Box<dyn Iterator<Item = (&'m Arc<str>, &'m V)> + 'm>
    where
        'a: 'm,
    {
        match self {
            Names::All => Box::new(map.iter()),
            Names::One(n) => Box::new(map.get_key_value(n).into_iter()),
            Names::Sorted(wanted) => {
                let mut wanted = wanted.iter().peekable();
                Box::new(map.iter().filter(move |(name, _)| {
                    while wanted.next_if(|w| ***w < ***name).is_some() {}
                    wanted.next_if(|w| ***w == ***name).is_some()
                }))
            }
        }
    }
}

/// One object's aggregated value.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectValue {
    /// Object name (pod, node or namespace).
    pub name: Arc<str>,
    /// The aggregated value.
    pub value: Value,
}

type ShareKey<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

impl Snapshot {
    /// Merges reports. Each device and share is indexed under its pod and node.
    pub fn build<'a>(reports: impl IntoIterator<Item = &'a Report>) -> Self {
        let mut snap = Snapshot::default();
        let reports: Vec<&Report> = reports.into_iter().collect();
        let mut by_id: HashMap<ShareKey<'_>, &Arc<Device>> = HashMap::new();
        let mut with_instances: HashSet<&str> = HashSet::new();
        for r in &reports {
            for d in &r.devices {
                by_id.insert((&d.uuid, d.gpu_instance.as_deref(), d.compute_instance.as_deref()), d);
                if d.mig && !d.uuid.is_empty() {
                    with_instances.insert(&d.uuid);
                }
            }
        }
        for r in &reports {
            for d in &r.devices {
                if let Some(node) = &d.node {
                    let has_instances = !d.mig && with_instances.contains(&*d.uuid);
                    snap.nodes.entry(node.clone()).or_default().push(NodeDevice { device: d.clone(), has_instances });
                }
                if let Some(o) = &d.owner {
                    snap.pod_entries(&o.namespace, &o.pod).push(PodEntry {
                        device: Some(d.clone()),
                        share: None,
                        exclusive: true,
                    });
                }
            }
        }
        for r in &reports {
            for s in &r.shares {
                let device = by_id
                    .get(&(&*s.uuid, s.gpu_instance.as_deref(), s.compute_instance.as_deref()))
                    .or_else(|| by_id.get(&(&*s.uuid, None, None)))
                    .map(|d| (*d).clone());
                let entries = snap.pod_entries(&s.namespace, &s.pod);
                let same = entries.iter_mut().find(|e| {
                    e.share.is_none() && e.device.as_ref().zip(device.as_ref()).is_some_and(|(a, b)| Arc::ptr_eq(a, b))
                });
                match same {
                    Some(e) => e.share = Some(s.clone()),
                    None => entries.push(PodEntry { device, share: Some(s.clone()), exclusive: false }),
                }
            }
        }
        snap
    }

    fn pod_entries(&mut self, namespace: &Arc<str>, pod: &Arc<str>) -> &mut Vec<PodEntry> {
        self.pods.entry(namespace.clone()).or_default().entry(pod.clone()).or_default()
    }

    /// Number of pods with any device or share.
    pub fn pod_count(&self) -> usize {
        self.pods.values().map(BTreeMap::len).sum()
    }

    fn pod_value(entries: &[PodEntry], metric: GpuMetric, sel: &Selector, fresh_after_ms: i64) -> Option<Value> {
        let agg = metric.aggregation(Kind::Pods)?;
        let values = entries.iter().filter(|e| sel.matches(|k| e.label(k))).filter_map(|e| e.value(metric));
        aggregate(values, agg, fresh_after_ms)
    }

    /// One pod's value, if it has a fresh one.
    pub fn pod(&self, ns: &str, pod: &str, metric: GpuMetric, sel: &Selector, fresh_after_ms: i64) -> Option<Value> {
        let entries = self.pods.get(ns)?.get(pod)?;
        Self::pod_value(entries, metric, sel, fresh_after_ms)
    }

    /// Values of the pods of a namespace among `names`, sorted by pod name.
    pub fn pods(
        &self,
        ns: &str,
        names: Names<'_>,
        metric: GpuMetric,
        sel: &Selector,
        fresh_after_ms: i64,
    ) -> Vec<ObjectValue> {
        let Some(pods) = self.pods.get(ns) else { return Vec::new() };
        names
            .pick(pods)
            .filter_map(|(name, entries)| {
                Self::pod_value(entries, metric, sel, fresh_after_ms)
                    .map(|value| ObjectValue { name: name.clone(), value })
            })
            .collect()
    }

    /// The namespace total, if any pod in it has a fresh value.
    pub fn namespace(&self, ns: &str, metric: GpuMetric, sel: &Selector, fresh_after_ms: i64) -> Option<Value> {
        let agg = metric.aggregation(Kind::Namespaces)?;
        let pods = self.pods.get(ns)?;
        let values = pods.values().flatten().filter(|e| sel.matches(|k| e.label(k))).filter_map(|e| e.value(metric));
        aggregate(values, agg, fresh_after_ms)
    }

    /// Values of the nodes among `names`, sorted by node name.
    pub fn nodes(&self, names: Names<'_>, metric: GpuMetric, sel: &Selector, fresh_after_ms: i64) -> Vec<ObjectValue> {
        let Some(agg) = metric.aggregation(Kind::Nodes) else { return Vec::new() };
        names
            .pick(&self.nodes)
            .filter_map(|(name, devices)| {
                let values = devices
                    .iter()
                    .filter(|d| sel.matches(|k| get(&d.device.labels, k)))
                    .filter_map(|d| d.value(metric));
                aggregate(values, agg, fresh_after_ms).map(|value| ObjectValue { name: name.clone(), value })
            })
            .collect()
    }

    /// The (kind, metric) pairs that have at least one fresh value now.
    pub fn available(&self, fresh_after_ms: i64) -> BTreeSet<(Kind, GpuMetric)> {
        let mut out = BTreeSet::new();
        let fresh = |v: Option<Value>| v.is_some_and(|v| v.at_ms >= fresh_after_ms);
        for m in GpuMetric::ALL {
            if self.pods.values().flat_map(BTreeMap::values).flatten().any(|e| fresh(e.value(m))) {
                out.insert((Kind::Pods, m));
                if m.aggregation(Kind::Namespaces).is_some() {
                    out.insert((Kind::Namespaces, m));
                }
            }
            if self.nodes.values().flatten().any(|d| fresh(d.value(m))) {
                out.insert((Kind::Nodes, m));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exposition_parser::{Format, Limits, parse};

    const T: i64 = 1_700_000_000_000;

    fn report(body: &str) -> Report {
        let samples =
            parse(body.as_bytes(), Format::PrometheusText, &Limits::default(), |n| FAMILIES.contains(&n)).unwrap();
        Report::from_samples(&samples, T)
    }

    fn everything() -> Selector {
        Selector::everything()
    }

    const NODE1: &str = r#"
gpu_utilization{node="n1",gpu="0",uuid="GPU-0",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 80
gpu_utilization{node="n1",gpu="1",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 60
gpu_memory_used_bytes{node="n1",gpu="0",uuid="GPU-0",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 1000
gpu_memory_used_bytes{node="n1",gpu="1",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 3000
gpu_memory_total_bytes{node="n1",gpu="0",uuid="GPU-0",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 10000
gpu_memory_total_bytes{node="n1",gpu="1",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 10000
gpu_memory_utilization{node="n1",gpu="0",uuid="GPU-0",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 10
gpu_memory_utilization{node="n1",gpu="1",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 30
gpu_power_usage_watts{node="n1",gpu="0",uuid="GPU-0",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 300
gpu_power_usage_watts{node="n1",gpu="1",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",namespace="ai",pod="p1",container="c"} 200
gpu_utilization{node="n1",gpu="2",uuid="GPU-2",model="NVIDIA H100 80GB HBM3",mig_profile="3g.40gb",gpu_instance_id="1",compute_instance_id="0",namespace="ai",pod="llm",container="c"} 50
gpu_memory_used_bytes{node="n1",gpu="2",uuid="GPU-2",model="NVIDIA H100 80GB HBM3",mig_profile="3g.40gb",gpu_instance_id="1",compute_instance_id="0",namespace="ai",pod="llm",container="c"} 500
gpu_utilization{node="n1",gpu="2",uuid="GPU-2",model="NVIDIA H100 80GB HBM3",mig_profile="1g.10gb",gpu_instance_id="2",compute_instance_id="0",namespace="ai",pod="embed",container="c"} 20
gpu_power_usage_watts{node="n1",gpu="2",uuid="GPU-2",model="NVIDIA H100 80GB HBM3"} 250
gpu_utilization{node="n1",gpu="2",uuid="GPU-2",model="NVIDIA H100 80GB HBM3"} 99
gpu_utilization{node="n1",gpu="3",uuid="GPU-3",model="NVIDIA L40S"} 40
gpu_memory_total_bytes{node="n1",gpu="3",uuid="GPU-3",model="NVIDIA L40S"} 48000
gpu_power_usage_watts{node="n1",gpu="3",uuid="GPU-3",model="NVIDIA L40S"} 150
gpu_pod_utilization{namespace="ai",pod="ts-a",container="c",uuid="GPU-3"} 25
gpu_pod_utilization{namespace="ai",pod="ts-b",container="c",uuid="GPU-3"} 15
gpu_pod_memory_used_bytes{namespace="ai",pod="ts-a",container="c",uuid="GPU-3"} 12000
gpu_pod_memory_used_bytes{namespace="ai",pod="ts-b",container="c",uuid="GPU-3"} 2400
"#;

    fn snap() -> Snapshot {
        Snapshot::build([&report(NODE1)])
    }

    fn pod(s: &Snapshot, name: &str, m: GpuMetric) -> Option<f64> {
        s.pod("ai", name, m, &everything(), 0).map(|v| v.v)
    }

    #[test]
    fn pod_with_several_gpus_gets_their_mean_utilization_and_summed_memory() {
        let s = snap();
        assert_eq!(pod(&s, "p1", GpuMetric::Utilization), Some(70.0));
        assert_eq!(pod(&s, "p1", GpuMetric::MemoryUsedBytes), Some(4000.0));
        assert_eq!(pod(&s, "p1", GpuMetric::MemoryUtilization), Some(20.0));
        assert_eq!(pod(&s, "p1", GpuMetric::PowerUsageWatts), Some(500.0));
    }

    #[test]
    fn mig_instances_are_attributed_and_have_no_power() {
        let s = snap();
        assert_eq!(pod(&s, "llm", GpuMetric::Utilization), Some(50.0));
        assert_eq!(pod(&s, "llm", GpuMetric::MemoryUsedBytes), Some(500.0));
        assert_eq!(pod(&s, "llm", GpuMetric::PowerUsageWatts), None);
        assert_eq!(pod(&s, "embed", GpuMetric::Utilization), Some(20.0));
    }

    #[test]
    fn shared_gpus_use_per_pod_families_with_device_labels_joined() {
        let s = snap();
        assert_eq!(pod(&s, "ts-a", GpuMetric::Utilization), Some(25.0));
        assert_eq!(pod(&s, "ts-b", GpuMetric::Utilization), Some(15.0));
        assert_eq!(pod(&s, "ts-a", GpuMetric::MemoryUtilization), Some(25.0));
        assert_eq!(pod(&s, "ts-b", GpuMetric::MemoryUtilization), Some(5.0));
        assert_eq!(pod(&s, "ts-a", GpuMetric::PowerUsageWatts), None);
        let h100 = Selector::parse("model=NVIDIA-H100-80GB-HBM3").unwrap();
        assert_eq!(s.pod("ai", "ts-a", GpuMetric::Utilization, &h100, 0), None);
        let l40s = Selector::parse("model=NVIDIA-L40S,uuid=GPU-3,!mig_profile").unwrap();
        assert_eq!(s.pod("ai", "ts-a", GpuMetric::Utilization, &l40s, 0).map(|v| v.v), Some(25.0));
    }

    #[test]
    fn pod_family_overrides_device_series_for_the_same_device() {
        let body =
            format!("{NODE1}gpu_pod_utilization{{namespace=\"ai\",pod=\"p1\",container=\"c\",uuid=\"GPU-0\"}} 90\n");
        let s = Snapshot::build([&report(&body)]);
        // GPU-0 now 90 (per-pod family), GPU-1 still 60.
        assert_eq!(pod(&s, "p1", GpuMetric::Utilization), Some(75.0));
        assert_eq!(pod(&s, "p1", GpuMetric::PowerUsageWatts), Some(500.0));
    }

    #[test]
    fn metric_selector_narrows_to_mig_profile() {
        let s = snap();
        let sel = Selector::parse("mig_profile=3g.40gb").unwrap();
        let got: Vec<_> =
            s.pods("ai", Names::All, GpuMetric::Utilization, &sel, 0).into_iter().map(|o| o.name).collect();
        assert_eq!(got, vec![Arc::from("llm")]);
        let sel = Selector::parse("mig_profile in (3g.40gb,1g.10gb)").unwrap();
        assert_eq!(s.pods("ai", Names::All, GpuMetric::Utilization, &sel, 0).len(), 2);
    }

    #[test]
    fn sorted_names_are_merge_joined() {
        let s = snap();
        let names: Vec<Arc<str>> = ["aaa", "embed", "llm", "nope", "ts-b", "zzz"].into_iter().map(Arc::from).collect();
        let got: Vec<Arc<str>> = s
            .pods("ai", Names::Sorted(&names), GpuMetric::Utilization, &everything(), 0)
            .into_iter()
            .map(|o| o.name)
            .collect();
        assert_eq!(got, vec![Arc::from("embed"), Arc::from("llm"), Arc::from("ts-b")]);
        assert!(s.pods("ai", Names::Sorted(&[]), GpuMetric::Utilization, &everything(), 0).is_empty());
        assert_eq!(s.pods("ai", Names::One("llm"), GpuMetric::Utilization, &everything(), 0).len(), 1);
    }

    #[test]
    fn namespace_totals_and_node_values() {
        let s = snap();
        let ns = |m| s.namespace("ai", m, &everything(), 0).map(|v| v.v);
        // 80+60 (p1) + 50 + 20 (MIG) + 25 + 15 (shared)
        assert_eq!(ns(GpuMetric::Utilization), Some(250.0));
        assert_eq!(ns(GpuMetric::MemoryUsedBytes), Some(1000.0 + 3000.0 + 500.0 + 12000.0 + 2400.0));
        assert_eq!(ns(GpuMetric::PowerUsageWatts), Some(500.0));
        assert_eq!(ns(GpuMetric::MemoryUtilization), None);
        assert_eq!(s.namespace("other", GpuMetric::Utilization, &everything(), 0), None);

        let nodes = s.nodes(Names::All, GpuMetric::Utilization, &everything(), 0);
        assert_eq!(nodes.len(), 1);
        // GPU-0 80, GPU-1 60, MIG 50 and 20 (the parent's 99 double counts them), GPU-3 40
        assert_eq!(nodes[0].value.v, (80.0 + 60.0 + 50.0 + 20.0 + 40.0) / 5.0);
        let power = s.nodes(Names::All, GpuMetric::PowerUsageWatts, &everything(), 0);
        assert_eq!(power[0].value.v, 300.0 + 200.0 + 250.0 + 150.0);
        let h100 = Selector::parse("gpu in (0,1)").unwrap();
        assert_eq!(s.nodes(Names::One("n1"), GpuMetric::Utilization, &h100, 0)[0].value.v, 70.0);
        assert!(s.nodes(Names::One("n2"), GpuMetric::Utilization, &everything(), 0).is_empty());
    }

    #[test]
    fn stale_values_are_missing_not_zero() {
        let s = snap();
        assert_eq!(s.pod("ai", "p1", GpuMetric::Utilization, &everything(), T + 1), None);
        assert!(s.pods("ai", Names::All, GpuMetric::Utilization, &everything(), T + 1).is_empty());
        assert!(s.available(T + 1).is_empty());
        assert_eq!(s.pod("ai", "p1", GpuMetric::Utilization, &everything(), T).map(|v| v.v), Some(70.0));
    }

    #[test]
    fn sample_timestamps_win_over_fetch_time_and_oldest_is_reported() {
        let r = report(
            "gpu_utilization{node=\"n\",gpu=\"0\",uuid=\"a\",namespace=\"x\",pod=\"p\"} 10 1000\n\
             gpu_utilization{node=\"n\",gpu=\"1\",uuid=\"b\",namespace=\"x\",pod=\"p\"} 20\n",
        );
        let s = Snapshot::build([&r]);
        let v = s.pod("x", "p", GpuMetric::Utilization, &everything(), 0).unwrap();
        assert_eq!(v, Value { v: 15.0, at_ms: 1000 });
        // only the fresh device counts once the old one is past max age
        let v = s.pod("x", "p", GpuMetric::Utilization, &everything(), 1001).unwrap();
        assert_eq!(v, Value { v: 20.0, at_ms: T });
    }

    #[test]
    fn overflowing_sums_have_no_value() {
        let big = Value { v: f64::MAX, at_ms: 0 };
        assert_eq!(aggregate([big, big].into_iter(), Agg::Sum, 0), None);
        assert_eq!(aggregate([big].into_iter(), Agg::Sum, 0), Some(big));
    }

    #[test]
    fn future_timestamps_count_as_fetch_time() {
        let r = report(&format!(
            "gpu_utilization{{node=\"n\",gpu=\"0\",uuid=\"a\",namespace=\"x\",pod=\"p\"}} 10 {}\n",
            T * 2
        ));
        let s = Snapshot::build([&r]);
        assert_eq!(s.pod("x", "p", GpuMetric::Utilization, &everything(), 0).unwrap().at_ms, T);
        assert_eq!(s.pod("x", "p", GpuMetric::Utilization, &everything(), T + 1), None);
    }

    #[test]
    fn non_finite_values_are_dropped() {
        let r = report("gpu_utilization{node=\"n\",gpu=\"0\",uuid=\"a\",namespace=\"x\",pod=\"p\"} NaN\n");
        let s = Snapshot::build([&r]);
        assert_eq!(s.pod("x", "p", GpuMetric::Utilization, &everything(), 0), None);
    }

    #[test]
    fn available_lists_kinds_per_metric() {
        let a = snap().available(0);
        assert!(a.contains(&(Kind::Pods, GpuMetric::PowerUsageWatts)));
        assert!(a.contains(&(Kind::Namespaces, GpuMetric::Utilization)));
        assert!(!a.contains(&(Kind::Namespaces, GpuMetric::MemoryUtilization)));
        assert!(a.contains(&(Kind::Nodes, GpuMetric::MemoryUsedBytes)));
        let empty = Snapshot::build([&report("gpu_temperature_celsius{node=\"n\"} 40\n")]);
        assert!(empty.available(0).is_empty());
    }

    #[test]
    fn reports_from_several_exporters_merge() {
        let a = report("gpu_utilization{node=\"a\",gpu=\"0\",uuid=\"A\",namespace=\"x\",pod=\"p\"} 10\n");
        let b = report("gpu_utilization{node=\"b\",gpu=\"0\",uuid=\"B\",namespace=\"x\",pod=\"p\"} 30\n");
        let s = Snapshot::build([&a, &b]);
        assert_eq!(s.pod("x", "p", GpuMetric::Utilization, &everything(), 0).map(|v| v.v), Some(20.0));
        assert_eq!(s.pod_count(), 1);
        assert_eq!(s.nodes(Names::All, GpuMetric::Utilization, &everything(), 0).len(), 2);
    }
}
