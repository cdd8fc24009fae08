//! Simulated GPU nodes on the real control plane: they register as the kubelet, the
//! device plugin and GPU feature discovery leave a node; the real scheduler binds pods
//! asking for time-sliced GPUs and MIG instances to them; the simulated kubelet runs
//! them (devices, processes, Running and Ready, an IP); the exporters, with the
//! identity `deploy/` gives them, attribute every device to its pod; and a scaled-down
//! Deployment's pods leave the API server, the kubelet and the exporter's page.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use test_support::control_plane::ControlPlane;
use test_support::joined::{JoinedFleet, NodeSpec, base_with_external_metrics};
use test_support::simulated::wait_until_ok;

const TIME_SLICED: &str =
    "gpus:\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n";
const MIG: &str = "gpus:\n  - {model: A100-SXM4-80GB, mig: {layout: all-3g.40gb}}\n  - {model: A100-SXM4-80GB, mig: \
                   {layout: all-1g.10gb}}\n";

const WORKLOADS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: ai-inference}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: pool, namespace: ai-inference}
spec:
  replicas: 4
  selector: {matchLabels: {app: pool}}
  template:
    metadata: {labels: {app: pool}}
    spec:
      nodeSelector: {nvidia.com/gpu.sharing-strategy: time-slicing}
      containers:
        - name: inference
          image: vllm/vllm-openai:latest
          resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: llm, namespace: ai-inference, labels: {app: llm}}
spec:
  containers:
    - name: server
      image: vllm/vllm-openai:latest
      resources: {limits: {nvidia.com/mig-3g.40gb: 1, cpu: "8", memory: 64Gi}}
"#;

fn json(cp: &ControlPlane, args: &[&str]) -> Value {
    serde_json::from_str(&cp.run(args)).unwrap()
}

/// Series of `family` on `page` whose labels include `pod="<pod>"`.
fn series_of<'a>(page: &'a str, family: &str, pod: &str) -> Vec<&'a str> {
    let needle = format!("pod=\"{pod}\"");
    page.lines().filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(&needle)).collect()
}

#[test]
fn joined_nodes_run_scheduled_gpu_pods_and_their_exporters_attribute_them() {
    let cp = ControlPlane::start();
    cp.apply(&base_with_external_metrics());
    let mut fleet = JoinedFleet::join(
        &cp,
        &[
            NodeSpec { name: "gpu-ts".into(), scenario: TIME_SLICED.into(), replicas: 4 },
            NodeSpec { name: "gpu-mig".into(), scenario: MIG.into(), replicas: 1 },
        ],
    );

    // The node as the device plugin and GPU feature discovery leave it.
    let ts = json(&cp, &["get", "node", "gpu-ts", "-o", "json"]);
    assert_eq!(ts["status"]["capacity"]["nvidia.com/gpu"], "12", "3 GPUs x 4 replicas");
    assert_eq!(ts["metadata"]["labels"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3-SHARED");
    assert_eq!(ts["metadata"]["labels"]["nvidia.com/gpu.present"], "true");
    assert!(ts["spec"]["taints"].is_null(), "no taint keeps pods away: {}", ts["spec"]["taints"]);
    let mig = json(&cp, &["get", "node", "gpu-mig", "-o", "json"]);
    assert_eq!(mig["status"]["capacity"]["nvidia.com/mig-3g.40gb"], "2");
    assert_eq!(mig["status"]["capacity"]["nvidia.com/mig-1g.10gb"], "7");
    assert!(mig["status"]["capacity"]["nvidia.com/gpu"].is_null());
    assert_eq!(mig["metadata"]["labels"]["nvidia.com/mig.config"], "custom");

    // The exporter DaemonSet's pods run on both nodes; the exporters start with tokens
    // bound to them.
    fleet.start_exporters(&cp, &[]);
    for e in &fleet.exporters {
        wait_until_ok(&format!("the pod watch of {} up with deploy/'s RBAC", e.node), Duration::from_secs(30), || {
            let page = e.metrics();
            let up = page.lines().find(|l| l.starts_with("gpu_exporter_pod_watch_up")).unwrap_or_default().to_string();
            if up.ends_with(" 1") { Ok(()) } else { Err(up) }
        });
    }

    cp.apply(WORKLOADS);
    let pods = cp.wait_for(
        "four pool pods and the llm pod Running",
        Duration::from_secs(60),
        &["get", "pods", "-n", "ai-inference", "--field-selector=status.phase=Running", "-o", "json"],
        |s| serde_json::from_str::<Value>(s).is_ok_and(|v| v["items"].as_array().unwrap().len() == 5),
    );
    let pods: Value = serde_json::from_str(&pods).unwrap();
    for pod in pods["items"].as_array().unwrap() {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let node = pod["spec"]["nodeName"].as_str().unwrap();
        let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
        let expected_node = if name == "llm" { "gpu-mig" } else { "gpu-ts" };
        assert_eq!(node, expected_node, "{name} scheduled by its resources");
        assert!(ip.parse::<std::net::Ipv4Addr>().is_ok_and(|a| a.octets()[0] == 10), "{name} has a pod IP: {ip:?}");
        let ready = pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "{name} is Ready");
        // Its exporter names it on the device it holds.
        let exporter = fleet.exporter(node);
        // A time-sliced GPU's sharers are told apart by process (gpu_pod_*); a MIG
        // instance's gauges carry its one holder.
        let family = if name == "llm" { "gpu_memory_used_bytes" } else { "gpu_pod_utilization" };
        wait_until_ok(&format!("{name} attributed on {node}"), Duration::from_secs(30), || {
            let page = exporter.metrics();
            let series = series_of(&page, family, name);
            if series.len() == 1 { Ok(()) } else { Err(format!("{series:?}")) }
        });
    }
    let page = fleet.exporter("gpu-mig").metrics();
    let llm = series_of(&page, "gpu_memory_used_bytes", "llm");
    assert!(llm[0].contains("mig_profile=\"3g.40gb\""), "{llm:?}");
    // Time-sliced replicas were spread one per GPU, as the device plugin's default
    // (distributed) policy does: three GPUs hold the four pods, none holds three.
    let page = fleet.exporter("gpu-ts").metrics();
    let per_gpu: Vec<usize> = (0..3)
        .map(|g| {
            page.lines()
                .filter(|l| {
                    l.starts_with("gpu_pod_utilization{")
                        && l.contains(&format!("gpu=\"{g}\""))
                        && l.contains("pod=\"pool-")
                })
                .count()
        })
        .collect();
    assert_eq!(per_gpu.iter().sum::<usize>(), 4, "{per_gpu:?}");
    assert!(per_gpu.iter().all(|n| (1..=2).contains(n)), "{per_gpu:?}");

    // Scaled down: the deleted pods leave the API server (the kubelet confirms each
    // deletion) and the exporter's page.
    cp.run(&["scale", "deployment", "pool", "-n", "ai-inference", "--replicas=1"]);
    cp.wait_for(
        "one pool pod left",
        Duration::from_secs(60),
        &["get", "pods", "-n", "ai-inference", "-l", "app=pool", "-o", "jsonpath={.items[*].metadata.name}"],
        |s| s.split_whitespace().count() == 1,
    );
    wait_until_ok("the exporter drops the deleted pods", Duration::from_secs(30), || {
        let page = fleet.exporter("gpu-ts").metrics();
        let n = page.lines().filter(|l| l.starts_with("gpu_pod_utilization{") && l.contains("pod=\"pool-")).count();
        if n == 1 { Ok(()) } else { Err(format!("{n} pool series")) }
    });
    // The freed replicas are offered again: four more pods fit.
    cp.run(&["scale", "deployment", "pool", "-n", "ai-inference", "--replicas=5"]);
    cp.wait_for(
        "five pool pods Running",
        Duration::from_secs(60),
        &[
            "get",
            "pods",
            "-n",
            "ai-inference",
            "-l",
            "app=pool",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        |s| s.split_whitespace().count() == 5,
    );
    assert!(!fleet.kubelet_log().contains("refused"), "{}", fleet.kubelet_log());
}

#[test]
fn a_pod_the_node_cannot_hold_fails_as_the_kubelet_fails_it() {
    // The scheduler only sees counts; a pod bound straight to a node (nodeName set, no
    // scheduler) that asks for more than the node has is refused at admission.
    let cp = ControlPlane::start();
    let _fleet =
        JoinedFleet::join(&cp, &[NodeSpec { name: "gpu-ts".into(), scenario: TIME_SLICED.into(), replicas: 1 }]);
    cp.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: greedy, namespace: default}\nspec:\n  nodeName: gpu-ts\n  \
         containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 5}}}]\n",
    );
    let status = cp.wait_for(
        "the pod Failed",
        Duration::from_secs(30),
        &["get", "pod", "greedy", "-o", "jsonpath={.status.phase} {.status.reason} {.status.message}"],
        |s| s.starts_with("Failed"),
    );
    assert!(status.contains("UnexpectedAdmissionError"), "{status}");
    assert!(status.contains("nvidia.com/gpu: 5 requested, 3 free of 3"), "{status}");
}
