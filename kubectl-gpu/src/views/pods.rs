//! `kubectl gpu pods`: one row per pod and device it holds.
//!
//! From the exporters (`--source exporters`, and `-A`): DEVICE is `GPU <n>` or
//! `MIG <profile> (GPU <n>)`; SHARE is its share of the GPU ([`crate::share`]: `1`,
//! `3/7`, `1/4` on a GPU time-sliced between four pods); UTIL is the pod's utilization
//! of the device (for a pod on a shared GPU, its processes' share of the GPU's time;
//! `-o wide` adds UTIL/SHARE, its utilization of what it was given); MEMORY is what the
//! pod uses over the device's total.
//!
//! From the custom metrics API (the default with `-n`, [`from_metrics`]): UTIL and
//! MEMORY are the adapter's per-pod aggregates (mean over the pod's devices, sum);
//! DEVICE comes from the pod's limits (`MIG 3g.40gb`, `GPU ×2`) and SHARE is known for
//! MIG profiles only (`<n>g.` of the GPU's 7 slices).
//!
//! A GPU pod the exporters do not show is listed too: `unknown` on a node whose exporter
//! did not answer, its phase when not running, `not attributed` otherwise.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Report, num, opt, unknown_warnings};
use crate::cluster::PodInfo;
use crate::cost;
use crate::fleet::{Fleet, short_model};
use crate::readings::{Gpu, Holder};
use crate::share::{Device, Idle, share_text};
use crate::table::{Cell, Column, Table, Tone, natural};
use crate::units::{self, NONE, UNKNOWN};

/// Which pods the view covers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    /// `None`: all namespaces.
    pub namespace: Option<String>,
    /// Only pods the API listed (a label selector was given).
    pub listed_only: bool,
}

fn columns(all_namespaces: bool) -> Vec<Column> {
    let mut c = Vec::new();
    if all_namespaces {
        c.push(Column::text("NAMESPACE"));
    }
    c.extend([
        Column::text("POD"),
        Column::text("NODE"),
        Column::text("DEVICE"),
        Column::figure("SHARE"),
        Column::figure("UTIL"),
        Column::figure("MEMORY"),
        Column::text("CONTAINERS").wide(),
        Column::text("MODEL").wide(),
        Column::figure("UTIL/SHARE").wide(),
        Column::figure("COST").wide(),
        Column::text("IDLE").wide(),
    ]);
    c
}

/// What a pod asked for: `MIG 3g.40gb`, `GPU ×2`, `nvidia.com/gpu.shared ×1`.
pub fn requested(pod: &PodInfo) -> String {
    let parts: Vec<String> = pod
        .gpu_requests
        .iter()
        .filter(|(_, n)| **n > 0.0)
        .map(|(name, n)| match name.strip_prefix("nvidia.com/") {
            Some("gpu") => format!("GPU ×{n}"),
            Some(rest) if rest.starts_with("mig-") => {
                let profile = &rest[4..];
                if *n == 1.0 { format!("MIG {profile}") } else { format!("MIG {profile} ×{n}") }
            }
            _ => format!("{name} ×{n}"),
        })
        .collect();
    if parts.is_empty() { NONE.into() } else { parts.join(", ") }
}

fn requests(pod: &PodInfo) -> Value {
    Value::Object(pod.gpu_requests.iter().map(|(k, v)| (k.clone(), num(*v))).collect())
}

struct Row {
    cells: Vec<Cell>,
    item: Value,
}

fn push_row(rows: &mut Vec<Row>, all_ns: bool, namespace: &str, mut cells: Vec<Cell>, item: Value) {
    if all_ns {
        cells.insert(0, Cell::text(namespace));
    }
    rows.push(Row { cells, item });
}

fn idle_text(idle: Idle) -> Cell {
    match idle {
        Idle::Idle => Cell::text("idle").tone(Tone::Warn),
        Idle::Busy => Cell::text("no"),
        Idle::Unknown => Cell::text(UNKNOWN).tone(Tone::Dim),
    }
}

fn in_scope(scope: &Scope, namespace: &str) -> bool {
    scope.namespace.as_deref().is_none_or(|n| n == namespace)
}

/// One holder's row: node, GPU, device, the holder and what its share costs.
fn holder_row(
    node: &str,
    gpu: &Gpu,
    device: &Device<'_>,
    holder: &Holder,
    cost: Option<&cost::HolderCost>,
) -> (Vec<Cell>, Value) {
    let name = match device.instance {
        None => device.label(),
        Some(_) => format!("{} (GPU {})", device.label(), gpu.index),
    };
    let (_, total) = device.memory();
    let of_share = device.utilization_of_share(holder);
    let dollars = cost.and_then(|c| c.dollars_per_hour);
    let idle = cost.map_or(Idle::Unknown, |c| c.idle);
    let containers = if holder.containers.is_empty() { NONE.into() } else { holder.containers.join(",") };
    let cells = vec![
        Cell::text(&holder.pod),
        Cell::text(node),
        Cell::text(name),
        Cell::number(share_text(device), device.share()),
        Cell::number(units::percent(holder.utilization), holder.utilization),
        Cell::number(units::memory(holder.memory_used_bytes, total), holder.memory_used_bytes),
        Cell::text(containers),
        Cell::text(short_model(&gpu.model)),
        Cell::number(units::percent(of_share), of_share),
        Cell::number(if dollars.is_some() { units::dollars(dollars) } else { "no price".into() }, dollars),
        idle_text(idle),
    ];
    let item = json!({
        "namespace": holder.namespace, "pod": holder.pod, "node": node,
        "containers": holder.containers, "model": gpu.model, "gpu": gpu.index,
        "device": device.label(), "migProfile": device.instance.map(|i| i.profile.clone()),
        "gpuInstanceId": device.instance.map(|i| i.gpu_instance_id),
        "share": share_text(device), "shareOfGpu": opt(device.share()),
        "utilizationPercent": opt(holder.utilization), "utilizationOfSharePercent": opt(of_share),
        "memoryUsedBytes": opt(holder.memory_used_bytes), "deviceMemoryTotalBytes": opt(total),
        "dollarsPerHour": opt(dollars), "idle": idle, "source": "exporter",
    });
    (cells, item)
}

fn holder_rows(
    fleet: &Fleet,
    prices: &cost::CostReport,
    scope: &Scope,
    listed: &BTreeMap<(String, String), &PodInfo>,
) -> Vec<Row> {
    let all_ns = scope.namespace.is_none();
    let mut rows = Vec::new();
    let priced: BTreeMap<(&str, u32, &str, &str, &str), &cost::HolderCost> = prices
        .holders
        .iter()
        .map(|h| ((h.node.as_str(), h.gpu, h.device.as_str(), h.namespace.as_str(), h.pod.as_str()), h))
        .collect();
    for node in &fleet.nodes {
        let Some(r) = node.readings() else { continue };
        let name = node.info.name.as_str();
        for gpu in &r.gpus {
            for device in Device::of(gpu) {
                let label = device.label();
                for holder in device.holders() {
                    let key = (holder.namespace.clone(), holder.pod.clone());
                    if !in_scope(scope, &holder.namespace) || (scope.listed_only && !listed.contains_key(&key)) {
                        continue;
                    }
                    let cost =
                        priced.get(&(name, gpu.index, label.as_str(), holder.namespace.as_str(), holder.pod.as_str()));
                    let (cells, item) = holder_row(name, gpu, &device, holder, cost.copied());
                    push_row(&mut rows, all_ns, &holder.namespace, cells, item);
                }
            }
        }
    }
    rows
}

fn unseen_row(fleet: &Fleet, pod: &PodInfo, all_ns: bool, rows: &mut Vec<Row>) {
    let node = pod.node.clone().unwrap_or_else(|| NONE.into());
    let (why, tone) = match pod.node.as_deref().and_then(|n| fleet.node(n)) {
        _ if pod.phase != "Running" => (pod.phase.clone(), Tone::Dim),
        Some(entry) if entry.readings().is_none() => (UNKNOWN.to_string(), Tone::Warn),
        _ => ("not attributed".to_string(), Tone::Warn),
    };
    let unknown = why == UNKNOWN;
    let figure = || {
        Cell::number(if unknown { UNKNOWN } else { NONE }, None).tone(if unknown { Tone::Warn } else { Tone::Plain })
    };
    let cells = vec![
        Cell::text(&pod.name),
        Cell::text(&node),
        Cell::text(format!("{} ({why})", requested(pod))).tone(tone),
        figure(),
        figure(),
        figure(),
        Cell::text(NONE),
        Cell::text(NONE),
        figure(),
        figure(),
        Cell::text(NONE),
    ];
    let item = json!({
        "namespace": pod.namespace, "pod": pod.name, "node": pod.node, "phase": pod.phase,
        "requested": requests(pod), "device": Value::Null, "state": why, "source": "exporter",
    });
    push_row(rows, all_ns, &pod.namespace, cells, item);
}

/// The pods view from the exporters' readings.
pub fn report(fleet: &Fleet, prices: &cost::CostReport, scope: &Scope) -> Report {
    let all_ns = scope.namespace.is_none();
    let listed: BTreeMap<(String, String), &PodInfo> =
        fleet.pods.iter().map(|p| ((p.namespace.clone(), p.name.clone()), p)).collect();
    let mut rows = holder_rows(fleet, prices, scope, &listed);
    let seen: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.item["namespace"].as_str().unwrap_or_default().to_string(),
                r.item["pod"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for pod in fleet.pods.iter().filter(|p| in_scope(scope, &p.namespace)) {
        if !seen.contains(&(pod.namespace.clone(), pod.name.clone())) {
            unseen_row(fleet, pod, all_ns, &mut rows);
        }
    }
    // kubectl's order: namespace, then name; a pod's devices in node and GPU order.
    let text = |r: &Row, k: &str| r.item[k].as_str().unwrap_or_default().to_string();
    rows.sort_by(|a, b| {
        text(a, "namespace")
            .cmp(&text(b, "namespace"))
            .then_with(|| natural(&text(a, "pod"), &text(b, "pod")))
            .then_with(|| natural(&text(a, "node"), &text(b, "node")))
            .then_with(|| a.item["gpu"].as_u64().cmp(&b.item["gpu"].as_u64()))
            .then_with(|| a.item["gpuInstanceId"].as_u64().cmp(&b.item["gpuInstanceId"].as_u64()))
    });
    let mut table = Table { columns: columns(all_ns), ..Table::default() };
    let mut items = Vec::new();
    for r in rows {
        table.rows.push(r.cells);
        items.push(r.item);
    }
    Report { kind: "GPUPodList", table, items, warnings: unknown_warnings(fleet), ..Report::default() }
}

/// A pod's aggregates from the custom metrics API.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PodMetrics {
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<f64>,
}

/// The share of a GPU a MIG profile is, from its name (`3g.40gb`: 3 of 7 slices).
pub fn profile_share(profile: &str) -> Option<String> {
    let slices: u64 = profile.split_once("g.")?.0.rsplit('.').next()?.parse().ok()?;
    let g = gcd(slices, 7).max(1);
    Some(if slices == 7 { "1".into() } else { format!("{}/{}", slices / g, 7 / g) })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The pods view from the custom metrics API (`namespace`'s pods only).
pub fn from_metrics(pods: &[PodInfo], metrics: &BTreeMap<String, PodMetrics>, namespace: &str) -> Report {
    let mut table = Table { columns: columns(false), ..Table::default() };
    let mut items = Vec::new();
    for pod in pods.iter().filter(|p| p.namespace == namespace) {
        let m = metrics.get(&pod.name).copied().unwrap_or_default();
        let mig: Vec<&str> = pod.gpu_requests.keys().filter_map(|k| k.strip_prefix("nvidia.com/mig-")).collect();
        let share = match mig.as_slice() {
            [one] if pod.gpu_requests.values().filter(|v| **v > 0.0).count() == 1 => profile_share(one),
            _ => None,
        };
        let running = pod.phase == "Running";
        let device = if running { requested(pod) } else { format!("{} ({})", requested(pod), pod.phase) };
        let dash = || Cell::number(NONE, None);
        let cells = vec![
            Cell::text(&pod.name),
            Cell::text(pod.node.clone().unwrap_or_else(|| NONE.into())),
            Cell::text(device).tone(if running { Tone::Plain } else { Tone::Dim }),
            Cell::number(share.clone().unwrap_or_else(|| NONE.into()), None),
            Cell::number(units::percent(m.utilization), m.utilization),
            Cell::number(units::bytes(m.memory_used_bytes), m.memory_used_bytes),
            Cell::text(NONE),
            Cell::text(NONE),
            dash(),
            dash(),
            Cell::text(NONE),
        ];
        items.push(json!({
            "namespace": pod.namespace, "pod": pod.name, "node": pod.node, "phase": pod.phase,
            "requested": requests(pod), "device": requested(pod), "share": share,
            "utilizationPercent": opt(m.utilization), "memoryUsedBytes": opt(m.memory_used_bytes),
            "source": "custom-metrics",
        }));
        table.rows.push(cells);
    }
    let mut report = Report { kind: "GPUPodList", table, items, ..Report::default() };
    report.sort("pod").ok();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_profiles_read_as_devices() {
        let pod =
            |k: &str, n: f64| PodInfo { gpu_requests: BTreeMap::from([(k.to_string(), n)]), ..PodInfo::default() };
        assert_eq!(requested(&pod("nvidia.com/mig-3g.40gb", 1.0)), "MIG 3g.40gb");
        assert_eq!(requested(&pod("nvidia.com/mig-1g.10gb", 2.0)), "MIG 1g.10gb ×2");
        assert_eq!(requested(&pod("nvidia.com/gpu", 2.0)), "GPU ×2");
        assert_eq!(requested(&pod("nvidia.com/gpu.shared", 1.0)), "nvidia.com/gpu.shared ×1");
        assert_eq!(requested(&PodInfo::default()), "-");
        assert_eq!(profile_share("3g.40gb").as_deref(), Some("3/7"));
        assert_eq!(profile_share("1c.3g.40gb").as_deref(), Some("3/7"));
        assert_eq!(profile_share("7g.80gb").as_deref(), Some("1"));
        assert_eq!(profile_share("weird"), None);
    }
}
