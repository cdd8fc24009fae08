//! The adapter against the live exporter on the simulated node: fake-kubelet and the
//! exporter binary run the seed's mixed MIG node (the LLM pod on a 3g.40gb instance,
//! light-inference pods on 1g.10gb instances, the 8-replica inference pool time-sliced
//! four to a GPU); the adapter scrapes the exporter; `kubectl get --raw` asks what the
//! seed's `inference-hpa` asks. No fixture in between: the numbers come from the
//! scenario through NVML, attribution, the exposition, the adapter and the API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::node::{FROZEN_AT, MetricsAdapter, NodeOptions, SimulatedNode, pod_values, repo, wait_pods};

#[test]
fn the_seeds_hpa_questions_are_answered_from_the_simulated_node() {
    let scenario = repo().join("fake-nvml/scenarios/seed-mixed-node.yaml");
    let node = SimulatedNode::start_with("gpu-node-1", &scenario, FROZEN_AT, NodeOptions::default());
    let adapter = MetricsAdapter::start(&[node.exporter]);
    let pods = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/";
    let utilization = wait_pods(&adapter, &format!("{pods}gpu_utilization"), 8);
    // Time-sliced GPUs: each replica gets its own process's SM utilization from the scenario.
    assert_eq!(
        utilization,
        [
            ("inference-pool-7d9f8b6c5-2xk4q", "24"),
            ("inference-pool-7d9f8b6c5-5vtdn", "19"),
            ("inference-pool-7d9f8b6c5-9hq2m", "17"),
            ("inference-pool-7d9f8b6c5-bw7rx", "14"),
            ("inference-pool-7d9f8b6c5-d4lzp", "21"),
            ("inference-pool-7d9f8b6c5-gk8sn", "16"),
            ("inference-pool-7d9f8b6c5-m2xcv", "12"),
            ("inference-pool-7d9f8b6c5-qp6tj", "9"),
        ]
        .map(|(p, v)| (p.to_string(), v.to_string()))
    );

    // Memory reaches every pod, the LLM on its MIG instance included; narrowing by the
    // MIG profile keeps only the instance's pod.
    let memory = adapter.get(&format!("{pods}gpu_memory_used_bytes")).unwrap();
    let bytes = |list: &serde_json::Value| -> Vec<(String, f64)> {
        pod_values(list).into_iter().map(|(pod, v)| (pod, support::quantity(&v))).collect()
    };
    let memory = bytes(&memory);
    assert_eq!(memory.len(), 12, "{memory:?}");
    let llm = 36000.0 * 1024.0 * 1024.0;
    assert!(memory.contains(&("llm-inference-70b".into(), llm)), "{memory:?}");
    assert!(memory.contains(&("inference-pool-7d9f8b6c5-qp6tj".into(), 15250.0 * 1024.0 * 1024.0)), "{memory:?}");
    let narrowed =
        adapter.get(&format!("{pods}gpu_memory_used_bytes?metricLabelSelector=mig_profile%3D3g.40gb")).unwrap();
    assert_eq!(bytes(&narrowed), [("llm-inference-70b".to_string(), llm)]);
}
