//! The adapter as a real aggregated API: the APIServices of `deploy/` turn Available
//! with the caBundle the adapter writes; requests arrive through the aggregator with
//! the front-proxy identity; SubjectAccessReviews are answered by the real authorizer;
//! discovery lists the custom metrics resources without an error. (External metrics
//! need the adapter's Prometheus rules; `hpa.rs` serves them through the aggregator.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use test_support::control_plane::ControlPlane;
use test_support::joined::{Adapter, AdapterOptions, JoinedFleet, NodeSpec, base};
use test_support::simulated::wait_until_ok;

const NODE: &str = "gpu-node-1";
const SCENARIO: &str = "gpus:\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n";
const POD_METRIC: &str = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/gpu_utilization";

const WORKLOAD: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: ai-inference}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: inference-pool, namespace: ai-inference}
spec:
  replicas: 2
  selector: {matchLabels: {app: inference}}
  template:
    metadata: {labels: {app: inference}}
    spec:
      containers:
        - name: inference
          image: vllm/vllm-openai:latest
          resources: {limits: {nvidia.com/gpu: 1}}
"#;

#[test]
fn the_adapter_answers_through_the_aggregator_as_the_real_authorizer_decides() {
    let cp = ControlPlane::start();
    cp.apply(&base());
    let mut fleet = JoinedFleet::join(&cp, &[NodeSpec { name: NODE.into(), scenario: SCENARIO.into(), replicas: 1 }]);
    fleet.start_exporters(&cp, &[]);
    cp.apply(WORKLOAD);
    fleet.set_load("workloads: [{namespace: ai-inference, selector: {app: inference}, demand: 130}]\n");
    let adapter = Adapter::start(&cp, &AdapterOptions::default());

    // The caBundle of every APIService is the adapter's CA, from its own Secret.
    let secret: Value = serde_json::from_str(&cp.run(&[
        "get",
        "secret",
        "gpu-metrics-adapter-serving",
        "-n",
        "gpu-telemetry",
        "-o",
        "json",
    ]))
    .unwrap();
    assert!(secret["data"].as_object().is_some_and(|d| !d.is_empty()));
    for apiservice in ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"] {
        let spec =
            cp.run(&["get", "apiservice", apiservice, "-o", "jsonpath={.spec.caBundle} {.spec.insecureSkipTLSVerify}"]);
        let (bundle, insecure) = spec.split_once(' ').unwrap_or((&spec, ""));
        assert!(bundle.len() > 100, "{apiservice} has the adapter's CA: {spec}");
        assert_ne!(insecure, "true", "never insecureSkipTLSVerify");
    }

    // Through the aggregator, as the admin: each replica's share of the demand.
    let list: Value =
        wait_until_ok("both pods' gpu_utilization through the aggregator", Duration::from_secs(60), || {
            let out = cp.kubectl().args(["get", "--raw", POD_METRIC]).output().map_err(|e| e.to_string())?;
            let v: Value =
                serde_json::from_slice(&out.stdout).map_err(|_| String::from_utf8_lossy(&out.stderr).to_string())?;
            let items = v["items"].as_array().cloned().unwrap_or_default();
            if items.len() == 2 && items.iter().all(|i| i["value"] == "65") { Ok(v) } else { Err(v.to_string()) }
        });
    assert_eq!(list["kind"], "MetricValueList");

    // Discovery: the group's resources, and kubectl's discovery of every group without
    // an error. (kubectl api-resources leaves out names with a `/`, which client-go's
    // discovery takes for subresources (discovery/discovery_client.go), so no custom
    // metrics adapter's `pods/<metric>` shows there; external metrics' names do.)
    let raw: Value = serde_json::from_str(&cp.run(&["get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2"])).unwrap();
    let names: Vec<&str> = raw["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    for wanted in ["pods/gpu_utilization", "pods/gpu_memory_used_bytes", "nodes/gpu_power_usage_watts"] {
        assert!(names.contains(&wanted), "{wanted} in {names:?}");
    }
    let out = cp.kubectl().args(["api-resources"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "discovery warned: {}", String::from_utf8_lossy(&out.stderr));
    let groups = String::from_utf8(cp.kubectl().args(["api-versions"]).output().unwrap().stdout).unwrap();
    for gv in ["custom.metrics.k8s.io/v1beta1", "custom.metrics.k8s.io/v1beta2"] {
        assert!(groups.lines().any(|l| l == gv), "{gv} in {groups}");
    }

    // A user of no role: the aggregator passes alice's identity in the front proxy's
    // headers (the refusal names her, not the aggregator's certificate), the adapter
    // asks the real authorizer, which says no.
    let alice = cp.user("alice", &["developers"]);
    let out = cp.kubectl_as(&alice).args(["get", "--raw", POD_METRIC]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("alice") && err.to_lowercase().contains("forbidden"), "{err}");
    // Granted the reader role deploy/ gives the HPA controller, she reads the metric.
    cp.run(&[
        "create",
        "clusterrolebinding",
        "alice-reads-metrics",
        "--clusterrole=gpu-custom-metrics-reader",
        "--user=alice",
    ]);
    wait_until_ok("alice allowed once bound", Duration::from_secs(30), || {
        let out = cp.kubectl_as(&alice).args(["get", "--raw", POD_METRIC]).output().map_err(|e| e.to_string())?;
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).to_string()) }
    });
    drop(adapter);
}
