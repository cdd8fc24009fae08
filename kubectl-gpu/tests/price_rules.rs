//! The price table and the `gpu-cost` recording rules agree: the block between the
//! markers in `alerts/gpu-rules.yaml` is exactly what `kubectl_gpu::rules::cost_group`
//! generates from `alerts/gpu-prices.yaml` (the table the plugin compiles in). Rewrite
//! the block with `UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test price_rules`, then run
//! `scripts/gen-deploy` for the PrometheusRule copy under deploy/.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use kubectl_gpu::prices::{DEFAULT_TABLE, PriceTable};
use kubectl_gpu::rules::{BEGIN, END, cost_group};

fn rules_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../alerts/gpu-rules.yaml")
}

#[test]
fn the_cost_rules_are_generated_from_the_price_table() {
    let table = PriceTable::defaults().unwrap();
    let wanted = cost_group(&table);
    test_support::golden::block(
        &rules_file(),
        &format!("{BEGIN}:"),
        &format!("{END}\n"),
        &wanted,
        "UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test price_rules, then scripts/gen-deploy",
    );
}

#[test]
fn the_compiled_in_table_is_the_file() {
    let file =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../alerts/gpu-prices.yaml")).unwrap();
    assert_eq!(DEFAULT_TABLE, file);
}

#[test]
fn a_changed_price_changes_the_rules() {
    let mut table = PriceTable::defaults().unwrap();
    let before = cost_group(&table);
    table.apply_flag("H100=4.75").unwrap();
    let after = cost_group(&table);
    assert_ne!(before, after, "the test above would catch a price changed in one place only");
    assert!(after.contains("4.75 * group by (cluster, node, gpu, uuid, model) (gpu_info{model=~\"NVIDIA H100.*\"}"));
}
