//! The seed's `inference-hpa` (deploy/examples/inference) as the real-cluster tests run
//! it on the real HPA controller: the test copy with short windows, what the controller's
//! formula must decide, and the Deployment and HPA as the API server has them. Shared by
//! the tests on fake-kubelet's joined nodes and on the real kubelet's.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::app_metrics::AppMetrics;
use crate::control_plane::ControlPlane;
use crate::joined::{Adapter, AdapterOptions};
use crate::prometheus::{Flavour, Launch, Prometheus};
use crate::simulated::{wait_until_ok, workspace};

/// The seed's targets.
pub const GPU_TARGET: f64 = 70.0;
pub const LATENCY_TARGET: f64 = 200.0;
/// The HPA controller's default tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub const TOLERANCE: f64 = 0.1;

/// The YAML documents of a file of the repository.
pub fn yaml_docs(path: &str) -> Vec<Value> {
    crate::deploy::parse_docs(&std::fs::read_to_string(workspace().join(path)).unwrap())
}

/// The seed's HPA with shorter windows: scale-up stabilization 0 s (seed 60), periods
/// 10 s (seed 120 and 300), scale-down stabilization 10 s (seed 300). Targets, bounds
/// and the policies' percentages are the seed's.
pub fn test_hpa() -> Value {
    let mut hpa = yaml_docs("deploy/examples/inference/inference-hpa.yaml").remove(0);
    let b = &mut hpa["spec"]["behavior"];
    assert_eq!(b["scaleUp"]["stabilizationWindowSeconds"], 60, "the seed's behaviour changed; update this copy");
    b["scaleUp"]["stabilizationWindowSeconds"] = json!(0);
    b["scaleUp"]["policies"][0]["periodSeconds"] = json!(10);
    b["scaleDown"]["stabilizationWindowSeconds"] = json!(10);
    b["scaleDown"]["policies"][0]["periodSeconds"] = json!(10);
    hpa
}

/// The seed HPA's second metric and the adapter: the pods' `request_latency_ms` page
/// (each Running `app=inference` pod at `latency_ms`), scraped by a real Prometheus 2 and
/// read by the adapter through the rules deploy/ ships; the adapter behind the aggregator.
pub fn latency_and_adapter(cp: &ControlPlane, latency_ms: f64) -> (AppMetrics, Prometheus, Adapter) {
    let app = AppMetrics::start(cp, "ai-inference", "app=inference", "request_latency_ms", latency_ms);
    let prometheus = Launch::new(Flavour::V2).interval("1s").scrape_honoring_labels("inference", &[app.addr]).start();
    let rules_doc = yaml_docs("deploy/components/prometheus-operator/adapter-prometheus-rules.yaml").remove(0);
    let rules = cp.dir.join("adapter-rules.yaml");
    std::fs::write(&rules, rules_doc["data"]["rules.yaml"].as_str().unwrap()).unwrap();
    let adapter = Adapter::start(
        cp,
        &AdapterOptions { prometheus: Some((prometheus.url(), rules)), ..AdapterOptions::default() },
    );
    (app, prometheus, adapter)
}

/// What the HPA controller must decide from `current` Ready replicas whose metrics
/// average `averages` (one per metric, with its target): per metric `current` within
/// the tolerance, else `ceil(current * average / target)`; the largest; at most what
/// the scale-up policy allows (`ceil(current * (1 + percent/100))`); within the bounds.
pub fn desired(current: u32, averages: &[(f64, f64)], up_percent: f64, min: u32, max: u32) -> u32 {
    let proposals = averages.iter().map(|(average, target)| {
        let ratio = average / target;
        if (1.0 - ratio).abs() <= TOLERANCE { current } else { (f64::from(current) * ratio).ceil() as u32 }
    });
    let wanted = proposals.max().unwrap();
    let up_limit = (f64::from(current) * (1.0 + up_percent / 100.0)).ceil() as u32;
    wanted.min(up_limit).clamp(min, max)
}

/// The HPA as the API server has it (`null` before it is created).
pub fn hpa_status(cp: &ControlPlane) -> Value {
    let out = cp.kubectl().args(["get", "hpa", "inference-hpa", "-n", "ai-inference", "-o", "json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The Deployment's `spec.replicas`.
pub fn replicas(cp: &ControlPlane) -> u32 {
    cp.run(&["get", "deployment", "inference-pool", "-n", "ai-inference", "-o", "jsonpath={.spec.replicas}"])
        .trim()
        .parse()
        .unwrap()
}

/// Waits until the Deployment has `n` replicas, all Running, and the HPA has seen them.
pub fn wait_for_replicas(cp: &ControlPlane, n: u32, timeout: Duration) {
    wait_until_ok(&format!("inference-pool at {n} replicas"), timeout, || {
        let now = replicas(cp);
        let status = hpa_status(cp);
        if now == n { Ok(()) } else { Err(format!("{now} replicas; HPA status {}", status["status"])) }
    });
    cp.wait_for(
        &format!("{n} inference pods Running"),
        timeout,
        &[
            "get",
            "pods",
            "-n",
            "ai-inference",
            "-l",
            "app=inference",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        |s| s.split_whitespace().count() == n as usize,
    );
}

/// Holds for `period`: the Deployment stays at `n`.
pub fn stays_at(cp: &ControlPlane, n: u32, period: Duration) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        let now = replicas(cp);
        assert_eq!(now, n, "the HPA moved inference-pool from {n} to {now}: {}", hpa_status(cp)["status"]);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A Kubernetes quantity as the HPA writes an average: `91`, `85500m`.
pub fn quantity(q: &str) -> f64 {
    match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().unwrap() / 1000.0,
        None => q.parse().unwrap(),
    }
}

/// The average the HPA last read for pods metric `metric` (`status.currentMetrics`).
pub fn read_average(status: &Value, metric: &str) -> Option<f64> {
    let m = status["currentMetrics"].as_array()?.iter().find(|m| m["pods"]["metric"]["name"] == metric)?;
    Some(quantity(m["pods"]["current"]["averageValue"].as_str()?))
}
