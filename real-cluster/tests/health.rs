//! The health loop on a real API server: simulated GPU nodes joined to it, each with its
//! exporter in place of the DaemonSet's pod, running with `deploy/`'s identity (a token
//! of `gpu-exporter` bound to that pod, so the API server names the node in the token's
//! `userInfo.extra`), `deploy/`'s roles and bindings, and its ValidatingAdmissionPolicies
//! loaded. Faults are injected by rewriting a node's own scenario (XID 79 and the GPU
//! off the bus, then a reset), which the simulated kubelet and fake-nvml follow.
//!
//! - `a_quarantine_and_its_recovery_on_real_nodes`: dry-run writes only its annotation
//!   (which goes with the first enforcing write: `kubectl gpu nodes` shows the truth);
//!   the admission policy refuses the exporter's token everything but its own node's
//!   writes, each with its own message, and the server a breaker write carrying a stale
//!   `resourceVersion` (409); enforce cordons, taints, sets the condition and
//!   writes an Event; an admin's cordon is never lifted (the real managedFields say
//!   whose it is); recovery lifts what the loop set and nothing else.
//! - `three_nodes_failing_at_once_hold_the_breaker_at_its_share`: three exporters race
//!   for the breaker's ConfigMap under the real server's resourceVersion checks (how many
//!   409s the race met is printed: it depends on timing, and was 0 in the runs so far).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use test_support::control_plane::ControlPlane;
use test_support::joined::{JoinedFleet, NAMESPACE, NodeSpec, base, exporter_pod};
use test_support::simulated::{binaries, wait_until_ok};

const TAINT: &str = "gpu-telemetry.io/gpu-unhealthy";
const CLAIM: &str = "gpu-telemetry.io/gpu-health";
const DRY_RUN: &str = "gpu-telemetry.io/gpu-health-dry-run";
const MANAGER: &str = "gpu-exporter-health";

/// Two H100s with fixed UUIDs of their own per node.
fn scenario(node: &str, faults: &[&str]) -> String {
    let faults = if faults.is_empty() { String::new() } else { format!(", faults: [{}]", faults.join(", ")) };
    let uuid = |i: u32| {
        let n: u32 = node.bytes().map(u32::from).sum();
        format!("GPU-{n:08x}-0000-4000-8000-00000000000{i}")
    };
    format!(
        "gpus:\n  - {{model: H100-SXM5-80GB, uuid: {}{faults}}}\n  - {{model: H100-SXM5-80GB, uuid: {}}}\n",
        uuid(0),
        uuid(1)
    )
}

// Faults on GPU 0, appended one by one: each rewrite adds to the list, as fake-nvml
// counts the XIDs it has delivered by their place in it (an exporter that starts skips
// those already due).
/// XID 79 (fallen off the bus).
const XID: &str = "{at_s: 0, xid: 79}";
/// The GPU off the bus: NVML calls it lost.
const LOST: &str = "{at_s: 0, lost: true}";
/// Reset: it answers again, which is the evidence an XID 79 latch waits for.
const RESET: &str = "{at_s: 0, reset: true}";

/// Fast checks: every second, two healthy checks to recover, no minimum hold.
const FAST: [&str; 6] =
    ["--health.check-interval", "1s", "--health.recovery-checks", "2", "--health.min-quarantine", "0"];

fn node(cp: &ControlPlane, name: &str) -> Value {
    serde_json::from_str(&cp.run(&["get", "node", name, "-o", "json", "--show-managed-fields"])).unwrap()
}

fn has_our_taint(n: &Value) -> bool {
    n["spec"]["taints"].as_array().is_some_and(|t| t.iter().any(|t| t["key"] == TAINT))
}

fn condition(n: &Value) -> Option<(String, String)> {
    let c = n["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "GPUHealthy")?;
    Some((c["status"].as_str()?.to_string(), c["reason"].as_str().unwrap_or("").to_string()))
}

fn claim(n: &Value) -> Option<Value> {
    n["metadata"]["annotations"][CLAIM].as_str().map(|t| serde_json::from_str(t).unwrap())
}

/// The fields of the Node (not its status) that `manager` owns, as managedFields say.
fn owned_by(n: &Value, manager: &str) -> String {
    n["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["manager"] == manager && m["subresource"].is_null())
        .map(|m| m["fieldsV1"].to_string())
        .collect()
}

/// The health checks an exporter has run, all kinds together (`gpu_health_checks_total`).
fn checks_run(page: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with("gpu_health_checks_total"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Node `name`'s row in `kubectl gpu nodes`, as an admin reads it.
fn gpu_nodes_row(cp: &ControlPlane, name: &str) -> String {
    let out = test_support::run_with_kubeconfig(&binaries().join("kubectl-gpu"), &cp.kubeconfig, &["nodes"]);
    assert_eq!(out.code, 0, "kubectl gpu nodes: {}", out.stderr);
    out.stdout.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_default().to_string()
}

/// Waits until node `name` satisfies `ok`, saying what it last was.
fn wait_node(cp: &ControlPlane, what: &str, name: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_until_ok(what, Duration::from_secs(60), || {
        let n = node(cp, name);
        if ok(&n) {
            Ok(n)
        } else {
            Err(format!(
                "spec {} annotations {} conditions {}",
                n["spec"], n["metadata"]["annotations"], n["status"]["conditions"]
            ))
        }
    })
}

/// The reasons of the Events about node `name`.
fn events(cp: &ControlPlane, name: &str) -> Vec<String> {
    let out = cp.run(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        &format!("involvedObject.kind=Node,involvedObject.name={name}"),
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    out.split_whitespace().map(str::to_string).collect()
}

/// Runs kubectl with `kubeconfig`; (succeeded, stderr).
fn try_as(cp: &ControlPlane, kubeconfig: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    let out = cp.run_as_with_input(kubeconfig, args, stdin);
    (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// A strategic merge patch of node `name`'s status with the token of `kubeconfig`,
/// straight to the API server; (succeeded, the answer).
fn patch_status(cp: &ControlPlane, kubeconfig: &Path, name: &str, body: &str) -> (bool, String) {
    let token = ControlPlane::token_of(kubeconfig);
    let out = std::process::Command::new("curl")
        .args(["-sS", "-X", "PATCH", "--cacert"])
        .arg(&cp.ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: application/strategic-merge-patch+json", "--data", body])
        .arg(format!("{}/api/v1/nodes/{name}/status", cp.server))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).to_string();
    let code = serde_json::from_str::<Value>(&answer).ok().and_then(|v| v["code"].as_u64());
    (out.status.success() && code.is_none(), answer)
}

/// Asserts the request is refused by `policy` with `message`, as Forbidden (403: the
/// policies set `reason: Forbidden`; kubectl says `Error from server (Forbidden)`, the
/// API's Status `"reason": "Forbidden"`).
fn refused(what: &str, (ok, err): (bool, String), policy: &str, message: &str) {
    assert!(!ok, "{what} was allowed");
    assert!(
        err.contains(&format!("ValidatingAdmissionPolicy '{policy}.gpu-telemetry.io'")) && err.contains(message),
        "{what}: refused, but not by {policy} with {message:?}: {err}"
    );
    assert!(
        err.contains("Error from server (Forbidden)") || err.contains("\"reason\": \"Forbidden\""),
        "{what}: refused, but not as Forbidden: {err}"
    );
}

fn allowed(what: &str, (ok, err): (bool, String)) {
    assert!(ok, "{what} was refused: {err}");
}

fn device_taint_rule(name: &str, node: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata:\n  name: {name}\n  labels: \
         {{app.kubernetes.io/managed-by: gpu-exporter-health}}\n  annotations: {{gpu-telemetry.io/gpu-health-node: \
         {node}}}\nspec:\n  deviceSelector: {{driver: gpu.nvidia.com, pool: {node}, device: gpu-0}}\n  taint: {{key: \
         {TAINT}, value: Xid79, effect: NoSchedule}}\n"
    )
}

/// What the exporter on `gpu-a` may and may not do with its own token, as the admission
/// policy of `deploy/` decides on the real server.
fn the_policy_holds_the_exporter_to_its_own_node(cp: &ControlPlane) {
    let pod = exporter_pod(cp, "gpu-a");
    let token = cp.service_account(NAMESPACE, "gpu-exporter", Some(&pod));
    let nodes = "gpu-exporter-health-nodes";

    refused(
        "cordoning another node",
        try_as(cp, &token, &["patch", "node", "gpu-b", "-p", r#"{"spec":{"unschedulable":true}}"#], ""),
        nodes,
        "the GPU exporter on gpu-a may change only its own node",
    );
    refused(
        "another taint on its own node",
        try_as(
            cp,
            &token,
            &[
                "patch",
                "node",
                "gpu-a",
                "--type=json",
                "-p",
                r#"[{"op":"add","path":"/spec/taints/-","value":{"key":"example.com/other","effect":"NoSchedule"}}]"#,
            ],
            "",
        ),
        nodes,
        "the GPU exporter may change only spec.unschedulable and its own taint",
    );
    refused(
        "a label on its own node",
        try_as(cp, &token, &["label", "node", "gpu-a", "example.com/pool=p1"], ""),
        nodes,
        "the GPU exporter may change only its own annotations in the metadata of the node, not metadata.labels",
    );
    // Through the status too: the API server keeps metadata sent there.
    refused(
        "a label through its own node's status",
        patch_status(cp, &token, "gpu-a", r#"{"metadata":{"labels":{"example.com/via-status":"x"}}}"#),
        nodes,
        "not metadata.labels",
    );
    refused(
        "the kubelet's port in its own node's status",
        patch_status(cp, &token, "gpu-a", r#"{"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":4242}}}}"#),
        nodes,
        "the GPU exporter may change only the GPUHealthy condition in the status of the node, not status.daemonEndpoints",
    );
    // (kubectl patch --subresource=status reads the status first, which the exporter's
    // RBAC does not grant: the loop only patches it.)
    refused(
        "another condition in its own node's status",
        patch_status(
            cp,
            &token,
            "gpu-a",
            r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Nope"}]}}"#,
        ),
        nodes,
        "the GPU exporter may change only the GPUHealthy condition in the node's status",
    );
    // (Its own annotations pass: the loop writes them below.)

    // Events: only about its own node.
    let event = |node: &str| {
        format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: probe-{node}, namespace: default}}\ninvolvedObject: \
             {{kind: Node, name: {node}}}\nreason: Probe\nmessage: probe\ntype: Normal\n"
        )
    };
    refused(
        "an Event about another node",
        try_as(cp, &token, &["create", "-f", "-"], &event("gpu-b")),
        "gpu-exporter-health-events",
        "the GPU exporter may write Events only about its own node",
    );
    allowed("an Event about its own node", try_as(cp, &token, &["create", "-f", "-"], &event("gpu-a")));

    // The breaker: its own node's place only (the ConfigMap as the loop finds it).
    let breaker = |data: &str| {
        let current: Value =
            serde_json::from_str(&cp.run(&["get", "configmap", "gpu-health-breaker", "-n", NAMESPACE, "-o", "json"]))
                .unwrap();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: gpu-health-breaker, namespace: {NAMESPACE}, \
             resourceVersion: \"{}\"}}\ndata: {data}\n",
            current["metadata"]["resourceVersion"].as_str().unwrap()
        )
    };
    refused(
        "another node's place in the breaker",
        try_as(cp, &token, &["replace", "-f", "-"], &breaker("{gpu-b: \"2026-01-01T00:00:00Z\"}")),
        "gpu-exporter-health-breaker",
        "the GPU exporter may take or give back only its own node's place in the circuit breaker",
    );
    let stale = breaker("{gpu-a: \"2026-01-01T00:00:00Z\"}");
    allowed("its own place", try_as(cp, &token, &["replace", "-f", "-"], &stale));
    // A write carrying a resourceVersion read before another write is refused with 409,
    // which is what the exporters racing for the breaker rely on.
    let (ok, err) = try_as(cp, &token, &["replace", "-f", "-"], &stale);
    assert!(
        !ok && err.contains("Conflict") && err.contains("the object has been modified"),
        "a stale resourceVersion: {err}"
    );
    allowed("giving it back", try_as(cp, &token, &["replace", "-f", "-"], &breaker("{}")));

    // DeviceTaintRules: its own node's devices only.
    refused(
        "a device taint on another node's GPU",
        try_as(cp, &token, &["create", "-f", "-"], &device_taint_rule("gpu-health.gpu-b.probe", "gpu-b")),
        "gpu-exporter-health-device-taints",
        "the GPU exporter on gpu-a may write only its own device taints (gpu-telemetry.io/gpu-unhealthy) on one device \
         of its own node (pool gpu-a)",
    );
    cp.apply(&device_taint_rule("gpu-health.gpu-b.admins", "gpu-b"));
    refused(
        "deleting another node's device taint",
        try_as(cp, &token, &["delete", "devicetaintrule", "gpu-health.gpu-b.admins"], ""),
        "gpu-exporter-health-device-taints",
        "the GPU exporter on gpu-a may change or delete only the device taints of its own node",
    );
    cp.run(&["delete", "devicetaintrule", "gpu-health.gpu-b.admins"]);
    allowed(
        "a device taint on its own GPU",
        try_as(cp, &token, &["create", "-f", "-"], &device_taint_rule("gpu-health.gpu-a.probe", "gpu-a")),
    );
    allowed("deleting it", try_as(cp, &token, &["delete", "devicetaintrule", "gpu-health.gpu-a.probe"], ""));

    // A token not bound to a pod names no node, and may change nothing.
    let unbound = cp.service_account(NAMESPACE, "gpu-exporter", None);
    refused(
        "a write with an unbound token",
        try_as(cp, &unbound, &["annotate", "node", "gpu-a", &format!("{DRY_RUN}=probe"), "--overwrite"], ""),
        nodes,
        "the GPU exporter's token names no node: use the pod's projected service-account token",
    );
}

#[test]
fn a_quarantine_and_its_recovery_on_real_nodes() {
    let cp = ControlPlane::start();
    cp.apply(&base());
    // The breaker's ConfigMap as a first quarantine leaves it, for the policy's checks.
    cp.run(&["create", "configmap", "gpu-health-breaker", "-n", NAMESPACE]);
    let mut fleet = JoinedFleet::join(
        &cp,
        &[
            NodeSpec { name: "gpu-a".into(), scenario: scenario("gpu-a", &[]), replicas: 1 },
            NodeSpec { name: "gpu-b".into(), scenario: scenario("gpu-b", &[]), replicas: 1 },
        ],
    );
    // What others put on the nodes: an admin's taint and label on gpu-a, and gpu-b
    // cordoned by an admin with kubectl (field manager `kubectl`, as kubectl 1.37 names
    // itself for `cordon`).
    let jane = cp.user("jane", &["system:masters"]);
    for args in [
        &["taint", "node", "gpu-a", "example.com/maintenance=planned:PreferNoSchedule"][..],
        &["label", "node", "gpu-a", "example.com/rack=r7"],
        &["cordon", "gpu-b"],
    ] {
        allowed(&format!("kubectl {args:?} as an admin"), try_as(&cp, &jane, args, ""));
    }

    // Dry run: XID 79 on gpu-a records the annotation, and nothing else on the Node.
    fleet.start_exporters(&cp, &FAST);
    fleet.set_scenario("gpu-a", &scenario("gpu-a", &[XID]));
    let a = wait_node(&cp, "the dry-run annotation on gpu-a", "gpu-a", |n| {
        n["metadata"]["annotations"][DRY_RUN].as_str().is_some_and(|t| t.contains("Xid79"))
    });
    assert!(a["spec"]["unschedulable"].is_null() && !has_our_taint(&a), "{}", a["spec"]);
    assert_eq!(condition(&a), None, "no condition in dry run");
    assert!(claim(&a).is_none());
    let mine = owned_by(&a, MANAGER);
    assert!(mine.contains(DRY_RUN) && !mine.contains("f:spec"), "the loop owns its annotation alone: {mine}");
    wait_until_ok("the dry-run Event", Duration::from_secs(30), || {
        let e = events(&cp, "gpu-a");
        if e.iter().any(|r| r == "GPUQuarantineDryRun") { Ok(()) } else { Err(format!("{e:?}")) }
    });

    let row = gpu_nodes_row(&cp, "gpu-a");
    assert!(row.contains("DryRun("), "kubectl gpu nodes shows the dry run: {row}");

    the_policy_holds_the_exporter_to_its_own_node(&cp);

    // Enforce: the exporters restart with the loop acting, and XID 79 comes again on
    // gpu-a, and on gpu-b (the breaker lets both out: its own test is below).
    fleet.exporters.clear();
    let enforce: Vec<&str> =
        FAST.iter().copied().chain(["--health.dry-run=false", "--health.breaker.max-fraction", "1"]).collect();
    fleet.start_exporters(&cp, &enforce);
    fleet.set_scenario("gpu-a", &scenario("gpu-a", &[XID, XID]));
    fleet.set_scenario("gpu-b", &scenario("gpu-b", &[XID]));

    let a = wait_node(&cp, "gpu-a cordoned, tainted, condition False", "gpu-a", |n| {
        n["spec"]["unschedulable"] == true && has_our_taint(n) && condition(n).is_some_and(|c| c.0 == "False")
    });
    let taints = a["spec"]["taints"].as_array().unwrap();
    let ours = taints.iter().find(|t| t["key"] == TAINT).unwrap();
    assert_eq!((&ours["value"], &ours["effect"]), (&Value::from("Xid79"), &Value::from("NoSchedule")), "{ours}");
    assert!(taints.iter().any(|t| t["key"] == "example.com/maintenance"), "the admin's taint stays: {taints:?}");
    assert_eq!(condition(&a).unwrap().1, "Xid79");
    assert_eq!(claim(&a).unwrap()["applied"]["cordon"], true);
    // The dry run's record went with the first enforcing write.
    assert!(a["metadata"]["annotations"][DRY_RUN].is_null(), "{}", a["metadata"]["annotations"]);
    let row = gpu_nodes_row(&cp, "gpu-a");
    assert!(row.contains("Quarantined(Xid79)") && !row.contains("DryRun"), "kubectl gpu nodes: {row}");
    let mine = owned_by(&a, MANAGER);
    assert!(mine.contains("f:unschedulable") && mine.contains(CLAIM), "the cordon is the loop's: {mine}");
    wait_until_ok("the GPUQuarantined Event about gpu-a", Duration::from_secs(30), || {
        let e = events(&cp, "gpu-a");
        if e.iter().any(|r| r == "GPUQuarantined") { Ok(()) } else { Err(format!("{e:?}")) }
    });

    // gpu-b, cordoned by the admin: the loop adds its taint, records the cordon it
    // found, and does not claim it.
    let b = wait_node(&cp, "gpu-b tainted", "gpu-b", |n| has_our_taint(n) && claim(n).is_some());
    let c = claim(&b).unwrap();
    assert_eq!(c["found"]["unschedulable"], true, "{c}");
    assert_eq!(c["applied"]["cordon"], false, "{c}");
    assert!(owned_by(&b, "kubectl").contains("f:unschedulable"), "the server records whose cordon it is");

    // Recovery: the GPUs fall off the bus and are reset; once they answer again the
    // loop lifts its cordon, taint and claim and sets the condition True; the admin's
    // taint, label and cordon stay.
    fleet.set_scenario("gpu-a", &scenario("gpu-a", &[XID, XID, LOST]));
    fleet.set_scenario("gpu-b", &scenario("gpu-b", &[XID, LOST]));
    for n in ["gpu-a", "gpu-b"] {
        wait_node(&cp, &format!("{n}'s GPU seen gone"), n, |n| {
            claim(n).is_some_and(|c| c["latches"].as_array().is_some_and(|l| l.iter().all(|l| l["seenGone"] == true)))
        });
    }
    fleet.set_scenario("gpu-a", &scenario("gpu-a", &[XID, XID, LOST, RESET]));
    fleet.set_scenario("gpu-b", &scenario("gpu-b", &[XID, LOST, RESET]));
    let a = wait_node(&cp, "gpu-a back in service", "gpu-a", |n| {
        n["spec"]["unschedulable"].is_null() && !has_our_taint(n) && condition(n).is_some_and(|c| c.0 == "True")
    });
    assert!(claim(&a).is_none(), "{}", a["metadata"]["annotations"]);
    assert!(a["metadata"]["annotations"][DRY_RUN].is_null(), "{}", a["metadata"]["annotations"]);
    let row = gpu_nodes_row(&cp, "gpu-a");
    assert!(!row.contains("DryRun") && !row.contains("Quarantined"), "kubectl gpu nodes: {row}");
    assert!(a["spec"]["taints"].as_array().unwrap().iter().any(|t| t["key"] == "example.com/maintenance"));
    assert_eq!(a["metadata"]["labels"]["example.com/rack"], "r7");
    let b = wait_node(&cp, "gpu-b's taint lifted", "gpu-b", |n| {
        !has_our_taint(n) && condition(n).is_some_and(|c| c.0 == "True")
    });
    assert_eq!(b["spec"]["unschedulable"], true, "the admin's cordon is never lifted");
    wait_until_ok("the GPURecovered Event about gpu-a", Duration::from_secs(30), || {
        let e = events(&cp, "gpu-a");
        if e.iter().any(|r| r == "GPURecovered") { Ok(()) } else { Err(format!("{e:?}")) }
    });
    let breaker = cp.run(&["get", "configmap", "gpu-health-breaker", "-n", NAMESPACE, "-o", "jsonpath={.data}"]);
    assert!(!breaker.contains("gpu-a") && !breaker.contains("gpu-b"), "places given back: {breaker}");
}

#[test]
fn three_nodes_failing_at_once_hold_the_breaker_at_its_share() {
    let cp = ControlPlane::start();
    cp.apply(&base());
    let names = ["gpu-1", "gpu-2", "gpu-3"];
    let specs: Vec<NodeSpec> =
        names.iter().map(|n| NodeSpec { name: (*n).into(), scenario: scenario(n, &[]), replicas: 1 }).collect();
    let mut fleet = JoinedFleet::join(&cp, &specs);
    // Two of three: floor(3 × 0.67) = 2.
    let args: Vec<&str> =
        FAST.iter().copied().chain(["--health.dry-run=false", "--health.breaker.max-fraction", "0.67"]).collect();
    fleet.start_exporters(&cp, &args);
    for n in names {
        fleet.set_scenario(n, &scenario(n, &[XID]));
    }
    let cordoned = |cp: &ControlPlane| -> Vec<String> {
        names.iter().filter(|n| node(cp, n)["spec"]["unschedulable"] == true).map(|n| n.to_string()).collect()
    };
    wait_until_ok("every node judged", Duration::from_secs(60), || {
        let judged: Vec<Option<(String, String)>> = names.iter().map(|n| condition(&node(&cp, n))).collect();
        if judged.iter().all(|c| c.as_ref().is_some_and(|c| c.0 == "False")) && cordoned(&cp).len() == 2 {
            Ok(())
        } else {
            Err(format!(
                "{judged:?}, cordoned {:?}\nkubelet: {}\nexporter of gpu-1: {}",
                cordoned(&cp),
                fleet.kubelet_log().lines().rev().take(10).collect::<Vec<_>>().join("\n"),
                fleet.exporter_log("gpu-1", 10)
            ))
        }
    });
    // Settled, and it stays so: ten more checks each (counted by the exporters).
    let checks =
        |fleet: &JoinedFleet| -> Vec<f64> { names.iter().map(|n| checks_run(&fleet.exporter(n).metrics())).collect() };
    let before = checks(&fleet);
    wait_until_ok("ten more checks on every node", Duration::from_secs(60), || {
        let now = checks(&fleet);
        if now.iter().zip(&before).all(|(n, b)| *n >= b + 10.0) {
            Ok(())
        } else {
            Err(format!("{before:?} → {now:?}"))
        }
    });
    let held = cordoned(&cp);
    assert_eq!(held.len(), 2, "{held:?}");
    let out = names.iter().find(|n| !held.contains(&n.to_string())).unwrap();
    let n = node(&cp, out);
    assert!(!has_our_taint(&n), "the third is neither cordoned nor tainted: {}", n["spec"]);
    let breaker: Value = serde_json::from_str(&cp.run(&[
        "get",
        "configmap",
        "gpu-health-breaker",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.data}",
    ]))
    .unwrap();
    let places: Vec<&String> = breaker.as_object().unwrap().keys().collect();
    assert_eq!(places, held.iter().collect::<Vec<_>>(), "the places are the cordoned nodes'");
    // The third says why, and the exporters' metrics agree.
    let page = fleet.exporter(out).metrics();
    assert!(
        page.lines().any(|l| l.starts_with("gpu_health_breaker_open") && l.ends_with(" 1")),
        "{}",
        page.lines().filter(|l| l.starts_with("gpu_health_breaker")).collect::<Vec<_>>().join("\n")
    );
    // How often the real server answered 409 to the racing writes (printed; a race
    // may or may not happen in any one run).
    let conflicts: f64 = fleet
        .exporters
        .iter()
        .flat_map(|e| {
            e.metrics()
                .lines()
                .filter(|l| l.starts_with("gpu_health_api_errors_total{") && l.contains("error=\"409\""))
                .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
                .collect::<Vec<_>>()
        })
        .sum();
    eprintln!("breaker writes answered 409 Conflict: {}", conflicts as u64);
}
