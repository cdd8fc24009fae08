//! `kubectl gpu gpus [NODE]`: one row per GPU, each followed by its MIG instances.
//!
//! GPU-wide readings (power, temperature, clocks, throttling, ECC, row remapping, XIDs)
//! exist on the GPU only, as the exporter serves them; an instance row has `-` there.
//! - THROTTLE: the clock-event reasons active now (`idle`, `power-cap`, `hw-thermal`,
//!   ...), `none` when the GPU reports reasons and none is active.
//! - ECC: volatile corrected/uncorrected errors (since the driver loaded or the GPU was
//!   reset). REMAP: remapped rows correctable/uncorrectable, then `pending` or `failed`.
//! - XID(1H): codes whose last event was in the hour before the read; the counts in
//!   `-o json` are since the exporter started.
//! - DEVICE: the model, with `(lost)`, `(held)` (the health loop keeps the GPU alone
//!   from the scheduler by DRA device taints), `(stale)` or `(MIG)`.
//! - POD: the holder (`namespace/pod`), `N pods` on a shared device (`-o wide` names
//!   them), `-` when nobody holds it.

use gpu_health::xid::{DEFAULT_TABLE, XidClass};
use serde_json::{Value, json};

use super::{Report, opt, unknown_warnings};
use crate::fleet::{Fleet, NodeEntry, short_model};
use crate::readings::{Gpu, Holder};
use crate::share::Device;
use crate::table::{Cell, Column, Table, Tone};
use crate::units::{self, NONE, UNKNOWN};

const COLUMNS: &[Column] = &[
    Column::text("NODE"),
    Column::text("GPU"),
    Column::text("DEVICE"),
    Column::figure("UTIL"),
    Column::figure("MEMORY"),
    Column::figure("POWER"),
    Column::figure("TEMP"),
    Column::figure("CLOCKS"),
    Column::text("THROTTLE"),
    Column::figure("ECC"),
    Column::figure("REMAP"),
    Column::text("XID(1H)"),
    Column::text("POD"),
    Column::text("UUID").wide(),
    Column::figure("PROCESSES").wide(),
];

const HOUR: f64 = 3600.0;

/// The short name of a clock-event reason.
pub fn throttle_name(reason: &str) -> &str {
    match reason {
        "gpu_idle" => "idle",
        "applications_clocks_setting" => "app-clocks",
        "sw_power_cap" => "power-cap",
        "hw_slowdown" => "hw-slowdown",
        "sync_boost" => "sync-boost",
        "sw_thermal_slowdown" => "sw-thermal",
        "hw_thermal_slowdown" => "hw-thermal",
        "hw_power_brake_slowdown" => "power-brake",
        "display_clock_setting" => "display",
        other => other,
    }
}

fn throttle(gpu: &Gpu, read: bool) -> Cell {
    if gpu.throttle.is_empty() {
        return Cell::text(if read { "none" } else { NONE });
    }
    let names: Vec<&str> = gpu.throttle.iter().map(|r| throttle_name(r)).collect();
    let hard = gpu.throttle.iter().any(|r| r.starts_with("hw_") || r == "sw_thermal_slowdown");
    Cell::text(names.join(",")).tone(if hard { Tone::Warn } else { Tone::Plain })
}

/// XIDs seen in the hour before `now`.
pub fn recent_xids(gpu: &Gpu, now: f64) -> Vec<u32> {
    gpu.xids.iter().filter(|x| x.last_seen.is_some_and(|t| t >= now - HOUR)).map(|x| x.code).collect()
}

fn xid_cell(codes: &[u32]) -> Cell {
    if codes.is_empty() {
        return Cell::number(NONE, Some(0.0));
    }
    let hardware =
        codes.iter().any(|c| DEFAULT_TABLE.iter().any(|x| x.code == u64::from(*c) && x.class != XidClass::Event));
    let text: Vec<String> = codes.iter().map(u32::to_string).collect();
    Cell::number(text.join(","), Some(codes.len() as f64)).tone(if hardware { Tone::Bad } else { Tone::Warn })
}

fn pair(a: Option<f64>, b: Option<f64>) -> Option<String> {
    match (a, b) {
        (None, None) => None,
        (a, b) => {
            Some(format!("{}/{}", a.map_or(NONE.into(), |v| v.to_string()), b.map_or(NONE.into(), |v| v.to_string())))
        }
    }
}

/// `ns/pod`, `4 pods`, or `-`; wide lists every holder.
pub fn holders_text(holders: &[Holder], wide: bool) -> String {
    match holders {
        [] => NONE.into(),
        [h] => format!("{}/{}", h.namespace, h.pod),
        many if wide => many.iter().map(|h| format!("{}/{}", h.namespace, h.pod)).collect::<Vec<_>>().join(","),
        many => format!("{} pods", many.len()),
    }
}

fn holders_json(holders: &[Holder]) -> Vec<Value> {
    holders
        .iter()
        .map(|h| json!({"namespace": h.namespace, "pod": h.pod, "containers": h.containers, "utilizationPercent": opt(h.utilization), "memoryUsedBytes": opt(h.memory_used_bytes)}))
        .collect()
}

fn gpu_row(node: &str, gpu: &Gpu, now: f64) -> (Vec<Cell>, Value) {
    let mig = gpu.mig_enabled || !gpu.instances.is_empty();
    let mut device = short_model(&gpu.model).to_string();
    let mut tone = Tone::Plain;
    if gpu.lost {
        device.push_str(" (lost)");
        tone = Tone::Bad;
    } else if gpu.held {
        // Kept from the scheduler alone by the health loop's DRA device taints.
        device.push_str(" (held)");
        tone = Tone::Bad;
    } else if gpu.stale {
        device.push_str(" (stale)");
        tone = Tone::Bad;
    } else if mig {
        device.push_str(" (MIG)");
    }
    let clocks = match (gpu.sm_clock_mhz, gpu.mem_clock_mhz) {
        (None, None) => NONE.to_string(),
        (sm, mem) => format!("{}/{}", sm.map_or(NONE.into(), |v| (v.round() as i64).to_string()), units::mhz(mem)),
    };
    let ecc = pair(gpu.ecc_corrected, gpu.ecc_uncorrected);
    let ecc_tone = if gpu.ecc_uncorrected.is_some_and(|v| v > 0.0) { Tone::Bad } else { Tone::Plain };
    let mut remap = pair(gpu.remapped_correctable, gpu.remapped_uncorrectable);
    let mut remap_tone = Tone::Plain;
    if gpu.remap_failed || gpu.remap_pending {
        let word = if gpu.remap_failed { "failed" } else { "pending" };
        remap = Some(format!("{} {word}", remap.unwrap_or_default()).trim().to_string());
        remap_tone = Tone::Bad;
    }
    let xids = recent_xids(gpu, now);
    let holders = if mig { &[][..] } else { &gpu.holders[..] };
    let read = gpu.up != Some(false);
    let cells = vec![
        Cell::text(node),
        Cell::number(gpu.index.to_string(), Some(f64::from(gpu.index))),
        Cell::text(device).tone(tone),
        Cell::number(units::percent(gpu.utilization), gpu.utilization),
        Cell::number(units::memory(gpu.memory_used_bytes, gpu.memory_total_bytes), gpu.memory_used_bytes),
        Cell::number(units::watts(gpu.power_watts), gpu.power_watts),
        Cell::number(units::celsius(gpu.temperature_celsius), gpu.temperature_celsius),
        Cell::number(clocks, gpu.sm_clock_mhz),
        throttle(gpu, read && gpu.sm_clock_mhz.is_some()),
        Cell::number(ecc.unwrap_or_else(|| NONE.into()), gpu.ecc_uncorrected).tone(ecc_tone),
        Cell::number(remap.unwrap_or_else(|| NONE.into()), gpu.remapped_uncorrectable).tone(remap_tone),
        xid_cell(&xids),
        Cell::text(holders_text(holders, false)),
        Cell::text(&gpu.uuid),
        Cell::number(gpu.processes.map_or(NONE.into(), |p| p.to_string()), gpu.processes),
    ];
    let item = json!({
        "node": node, "gpu": gpu.index, "id": gpu.index.to_string(), "kind": "gpu",
        "model": gpu.model, "uuid": gpu.uuid, "migEnabled": mig,
        "up": gpu.up, "lost": gpu.lost, "stale": gpu.stale, "heldByDeviceTaints": gpu.held,
        "utilizationPercent": opt(gpu.utilization),
        "memoryUsedBytes": opt(gpu.memory_used_bytes), "memoryTotalBytes": opt(gpu.memory_total_bytes),
        "powerWatts": opt(gpu.power_watts), "powerLimitWatts": opt(gpu.power_limit_watts),
        "temperatureCelsius": opt(gpu.temperature_celsius), "slowdownTemperatureCelsius": opt(gpu.slowdown_celsius),
        "smClockMhz": opt(gpu.sm_clock_mhz), "memClockMhz": opt(gpu.mem_clock_mhz),
        "throttleReasons": gpu.throttle,
        "eccVolatileCorrected": opt(gpu.ecc_corrected), "eccVolatileUncorrected": opt(gpu.ecc_uncorrected),
        "remappedRowsCorrectable": opt(gpu.remapped_correctable), "remappedRowsUncorrectable": opt(gpu.remapped_uncorrectable),
        "remapPending": gpu.remap_pending, "remapFailed": gpu.remap_failed,
        "xidsLastHour": xids,
        "xids": gpu.xids.iter().map(|x| json!({"xid": x.code, "countSinceExporterStart": x.count})).collect::<Vec<_>>(),
        "processes": opt(gpu.processes),
        "holders": holders_json(holders),
    });
    (cells, item)
}

fn instance_rows(node: &str, gpu: &Gpu) -> Vec<(Vec<Cell>, Value)> {
    let mut out = Vec::new();
    for device in Device::of(gpu) {
        let Some(i) = device.instance else { continue };
        let dash = || Cell::number(NONE, None);
        let (used, total) = device.memory();
        let cells = vec![
            Cell::text(node),
            Cell::number(device.id(), Some(f64::from(gpu.index) + f64::from(i.gpu_instance_id) / 100.0)),
            Cell::text(device.label()),
            Cell::number(units::percent(i.utilization), i.utilization),
            Cell::number(units::memory(used, total), used),
            dash(),
            dash(),
            dash(),
            Cell::text(NONE),
            dash(),
            dash(),
            dash(),
            Cell::text(holders_text(&i.holders, false)),
            Cell::text(&i.mig_uuid),
            Cell::number(i.processes.map_or(NONE.into(), |p| p.to_string()), i.processes),
        ];
        let item = json!({
            "node": node, "gpu": gpu.index, "id": device.id(), "kind": "mig",
            "model": gpu.model, "uuid": gpu.uuid, "migProfile": i.profile, "migUuid": i.mig_uuid,
            "gpuInstanceId": i.gpu_instance_id, "computeInstanceId": i.compute_instance_id,
            "computeSlices": opt(i.slices), "gpuComputeSlices": opt(gpu.mig_slices),
            "utilizationPercent": opt(i.utilization),
            "memoryUsedBytes": opt(used), "memoryTotalBytes": opt(total),
            "processes": opt(i.processes),
            "holders": holders_json(&i.holders),
        });
        out.push((cells, item));
    }
    out
}

fn unknown_row(entry: &NodeEntry) -> (Vec<Cell>, Value) {
    let (reason, detail) = entry.unknown().unwrap_or((crate::fleet::UnknownReason::Unreachable, ""));
    let mut cells = vec![
        Cell::text(&entry.info.name),
        Cell::number(NONE, None),
        Cell::text(format!("unknown ({})", reason.as_str())).tone(Tone::Warn),
    ];
    cells.extend((3..COLUMNS.len()).map(|_| Cell::number(UNKNOWN, None).tone(Tone::Warn)));
    let item = json!({"node": entry.info.name, "kind": "unknown", "exporter": {"state": "unknown", "reason": reason, "detail": detail}});
    (cells, item)
}

/// Builds the report, for one node if `node` is given.
pub fn report(fleet: &Fleet, node: Option<&str>) -> Report {
    let mut table = Table { columns: COLUMNS.to_vec(), ..Table::default() };
    let mut items = Vec::new();
    for entry in fleet.nodes.iter().filter(|n| node.is_none_or(|x| x == n.info.name)) {
        let rows = match entry.readings() {
            None => vec![unknown_row(entry)],
            Some(r) => {
                let mut rows = Vec::new();
                for gpu in &r.gpus {
                    rows.push(gpu_row(&entry.info.name, gpu, fleet.now));
                    rows.extend(instance_rows(&entry.info.name, gpu));
                }
                rows
            }
        };
        for (cells, item) in rows {
            table.rows.push(cells);
            items.push(item);
        }
    }
    let mut report = Report { kind: "GPUList", table, items, warnings: unknown_warnings(fleet), ..Report::default() };
    report.warnings.retain(|w| node.is_none_or(|n| w.starts_with(&format!("node {n}:"))));
    report
}

/// The wide POD cell lists every holder; the table keeps the short form otherwise.
pub fn widen_holders(report: &mut Report) {
    let Ok(col) = report.table.column("POD") else { return };
    for (row, item) in report.table.rows.iter_mut().zip(&report.items) {
        let holders: Vec<Holder> = item["holders"]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .map(|h| Holder {
                        namespace: h["namespace"].as_str().unwrap_or_default().into(),
                        pod: h["pod"].as_str().unwrap_or_default().into(),
                        ..Holder::default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if holders.len() > 1
            && let Some(cell) = row.get_mut(col)
        {
            *cell = Cell::text(holders_text(&holders, true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readings::Xid;

    #[test]
    fn xids_of_the_last_hour_only_and_hardware_ones_in_red() {
        let gpu = Gpu {
            xids: vec![
                Xid { code: 13, count: 4.0, last_seen: Some(1000.0) },
                Xid { code: 79, count: 1.0, last_seen: Some(5000.0) },
                Xid { code: 31, count: 1.0, last_seen: None },
            ],
            ..Gpu::default()
        };
        assert_eq!(recent_xids(&gpu, 5000.0), [79]);
        assert_eq!(recent_xids(&gpu, 4500.0), [13, 79]);
        assert_eq!(xid_cell(&[79]).tone, Tone::Bad);
        assert_eq!(xid_cell(&[13, 31]).tone, Tone::Warn);
        assert_eq!(xid_cell(&[]).text, "-");
    }

    #[test]
    fn throttle_and_holders_read_short() {
        let gpu = Gpu { throttle: vec!["gpu_idle".into(), "hw_thermal_slowdown".into()], ..Gpu::default() };
        let c = throttle(&gpu, true);
        assert_eq!((c.text.as_str(), c.tone), ("idle,hw-thermal", Tone::Warn));
        assert_eq!(throttle(&Gpu::default(), true).text, "none");
        assert_eq!(throttle(&Gpu::default(), false).text, "-");
        let h = |p: &str| Holder { namespace: "ai".into(), pod: p.into(), ..Holder::default() };
        assert_eq!(holders_text(&[], false), "-");
        assert_eq!(holders_text(&[h("a")], false), "ai/a");
        assert_eq!(holders_text(&[h("a"), h("b")], false), "2 pods");
        assert_eq!(holders_text(&[h("a"), h("b")], true), "ai/a,ai/b");
    }
}
