//! The adapter's per-pod answers on a DRA node are those of the same node run by the
//! device plugin. Two simulated nodes run side by side: the shipped `dra-node` scenario
//! (GPUs allocated through ResourceClaims, one claim shared by two pods, a claimed MIG
//! device, one device plugin GPU), with the in-test API server serving the node's pods
//! and the driver's ResourceSlice; and its twin, where the device plugin allocates the
//! same devices to the same pods (the shared claim becomes two time-slicing replicas).
//! Each has its own adapter; `kubectl get --raw` asks both what an HPA would ask.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fake_nvml::scenario::Scenario;
use support::node::{FROZEN_AT, MetricsAdapter, NodeOptions, SimulatedNode, repo, wait_pods};
use test_support::apiserver::{ADMIN_TOKEN, ApiServer, NODE, kubeconfig, scenario_pod};

/// The device plugin's twin of `dra-node`: every claim written as the allocation the
/// device plugin makes of the same device.
fn plugin_twin(dra: &str) -> String {
    let swaps = [
        ("claims: [{name: train-gpu, gpu: 0}]", "devices: [{resource: nvidia.com/gpu, gpu: 0}]"),
        (
            "claims: [{name: llm-slice, gpu: 2, mig: 0}]",
            "devices: [{resource: nvidia.com/mig-3g.40gb, gpu: 2, mig: 0}]",
        ),
    ];
    let mut twin: String = dra.lines().filter(|l| !l.starts_with("dra:")).collect::<Vec<_>>().join("\n");
    for (from, to) in swaps {
        assert!(twin.contains(from), "dra-node.yaml no longer has {from}");
        twin = twin.replace(from, to);
    }
    for replica in 0..2 {
        let shared = "claims: [{name: shared-gpu, gpu: 1}]";
        assert!(twin.contains(shared), "dra-node.yaml no longer has two {shared}");
        twin =
            twin.replacen(shared, &format!("devices: [{{resource: nvidia.com/gpu, gpu: 1, replica: {replica}}}]"), 1);
    }
    assert!(!twin.contains("claims:"), "every claim has a twin: {twin}");
    twin
}

#[test]
fn a_dra_node_answers_the_hpa_as_its_device_plugin_twin_does() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dra_path = repo().join("fake-nvml/scenarios/dra-node.yaml");
    let dra = Scenario::load(&dra_path).unwrap();
    let twin_path = dir.path().join("plugin-node.yaml");
    std::fs::write(&twin_path, plugin_twin(&std::fs::read_to_string(&dra_path).unwrap())).unwrap();
    assert!(Scenario::load(&twin_path).unwrap().dra.is_none());

    let api = ApiServer::new();
    for i in 0..dra.pods.len() {
        api.add_pod(scenario_pod(&dra, i, "Running"));
    }
    api.serve_slices(fake_kubelet::slices::resource_slices(&dra, NODE));
    let addr = runtime.block_on(api.serve());
    let config = kubeconfig(dir.path(), addr, &[("test", ADMIN_TOKEN, "default")]);

    let on_api = NodeOptions { kubeconfig: Some(&config), ..NodeOptions::default() };
    let dra_node = SimulatedNode::start_with(NODE, &dra_path, FROZEN_AT, on_api);
    let plugin_node = SimulatedNode::start_with(NODE, &twin_path, FROZEN_AT, NodeOptions::default());
    let dra_adapter = MetricsAdapter::start(&[dra_node.exporter]);
    let plugin_adapter = MetricsAdapter::start(&[plugin_node.exporter]);

    // Every pod on a device has memory; utilization too (the MIG device through GPM).
    let pods = dra.pods.len();
    let ask = |adapter: &MetricsAdapter, metric: &str| {
        wait_pods(adapter, &format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai/pods/*/{metric}"), pods)
    };
    // The DRA node's answers converge once its exporter has synced the ResourceSlice
    // watch (pods are named earlier, through the pod watch, and look shared until then).
    let converge = |metric: &str| {
        let twin = ask(&plugin_adapter, metric);
        let what = format!("{metric} on the DRA node to equal its twin's {twin:?}");
        test_support::simulated::wait_until_ok(&what, support::node::CONVERGE, || {
            let answer = ask(&dra_adapter, metric);
            if answer == twin { Ok(()) } else { Err(format!("{answer:?}")) }
        });
        twin
    };
    converge("gpu_memory_used_bytes");
    let utilization = converge("gpu_utilization");
    // And the figures are the scenario's: whole GPUs their own utilization, the shared
    // GPU split by process, the MIG device its SM activity.
    let expected = [("legacy", "55"), ("llm", "62"), ("serve-a", "25"), ("serve-b", "15"), ("train", "81")];
    assert_eq!(utilization, expected.map(|(p, v)| (p.to_string(), v.to_string())));
    drop(runtime);
}
