//! The Grafana dashboards under `dashboards/`: well-formed, every panel on the
//! dashboard's data-source variable, every query accepted by a real Prometheus
//! (template variables replaced as Grafana would) and naming only metrics the exporter
//! serves; the PromQL examples in `docs/metrics.md` are accepted too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::prometheus::{query_raw, start_prometheus, wait_ready};

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
    }
}

/// The query as Grafana sends it, with its template variables replaced.
fn concrete(expr: &str) -> String {
    expr.replace("$cluster", ".*").replace("$node", ".*").replace("$__rate_interval", "1m").replace("$__range", "1h")
}

#[test]
fn every_query_is_valid_promql() {
    let prometheus = start_prometheus(None);
    wait_ready(&prometheus);
    for (file, dashboard) in dashboards() {
        for expr in queries(&dashboard) {
            let (status, body) = query_raw(&prometheus, &concrete(&expr));
            assert_eq!(status, 200, "{file}: {expr}: {body}");
        }
    }
    // The worked joins users copy from the metrics reference.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).unwrap();
    let examples: Vec<&str> = doc.split("```promql\n").skip(1).filter_map(|rest| rest.split("```").next()).collect();
    assert!(examples.len() >= 3, "docs/metrics.md has its join examples");
    for expr in examples {
        let (status, body) = query_raw(&prometheus, expr);
        assert_eq!(status, 200, "docs/metrics.md: {expr}: {body}");
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

#[test]
fn queries_name_only_metrics_the_exporter_serves() {
    let mut known: Vec<String> = gpu_exporter::render::families::ALL.iter().map(|f| f.sample_name()).collect();
    known.extend(gpu_exporter::health::metrics::ALL.iter().map(|f| f.sample_name()));
    known.extend(recorded_rules());
    for (file, dashboard) in dashboards() {
        let variables =
            dashboard["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["definition"].as_str());
        for expr in queries(&dashboard).iter().map(String::as_str).chain(variables) {
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
                if word.starts_with("gpu_") || (word.contains(':') && word.contains(":gpu_")) {
                    assert!(known.iter().any(|k| k == word), "{file}: unknown metric {word} in {expr}");
                }
            }
        }
    }
}
