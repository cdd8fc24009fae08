//! The seed's `inference-hpa` on the real HPA controller: `inference-pool` and
//! `inference-hpa` from `deploy/examples` on two simulated 8-GPU nodes (time-sliced,
//! four replicas per GPU as in the seed), `gpu_utilization` from the exporters through
//! the adapter's direct source, `request_latency_ms` from a real Prometheus through the
//! adapter's rules of `deploy/components/prometheus-operator`, both through the
//! aggregator. The test copy of the HPA shortens the behaviour's windows and periods
//! (the seed's 60 s / 300 s would make a test of many minutes) and says so in
//! [`hpa`]; everything else is as the seed wrote it.
//!
//! The load is a demand spread over the Ready replicas (fake-kubelet's `join::load`),
//! so the test computes what the HPA's formula must give (`desired = ceil(current *
//! average / target)` per metric, the largest wins, within the tolerance, the bounds
//! and the scale-up policy) and compares: up when the pods' utilization rises above 70,
//! down when it falls, and `ScalingActive=False` with the adapter's message, not a zero,
//! when the metrics are gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use test_support::control_plane::{ControlPlane, Options};
use test_support::joined::{JoinedFleet, NodeSpec, base_with_external_metrics};
use test_support::seed_hpa::{
    GPU_TARGET, LATENCY_TARGET, TOLERANCE, desired, hpa_status, latency_and_adapter, read_average, replicas, stays_at,
    test_hpa, wait_for_replicas, yaml_docs,
};
use test_support::simulated::wait_until_ok;

const EIGHT_H100: &str = "gpus:\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  \
                          - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - \
                          {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n";
/// What the pods' request_latency_ms reads.
const LATENCY_MS: f64 = 40.0;

fn set_demand(fleet: &JoinedFleet, demand: f64) {
    fleet.set_load(&format!(
        "workloads: [{{namespace: ai-inference, selector: {{app: inference}}, demand: {demand}, memory_used_mib: \
         15500}}]\n"
    ));
}

#[test]
fn the_seeds_hpa_scales_inference_pool_up_and_down_on_gpu_utilization() {
    let cp = ControlPlane::start_with(&Options { hpa_sync_period: Some("2s".into()), ..Options::default() });
    cp.apply(&base_with_external_metrics());
    let nodes: Vec<NodeSpec> = ["gpu-node-1", "gpu-node-2"]
        .iter()
        .map(|n| NodeSpec { name: (*n).into(), scenario: EIGHT_H100.into(), replicas: 4 })
        .collect();
    let mut fleet = JoinedFleet::join(&cp, &nodes);
    fleet.start_exporters(&cp, &[]);

    // request_latency_ms: the pods' page, scraped by a real Prometheus, read by the
    // adapter through the rules deploy/ ships.
    let (app, prometheus, adapter) = latency_and_adapter(&cp, LATENCY_MS);

    // The seed's workload: 8 replicas, 70 % each (a demand of 560), at its target.
    let docs = yaml_docs("deploy/examples/namespaces.yaml");
    cp.apply(&serde_yaml_ng::to_string(&docs[0]).unwrap());
    set_demand(&fleet, 8.0 * GPU_TARGET);
    let pool = yaml_docs("deploy/examples/inference/inference-pool.yaml").remove(0);
    cp.apply(&serde_json::to_string(&pool).unwrap());
    wait_for_replicas(&cp, 8, Duration::from_secs(90));
    let hpa = test_hpa();
    let (min, max) =
        (hpa["spec"]["minReplicas"].as_u64().unwrap() as u32, hpa["spec"]["maxReplicas"].as_u64().unwrap() as u32);
    let up_percent = hpa["spec"]["behavior"]["scaleUp"]["policies"][0]["value"].as_f64().unwrap();
    cp.apply(&serde_json::to_string(&hpa).unwrap());
    // Both metrics reach the HPA through the aggregator before anything moves.
    wait_until_ok("the HPA reads both metrics", Duration::from_secs(90), || {
        let s = hpa_status(&cp);
        let metrics = s["status"]["currentMetrics"].as_array().cloned().unwrap_or_default();
        let named: Vec<&str> = metrics.iter().filter_map(|m| m["pods"]["metric"]["name"].as_str()).collect();
        if named.contains(&"gpu_utilization") && named.contains(&"request_latency_ms") {
            Ok(())
        } else {
            Err(format!("{}\nadapter: {}", s["status"], adapter.log_tail(10)))
        }
    });
    assert_eq!(desired(8, &[(GPU_TARGET, GPU_TARGET), (LATENCY_MS, LATENCY_TARGET)], up_percent, min, max), 8);
    stays_at(&cp, 8, Duration::from_secs(8));

    // Load rises to 91 % per replica (a demand of 728). The HPA acts on the first
    // reading above the tolerance, which may catch one node's exporter before the
    // other's (each collects and is scraped on its own schedule), as in any cluster; so
    // the test takes the readings the HPA wrote with its decision and computes the
    // count from them, then checks where it settles: a count the formula keeps.
    let demand = 8.0 * 91.0;
    set_demand(&fleet, demand);
    let decision = wait_until_ok("the HPA's scale-up decision", Duration::from_secs(90), || {
        let s = hpa_status(&cp);
        let st = &s["status"];
        if st["desiredReplicas"].as_u64().is_some_and(|d| d > 8) && st["currentReplicas"] == 8 {
            Ok(st.clone())
        } else {
            Err(st.to_string())
        }
    });
    let read = |st: &Value, metric: &str| -> f64 { read_average(st, metric).unwrap() };
    let (gpu, latency) = (read(&decision, "gpu_utilization"), read(&decision, "request_latency_ms"));
    assert!(gpu > GPU_TARGET * (1.0 + TOLERANCE), "the decision read {gpu} % per replica: {decision}");
    let up = desired(8, &[(gpu, GPU_TARGET), (latency, LATENCY_TARGET)], up_percent, min, max);
    assert_eq!(decision["desiredReplicas"], up, "ceil(8 x {gpu} / 70), within the policy's +50 %: {decision}");
    // It settles where 728 spread over the replicas is within the tolerance of 70.
    let settles: Vec<u32> = (min..=max)
        .filter(|&n| {
            desired(n, &[(demand / f64::from(n), GPU_TARGET), (LATENCY_MS, LATENCY_TARGET)], up_percent, min, max) == n
        })
        .collect();
    assert_eq!(settles, [10, 11], "728 / 10 = 72.8 and 728 / 11 = 66.2 are within 10 % of 70");
    let settled = wait_until_ok("inference-pool settled after the rise", Duration::from_secs(120), || {
        let n = replicas(&cp);
        let st = hpa_status(&cp)["status"].clone();
        if settles.contains(&n) && st["desiredReplicas"] == n && st["currentReplicas"] == n {
            Ok(n)
        } else {
            Err(st.to_string())
        }
    });
    wait_for_replicas(&cp, settled, Duration::from_secs(60));
    stays_at(&cp, settled, Duration::from_secs(10));
    wait_until_ok("the HPA reads the spread demand", Duration::from_secs(30), || {
        let st = hpa_status(&cp)["status"].clone();
        let got = read(&st, "gpu_utilization");
        let want = demand / f64::from(settled);
        if (got - want).abs() < 1.0 { Ok(()) } else { Err(format!("read {got}, want {want:.1}: {st}")) }
    });

    // Load falls to 150: from any count the formula gives ceil(150 / 70) = 3, and 3
    // keeps itself (50 % each, ceil(3 x 50 / 70) = 3).
    set_demand(&fleet, 150.0);
    let down = (150.0_f64 / GPU_TARGET).ceil() as u32;
    for n in down..=settled {
        assert_eq!(
            desired(n, &[(150.0 / f64::from(n), GPU_TARGET), (LATENCY_MS, LATENCY_TARGET)], up_percent, min, max),
            down
        );
    }
    wait_for_replicas(&cp, down, Duration::from_secs(150));
    stays_at(&cp, down, Duration::from_secs(10));

    // The metrics go: the pods' page stops answering and the exporters stop. The HPA
    // says so (ScalingActive=False, with the adapter's message) and keeps the replicas
    // it has; nothing reads as a zero.
    app.stop();
    fleet.exporters.clear();
    let condition = wait_until_ok("ScalingActive=False", Duration::from_secs(120), || {
        let s = hpa_status(&cp);
        let c = s["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "ScalingActive").cloned())
            .unwrap_or_default();
        if c["status"] == "False" { Ok(c) } else { Err(c.to_string()) }
    });
    let message = condition["message"].as_str().unwrap();
    // The adapter's own words, through the aggregator and the HPA: why there is no value.
    assert!(message.contains("unable to get metric gpu_utilization"), "{condition}");
    assert!(message.contains("GPU exporters") && message.contains("has answered within --max-age"), "{condition}");
    assert_eq!(condition["reason"], "FailedGetPodsMetric", "{condition}");
    stays_at(&cp, down, Duration::from_secs(6));
    eprintln!("ScalingActive=False: {message}");
    drop(prometheus);
}
