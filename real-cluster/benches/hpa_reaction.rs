//! How long the real HPA controller takes to act on a load step, with Kubernetes' and
//! `deploy/`'s default intervals, through the adapter's two sources side by side:
//! - direct: the exporters (`--collect-interval=5s`, the DaemonSet's) scraped by the
//!   adapter (`--scrape-interval=15s`, the Deployment's);
//! - Prometheus: the same exporters scraped by a Prometheus every 15 s (the seed's
//!   interval), read by the adapter through a rule.
//!
//! Two Deployments of 4 replicas on one simulated 8-GPU node (time-sliced, 4 replicas
//! per GPU), each with an HPA (min 4, max 8, 70 % average), one on each source; the load
//! steps both from 60 % to 95 % per replica at once, and the time to each HPA's
//! `desiredReplicas` rising is printed. The HPA controller syncs every 15 s (its
//! default). Run: `cargo bench -p real-cluster --bench hpa_reaction` (as root; about 5
//! minutes; `BENCH_TRIALS=N`, default 5).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use test_support::control_plane::ControlPlane;
use test_support::joined::{Adapter, AdapterOptions, JoinedFleet, NodeSpec, base};
use test_support::prometheus::{Flavour, Launch};
use test_support::simulated::wait_until_ok;

const NODE: &str = "gpu-node-1";
const EIGHT_H100: &str = "gpus:\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  \
                          - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n  - \
                          {model: H100-SXM5-80GB}\n  - {model: H100-SXM5-80GB}\n";
/// The adapter rule that serves the exporters' per-pod utilization from Prometheus.
const RULES: &str = r#"rules:
- seriesQuery: 'gpu_pod_utilization{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name: {matches: "^gpu_pod_utilization$", as: "gpu_utilization_prom"}
  metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"#;
const SOURCES: [(&str, &str); 2] = [("direct", "gpu_utilization"), ("prometheus", "gpu_utilization_prom")];

/// The Deployment `app`: 4 replicas of one time-sliced GPU each.
fn deployment(app: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: bench}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec:
      containers: [{{name: inference, image: vllm/vllm-openai:latest, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
"#
    )
}

/// The HPA of `app` on `metric`: 4 to 8 replicas, 70 % on average.
fn hpa(app: &str, metric: &str) -> String {
    format!(
        r#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {app}, namespace: bench}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {app}}}
  minReplicas: 4
  maxReplicas: 8
  metrics:
    - type: Pods
      pods: {{metric: {{name: {metric}}}, target: {{type: AverageValue, averageValue: "70"}}}}
"#
    )
}

fn load(names: &[(String, &str)], per_pod: f64) -> String {
    let demand = 4.0 * per_pod;
    let lines: Vec<String> = names
        .iter()
        .map(|(app, _)| format!("  - {{namespace: bench, selector: {{app: {app}}}, demand: {demand}}}"))
        .collect();
    format!("workloads:\n{}\n", lines.join("\n"))
}

fn desired(cp: &ControlPlane, app: &str) -> Option<u64> {
    let out = cp
        .kubectl()
        .args(["get", "hpa", app, "-n", "bench", "-o", "jsonpath={.status.desiredReplicas}"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn main() {
    let trials: usize = std::env::var("BENCH_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(5);
    let cp = ControlPlane::start();
    cp.apply(&base());
    let mut fleet = JoinedFleet::join(&cp, &[NodeSpec { name: NODE.into(), scenario: EIGHT_H100.into(), replicas: 4 }]);
    fleet.start_exporters(&cp, &["--collect-interval", "5s"]);
    let targets: Vec<String> = fleet.exporters.iter().map(|e| e.addr.to_string()).collect();
    let prometheus = Launch::new(Flavour::V2).interval("15s").scrape_honoring_labels("gpu-exporter", &targets).start();
    let rules = cp.dir.join("bench-rules.yaml");
    std::fs::write(&rules, RULES).unwrap();
    let _adapter = Adapter::start(
        &cp,
        &AdapterOptions {
            prometheus: Some((prometheus.url(), rules)),
            scrape_interval: Some("15s".into()),
            args: vec![],
        },
    );
    cp.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: bench}\n");
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); SOURCES.len()];
    for trial in 0..trials {
        // Fresh Deployments and HPAs each trial (the last trial's are deleted first):
        // no scale-down window of the last trial's HPA stands in the way.
        let names: Vec<(String, &str)> =
            SOURCES.iter().map(|(app, metric)| (format!("{app}-{trial}"), *metric)).collect();
        if trial > 0 {
            for (app, _) in SOURCES {
                let old = format!("{app}-{}", trial - 1);
                cp.run(&["delete", "hpa,deployment", &old, "-n", "bench", "--wait"]);
            }
        }
        fleet.set_load(&load(&names, 60.0));
        for (app, metric) in &names {
            cp.apply(&deployment(app));
            cp.apply(&hpa(app, metric));
        }
        // Both HPAs read their metric and keep 4 (60 % is under 70).
        for (app, metric) in &names {
            wait_until_ok(&format!("{app}: the HPA reads {metric}"), Duration::from_secs(180), || {
                let out = cp.run(&[
                    "get",
                    "hpa",
                    app,
                    "-n",
                    "bench",
                    "-o",
                    "jsonpath={.status.currentMetrics[0].pods.current.averageValue}",
                ]);
                if out.trim() == "60" { Ok(()) } else { Err(out) }
            });
        }
        // The step lands anywhere in the HPA's 15 s sync cycle (the wait above ends at a
        // sync): without this every trial would measure the same phase.
        // The clock's milliseconds, times 15: 0 to 15 s.
        let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_millis();
        std::thread::sleep(Duration::from_millis(u64::from(millis) * 15));
        fleet.set_load(&load(&names, 95.0));
        let step = Instant::now();
        let mut left: Vec<usize> = (0..SOURCES.len()).collect();
        while !left.is_empty() {
            assert!(step.elapsed() < Duration::from_secs(180), "no scale-up within 3 minutes");
            left.retain(|&i| {
                let acted = desired(&cp, &names[i].0).is_some_and(|d| d > 4);
                if acted {
                    times[i].push(step.elapsed().as_secs_f64());
                }
                !acted
            });
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("trial {}: direct {:.1} s, prometheus {:.1} s", trial + 1, times[0][trial], times[1][trial]);
    }
    println!("load step to the HPA's scale-up decision, {trials} trials (HPA sync 15 s, exporter 5 s):");
    for (i, (source, _)) in SOURCES.iter().enumerate() {
        let mut t = times[i].clone();
        t.sort_by(f64::total_cmp);
        println!(
            "  {source:<10} min {:.1} s  median {:.1} s  max {:.1} s  ({})",
            t[0],
            t[t.len() / 2],
            t[t.len() - 1],
            if i == 0 { "adapter scrapes every 15 s" } else { "Prometheus scrapes every 15 s" }
        );
    }
}
