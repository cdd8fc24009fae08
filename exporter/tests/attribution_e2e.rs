//! The exporter binary with the simulated kubelet beside it: owner labels and per-pod
//! families on /metrics, a kubelet socket that goes away and comes back, running
//! without an API server, and the pod watch (with pod labels, and an ended pod that the
//! kubelet still lists) against the in-test API server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{Exporter, Launch, sample, samples, write_scenario};
use fake_kubelet::KubeletServer;
use fake_nvml::scenario::Scenario;
use test_support::apiserver::{ADMIN_TOKEN, ApiServer, NODE, kubeconfig, scenario_pod as api_pod};

/// Three whole H100s: GPU 0 held by `train` alone, GPU 1 time-sliced between two pods,
/// GPU 2 nobody's.
const NODE_SCENARIO: &str = "
gpus:
  - {model: H100-SXM5-80GB, uuid: GPU-e0000000-0000-4000-8000-000000000000, values: {utilization: 81, memory_used_mib: 40000}}
  - {model: H100-SXM5-80GB, uuid: GPU-e0000000-0000-4000-8000-000000000001, values: {utilization: 40, memory_used_mib: 30000}}
  - {model: H100-SXM5-80GB, uuid: GPU-e0000000-0000-4000-8000-000000000002}
pods:
  - namespace: ai
    name: train
    labels: {app: trainer, team: ml, internal: secret}
    containers:
      - name: main
        devices: [{resource: nvidia.com/gpu, gpu: 0}]
        processes: [{pid: 51001, gpu: 0, memory_used_mib: 39000, sm_utilization: 80}]
  - namespace: ai
    name: serve-a
    containers:
      - name: main
        devices: [{resource: nvidia.com/gpu, gpu: 1, replica: 0}]
        processes: [{pid: 52001, gpu: 1, memory_used_mib: 12000, sm_utilization: 25}]
  - namespace: ai
    name: serve-b
    containers:
      - name: main
        devices: [{resource: nvidia.com/gpu, gpu: 1, replica: 1}]
        processes: [{pid: 52002, gpu: 1, memory_used_mib: 9000, sm_utilization: 15}]
";

struct Node {
    exporter: Exporter,
    kubelet: KubeletServer,
    dir: tempfile::TempDir,
    scenario: Scenario,
}

fn at(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

fn start(extra: &[&str]) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = write_scenario(dir.path(), "node.yaml", NODE_SCENARIO);
    let scenario = Scenario::load(&path).unwrap();
    let kubelet = fake_kubelet::start_in(&scenario, "test-node", dir.path()).unwrap();
    let mut args = vec![
        "--collect-interval".to_string(),
        "200ms".into(),
        "--nvml.call-timeout".into(),
        "150ms".into(),
        "--kubelet.pod-resources-socket".into(),
        at(dir.path(), "kubelet.sock"),
        "--kubelet.refresh-interval".into(),
        "1s".into(),
        "--kubelet.timeout".into(),
        "500ms".into(),
        "--path.procfs".into(),
        at(dir.path(), "proc"),
        "--path.pod-logs".into(),
        at(dir.path(), "pods"),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Launch::scenario(&path, Some(10.0)).args(&argv).start();
    exporter.wait_ready();
    Node { exporter, kubelet, dir, scenario }
}

const GPU0: &str = "GPU-e0000000-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-e0000000-0000-4000-8000-000000000001";

fn owned(text: &str, gpu: &str, pod: &str) -> bool {
    samples(text, "gpu_utilization")
        .iter()
        .any(|l| l.contains(&format!("uuid=\"{gpu}\"")) && l.contains(&format!("pod=\"{pod}\"")))
}

#[test]
fn an_exclusive_gpu_carries_its_owner_and_shared_gpus_are_split_by_pod() {
    let node = start(&[]);
    let text = node.exporter.wait_metrics("the owner of GPU 0", |t| owned(t, GPU0, "train"));
    let line = samples(&text, "gpu_utilization").into_iter().find(|l| l.contains(GPU0)).unwrap();
    assert!(line.contains("namespace=\"ai\",pod=\"train\",container=\"main\"") && line.ends_with(" 81"), "{line}");
    let shared = samples(&text, "gpu_utilization").into_iter().find(|l| l.contains(GPU1)).unwrap();
    assert!(!shared.contains("pod="), "a time-sliced GPU has no single owner: {shared}");
    let train = [("uuid", GPU0), ("namespace", "ai"), ("pod", "train"), ("container", "main")];
    assert_eq!(sample(&text, "gpu_pod_utilization", &train), Some(81.0), "the GPU's own utilization");
    assert_eq!(sample(&text, "gpu_pod_memory_used_bytes", &train), Some(40000.0 * 1048576.0));
    // Both time-sliced pods have their own series, and they never add up to more memory
    // than the GPU uses.
    let pool: Vec<f64> = ["serve-a", "serve-b"]
        .iter()
        .map(|pod| sample(&text, "gpu_pod_memory_used_bytes", &[("uuid", GPU1), ("pod", pod)]).unwrap())
        .collect();
    assert!(pool.iter().sum::<f64>() <= 30000.0 * 1048576.0, "{pool:?}");
    assert!(sample(&text, "gpu_pod_utilization", &[("uuid", GPU1), ("pod", "serve-b")]).is_some());
    assert_eq!(sample(&text, "gpu_exporter_pod_resources_up", &[]), Some(1.0));
    assert_eq!(sample(&text, "gpu_exporter_pod_resources_unknown_devices", &[]), Some(0.0));
    assert!(
        sample(&text, "gpu_pod_info", &[("pod", "train"), ("uid", &node.scenario.pods[0].uid)]).is_some(),
        "pods are named from the pod log tree without an API server"
    );
    assert!(!text.contains("gpu_exporter_pod_watch_up"), "no watch runs with --kubernetes.api=off");
    let off_lines = node.exporter.logs().matches("Kubernetes API off").count();
    assert_eq!(off_lines, 1, "said once:\n{}", node.exporter.logs());
}

#[test]
fn a_kubelet_restart_is_survived_and_reported_once_per_state_change() {
    let mut node = start(&[]);
    node.exporter.wait_metrics("pod-resources up", |t| sample(t, "gpu_exporter_pod_resources_up", &[]) == Some(1.0));
    node.kubelet.drop_socket();
    let down = node
        .exporter
        .wait_metrics("pod-resources down", |t| sample(t, "gpu_exporter_pod_resources_up", &[]) == Some(0.0));
    assert!(owned(&down, GPU0, "train"), "the last list is kept through a short restart");
    // Several failed refreshes, one log line.
    let failed = |t: &str| -> f64 {
        samples(t, "gpu_exporter_pod_resources_errors_total")
            .iter()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    let errors = node.exporter.wait_metrics("a few failed refreshes", |t| failed(t) >= 2.0);
    assert!(sample(&errors, "gpu_exporter_pod_resources_last_success_timestamp_seconds", &[]).is_some());
    let logs = node.exporter.logs();
    assert_eq!(logs.matches("kubelet pod-resources unavailable").count(), 1, "{logs}");
    // Past the grace the owner goes: pods may have changed while the kubelet was away.
    node.exporter.wait_metrics("the kept list to expire", |t| !owned(t, GPU0, "train"));
    node.kubelet.restore_socket().unwrap();
    node.exporter.wait_metrics("pod-resources up again", |t| {
        sample(t, "gpu_exporter_pod_resources_up", &[]) == Some(1.0) && owned(t, GPU0, "train")
    });
    let logs = node.exporter.logs();
    assert_eq!(logs.matches("kubelet pod-resources answers").count(), 2, "up, then up again:\n{logs}");
    assert_eq!(node.exporter.terminate().code(), Some(0));
    drop(node.dir);
}

#[test]
fn no_api_configuration_degrades_and_says_so_once() {
    let node = start(&["--kubernetes.api", "auto", "--kubernetes.kubeconfig", "/nonexistent/kubeconfig"]);
    let text = node.exporter.wait_metrics("the owner of GPU 0", |t| owned(t, GPU0, "train"));
    assert!(!text.contains("gpu_exporter_pod_watch_up"));
    let logs = node.exporter.logs();
    assert_eq!(logs.matches("no Kubernetes API: exclusive devices").count(), 1, "{logs}");
    assert!(!logs.contains("no source can name"), "every pod is named from the log tree from the first cycle: {logs}");
    assert!(logs.contains("/nonexistent/kubeconfig"), "the reason names the file: {logs}");
}

#[test]
fn with_the_api_pods_carry_labels_and_an_ended_pod_leaves_while_the_kubelet_lists_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let api = ApiServer::new();
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::parse("node.yaml", NODE_SCENARIO).unwrap();
    for i in 0..scenario.pods.len() {
        api.add_pod(api_pod(&scenario, i, "Running"));
    }
    let addr = runtime.block_on(api.serve());
    let config = kubeconfig(dir.path(), addr, &[("test", ADMIN_TOKEN, "default")]).display().to_string();
    // The health loop would follow the same kubeconfig; this test counts the pod watch's requests only.
    let node = start(&[
        "--kubernetes.api",
        "auto",
        "--kubernetes.kubeconfig",
        &config,
        "--kubernetes.pod-labels",
        "app|team",
        "--health.enabled",
        "false",
    ]);
    // The watch reports up as soon as it has listed; the pods' labels reach the series at
    // the next collection cycle, so wait for that cycle too (under load it can be late).
    let text = node.exporter.wait_metrics("the watch to sync and a cycle to use it", |t| {
        sample(t, "gpu_exporter_pod_watch_up", &[]) == Some(1.0)
            && owned(t, GPU0, "train")
            && samples(t, "gpu_pod_info").iter().any(|l| l.contains("pod=\"train\"") && l.contains("label_app="))
    });
    assert_eq!(sample(&text, "gpu_exporter_pod_watch_pods", &[]), Some(3.0));
    let info = samples(&text, "gpu_pod_info").into_iter().find(|l| l.contains("pod=\"train\"")).unwrap();
    assert!(info.contains("label_app=\"trainer\",label_team=\"ml\""), "{info}");
    assert!(!info.contains("secret"), "labels outside the allowlist stay out: {info}");

    // The pod finishes; the kubelet still lists it, the metrics drop it at once.
    assert_eq!(scenario.pods[0].name, "train");
    api.add_pod(api_pod(&scenario, 0, "Succeeded"));
    let after = node.exporter.wait_metrics("train to leave", |t| !owned(t, GPU0, "train"));
    assert!(!after.contains("pod=\"train\""), "no series names the ended pod:\n{after}");
    assert!(node.kubelet.lister().list_calls() >= 1);
    assert!(sample(&after, "gpu_pod_memory_used_bytes", &[("pod", "serve-a")]).is_some());
    // Every request the exporter made was scoped to its node.
    let requests = api.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.param("fieldSelector"), Some(format!("spec.nodeName={NODE}")), "{r:?}");
    }
    drop(runtime);
}

#[test]
fn device_ids_of_no_gpu_here_are_counted_and_ignored() {
    use fake_kubelet::proto::{ContainerDevices, ContainerResources, PodResources};
    let node = start(&[]);
    node.exporter.wait_metrics("the owner of GPU 0", |t| owned(t, GPU0, "train"));
    let mut listing = fake_kubelet::listing::pod_resources(&node.scenario, "test-node");
    listing.push(PodResources {
        name: "elsewhere".into(),
        namespace: "ai".into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: vec![ContainerDevices {
                resource_name: "nvidia.com/gpu".into(),
                device_ids: vec![
                    "GPU-ffffffff-0000-4000-8000-000000000000".into(),
                    "MIG-ffffffff-0000-4000-8000-000000000000::2".into(),
                ],
                topology: None,
            }],
            cpu_ids: vec![],
            memory: vec![],
            dynamic_resources: vec![],
        }],
    });
    node.kubelet.lister().set_listing(listing);
    let text = node.exporter.wait_metrics("the unknown ids to be counted", |t| {
        sample(t, "gpu_exporter_pod_resources_unknown_devices", &[]) == Some(2.0)
    });
    assert!(!text.contains("pod=\"elsewhere\""), "an unknown device names no pod");
    assert!(owned(&text, GPU0, "train"), "the rest of the list still counts");
}
