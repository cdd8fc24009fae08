//! The Grafana dashboards under `dashboards/`: well-formed, every panel on the
//! dashboard's data-source variable, every query accepted by a real Prometheus, Debian's
//! 2.42 and a built 3.x (template variables replaced as Grafana would), and naming only
//! metrics the exporter serves; the PromQL examples in `docs/metrics.md` are accepted
//! too. The Rightsizing row's answer is checked with both flavours' `promtool test rules`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use test_support::prometheus::{Flavour, Launch, Promtool};

fn dashboards() -> Vec<(String, serde_json::Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| (p.display().to_string(), serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty());
    out
}

fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn panels_are_well_formed() {
    for (file, dashboard) in dashboards() {
        assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()), "{file}: uid");
        let mut ids = std::collections::BTreeSet::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            assert!(ids.insert(panel["id"].as_u64().unwrap()), "{file}: duplicate panel id {}", panel["id"]);
            if panel["type"] == "row" {
                continue;
            }
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{file}: {}", panel["title"]);
            assert!(!panel["targets"].as_array().unwrap().is_empty(), "{file}: {} has no query", panel["title"]);
        }
        // A label variable offers "All" as `.*` (what `concrete` puts in its place), which
        // also matches series without the label: a default install sets no `cluster`, so
        // its `$cluster` has no value but All.
        for variable in dashboard["templating"]["list"].as_array().unwrap().iter().filter(|v| v["type"] == "query") {
            assert!(
                variable["includeAll"] == true && variable["allValue"] == ".*",
                "{file}: variable {} must include All as .*",
                variable["name"]
            );
        }
    }
}

/// The query as Grafana sends it, with its template variables replaced.
fn concrete(expr: &str) -> String {
    expr.replace("$cluster", ".*").replace("$node", ".*").replace("$__rate_interval", "1m").replace("$__range", "1h")
}

#[test]
fn every_query_is_valid_promql_in_prometheus_2() {
    every_query_is_valid(Flavour::V2);
}

#[test]
fn every_query_is_valid_promql_in_prometheus_3() {
    every_query_is_valid(Flavour::V3);
}

fn every_query_is_valid(flavour: Flavour) {
    let prometheus = Launch::new(flavour).start();
    for (file, dashboard) in dashboards() {
        for expr in queries(&dashboard) {
            let (status, body) = prometheus.query_raw(&concrete(&expr));
            assert_eq!(status, 200, "{flavour}: {file}: {expr}: {body}");
        }
    }
    // The worked joins users copy from the metrics reference.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).unwrap();
    let examples: Vec<&str> = doc.split("```promql\n").skip(1).filter_map(|rest| rest.split("```").next()).collect();
    assert!(examples.len() >= 3, "docs/metrics.md has its join examples");
    for expr in examples {
        let (status, body) = prometheus.query_raw(expr);
        assert_eq!(status, 200, "{flavour}: docs/metrics.md: {expr}: {body}");
    }
}

/// The series alerts/gpu-rules.yaml records (the cost row reads them).
fn recorded_rules() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../alerts/gpu-rules.yaml");
    let rules: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["record"].as_str().map(str::to_string))
        .collect()
}

/// The label names an expression uses (in `by`/`without`/`on`/`ignoring`/`group_*`
/// clauses and in matchers), which are not metrics even when they start with `gpu_`
/// (`gpu_instance_id`).
fn label_names(expr: &str) -> std::collections::BTreeSet<&str> {
    let clauses = regex::Regex::new(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)").unwrap();
    let matchers = regex::Regex::new(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)").unwrap();
    let mut names: std::collections::BTreeSet<&str> = clauses
        .captures_iter(expr)
        .flat_map(|c| c.get(1).map_or("", |m| m.as_str()).split(',').map(str::trim))
        .filter(|name| !name.is_empty())
        .collect();
    names.extend(matchers.captures_iter(expr).filter_map(|c| c.get(1)).map(|m| m.as_str()));
    names
}

#[test]
fn label_names_are_told_from_metrics() {
    let names =
        label_names("max by (node, gpu_instance_id) (gpu_memory_used_bytes{gpu_x=\"1\"}) / on(uuid) group_left () y");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["gpu_instance_id", "gpu_x", "node", "uuid"]);
}

#[test]
fn queries_name_only_metrics_the_exporter_serves() {
    let mut known: Vec<String> = gpu_exporter::render::families::ALL.iter().map(|f| f.sample_name()).collect();
    known.extend(gpu_exporter::health::metrics::ALL.iter().map(|f| f.sample_name()));
    known.extend(recorded_rules());
    for (file, dashboard) in dashboards() {
        let variables =
            dashboard["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["definition"].as_str());
        for expr in queries(&dashboard).iter().map(String::as_str).chain(variables) {
            let labels = label_names(expr);
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
                if labels.contains(word) {
                    continue;
                }
                if word.starts_with("gpu_") || (word.contains(':') && word.contains(":gpu_")) {
                    assert!(known.iter().any(|k| k == word), "{file}: unknown metric {word} in {expr}");
                }
            }
        }
    }
}

/// The Rightsizing row on series whose answer is worked out by hand: an A100 held alone
/// that peaked at 10 of its 80 GiB with a p95 of 12 % ($3.50/h), and one that peaked at
/// 40 GiB (not oversized). The first needs 1.2 × 10 / 80 = 15 % of its device, more than
/// its 12 % compute, so at most 85 % of $3.50/h is saved: $2.975/h. The same with a
/// `cluster` label and without one (a default install sets no constant label, and the
/// row groups and joins by cluster).
#[test]
fn the_rightsizing_row_prices_what_oversized_workloads_do_not_use() {
    let (_, dashboard) = dashboards().into_iter().find(|(f, _)| f.ends_with("gpu-overview.json")).unwrap();
    let panel = |title: &str| -> String {
        let p = dashboard["panels"].as_array().unwrap().iter().find(|p| p["title"] == title).unwrap();
        concrete(p["targets"][0]["expr"].as_str().unwrap())
    };
    let gib = 1u64 << 30;
    let group = |cluster: &str| {
        let device = |pod: &str, uuid: &str| {
            format!("{cluster}node=\"n\",gpu=\"0\",uuid=\"{uuid}\",namespace=\"ai\",pod=\"{pod}\"")
        };
        let (small, big) = (device("small", "GPU-1"), device("big", "GPU-2"));
        format!(
            r#"  - interval: 5m
    name: 'rightsizing, {cluster_name}'
    input_series:
      - {{series: 'pod_device:gpu_memory_used_bytes:max1h{{{small}}}', values: '{small_peak}x12'}}
      - {{series: 'pod_device:gpu_memory_used_bytes:max1h{{{big}}}', values: '{big_peak}x12'}}
      - {{series: 'pod_device:gpu_utilization:p95_1h{{{small}}}', values: '12x12'}}
      - {{series: 'pod_device:gpu_utilization:p95_1h{{{big}}}', values: '12x12'}}
      - {{series: 'gpu_memory_total_bytes{{{small}}}', values: '{total}x12'}}
      - {{series: 'gpu_memory_total_bytes{{{big}}}', values: '{total}x12'}}
      - {{series: 'pod_device:gpu_cost_dollars_per_hour{{{small},compute_instance_id=""}}', values: '3.5x12'}}
      - {{series: 'pod_device:gpu_cost_dollars_per_hour{{{big},compute_instance_id=""}}', values: '3.5x12'}}
    promql_expr_test:
      - expr: '{held}'
        eval_time: 1h
        exp_samples: [{{labels: '{{}}', value: 3.5}}]
      - expr: 'round({saving}, 0.001)'
        eval_time: 1h
        exp_samples: [{{labels: '{{}}', value: 2.975}}]
"#,
            cluster_name = if cluster.is_empty() { "no cluster label" } else { "cluster label" },
            small_peak = 10 * gib,
            big_peak = 40 * gib,
            total = 80 * gib,
            held = panel("Held by oversized workloads").replace('\'', "''"),
            saving = panel("Saving, at most").replace('\'', "''"),
        )
    };
    let test = format!("rule_files: []\nevaluation_interval: 5m\ntests:\n{}{}", group("cluster=\"c\","), group(""));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rightsizing.test.yaml");
    std::fs::write(&file, &test).unwrap();
    for flavour in Flavour::ALL {
        let run = Promtool::new(flavour).args(["test", "rules"]).arg(&file).run();
        assert!(run.success, "{flavour}: {}\n{test}", run.report);
    }
}
