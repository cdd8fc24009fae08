//! `kubectl gpu` end to end: the binary, a kubeconfig, the in-test API server, and
//! real exporters on simulated nodes behind its pods `proxy` subresource (the cluster is
//! described in `common/mod.rs`). Every command in every output format is compared with
//! a golden transcript under `tests/golden/` (regenerate with `UPDATE_GOLDEN=1 cargo
//! test -p kubectl-gpu --test e2e`); cost figures are checked by hand against the
//! scenarios. That the shipped read-only roles suffice for every view, and what users
//! without them are told, is checked on a real API server
//! (`real-cluster/tests/kubectl_gpu.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::cluster;
use serde_json::Value;

/// Every golden case: file name and arguments.
const CASES: &[(&str, &[&str])] = &[
    ("nodes.txt", &["nodes"]),
    ("nodes-wide.txt", &["nodes", "-o", "wide"]),
    ("nodes-json.txt", &["nodes", "-o", "json"]),
    ("nodes-yaml.txt", &["nodes", "-o", "yaml"]),
    ("nodes-selector.txt", &["nodes", "-l", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"]),
    ("nodes-sort-power.txt", &["nodes", "--sort-by=-power"]),
    ("gpus.txt", &["gpus"]),
    ("gpus-node-wide.txt", &["gpus", "gpu-node-1", "-o", "wide"]),
    ("gpus-node-json.txt", &["gpus", "gpu-node-2", "-o", "json"]),
    ("gpus-node-yaml.txt", &["gpus", "h100-node-1", "-o", "yaml"]),
    ("gpus-sort-temp.txt", &["gpus", "h100-node-1", "--sort-by=-temp"]),
    ("pods-all.txt", &["pods", "-A"]),
    ("pods-all-wide.txt", &["pods", "-A", "-o", "wide"]),
    ("pods-all-json.txt", &["pods", "-A", "-o", "json"]),
    ("pods-research-yaml.txt", &["pods", "-n", "research", "--source", "exporters", "-o", "yaml"]),
    ("pods-namespace.txt", &["pods"]),
    ("pods-namespace-exporters.txt", &["pods", "-n", "ai-inference", "--source", "exporters", "-l", "app=inference"]),
    ("cost.txt", &["cost"]),
    ("cost-wide.txt", &["cost", "-o", "wide"]),
    ("cost-node.txt", &["cost", "--by", "node"]),
    ("cost-pod.txt", &["cost", "--by", "pod", "--sort-by=-allocated"]),
    ("cost-json.txt", &["cost", "-o", "json"]),
    ("cost-node-yaml.txt", &["cost", "--by", "node", "-o", "yaml"]),
    ("cost-namespace.txt", &["cost", "-n", "research", "--by", "pod"]),
    ("cost-price-flag.txt", &["cost", "--by", "node", "--price", "Tesla V100=1.2", "--idle-below", "50"]),
];

#[test]
fn every_command_and_format_matches_its_golden_transcript() {
    let c = cluster();
    for (file, args) in CASES {
        let out = c.run(args);
        common::golden(file, &out.transcript(args));
    }
}

fn json(args: &[&str]) -> Value {
    let out = cluster().run(args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn cost_figures_match_the_scenarios_by_hand() {
    let doc = json(&["cost", "--by", "node", "-o", "json"]);
    let node = |name: &str| doc["items"].as_array().unwrap().iter().find(|i| i["node"] == name).unwrap().clone();
    // The seed's mixed node, 4 A100s at $3.50: capacity $14.00. Held: the LLM's 3g.40gb,
    // 3/7 of a GPU = $1.50; three 1g.10gb, 1/7 each = $0.50 each, $1.50; eight pods on two
    // time-sliced GPUs, a quarter each = $0.875 each, $7.00. Allocated $10.00. Nobody's:
    // the other 3g.40gb and GPU 0's free slice (4/7), GPU 1's four free 1g.10gb (4/7):
    // $2.00 + $2.00 = $4.00. Idle: none; the four A100 MIG holders run a process but have
    // no utilization figure (no GPM on A100), so they are unknown, not idle.
    let seed = node("gpu-node-1");
    assert!(close(&seed["capacity"]["dollarsPerHour"], 14.0), "{seed}");
    assert!(close(&seed["allocated"]["dollarsPerHour"], 10.0), "{seed}");
    assert!(close(&seed["unallocated"]["dollarsPerHour"], 4.0), "{seed}");
    assert!(close(&seed["idle"]["dollarsPerHour"], 0.0), "{seed}");
    assert_eq!(seed["idleUnknownDevices"], 4);
    // The H100 node, 8 at $4.50: $36.00. Held: 4 chat GPUs, 2 trainer GPUs, the notebook's:
    // 7 × $4.50 = $31.50; the notebook runs nothing on its GPU: $4.50 idle; GPU 7 nobody's.
    let h100 = node("h100-node-1");
    assert!(close(&h100["capacity"]["dollarsPerHour"], 36.0), "{h100}");
    assert!(close(&h100["allocated"]["dollarsPerHour"], 31.5), "{h100}");
    assert!(close(&h100["idle"]["dollarsPerHour"], 4.5), "{h100}");
    assert!(close(&h100["unallocated"]["dollarsPerHour"], 4.5), "{h100}");
    // The V100 node has no price at all: every figure null, never zero.
    let v100 = node("gpu-node-2");
    assert_eq!(v100["capacity"]["dollarsPerHour"], Value::Null, "{v100}");
    assert_eq!(v100["capacity"]["unpricedDevices"], 2);
    assert_eq!(v100["allocated"]["dollarsPerHour"], Value::Null);
    // The down node is unknown and in no total.
    assert_eq!(node("l40s-node-1")["exporter"]["state"], "unknown");
    let totals = &doc["totals"];
    assert!(close(&totals["capacity"]["dollarsPerHour"], 50.0), "{totals}");
    assert!(close(&totals["allocated"]["dollarsPerHour"], 41.5), "{totals}");
    assert!(close(&totals["idle"]["dollarsPerHour"], 4.5), "{totals}");
    assert_eq!(totals["capacity"]["unpricedDevices"], 2);
    assert_eq!(doc["unpriced"][0]["model"], "Tesla V100-SXM2-32GB");

    let by_ns = json(&["cost", "-o", "json"]);
    let ns = |name: &str| by_ns["items"].as_array().unwrap().iter().find(|i| i["namespace"] == name).unwrap().clone();
    // ai-inference: the seed node's $10.00 and four chat GPUs, $18.00: $28.00.
    assert!(close(&ns("ai-inference")["allocated"]["dollarsPerHour"], 28.0));
    assert!(close(&ns("ml-training")["allocated"]["dollarsPerHour"], 9.0));
    // research: the notebook's $4.50, all idle, and the V100 trainer, unpriced.
    let research = ns("research");
    assert!(close(&research["allocated"]["dollarsPerHour"], 4.5), "{research}");
    assert_eq!(research["allocated"]["unpricedDevices"], 1);
    assert!(close(&research["idle"]["dollarsPerHour"], 4.5));
}

#[test]
fn a_price_flag_prices_the_unpriced_model() {
    let doc = json(&["cost", "--by", "node", "-o", "json", "--price", "Tesla V100=1.2"]);
    let v100 = doc["items"].as_array().unwrap().iter().find(|i| i["node"] == "gpu-node-2").unwrap();
    assert!(close(&v100["capacity"]["dollarsPerHour"], 2.4), "{v100}");
    assert!(close(&v100["allocated"]["dollarsPerHour"], 1.2), "{v100}");
    assert_eq!(doc["unpriced"], serde_json::json!([]));
}

#[test]
fn an_exporter_that_does_not_answer_is_unknown_never_zero() {
    let doc = json(&["nodes", "-o", "json"]);
    let down = doc["items"].as_array().unwrap().iter().find(|i| i["name"] == "l40s-node-1").unwrap();
    assert_eq!(down["exporter"]["state"], "unknown");
    assert_eq!(down["exporter"]["reason"], "unreachable");
    assert_eq!(down.get("utilizationPercent"), None);
    assert_eq!(down["health"]["breakerOpen"], true);
    assert_eq!(down["health"]["cordonedBy"], "kubectl-cordon");
    let warnings = doc["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().starts_with("node l40s-node-1: exporter unreachable")),
        "{warnings:?}"
    );
    let table = cluster().run(&["nodes"]);
    let line = table.stdout.lines().find(|l| l.starts_with("l40s-node-1")).unwrap();
    assert!(line.contains("4× L40S") && line.contains("unknown") && !line.contains(" 0%"), "{line}");
}

#[test]
fn reads_go_through_the_api_server_with_bounded_requests() {
    let c = cluster();
    let before = c.api.requests().len();
    let out = c.run(&["nodes", "--context", "admin"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let made: Vec<_> = c.api.requests().into_iter().skip(before).filter(|r| r.user == "admin").collect();
    let proxied: Vec<&str> = made.iter().filter(|r| r.path.contains("/proxy/")).map(|r| r.path.as_str()).collect();
    assert_eq!(proxied.len(), 4, "one read per GPU node with an exporter pod: {proxied:?}");
    assert!(proxied.contains(&"/api/v1/namespaces/gpu-telemetry/pods/gpu-exporter-gpu-node-1:9400/proxy/metrics"));
    assert!(made.iter().any(|r| r.path == "/api/v1/nodes"));
    assert!(!made.iter().any(|r| r.path.contains("cpu-node-1")));
}

fn frames(text: &str) -> Vec<String> {
    text.split("\x1b[H").skip(1).map(|f| f.replace("\r\n", "\n")).collect()
}

/// A frame without its header's timestamp.
fn steady(frame: &str) -> String {
    frame.lines().skip(1).collect::<Vec<_>>().join("\n")
}

#[test]
fn watch_redraws_in_place_on_a_terminal() {
    let c = cluster();
    let mut command = common::command(&c.kubeconfig);
    command.env("TERM", "xterm-256color").args(["nodes", "--watch", "--interval", "1s"]);
    let term = common::pty::OnTerminal::spawn(command);
    test_support::simulated::wait_until("three frames", std::time::Duration::from_secs(60), || {
        frames(&term.text()).iter().filter(|f| f.ends_with("\x1b[J")).count() >= 3
    });
    let text = term.text();
    assert_eq!(term.interrupt(), 0, "Ctrl-C ends the watch cleanly");
    assert!(text.starts_with("\x1b[2J\x1b[H"), "the screen is cleared once, first: {text:?}");
    assert_eq!(text.matches("\x1b[2J").count(), 1, "and only once");
    let frames: Vec<String> = frames(&text).into_iter().filter(|f| f.ends_with("\x1b[J")).collect();
    for frame in &frames {
        assert!(frame.starts_with("Every 1s: kubectl gpu nodes    "), "{frame:?}");
        let body = frame.trim_end_matches("\x1b[J");
        assert!(
            body.lines().all(|l| l.ends_with("\x1b[K")),
            "every line clears the rest of the last frame's: {frame:?}"
        );
        assert!(body.contains("\x1b[32mHealthy\x1b[0m"), "colour on a terminal: {frame:?}");
        assert!(
            body.contains("Warning: node l40s-node-1: exporter unreachable"),
            "warnings are part of the frame: {frame:?}"
        );
        assert!(body.contains("gpu-node-1") && body.contains("0:2×3g.40gb 1:7×1g.10gb"), "{frame:?}");
    }
    assert_eq!(steady(&frames[1]), steady(&frames[2]), "the same cluster draws the same frame");
}

#[test]
fn no_color_and_a_pipe_get_no_escape_codes() {
    let c = cluster();
    let mut command = common::command(&c.kubeconfig);
    command.env("TERM", "xterm").env("NO_COLOR", "1").args(["nodes"]);
    let term = common::pty::OnTerminal::spawn(command);
    test_support::simulated::wait_until("the table", std::time::Duration::from_secs(30), || {
        term.text().contains("l40s-node-1")
    });
    let mut child = term.child;
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let piped = c.run(&["nodes"]);
    assert!(!piped.stdout.contains('\x1b') && !piped.stderr.contains('\x1b'), "{piped:?}");
    let forced = c.run(&["nodes", "--color", "always"]);
    assert!(forced.stdout.contains("\x1b[31mQuarantined(Xid79),Cordoned(by gpu-health)\x1b[0m"), "{}", forced.stdout);
}

#[test]
fn watch_off_a_terminal_appends_each_refresh() {
    let c = cluster();
    let mut child = common::command(&c.kubeconfig)
        .args(["cost", "--watch", "--interval", "500ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while seen.matches("NAMESPACE ").count() < 2 {
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        assert!(n > 0, "the watch ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!seen.contains('\x1b'), "{seen:?}");
    let first = seen.split("\n\nNAMESPACE ").next().unwrap();
    assert!(first.contains("Capacity $50.00/h on 3 nodes"), "{first}");
}

/// The README's samples of each command, between these markers.
const README_BEGIN: &str = "<!-- BEGIN kubectl-gpu samples: generated by kubectl-gpu/tests/e2e.rs; UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test e2e -->\n";
const README_END: &str = "<!-- END kubectl-gpu samples -->\n";

#[test]
fn the_readme_samples_are_the_commands_output() {
    let c = cluster();
    let mut block = String::from(README_BEGIN);
    for args in [&["nodes"][..], &["gpus", "gpu-node-1"], &["pods", "-A"], &["cost"], &["cost", "--by", "node"]] {
        let out = c.run(args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        block.push_str(&format!("```console\n$ kubectl gpu {}\n", args.join(" ")));
        for line in out.stderr.lines() {
            block.push_str(line);
            block.push('\n');
        }
        block.push_str(&out.stdout);
        block.push_str("```\n\n");
    }
    block.truncate(block.len() - 1);
    block.push_str(README_END);
    test_support::golden::block(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
        README_BEGIN,
        README_END,
        &block,
        "UPDATE_GOLDEN=1 cargo test -p kubectl-gpu --test e2e",
    );
}
