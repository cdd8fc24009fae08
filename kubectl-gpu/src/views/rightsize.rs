//! `kubectl gpu rightsize`: one row per workload and device kind, with what it used
//! over the window, the device it should have and the dollars that frees; a TOTAL row
//! and a summary line that gives the saving as a share of what the workloads cost now;
//! with `--plan`, the node plan and its mig-parted config after the table.
//!
//! The arithmetic is [`crate::rightsize`]; this module lays it out. A workload whose
//! model the catalog does not know, or that the price table does not price, is shown
//! and named in a warning, and left out of the sums (never counted as zero).
//!
//! Without a Prometheus, [`snapshot`] relabels `kubectl gpu pods`' current readings as
//! what they are: a snapshot of now, not a recommendation.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Report, num, opt};
use crate::prices::PriceTable;
use crate::rightsize::history::{Source, WorkloadObservation};
use crate::rightsize::mig_parted;
use crate::rightsize::plan::{self, Demand, GpuUse, NodeGpus, NodePlan};
use crate::rightsize::price::{self, HOURS_PER_MONTH, Saving, Totals};
use crate::rightsize::recommend::{Device, Flag, Recommendation, Rules, Verdict, recommend};
use crate::table::{Cell, Column, Table, Tone};
use crate::units::{self, NONE};

/// What the report is built from.
pub struct Input<'a> {
    pub observations: &'a [WorkloadObservation],
    pub prices: &'a PriceTable,
    pub rules: Rules,
    pub source: Source,
    /// How the messages name the Prometheus.
    pub prometheus: &'a str,
    pub window_seconds: f64,
    /// The GPU nodes, for `--plan`; `None` without it.
    pub plan: Option<&'a [NodeGpus]>,
}

const COLUMNS: [Column; 17] = [
    Column::text("WORKLOAD"),
    Column::text("NAMESPACE"),
    Column::text("KIND"),
    Column::figure("PODS"),
    Column::text("MODEL").wide(),
    Column::text("DEVICE"),
    Column::figure("PEAK-MEM"),
    Column::figure("P95-MEM"),
    Column::figure("P95-COMPUTE"),
    Column::figure("NEEDED-MEM").wide(),
    Column::figure("HISTORY").wide(),
    Column::text("RECOMMENDATION"),
    Column::figure("SAVED/H"),
    Column::figure("SAVED/MONTH"),
    Column::text("FLAGS"),
    Column::text("NODES").wide(),
    Column::text("SOURCE").wide(),
];

fn signed_dollars(v: f64, per: &str) -> String {
    if v < -0.005 { format!("-${:.2}/{per}", -v) } else { format!("${:.2}/{per}", v.max(0.0)) }
}

fn days(seconds: f64) -> String {
    let hours = seconds / 3600.0;
    if hours >= 24.0 { format!("{:.1}d", hours / 24.0).replace(".0d", "d") } else { format!("{hours:.0}h") }
}

/// `keep`, `MIG 1g.20gb`, `outgrew: MIG 1g.20gb`, `unknown`.
pub fn verdict_text(r: &Recommendation) -> String {
    match r.verdict {
        Verdict::Move(d) => d.label(),
        Verdict::Keep => "keep".into(),
        Verdict::Outgrew { to: Some(d) } => format!("outgrew: {}", d.label()),
        Verdict::Outgrew { to: None } => "outgrew: nothing larger".into(),
        Verdict::Unknown => "unknown".into(),
    }
}

fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::Move(_) => "move",
        Verdict::Keep => "keep",
        Verdict::Outgrew { .. } => "outgrew",
        Verdict::Unknown => "unknown",
    }
}

fn device_json(d: &Device, r: &Recommendation) -> Value {
    let profile = match d {
        Device::Mig(p) => Value::from(p.name),
        _ => Value::Null,
    };
    json!({"device": d.label(), "migProfile": profile, "fraction": num(d.fraction()), "memoryBytes": num(d.memory_bytes(r.model))})
}

/// One row: the recommendation (or why there is none) and its saving.
struct Row<'a> {
    obs: &'a WorkloadObservation,
    rec: Result<Recommendation, String>,
    saving: Option<Saving>,
}

fn rows<'a>(input: &Input<'a>) -> Vec<Row<'a>> {
    input
        .observations
        .iter()
        .map(|obs| {
            let rec = recommend(&obs.observed, &input.rules).map_err(|e| e.to_string());
            let saving =
                rec.as_ref().ok().and_then(|r| price::saving(r, &obs.observed.model, obs.observed.pods, input.prices));
            Row { obs, rec, saving }
        })
        .collect()
}

fn flags_text(flags: &[Flag]) -> String {
    flags.iter().map(Flag::text).collect::<Vec<_>>().join("; ")
}

fn cells(row: &Row, source: Source) -> Vec<Cell> {
    let o = &row.obs.observed;
    let k = &row.obs.key;
    let pods = row.obs.pods.len();
    let mut cells = vec![
        Cell::text(&k.name),
        Cell::text(&k.namespace),
        Cell::text(k.kind.as_str()),
        Cell::number(pods.to_string(), Some(pods as f64)),
        Cell::text(if o.model.is_empty() { crate::units::UNKNOWN } else { crate::fleet::short_model(&o.model) }),
    ];
    let (device, needed, verdict, flags, tone) = match &row.rec {
        Ok(r) => {
            let tone = match r.verdict {
                Verdict::Move(_) if r.is_certain() => Tone::Good,
                Verdict::Move(_) | Verdict::Unknown => Tone::Warn,
                Verdict::Outgrew { .. } => Tone::Bad,
                Verdict::Keep => Tone::Plain,
            };
            (r.current.label(), r.needed_memory_bytes, verdict_text(r), flags_text(&r.flags), tone)
        }
        Err(_) => {
            (NONE.to_string(), None, "unsupported".to_string(), "model not in the catalog".to_string(), Tone::Warn)
        }
    };
    let history = (o.history_seconds > 0.0).then_some(o.history_seconds);
    cells.extend([
        Cell::text(device),
        Cell::number(units::bytes(o.peak_memory_bytes), o.peak_memory_bytes),
        Cell::number(units::bytes(o.p95_memory_bytes), o.p95_memory_bytes),
        Cell::number(units::percent(o.p95_compute_percent), o.p95_compute_percent),
        Cell::number(units::bytes(needed), needed),
        Cell::number(history.map_or_else(|| NONE.to_string(), days), history),
        Cell::text(verdict).tone(tone),
    ]);
    match row.saving {
        Some(s) => {
            let saved = if matches!(row.rec.as_ref().map(|r| r.verdict), Ok(Verdict::Move(_) | Verdict::Outgrew { .. }))
            {
                s.saved_per_hour()
            } else {
                0.0
            };
            cells.push(Cell::number(signed_dollars(saved, "h"), Some(saved)));
            cells.push(Cell::number(signed_dollars(saved * HOURS_PER_MONTH, "month"), Some(saved * HOURS_PER_MONTH)));
        }
        None => {
            cells.push(Cell::number("no price", None).tone(Tone::Warn));
            cells.push(Cell::number("no price", None).tone(Tone::Warn));
        }
    }
    let warn = row.rec.as_ref().map_or(true, |r| !r.is_certain());
    cells.push(Cell::text(if flags.is_empty() { "-".to_string() } else { flags }).tone(if warn {
        Tone::Warn
    } else {
        Tone::Plain
    }));
    cells.push(Cell::text(row.obs.nodes.join(",")));
    cells.push(Cell::text(match source {
        Source::Recorded => "recorded",
        Source::Raw => "raw",
    }));
    cells
}

fn item(row: &Row) -> Value {
    let o = &row.obs.observed;
    let k = &row.obs.key;
    let mut m = Map::new();
    m.insert("workload".into(), json!({"namespace": k.namespace, "kind": k.kind.as_str(), "name": k.name}));
    m.insert("pods".into(), json!(row.obs.pods));
    m.insert("devices".into(), json!(o.pods));
    m.insert("nodes".into(), json!(row.obs.nodes));
    m.insert("model".into(), json!(o.model));
    m.insert("peakMemoryBytes".into(), opt(o.peak_memory_bytes));
    m.insert("p95MemoryBytes".into(), opt(o.p95_memory_bytes));
    m.insert("p95ComputePercent".into(), opt(o.p95_compute_percent));
    m.insert("historySeconds".into(), num(o.history_seconds.round()));
    m.insert("windowSeconds".into(), num(o.window_seconds.round()));
    m.insert("oomKills".into(), json!(o.oom_kills));
    m.insert("restarts".into(), json!(o.restarts));
    match &row.rec {
        Ok(r) => {
            m.insert("current".into(), device_json(&r.current, r));
            let mut rec = Map::new();
            rec.insert("verdict".into(), json!(verdict_name(&r.verdict)));
            rec.insert("text".into(), json!(verdict_text(r)));
            rec.insert("target".into(), device_json(&r.target(), r));
            rec.insert("neededMemoryBytes".into(), opt(r.needed_memory_bytes));
            rec.insert("neededComputeFraction".into(), opt(r.needed_compute_fraction));
            rec.insert("certain".into(), json!(r.is_certain()));
            m.insert("recommendation".into(), Value::Object(rec));
            m.insert(
                "flags".into(),
                json!(r.flags.iter().map(|f| json!({"text": f.text(), "warning": f.is_warning()})).collect::<Vec<_>>()),
            );
        }
        Err(e) => {
            m.insert("current".into(), Value::Null);
            m.insert("recommendation".into(), json!({"verdict": "unsupported", "error": e}));
            m.insert("flags".into(), json!([]));
        }
    }
    let saved = row.saving.map(|s| match row.rec.as_ref().map(|r| r.verdict) {
        Ok(Verdict::Move(_) | Verdict::Outgrew { .. }) => (s, s.saved_per_hour()),
        _ => (s, 0.0),
    });
    m.insert(
        "dollarsPerHour".into(),
        json!({
            "current": opt(saved.map(|(s, _)| s.current_per_hour)),
            "target": opt(saved.map(|(s, _)| s.target_per_hour)),
            "saved": opt(saved.map(|(_, v)| v)),
        }),
    );
    m.insert("savedDollarsPerMonth".into(), opt(saved.map(|(_, v)| v * HOURS_PER_MONTH)));
    Value::Object(m)
}

/// The summary line under the table.
pub fn summary(totals: &Totals, workloads: usize) -> String {
    let mut line = format!(
        "{workloads} workload{}: allocated {}, saved {} (${:.2}/month)",
        if workloads == 1 { "" } else { "s" },
        units::dollars(Some(totals.allocated_per_hour)),
        units::dollars(Some(totals.saved_per_hour)),
        totals.saved_per_month(),
    );
    match totals.saved_share() {
        Some(share) => line.push_str(&format!(", {:.1}% of allocated", share * 100.0)),
        None => line.push_str(", nothing priced is allocated"),
    }
    if totals.uncertain_saved_per_hour > 0.0 {
        line.push_str(&format!(
            "; {} of it from recommendations with warnings",
            units::dollars(Some(totals.uncertain_saved_per_hour))
        ));
    }
    if totals.added_per_hour > 0.0 {
        line.push_str(&format!("; outgrown workloads add {}", units::dollars(Some(totals.added_per_hour))));
    }
    if totals.unpriced > 0 {
        line.push_str(&format!("; {} unpriced left out", totals.unpriced));
    }
    line.push('.');
    line
}

/// The node plans for the rows' targets on `nodes`, and warnings for what could not be planned.
pub fn plans(rows: &[(&WorkloadObservation, Option<Device>)], nodes: &[NodeGpus]) -> (Vec<NodePlan>, Vec<String>) {
    let mut demands: BTreeMap<&str, Vec<Demand>> = BTreeMap::new();
    for (obs, device) in rows {
        let Some(device) = device else { continue };
        for (node, holder) in &obs.placements {
            demands.entry(node.as_str()).or_default().push(Demand { holder: holder.clone(), device: *device });
        }
    }
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for node in nodes {
        let Some(d) = demands.get(node.node.as_str()) else { continue };
        match plan::plan_node(node, d) {
            Ok(p) => {
                if !p.unplaced.is_empty() {
                    let who: Vec<&str> = p.unplaced.iter().map(|d| d.holder.as_str()).collect();
                    warnings.push(format!("node {}: no GPU left in the plan for {}", node.node, who.join(", ")));
                }
                out.push(p);
            }
            Err(e) => warnings.push(format!("node {}: not planned: {e}", node.node)),
        }
    }
    (out, warnings)
}

fn gpu_use_text(u: &GpuUse) -> String {
    match u {
        GpuUse::Free => "free".into(),
        GpuUse::Whole(h) => format!("whole GPU: {h}"),
        GpuUse::TimeSliced { replicas, holders } => format!("time-sliced x{replicas}: {}", holders.join(", ")),
        GpuUse::Mig(instances) => {
            let parts: Vec<String> =
                instances.iter().map(|i| format!("{} at slice {}: {}", i.profile.name, i.start, i.holder)).collect();
            format!("MIG {}", parts.join(", "))
        }
    }
}

fn plan_json(p: &NodePlan) -> Value {
    let gpus: Vec<Value> = p
        .gpus
        .iter()
        .map(|g| {
            let (kind, detail) = match &g.gpu_use {
                GpuUse::Free => ("free", json!([])),
                GpuUse::Whole(h) => ("whole", json!([h])),
                GpuUse::TimeSliced { replicas, holders } => {
                    ("time-sliced", json!({"replicas": replicas, "holders": holders}))
                }
                GpuUse::Mig(i) => (
                    "mig",
                    json!(
                        i.iter()
                            .map(|i| json!({"profile": i.profile.name, "start": i.start, "holder": i.holder}))
                            .collect::<Vec<_>>()
                    ),
                ),
            };
            json!({"index": g.index, "use": kind, "detail": detail})
        })
        .collect();
    json!({
        "node": p.node, "model": p.model.key, "gpus": gpus, "freedGpus": p.freed(),
        "unplaced": p.unplaced.iter().map(|d| d.holder.clone()).collect::<Vec<_>>(),
        "migConfig": mig_parted::config_name(&p.node),
        "label": format!("{}={}", mig_parted::LABEL, mig_parted::config_name(&p.node)),
    })
}

fn plan_text(plans: &[NodePlan]) -> String {
    let mut t = String::from("Node plan (a plan for a person to apply; nothing in the cluster was changed):\n");
    let freed: usize = plans.iter().map(NodePlan::freed).sum();
    for p in plans {
        t.push_str(&format!(
            "{} ({}, {} GPUs): {} GPU{} freed\n",
            p.node,
            p.model.key,
            p.gpus.len(),
            p.freed(),
            if p.freed() == 1 { "" } else { "s" }
        ));
        for g in &p.gpus {
            t.push_str(&format!("  GPU {}: {}\n", g.index, gpu_use_text(&g.gpu_use)));
        }
    }
    t.push_str(&format!("{freed} GPU{} freed in all.\n\n", if freed == 1 { "" } else { "s" }));
    match mig_parted::render(plans) {
        Ok(config) => t.push_str(&config),
        Err(e) => t.push_str(&format!("# the mig-parted config could not be written: {e}\n")),
    }
    t
}

/// Builds the report.
pub fn report(input: &Input) -> Report {
    let rows = rows(input);
    let mut table = Table { columns: COLUMNS.to_vec(), ..Table::default() };
    let mut items = Vec::new();
    let mut totals = Totals::default();
    let mut warnings = Vec::new();
    for row in &rows {
        table.rows.push(cells(row, input.source));
        items.push(item(row));
        match &row.rec {
            Ok(r) => {
                totals.add(r, row.saving);
                if row.saving.is_none() {
                    warnings.push(format!(
                        "{}/{}: model {:?} has no price and is left out of the sums; give one with --price",
                        row.obs.key.namespace, row.obs.key.name, row.obs.observed.model
                    ));
                }
            }
            Err(e) => {
                totals.unpriced += 1;
                warnings.push(format!("{}/{}: {e}", row.obs.key.namespace, row.obs.key.name));
            }
        }
    }
    let mut footer = vec![Cell::text("TOTAL")];
    footer.extend((0..11).map(|_| Cell::text("")));
    footer.push(Cell::number(signed_dollars(totals.saved_per_hour, "h"), Some(totals.saved_per_hour)));
    footer.push(Cell::number(signed_dollars(totals.saved_per_month(), "month"), Some(totals.saved_per_month())));
    table.footer.push(footer);

    let mut extra = Map::new();
    extra.insert("source".into(), json!(input.source));
    extra.insert("prometheus".into(), json!(input.prometheus));
    extra.insert("windowSeconds".into(), num(input.window_seconds.round()));
    extra.insert("headroomPercent".into(), num((input.rules.headroom * 100.0 * 1e6).round() / 1e6));
    extra.insert(
        "totals".into(),
        json!({
            "allocatedDollarsPerHour": num(totals.allocated_per_hour), "savedDollarsPerHour": num(totals.saved_per_hour),
            "savedDollarsPerMonth": num(totals.saved_per_month()), "savedShare": opt(totals.saved_share()),
            "uncertainSavedDollarsPerHour": num(totals.uncertain_saved_per_hour),
            "addedDollarsPerHour": num(totals.added_per_hour), "unpriced": totals.unpriced,
        }),
    );
    extra.insert("summary".into(), json!(summary(&totals, rows.len())));
    let mut trailer = String::new();
    if let Some(nodes) = input.plan {
        let targets: Vec<(&WorkloadObservation, Option<Device>)> =
            rows.iter().map(|r| (r.obs, r.rec.as_ref().ok().map(Recommendation::target))).collect();
        let (plans, plan_warnings) = plans(&targets, nodes);
        warnings.extend(plan_warnings);
        extra.insert("plan".into(), json!(plans.iter().map(plan_json).collect::<Vec<_>>()));
        extra.insert("migPartedConfig".into(), mig_parted::render(&plans).map_or(Value::Null, Value::String));
        trailer = plan_text(&plans);
    }
    Report { kind: "GPURightsizeList", table, items, extra, warnings, trailer }
}

/// `kubectl gpu pods`' report of now, labelled as a snapshot: what to say when there is
/// no Prometheus to read a window from.
pub fn snapshot(mut pods: Report, why: &str) -> Report {
    pods.kind = "GPURightsizeSnapshot";
    let line = format!(
        "SNAPSHOT, NOT A RECOMMENDATION: {why}. These are the exporters' current readings; a recommendation \
         needs a window of history (--prometheus-service NAMESPACE/NAME:PORT or --prometheus-url URL)."
    );
    pods.warnings.insert(0, line.clone());
    pods.extra.insert("summary".into(), json!(line));
    pods.extra.insert("recommendation".into(), Value::Null);
    pods
}
