//! The Prometheus rules under `alerts/`: valid for promtool and their unit tests passing,
//! in Debian's Prometheus 2.42 and in a built 3.x alike (users run both; Prometheus 3
//! changed range selectors, regexes and functions the rules use: docs/design.md), a
//! runbook section for every alert, and only metric names the exporter serves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde::Deserialize;
use test_support::prometheus::{Flavour, Promtool};

fn alerts_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../alerts")
}

fn promtool(flavour: Flavour, args: &[&str]) {
    Promtool::new(flavour).args(args).current_dir(alerts_dir()).check();
}

#[derive(Deserialize)]
struct Rules {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    alert: Option<String>,
    record: Option<String>,
    expr: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

fn rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(alerts_dir().join("gpu-rules.yaml")).unwrap();
    let rules: Rules = serde_yaml_ng::from_str(&text).unwrap();
    rules.groups.into_iter().flat_map(|g| g.rules).collect()
}

#[test]
fn promtool_2_checks_the_rules_and_runs_their_unit_tests() {
    promtool(Flavour::V2, &["check", "rules", "gpu-rules.yaml"]);
    promtool(Flavour::V2, &["test", "rules", "tests/gpu-rules.test.yaml"]);
}

#[test]
fn promtool_3_checks_the_rules_and_runs_their_unit_tests() {
    promtool(Flavour::V3, &["check", "rules", "gpu-rules.yaml"]);
    promtool(Flavour::V3, &["test", "rules", "tests/gpu-rules.test.yaml"]);
}

/// Prometheus 3's ranges are left-open (docs/design.md, "Prometheus 2 and 3"): where an
/// evaluation falls on a scrape, as every evaluation of `promtool test rules` does, the
/// sample 10 minutes back is out of `increase(...[10m])`. A GPU whose XID counter of a
/// code (born at its first XID, long before) steps from 1 to 2 at 16m (1m scrapes) has
/// GPUHardwareXid active through 25m in 2.42 and through 24m in 3.x; the unit tests under
/// alerts/tests/ therefore check it away from that boundary.
fn xid_alert_last_active(flavour: Flavour, active_at_25m: bool) {
    let expect = |active: bool| if active { "[{labels: '{}', value: 1}]" } else { "[]" };
    let test = format!(
        "rule_files: ['{}']\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      \
         - {{series: 'gpu_xid_errors_total{{node=\"n\",gpu=\"0\",uuid=\"U\",xid=\"79\"}}', values: '1x15 2x30'}}\n    \
         promql_expr_test:\n{}",
        alerts_dir().join("gpu-rules.yaml").display(),
        [("15m", false), ("16m", true), ("24m", true), ("25m", active_at_25m), ("26m", false)]
            .iter()
            .map(|(at, active)| {
                format!(
                    "      - {{expr: 'count(ALERTS{{alertname=\"GPUHardwareXid\"}})', eval_time: {at}, exp_samples: {}}}\n",
                    expect(*active)
                )
            })
            .collect::<String>()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("xid-boundary.test.yaml");
    std::fs::write(&file, &test).unwrap();
    let run = Promtool::new(flavour).args(["test", "rules"]).arg(&file).run();
    assert!(run.success, "{flavour}:\n{}\n{test}", run.report);
}

#[test]
fn prometheus_2_keeps_the_xid_alert_active_while_the_step_is_ten_minutes_back() {
    xid_alert_last_active(Flavour::V2, true);
}

#[test]
fn prometheus_3_resolves_the_xid_alert_one_scrape_earlier_on_aligned_evaluations() {
    xid_alert_last_active(Flavour::V3, false);
}

#[test]
fn every_alert_has_a_runbook_section() {
    let runbook = std::fs::read_to_string(alerts_dir().join("runbook.md")).unwrap();
    for rule in rules() {
        let Some(alert) = rule.alert else { continue };
        let url = rule.annotations.get("runbook_url").unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        assert!(url.ends_with(&format!("alerts/runbook.md#{}", alert.to_lowercase())), "{alert}: {url}");
        assert!(runbook.contains(&format!("\n## {alert}\n")), "runbook.md has no section for {alert}");
    }
}

#[test]
fn every_alert_has_a_unit_test() {
    let tests = std::fs::read_to_string(alerts_dir().join("tests/gpu-rules.test.yaml")).unwrap();
    for alert in rules().into_iter().filter_map(|r| r.alert) {
        assert!(tests.contains(&format!("alertname: {alert}\n")), "no unit test for {alert}");
    }
}

/// `expr` without the label lists of `by`, `without`, `on`, `ignoring`, `group_left` and
/// `group_right` (label names such as `gpu_instance_id` are not metrics).
fn without_label_lists(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(open) = rest.find('(') {
        let before = &rest[..open];
        let word = before.trim_end().rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or("");
        let listed = ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word);
        out.push_str(before);
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
        if !listed {
            out.push('(');
            rest = &rest[open + 1..];
            continue;
        }
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[test]
fn label_lists_are_not_taken_for_metrics() {
    assert_eq!(
        without_label_lists("sum by (gpu_instance_id) (gpu_up) * on (gpu_instance_id) group_left () x"),
        "sum by  (gpu_up) * on  group_left  x"
    );
}

#[test]
fn rules_use_only_metrics_the_exporter_serves() {
    let mut known: Vec<String> = gpu_exporter::render::families::ALL.iter().map(|f| f.sample_name()).collect();
    known.extend(gpu_exporter::health::metrics::ALL.iter().map(|f| f.sample_name()));
    let recorded: Vec<String> = rules().into_iter().filter_map(|r| r.record).collect();
    for rule in rules() {
        for word in
            without_label_lists(&rule.expr).split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        {
            if word.starts_with("gpu_") {
                assert!(
                    known.contains(&word.to_string()) || recorded.contains(&word.to_string()),
                    "unknown metric {word} in {}",
                    rule.expr
                );
            }
        }
    }
}

#[test]
fn the_hardware_xid_alert_pages_on_exactly_the_codes_the_health_loop_acts_on() {
    use gpu_health::xid::{DEFAULT_TABLE, XidClass};
    // The alert never calls an application fault hardware, and misses no code the loop
    // holds a GPU for.
    let mut acted: Vec<u64> = DEFAULT_TABLE.iter().filter(|x| x.class != XidClass::Event).map(|x| x.code).collect();
    acted.sort_unstable();
    acted.dedup();
    let expected = acted.iter().map(u64::to_string).collect::<Vec<_>>().join("|");
    let alert = rules().into_iter().find(|r| r.alert.as_deref() == Some("GPUHardwareXid")).unwrap();
    let regexes: Vec<&str> = alert.expr.split("xid=~\"").skip(1).map(|rest| &rest[..rest.find('"').unwrap()]).collect();
    assert!(!regexes.is_empty(), "the alert selects XIDs by a regex");
    for regex in regexes {
        assert_eq!(regex, expected, "GPUHardwareXid's XID regex is not the loop's acted-on codes");
    }
}
