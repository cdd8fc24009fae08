//! Evaluates the ValidatingAdmissionPolicies in `deploy/base/health/admission-policy.yaml`
//! (one per kind of object: each one's variables, match condition and validations, in
//! CEL) on the requests the health loop really makes (patches planned by `plan.rs`,
//! applied as the API server would) and on requests it must not be able to make. The
//! real API server runs them too (`real-cluster`); this file is quick to run and tries
//! every case.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

use cel_interpreter::{Context, Program, Value as Cel};
use gpu_health::device_rules::{Effect, read_rule};
use gpu_health::fixtures;
use gpu_health::names::Names;
use gpu_health::node_state::NodeView;
use gpu_health::observation::DraDevice;
use gpu_health::plan::{Devices, Mode, Permit, RuleWrite, plan, plan_with};
use gpu_health::policy::{HeldGpu, Reason, Verdict};
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use test_support::apiserver::apply_node_patch;
use test_support::cluster::registered_node;

const EXPORTER: &str = "system:serviceaccount:gpu-telemetry:gpu-exporter";

/// The policies of the file, one per kind of object.
struct Policy {
    parts: Vec<Part>,
}

/// One ValidatingAdmissionPolicy: the resources it matches and what it checks.
struct Part {
    resources: Vec<String>,
    match_condition: String,
    variables: Vec<(String, String)>,
    validations: Vec<(String, String)>,
}

fn policy() -> Policy {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("deploy/base/health/admission-policy.yaml")).unwrap();
    let parts = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| -> Value { serde::Deserialize::deserialize(d).unwrap() })
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .map(|doc| part(&doc))
        .collect::<Vec<Part>>();
    // Every write the exporter's RBAC allows falls under exactly one policy.
    for resource in ["nodes", "nodes/status", "events", "configmaps", "devicetaintrules"] {
        let n = parts.iter().filter(|p| p.resources.iter().any(|r| r == resource)).count();
        assert_eq!(n, 1, "{resource} is matched by {n} policies");
    }
    Policy { parts }
}

fn part(doc: &Value) -> Part {
    let spec = &doc["spec"];
    let resources = spec["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()))
        .collect();
    let pairs = |list: &Value, a: &str, b: &str| -> Vec<(String, String)> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|v| (v[a].as_str().unwrap().to_string(), v[b].as_str().unwrap_or("").to_string()))
            .collect()
    };
    Part {
        resources,
        match_condition: spec["matchConditions"][0]["expression"].as_str().unwrap().to_string(),
        variables: pairs(&spec["variables"], "name", "expression"),
        validations: spec["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                let message = v["message"].as_str().or(v["messageExpression"].as_str()).unwrap_or("");
                (v["expression"].as_str().unwrap().to_string(), message.to_string())
            })
            .collect(),
    }
}

/// An admission request.
struct Req {
    user: String,
    bound_node: Option<String>,
    resource: &'static str,
    sub_resource: &'static str,
    operation: &'static str,
    object: Value,
    old_object: Value,
}

fn req(resource: &'static str, sub: &'static str, op: &'static str, old: Value, new: Value) -> Req {
    Req {
        user: EXPORTER.into(),
        bound_node: Some("gpu-01".into()),
        resource,
        sub_resource: sub,
        operation: op,
        object: new,
        old_object: old,
    }
}

/// `None` when admitted, else the message of the first validation that failed in the
/// policy that matches the request's resource (none matching: admitted).
fn admit(policy: &Policy, r: &Req) -> Option<String> {
    let resource =
        if r.sub_resource.is_empty() { r.resource.to_string() } else { format!("{}/{}", r.resource, r.sub_resource) };
    let p = policy.parts.iter().find(|p| p.resources.contains(&resource))?;
    let mut extra = serde_json::Map::new();
    if let Some(n) = &r.bound_node {
        extra.insert("authentication.kubernetes.io/node-name".into(), json!([n]));
    }
    let group = if r.resource == "devicetaintrules" { "resource.k8s.io" } else { "" };
    let mut request = json!({
        "userInfo": {"username": r.user, "extra": extra},
        "resource": {"group": group, "version": "v1", "resource": r.resource},
        "operation": r.operation,
    });
    // As the API server builds it: no subResource at all on a request to the object
    // itself (an expression that reads it there fails).
    if !r.sub_resource.is_empty() {
        request["subResource"] = json!(r.sub_resource);
    }
    let mut ctx = Context::default();
    ctx.add_function("dyn", dyn_identity);
    ctx.add_variable("request", request).unwrap();
    ctx.add_variable("object", r.object.clone()).unwrap();
    ctx.add_variable("oldObject", r.old_object.clone()).unwrap();
    let matched = Program::compile(&p.match_condition).unwrap().execute(&ctx).unwrap();
    if matched != Cel::Bool(true) {
        return None;
    }
    let mut variables: HashMap<String, Cel> = HashMap::new();
    for (name, expr) in &p.variables {
        ctx.add_variable_from_value("variables", variables.clone());
        let value = Program::compile(expr)
            .unwrap_or_else(|e| panic!("variable {name}: {e}"))
            .execute(&ctx)
            .unwrap_or_else(|e| panic!("variable {name}: {e:?}"));
        variables.insert(name.clone(), value);
    }
    ctx.add_variable_from_value("variables", variables);
    for (expr, message) in &p.validations {
        let out = Program::compile(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .execute(&ctx)
            .unwrap_or_else(|e| panic!("{expr}: {e:?}"));
        if out != Cel::Bool(true) {
            return Some(message.clone());
        }
    }
    None
}

/// CEL's `dyn(x)`: a type conversion for the type checker, the identity at run time.
fn dyn_identity(
    cel_interpreter::extractors::Arguments(args): cel_interpreter::extractors::Arguments,
) -> Result<Cel, cel_interpreter::ExecutionError> {
    Ok(args.first().cloned().unwrap_or(Cel::Null))
}

fn names() -> Names {
    Names::new("gpu-telemetry.io")
}

fn sick() -> Verdict {
    fixtures::unhealthy(SystemTime::now())
}

fn well() -> Verdict {
    fixtures::healthy()
}

fn view(node: &Value) -> NodeView {
    let typed: Node = serde_json::from_value(node.clone()).unwrap();
    NodeView::from_node(&typed, &names())
}

fn patched(node: &Value, patch: &Value, status: bool) -> Value {
    let mut new = node.clone();
    let mut patch = patch.clone();
    if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    apply_node_patch(&mut new, &patch, false, !status, "gpu-exporter-health");
    new
}

#[test]
fn the_loops_own_writes_are_admitted() {
    let p = policy();
    let old = registered_node("gpu-01");
    let now = SystemTime::now();
    // Quarantine: cordon, taint, annotation; then the condition.
    let q = plan(&view(&old), &sick(), Mode::Enforce, &Permit::Granted, &names(), now);
    let cordoned = patched(&old, q.node_patch.as_ref().unwrap(), false);
    assert_eq!(admit(&p, &req("nodes", "", "UPDATE", old.clone(), cordoned.clone())), None);
    let with_condition = patched(&cordoned, q.status_patch.as_ref().unwrap(), true);
    assert_eq!(admit(&p, &req("nodes", "status", "UPDATE", cordoned.clone(), with_condition.clone())), None);
    // Recovery.
    let r = plan(&view(&with_condition), &well(), Mode::Enforce, &Permit::NotAsked, &names(), now);
    let lifted = patched(&with_condition, r.node_patch.as_ref().unwrap(), false);
    assert_eq!(admit(&p, &req("nodes", "", "UPDATE", with_condition.clone(), lifted.clone())), None);
    assert_eq!(lifted["spec"]["taints"], old["spec"]["taints"]);
    // Dry run, and the dry run's record removed once enforcement starts.
    let d = plan(&view(&old), &sick(), Mode::DryRun, &Permit::NotAsked, &names(), now);
    let recorded = patched(&old, d.node_patch.as_ref().unwrap(), false);
    assert_eq!(admit(&p, &req("nodes", "", "UPDATE", old.clone(), recorded.clone())), None);
    let e = plan(&view(&recorded), &well(), Mode::Enforce, &Permit::NotAsked, &names(), now);
    let cleaned = patched(&recorded, e.node_patch.as_ref().unwrap(), false);
    assert!(cleaned["metadata"]["annotations"].get("gpu-telemetry.io/gpu-health-dry-run").is_none());
    assert_eq!(admit(&p, &req("nodes", "", "UPDATE", recorded, cleaned)), None);
    // An Event about its node, and its breaker place.
    let event = json!({"metadata": {"name": "e", "namespace": "default"}, "involvedObject": {"kind": "Node", "name": "gpu-01"}});
    assert_eq!(admit(&p, &req("events", "", "CREATE", Value::Null, event)), None);
    let empty = json!({"metadata": {"name": "gpu-health-breaker"}, "data": {}});
    assert_eq!(admit(&p, &req("configmaps", "", "CREATE", Value::Null, empty.clone())), None);
    let mine = json!({"metadata": {"name": "gpu-health-breaker"}, "data": {"gpu-02": "t2", "gpu-01": "t1"}});
    let theirs = json!({"metadata": {"name": "gpu-health-breaker"}, "data": {"gpu-02": "t2", "gpu-09": "t9"}});
    assert_eq!(
        admit(&p, &req("configmaps", "", "UPDATE", theirs.clone(), mine.clone())),
        None,
        "take a place, drop a stale one"
    );
    assert_eq!(
        admit(
            &p,
            &req(
                "configmaps",
                "",
                "UPDATE",
                mine,
                json!({"metadata": {"name": "gpu-health-breaker"}, "data": {"gpu-02": "t2"}})
            )
        ),
        None
    );
}

#[test]
fn everything_else_is_refused() {
    let p = policy();
    let old = registered_node("gpu-01");
    let denied = |r: Req, why: &str| {
        let out = admit(&p, &r);
        assert!(out.as_deref().is_some_and(|m| m.contains(why)), "expected refusal with {why:?}, got {out:?}");
    };
    // Another node.
    let other = registered_node("gpu-02");
    let mut cordoned = other.clone();
    cordoned["spec"]["unschedulable"] = json!(true);
    denied(req("nodes", "", "UPDATE", other, cordoned), "only its own node");
    // A token not bound to a node.
    let mut r = req("nodes", "", "UPDATE", old.clone(), old.clone());
    r.bound_node = None;
    denied(r, "names no node");
    // Labels, other annotations, the operator's reset annotation, other taints, other spec.
    let mut labelled = old.clone();
    labelled["metadata"]["labels"]["gpu-telemetry.io/gpu-health-opt-out"] = json!("false");
    denied(req("nodes", "", "UPDATE", old.clone(), labelled), "own annotations");
    let mut reset = old.clone();
    reset["metadata"]["annotations"]["gpu-telemetry.io/gpu-health-reset"] = json!("2024-05-01T12:00:00Z");
    denied(req("nodes", "", "UPDATE", old.clone(), reset), "own annotations");
    let mut untainted = old.clone();
    untainted["spec"]["taints"] = json!([]);
    denied(req("nodes", "", "UPDATE", old.clone(), untainted), "spec.unschedulable and its own taint");
    let mut moved = old.clone();
    moved["spec"]["podCIDR"] = json!("10.9.9.0/24");
    denied(req("nodes", "", "UPDATE", old.clone(), moved), "spec.unschedulable and its own taint");
    // Status: only GPUHealthy.
    let mut not_ready = old.clone();
    not_ready["status"]["conditions"][1]["status"] = json!("False");
    denied(req("nodes", "status", "UPDATE", old.clone(), not_ready), "only the GPUHealthy condition");
    let mut capacity = old.clone();
    capacity["status"]["capacity"] = json!({"nvidia.com/gpu": "0"});
    denied(req("nodes", "status", "UPDATE", old.clone(), capacity), "only the GPUHealthy condition");
    // Through the status, metadata is held as on the Node (the API server keeps what is
    // sent there), and every field of the status is, named or not.
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"]["example.com/via-status"] = json!("x");
    denied(req("nodes", "status", "UPDATE", old.clone(), relabelled), "own annotations");
    let mut acknowledged = old.clone();
    acknowledged["metadata"]["annotations"]["gpu-telemetry.io/gpu-health-reset"] = json!("2030-01-01T00:00:00Z");
    denied(req("nodes", "status", "UPDATE", old.clone(), acknowledged), "own annotations");
    let mut port = old.clone();
    port["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": 4242}});
    denied(req("nodes", "status", "UPDATE", old.clone(), port), "only the GPUHealthy condition");
    // A field this policy has never heard of (a later Kubernetes's) is held too, in each
    // part, added or taken away.
    for (part, why) in [
        ("metadata", "own annotations"),
        ("spec", "spec.unschedulable and its own taint"),
        ("status", "only the GPUHealthy condition"),
    ] {
        let mut added = old.clone();
        added[part]["fieldOfTomorrow"] = json!({"x": 1});
        denied(req("nodes", "", "UPDATE", old.clone(), added.clone()), why);
        denied(req("nodes", "status", "UPDATE", added, old.clone()), why);
    }
    // Events about others; other ConfigMaps; others' places.
    let event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Node", "name": "gpu-02"}});
    denied(req("events", "", "CREATE", Value::Null, event), "own node");
    let pod_event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "gpu-01"}});
    denied(req("events", "", "CREATE", Value::Null, pod_event), "own node");
    denied(
        req("configmaps", "", "CREATE", Value::Null, json!({"metadata": {"name": "kube-proxy"}, "data": {}})),
        "own node's place",
    );
    denied(
        req(
            "configmaps",
            "",
            "UPDATE",
            json!({"metadata": {"name": "gpu-health-breaker"}, "data": {}}),
            json!({"metadata": {"name": "gpu-health-breaker"}, "data": {"gpu-02": "t"}}),
        ),
        "own node's place",
    );
}

#[test]
fn other_users_are_not_this_policys_business() {
    let p = policy();
    let old = registered_node("gpu-02");
    let mut cordoned = old.clone();
    cordoned["spec"]["unschedulable"] = json!(true);
    let mut r = req("nodes", "", "UPDATE", old, cordoned);
    r.user = "admin".into();
    r.bound_node = None;
    assert_eq!(admit(&p, &r), None);
}

// ---- device taints (DeviceTaintRules) and the GPU breaker ------------------------------

/// GPU 3 of gpu-01 held alone.
fn gpu_held() -> Verdict {
    let reason = Reason { gpu: Some(3), uuid: "GPU-3".into(), ..sick().reasons[0].clone() };
    let device = DraDevice { driver: "gpu.nvidia.com".into(), pool: "gpu-01".into(), device: "gpu-3".into() };
    let gpus = vec![HeldGpu {
        index: 3,
        uuid: "GPU-3".into(),
        since: SystemTime::now(),
        reasons: vec![reason.clone()],
        devices: vec![device],
    }];
    Verdict { reasons: vec![reason], gpus, ..sick() }
}

/// The rule the loop creates for GPU 3 of gpu-01, as the API server stores it.
fn created_rule(effect: Effect) -> Value {
    let devices = Devices { rules: Some(&[]), permit: Permit::Granted, effect };
    let p = plan_with(
        &view(&registered_node("gpu-01")),
        &gpu_held(),
        Mode::Enforce,
        &Permit::NotAsked,
        &names(),
        SystemTime::now(),
        &devices,
    );
    let Some(RuleWrite::Create(rule)) = p.rules.first() else { panic!("{:?}", p.rules) };
    let mut rule = serde_json::to_value(rule).unwrap();
    rule["metadata"]["uid"] = json!("u-1");
    rule["metadata"]["resourceVersion"] = json!("7");
    rule
}

fn rule_req(op: &'static str, old: Value, new: Value) -> Req {
    req("devicetaintrules", "", op, old, new)
}

fn merged(rule: &Value, patch: Value) -> Value {
    let mut out = rule.clone();
    apply_node_patch(&mut out, &patch, true, false, "x");
    out
}

#[test]
fn the_loops_device_taint_writes_are_admitted() {
    let p = policy();
    let now = SystemTime::now();
    for effect in [Effect::NoSchedule, Effect::NoExecute] {
        let rule = created_rule(effect);
        assert_eq!(admit(&p, &rule_req("CREATE", Value::Null, rule.clone())), None, "{effect:?}: {rule}");
    }
    let rule = created_rule(Effect::NoSchedule);
    // The node patch of the same plan: the claim only.
    let old = registered_node("gpu-01");
    let devices = Devices { rules: Some(&[]), permit: Permit::Granted, effect: Effect::NoSchedule };
    let q = plan_with(&view(&old), &gpu_held(), Mode::Enforce, &Permit::NotAsked, &names(), now, &devices);
    let recorded = patched(&old, q.node_patch.as_ref().unwrap(), false);
    assert_eq!(admit(&p, &req("nodes", "", "UPDATE", old.clone(), recorded.clone())), None);
    let with_condition = patched(&recorded, q.status_patch.as_ref().unwrap(), true);
    assert_eq!(admit(&p, &req("nodes", "status", "UPDATE", recorded.clone(), with_condition.clone())), None);
    // The value following the primary reason.
    let moved = merged(&rule, json!({"spec": {"taint": {"value": "Xid62"}}}));
    assert_eq!(admit(&p, &rule_req("UPDATE", rule.clone(), moved)), None);
    // Recovery: the delete the plan makes.
    let typed: k8s_openapi::api::resource::v1::DeviceTaintRule = serde_json::from_value(rule.clone()).unwrap();
    let listed = vec![read_rule(&typed, &names(), "gpu-01").unwrap()];
    let devices = Devices { rules: Some(&listed), permit: Permit::NotAsked, effect: Effect::NoSchedule };
    let r = plan_with(&view(&with_condition), &well(), Mode::Enforce, &Permit::NotAsked, &names(), now, &devices);
    assert!(matches!(&r.rules[..], [RuleWrite::Delete { .. }]), "{:?}", r.rules);
    assert_eq!(admit(&p, &rule_req("DELETE", rule.clone(), Value::Null)), None);
    // The GPU breaker: create its map, take GPU 3's place dropping a stale one, give it back.
    let map = |data: Value| json!({"metadata": {"name": "gpu-health-breaker-gpus"}, "data": data});
    assert_eq!(admit(&p, &req("configmaps", "", "CREATE", Value::Null, map(json!({})))), None);
    let before = map(json!({"gpu-02_GPU-9": "t", "gpu-07_GPU-1": "t"}));
    let taken = map(json!({"gpu-02_GPU-9": "t", "gpu-01_GPU-3": "t"}));
    assert_eq!(admit(&p, &req("configmaps", "", "UPDATE", before, taken.clone())), None);
    assert_eq!(admit(&p, &req("configmaps", "", "UPDATE", taken, map(json!({"gpu-02_GPU-9": "t"})))), None);
}

#[test]
fn device_taints_beyond_its_own_are_refused() {
    let p = policy();
    let rule = created_rule(Effect::NoSchedule);
    let denied = |r: Req, why: &str| {
        let out = admit(&p, &r);
        assert!(out.as_deref().is_some_and(|m| m.contains(why)), "expected refusal with {why:?}, got {out:?}");
    };
    let own = "may write only its own device taints";
    let changed = |patch: Value| merged(&rule, patch);
    // Another node's device, or a rule claiming another node.
    denied(rule_req("CREATE", Value::Null, changed(json!({"spec": {"deviceSelector": {"pool": "gpu-02"}}}))), own);
    let theirs = changed(json!({"metadata": {"annotations": {"gpu-telemetry.io/gpu-health-node": "gpu-02"}}}));
    denied(rule_req("CREATE", Value::Null, theirs.clone()), own);
    // Not as the loop writes them: no owner label, a broad selector, another key or effect, another name.
    denied(rule_req("CREATE", Value::Null, changed(json!({"metadata": {"labels": null}}))), own);
    denied(rule_req("CREATE", Value::Null, changed(json!({"spec": {"deviceSelector": {"device": null}}}))), own);
    // (A selector by device class or CEL is not in any resource.k8s.io version Kubernetes
    // 1.37 serves; where an older alpha had them, every field set had to match, so they
    // could only narrow a rule that names driver, pool and device.)
    denied(rule_req("CREATE", Value::Null, changed(json!({"spec": {"taint": {"key": "example.com/hold"}}}))), own);
    denied(rule_req("CREATE", Value::Null, changed(json!({"spec": {"taint": {"effect": "None"}}}))), own);
    denied(rule_req("CREATE", Value::Null, changed(json!({"metadata": {"name": "hold-everything"}}))), own);
    // An admin's rule: not deleted, not changed, not taken over.
    let admin = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {"name": "gpu-health.gpu-01.maintenance", "labels": {"team": "infra"}},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-01", "device": "gpu-5"},
                 "taint": {"key": "gpu-telemetry.io/gpu-unhealthy", "value": "Maintenance", "effect": "NoSchedule"}}
    });
    let only = "may change or delete only the device taints of its own";
    denied(rule_req("DELETE", admin.clone(), Value::Null), only);
    let mut taken_over = admin.clone();
    taken_over["metadata"]["labels"] = rule["metadata"]["labels"].clone();
    taken_over["metadata"]["annotations"] = rule["metadata"]["annotations"].clone();
    denied(rule_req("UPDATE", admin.clone(), taken_over), only);
    // Another node's rule; its own rule pointed at another device.
    denied(rule_req("DELETE", theirs, Value::Null), only);
    denied(rule_req("UPDATE", rule.clone(), changed(json!({"spec": {"deviceSelector": {"device": "gpu-4"}}}))), only);
    // Others' GPU places, and one that only looks like its own.
    let map = |data: Value| json!({"metadata": {"name": "gpu-health-breaker-gpus"}, "data": data});
    let place = "own node's place";
    denied(req("configmaps", "", "UPDATE", map(json!({})), map(json!({"gpu-02_GPU-1": "t"}))), place);
    denied(req("configmaps", "", "UPDATE", map(json!({})), map(json!({"gpu-010_GPU-1": "t"}))), place);
    denied(req("configmaps", "", "UPDATE", map(json!({})), map(json!({"gpu-01": "t"}))), place);
    // A token bound to no node.
    let mut unbound = rule_req("CREATE", Value::Null, rule);
    unbound.bound_node = None;
    denied(unbound, "names no node");
}
