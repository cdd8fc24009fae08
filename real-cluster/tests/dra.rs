//! DRA on a real API server: a simulated node whose two H100s are published by NVIDIA's
//! DRA driver (a ResourceSlice with the driver's attribute names, written here as the
//! driver writes it), a ResourceClaim the real scheduler allocates from it and a pod
//! that holds it, which the simulated kubelet runs and reports in pod-resources'
//! `dynamic_resources`. The exporter runs with `deploy/`'s identity, roles and admission
//! policies, the health loop enforcing.
//!
//! - `a_claimed_gpu_is_attributed_and_its_xid_79_is_a_v1_device_taint`: the exporter
//!   names the claim's pod and claim on the GPU; XID 79 on it is a DeviceTaintRule that
//!   the server accepts at `resource.k8s.io/v1` (the managedFields say which version
//!   the loop wrote), no cordon and no node taint; the reset lifts the rule.
//!   Then a pod bound to the node before its claim exists runs once an admin
//!   allocates the claim, with no pod event in between: the simulated kubelet retries.
//! - `without_v1_device_taint_rules_the_loop_writes_v1beta2`: the same on an API server
//!   that serves DeviceTaintRule only at `v1beta2` (`--runtime-config
//!   resource.k8s.io/v1beta2=true,resource.k8s.io/v1/devicetaintrules=false`, the shape
//!   of Kubernetes 1.36: ResourceSlices and claims at v1, device taints at v1beta2). The
//!   1.37 scheduler lists v1 DeviceTaintRules while the `DRADeviceTaintRules` feature
//!   gate is on and schedules nothing until it can, so that gate is off here (the API
//!   server still serves and stores the rules at v1beta2; the scheduler ignores them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use test_support::control_plane::{ControlPlane, Options};
use test_support::joined::{JoinedFleet, NodeSpec, base};
use test_support::simulated::wait_until_ok;

const NODE: &str = "gpu-d";
const TAINT: &str = "gpu-telemetry.io/gpu-unhealthy";
const MANAGER: &str = "gpu-exporter-health";
const UUID: [&str; 2] = ["GPU-d0000000-0000-4000-8000-000000000000", "GPU-d0000000-0000-4000-8000-000000000001"];

/// Two H100s, both published by the DRA driver; `faults` on GPU 0 (appended one by one,
/// as fake-nvml counts delivered XIDs by their place in the list).
fn scenario(faults: &[&str]) -> String {
    let faults = if faults.is_empty() { String::new() } else { format!(", faults: [{}]", faults.join(", ")) };
    format!(
        "gpus:\n  - {{model: H100-SXM5-80GB, uuid: {}{faults}}}\n  - {{model: H100-SXM5-80GB, uuid: {}}}\ndra: \
         {{driver: gpu.nvidia.com, gpus: [0, 1]}}\n",
        UUID[0], UUID[1]
    )
}

const XID: &str = "{at_s: 0, xid: 79}";
const LOST: &str = "{at_s: 0, lost: true}";
const RESET: &str = "{at_s: 0, reset: true}";

/// The ResourceSlice as NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes a node's
/// whole GPUs: devices `gpu-<index>`, bare attribute names of the driver's domain.
fn resource_slice() -> String {
    let device = |i: usize| {
        format!(
            "    - name: gpu-{i}\n      attributes:\n        type: {{string: gpu}}\n        uuid: {{string: {uuid}}}\n        \
             index: {{int: {i}}}\n        minor: {{int: {i}}}\n        productName: {{string: NVIDIA H100 80GB HBM3}}\n        \
             brand: {{string: Nvidia}}\n        architecture: {{string: Hopper}}\n        cudaComputeCapability: \
             {{version: 9.0.0}}\n        driverVersion: {{version: 550.90.7}}\n        cudaDriverVersion: {{version: \
             12.4.0}}\n        pcieBusID: {{string: \"0000:0{i}:00.0\"}}\n      capacity:\n        memory: {{value: \
             80Gi}}\n",
            uuid = UUID[i]
        )
    };
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {NODE}-gpu.nvidia.com-x7k2p}}\nspec:\n  \
         driver: gpu.nvidia.com\n  nodeName: {NODE}\n  pool: {{name: {NODE}, generation: 1, resourceSliceCount: 1}}\n  \
         devices:\n{}{}",
        device(0),
        device(1)
    )
}

/// The driver's DeviceClass, a claim for GPU 0 (by its `index` attribute) and a pod on
/// the node holding it.
fn workload() -> String {
    "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\nspec:\n  selectors:\n    - \
     cel: {expression: \"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'\"}\n\
     ---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ml-training}\n---\napiVersion: resource.k8s.io/v1\nkind: \
     ResourceClaim\nmetadata: {name: train-gpu, namespace: ml-training}\nspec:\n  devices:\n    requests:\n      - \
     name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          selectors:\n            - cel: \
     {expression: \"device.attributes['gpu.nvidia.com'].index == 0\"}\n---\napiVersion: v1\nkind: Pod\nmetadata: \
     {name: trainer, namespace: ml-training}\nspec:\n  nodeSelector: {kubernetes.io/hostname: gpu-d}\n  \
     resourceClaims: [{name: gpu, resourceClaimName: train-gpu}]\n  containers:\n    - name: main\n      image: \
     registry.example/trainer:1\n      resources: {claims: [{name: gpu}]}\n"
        .to_string()
}

fn node(cp: &ControlPlane) -> Value {
    serde_json::from_str(&cp.run(&["get", "node", NODE, "-o", "json"])).unwrap()
}

/// The loop's DeviceTaintRules as `resource.k8s.io/<version>` serves them.
fn rules(cp: &ControlPlane, version: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(&cp.run(&[
        "get",
        "--raw",
        &format!(
            "/apis/resource.k8s.io/{version}/devicetaintrules?labelSelector=app.kubernetes.io%2Fmanaged-by%3D{MANAGER}"
        ),
    ]))
    .unwrap();
    list["items"].as_array().unwrap().clone()
}

fn the_loop_taints_one_claimed_gpu(cp: &ControlPlane, version: &str) -> JoinedFleet {
    cp.apply(&base());
    let mut fleet = JoinedFleet::join(cp, &[NodeSpec { name: NODE.into(), scenario: scenario(&[]), replicas: 1 }]);
    cp.apply(&resource_slice());
    fleet.start_exporters(
        cp,
        &["--health.check-interval", "1s", "--health.recovery-checks", "2", "--health.min-quarantine", "0"]
            .into_iter()
            // One GPU of two may be held alone (the default, one of eight, would hold the node).
            .chain(["--health.dry-run=false", "--health.gpu-quarantine.max-fraction", "0.5"])
            .collect::<Vec<_>>(),
    );
    cp.apply(&workload());
    cp.wait_for(
        "the trainer Running with its claim allocated",
        Duration::from_secs(60),
        &["get", "pod", "trainer", "-n", "ml-training", "-o", "jsonpath={.status.phase}"],
        |s| s == "Running",
    );
    let claim: Value =
        serde_json::from_str(&cp.run(&["get", "resourceclaim", "train-gpu", "-n", "ml-training", "-o", "json"]))
            .unwrap();
    let result = &claim["status"]["allocation"]["devices"]["results"][0];
    assert_eq!((&result["pool"], &result["device"]), (&Value::from(NODE), &Value::from("gpu-0")), "{claim}");

    // DRA attribution: the exporter maps the kubelet's (driver, pool, device) through
    // the slice to GPU 0's UUID, and names the pod and the claim on it.
    wait_until_ok("the trainer and its claim on GPU 0", Duration::from_secs(60), || {
        let page = fleet.exporter(NODE).metrics();
        let holder = page.lines().find(|l| {
            l.starts_with("gpu_device_pod_info{")
                && l.contains(&format!("uuid=\"{}\"", UUID[0]))
                && l.contains("pod=\"trainer\"")
        });
        match holder {
            Some(l) if l.contains("claim=\"train-gpu\"") && l.contains("namespace=\"ml-training\"") => Ok(()),
            _ => Err(page
                .lines()
                .filter(|l| l.starts_with("gpu_device_pod") || l.contains("slice"))
                .collect::<Vec<_>>()
                .join("\n")),
        }
    });

    // XID 79 on the claimed GPU: one device taint, accepted at `version`, written by
    // the loop at that version; the node is neither cordoned nor tainted.
    fleet.set_scenario(NODE, &scenario(&[XID]));
    let rule =
        wait_until_ok("the loop's DeviceTaintRule", Duration::from_secs(60), || match rules(cp, version).as_slice() {
            [rule] => Ok(rule.clone()),
            other => Err(format!("{other:?}\n{}", fleet.exporter_log(NODE, 10))),
        });
    let spec = &rule["spec"];
    assert_eq!(spec["deviceSelector"]["driver"], "gpu.nvidia.com", "{rule}");
    assert_eq!(spec["deviceSelector"]["pool"], NODE, "{rule}");
    assert_eq!(spec["deviceSelector"]["device"], "gpu-0", "{rule}");
    assert_eq!(spec["taint"]["key"], TAINT, "{rule}");
    assert_eq!(spec["taint"]["value"], "Xid79", "{rule}");
    let written: Vec<&Value> = rule["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["manager"] == MANAGER)
        .map(|m| &m["apiVersion"])
        .collect();
    assert_eq!(written, [&Value::from(format!("resource.k8s.io/{version}"))], "{rule}");
    let n = node(cp);
    assert!(n["spec"]["unschedulable"].is_null(), "no cordon for one DRA GPU: {}", n["spec"]);
    assert!(
        !n["spec"]["taints"].as_array().is_some_and(|t| t.iter().any(|t| t["key"] == TAINT)),
        "no node taint: {}",
        n["spec"]
    );

    // Recovery: off the bus, then reset; the loop deletes its rule.
    fleet.set_scenario(NODE, &scenario(&[XID, LOST]));
    wait_until_ok("GPU 0 seen gone", Duration::from_secs(60), || {
        let claim =
            node(cp)["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"].as_str().unwrap_or("").to_string();
        if claim.contains("\"seenGone\":true") { Ok(()) } else { Err(claim) }
    });
    fleet.set_scenario(NODE, &scenario(&[XID, LOST, RESET]));
    wait_until_ok("the rule lifted", Duration::from_secs(60), || match rules(cp, version).as_slice() {
        [] => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert!(node(cp)["spec"]["unschedulable"].is_null());
    fleet
}

/// A pod bound to the node before its claim exists: the simulated kubelet cannot read
/// the claim (404, or 403 while the Node authorizer has not linked it to the pod), then
/// finds it unallocated, and keeps trying with backoff; once an admin writes the
/// allocation (no scheduler runs for a pod bound by hand, and no pod event follows) the
/// pod runs and its GPU is attributed to it.
fn a_pod_bound_before_its_claim_is_allocated_runs_once_it_is(cp: &ControlPlane, fleet: &JoinedFleet) {
    cp.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: late, namespace: ml-training}\nspec:\n  nodeName: gpu-d\n  \
         resourceClaims: [{name: gpu, resourceClaimName: late-gpu}]\n  containers:\n    - name: main\n      image: \
         registry.example/trainer:1\n      resources: {claims: [{name: gpu}]}\n",
    );
    let uid = cp.run(&["get", "pod", "late", "-n", "ml-training", "-o", "jsonpath={.metadata.uid}"]);
    wait_until_ok("the kubelet waiting for the missing claim", Duration::from_secs(30), || {
        let log = fleet.kubelet_log();
        if log.contains("ResourceClaim ml-training/late-gpu") && log.contains("trying again in") {
            Ok(())
        } else {
            Err(log)
        }
    });
    cp.apply(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: late-gpu, namespace: ml-training}\nspec:\n  \
         devices:\n    requests:\n      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com}\n",
    );
    // Still pending: created, not allocated.
    std::thread::sleep(Duration::from_secs(2));
    let phase = cp.run(&["get", "pod", "late", "-n", "ml-training", "-o", "jsonpath={.status.phase}"]);
    assert_ne!(phase, "Running", "the pod ran before its claim was allocated");
    let allocation = serde_json::json!({"status": {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1"}
        ]}},
        "reservedFor": [{"resource": "pods", "name": "late", "uid": uid.trim()}]
    }});
    cp.run(&[
        "patch",
        "resourceclaim",
        "late-gpu",
        "-n",
        "ml-training",
        "--subresource=status",
        "--type=merge",
        "-p",
        &allocation.to_string(),
    ]);
    cp.wait_for(
        "the late pod Running once its claim is allocated",
        Duration::from_secs(30),
        &["get", "pod", "late", "-n", "ml-training", "-o", "jsonpath={.status.phase}"],
        |s| s == "Running",
    );
    wait_until_ok("the late pod and its claim on GPU 1", Duration::from_secs(60), || {
        let page = fleet.exporter(NODE).metrics();
        let found = page.lines().any(|l| {
            l.starts_with("gpu_device_pod_info{")
                && l.contains(&format!("uuid=\"{}\"", UUID[1]))
                && l.contains("pod=\"late\"")
                && l.contains("claim=\"late-gpu\"")
        });
        if found {
            Ok(())
        } else {
            Err(page.lines().filter(|l| l.starts_with("gpu_device_pod")).collect::<Vec<_>>().join("\n"))
        }
    });
}

#[test]
fn a_claimed_gpu_is_attributed_and_its_xid_79_is_a_v1_device_taint() {
    let cp = ControlPlane::start();
    let fleet = the_loop_taints_one_claimed_gpu(&cp, "v1");
    a_pod_bound_before_its_claim_is_allocated_runs_once_it_is(&cp, &fleet);
}

#[test]
fn without_v1_device_taint_rules_the_loop_writes_v1beta2() {
    let cp = ControlPlane::start_with(&Options {
        runtime_config: Some("resource.k8s.io/v1beta2=true,resource.k8s.io/v1/devicetaintrules=false".into()),
        // The 1.37 scheduler watches v1 DeviceTaintRules while this gate is on, and
        // schedules nothing when v1 does not serve them.
        feature_gates: Some("DRADeviceTaintRules=false".into()),
        ..Options::default()
    });
    assert!(
        !cp.run(&["get", "--raw", "/apis/resource.k8s.io/v1"]).contains("\"devicetaintrules\""),
        "v1 serves no DeviceTaintRules here"
    );
    the_loop_taints_one_claimed_gpu(&cp, "v1beta2");
}
