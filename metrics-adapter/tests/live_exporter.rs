//! The adapter against the live exporter on the simulated node: fake-kubelet and the
//! exporter binary run the seed's mixed MIG node (the LLM pod on a 3g.40gb instance,
//! light-inference pods on 1g.10gb instances, the 8-replica inference pool time-sliced
//! four to a GPU); the adapter scrapes the exporter; `kubectl get --raw` asks what the
//! seed's `inference-hpa` asks. No fixture in between: the numbers come from the
//! scenario through NVML, attribution, the exposition, the adapter and the API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::node::{Killed, SimulatedNode, repo, wait_until};

fn kubectl(kubeconfig: &Path, path: &str) -> Option<serde_json::Value> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
    let out = Command::new(kubectl).arg("--kubeconfig").arg(kubeconfig).args(["get", "--raw", path]).output().unwrap();
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

fn values(list: &serde_json::Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["describedObject"]["name"].as_str().unwrap().into(), i["value"].as_str().unwrap().into()))
        .collect();
    v.sort();
    v
}

#[test]
fn the_seeds_hpa_questions_are_answered_from_the_simulated_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = SimulatedNode::start(&repo().join("fake-nvml/scenarios/seed-mixed-node.yaml"), "60");
    let exporter_port = node.exporter_port;

    let certs = dir.path().join("certs");
    let adapter_port = support::prometheus::Prometheus::reserve_port();
    let adapter = env!("CARGO_BIN_EXE_gpu-metrics-adapter");
    let status = Command::new(adapter)
        .args(["dev-certs", "--out"])
        .arg(&certs)
        .args(["--server", &format!("https://127.0.0.1:{adapter_port}")])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let _adapter = Killed(
        Command::new(adapter)
            .args(["--standalone", "--bind-address=127.0.0.1", &format!("--secure-port={adapter_port}")])
            .arg(format!("--tls-cert-file={}", certs.join("serving.pem").display()))
            .arg(format!("--tls-private-key-file={}", certs.join("serving-key.pem").display()))
            .arg(format!("--client-ca-file={}", certs.join("ca.pem").display()))
            .arg(format!("--exporter-url=http://127.0.0.1:{exporter_port}/metrics"))
            .arg("--scrape-interval=1s")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let kubeconfig = certs.join("kubeconfig");
    let pods = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/*/";
    let mut utilization = serde_json::Value::Null;
    wait_until("the inference pool's utilization through the adapter", || {
        match kubectl(&kubeconfig, &format!("{pods}gpu_utilization")) {
            Some(list) if list["items"].as_array().is_some_and(|i| i.len() == 8) => {
                utilization = list;
                true
            }
            _ => false,
        }
    });
    // Time-sliced GPUs: each replica gets its own process's SM utilization from the scenario.
    assert_eq!(
        values(&utilization),
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
    let memory = kubectl(&kubeconfig, &format!("{pods}gpu_memory_used_bytes")).unwrap();
    let bytes = |list: &serde_json::Value| -> Vec<(String, f64)> {
        values(list).into_iter().map(|(pod, v)| (pod, support::quantity(&v))).collect()
    };
    let memory = bytes(&memory);
    assert_eq!(memory.len(), 12, "{memory:?}");
    let llm = 36000.0 * 1024.0 * 1024.0;
    assert!(memory.contains(&("llm-inference-70b".into(), llm)), "{memory:?}");
    assert!(memory.contains(&("inference-pool-7d9f8b6c5-qp6tj".into(), 15250.0 * 1024.0 * 1024.0)), "{memory:?}");
    let narrowed =
        kubectl(&kubeconfig, &format!("{pods}gpu_memory_used_bytes?metricLabelSelector=mig_profile%3D3g.40gb"))
            .unwrap();
    assert_eq!(bytes(&narrowed), [("llm-inference-70b".to_string(), llm)]);
}
