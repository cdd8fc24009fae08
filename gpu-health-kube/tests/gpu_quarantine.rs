//! Per-GPU quarantine against the in-test API server: the health loop driven by
//! observations of 8-GPU nodes, on DRA nodes (each GPU published as a DRA device, the
//! cluster serving DeviceTaintRules) and on device-plugin nodes. Every write is checked
//! for method, path and body where the order matters (scripted), or by the objects as
//! they end up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant, SystemTime};

use gpu_health::device_rules::{Effect, Hold, desired_rule, rule_name};
use gpu_health::names::Names;
use gpu_health::observation::DraDevice;
use gpu_health::policy::Health;
use serde_json::{Value, json};
use support::{Cycle, DRIVER, Loop, NS, device, lost, node_snapshot, settings, uuid, xid, xid79};
use test_support::apiserver::{ApiServer, Expect, MERGE, Running};
use test_support::cluster::registered_node;

const NODE: &str = "gpu-01";
const CM: &str = "/api/v1/namespaces/gpu-telemetry/configmaps";
const EVENTS: &str = "/api/v1/namespaces/default/events";
const RULES: &str = "/apis/resource.k8s.io/v1/devicetaintrules";
const TAINT: &str = "gpu-telemetry.io/gpu-unhealthy";
const CLAIM: &str = "gpu-telemetry.io/gpu-health";

fn dra(node: &str, i: u32) -> DraDevice {
    DraDevice { driver: DRIVER.into(), pool: node.into(), device: device(i) }
}

/// The loop's rule for GPU `i` of `node`.
fn our_rule(node: &str, i: u32) -> String {
    rule_name(node, &dra(node, i))
}

/// A cluster of `n` GPU nodes serving DeviceTaintRules in `versions`.
fn cluster(n: usize, versions: &[&str]) -> Running {
    let api = ApiServer::open().run();
    api.serve_resource_api(versions, versions);
    for i in 1..=n {
        api.add_node(registered_node(&format!("gpu-{i:02}")));
    }
    api
}

/// 8 GPUs of `node`, on a DRA node or not, the GPUs in `xid` with XID 79.
fn eight(node: &str, generation: u64, dra: bool, xid: &[u32]) -> std::sync::Arc<Cycle> {
    let xid = xid.to_vec();
    node_snapshot(node, generation, 8, dra, move |i, g| {
        if xid.contains(&i) {
            xid79(g);
        }
    })
}

fn claim(node: &Value) -> Option<Value> {
    node["metadata"]["annotations"][CLAIM].as_str().map(|t| serde_json::from_str(t).unwrap())
}

fn condition(node: &Value) -> (String, String) {
    let c = node["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "GPUHealthy").unwrap();
    (c["status"].as_str().unwrap().to_string(), c["message"].as_str().unwrap_or("").to_string())
}

fn has_our_taint(node: &Value) -> bool {
    node["spec"]["taints"].as_array().is_some_and(|t| t.iter().any(|t| t["key"] == TAINT))
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cordons(api: &Running) -> usize {
    api.writes().iter().filter(|w| w.json().pointer("/spec/unschedulable") == Some(&json!(true))).count()
}

#[test]
fn xid_79_on_one_gpu_of_eight_on_a_dra_node_is_one_device_taint_and_no_cordon_and_recovery_lifts_it() {
    let api = cluster(20, &["v1"]);
    let node = format!("/api/v1/nodes/{NODE}");
    let status = format!("{node}/status");
    let gpus_cm = format!("{CM}/gpu-health-breaker-gpus");
    let rule = our_rule(NODE, 3);
    api.expect(Expect::patch(&status).has("/status/conditions/0/status", json!("True")));
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[]));
    api.finish(Duration::from_secs(10));
    assert_eq!(l.view().device_taints, "v1");

    // XID 79 on GPU 3: a place in the GPU breaker, one rule, the claim, the condition, an Event.
    api.expect(Expect::post(CM).has("/metadata/name", json!("gpu-health-breaker-gpus")));
    api.expect(Expect::put(&gpus_cm).body("takes GPU 3's place", |b| {
        b["data"].as_object().is_some_and(|d| d.len() == 1 && d.contains_key("gpu-01_GPU-gpu-01-3"))
    }));
    api.expect(
        Expect::post(RULES)
            .has("/metadata/name", json!(rule))
            .has("/apiVersion", json!("resource.k8s.io/v1"))
            .has("/spec/deviceSelector", json!({"driver": DRIVER, "pool": NODE, "device": "gpu-3"}))
            .has("/spec/taint", json!({"key": TAINT, "value": "Xid79", "effect": "NoSchedule"}))
            .has("/metadata/labels/app.kubernetes.io~1managed-by", json!("gpu-exporter-health"))
            .has("/metadata/labels/gpu-telemetry.io~1gpu-health-node", json!(NODE))
            .has("/metadata/annotations/gpu-telemetry.io~1gpu-health-node", json!(NODE))
            .has("/metadata/annotations/gpu-telemetry.io~1gpu-health-gpu", json!("3/GPU-gpu-01-3")),
    );
    api.expect(Expect::patch(&node).lacks("/spec").body("records GPU 3 and its rule", |b| {
        let claim: Value = serde_json::from_str(b["metadata"]["annotations"][CLAIM].as_str().unwrap_or("")).unwrap();
        claim["state"] == "gpus-quarantined"
            && claim["applied"] == json!({"cordon": false})
            && claim["gpus"][0]["index"] == 3
            && claim["gpus"][0]["rules"][0] == our_rule(NODE, 3)
    }));
    api.expect(Expect::patch(&status).has("/status/conditions/0/status", json!("False")).body(
        "names the GPU held and says the node stays schedulable",
        |b| {
            let m = b["status"]["conditions"][0]["message"].as_str().unwrap_or("");
            b["status"]["conditions"][0]["reason"] == "Xid79"
                && m.starts_with("only GPU 3 (GPU-gpu-01-3) held, by device taints; the node stays schedulable")
        },
    ));
    api.expect(Expect::post(EVENTS).has("/reason", json!("GPUQuarantined")));
    let started = Instant::now();
    l.publish(eight(NODE, 2, true, &[3]));
    api.finish(Duration::from_secs(10));
    assert!(started.elapsed() < Duration::from_secs(5), "held in {:?}", started.elapsed());
    let n = api.node(NODE);
    assert!(n["spec"].get("unschedulable").is_none(), "no cordon");
    assert!(!has_our_taint(&n), "no node taint");
    assert_eq!(api.device_taint_rules().len(), 1);
    l.wait("GPU 3 quarantined in the metrics", Duration::from_secs(5), |v| {
        v.gpus.iter().filter(|g| g.quarantined).map(|g| g.index).collect::<Vec<_>>() == vec![3] && !v.quarantined
    });
    let view = l.view();
    assert_eq!(view.gpu_breaker.map(|b| (b.quarantined, b.limit, b.fleet)), Some((1, 16, 160)));
    assert_eq!(view.actions.get("device_taint"), Some(&1));

    // Settled: nothing is written while nothing changes.
    let writes = api.writes().len();
    l.wait_checks(3);
    assert_eq!(api.writes().len(), writes);

    // The GPU falls off the bus, then answers again: the reset is seen, the latch goes;
    // after two healthy checks the claim lets go first, then the rule is deleted (if
    // still the version read), the condition turns True and the place is given back.
    api.expect(Expect::patch(&node).lacks("/spec"));
    api.expect(Expect::patch(&status).has("/status/conditions/0/status", json!("False")));
    l.publish(node_snapshot(NODE, 3, 8, true, |i, g| {
        if i == 3 {
            xid79(g);
            lost(g);
        }
    }));
    api.finish(Duration::from_secs(10));
    let uid = api.device_taint_rules()[&rule]["metadata"]["uid"].clone();
    api.expect(Expect::patch(&node).lacks("/spec").body("drops the latch", |b| {
        !b["metadata"]["annotations"][CLAIM].as_str().unwrap_or("latches").contains("latches")
    }));
    api.expect(
        Expect::patch(&node).lacks("/spec").has("/metadata/annotations/gpu-telemetry.io~1gpu-health", Value::Null),
    );
    api.expect(
        Expect::new("DELETE", &format!("{RULES}/{rule}"))
            .has("/preconditions/uid", uid)
            .body("carries the resourceVersion read", |b| b["preconditions"]["resourceVersion"].is_string()),
    );
    api.expect(Expect::patch(&status).has("/status/conditions/0/status", json!("True")));
    api.expect(Expect::post(EVENTS).has("/reason", json!("GPURecovered")).body("names the rule lifted", |b| {
        b["message"]
            .as_str()
            .unwrap_or("")
            .contains("GPU 3 (GPU-gpu-01-3): removed DeviceTaintRule gpu-health.gpu-01.gpu-3-")
    }));
    api.expect(Expect::put(&gpus_cm).body("gives the place back", |b| b["data"] == json!({})));
    l.publish(eight(NODE, 4, true, &[3]));
    api.finish(Duration::from_secs(10));
    assert!(api.device_taint_rules().is_empty());
    assert_eq!(condition(&api.node(NODE)).0, "True");
    l.wait("healthy, nothing held", Duration::from_secs(5), |v| {
        v.health == Health::Healthy && v.gpus.iter().all(|g| !g.quarantined)
    });
}

#[test]
fn the_same_xid_on_a_device_plugin_node_cordons_and_says_why() {
    let api = cluster(20, &["v1"]);
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, false, &[]));
    l.wait("healthy", Duration::from_secs(10), |v| v.health == Health::Healthy);
    l.publish(eight(NODE, 2, false, &[3]));
    l.wait("quarantine", Duration::from_secs(10), |v| v.quarantined);
    let n = api.node(NODE);
    assert_eq!(n["spec"]["unschedulable"], true);
    assert!(has_our_taint(&n));
    let (status, message) = condition(&n);
    assert_eq!(status, "False");
    assert!(
        message.starts_with(
            "the whole node is held: GPU 3 is handed out by a device plugin, which cannot keep a single GPU from the \
             scheduler;"
        ),
        "{message}"
    );
    assert!(api.device_taint_rules().is_empty());
    assert!(!api.requests().iter().any(|r| r.path.contains("devicetaintrules") && r.is_write()));
    assert_eq!(claim(&n).unwrap()["state"], "quarantined");
    api.assert_no_failures();
}

#[test]
fn three_of_eight_gpus_failing_cordon_the_node() {
    let api = cluster(20, &["v1"]);
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[]));
    l.wait("healthy", Duration::from_secs(10), |v| v.health == Health::Healthy);
    // GPU 1 first: a device taint.
    l.publish(eight(NODE, 2, true, &[1]));
    wait_until("GPU 1's rule", Duration::from_secs(10), || api.device_taint_rules().len() == 1);
    assert!(api.node(NODE)["spec"].get("unschedulable").is_none());
    // GPUs 4 and 6 join: three of eight points at the node; it is cordoned, GPU 1's rule stays.
    l.publish(eight(NODE, 3, true, &[1, 4, 6]));
    l.wait("the node quarantined", Duration::from_secs(10), |v| v.quarantined);
    let n = api.node(NODE);
    assert_eq!(n["spec"]["unschedulable"], true);
    let message = condition(&n).1;
    assert!(message.starts_with("the whole node is held: 3 of 8 GPUs failed"), "{message}");
    assert_eq!(api.device_taint_rules().keys().cloned().collect::<Vec<_>>(), vec![our_rule(NODE, 1)]);
    assert_eq!(cordons(&api), 1);
    let events = api.events_with_reason("GPUQuarantined");
    assert_eq!(events.len(), 2, "GPU 1's device taint, then the node");
    api.assert_no_failures();
}

/// An admin's DeviceTaintRule: `name`, selecting `device` of `node`.
fn admin_rule(name: &str, node: &str, device: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": {"team": "infra"}},
        "spec": {"deviceSelector": {"driver": DRIVER, "pool": node, "device": device},
                 "taint": {"key": "example.com/maintenance", "value": "firmware", "effect": "NoSchedule"}}
    })
}

#[test]
fn an_admins_device_taint_rules_are_left_alone() {
    let api = cluster(20, &["v1"]);
    api.add_device_taint_rule(admin_rule("maintenance-gpu-5", NODE, "gpu-5"));
    api.add_device_taint_rule(admin_rule("maintenance-gpu-3", NODE, "gpu-3"));
    let before = api.device_taint_rules();
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[]));
    l.wait("healthy", Duration::from_secs(10), |v| v.health == Health::Healthy);
    l.publish(eight(NODE, 2, true, &[3]));
    wait_until("our rule", Duration::from_secs(10), || api.device_taint_rules().len() == 3);
    // Recovery: a reset, then healthy checks.
    l.publish(node_snapshot(NODE, 3, 8, true, |i, g| {
        if i == 3 {
            xid79(g);
            lost(g);
        }
    }));
    l.wait_checks(1);
    l.publish(eight(NODE, 4, true, &[3]));
    l.wait("recovery", Duration::from_secs(10), |v| v.health == Health::Healthy);
    wait_until("our rule deleted", Duration::from_secs(10), || api.device_taint_rules().len() == 2);
    let after = api.device_taint_rules();
    for name in ["maintenance-gpu-5", "maintenance-gpu-3"] {
        assert_eq!(after[name], before[name], "{name} untouched");
        assert!(
            !api.requests().iter().any(|r| r.path.ends_with(name)),
            "no request about {name}: {:?}",
            api.requests().iter().filter(|r| r.path.contains(name)).map(|r| r.describe()).collect::<Vec<_>>()
        );
    }
    api.assert_no_failures();
}

#[test]
fn the_gpu_breaker_holds_its_limit_while_several_nodes_race() {
    let api = cluster(20, &["v1"]);
    let loops: Vec<Loop> = (1..=5)
        .map(|i| {
            let name = format!("gpu-{i:02}");
            Loop::start(&name, settings(&["--health.breaker.max-gpus", "2"]), &api.url(), eight(&name, 1, true, &[]))
        })
        .collect();
    for l in &loops {
        l.wait("the first check", Duration::from_secs(10), |v| v.health == Health::Healthy);
    }
    for (i, l) in loops.iter().enumerate() {
        l.publish(eight(&format!("gpu-{:02}", i + 1), 2, true, &[0]));
    }
    for l in &loops {
        l.wait("a GPU breaker decision", Duration::from_secs(15), |v| v.gpu_breaker.is_some());
    }
    std::thread::sleep(Duration::from_millis(600));
    let rules = api.device_taint_rules();
    assert_eq!(rules.len(), 2, "two GPUs at most: {:?}", rules.keys().collect::<Vec<_>>());
    let places = api.config_map(NS, "gpu-health-breaker-gpus").unwrap()["data"].as_object().unwrap().clone();
    let mut holders: Vec<String> = places.keys().map(|k| k.split('_').next().unwrap().to_string()).collect();
    holders.sort();
    let mut tainted: Vec<String> = rules
        .values()
        .map(|r| r["metadata"]["annotations"]["gpu-telemetry.io/gpu-health-node"].as_str().unwrap().to_string())
        .collect();
    tainted.sort();
    assert_eq!(holders, tainted, "the places are the rules' nodes");
    assert_eq!(api.events_with_reason("GPUQuarantineBlocked").len(), 3);
    assert_eq!(loops.iter().filter(|l| l.view().gpu_breaker.is_some_and(|b| b.open)).count(), 3);
    assert_eq!(cordons(&api), 0, "a full GPU breaker never turns into cordons");
    assert!(api.config_map(NS, "gpu-health-breaker").is_none_or(|m| m["data"] == json!({})), "no node place taken");
    api.assert_no_failures();
}

#[test]
fn a_restart_writes_nothing() {
    let api = cluster(20, &["v1"]);
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[3]));
    wait_until("our rule", Duration::from_secs(10), || api.device_taint_rules().len() == 1);
    l.wait("settled", Duration::from_secs(10), |v| v.gpus.iter().any(|g| g.quarantined));
    l.wait_checks(2);
    drop(l);
    let writes = api.writes().len();
    // The new process has not seen the XID (counts start again): the claim and the
    // rule carry the quarantine.
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[]));
    l.wait("checks", Duration::from_secs(10), |v| v.checks.values().sum::<u64>() >= 5);
    let new: Vec<String> = api.writes()[writes..].iter().map(|w| w.describe()).collect();
    assert!(new.is_empty(), "{new:#?}");
    let v = l.view();
    assert_eq!(v.health, Health::Unhealthy);
    assert_eq!(v.gpus.iter().filter(|g| g.quarantined).map(|g| g.index).collect::<Vec<_>>(), vec![3]);
    assert_eq!(api.device_taint_rules().len(), 1);
    api.assert_no_failures();
}

#[test]
fn a_rule_whose_claim_was_never_written_is_taken_back_after_a_restart() {
    let api = cluster(20, &["v1"]);
    let names = Names::new("gpu-telemetry.io");
    let d = dra(NODE, 3);
    let since = SystemTime::now() - Duration::from_secs(60);
    let u = uuid(NODE, 3);
    let hold = Hold { index: 3, uuid: &u, device: &d, value: "Xid79", effect: Effect::NoSchedule, since };
    api.add_device_taint_rule(serde_json::to_value(desired_rule(&names, NODE, hold)).unwrap());
    let node = format!("/api/v1/nodes/{NODE}");
    api.expect(Expect::patch(&node).lacks("/spec").body("records the rule it found", |b| {
        let claim: Value = serde_json::from_str(b["metadata"]["annotations"][CLAIM].as_str().unwrap_or("")).unwrap();
        claim["state"] == "gpus-quarantined"
            && claim["gpus"][0]["rules"][0] == our_rule(NODE, 3)
            && claim["latches"][0]["reason"]["code"] == "Xid79"
    }));
    api.expect(Expect::patch(&format!("{node}/status")).has("/status/conditions/0/reason", json!("Xid79")));
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[]));
    api.finish(Duration::from_secs(10));
    l.wait_checks(3);
    assert_eq!(api.device_taint_rules().len(), 1, "not created again, not deleted");
    assert!(l.view().gpus.iter().any(|g| g.index == 3 && g.quarantined));
}

#[test]
fn a_cluster_without_device_taints_quarantines_the_node_and_says_why() {
    let api = ApiServer::open().run();
    // resource.k8s.io is served (ResourceSlices), but no version serves DeviceTaintRules.
    api.serve_resource_api(&["v1"], &[]);
    api.add_node(registered_node(NODE));
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[3]));
    l.wait("quarantine", Duration::from_secs(10), |v| v.quarantined);
    let message = condition(&api.node(NODE)).1;
    assert!(message.starts_with("the whole node is held: the API server serves no DeviceTaintRule"), "{message}");
    assert_eq!(l.view().device_taints, "none");
    api.assert_no_failures();
}

#[test]
fn a_foreign_rule_under_the_loops_name_is_left_alone_and_the_node_quarantined() {
    let api = cluster(20, &["v1"]);
    api.add_device_taint_rule(admin_rule(&our_rule(NODE, 3), NODE, "gpu-3"));
    let before = api.device_taint_rules();
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[]));
    l.wait("healthy", Duration::from_secs(10), |v| v.health == Health::Healthy);
    l.publish(eight(NODE, 2, true, &[3]));
    l.wait("the node quarantined instead", Duration::from_secs(10), |v| v.quarantined);
    let message = condition(&api.node(NODE)).1;
    assert!(message.contains("already exists and is not the health loop's"), "{message}");
    assert_eq!(api.device_taint_rules(), before, "the foreign rule is untouched");
    assert_eq!(l.view().device_taints, "none");
}

#[test]
fn a_refused_or_failing_rule_create_has_a_defined_outcome() {
    // 403 (an admission policy, RBAC): the node is quarantined instead, and says why.
    let api = cluster(20, &["v1"]);
    api.fail_next("POST", RULES, 403, 1);
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[3]));
    l.wait("the node quarantined instead", Duration::from_secs(10), |v| v.quarantined);
    let message = condition(&api.node(NODE)).1;
    assert!(message.contains("the Kubernetes API refused the health loop's device taint"), "{message}");
    assert!(api.device_taint_rules().is_empty());
    drop(l);

    // 500 twice: retried within the request; the GPU is held by its rule, no cordon.
    let api = cluster(20, &["v1"]);
    api.fail_next("POST", RULES, 500, 2);
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[3]));
    wait_until("the rule", Duration::from_secs(10), || api.device_taint_rules().len() == 1);
    l.wait_checks(2);
    assert!(api.node(NODE)["spec"].get("unschedulable").is_none());
    assert_eq!(l.view().api_errors.get(&("create_device_taint_rule", "500".to_string())), Some(&2));
    api.assert_no_failures();
}

#[test]
fn a_damaged_rule_with_the_loops_labels_is_left_alone() {
    let api = cluster(20, &["v1"]);
    let mut damaged = admin_rule("gpu-health.gpu-01.leftover", NODE, "gpu-7");
    damaged["metadata"]["labels"] =
        json!({"app.kubernetes.io/managed-by": "gpu-exporter-health", "gpu-telemetry.io/gpu-health-node": NODE});
    damaged["metadata"]["annotations"] = json!({"gpu-telemetry.io/gpu-health-node": NODE});
    api.add_device_taint_rule(damaged);
    let before = api.device_taint_rules();
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[3]));
    wait_until("GPU 3's rule", Duration::from_secs(10), || api.device_taint_rules().len() == 2);
    l.wait_checks(2);
    let after = api.device_taint_rules();
    assert_eq!(after["gpu-health.gpu-01.leftover"], before["gpu-health.gpu-01.leftover"]);
    assert!(!api.requests().iter().any(|r| r.path.ends_with("leftover")));
    api.assert_no_failures();
}

#[test]
fn a_rule_an_admin_deletes_is_not_put_back() {
    let api = cluster(20, &["v1"]);
    let l = Loop::start(NODE, settings(&[]), &api.url(), eight(NODE, 1, true, &[3]));
    wait_until("our rule", Duration::from_secs(10), || api.device_taint_rules().len() == 1);
    l.wait_checks(1);
    api.delete_device_taint_rule(&our_rule(NODE, 3));
    wait_until("the override told", Duration::from_secs(10), || {
        !api.events_with_reason("GPUQuarantineOverridden").is_empty()
    });
    l.wait_checks(3);
    assert!(api.device_taint_rules().is_empty(), "not created again");
    assert_eq!(api.events_with_reason("GPUQuarantineOverridden").len(), 1);
    assert!(claim(&api.node(NODE)).unwrap()["gpus"][0]["overridden"] == true);
    api.assert_no_failures();
}

#[test]
fn a_v1beta2_cluster_gets_v1beta2_rules_and_no_execute_when_asked() {
    let api = cluster(20, &["v1beta2"]);
    let l = Loop::start(
        NODE,
        settings(&["--health.gpu-quarantine.effect", "NoExecute"]),
        &api.url(),
        eight(NODE, 1, true, &[3]),
    );
    wait_until("our rule", Duration::from_secs(10), || api.device_taint_rules().len() == 1);
    let create = api.writes().into_iter().find(|w| w.path.ends_with("devicetaintrules")).unwrap();
    assert_eq!(create.path, "/apis/resource.k8s.io/v1beta2/devicetaintrules");
    assert_eq!(create.json()["apiVersion"], "resource.k8s.io/v1beta2");
    assert_eq!(create.json()["spec"]["taint"]["effect"], "NoExecute");
    assert_eq!(l.view().device_taints, "v1beta2");
    assert_eq!(l.view().device_taint_effect, "NoExecute");
    // The primary reason moves (the GPU is also lost; Xid79 stays, needing a reset) —
    // and with a reboot-class XID added it moves: the rule follows by a merge patch.
    l.publish(node_snapshot(NODE, 2, 8, true, |i, g| {
        if i == 3 {
            xid79(g);
            xid(151)(g);
        }
    }));
    wait_until("the rule follows the primary reason", Duration::from_secs(10), || {
        api.device_taint_rules().values().all(|r| r["spec"]["taint"]["value"] == "Xid151")
    });
    let patch = api.writes().into_iter().find(|w| w.method == "PATCH" && w.path.contains("devicetaintrules")).unwrap();
    assert_eq!(patch.content_type, MERGE);
    assert!(patch.json()["metadata"]["resourceVersion"].is_string());
    api.assert_no_failures();
}
