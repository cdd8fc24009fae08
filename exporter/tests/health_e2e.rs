//! The health loop end to end: the exporter binary on the simulated GPU node, talking
//! to the in-test API server through a kubeconfig, with scenario time stepped by the
//! test through `FAKE_NVML_CLOCK_FILE`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Exporter, sample, wait_for, write_scenario};
use serde_json::{Value, json};
use test_support::apiserver::{ApiServer, Expect, Recorded, Running};
use test_support::cluster::registered_node;

const TAINT: &str = "gpu-telemetry.io/gpu-unhealthy";
const CLAIM: &str = "gpu-telemetry.io/gpu-health";

fn scheduled_checks(e: &Exporter) -> f64 {
    e.value("gpu_health_checks_total", &[("kind", "scheduled")]).unwrap_or(0.0)
}

/// Waits for `n` more scheduled checks.
fn wait_checks(e: &Exporter, n: f64) {
    let start = scheduled_checks(e);
    wait_for(Duration::from_secs(20), || scheduled_checks(e) >= start + n)
        .unwrap_or_else(|| panic!("fewer than {n} more checks; logs:\n{}", e.logs()));
}

struct Node {
    _dir: tempfile::TempDir,
    scenario: PathBuf,
    clock: PathBuf,
}

impl Node {
    fn new(scenario: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let clock = dir.path().join("clock");
        std::fs::write(&clock, "0").unwrap();
        let scenario = write_scenario(dir.path(), "node.yaml", scenario);
        Node { _dir: dir, scenario, clock }
    }

    fn set_clock(&self, t: f64) {
        std::fs::write(&self.clock, t.to_string()).unwrap();
    }
}

fn launch(name: &str, node: &Node, kubeconfig: &Path, extra: &[&str]) -> Exporter {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"));
    command
        .arg("--nvml-library")
        .arg(common::fake_library())
        .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--node-name", name])
        .args(["--collect-interval", "200ms", "--nvml.call-timeout", "100ms"])
        .args(if extra.contains(&"--health.check-interval") { &[][..] } else { &["--health.check-interval", "1"][..] })
        .args(["--health.recovery-checks", "2", "--health.min-quarantine", "1"])
        .args(["--health.namespace", "gpu-telemetry"])
        .args(extra)
        .env_remove("NODE_NAME")
        .env_remove("POD_NAMESPACE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        // The pod watch and the health loop both follow the kubeconfig to the test's API
        // server (`--kubernetes.api=off` would keep both away from it).
        .env("GPU_EXPORTER_KUBERNETES_API", "auto")
        .env("KUBECONFIG", kubeconfig)
        .env("FAKE_NVML_SCENARIO", &node.scenario)
        .env("FAKE_NVML_CLOCK_FILE", &node.clock);
    let e = common::spawn(command);
    wait_for(Duration::from_secs(20), || e.value("gpu_health_checks_total", &[("kind", "scheduled")]).is_some())
        .unwrap_or_else(|| panic!("no health check ran; logs:\n{}", e.logs()));
    e
}

fn kubeconfig(api: &Running, dir: &tempfile::TempDir) -> PathBuf {
    api.kubeconfig(dir.path())
}

fn claim(node: &Value) -> Option<Value> {
    node["metadata"]["annotations"][CLAIM].as_str().map(|t| serde_json::from_str(t).unwrap())
}

fn has_our_taint(node: &Value) -> bool {
    node["spec"]["taints"].as_array().is_some_and(|t| t.iter().any(|t| t["key"] == TAINT))
}

fn condition(node: &Value) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "GPUHealthy")
        .map(|c| c["status"].as_str().unwrap_or("").to_string())
}

fn touches_scheduling(r: &Recorded) -> bool {
    r.json().pointer("/spec/unschedulable").is_some() || r.json().pointer("/spec/taints").is_some()
}

const XID_79_LOST_RESET: &str = "gpus:
  - model: H100-SXM5-80GB
    faults: [{at_s: 10, xid: 79}, {at_s: 10, lost: true}, {at_s: 20, reset: true}]
  - model: H100-SXM5-80GB
";

#[test]
fn xid_79_cordons_and_taints_within_two_seconds_of_the_event() {
    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new("gpus: [{model: A100-SXM4-80GB, faults: [{at_s: 10, xid: 79}]}, {model: A100-SXM4-80GB}]\n");
    let e = launch("test-node", &node, &kubeconfig(&api, &dir), &["--health.check-interval", "60"]);
    wait_for(Duration::from_secs(10), || condition(&api.node("test-node")).as_deref() == Some("True"))
        .expect("condition GPUHealthy=True after the first check");

    let event = Instant::now();
    node.set_clock(10.5);
    wait_for(Duration::from_secs(10), || api.node("test-node")["spec"]["unschedulable"] == true)
        .unwrap_or_else(|| panic!("not cordoned; logs:\n{}", e.logs()));
    let cordon =
        api.writes().into_iter().find(|r| r.json().pointer("/spec/unschedulable") == Some(&json!(true))).unwrap();
    let took = cordon.at.duration_since(event);
    assert!(took < Duration::from_secs(2), "cordon and taint {took:?} after the XID (check interval 60 s)");
    let cordon = cordon.json();
    let taints = cordon["spec"]["taints"].as_array().unwrap();
    assert!(taints.iter().any(|t| t["key"] == TAINT && t["value"] == "Xid79" && t["effect"] == "NoSchedule"));
    let n = api.node("test-node");
    assert_eq!(claim(&n).unwrap()["applied"], json!({"cordon": true, "taint": "Xid79"}));
    wait_for(Duration::from_secs(5), || condition(&api.node("test-node")).as_deref() == Some("False")).unwrap();
    wait_for(Duration::from_secs(5), || !api.events_with_reason("GPUQuarantined").is_empty()).unwrap();
    // The loop counts what it did after its last write (the Event), so the page can lag
    // the API server by a moment.
    let m = e.wait_metrics("the quarantine counted", |m| sample(m, "gpu_health_node_quarantined", &[]) == Some(1.0));
    assert_eq!(sample(&m, "gpu_health_node_healthy", &[]), Some(0.0));
    assert_eq!(sample(&m, "gpu_health_node_reason_info", &[("reason", "Xid79"), ("needs", "reset")]), Some(1.0));
    assert_eq!(sample(&m, "gpu_health_gpu_healthy", &[("gpu", "0")]), Some(0.0));
    assert_eq!(sample(&m, "gpu_health_gpu_healthy", &[("gpu", "1")]), Some(1.0));
    assert_eq!(sample(&m, "gpu_health_actions_total", &[("action", "cordon")]), Some(1.0));
    assert_eq!(sample(&m, "gpu_health_checks_total", &[("kind", "event")]), Some(1.0));
    api.assert_no_failures();
}

#[test]
fn a_temperature_flapping_around_the_threshold_never_cordons() {
    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(
        "gpus:
  - model: H100-SXM5-80GB
    temperature_slowdown_c: 100
    temperature_shutdown_c: 110
    values: {temperature_c: {steps: [[0, 85], [100, 93]]}}
",
    );
    let e = launch("test-node", &node, &kubeconfig(&api, &dir), &[]);
    let mut pending_seen = false;
    // Hot, hot, cool, ...: never three hot checks in a row.
    for i in 0..9 {
        node.set_clock(if i % 3 == 2 { 50.0 } else { 150.0 });
        wait_checks(&e, 1.0);
        let m = e.metrics();
        pending_seen |=
            sample(&m, "gpu_health_gpu_signal", &[("signal", "Temperature"), ("state", "pending")]) == Some(1.0);
        assert_eq!(sample(&m, "gpu_health_node_healthy", &[]), Some(1.0), "check {i}");
    }
    assert!(pending_seen, "the hot readings were seen, and held back");
    assert!(!api.writes().iter().any(touches_scheduling), "no cordon, no taint");
    assert_eq!(condition(&api.node("test-node")).as_deref(), Some("True"));

    // Three hot checks in a row do act: the flapping was what kept the node in.
    node.set_clock(150.0);
    wait_for(Duration::from_secs(10), || api.node("test-node")["spec"]["unschedulable"] == true)
        .unwrap_or_else(|| panic!("a sustained high temperature cordons; logs:\n{}", e.logs()));
    assert_eq!(claim(&api.node("test-node")).unwrap()["reasons"][0]["code"], "Temperature");
}

#[test]
fn an_admin_cordoned_node_is_never_uncordoned() {
    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    api.patch_node_as("test-node", "kubectl-cordon", json!({"spec": {"unschedulable": true}}));
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(XID_79_LOST_RESET);
    let e = launch("test-node", &node, &kubeconfig(&api, &dir), &[]);

    node.set_clock(11.0);
    wait_for(Duration::from_secs(10), || has_our_taint(&api.node("test-node")))
        .unwrap_or_else(|| panic!("not tainted; logs:\n{}", e.logs()));
    let c = claim(&api.node("test-node")).unwrap();
    assert_eq!(c["found"]["unschedulable"], true, "records that the cordon was there");
    assert_eq!(c["applied"]["cordon"], false, "and does not claim it");

    // The GPU is off the bus until it is reset; once it answers again the loop
    // lifts its taint and only that.
    wait_for(Duration::from_secs(10), || e.value("gpu_lost", &[("gpu", "0")]) == Some(1.0)).unwrap();
    wait_checks(&e, 1.0);
    node.set_clock(21.0);
    wait_for(Duration::from_secs(15), || !has_our_taint(&api.node("test-node")))
        .unwrap_or_else(|| panic!("not released; logs:\n{}", e.logs()));
    let n = api.node("test-node");
    assert_eq!(n["spec"]["unschedulable"], true, "still cordoned");
    assert!(claim(&n).is_none());
    wait_for(Duration::from_secs(5), || condition(&api.node("test-node")).as_deref() == Some("True")).unwrap();
    for w in api.writes() {
        assert!(w.json().pointer("/spec/unschedulable").is_none(), "touched unschedulable: {}", w.describe());
    }
    // The Event is written after the condition, so it may land a moment later.
    wait_for(Duration::from_secs(5), || !api.events_with_reason("GPURecovered").is_empty())
        .unwrap_or_else(|| panic!("no GPURecovered Event; logs:\n{}", e.logs()));
    let recovered = api.events_with_reason("GPURecovered");
    assert_eq!(recovered.len(), 1);
    assert!(recovered[0]["message"].as_str().unwrap().contains("stays cordoned"), "{}", recovered[0]["message"]);
}

#[test]
fn the_breaker_stops_the_third_node_of_a_twenty_node_fleet() {
    let api = ApiServer::open().run();
    for i in 1..=20 {
        api.add_node(registered_node(&format!("gpu-{i:02}")));
    }
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(XID_79_LOST_RESET);
    let config = kubeconfig(&api, &dir);
    // Three nodes fail at the same scenario instant (one clock file for all three).
    let exporters: Vec<Exporter> = (1..=3).map(|i| launch(&format!("gpu-{i:02}"), &node, &config, &[])).collect();
    node.set_clock(11.0);
    for e in &exporters {
        wait_for(Duration::from_secs(15), || {
            let m = e.metrics();
            sample(&m, "gpu_health_node_healthy", &[]) == Some(0.0)
                && sample(&m, "gpu_health_breaker_open", &[]).is_some()
        })
        .unwrap_or_else(|| panic!("no breaker decision; logs:\n{}", e.logs()));
    }
    std::thread::sleep(Duration::from_millis(500));
    let names: Vec<String> = (1..=3).map(|i| format!("gpu-{i:02}")).collect();
    let cordoned: Vec<&String> = names.iter().filter(|n| api.node(n)["spec"]["unschedulable"] == true).collect();
    assert_eq!(cordoned.len(), 2, "10 % of 20: {cordoned:?}");
    let blocked: Vec<&String> = names.iter().filter(|n| api.node(n)["spec"]["unschedulable"] != true).collect();
    let third = api.node(blocked[0]);
    assert!(!has_our_taint(&third));
    assert_eq!(condition(&third).as_deref(), Some("False"), "its condition still tells");
    wait_for(Duration::from_secs(5), || !api.events_with_reason("GPUQuarantineBlocked").is_empty())
        .expect("a GPUQuarantineBlocked Event");
    let events = api.events_with_reason("GPUQuarantineBlocked");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["involvedObject"]["name"], blocked[0].as_str());
    assert!(events[0]["message"].as_str().unwrap().contains("2 of 20 GPU nodes"), "{}", events[0]["message"]);
    let open: Vec<f64> = exporters.iter().map(|e| e.value("gpu_health_breaker_open", &[]).unwrap()).collect();
    assert_eq!(open.iter().filter(|v| **v == 1.0).count(), 1, "{open:?}");
    let e = &exporters[names.iter().position(|n| n == blocked[0]).unwrap()];
    assert_eq!(e.value("gpu_health_breaker_quarantined_nodes", &[]), Some(2.0));
    assert_eq!(e.value("gpu_health_breaker_limit_nodes", &[]), Some(2.0));
    assert_eq!(e.value("gpu_health_breaker_gpu_nodes", &[]), Some(20.0));
    api.assert_no_failures();
}

#[test]
fn an_exporter_restart_in_mid_quarantine_changes_nothing() {
    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(XID_79_LOST_RESET);
    let config = kubeconfig(&api, &dir);
    let first = launch("test-node", &node, &config, &[]);
    node.set_clock(11.0);
    wait_for(Duration::from_secs(10), || {
        claim(&api.node("test-node")).is_some_and(|c| c.to_string().contains("GpuLost"))
    })
    .unwrap_or_else(|| panic!("not quarantined; logs:\n{}", first.logs()));
    wait_checks(&first, 2.0);
    drop(first);

    let writes = api.writes().len();
    let before = api.node("test-node");
    let second = launch("test-node", &node, &config, &[]);
    wait_checks(&second, 3.0);
    let after = api.node("test-node");
    let new: Vec<String> = api.writes()[writes..].iter().map(|w| w.describe()).collect();
    assert!(new.is_empty(), "writes after the restart: {new:?}");
    assert_eq!(after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"]);
    let m = second.metrics();
    assert_eq!(sample(&m, "gpu_health_node_healthy", &[]), Some(0.0), "nothing reported healthy that is not");
    assert_eq!(sample(&m, "gpu_health_node_quarantined", &[]), Some(1.0));
    assert!(second.logs().contains("took back the health state recorded on the node"), "{}", second.logs());
}

#[test]
fn dry_run_changes_nothing_but_its_record() {
    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new("gpus: [{model: H100-SXM5-80GB, faults: [{at_s: 10, xid: 79}]}]\n");
    api.expect(Expect::patch("/api/v1/nodes/test-node").lacks("/spec").body(
        "writes only the dry-run annotation",
        |b| {
            let a = b["metadata"]["annotations"].as_object().unwrap();
            a.len() == 1 && a["gpu-telemetry.io/gpu-health-dry-run"].as_str().unwrap().contains("\"intended\"")
        },
    ));
    api.expect(Expect::post("/api/v1/namespaces/default/events").has("/reason", json!("GPUQuarantineDryRun")));
    let before = api.node("test-node");
    let e = launch("test-node", &node, &kubeconfig(&api, &dir), &["--health.dry-run", "true"]);
    node.set_clock(11.0);
    api.finish(Duration::from_secs(10));
    wait_checks(&e, 2.0);
    api.finish(Duration::from_secs(1));
    let after = api.node("test-node");
    assert_eq!(after["spec"], before["spec"], "no cordon, no taint");
    assert_eq!(after["status"], before["status"], "no condition");
    assert!(api.config_map("gpu-telemetry", "gpu-health-breaker").is_none(), "no breaker place");
    let message = api.events()[0]["message"].as_str().unwrap().to_string();
    assert!(message.contains("would cordon, taint gpu-telemetry.io/gpu-unhealthy=Xid79:NoSchedule"), "{message}");
    assert_eq!(e.value("gpu_health_mode_info", &[("mode", "dry_run")]), Some(1.0));
}

#[test]
fn kubernetes_api_off_sends_not_one_request_and_reports_what_it_would_do() {
    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(XID_79_LOST_RESET);
    // A working kubeconfig, in the environment: `off` must keep the whole process away from it.
    let e = launch("test-node", &node, &kubeconfig(&api, &dir), &["--kubernetes.api", "off"]);
    assert_eq!(e.value("gpu_health_mode_info", &[("mode", "enforce"), ("api", "off")]), Some(1.0));
    assert_eq!(e.value("gpu_health_node_healthy", &[]), Some(1.0));
    node.set_clock(11.0);
    wait_for(Duration::from_secs(10), || e.logs().contains("report-only mode: would cordon, taint"))
        .unwrap_or_else(|| panic!("no report; logs:\n{}", e.logs()));
    wait_checks(&e, 2.0);
    let m = e.metrics();
    assert_eq!(sample(&m, "gpu_health_node_healthy", &[]), Some(0.0), "the verdict is still evaluated");
    assert_eq!(sample(&m, "gpu_health_node_reason_info", &[("reason", "Xid79")]), Some(1.0));
    assert_eq!(sample(&m, "gpu_health_node_quarantined", &[]), Some(0.0));
    assert!(!m.contains("gpu_exporter_pod_watch_up"), "no pod watch either");
    assert!(e.logs().contains("--kubernetes.api=off"), "said at start; logs:\n{}", e.logs());
    let requests: Vec<String> = api.requests().iter().map(|r| r.describe()).collect();
    assert!(requests.is_empty(), "requests with --kubernetes.api=off: {requests:?}");
}

#[test]
fn without_a_kubeconfig_the_exporter_serves_and_reports_what_it_would_do() {
    let node = Node::new(XID_79_LOST_RESET);
    let e = launch("test-node", &node, Path::new("/nonexistent/kubeconfig"), &[]);
    assert_eq!(e.value("gpu_health_mode_info", &[("api", "report_only")]), Some(1.0));
    assert_eq!(e.value("gpu_health_node_healthy", &[]), Some(1.0));
    node.set_clock(11.0);
    wait_for(Duration::from_secs(10), || e.logs().contains("report-only mode: would cordon, taint"))
        .unwrap_or_else(|| panic!("no report; logs:\n{}", e.logs()));
    assert_eq!(e.value("gpu_health_node_healthy", &[]), Some(0.0));
    assert_eq!(e.logs().matches("no Kubernetes API configured").count(), 1, "said once");
    assert!(e.metrics().contains("gpu_utilization{"), "still serves GPU metrics");
}

// ---- per-GPU quarantine on the binary: the shipped DRA node --------------------------

/// The shipped `dra-node` scenario (GPUs 0-2 from NVIDIA's DRA driver, GPU 3 from the
/// device plugin) with XID 79 on GPU `gpu` at 10 s, named `dra-node` as its DRA pool.
fn dra_node_with_xid(gpu: usize) -> (Node, Value) {
    let text = std::fs::read_to_string(common::shipped_scenario("dra-node")).unwrap();
    let uuid = format!("uuid: GPU-d0000000-0000-4000-8000-00000000000{gpu}");
    assert!(text.contains(&uuid), "dra-node.yaml has GPU {gpu}");
    let text = text.replacen(&uuid, &format!("{uuid}, faults: [{{at_s: 10, xid: 79}}]"), 1);
    let node = Node::new(&text);
    let scenario = fake_nvml::scenario::Scenario::load(&node.scenario).unwrap();
    let slices = fake_kubelet::slices::resource_slices(&scenario, "dra-node");
    (node, serde_json::to_value(slices).unwrap())
}

/// Ten GPU nodes serving `resource.k8s.io/v1` with DeviceTaintRules; `dra-node` has 4 GPUs.
fn dra_cluster(slices: Value) -> Running {
    let api = ApiServer::open().run();
    api.serve_resource_api(&["v1"], &["v1"]);
    api.serve_slices(serde_json::from_value(slices).unwrap());
    for (name, gpus) in
        std::iter::once(("dra-node".to_string(), "4")).chain((2..=10).map(|i| (format!("gpu-{i:02}"), "8")))
    {
        let mut node = registered_node(&name);
        node["metadata"]["labels"]["nvidia.com/gpu.count"] = json!(gpus);
        api.add_node(node);
    }
    api
}

/// One GPU of four may be held alone (the default share, one of eight, holds a 4-GPU node whole).
const ONE_OF_FOUR: [&str; 2] = ["--health.gpu-quarantine.max-fraction", "0.25"];

#[test]
fn xid_79_on_a_claimed_gpu_of_the_dra_node_taints_that_device_and_never_cordons() {
    let (node, slices) = dra_node_with_xid(0);
    let api = dra_cluster(slices);
    let dir = tempfile::tempdir().unwrap();
    let e = launch("dra-node", &node, &kubeconfig(&api, &dir), &ONE_OF_FOUR);
    wait_for(Duration::from_secs(10), || condition(&api.node("dra-node")).as_deref() == Some("True"))
        .expect("condition GPUHealthy=True after the first check");
    wait_for(Duration::from_secs(10), || e.value("gpu_exporter_resource_slice_devices", &[]) == Some(4.0))
        .unwrap_or_else(|| panic!("the slice watch maps the node's DRA devices; logs:\n{}", e.logs()));

    node.set_clock(10.5);
    wait_for(Duration::from_secs(10), || !api.device_taint_rules().is_empty())
        .unwrap_or_else(|| panic!("no DeviceTaintRule; logs:\n{}", e.logs()));
    let rules = api.device_taint_rules();
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = rules.values().next().unwrap();
    assert_eq!(
        rule["spec"]["deviceSelector"],
        json!({"driver": "gpu.nvidia.com", "pool": "dra-node", "device": "gpu-0"})
    );
    assert_eq!(rule["spec"]["taint"]["effect"], "NoSchedule");
    wait_for(Duration::from_secs(5), || condition(&api.node("dra-node")).as_deref() == Some("False")).unwrap();
    let n = api.node("dra-node");
    assert!(n["spec"].get("unschedulable").is_none() && !has_our_taint(&n), "the node stays schedulable: {n}");
    assert!(!api.writes().iter().any(touches_scheduling), "no cordon and no node taint was ever written");
    // The metrics follow the loop's view, published once the reconcile is done.
    wait_for(Duration::from_secs(5), || e.value("gpu_health_gpu_quarantined", &[("gpu", "0")]) == Some(1.0))
        .unwrap_or_else(|| panic!("GPU 0 held in the metrics; logs:\n{}", e.logs()));
    let m = e.metrics();
    assert_eq!(sample(&m, "gpu_health_gpu_quarantined", &[("gpu", "1")]), Some(0.0));
    assert_eq!(sample(&m, "gpu_health_node_quarantined", &[]), Some(0.0));
    api.assert_no_failures();
}

#[test]
fn xid_79_on_the_device_plugins_gpu_of_the_same_node_cordons_it_and_says_why() {
    let (node, slices) = dra_node_with_xid(3);
    let api = dra_cluster(slices);
    let dir = tempfile::tempdir().unwrap();
    let e = launch("dra-node", &node, &kubeconfig(&api, &dir), &ONE_OF_FOUR);
    wait_for(Duration::from_secs(10), || e.value("gpu_exporter_resource_slice_devices", &[]) == Some(4.0))
        .unwrap_or_else(|| panic!("the slice watch maps the node's DRA devices; logs:\n{}", e.logs()));
    node.set_clock(10.5);
    wait_for(Duration::from_secs(10), || api.node("dra-node")["spec"]["unschedulable"] == true)
        .unwrap_or_else(|| panic!("not cordoned; logs:\n{}", e.logs()));
    assert!(api.device_taint_rules().is_empty(), "a device plugin's GPU cannot be tainted alone");
    wait_for(Duration::from_secs(5), || condition(&api.node("dra-node")).as_deref() == Some("False")).unwrap();
    let n = api.node("dra-node");
    let gpu_healthy = n["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "GPUHealthy").unwrap();
    let message = gpu_healthy["message"].as_str().unwrap_or("");
    assert!(message.contains("GPU 3 is handed out by a device plugin"), "{message}");
    api.assert_no_failures();
}
