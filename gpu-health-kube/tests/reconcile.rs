//! The health loop against the in-test API server, driven by observations the test
//! publishes: every write is checked for method, path, content type and body, in
//! order, with 409, 429 and 5xx answers scripted in between.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use gpu_health::policy::Health;
use serde_json::{Value, json};
use support::{Loop, NS, lost, settings, snapshot, uncorrected, xid79};
use test_support::apiserver::{ApiServer, Expect, Running};
use test_support::cluster::registered_node;

const CM: &str = "/api/v1/namespaces/gpu-telemetry/configmaps";
const EVENTS: &str = "/api/v1/namespaces/default/events";
const TAINT: &str = "gpu-telemetry.io/gpu-unhealthy";
/// Why a device-plugin node's GPU 0 holds the whole node.
const DEVICE_PLUGIN: &str = "GPU 0 is handed out by a device plugin, which cannot keep a single GPU from the scheduler";

fn fleet(api: &Running, n: usize) {
    for i in 1..=n {
        api.add_node(registered_node(&format!("gpu-{i:02}")));
    }
}

fn conditions(node: &Value) -> BTreeMap<String, String> {
    node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
        .collect()
}

fn has_our_taint(body: &Value) -> bool {
    body.pointer("/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| t["key"] == TAINT && t["value"] == "Xid79" && t["effect"] == "NoSchedule"))
}

#[test]
fn quarantine_and_recovery_write_exactly_the_scripted_requests() {
    let api = ApiServer::open().run();
    fleet(&api, 20);
    let node = "/api/v1/nodes/gpu-01";
    let status = "/api/v1/nodes/gpu-01/status";

    // A healthy node gets its condition once.
    api.expect(
        Expect::patch(status)
            .has("/status/conditions/0/type", json!("GPUHealthy"))
            .has("/status/conditions/0/status", json!("True"))
            .has("/status/conditions/0/reason", json!("GPUsHealthy"))
            .lacks("/metadata"),
    );
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, |_| {}));
    api.finish(Duration::from_secs(10));

    // XID 79: the breaker's ConfigMap is created and a place taken; the node patch
    // meets a conflict and is planned again; the status patch meets a 503 and the
    // Event a 429, both retried.
    api.expect(Expect::post(CM).has("/metadata/name", json!("gpu-health-breaker")));
    api.expect(
        Expect::put(&format!("{CM}/gpu-health-breaker"))
            .body("takes a place for gpu-01", |b| b["data"]["gpu-01"].is_string())
            .body("carries the resourceVersion it read", |b| b["metadata"]["resourceVersion"].is_string()),
    );
    api.expect(Expect::patch(node).reply(409));
    api.expect(
        Expect::patch(node)
            .has("/spec/unschedulable", json!(true))
            .body("keeps the other taint and adds ours", |b| {
                has_our_taint(b) && b["spec"]["taints"].as_array().unwrap().iter().any(|t| t["key"] == "nvidia.com/gpu")
            })
            .body("is conditional on the resourceVersion", |b| b["metadata"]["resourceVersion"].is_string())
            .body("records the claim", |b| {
                let text = b["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"].as_str().unwrap_or("");
                let claim: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                claim["state"] == "quarantined"
                    && claim["applied"] == json!({"cordon": true, "taint": "Xid79"})
                    && claim["found"]["unschedulable"] == false
                    && claim["latches"][0]["reason"]["code"] == "Xid79"
            }),
    );
    api.expect(Expect::patch(status).reply(503));
    api.expect(
        Expect::patch(status)
            .has("/status/conditions/0/status", json!("False"))
            .has("/status/conditions/0/reason", json!("Xid79")),
    );
    api.expect(Expect::post(EVENTS).reply(429));
    api.expect(
        Expect::post(EVENTS)
            .has("/reason", json!("GPUQuarantined"))
            .has("/type", json!("Warning"))
            .has("/involvedObject/kind", json!("Node"))
            .has("/involvedObject/name", json!("gpu-01")),
    );
    let started = Instant::now();
    l.publish(snapshot(2, xid79));
    api.finish(Duration::from_secs(10));
    assert!(started.elapsed() < Duration::from_secs(5), "quarantined in {:?}", started.elapsed());

    let n = api.node("gpu-01");
    assert_eq!(n["spec"]["unschedulable"], true);
    let c = conditions(&n);
    assert_eq!(c["Ready"], "True", "the kubelet's conditions survive the strategic merge");
    assert_eq!(c["MemoryPressure"], "False");
    assert_eq!(c["GPUHealthy"], "False");
    // The loop counts its actions after its last write (the Event) is answered, so the
    // metrics may trail the API server by a moment.
    l.wait("the quarantine in the metrics", Duration::from_secs(5), |v| v.quarantined);
    let view = l.view();
    assert_eq!(view.health, Health::Unhealthy);
    assert_eq!(view.actions.get("cordon"), Some(&1));
    assert_eq!(view.api_errors.get(&("patch_node", "409".to_string())), Some(&1));
    assert_eq!(view.api_errors.get(&("patch_node_status", "503".to_string())), Some(&1));
    assert_eq!(view.api_errors.get(&("create_event", "429".to_string())), Some(&1));

    // Checks that find the node as it should be write nothing.
    let writes = api.writes().len();
    let checks = l.checks();
    l.wait("three more checks", Duration::from_secs(5), |v| v.checks.values().sum::<u64>() >= checks + 3);
    assert_eq!(api.writes().len(), writes, "no write while nothing changes");

    // The GPU falls off the bus: a new reason, recorded; no new cordon. Xid79 (needs a
    // reset) stays the primary reason: the taint stays, the condition keeps its reason
    // and only its message lists the new one; no Event.
    api.expect(Expect::patch(node).lacks("/spec").body("adds the new reason", |b| {
        b["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"].as_str().unwrap_or("").contains("GpuLost")
    }));
    api.expect(Expect::patch(status).has("/status/conditions/0/reason", json!("Xid79")).body(
        "lists both reasons, the primary first",
        |b| {
            let m = b["status"]["conditions"][0]["message"].as_str().unwrap_or("");
            m.find("Xid79").is_some_and(|x| m.find("GpuLost").is_some_and(|l| x < l))
        },
    ));
    l.publish(snapshot(3, |g| {
        xid79(g);
        lost(g);
    }));
    api.finish(Duration::from_secs(10));

    // It answers again: the reset is seen and the latch cleared; after two healthy
    // checks only what the loop applied is lifted, then its breaker place is given back.
    api.expect(Expect::patch(node).lacks("/spec").body("drops the latch", |b| {
        let text = b["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"].as_str().unwrap_or("");
        text.contains("\"state\":\"quarantined\"") && !text.contains("latches")
    }));
    api.expect(
        Expect::patch(node)
            .has("/spec/unschedulable", Value::Null)
            .has("/spec/taints", json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]))
            .has("/metadata/annotations/gpu-telemetry.io~1gpu-health", Value::Null),
    );
    api.expect(Expect::patch(status).has("/status/conditions/0/status", json!("True")));
    api.expect(Expect::post(EVENTS).has("/reason", json!("GPURecovered")).has("/type", json!("Normal")));
    api.expect(
        Expect::put(&format!("{CM}/gpu-health-breaker"))
            .body("gives the place back", |b| b["data"].get("gpu-01").is_none()),
    );
    l.publish(snapshot(4, xid79));
    api.finish(Duration::from_secs(10));

    let n = api.node("gpu-01");
    assert!(n["spec"].get("unschedulable").is_none());
    assert_eq!(conditions(&n)["GPUHealthy"], "True");
    assert_eq!(conditions(&n).len(), 3);
    assert_eq!(api.config_map(NS, "gpu-health-breaker").unwrap()["data"], json!({}));
    assert_eq!(l.view().health, Health::Healthy);
    assert!(!l.view().quarantined);
}

#[test]
fn nodes_deciding_at_once_never_pass_the_breaker_together() {
    let api = ApiServer::open().run();
    fleet(&api, 20);
    let snapshots: Vec<Loop> =
        (1..=5).map(|i| Loop::start(&format!("gpu-{i:02}"), settings(&[]), &api.url(), snapshot(1, |_| {}))).collect();
    for l in &snapshots {
        l.wait("the first check", Duration::from_secs(10), |v| v.health == Health::Healthy);
    }
    for l in &snapshots {
        l.publish(snapshot(2, xid79));
    }
    for l in &snapshots {
        l.wait("a breaker decision", Duration::from_secs(10), |v| v.breaker.is_some() && v.health == Health::Unhealthy);
    }
    std::thread::sleep(Duration::from_millis(500));
    let cordoned: Vec<String> =
        (1..=5).map(|i| format!("gpu-{i:02}")).filter(|n| api.node(n)["spec"]["unschedulable"] == true).collect();
    assert_eq!(cordoned.len(), 2, "10 % of 20 GPU nodes: {cordoned:?}");
    let places = api.config_map(NS, "gpu-health-breaker").unwrap()["data"].as_object().unwrap().clone();
    let mut holders: Vec<String> = places.keys().cloned().collect();
    holders.sort();
    assert_eq!(holders, cordoned);
    assert_eq!(api.events_with_reason("GPUQuarantineBlocked").len(), 3);
    let open = snapshots.iter().filter(|l| l.view().breaker.is_some_and(|b| b.open)).count();
    assert_eq!(open, 3);
    for i in 1..=5 {
        assert_eq!(conditions(&api.node(&format!("gpu-{i:02}")))["GPUHealthy"], "False", "the condition tells on all");
    }
    api.assert_no_failures();
}

#[test]
fn an_unreachable_api_server_delays_the_action_but_neither_loses_nor_repeats_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let l = Loop::start("gpu-01", settings(&[]), &format!("http://127.0.0.1:{port}"), snapshot(1, |_| {}));
    l.publish(snapshot(2, xid79));
    l.wait("the verdict, and the API marked unreachable", Duration::from_secs(15), |v| {
        v.health == Health::Unhealthy && v.api == "unreachable" && v.api_errors.keys().any(|(_, e)| e == "unreachable")
    });

    let api = ApiServer::open().run_on(port);
    fleet(&api, 20);
    l.wait("the node quarantined", Duration::from_secs(20), |v| v.quarantined && v.api == "connected");
    let cordons = api.writes().iter().filter(|r| r.json().pointer("/spec/unschedulable") == Some(&json!(true))).count();
    assert_eq!(cordons, 1);
    assert_eq!(api.events_with_reason("GPUQuarantined").len(), 1);

    // It goes away again and comes back: nothing is applied twice.
    let down = api.go_down();
    std::thread::sleep(Duration::from_millis(800));
    let api = down.come_back();
    let checks = l.checks();
    l.wait("more checks", Duration::from_secs(5), |v| v.checks.values().sum::<u64>() >= checks + 3);
    assert_eq!(api.events_with_reason("GPUQuarantined").len(), 1);
    assert_eq!(api.node("gpu-01")["spec"]["unschedulable"], true);
}

#[test]
fn an_admin_who_lifts_or_takes_over_the_cordon_is_not_fought() {
    let api = ApiServer::open().run();
    fleet(&api, 20);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, uncorrected(1)));
    l.wait("quarantine", Duration::from_secs(10), |v| v.quarantined);

    // The admin uncordons: the loop lets go of its cordon and does not cordon again.
    api.patch_node_as("gpu-01", "kubectl-uncordon", json!({"spec": {"unschedulable": null}}));
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.events_with_reason("GPUQuarantineOverridden").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(api.events_with_reason("GPUQuarantineOverridden").len(), 1);
    let checks = l.checks();
    l.wait("more checks", Duration::from_secs(5), |v| v.checks.values().sum::<u64>() >= checks + 3);
    assert!(api.node("gpu-01")["spec"].get("unschedulable").is_none(), "not cordoned again");
    let cordons = api.writes().iter().filter(|r| r.json().pointer("/spec/unschedulable") == Some(&json!(true))).count();
    assert_eq!(cordons, 1);

    // The admin cordons it for their own reasons; on recovery it stays cordoned and
    // only the loop's taint goes.
    api.patch_node_as("gpu-01", "kubectl-cordon", json!({"spec": {"unschedulable": true}}));
    let before = api.writes().len();
    l.publish(snapshot(2, uncorrected(0)));
    l.wait("recovery", Duration::from_secs(10), |v| v.health == Health::Healthy && !v.quarantined);
    std::thread::sleep(Duration::from_millis(300));
    let n = api.node("gpu-01");
    assert_eq!(n["spec"]["unschedulable"], true, "the admin's cordon stays");
    assert!(!n["spec"]["taints"].as_array().unwrap().iter().any(|t| t["key"] == TAINT));
    for w in &api.writes()[before..] {
        assert!(w.json().pointer("/spec/unschedulable").is_none(), "touched unschedulable: {}", w.describe());
    }
    api.assert_no_failures();
}

#[test]
fn an_opted_out_node_gets_no_write_at_all() {
    let api = ApiServer::open().run();
    let mut n = registered_node("gpu-01");
    n["metadata"]["labels"]["gpu-telemetry.io/gpu-health-opt-out"] = json!("true");
    api.add_node(n);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, xid79));
    l.wait("opted out", Duration::from_secs(10), |v| v.opted_out && v.health == Health::Unhealthy);
    let checks = l.checks();
    l.wait("more checks", Duration::from_secs(5), |v| v.checks.values().sum::<u64>() >= checks + 2);
    assert!(api.writes().is_empty(), "{:?}", api.writes().iter().map(|w| w.describe()).collect::<Vec<_>>());
}

#[test]
fn an_operator_reset_acknowledgement_releases_a_reset_the_loop_could_not_see() {
    let api = ApiServer::open().run();
    fleet(&api, 20);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, xid79));
    l.wait("quarantine", Duration::from_secs(10), |v| v.quarantined);
    let checks = l.checks();
    l.wait("more checks", Duration::from_secs(5), |v| v.checks.values().sum::<u64>() >= checks + 3);
    assert!(l.view().quarantined, "no evidence of a reset: the quarantine holds");

    let reset_at = gpu_health::time::format(SystemTime::now() + Duration::from_secs(1));
    api.patch_node_as(
        "gpu-01",
        "kubectl-annotate",
        json!({"metadata": {"annotations": {"gpu-telemetry.io/gpu-health-reset": reset_at}}}),
    );
    l.wait("recovery", Duration::from_secs(10), |v| v.health == Health::Healthy && !v.quarantined);
    let n = api.node("gpu-01");
    assert!(n["spec"].get("unschedulable").is_none());
    assert_eq!(
        n["metadata"]["annotations"]["gpu-telemetry.io/gpu-health-reset"],
        json!(reset_at),
        "the operator's annotation stays"
    );
}

#[test]
fn a_restart_that_cannot_read_the_node_at_first_still_lifts_nothing() {
    use gpu_health::node_state::{Applied, Claim, GpuClaim, QuarantineState};
    use gpu_health::policy::{Latch, Needs, Reason};

    let api = ApiServer::open().run();
    fleet(&api, 20);
    let reason = Reason {
        gpu: Some(0),
        uuid: "GPU-0000".into(),
        code: "Xid79".into(),
        detail: "XID 79: GPU has fallen off the bus: it answers nothing until it is reset".into(),
        needs: Needs::Reset,
        first_seen: None,
    };
    let since = SystemTime::now() - Duration::from_secs(3600);
    let claim = Claim {
        reasons: vec![reason.clone()],
        latches: vec![Latch {
            reason: reason.clone(),
            since,
            ecc_baseline: Some(0),
            driver: Some("550.90.07".into()),
            seen_gone: false,
        }],
        applied: Applied { cordon: true, taint: Some("Xid79".into()) },
        gpus: vec![GpuClaim {
            index: 0,
            uuid: "GPU-0000".into(),
            since,
            devices: vec![],
            rules: vec![],
            overridden: false,
            blocked: false,
        }],
        node_scope: Some(DEVICE_PLUGIN.into()),
        ..Claim::new(QuarantineState::Quarantined, since, "boot-gpu-01")
    };
    api.patch_node_as(
        "gpu-01",
        "gpu-exporter-health",
        json!({
            "metadata": {"annotations": {"gpu-telemetry.io/gpu-health": claim.to_json()}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": TAINT, "value": "Xid79", "effect": "NoSchedule"}
            ]},
            "status": {"conditions": [{"type": "GPUHealthy", "status": "False", "reason": "Xid79",
                "message": format!("the whole node is held: {DEVICE_PLUGIN}; {}", reason.describe())}]}
        }),
    );
    // The first read of the node fails; the GPU looks fine (a restart forgets the XID).
    api.fail_next("GET", "/api/v1/nodes/gpu-01", 503, 1);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, |_| {}));
    l.wait("checks", Duration::from_secs(10), |v| v.checks.values().sum::<u64>() >= 5);
    let writes: Vec<String> = api.writes().iter().map(|w| w.describe()).collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(api.node("gpu-01")["spec"]["unschedulable"], true);
    assert_eq!(l.view().health, Health::Unhealthy);
    assert!(l.view().quarantined);
}

#[test]
fn a_breaker_that_cannot_be_asked_holds_the_cordon_but_not_the_condition() {
    let api = ApiServer::open().run();
    fleet(&api, 20);
    api.fail_next("GET", "/api/v1/namespaces/gpu-telemetry/configmaps/", 403, 2);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, xid79));
    let deadline = Instant::now() + Duration::from_secs(10);
    while conditions(&api.node("gpu-01")).get("GPUHealthy").map(String::as_str) != Some("False") {
        assert!(Instant::now() < deadline, "no condition written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_cordon = api.writes().iter().position(|r| r.json().pointer("/spec/unschedulable") == Some(&json!(true)));
    let first_condition = api.writes().iter().position(|r| r.path.ends_with("/status")).unwrap();
    assert!(first_cordon.is_none_or(|c| c > first_condition), "no cordon before the breaker answered");
    l.wait("quarantine once the breaker answers", Duration::from_secs(15), |v| v.quarantined);
    assert_eq!(api.node("gpu-01")["spec"]["unschedulable"], true);
    assert_eq!(api.config_map(NS, "gpu-health-breaker").unwrap()["data"].as_object().unwrap().len(), 1);
    assert_eq!(
        l.view().api_errors.get(&("get_config_map", "403".to_string())),
        Some(&2),
        "a 403 is counted, and not retried within a request"
    );
}

/// The loop's taint value, its condition's reason and the primary reason its last
/// Event names, as the API server holds them.
fn primary_everywhere(api: &Running, node: &str) -> (String, String, String) {
    let n = api.node(node);
    let taint = n["spec"]["taints"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["key"] == TAINT))
        .map_or(String::new(), |t| t["value"].as_str().unwrap().to_string());
    let condition = n["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "GPUHealthy"))
        .map_or(String::new(), |c| c["reason"].as_str().unwrap().to_string());
    let events = api.events();
    let named = events
        .iter()
        .rev()
        .find_map(|e| e["message"].as_str().unwrap().split("primary reason ").nth(1))
        .map_or(String::new(), |rest| rest.split([';', ' ']).next().unwrap().to_string());
    (taint, condition, named)
}

fn wait_for_primary(api: &Running, node: &str, code: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = (code.to_string(), code.to_string(), code.to_string());
    while primary_everywhere(api, node) != want {
        assert!(
            Instant::now() < deadline,
            "taint, condition, Event: {:?}, expected all {code}",
            primary_everywhere(api, node)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn taint_condition_and_events_agree_on_the_primary_reason_as_reasons_join() {
    // XID 79, then the GPU is lost: Xid79 needs a reset and stays primary everywhere.
    let api = ApiServer::open().run();
    fleet(&api, 20);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, xid79));
    l.wait("quarantine", Duration::from_secs(10), |v| v.quarantined);
    wait_for_primary(&api, "gpu-01", "Xid79");
    l.publish(snapshot(2, |g| {
        xid79(g);
        lost(g);
    }));
    l.wait("both reasons", Duration::from_secs(10), |v| v.reasons.len() == 2);
    l.wait_checks(2);
    assert_eq!(primary_everywhere(&api, "gpu-01"), ("Xid79".into(), "Xid79".into(), "Xid79".into()));
    assert!(api.events_with_reason("GPUReasonChanged").is_empty());
    assert_eq!(l.view().reasons[0].code, "Xid79");

    // The reverse: lost first, then XID 79 joins, more severe: all three move together.
    let api = ApiServer::open().run();
    fleet(&api, 20);
    let l = Loop::start("gpu-01", settings(&[]), &api.url(), snapshot(1, lost));
    l.wait("quarantine", Duration::from_secs(10), |v| v.quarantined);
    wait_for_primary(&api, "gpu-01", "GpuLost");
    let before = api.writes().len();
    l.publish(snapshot(2, |g| {
        xid79(g);
        lost(g);
    }));
    wait_for_primary(&api, "gpu-01", "Xid79");
    let moved = api.events_with_reason("GPUReasonChanged");
    assert_eq!(moved.len(), 1);
    assert!(moved[0]["message"].as_str().unwrap().contains("(was GpuLost)"), "{}", moved[0]["message"]);
    // One node patch moves the taint (and records it in the claim), not a second cordon.
    let patches: Vec<_> = api.writes()[before..].iter().filter(|w| w.path == "/api/v1/nodes/gpu-01").cloned().collect();
    assert_eq!(patches.len(), 1, "{:?}", patches.iter().map(|w| w.describe()).collect::<Vec<_>>());
    assert!(patches[0].json().pointer("/spec/unschedulable").is_none());
    let claim: Value = serde_json::from_str(
        api.node("gpu-01")["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(claim["applied"], json!({"cordon": true, "taint": "Xid79"}));
    let taints = api.node("gpu-01")["spec"]["taints"].as_array().unwrap().clone();
    assert_eq!(taints.iter().filter(|t| t["key"] == TAINT).count(), 1, "{taints:?}");
    assert!(taints.iter().any(|t| t["key"] == "nvidia.com/gpu"), "other taints kept");
    l.wait_checks(2);
    assert_eq!(api.events_with_reason("GPUReasonChanged").len(), 1, "told once");
    api.assert_no_failures();
}

/// Log lines of this test binary, for tests that check what the loop says.
fn logs() -> &'static std::sync::Mutex<Vec<u8>> {
    static LOGS: std::sync::OnceLock<&'static std::sync::Mutex<Vec<u8>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static std::sync::Mutex<Vec<u8>> = Box::leak(Box::new(std::sync::Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || LogWriter(logs))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
}

struct LogWriter(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn log_lines(node: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    text.lines().filter(|l| l.contains(node)).map(String::from).collect()
}

fn wait_for_log(node: &str, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines = log_lines(node);
        if lines.iter().any(|l| l.contains(needle)) {
            return lines;
        }
        assert!(Instant::now() < deadline, "no log line with {needle:?}; lines for {node}:\n{}", lines.join("\n"));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn conflicts_that_never_end_are_logged_as_conflicts_not_as_an_unavailable_api() {
    logs();
    let api = ApiServer::open().run();
    api.add_node(registered_node("gpu-409"));
    api.add_node(registered_node("gpu-503"));
    // Every node update answers 409 on one node, 503 on the other.
    api.fail_next("PATCH", "/api/v1/nodes/gpu-409", 409, 10_000);
    api.fail_next("PATCH", "/api/v1/nodes/gpu-503", 503, 10_000);
    let conflicted = Loop::start("gpu-409", settings(&[]), &api.url(), snapshot(1, xid79));
    let unreachable = Loop::start("gpu-503", settings(&[]), &api.url(), snapshot(1, xid79));

    let lines = wait_for_log("gpu-409", "node gpu-409 changed under us 5 times");
    assert!(lines.iter().any(|l| l.contains("giving up this check")), "{}", lines.join("\n"));
    wait_for_log("gpu-409", "would cordon");
    let lines = log_lines("gpu-409");
    assert!(
        !lines.iter().any(|l| l.contains("unavailable") || l.contains("cannot update the node")),
        "a node that keeps changing is not an unavailable API:\n{}",
        lines.join("\n")
    );
    assert_eq!(conflicted.view().api, "connected", "the API server answered every time");
    assert!(conflicted.view().api_errors.get(&("patch_node", "409".to_string())).is_some_and(|n| *n >= 5));

    let lines = wait_for_log("gpu-503", "Kubernetes API unavailable: would cordon");
    assert!(!lines.iter().any(|l| l.contains("changed under us")), "{}", lines.join("\n"));
    unreachable.wait("marked unreachable", Duration::from_secs(10), |v| v.api == "unreachable");
}
