//! The manifests under `deploy/` render with `kubectl kustomize`, register both API
//! versions with v1beta2 preferred against a Service that exists, bind the roles
//! delegated authentication needs, and pass the binary flags it accepts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use gpu_metrics_adapter::config::Args;
use gpu_metrics_adapter::source::prometheus::rules;
use serde_json::Value;

fn render() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/adapter");
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .args(["kustomize", dir.to_str().unwrap()])
        .output()
        .unwrap_or_else(|e| panic!("this test needs kubectl ({kubectl}): {e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde_json::to_value(serde_yaml_ng::Value::deserialize(doc).unwrap()).unwrap())
        .collect()
}

use serde::Deserialize;

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn manifests_register_both_versions_and_match_the_binary() {
    let docs = render();
    let v2 = find(&docs, "APIService", "v1beta2.custom.metrics.k8s.io");
    let v1 = find(&docs, "APIService", "v1beta1.custom.metrics.k8s.io");
    assert_eq!(v2["spec"]["group"], "custom.metrics.k8s.io");
    assert_eq!((v2["spec"]["version"].as_str(), v1["spec"]["version"].as_str()), (Some("v1beta2"), Some("v1beta1")));
    assert!(
        v2["spec"]["versionPriority"].as_i64() > v1["spec"]["versionPriority"].as_i64(),
        "v1beta2 must be preferred"
    );
    for api in [v1, v2] {
        let svc = &api["spec"]["service"];
        let service = find(&docs, "Service", svc["name"].as_str().unwrap());
        assert_eq!(service["metadata"]["namespace"], svc["namespace"]);
        let port = service["spec"]["ports"].as_array().unwrap().iter().find(|p| p["port"] == svc["port"]).unwrap();
        assert_eq!(port["targetPort"], "https");
    }

    let deploy = find(&docs, "Deployment", "gpu-metrics-adapter");
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["ports"][0]["name"], "https");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    let mut argv = vec!["gpu-metrics-adapter".to_owned()];
    argv.extend(container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()));
    let args = Args::parse_from_args(&argv).unwrap_or_else(|e| panic!("deployment args rejected: {e}"));
    assert_eq!(args.secure_port, container["ports"][0]["containerPort"].as_u64().unwrap() as u16);
    assert_eq!(args.exporter_namespace, "gpu-telemetry");
    assert!(!args.standalone);

    let reader = find(&docs, "RoleBinding", "gpu-metrics-adapter-auth-reader");
    assert_eq!(reader["metadata"]["namespace"], "kube-system");
    assert_eq!(reader["roleRef"]["name"], "extension-apiserver-authentication-reader");
    let delegator = find(&docs, "ClusterRoleBinding", "gpu-metrics-adapter:system:auth-delegator");
    assert_eq!(delegator["roleRef"]["name"], "system:auth-delegator");
    let hpa = find(&docs, "ClusterRoleBinding", "hpa-controller-gpu-custom-metrics");
    assert_eq!(hpa["subjects"][0]["name"], "horizontal-pod-autoscaler");
    assert_eq!(hpa["subjects"][0]["namespace"], "kube-system");
}

#[test]
fn example_rules_are_valid() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/adapter/prometheus-rules.yaml"))
            .unwrap();
    let cm: Value = serde_json::to_value(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text).unwrap()).unwrap();
    let parsed = rules::parse(cm["data"]["rules.yaml"].as_str().unwrap(), "prometheus-rules.yaml").unwrap();
    assert_eq!(parsed[0].name, "request_latency_ms");
    assert!(parsed[0].resources.contains_key("pods"));
}
