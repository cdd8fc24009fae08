//! `kubectl gpu nodes`: one row per GPU node.
//!
//! - GPUS: model × count (`4× A100-SXM4-80GB`); from GPU feature discovery's labels when
//!   the exporter did not answer.
//! - MIG: the layout in short form, per GPU index range: `0:2×3g.40gb 1:7×1g.10gb`,
//!   `0-7:7×1g.10gb`; GPUs not in MIG mode are left out, `-` when none is.
//! - UTIL: mean over the GPUs with a figure, `(2 of 4)` when some have none (A100s in
//!   MIG mode have no utilization at all). A MIG-mode GPU whose instances all have one
//!   (GPM, Hopper and newer) counts with the slice-weighted mean of its instances, free
//!   slices as idle.
//! - MEMORY, POWER: sums over whole GPUs; HOTTEST: the highest temperature and its GPU.
//! - HEALTH: [`super::health`].

use serde_json::{Value, json};

use super::{Report, health, num, opt, unknown_warnings};
use crate::fleet::{Fleet, NodeEntry, short_model};
use crate::readings::Gpu;
use crate::table::{Cell, Column, Table, Tone};
use crate::units::{self, UNKNOWN};

const COLUMNS: &[Column] = &[
    Column::text("NODE"),
    Column::text("GPUS"),
    Column::text("MIG"),
    Column::figure("UTIL"),
    Column::figure("MEMORY"),
    Column::figure("POWER"),
    Column::figure("HOTTEST"),
    Column::text("HEALTH"),
    Column::text("EXPORTER").wide(),
    Column::text("READY").wide(),
];

/// `4× A100-SXM4-80GB`, `2× H100 80GB HBM3, 1× L40S`.
pub fn models(gpus: &[Gpu]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for g in gpus {
        let m = short_model(&g.model);
        match counts.iter_mut().find(|(x, _)| *x == m) {
            Some((_, n)) => *n += 1,
            None => counts.push((m, 1)),
        }
    }
    if counts.is_empty() {
        return "0".into();
    }
    counts.iter().map(|(m, n)| format!("{n}× {m}")).collect::<Vec<_>>().join(", ")
}

/// One GPU's MIG layout: `2×3g.40gb`, `1×4g.40gb+2×1g.10gb`; `empty` in MIG mode with
/// no instance; `None` when not in MIG mode.
pub fn gpu_layout(gpu: &Gpu) -> Option<String> {
    if !gpu.mig_enabled && gpu.instances.is_empty() {
        return None;
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for i in &gpu.instances {
        match counts.iter_mut().find(|(p, _)| *p == i.profile) {
            Some((_, n)) => *n += 1,
            None => counts.push((&i.profile, 1)),
        }
    }
    if counts.is_empty() {
        return Some("empty".into());
    }
    Some(counts.iter().map(|(p, n)| format!("{n}×{p}")).collect::<Vec<_>>().join("+"))
}

/// The node's layout: runs of GPUs with the same layout, `0:2×3g.40gb 1:7×1g.10gb`.
pub fn layout(gpus: &[Gpu]) -> String {
    let mut runs: Vec<(u32, u32, String)> = Vec::new();
    for g in gpus {
        let Some(l) = gpu_layout(g) else { continue };
        match runs.last_mut() {
            Some((_, last, prev)) if *prev == l && *last + 1 == g.index => *last = g.index,
            _ => runs.push((g.index, g.index, l)),
        }
    }
    if runs.is_empty() {
        return "-".into();
    }
    let text: Vec<String> =
        runs.into_iter().map(|(a, b, l)| if a == b { format!("{a}:{l}") } else { format!("{a}-{b}:{l}") }).collect();
    text.join(" ")
}

/// A GPU's utilization for the node mean.
pub fn gpu_utilization(gpu: &Gpu) -> Option<f64> {
    if let Some(u) = gpu.utilization {
        return Some(u);
    }
    let total = gpu.mig_slices.filter(|t| *t > 0.0)?;
    if gpu.instances.is_empty() {
        return None;
    }
    let mut busy = 0.0;
    for i in &gpu.instances {
        busy += i.utilization? * i.slices?;
    }
    Some(busy / total)
}

struct Figures {
    util: Option<f64>,
    util_known: usize,
    used: Option<f64>,
    total: Option<f64>,
    power: Option<f64>,
    hottest: Option<(u32, f64)>,
}

fn sum(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.flatten().fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
}

fn figures(gpus: &[Gpu]) -> Figures {
    let utils: Vec<f64> = gpus.iter().filter_map(gpu_utilization).collect();
    let util = if utils.is_empty() { None } else { Some(utils.iter().sum::<f64>() / utils.len() as f64) };
    let hottest = gpus.iter().filter_map(|g| g.temperature_celsius.map(|t| (g.index, t))).fold(
        None,
        |best: Option<(u32, f64)>, (i, t)| match best {
            Some((_, b)) if b >= t => best,
            _ => Some((i, t)),
        },
    );
    Figures {
        util,
        util_known: utils.len(),
        used: sum(gpus.iter().map(|g| g.memory_used_bytes)),
        total: sum(gpus.iter().map(|g| g.memory_total_bytes)),
        power: sum(gpus.iter().map(|g| g.power_watts)),
        hottest,
    }
}

fn util_tone(u: Option<f64>) -> Tone {
    match u {
        Some(u) if u < 10.0 => Tone::Warn,
        Some(_) => Tone::Plain,
        None => Tone::Dim,
    }
}

fn row(entry: &NodeEntry) -> (Vec<Cell>, Value) {
    let info = &entry.info;
    let readings = entry.readings();
    let health_cell = health::cell(info, readings);
    let ready = match info.ready {
        Some(true) => Cell::text("True"),
        Some(false) => Cell::text("False").tone(Tone::Bad),
        None => Cell::text("Unknown"),
    };
    let name = Cell::text(&info.name);
    let Some(r) = readings else {
        let (reason, detail) = entry.unknown().unwrap_or((crate::fleet::UnknownReason::Unreachable, ""));
        let gpus = info.labelled_gpus().map_or_else(|| "unknown".into(), |(m, n)| format!("{n}× {m}"));
        let unknown = || Cell::number(UNKNOWN, None).tone(Tone::Warn);
        let cells = vec![
            name,
            Cell::text(gpus),
            unknown(),
            unknown(),
            unknown(),
            unknown(),
            unknown(),
            health_cell,
            Cell::text(reason.as_str()).tone(Tone::Warn),
            ready,
        ];
        let item = json!({
            "name": info.name, "exporter": {"state": "unknown", "reason": reason, "detail": detail},
            "gpus": Value::Null, "labelledGpus": info.labelled_gpus().map(|(m, n)| json!({"model": m, "count": n})),
            "health": health::json(info, None), "ready": info.ready,
        });
        return (cells, item);
    };
    let f = figures(&r.gpus);
    let util_text = match f.util {
        Some(u) if f.util_known < r.gpus.len() => {
            format!("{} ({} of {})", units::percent(Some(u)), f.util_known, r.gpus.len())
        }
        u => units::percent(u),
    };
    let hottest = f.hottest.map_or_else(|| "-".into(), |(i, t)| format!("{} (GPU {i})", units::celsius(Some(t))));
    let exporter = if r.nvml_up == Some(false) { Cell::text("nvml down").tone(Tone::Bad) } else { Cell::text("ok") };
    let cells = vec![
        name,
        Cell::text(models(&r.gpus)),
        Cell::text(layout(&r.gpus)),
        Cell::number(util_text, f.util).tone(util_tone(f.util)),
        Cell::number(units::memory(f.used, f.total), f.used),
        Cell::number(units::watts(f.power), f.power),
        Cell::number(hottest, f.hottest.map(|h| h.1)),
        health_cell,
        exporter,
        ready,
    ];
    let item = json!({
        "name": info.name,
        "exporter": {"state": if r.nvml_up == Some(false) { "nvml-down" } else { "ok" }, "nvmlError": r.nvml_error},
        "gpus": r.gpus.iter().map(|g| json!({"index": g.index, "model": g.model, "uuid": g.uuid, "migLayout": gpu_layout(g)})).collect::<Vec<_>>(),
        "gpuCount": r.gpus.len(),
        "models": models(&r.gpus),
        "migLayout": layout(&r.gpus),
        "utilizationPercent": opt(f.util),
        "utilizationGpus": f.util_known,
        "memoryUsedBytes": opt(f.used),
        "memoryTotalBytes": opt(f.total),
        "powerWatts": opt(f.power),
        "hottest": f.hottest.map(|(i, t)| json!({"gpu": i, "temperatureCelsius": num(t)})),
        "health": health::json(info, Some(r)),
        "ready": info.ready,
    });
    (cells, item)
}

/// Builds the report.
pub fn report(fleet: &Fleet) -> Report {
    let mut table = Table { columns: COLUMNS.to_vec(), ..Table::default() };
    let mut items = Vec::new();
    for entry in &fleet.nodes {
        let (cells, item) = row(entry);
        table.rows.push(cells);
        items.push(item);
    }
    Report { kind: "GPUNodeList", table, items, warnings: unknown_warnings(fleet), ..Report::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readings::MigInstance;

    fn mig(index: u32, profiles: &[&str]) -> Gpu {
        Gpu {
            index,
            model: "NVIDIA A100-SXM4-80GB".into(),
            mig_enabled: true,
            instances: profiles
                .iter()
                .map(|p| MigInstance { profile: (*p).into(), ..MigInstance::default() })
                .collect(),
            ..Gpu::default()
        }
    }

    #[test]
    fn the_mig_layout_is_written_short() {
        let whole = |index| Gpu { index, model: "NVIDIA A100-SXM4-80GB".into(), ..Gpu::default() };
        let seed = [mig(0, &["3g.40gb", "3g.40gb"]), mig(1, &["1g.10gb"; 7]), whole(2), whole(3)];
        assert_eq!(layout(&seed), "0:2×3g.40gb 1:7×1g.10gb");
        assert_eq!(models(&seed), "4× A100-SXM4-80GB");
        let all: Vec<Gpu> = (0..8).map(|i| mig(i, &["1g.10gb"; 7])).collect();
        assert_eq!(layout(&all), "0-7:7×1g.10gb");
        let scheme = [mig(0, &["4g.40gb", "1g.10gb", "1g.10gb"]), mig(1, &[])];
        assert_eq!(layout(&scheme), "0:1×4g.40gb+2×1g.10gb 1:empty");
        assert_eq!(layout(&[whole(0)]), "-");
        let split = [mig(0, &["1g.10gb"]), whole(1), mig(2, &["1g.10gb"])];
        assert_eq!(layout(&split), "0:1×1g.10gb 2:1×1g.10gb", "a run is of consecutive GPUs");
    }

    #[test]
    fn utilization_of_a_mig_gpu_is_slice_weighted_when_every_instance_has_one() {
        let mut g = mig(0, &["3g.40gb", "3g.40gb"]);
        g.mig_slices = Some(7.0);
        assert_eq!(gpu_utilization(&g), None);
        for (i, u) in g.instances.iter_mut().zip([70.0, 35.0]) {
            i.slices = Some(3.0);
            i.utilization = Some(u);
        }
        assert_eq!(gpu_utilization(&g), Some(45.0), "(70×3 + 35×3) / 7, the free slice idle");
        let f =
            figures(&[g, Gpu { utilization: Some(15.0), temperature_celsius: Some(70.0), index: 1, ..Gpu::default() }]);
        assert_eq!((f.util, f.util_known, f.hottest), (Some(30.0), 2, Some((1, 70.0))));
    }
}
