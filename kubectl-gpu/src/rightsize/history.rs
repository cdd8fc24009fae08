//! The window's history of every pod in scope, from a Prometheus-compatible query API:
//! the PromQL asked, the answers read, and each workload's [`Observed`] built from them.
//!
//! **One query per figure for the whole selection**, never one per pod: each is an
//! instant query at "now" whose `*_over_time` functions span the window, scoped by
//! namespace (`-n`) or not at all (`-A`); the answer is joined with the pod list by
//! (namespace, pod), so a `-l` selector costs nothing in PromQL. 10,000 pods answer in
//! eight queries, whatever their number.
//!
//! **Per-pod families only** (`gpu_pod_memory_used_bytes`, `gpu_pod_utilization`): on a
//! device a pod holds alone they are the device's readings; on a shared (time-sliced)
//! GPU they are the pod's own processes, never the whole GPU's. Utilization is the
//! GPU's on whole and time-sliced GPUs and SM activity on MIG instances (absent on
//! A100 instances, which have no GPM: then no compute figure, never 0).
//!
//! **Recorded or raw.** The `gpu-rightsize` recording rules (`alerts/gpu-rules.yaml`)
//! keep, every 5 minutes, each pod's per-device peak and p95 over the last hour
//! (containers summed). Where they reach back over the whole window (checked first, one
//! query), the window figures are read from them: the peak is the max of the hourly
//! peaks (exact), the p95 the p95 of hourly p95s (at or above the true p95: it errs
//! towards more). Otherwise (the rules were installed this week) the raw families are
//! read: the peak is the sum over the pod's containers of each one's peak on the device
//! (at or above the true peak), the p95 likewise.
//!
//! **History covered**: the first sample of the pod's memory series in the window. A
//! workload's is its earliest pod's (a Deployment's pods are replaced at each rollout).
//!
//! **OOM kills and restarts** in the window from kube-state-metrics
//! (`kube_pod_container_status_restarts_total`, `..._last_terminated_reason`); for a
//! pod it has no series of, the pod's status ([`super::workload`]).
//!
//! **Device now**: a MIG instance where the series has `mig_profile`; else a
//! time-sliced GPU where more than one pod has a memory series on the GPU's `uuid` in
//! the last 10 minutes (in any namespace), each an equal share ([`crate::share`]'s
//! rule); else a whole GPU. A pod with no series at all keeps what its spec asks for
//! (`nvidia.com/mig-<profile>` or `nvidia.com/gpu`), on its node's model.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::recommend::{Holding, Observed};
use super::workload::{PodFacts, WorkloadKey, workload};

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistoryError {
    #[error("the answer is not a Prometheus query answer: {0}")]
    Decode(String),
    #[error("Prometheus refused the query ({kind}): {error}")]
    Query { kind: String, error: String },
    #[error("the answer is a {0}, not the instant vector asked for")]
    NotVector(String),
}

pub type Result<T, E = HistoryError> = std::result::Result<T, E>;

/// Where the window's figures are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The `gpu-rightsize` recording rules.
    Recorded,
    /// The exporter's per-pod families.
    Raw,
}

/// Recorded series, with the rules in `alerts/gpu-rules.yaml`.
pub const RECORDED_PEAK: &str = "pod_device:gpu_memory_used_bytes:max1h";
pub const RECORDED_MEMORY_P95: &str = "pod_device:gpu_memory_used_bytes:p95_1h";
pub const RECORDED_COMPUTE_P95: &str = "pod_device:gpu_utilization:p95_1h";

const DEVICE_LABELS: &str = "namespace, pod, node, uuid, gpu_instance_id, model, mig_profile";

/// The figures asked for, one query each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Figure {
    FirstSample,
    PeakMemory,
    P95Memory,
    P95Compute,
    Holders,
    Restarts,
    OomKills,
}

/// A PromQL string literal.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The matchers of the scope: `{namespace="ai"}` or `{}`.
pub fn matchers(namespace: Option<&str>, extra: &str) -> String {
    let mut parts: Vec<String> = namespace.map(|ns| format!("namespace={}", quote(ns))).into_iter().collect();
    if !extra.is_empty() {
        parts.push(extra.to_string());
    }
    format!("{{{}}}", parts.join(", "))
}

/// A window as PromQL writes it: whole seconds (`604800s`).
pub fn range(window_seconds: f64) -> String {
    format!("{}s", window_seconds.round().max(1.0) as u64)
}

/// The query that says how far back the recorded series reach: one figure, the Unix
/// time of their first sample in the window (an hour's precision).
pub fn recorded_coverage_query(namespace: Option<&str>, window_seconds: f64) -> String {
    format!("min(min_over_time(timestamp({RECORDED_PEAK}{})[{}:1h]))", matchers(namespace, ""), range(window_seconds))
}

/// Whether the recorded series cover the window: their first sample is no later than an
/// hour after its start (the coverage query's step).
pub fn recorded_covers(first_sample: Option<f64>, now: f64, window_seconds: f64) -> bool {
    first_sample.is_some_and(|t| t <= now - window_seconds + 3600.0)
}

/// Every figure's query over the scope.
pub fn queries(namespace: Option<&str>, window_seconds: f64, source: Source) -> Vec<(Figure, String)> {
    let w = range(window_seconds);
    let s = matchers(namespace, "");
    let mut q = Vec::new();
    match source {
        Source::Recorded => {
            q.push((
                Figure::FirstSample,
                format!("min by (namespace, pod) (min_over_time(timestamp({RECORDED_PEAK}{s})[{w}:1h]))"),
            ));
            q.push((Figure::PeakMemory, format!("max by ({DEVICE_LABELS}) (max_over_time({RECORDED_PEAK}{s}[{w}]))")));
            q.push((
                Figure::P95Memory,
                format!("max by ({DEVICE_LABELS}) (quantile_over_time(0.95, {RECORDED_MEMORY_P95}{s}[{w}]))"),
            ));
            q.push((
                Figure::P95Compute,
                format!("max by ({DEVICE_LABELS}) (quantile_over_time(0.95, {RECORDED_COMPUTE_P95}{s}[{w}]))"),
            ));
        }
        Source::Raw => {
            q.push((
                Figure::FirstSample,
                format!("min by (namespace, pod) (min_over_time(timestamp(gpu_pod_memory_used_bytes{s})[{w}:5m]))"),
            ));
            q.push((
                Figure::PeakMemory,
                format!("sum by ({DEVICE_LABELS}) (max_over_time(gpu_pod_memory_used_bytes{s}[{w}]))"),
            ));
            q.push((
                Figure::P95Memory,
                format!("sum by ({DEVICE_LABELS}) (quantile_over_time(0.95, gpu_pod_memory_used_bytes{s}[{w}]))"),
            ));
            q.push((
                Figure::P95Compute,
                format!("sum by ({DEVICE_LABELS}) (quantile_over_time(0.95, gpu_pod_utilization{s}[{w}]))"),
            ));
        }
    }
    // Holders of a GPU now, in every namespace: a time-sliced GPU is shared across them.
    q.push((
        Figure::Holders,
        "count by (uuid) (group by (uuid, namespace, pod) (last_over_time(gpu_pod_memory_used_bytes{mig_profile=\"\"}[10m])))".into(),
    ));
    q.push((
        Figure::Restarts,
        format!("sum by (namespace, pod) (increase(kube_pod_container_status_restarts_total{s}[{w}]))"),
    ));
    q.push((
        Figure::OomKills,
        format!(
            "max by (namespace, pod) (max_over_time(kube_pod_container_status_last_terminated_reason{}[{w}]))",
            matchers(namespace, "reason=\"OOMKilled\"")
        ),
    ));
    q
}

/// One sample of an instant vector: its labels and value.
pub type Sample = (BTreeMap<String, String>, f64);

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Reads a `/api/v1/query` answer: an instant vector (or a scalar, as one unlabelled
/// sample). Values that are not finite (`NaN`, `+Inf`) are left out.
pub fn parse_answer(body: &[u8]) -> Result<Vec<Sample>> {
    let answer: Answer = serde_json::from_slice(body).map_err(|e| HistoryError::Decode(e.to_string()))?;
    if answer.status != "success" {
        return Err(HistoryError::Query {
            kind: answer.error_type.unwrap_or_else(|| answer.status.clone()),
            error: answer.error.unwrap_or_default(),
        });
    }
    let data = answer.data.ok_or_else(|| HistoryError::Decode("no data".into()))?;
    let finite = |v: &str| v.parse::<f64>().ok().filter(|v| v.is_finite());
    match data.result_type.as_str() {
        "vector" => {
            let samples: Vec<VectorSample> =
                serde_json::from_value(data.result).map_err(|e| HistoryError::Decode(e.to_string()))?;
            Ok(samples.into_iter().filter_map(|s| finite(&s.value.1).map(|v| (s.metric, v))).collect())
        }
        "scalar" => {
            let (_, v): (f64, String) =
                serde_json::from_value(data.result).map_err(|e| HistoryError::Decode(e.to_string()))?;
            Ok(finite(&v).map(|v| (BTreeMap::new(), v)).into_iter().collect())
        }
        other => Err(HistoryError::NotVector(other.into())),
    }
}

/// A device a pod had: its GPU's `uuid` and, on MIG, the GPU instance.
pub type DeviceKey = (String, String);

/// The window's figures of one pod on one device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceFigures {
    pub node: String,
    pub model: String,
    /// Empty on a GPU not in MIG mode.
    pub mig_profile: String,
    pub peak_memory_bytes: Option<f64>,
    pub p95_memory_bytes: Option<f64>,
    pub p95_compute_percent: Option<f64>,
}

/// The window's history of one pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodHistory {
    pub devices: BTreeMap<DeviceKey, DeviceFigures>,
    pub first_sample: Option<f64>,
    /// From kube-state-metrics, where it has the pod.
    pub restarts: Option<u32>,
    pub oom_kills: Option<u32>,
}

/// Every pod's history, and how many pods hold each GPU now.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    pub source: Option<Source>,
    pub pods: BTreeMap<(String, String), PodHistory>,
    pub holders: BTreeMap<String, u32>,
}

fn label<'a>(labels: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    labels.get(name).map_or("", String::as_str)
}

impl History {
    /// Adds one figure's answer.
    pub fn add(&mut self, figure: Figure, samples: Vec<Sample>) {
        for (labels, value) in samples {
            if figure == Figure::Holders {
                self.holders.insert(label(&labels, "uuid").to_string(), value.round().max(0.0) as u32);
                continue;
            }
            let key = (label(&labels, "namespace").to_string(), label(&labels, "pod").to_string());
            let pod = self.pods.entry(key).or_default();
            let count = value.round().clamp(0.0, f64::from(u32::MAX)) as u32;
            match figure {
                Figure::FirstSample => pod.first_sample = Some(value),
                Figure::Restarts => pod.restarts = Some(count),
                Figure::OomKills => pod.oom_kills = Some(count.min(1)),
                Figure::PeakMemory | Figure::P95Memory | Figure::P95Compute => {
                    let device = (label(&labels, "uuid").to_string(), label(&labels, "gpu_instance_id").to_string());
                    let d = pod.devices.entry(device).or_default();
                    d.node = label(&labels, "node").to_string();
                    d.model = label(&labels, "model").to_string();
                    d.mig_profile = label(&labels, "mig_profile").to_string();
                    let slot = match figure {
                        Figure::PeakMemory => &mut d.peak_memory_bytes,
                        Figure::P95Memory => &mut d.p95_memory_bytes,
                        _ => &mut d.p95_compute_percent,
                    };
                    *slot = Some(value.max(0.0));
                }
                Figure::Holders => {}
            }
        }
    }
}

/// One row of the command: a workload's pods on one kind of device, and what the window
/// says of them.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadObservation {
    pub key: WorkloadKey,
    /// `namespace/pod` of each pod, sorted.
    pub pods: Vec<String>,
    /// Nodes the pods run on (or ran on, in the window).
    pub nodes: Vec<String>,
    /// `(node, namespace/pod)` per device held, for the node plan.
    pub placements: Vec<(String, String)>,
    pub observed: Observed,
}

/// The model of a node from its `nvidia.com/gpu.product` label (`NVIDIA-A100-SXM4-80GB`
/// reads as `NVIDIA A100 SXM4 80GB`, which the catalog and the price table match).
pub fn label_model(product: &str) -> String {
    product.replace('-', " ")
}

/// What the spec of a pod without series asks for: its holding and device count.
fn spec_holding(pod: &PodFacts) -> (Holding, u32) {
    for (resource, n) in &pod.info.gpu_requests {
        if let Some(profile) = resource.strip_prefix("nvidia.com/mig-") {
            return (Holding::Mig(profile.to_string()), n.round().max(1.0) as u32);
        }
    }
    let n = pod.info.gpu_requests.get("nvidia.com/gpu").copied().unwrap_or(1.0);
    (Holding::Whole, n.round().max(1.0) as u32)
}

#[derive(Default)]
struct Acc {
    pods: BTreeSet<String>,
    nodes: BTreeSet<String>,
    placements: Vec<(String, String)>,
    devices: u32,
    peak: Option<f64>,
    p95_memory: Option<f64>,
    p95_compute: Option<f64>,
    first_sample: Option<f64>,
    oom: u32,
    restarts: u32,
    readings: bool,
}

fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Holding key for grouping: `Holding` has no `Ord`.
fn holding_key(h: &Holding) -> String {
    match h {
        Holding::Whole => "whole".into(),
        Holding::Mig(p) => format!("mig {p}"),
        Holding::TimeSlice { pods_per_gpu } => format!("share {pods_per_gpu:05}"),
    }
}

/// Joins the pods with their history: one observation per workload and device kind.
/// `node_models` gives the model of a node (for pods without series); `now` and the
/// window date the history.
pub fn observe(
    pods: &[PodFacts],
    history: &History,
    node_models: &BTreeMap<String, String>,
    now: f64,
    window_seconds: f64,
) -> Vec<WorkloadObservation> {
    let step = match history.source {
        Some(Source::Recorded) => 3600.0,
        _ => 600.0,
    };
    let mut groups: BTreeMap<(WorkloadKey, String, String), (Holding, Acc)> = BTreeMap::new();
    for pod in pods {
        let key = workload(pod);
        let id = format!("{}/{}", pod.info.namespace, pod.info.name);
        let h = history.pods.get(&(pod.info.namespace.clone(), pod.info.name.clone()));
        let oom = h.and_then(|h| h.oom_kills).unwrap_or(pod.oom_killed);
        let restarts = h.and_then(|h| h.restarts).unwrap_or(pod.restarts);
        let devices: Vec<(&DeviceKey, &DeviceFigures)> = h.map(|h| h.devices.iter().collect()).unwrap_or_default();
        // Each device of the pod, as (holding, model, node, figures).
        let mut held: Vec<(Holding, String, String, Option<&DeviceFigures>)> = Vec::new();
        if devices.is_empty() {
            let node = pod.info.node.clone().unwrap_or_default();
            let model = node_models.get(&node).cloned().unwrap_or_default();
            let (holding, n) = spec_holding(pod);
            for _ in 0..n {
                held.push((holding.clone(), model.clone(), node.clone(), None));
            }
        }
        for ((uuid, _), d) in devices {
            let holding = if !d.mig_profile.is_empty() {
                Holding::Mig(d.mig_profile.clone())
            } else {
                match history.holders.get(uuid).copied().unwrap_or(1) {
                    0 | 1 => Holding::Whole,
                    n => Holding::TimeSlice { pods_per_gpu: n },
                }
            };
            let node = if d.node.is_empty() { pod.info.node.clone().unwrap_or_default() } else { d.node.clone() };
            held.push((holding, d.model.clone(), node, Some(d)));
        }
        let mut rows = BTreeSet::new();
        for (holding, model, node, figures) in held {
            let group = (key.clone(), model, holding_key(&holding));
            rows.insert(group.clone());
            let (_, acc) = groups.entry(group).or_insert_with(|| (holding, Acc::default()));
            acc.pods.insert(id.clone());
            if !node.is_empty() {
                acc.nodes.insert(node.clone());
            }
            acc.placements.push((node, id.clone()));
            acc.devices += 1;
            if let Some(d) = figures {
                acc.peak = max(acc.peak, d.peak_memory_bytes);
                acc.p95_memory = max(acc.p95_memory, d.p95_memory_bytes);
                acc.p95_compute = max(acc.p95_compute, d.p95_compute_percent);
                acc.readings |= d.peak_memory_bytes.is_some();
            }
        }
        // Once per row the pod is in, however many devices it has there.
        let first = h.and_then(|h| h.first_sample);
        for row in rows {
            if let Some((_, acc)) = groups.get_mut(&row) {
                acc.first_sample = match (acc.first_sample, first) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                acc.oom = acc.oom.saturating_add(oom);
                acc.restarts = acc.restarts.saturating_add(restarts);
            }
        }
    }
    groups
        .into_iter()
        .map(|((key, model, _), (holding, acc))| {
            // The first-sample query steps 5 minutes (raw) or an hour (recorded): a first
            // sample within one step of the window's start covers the window.
            let history_seconds = acc.first_sample.map_or(0.0, |t| {
                let covered = (now - t).clamp(0.0, window_seconds);
                if covered >= window_seconds - step { window_seconds } else { covered }
            });
            WorkloadObservation {
                key,
                pods: acc.pods.iter().cloned().collect(),
                nodes: acc.nodes.iter().cloned().collect(),
                placements: acc.placements.clone(),
                observed: Observed {
                    model,
                    holding,
                    pods: acc.devices,
                    peak_memory_bytes: acc.peak,
                    p95_memory_bytes: acc.p95_memory,
                    p95_compute_percent: acc.p95_compute,
                    history_seconds,
                    window_seconds,
                    oom_kills: acc.oom,
                    restarts: acc.restarts,
                    has_readings: acc.readings,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::PodInfo;

    const GIB: f64 = 1_073_741_824.0;
    const WEEK: f64 = 7.0 * 86_400.0;

    #[test]
    fn one_query_per_figure_scoped_by_namespace_only() {
        let q = queries(Some("ai\"x"), WEEK, Source::Raw);
        assert_eq!(q.len(), 7, "{q:?}");
        assert_eq!(
            q[1].1,
            "sum by (namespace, pod, node, uuid, gpu_instance_id, model, mig_profile) \
             (max_over_time(gpu_pod_memory_used_bytes{namespace=\"ai\\\"x\"}[604800s]))"
        );
        assert!(q.iter().all(|(_, q)| !q.contains("pod=")), "never one query per pod");
        let r = queries(None, WEEK, Source::Recorded);
        assert!(r[1].1.contains("max_over_time(pod_device:gpu_memory_used_bytes:max1h{}[604800s])"), "{}", r[1].1);
        assert!(recorded_coverage_query(None, WEEK).starts_with("min(min_over_time(timestamp(pod_device:"));
        assert!(recorded_covers(Some(1000.0 - WEEK + 3000.0), 1000.0, WEEK));
        assert!(!recorded_covers(Some(1000.0 - 2.0 * 86_400.0), 1000.0, WEEK));
        assert!(!recorded_covers(None, 1000.0, WEEK));
    }

    #[test]
    fn answers_are_read_and_refusals_quoted() {
        let ok = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"ai","pod":"p"},"value":[1700000000,"3"]},
            {"metric":{"namespace":"ai","pod":"q"},"value":[1700000000,"NaN"]}]}}"#;
        let s = parse_answer(ok).unwrap();
        assert_eq!(s.len(), 1, "NaN is no figure");
        assert_eq!((s[0].0["pod"].as_str(), s[0].1), ("p", 3.0));
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"2.5"]}}"#;
        assert_eq!(parse_answer(scalar).unwrap()[0].1, 2.5);
        let refused = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert_eq!(
            parse_answer(refused).unwrap_err().to_string(),
            "Prometheus refused the query (bad_data): parse error"
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(parse_answer(matrix).unwrap_err(), HistoryError::NotVector("matrix".into()));
        assert!(parse_answer(b"<html>").unwrap_err().to_string().starts_with("the answer is not a Prometheus"));
    }

    /// Prometheus 3 adds `infos` (PromQL annotations such as this one, which a
    /// `rate()` over a gauge-named series draws) beside `data`; the figures are read as
    /// before.
    #[test]
    fn prometheus_3_annotations_beside_the_answer_are_ignored() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"127.0.0.1:19511","job":"x"},"value":[1796509144.785,"0"]}]},"infos":["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"x\" (1:6)"]}"#;
        let s = parse_answer(body).unwrap();
        assert_eq!((s.len(), s[0].0["job"].as_str(), s[0].1), (1, "x", 0.0));
    }

    fn device(ns: &str, pod: &str, uuid: &str, mig: &str, v: f64) -> Sample {
        let labels = [("namespace", ns), ("pod", pod), ("uuid", uuid), ("node", "n1"), ("model", "NVIDIA L40S")];
        let mut m: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if !mig.is_empty() {
            m.insert("mig_profile".into(), mig.into());
        }
        (m, v)
    }

    fn facts(name: &str, rs: Option<&str>) -> PodFacts {
        PodFacts {
            info: PodInfo {
                namespace: "ai".into(),
                name: name.into(),
                node: Some("n1".into()),
                gpu_requests: [("nvidia.com/gpu".to_string(), 1.0)].into(),
                ..PodInfo::default()
            },
            owner: rs.map(|r| ("ReplicaSet".to_string(), format!("pool-{r}"))),
            template_hash: rs.map(str::to_string),
            restarts: 4,
            ..PodFacts::default()
        }
    }

    #[test]
    fn pods_join_into_workloads_with_their_devices() {
        let now = 10.0 * 86_400.0;
        let mut h = History { source: Some(Source::Raw), ..History::default() };
        h.add(
            Figure::PeakMemory,
            vec![device("ai", "pool-a", "GPU-0", "", 4.0 * GIB), device("ai", "pool-b", "GPU-0", "", 3.0 * GIB)],
        );
        h.add(
            Figure::P95Compute,
            vec![device("ai", "pool-a", "GPU-0", "", 5.0), device("ai", "pool-b", "GPU-0", "", 8.0)],
        );
        h.add(Figure::Holders, vec![(BTreeMap::from([("uuid".to_string(), "GPU-0".to_string())]), 2.0)]);
        let first =
            |pod: &str, t: f64| (BTreeMap::from([("namespace".into(), "ai".into()), ("pod".into(), pod.into())]), t);
        // pool-a from 8 days back (the whole window, within a step), pool-b since 2 days.
        h.add(Figure::FirstSample, vec![first("pool-a", now - WEEK + 300.0), first("pool-b", now - 2.0 * 86_400.0)]);
        h.add(Figure::Restarts, vec![first("pool-a", 1.0)]);
        let pods = [facts("pool-a", Some("h1")), facts("pool-b", Some("h1")), facts("lonely", None)];
        let models = BTreeMap::from([("n1".to_string(), "NVIDIA L40S".to_string())]);
        let obs = observe(&pods, &h, &models, now, WEEK);
        assert_eq!(obs.len(), 2, "{obs:?}");
        let pool = obs.iter().find(|o| o.key.name == "pool").unwrap();
        assert_eq!(pool.pods, ["ai/pool-a", "ai/pool-b"]);
        let o = &pool.observed;
        assert_eq!(o.holding, Holding::TimeSlice { pods_per_gpu: 2 });
        assert_eq!((o.peak_memory_bytes, o.p95_compute_percent, o.pods), (Some(4.0 * GIB), Some(8.0), 2));
        assert_eq!(o.history_seconds, WEEK, "the earliest pod covers the window");
        // kube-state-metrics' 1 for pool-a, pool-b's status (4: no series of it).
        assert_eq!(o.restarts, 5);
        // A pod without series: what its spec asks for, unknown figures.
        let lonely = obs.iter().find(|o| o.key.name == "lonely").unwrap();
        assert_eq!((lonely.observed.holding.clone(), lonely.observed.has_readings), (Holding::Whole, false));
        assert_eq!(lonely.observed.model, "NVIDIA L40S");
        assert_eq!(label_model("NVIDIA-A100-SXM4-80GB"), "NVIDIA A100 SXM4 80GB");
        assert_eq!(crate::rightsize::catalog::model(&label_model("NVIDIA-A100-SXM4-80GB")).unwrap().key, "A100-80GB");
    }
}
