//! The `gpu-cost` recording rules, generated from the price table so that Prometheus
//! and `kubectl gpu cost` price the fleet by the same table and the same rules:
//! first matching model entry ([`crate::prices`]), MIG instances by compute slices and
//! equal splits between holders ([`crate::share`]), idle under the table's floor.
//!
//! [`cost_group`] writes the group as it stands in `alerts/gpu-rules.yaml`, between
//! [`BEGIN`] and [`END`]; `kubectl-gpu/tests/price_rules.rs` fails while the file and the
//! table disagree and rewrites the block with `UPDATE_GOLDEN=1`.
//!
//! Series (every one also carries `cluster`):
//! - `gpu:gpu_price_dollars_per_hour` per GPU (`node, gpu, uuid, model`); none for a
//!   model without a price, which `gpu:gpu_unpriced` (1 per GPU) and
//!   `model:gpu_unpriced:count` name instead, so it is never priced at zero;
//! - per device (`node, gpu, uuid, gpu_instance_id, compute_instance_id`):
//!   `device:gpu_fraction:ratio`, `device:gpu_holders:count`;
//! - per device and holder (`namespace, pod` too): `pod_device:gpu_holder`,
//!   `pod_device:gpu_share:ratio`, `pod_device:gpu_share_utilization:percent`,
//!   `pod_device:gpu_idle_share:ratio`, `pod_device:gpu_cost_dollars_per_hour`,
//!   `pod_device:gpu_idle_cost_dollars_per_hour`;
//! - sums `namespace:`, `pod:`, `node:`, `model:` and `cluster:gpu_cost_dollars_per_hour:sum`
//!   and their `gpu_idle_cost_dollars_per_hour` twins; `node:`, `model:` and
//!   `cluster:gpu_capacity_dollars_per_hour:sum`; `model:gpu_idle_gpus:sum` and
//!   `model:gpu_unallocated_gpus:sum` (GPUs' worth).

use crate::prices::PriceTable;

/// The line that opens the generated block in `alerts/gpu-rules.yaml`.
pub const BEGIN: &str = "  # BEGIN gpu-cost";
/// The line that closes it.
pub const END: &str = "  # END gpu-cost";

const DEVICE: &str = "cluster, node, gpu, uuid, gpu_instance_id, compute_instance_id";
const HOLDER: &str = "cluster, node, gpu, uuid, gpu_instance_id, compute_instance_id, namespace, pod";
const GPU: &str = "cluster, node, gpu, uuid";

/// A PromQL string literal holding `text`.
fn promql_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn rule(out: &mut String, comment: &str, record: &str, expr: &str) {
    for line in comment.lines() {
        out.push_str(&format!("      # {line}\n"));
    }
    out.push_str(&format!("      - record: {record}\n        expr: |\n"));
    for line in expr.trim_end().lines() {
        out.push_str(&format!("          {line}\n"));
    }
}

fn price_rules(out: &mut String, table: &PriceTable) {
    let mut earlier: Vec<String> = Vec::new();
    for (i, entry) in table.entries.iter().enumerate() {
        let matcher = format!("gpu_info{{model=~{}}}", promql_string(&entry.pattern));
        let selected = if earlier.is_empty() {
            matcher
        } else {
            let previous = promql_string(&earlier.join("|"));
            format!("{matcher} unless on ({GPU}) gpu_info{{model=~{previous}}}")
        };
        let comment = if i == 0 {
            format!(
                "Every GPU's price: the first entry of alerts/gpu-prices.yaml whose match fits its model.\n{}: ${}/h.",
                entry.name, entry.dollars_per_hour
            )
        } else {
            format!("{}: ${}/h, unless an earlier entry matched.", entry.name, entry.dollars_per_hour)
        };
        let expr = format!("{} * group by ({GPU}, model) ({selected})", entry.dollars_per_hour);
        rule(out, &comment, "gpu:gpu_price_dollars_per_hour", &expr);
        // The entry that priced the GPU; it also keeps the rules apart for promtool's lint.
        out.push_str(&format!("        labels:\n          price_entry: {}\n", promql_string(&entry.name)));
        earlier.push(format!("(?:{})", entry.pattern));
    }
}

fn device_rules(out: &mut String, floor: f64) {
    rule(
        out,
        "GPUs whose model has no price: 1 each; they are in no cost below, and never at zero.",
        "gpu:gpu_unpriced",
        &format!("group by ({GPU}, model) (gpu_info) unless on ({GPU}) gpu:gpu_price_dollars_per_hour"),
    );
    rule(
        out,
        "The fraction of its GPU a device is: 1 for a GPU not in MIG mode; a MIG instance's\ncompute slices over the GPU's (3g.40gb on an A100: 3/7).",
        "device:gpu_fraction:ratio",
        &format!(
            "group by ({GPU}, model) (gpu_info unless on ({GPU}) (gpu_mig_enabled == 1))\nor\n(\n  max by ({DEVICE}, model, mig_profile) (gpu_mig_instance_compute_slices)\n  / on ({GPU}) group_left ()\n  max by ({GPU}) (gpu_mig_compute_slices)\n)"
        ),
    );
    rule(
        out,
        "1 per pod holding a device: a gpu_pod_memory_used_bytes series on it (every holding\ncontainer has one), or the exclusive holder gpu_device_pod_info names.",
        "pod_device:gpu_holder",
        &format!("group by ({HOLDER}) (gpu_pod_memory_used_bytes)\nor\ngroup by ({HOLDER}) (gpu_device_pod_info)"),
    );
    rule(
        out,
        "Holders per device.",
        "device:gpu_holders:count",
        &format!("count by ({DEVICE}) (pod_device:gpu_holder)"),
    );
    rule(
        out,
        "Each holder's share of the GPU: the device's fraction split equally between its holders\n(time-slicing, MPS): 1/4 each for four pods on one GPU.",
        "pod_device:gpu_share:ratio",
        &format!(
            "pod_device:gpu_holder\n  * on ({DEVICE}) group_left (model, mig_profile)\n  (device:gpu_fraction:ratio / on ({DEVICE}) group_left () device:gpu_holders:count)"
        ),
    );
    rule(
        out,
        "A holder's utilization of its share: its own utilization of the device times the\nholders, at most 100.",
        "pod_device:gpu_share_utilization:percent",
        &format!(
            "clamp_max(\n    sum by ({HOLDER}) (gpu_pod_utilization)\n  * on ({DEVICE}) group_left ()\n    device:gpu_holders:count,\n  100\n)"
        ),
    );
    rule(
        out,
        &format!(
            "The shares of idle holders: under {floor} % of their share, or with no utilization\nfigure (MIG on GPUs without GPM) on a device that runs no process."
        ),
        "pod_device:gpu_idle_share:ratio",
        &format!(
            "pod_device:gpu_share:ratio\n  and on ({HOLDER})\n  (\n    pod_device:gpu_share_utilization:percent < {floor}\n    or\n    (\n      (pod_device:gpu_holder unless on ({HOLDER}) pod_device:gpu_share_utilization:percent)\n      and on ({DEVICE})\n      (max by ({DEVICE}) (gpu_processes) == 0)\n    )\n  )"
        ),
    );
    rule(
        out,
        "Dollars per hour each holder's share costs.",
        "pod_device:gpu_cost_dollars_per_hour",
        &format!("pod_device:gpu_share:ratio * on ({GPU}) group_left () gpu:gpu_price_dollars_per_hour"),
    );
    rule(
        out,
        "The idle part of it: waste.",
        "pod_device:gpu_idle_cost_dollars_per_hour",
        &format!("pod_device:gpu_idle_share:ratio * on ({GPU}) group_left () gpu:gpu_price_dollars_per_hour"),
    );
}

fn sum_rules(out: &mut String) {
    for (level, by) in [
        ("namespace", "cluster, namespace"),
        ("pod", "cluster, namespace, pod"),
        ("node", "cluster, node"),
        ("model", "cluster, model"),
        ("cluster", "cluster"),
    ] {
        rule(
            out,
            &format!("Allocated and idle dollars per hour by {level}."),
            &format!("{level}:gpu_cost_dollars_per_hour:sum"),
            &format!("sum by ({by}) (pod_device:gpu_cost_dollars_per_hour)"),
        );
        rule(
            out,
            "",
            &format!("{level}:gpu_idle_cost_dollars_per_hour:sum"),
            &format!("sum by ({by}) (pod_device:gpu_idle_cost_dollars_per_hour)"),
        );
    }
    for (level, by) in [("node", "cluster, node"), ("model", "cluster, model"), ("cluster", "cluster")] {
        rule(
            out,
            &format!("What the priced GPUs cost per hour, held or not, by {level}."),
            &format!("{level}:gpu_capacity_dollars_per_hour:sum"),
            &format!("sum by ({by}) (gpu:gpu_price_dollars_per_hour)"),
        );
    }
    rule(out, "Unpriced GPUs by model.", "model:gpu_unpriced:count", "count by (cluster, model) (gpu:gpu_unpriced)");
    rule(
        out,
        "Idle GPUs' worth by model (held by idle pods).",
        "model:gpu_idle_gpus:sum",
        "sum by (cluster, model) (pod_device:gpu_idle_share:ratio)",
    );
    rule(
        out,
        "GPUs' worth nobody holds, by model: GPUs, MIG instances and free slices.",
        "model:gpu_unallocated_gpus:sum",
        &format!(
            "count by (cluster, model) (group by ({GPU}, model) (gpu_info))\n  - (\n    sum by (cluster, model) (pod_device:gpu_share:ratio)\n    or\n    0 * count by (cluster, model) (group by ({GPU}, model) (gpu_info))\n  )"
        ),
    );
}

/// The generated block, [`BEGIN`] to [`END`] inclusive, each line ending in a newline.
pub fn cost_group(table: &PriceTable) -> String {
    let mut out = String::new();
    out.push_str(BEGIN);
    out.push_str(": generated from alerts/gpu-prices.yaml; do not edit. Regenerate with\n");
    out.push_str("  # `UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test price_rules`, then scripts/gen-deploy.\n");
    out.push_str("  # The rules are the ones kubectl gpu cost applies (docs/kubectl-gpu.md, \"Cost\").\n");
    out.push_str("  - name: gpu-cost\n    rules:\n");
    price_rules(&mut out, table);
    device_rules(&mut out, table.idle_below_percent);
    sum_rules(&mut out);
    out.push_str(END);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_one_price_rule_and_later_ones_skip_earlier_matches() {
        let table = PriceTable::parse("t", "models:\n  - {name: A, match: 'NVIDIA A.*', dollars_per_hour: 1}\n  - {name: B, match: 'NVIDIA \"B\\d\"', dollars_per_hour: 2.5}\n").unwrap();
        let text = cost_group(&table);
        assert!(
            text.contains("1 * group by (cluster, node, gpu, uuid, model) (gpu_info{model=~\"NVIDIA A.*\"})"),
            "{text}"
        );
        assert!(
            text.contains("2.5 * group by (cluster, node, gpu, uuid, model) (gpu_info{model=~\"NVIDIA \\\"B\\\\d\\\"\"} unless on (cluster, node, gpu, uuid) gpu_info{model=~\"(?:NVIDIA A.*)\"})"),
            "{text}"
        );
        assert_eq!(text.matches("- record: gpu:gpu_price_dollars_per_hour\n").count(), 2);
        assert!(text.starts_with(BEGIN) && text.ends_with(&format!("{END}\n")));
        let doc = format!("groups:\n{text}");
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&doc).unwrap();
        assert_eq!(parsed["groups"][0]["name"].as_str(), Some("gpu-cost"));
    }
}
