//! `kubectl gpu cost [--by namespace|pod|node]`: dollars per hour allocated and idle,
//! grouped, with a TOTAL row and a summary line of the fleet's capacity and what of it
//! nobody holds. The arithmetic is [`crate::cost`]; this module only lays it out.
//!
//! A group whose every device is on an unpriced model shows `no price`; one with some
//! unpriced devices shows its priced part followed by `+N unpriced`. Unknown nodes and
//! unpriced models are named in warnings.

use serde_json::{Map, Value, json};

use super::pods::Scope;
use super::{Report, num, opt, unknown_warnings};
use crate::cost::{self, CostReport, GroupCost, Sum};
use crate::fleet::{Fleet, short_model};
use crate::prices::PriceTable;
use crate::table::{Cell, Column, Table, Tone};
use crate::units::{self, UNKNOWN};

/// How `cost` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupBy {
    Namespace,
    Pod,
    Node,
}

/// A sum as a cell: `$3.50/h`, `$3.50/h +1 unpriced`, `no price`.
pub fn sum_cell(sum: &Sum) -> Cell {
    match sum.value() {
        None => Cell::number("no price", None).tone(Tone::Warn),
        Some(v) if sum.unpriced > 0 => {
            Cell::number(format!("{} +{} unpriced", units::dollars(Some(v)), sum.unpriced), Some(v)).tone(Tone::Warn)
        }
        Some(v) => Cell::number(units::dollars(Some(v)), Some(v)),
    }
}

fn sum_json(sum: &Sum) -> Value {
    json!({"dollarsPerHour": opt(sum.value()), "unpricedDevices": sum.unpriced})
}

fn idle_cell(group: &GroupCost) -> Cell {
    let cell = sum_cell(&group.idle);
    if group.idle.value().is_some_and(|v| v > 0.0) { cell.tone(Tone::Warn) } else { cell }
}

fn idle_percent(group: &GroupCost) -> Option<f64> {
    match (group.idle.value(), group.allocated.value()) {
        (Some(i), Some(a)) if a > 0.0 => Some(100.0 * i / a),
        _ => None,
    }
}

fn group_cells(group: &GroupCost) -> Vec<Cell> {
    let pct = idle_percent(group);
    vec![
        Cell::number(units::gpus(group.gpus), Some(group.gpus)),
        sum_cell(&group.allocated),
        idle_cell(group),
        Cell::number(units::percent(pct), pct),
        Cell::number(group.idle_unknown.to_string(), Some(group.idle_unknown as f64)),
    ]
}

fn group_json(group: &GroupCost) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("gpus".into(), num(group.gpus));
    m.insert("allocated".into(), sum_json(&group.allocated));
    m.insert("idle".into(), sum_json(&group.idle));
    m.insert("idleUnknownDevices".into(), json!(group.idle_unknown));
    m.insert("devices".into(), json!(group.devices));
    m.insert("nodes".into(), json!(group.nodes));
    m
}

const GROUP_COLUMNS: [Column; 5] = [
    Column::figure("GPUS"),
    Column::figure("ALLOCATED"),
    Column::figure("IDLE"),
    Column::figure("IDLE%"),
    Column::figure("IDLE-UNKNOWN").wide(),
];

fn total(report: &CostReport) -> GroupCost {
    let mut total = GroupCost::default();
    for h in &report.holders {
        total.add(h);
    }
    total
}

fn by_namespace(report: &CostReport, table: &mut Table, items: &mut Vec<Value>) {
    table.columns = [Column::text("NAMESPACE"), Column::figure("PODS")].into_iter().chain(GROUP_COLUMNS).collect();
    let pods = cost::group_by(&report.holders, |h| (h.namespace.clone(), h.pod.clone()));
    for (ns, group) in cost::group_by(&report.holders, |h| h.namespace.clone()) {
        let n = pods.keys().filter(|(x, _)| *x == ns).count();
        let mut cells = vec![Cell::text(&ns), Cell::number(n.to_string(), Some(n as f64))];
        cells.extend(group_cells(&group));
        table.rows.push(cells);
        let mut item = group_json(&group);
        item.insert("namespace".into(), json!(ns));
        item.insert("pods".into(), json!(n));
        items.push(Value::Object(item));
    }
    let t = total(report);
    let mut footer = vec![Cell::text("TOTAL"), Cell::number(pods.len().to_string(), None)];
    footer.extend(group_cells(&t));
    table.footer.push(footer);
}

fn by_pod(report: &CostReport, table: &mut Table, items: &mut Vec<Value>) {
    table.columns = [Column::text("NAMESPACE"), Column::text("POD"), Column::text("NODE"), Column::text("DEVICES")]
        .into_iter()
        .chain(GROUP_COLUMNS)
        .collect();
    for ((ns, pod), group) in cost::group_by(&report.holders, |h| (h.namespace.clone(), h.pod.clone())) {
        let mut cells = vec![
            Cell::text(&ns),
            Cell::text(&pod),
            Cell::text(group.nodes.join(",")),
            Cell::text(group.devices.join(", ")),
        ];
        cells.extend(group_cells(&group));
        table.rows.push(cells);
        let mut item = group_json(&group);
        item.insert("namespace".into(), json!(ns));
        item.insert("pod".into(), json!(pod));
        items.push(Value::Object(item));
    }
    let mut footer = vec![Cell::text("TOTAL"), Cell::text(""), Cell::text(""), Cell::text("")];
    footer.extend(group_cells(&total(report)));
    table.footer.push(footer);
}

fn by_node(fleet: &Fleet, report: &CostReport, table: &mut Table, items: &mut Vec<Value>) {
    table.columns = [Column::text("NODE"), Column::text("MODEL"), Column::figure("CAPACITY")]
        .into_iter()
        .chain(GROUP_COLUMNS)
        .chain([Column::figure("UNALLOCATED")])
        .collect();
    let nodes = cost::by_node(report);
    for entry in &fleet.nodes {
        let name = &entry.info.name;
        let Some(node) = nodes.get(name) else {
            let reason = entry.unknown().map_or("no GPUs", |(r, _)| r.as_str());
            let unknown = || Cell::number(UNKNOWN, None).tone(Tone::Warn);
            let model = entry.info.labelled_gpus().map_or_else(|| UNKNOWN.into(), |(m, _)| m);
            let mut cells = vec![Cell::text(name), Cell::text(model)];
            cells.extend((0..7).map(|_| unknown()));
            table.rows.push(cells);
            items.push(json!({"node": name, "exporter": {"state": "unknown", "reason": reason}}));
            continue;
        };
        let mut cells = vec![Cell::text(name), Cell::text(node.models.join(", ")), sum_cell(&node.capacity)];
        cells.extend(group_cells(&node.group));
        cells.push(sum_cell(&node.unallocated));
        table.rows.push(cells);
        let mut item = group_json(&node.group);
        item.insert("node".into(), json!(name));
        item.insert("models".into(), json!(node.models));
        item.insert("capacity".into(), sum_json(&node.capacity));
        item.insert("unallocated".into(), sum_json(&node.unallocated));
        items.push(Value::Object(item));
    }
    let (capacity, unallocated) = cost::fleet_capacity(report);
    let mut footer = vec![Cell::text("TOTAL"), Cell::text(""), sum_cell(&capacity)];
    footer.extend(group_cells(&total(report)));
    footer.push(sum_cell(&unallocated));
    table.footer.push(footer);
}

/// The one-line summary under the table.
pub fn summary(report: &CostReport, nodes: usize) -> String {
    let (capacity, unallocated) = cost::fleet_capacity(report);
    let t = total(report);
    let text = |s: &Sum| s.value().map_or_else(|| "no price".to_string(), |v| units::dollars(Some(v)));
    let mut line = format!(
        "Capacity {} on {} node{}: allocated {}, idle {} (holders under {}% utilization of their share), unallocated {}.",
        text(&capacity),
        nodes,
        if nodes == 1 { "" } else { "s" },
        text(&t.allocated),
        text(&t.idle),
        report.idle_below_percent,
        text(&unallocated),
    );
    if t.idle_unknown > 0 {
        line.push_str(&format!(
            " {} allocated device(s) of unknown utilization are not counted as idle.",
            t.idle_unknown
        ));
    }
    line
}

/// The summary of a narrowed scope: its holders only, no capacity.
pub fn narrowed_summary(report: &CostReport, scope: &Scope) -> String {
    let t = total(report);
    let text = |s: &Sum| s.value().map_or_else(|| "no price".to_string(), |v| units::dollars(Some(v)));
    let what = match (&scope.namespace, scope.listed_only) {
        (Some(ns), false) => format!("Namespace {ns}"),
        (Some(ns), true) => format!("Selected pods in namespace {ns}"),
        (None, _) => "Selected pods".to_string(),
    };
    format!(
        "{what}: allocated {}, idle {} (holders under {}% utilization of their share), {} GPUs' worth.",
        text(&t.allocated),
        text(&t.idle),
        report.idle_below_percent,
        units::gpus(t.gpus)
    )
}

/// Builds the report. Holders outside `scope` are left out of the groups (after the
/// shares are computed, so a shared GPU's split does not change); a narrowed scope's
/// summary is of its holders only.
pub fn report(fleet: &Fleet, prices: &PriceTable, idle_below_percent: f64, by: GroupBy, scope: &Scope) -> Report {
    let mut r = cost::report(fleet, prices, idle_below_percent);
    let listed: std::collections::BTreeSet<(&str, &str)> =
        fleet.pods.iter().map(|p| (p.namespace.as_str(), p.name.as_str())).collect();
    r.holders.retain(|h| {
        scope.namespace.as_deref().is_none_or(|n| n == h.namespace)
            && (!scope.listed_only || listed.contains(&(h.namespace.as_str(), h.pod.as_str())))
    });
    let narrowed = scope.namespace.is_some() || scope.listed_only;
    let mut table = Table::default();
    let mut items = Vec::new();
    match by {
        GroupBy::Namespace => by_namespace(&r, &mut table, &mut items),
        GroupBy::Pod => by_pod(&r, &mut table, &mut items),
        GroupBy::Node => by_node(fleet, &r, &mut table, &mut items),
    }
    let mut warnings = unknown_warnings(fleet);
    for u in &r.unpriced {
        warnings.push(format!(
            "{} GPU{} of model {:?} (on {}) {} no price and {} left out of the figures; give one with --price {:?} or the prices ConfigMap",
            u.gpus,
            if u.gpus == 1 { "" } else { "s" },
            u.model,
            u.nodes.join(", "),
            if u.gpus == 1 { "has" } else { "have" },
            if u.gpus == 1 { "is" } else { "are" },
            format!("{}=DOLLARS", short_model(&u.model)),
        ));
    }
    let (capacity, unallocated) = cost::fleet_capacity(&r);
    let t = total(&r);
    let read_nodes = fleet.nodes.iter().filter(|n| n.readings().is_some()).count();
    let mut extra = Map::new();
    extra.insert("by".into(), json!(by));
    extra.insert("idleBelowPercent".into(), num(idle_below_percent));
    extra.insert(
        "totals".into(),
        json!({
            "capacity": sum_json(&capacity), "allocated": sum_json(&t.allocated), "idle": sum_json(&t.idle),
            "unallocated": sum_json(&unallocated), "idleUnknownDevices": t.idle_unknown, "gpus": num(t.gpus),
            "nodes": read_nodes,
        }),
    );
    extra.insert("unpriced".into(), json!(r.unpriced));
    extra.insert(
        "prices".into(),
        json!(prices.entries.iter().map(|e| json!({"name": e.name, "match": e.pattern, "dollarsPerHour": num(e.dollars_per_hour), "from": e.origin})).collect::<Vec<_>>()),
    );
    let line = if narrowed { narrowed_summary(&r, scope) } else { summary(&r, read_nodes) };
    extra.insert("summary".into(), json!(line));
    Report { kind: "GPUCostList", table, items, extra, warnings, ..Report::default() }
}
