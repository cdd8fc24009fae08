//! DRA attribution on the exporter binary: the shipped `dra-node` scenario (GPUs handed
//! out through NVIDIA's DRA driver, one ResourceClaim shared by two pods, a MIG device
//! claimed, and one GPU from the device plugin beside them), the simulated kubelet
//! reporting `dynamic_resources`, and the in-test API server serving the node's pods and
//! the ResourceSlice the driver would publish. Then the same node on a cluster that
//! serves no ResourceSlices: the claims are counted as unknown, nothing is guessed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Exporter, Launch, sample, samples, shipped_scenario};
use fake_nvml::scenario::Scenario;
use test_support::apiserver::{ADMIN_TOKEN, ApiServer, NODE, kubeconfig, scenario_pod};

const GPU0: &str = "GPU-d0000000-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-d0000000-0000-4000-8000-000000000001";
const GPU2: &str = "GPU-d0000000-0000-4000-8000-000000000002";
const GPU3: &str = "GPU-d0000000-0000-4000-8000-000000000003";

struct Node {
    exporter: Exporter,
    api: ApiServer,
    scenario: Scenario,
    _kubelet: fake_kubelet::KubeletServer,
    _dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

/// The exporter on `dra-node` with the kubelet and an API server; `slices` decides
/// whether the API server serves the driver's ResourceSlice.
fn start(slices: bool) -> Node {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = shipped_scenario("dra-node");
    let scenario = Scenario::load(&path).unwrap();
    let kubelet = fake_kubelet::start_in(&scenario, NODE, dir.path()).unwrap();
    let api = ApiServer::new();
    for i in 0..scenario.pods.len() {
        api.add_pod(scenario_pod(&scenario, i, "Running"));
    }
    if slices {
        api.serve_slices(fake_kubelet::slices::resource_slices(&scenario, NODE));
    }
    let addr = runtime.block_on(api.serve());
    let config = kubeconfig(dir.path(), addr, &[("test", ADMIN_TOKEN, "default")]).display().to_string();
    let at = |name: &str| dir.path().join(name).display().to_string();
    let (socket, procfs, logs) = (at("kubelet.sock"), at("proc"), at("pods"));
    let args = [
        "--collect-interval",
        "200ms",
        "--nvml.call-timeout",
        "150ms",
        "--kubelet.pod-resources-socket",
        &socket,
        "--kubelet.refresh-interval",
        "1s",
        "--kubelet.timeout",
        "500ms",
        "--path.procfs",
        &procfs,
        "--path.pod-logs",
        &logs,
        "--kubernetes.api",
        "auto",
        "--kubernetes.kubeconfig",
        &config,
        "--health.enabled",
        "false",
    ];
    let exporter = Launch::scenario(&path, Some(10.0)).args(&args).start();
    exporter.wait_ready();
    Node { exporter, api, scenario, _kubelet: kubelet, _dir: dir, _runtime: runtime }
}

fn line<'a>(text: &'a str, family: &str, needles: &[&str]) -> Option<&'a str> {
    samples(text, family).into_iter().find(|l| needles.iter().all(|n| l.contains(n)))
}

#[test]
fn claimed_gpus_carry_their_pods_and_claims_like_device_plugin_ones() {
    let node = start(true);
    let text = node.exporter.wait_metrics("the slice watch and the claim owners", |t| {
        sample(t, "gpu_exporter_resource_slice_watch_up", &[]) == Some(1.0)
            && line(t, "gpu_utilization", &[GPU0, "pod=\"train\""]).is_some()
    });
    assert_eq!(sample(&text, "gpu_exporter_resource_slice_devices", &[]), Some(4.0), "two whole GPUs, two MIG devices");
    assert_eq!(sample(&text, "gpu_exporter_pod_resources_unknown_devices", &[]), Some(0.0));

    // A whole GPU held through a claim: the device plugin's labels, then the claim.
    let train = line(&text, "gpu_utilization", &[GPU0]).unwrap();
    assert!(train.contains("namespace=\"ai\",pod=\"train\",container=\"main\",claim=\"train-gpu\"} 81"), "{train}");
    let info = line(&text, "gpu_device_pod_info", &[GPU0]).unwrap();
    assert!(info.contains("pod=\"train\",container=\"main\",claim=\"train-gpu\""), "{info}");
    let own = [("uuid", GPU0), ("pod", "train"), ("claim", "train-gpu")];
    assert_eq!(sample(&text, "gpu_pod_utilization", &own), Some(81.0), "the GPU's own utilization");

    // One claim, two pods: shared like a time-sliced GPU, split by process.
    let shared = line(&text, "gpu_utilization", &[GPU1]).unwrap();
    assert!(!shared.contains("pod="), "a GPU two pods share has no single owner: {shared}");
    assert!(line(&text, "gpu_device_pod_info", &[GPU1]).is_none());
    for (pod, sm) in [("serve-a", 25.0), ("serve-b", 15.0)] {
        let labels = [("uuid", GPU1), ("pod", pod), ("claim", "shared-gpu")];
        assert_eq!(sample(&text, "gpu_pod_utilization", &labels), Some(sm), "{pod}");
    }

    // A MIG device held through a claim; its sibling is nobody's.
    let mig = line(&text, "gpu_device_pod_info", &[GPU2]).unwrap();
    assert!(
        mig.contains("mig_profile=\"3g.40gb\"") && mig.contains("pod=\"llm\",container=\"server\",claim=\"llm-slice\""),
        "{mig}"
    );
    assert_eq!(samples(&text, "gpu_device_pod_info").iter().filter(|l| l.contains(GPU2)).count(), 1);
    let llm = [("pod", "llm"), ("claim", "llm-slice")];
    assert_eq!(sample(&text, "gpu_pod_memory_used_bytes", &llm), Some(30000.0 * 1048576.0));

    // The device plugin's GPU on the same node: as before, no claim label.
    let legacy = line(&text, "gpu_utilization", &[GPU3]).unwrap();
    assert!(legacy.contains("pod=\"legacy\",container=\"main\"}") && !legacy.contains("claim="), "{legacy}");

    // The exporter asked only for its own node's slices.
    let slice_requests: Vec<_> =
        node.api.requests().into_iter().filter(|s| s.path == "/apis/resource.k8s.io/v1/resourceslices").collect();
    assert!(!slice_requests.is_empty());
    let own_node = format!("spec.nodeName={NODE}");
    assert!(slice_requests.iter().all(|s| s.param("fieldSelector") == Some(own_node.clone())), "{slice_requests:?}");
    assert_eq!(node.scenario.pods.len(), 5);
}

#[test]
fn without_resource_slices_claims_are_unknown_and_nothing_is_guessed() {
    let node = start(false);
    let text = node.exporter.wait_metrics("the device plugin's owner", |t| {
        sample(t, "gpu_exporter_pod_watch_up", &[]) == Some(1.0)
            && line(t, "gpu_utilization", &[GPU3, "pod=\"legacy\""]).is_some()
            && sample(t, "gpu_exporter_resource_slice_watch_up", &[]) == Some(0.0)
    });
    assert_eq!(sample(&text, "gpu_exporter_pod_resources_unknown_devices", &[]), Some(4.0), "four claimed devices");
    assert_eq!(sample(&text, "gpu_exporter_resource_slice_devices", &[]), Some(0.0));
    for gpu in [GPU0, GPU1, GPU2] {
        assert!(!line(&text, "gpu_up", &[gpu]).unwrap().contains("pod="), "{gpu} is not guessed");
    }
    assert!(samples(&text, "gpu_device_pod_info").iter().all(|l| l.contains(GPU3)), "only the plugin's GPU is held");
    assert!(samples(&text, "gpu_pod_utilization").iter().all(|l| !l.contains("claim=")));
    let logs = node.exporter.logs();
    assert!(logs.contains("serves no resource.k8s.io/v1 ResourceSlices"), "said once: {logs}");
    assert_eq!(logs.matches("serves no resource.k8s.io/v1 ResourceSlices").count(), 1);
}
