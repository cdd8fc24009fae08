//! `kubectl gpu rightsize -A` over 10,000 GPU pods, end to end: the release binary, the
//! in-test API server listing 1,250 nodes and the 10,000 pods (Deployments of 8, on
//! whole A100s, on 1g.10gb/3g.40gb instances and on time-sliced L40S GPUs), and a stub
//! Prometheus behind its services proxy that answers each of the command's eight
//! queries with the full selection's vector (10,000+ series of the exporter's labels),
//! so what is measured is the plugin: the pod list, the answers' transfer, parsing, the
//! join, the recommendations and the table.
//!
//! Prints figures; asserts nothing. `cargo bench -p kubectl-gpu --bench rightsize`
//! (`docs/benchmarks.md`, "kubectl gpu rightsize over 10,000 pods").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use test_support::apiserver::{self, ADMIN_TOKEN, ApiServer, Backend};
use test_support::cluster;

const PODS: usize = 10_000;
const PER_NODE: usize = 8;
const RUNS: usize = 5;

struct PodSpec {
    ns: String,
    name: String,
    node: String,
    uuid: String,
    model: &'static str,
    mig: Option<&'static str>,
}

fn specs() -> Vec<PodSpec> {
    (0..PODS)
        .map(|i| {
            let node = i / PER_NODE;
            let (model, mig) = match node % 4 {
                0 => ("NVIDIA A100-SXM4-80GB", None),
                1 => ("NVIDIA A100-SXM4-80GB", Some(if i % 2 == 0 { "1g.10gb" } else { "3g.40gb" })),
                2 => ("NVIDIA L40S", None),
                _ => ("NVIDIA H100 80GB HBM3", None),
            };
            // L40S: four pods per GPU, time-sliced.
            let gpu = if node % 4 == 2 { (i % PER_NODE) / 4 } else { i % PER_NODE };
            PodSpec {
                ns: format!("team-{}", i / 1000),
                name: format!("app-{}-7f6b9c8d5-{i:05}", i / PER_NODE),
                node: format!("gpu-node-{node:04}"),
                uuid: format!("GPU-{node:04}-{gpu}"),
                model,
                mig,
            }
        })
        .collect()
}

fn vector(samples: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = samples.collect();
    format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#, v.join(","))
}

/// The stub's answers, by what the query asks.
fn answers(specs: &[PodSpec], now: f64) -> Vec<(&'static str, Arc<String>)> {
    let device = |s: &PodSpec, v: f64| {
        let mig = s.mig.map(|p| format!(r#","mig_profile":"{p}","gpu_instance_id":"1""#)).unwrap_or_default();
        format!(
            r#"{{"metric":{{"namespace":"{}","pod":"{}","node":"{}","uuid":"{}","model":"{}"{mig}}},"value":[{now},"{v}"]}}"#,
            s.ns, s.name, s.node, s.uuid, s.model
        )
    };
    let pod = |s: &PodSpec, v: f64| {
        format!(r#"{{"metric":{{"namespace":"{}","pod":"{}"}},"value":[{now},"{v}"]}}"#, s.ns, s.name)
    };
    let mut holders: std::collections::BTreeMap<&str, u32> = Default::default();
    for s in specs.iter().filter(|s| s.mig.is_none()) {
        *holders.entry(&s.uuid).or_default() += 1;
    }
    vec![
        ("timestamp(pod_device", Arc::new(vector(std::iter::empty()))),
        ("timestamp(gpu_pod", Arc::new(vector(specs.iter().map(|s| pod(s, now - 8.0 * 86_400.0))))),
        ("max_over_time(gpu_pod", Arc::new(vector(specs.iter().map(|s| device(s, 6.0e9))))),
        ("quantile_over_time(0.95, gpu_pod_memory", Arc::new(vector(specs.iter().map(|s| device(s, 5.0e9))))),
        ("quantile_over_time(0.95, gpu_pod_utilization", Arc::new(vector(specs.iter().map(|s| device(s, 9.0))))),
        (
            "count by (uuid)",
            Arc::new(vector(
                holders.iter().map(|(u, n)| format!(r#"{{"metric":{{"uuid":"{u}"}},"value":[{now},"{n}"]}}"#)),
            )),
        ),
        ("restarts_total", Arc::new(vector(specs.iter().map(|s| pod(s, 0.0))))),
        ("last_terminated_reason", Arc::new(vector(std::iter::empty()))),
    ]
}

/// A stub Prometheus: one thread per connection, answers picked by the query's text.
fn stub(answers: Vec<(&'static str, Arc<String>)>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let answers = answers.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                reader.read_line(&mut line).unwrap();
                let mut header = String::new();
                while reader.read_line(&mut header).unwrap() > 2 {
                    header.clear();
                }
                let path = line.split(' ').nth(1).unwrap_or_default();
                let query: String = form_urlencoded::parse(path.split_once('?').map_or("", |p| p.1).as_bytes())
                    .find(|(k, _)| k == "query")
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                let body = answers
                    .iter()
                    .find(|(k, _)| query.contains(k))
                    .map_or_else(|| Arc::new(vector(std::iter::empty())), |(_, b)| b.clone());
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            });
        }
    });
    addr
}

fn main() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let specs = specs();
    let api = ApiServer::new();
    for n in 0..PODS / PER_NODE {
        let (product, count) = match n % 4 {
            0 | 1 => ("NVIDIA-A100-SXM4-80GB", 8),
            2 => ("NVIDIA-L40S", 2),
            _ => ("NVIDIA-H100-80GB-HBM3", 8),
        };
        api.add_node(cluster::gpu_node(&format!("gpu-node-{n:04}"), product, count, &[("nvidia.com/gpu", count)]));
    }
    for s in &specs {
        let resource = s.mig.map_or_else(|| "nvidia.com/gpu".to_string(), |p| format!("nvidia.com/mig-{p}"));
        let mut pod = cluster::gpu_pod(&s.ns, &s.name, Some(&s.node), "Running", &[(&resource, 1)]);
        let rs = s.name.rsplit_once('-').unwrap().0.to_string();
        pod.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: rs,
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        pod.metadata.labels = Some([("pod-template-hash".to_string(), "7f6b9c8d5".to_string())].into());
        api.add_pod(pod);
    }
    api.service_proxy("monitoring", "prometheus", Backend::Http(stub(answers(&specs, now))));
    let addr = api.start();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = apiserver::kubeconfig(dir.path(), addr, &[("admin", ADMIN_TOKEN, "default")]);
    let args = ["rightsize", "-A", "--prometheus-service", "monitoring/prometheus:9090", "--timeout", "60s"];
    let mut times: Vec<Duration> = Vec::new();
    let mut rows = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        let out =
            Command::new(env!("CARGO_BIN_EXE_kubectl-gpu")).env("KUBECONFIG", &kubeconfig).args(args).output().unwrap();
        times.push(started.elapsed());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        rows = String::from_utf8_lossy(&out.stdout).lines().count();
    }
    times.sort();
    println!(
        "kubectl gpu {}: {PODS} pods, {rows} lines; min {:.2} s, median {:.2} s, max {:.2} s over {RUNS} runs",
        args.join(" "),
        times[0].as_secs_f64(),
        times[RUNS / 2].as_secs_f64(),
        times[RUNS - 1].as_secs_f64()
    );
}
