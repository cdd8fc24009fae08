//! The seed's `inference-hpa` on a node the real kubelet runs: `inference-pool` from
//! `deploy/examples` scheduled onto a simulated 8-GPU H100 node of `scripts/sim-node`
//! (the real kubelet v1.37.2, NVIDIA's device plugin on fake-nvml, sim-cri), each replica
//! given a whole GPU by the real kubelet. The exporter runs in place of the DaemonSet's pod
//! on that node and reads the real kubelet's pod-resources; the adapter finds it through
//! the `gpu-exporter` EndpointSlices and serves `gpu_utilization` per pod through the
//! aggregator; `request_latency_ms` comes through a real Prometheus as in `hpa.rs`.
//!
//! The load is a demand spread over the Running replicas: a thread of the test reads
//! which GPU the real kubelet gave each replica (its pod-resources) and sets those GPUs'
//! utilization in fake-nvml's live scenario to the demand over the replica count. The
//! test computes what the HPA's formula must give from what the HPA read and checks
//! where it settles: up when the load rises, down when it falls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_kubelet::client::PodResourcesClient;
use fake_nvml::scenario::Scenario;
use serde_json::json;
use test_support::control_plane::{ControlPlane, Options};
use test_support::joined::{NodeFiles, base_with_external_metrics, start_pod_exporter};
use test_support::seed_hpa::{
    GPU_TARGET, LATENCY_TARGET, desired, hpa_status, latency_and_adapter, read_average, stays_at, test_hpa,
    wait_for_replicas, yaml_docs,
};
use test_support::sim_node::{SimNode, SimNodeOptions};
use test_support::simulated::wait_until_ok;

const NODE: &str = "gpu-sim-1";
const GPUS: usize = 8;
/// What the pods' request_latency_ms reads.
const LATENCY_MS: f64 = 40.0;

fn eight_h100() -> String {
    let mut text = String::from("gpus:\n");
    for _ in 0..GPUS {
        text.push_str("  - {model: H100-SXM5-80GB}\n");
    }
    text
}

/// The node's scenario with each GPU's utilization (the others idle).
fn with_utilization(base: &Scenario, utilization: &BTreeMap<String, f64>) -> String {
    let mut text = String::from("gpus:\n");
    for gpu in &base.gpus {
        let u = utilization.get(&gpu.uuid).copied().unwrap_or(0.0);
        text.push_str(&format!("  - {{model: H100-SXM5-80GB, uuid: {}, values: {{utilization: {u:.1}}}}}\n", gpu.uuid));
    }
    text
}

/// Spreads `demand` over the inference replicas the real kubelet runs on the node, on
/// the GPUs it gave them, every 300 ms until dropped.
struct Load {
    demand: Arc<Mutex<f64>>,
    stop: Arc<AtomicBool>,
}

impl Load {
    fn start(node: &SimNode, base: Scenario, demand: f64) -> Load {
        let demand = Arc::new(Mutex::new(demand));
        let stop = Arc::new(AtomicBool::new(false));
        let (socket, scenario_file) = (node.pod_resources_socket(), node.scenario_file());
        let (d, s) = (Arc::clone(&demand), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut written = String::new();
            while !s.load(Ordering::Relaxed) {
                let pods = PodResourcesClient::connect(&socket).ok().and_then(|mut c| c.list().ok());
                let held: Vec<String> = pods
                    .into_iter()
                    .flatten()
                    .filter(|p| p.namespace == "ai-inference" && p.name.starts_with("inference-pool-"))
                    .flat_map(|p| p.containers)
                    .flat_map(|c| c.devices)
                    .flat_map(|d| d.device_ids)
                    .collect();
                let each = if held.is_empty() { 0.0 } else { *d.lock().unwrap() / held.len() as f64 };
                let utilization = held.into_iter().map(|uuid| (uuid, each.min(100.0))).collect();
                let text = with_utilization(&base, &utilization);
                if text != written {
                    let tmp = scenario_file.with_extension("load");
                    std::fs::write(&tmp, &text).unwrap();
                    std::fs::rename(&tmp, &scenario_file).unwrap();
                    written = text;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        Load { demand, stop }
    }

    fn set(&self, demand: f64) {
        *self.demand.lock().unwrap() = demand;
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn the_seeds_hpa_scales_on_the_per_pod_series_of_a_node_the_real_kubelet_runs() {
    let cp = ControlPlane::start_with(&Options { hpa_sync_period: Some("2s".into()), ..Options::default() });
    cp.apply(&base_with_external_metrics());
    let base_text = eight_h100();
    let node = SimNode::start(&cp, NODE, &base_text, &SimNodeOptions::default()).unwrap();
    // GPU feature discovery's label, which the exporter's DaemonSet selects nodes by.
    cp.run(&["label", "node", NODE, "nvidia.com/gpu.present=true"]);
    let base = Scenario::parse("node.yaml", &base_text).unwrap();
    // The uuids fake-nvml gave, written down so that the load keeps them.
    node.set_scenario(&with_utilization(&base, &BTreeMap::new()));
    let log = node.dir.join("exporter.log");
    let files = NodeFiles {
        socket: &node.pod_resources_socket(),
        scenario: &node.scenario_file(),
        procfs: None,
        pod_logs: None,
        log: &log,
    };
    let exporter = start_pod_exporter(&cp, NODE, &files, &[]);
    cp.wait_for_service_addresses("gpu-telemetry", "gpu-exporter", &[exporter.addr.ip().to_string()], true);

    let (_app, prometheus, adapter) = latency_and_adapter(&cp, LATENCY_MS);

    // The seed's pool, started at the HPA's minimum on the one GPU node, at its target.
    let hpa = test_hpa();
    let (min, max) =
        (hpa["spec"]["minReplicas"].as_u64().unwrap() as u32, hpa["spec"]["maxReplicas"].as_u64().unwrap() as u32);
    let up_percent = hpa["spec"]["behavior"]["scaleUp"]["policies"][0]["value"].as_f64().unwrap();
    let load = Load::start(&node, base.clone(), f64::from(min) * GPU_TARGET);
    let docs = yaml_docs("deploy/examples/namespaces.yaml");
    cp.apply(&serde_yaml_ng::to_string(&docs[0]).unwrap());
    let mut pool = yaml_docs("deploy/examples/inference/inference-pool.yaml").remove(0);
    assert_eq!(
        pool["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        json!(1),
        "the seed's replicas ask for one GPU each"
    );
    pool["spec"]["replicas"] = json!(min);
    cp.apply(&serde_json::to_string(&pool).unwrap());
    wait_for_replicas(&cp, min, Duration::from_secs(90));
    cp.apply(&serde_json::to_string(&hpa).unwrap());
    wait_until_ok("the HPA reads both metrics", Duration::from_secs(90), || {
        let s = hpa_status(&cp);
        match (read_average(&s["status"], "gpu_utilization"), read_average(&s["status"], "request_latency_ms")) {
            (Some(_), Some(_)) => Ok(()),
            _ => Err(format!("{}\nadapter: {}", s["status"], adapter.log_tail(10))),
        }
    });
    stays_at(&cp, min, Duration::from_secs(6));

    // Load rises to 91 % per replica: the HPA's decision, from what it read, and where it
    // settles within the node's eight GPUs.
    let demand = f64::from(min) * 91.0;
    load.set(demand);
    let decision = wait_until_ok("the HPA's scale-up decision", Duration::from_secs(90), || {
        let st = hpa_status(&cp)["status"].clone();
        if st["desiredReplicas"].as_u64().is_some_and(|d| d > u64::from(min)) { Ok(st) } else { Err(st.to_string()) }
    });
    let gpu = read_average(&decision, "gpu_utilization").unwrap();
    let latency = read_average(&decision, "request_latency_ms").unwrap();
    let up = desired(min, &[(gpu, GPU_TARGET), (latency, LATENCY_TARGET)], up_percent, min, max);
    assert_eq!(decision["desiredReplicas"], up, "from {gpu} % per replica: {decision}");
    let settles: Vec<u32> = (min..=max)
        .filter(|&n| {
            desired(n, &[(demand / f64::from(n), GPU_TARGET), (LATENCY_MS, LATENCY_TARGET)], up_percent, min, max) == n
        })
        .collect();
    assert!(settles.iter().all(|&n| n as usize <= GPUS), "{settles:?} fits the node's {GPUS} GPUs");
    let settled = wait_until_ok("inference-pool settled after the rise", Duration::from_secs(120), || {
        let st = hpa_status(&cp)["status"].clone();
        match st["currentReplicas"].as_u64().map(|n| n as u32) {
            Some(n) if settles.contains(&n) && st["desiredReplicas"] == n => Ok(n),
            _ => Err(format!("settles at {settles:?}: {st}")),
        }
    });
    assert!(settled > min, "scaled up from {min} to {settled}");
    wait_for_replicas(&cp, settled, Duration::from_secs(60));
    // Every replica Running on a GPU of its own, as the real kubelet's checkpoint says.
    let holders = wait_until_ok("each replica on its own GPU", Duration::from_secs(30), || {
        let pods = PodResourcesClient::connect(&node.pod_resources_socket()).unwrap().list().unwrap();
        let gpus: Vec<String> = pods
            .iter()
            .filter(|p| p.name.starts_with("inference-pool-"))
            .flat_map(|p| p.containers.iter().flat_map(|c| c.devices.iter().flat_map(|d| d.device_ids.clone())))
            .collect();
        let distinct: std::collections::BTreeSet<&String> = gpus.iter().collect();
        if gpus.len() == settled as usize && distinct.len() == gpus.len() { Ok(gpus) } else { Err(format!("{gpus:?}")) }
    });
    wait_until_ok("the HPA reads the spread demand", Duration::from_secs(30), || {
        let st = hpa_status(&cp)["status"].clone();
        let got = read_average(&st, "gpu_utilization").unwrap_or(f64::NAN);
        let want = demand / f64::from(settled);
        if (got - want).abs() < 1.0 { Ok(()) } else { Err(format!("read {got}, want {want:.1} on {holders:?}: {st}")) }
    });

    // Load falls to 30: the formula brings it back to the minimum.
    load.set(30.0);
    let down = desired(
        settled,
        &[(30.0 / f64::from(settled), GPU_TARGET), (LATENCY_MS, LATENCY_TARGET)],
        up_percent,
        min,
        max,
    );
    assert_eq!(down, min);
    wait_for_replicas(&cp, down, Duration::from_secs(150));
    stays_at(&cp, down, Duration::from_secs(6));
    drop(prometheus);
}
