//! The manifests under `deploy/` render with `kubectl kustomize`, and the exporter's
//! arguments in the DaemonSet are flags the binary accepts, with valid values.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use clap::Parser;
use gpu_exporter::config::Args;
use serde::Deserialize;

fn rendered() -> Vec<serde_yaml_ng::Value> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
    let out = Command::new("kubectl").args(["kustomize", root]).output().expect("kubectl is installed");
    assert!(out.status.success(), "kubectl kustomize failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text).map(|doc| serde_yaml_ng::Value::deserialize(doc).unwrap()).collect()
}

#[test]
fn the_daemonset_passes_flags_the_exporter_accepts() {
    let docs = rendered();
    let daemonset = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet" && d["metadata"]["name"] == "gpu-exporter")
        .expect("a gpu-exporter DaemonSet");
    assert_eq!(daemonset["metadata"]["namespace"], "gpu-telemetry");
    let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
    let mut argv = vec!["gpu-exporter".to_string()];
    argv.extend(container["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap().to_string()));
    let args = Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    args.validate().unwrap();
    let env = container["env"].as_sequence().unwrap();
    assert!(env.iter().any(|e| e["name"] == "NODE_NAME" && e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
}

#[test]
fn the_service_is_headless_for_endpoint_slice_discovery() {
    let docs = rendered();
    let service = docs.iter().find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "gpu-exporter").unwrap();
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(service["spec"]["ports"][0]["port"], 9400);
}

#[test]
fn the_daemonset_mounts_what_attribution_reads() {
    let docs = rendered();
    let daemonset = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let spec = &daemonset["spec"]["template"]["spec"];
    let mounts = spec["containers"][0]["volumeMounts"].as_sequence().unwrap();
    let args: Vec<&str> =
        spec["containers"][0]["args"].as_sequence().unwrap().iter().filter_map(|a| a.as_str()).collect();
    for (flag, mount) in [
        (
            "--kubelet.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
            "/var/lib/kubelet/pod-resources",
        ),
        ("--path.procfs=/host/proc", "/host/proc"),
        ("--path.pod-logs=/var/log/pods", "/var/log/pods"),
    ] {
        assert!(args.contains(&flag), "{flag} missing");
        assert!(
            mounts.iter().any(|m| m["mountPath"] == mount && m["readOnly"] == true),
            "{mount} not mounted read-only"
        );
    }
    let pods_role =
        docs.iter().find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "gpu-exporter-pods").unwrap();
    assert_eq!(
        pods_role["rules"][0]["verbs"],
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>("[list, watch]").unwrap()
    );
}

#[test]
fn objects_land_in_the_namespaces_kubernetes_reads_them_from() {
    let docs = rendered();
    let namespace_of = |kind: &str, name: &str| {
        let doc = docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"));
        doc["metadata"]["namespace"].as_str().unwrap_or_default().to_string()
    };
    // Node Events are written where the kubelet writes them; the adapter reads its
    // authentication settings from kube-system.
    assert_eq!(namespace_of("Role", "gpu-exporter-health-events"), "default");
    assert_eq!(namespace_of("RoleBinding", "gpu-metrics-adapter-auth-reader"), "kube-system");
    for (kind, name) in
        [("DaemonSet", "gpu-exporter"), ("Deployment", "gpu-metrics-adapter"), ("Service", "gpu-exporter")]
    {
        assert_eq!(namespace_of(kind, name), "gpu-telemetry", "{kind} {name}");
    }
}
