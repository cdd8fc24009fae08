//! Bad input and faults, against the in-test API server with captured exporter pages (no
//! processes): every refusal names what was wrong and exits 2 before any request when the
//! command line alone says it can never work; exporters that hang, answer garbage, are not
//! running or are missing show as unknown with the reason, never as zero, and the command
//! returns within its `--timeout` however many hang.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use test_support::apiserver::{self, ADMIN_TOKEN, ApiServer, Backend};
use test_support::cluster::{self, EXPORTER_NAMESPACE};

/// The exporter's golden page of the seed's mixed node (run-dependent values are NaN).
fn seed_page(node: &str) -> String {
    let path = test_support::simulated::workspace().join("exporter/tests/golden/seed-mixed-node.prom");
    std::fs::read_to_string(path).unwrap().replace("node=\"test-node\"", &format!("node=\"{node}\""))
}

struct Fixture {
    api: ApiServer,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

/// An exporter on a node whose driver is not loaded (as `exporter/tests/faults.rs` sees it).
const NVML_DOWN: &str = "gpu_exporter_nvml_up{node=\"nvml-down\"} 0\ngpu_exporter_nvml_error_info{node=\"nvml-down\",error=\"driver_not_loaded\",message=\"Driver Not Loaded\"} 1\n";

/// `good` answers with a captured page; `hang-N` never answer; `garbage` answers a page
/// that does not parse; `pending` has its exporter pod pending; `bare` has none;
/// `nvml-down` answers without GPUs, NVML down.
fn fixture(hanging: usize) -> Fixture {
    let api = ApiServer::new();
    let mut names = vec!["good".to_string(), "garbage".into(), "pending".into(), "bare".into(), "nvml-down".into()];
    names.extend((0..hanging).map(|i| format!("hang-{i}")));
    for (i, name) in names.iter().enumerate() {
        api.add_node(cluster::gpu_node(name, "NVIDIA-A100-SXM4-80GB", 4, &[("nvidia.com/gpu", 4)]));
        if name == "bare" {
            continue;
        }
        let mut pod = cluster::exporter_pod(name, &format!("10.0.{i}.5"));
        if name == "pending" {
            pod.status.as_mut().unwrap().phase = Some("Pending".into());
        }
        api.add_pod(pod);
        let backend = match name.as_str() {
            "good" => Backend::page(seed_page(name)),
            "garbage" => Backend::page("<html>oops</html>"),
            "nvml-down" => Backend::page(NVML_DOWN),
            _ => Backend::Hang,
        };
        api.proxy(EXPORTER_NAMESPACE, &format!("gpu-exporter-{name}"), backend);
    }
    api.add_node(cluster::cpu_node("cpu-node-1"));
    let addr = api.start();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = apiserver::kubeconfig(
        dir.path(),
        addr,
        &[("admin", ADMIN_TOKEN, "default"), ("stranger", "wrong-token", "default")],
    );
    Fixture { api, addr, kubeconfig, _dir: dir }
}

struct Run {
    stdout: String,
    stderr: String,
    code: i32,
    took: Duration,
}

fn run_with(kubeconfig: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-gpu"));
    c.env_clear().env("KUBECONFIG", kubeconfig).env("HOME", "/nonexistent").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let started = Instant::now();
    let out = c.output().unwrap();
    Run {
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        code: out.status.code().unwrap_or(-1),
        took: started.elapsed(),
    }
}

impl Fixture {
    fn run(&self, args: &[&str]) -> Run {
        run_with(&self.kubeconfig, &[], args)
    }
}

#[test]
fn hanging_garbage_pending_and_missing_exporters_are_unknown_within_the_timeout() {
    let f = fixture(3);
    let r = f.run(&["nodes", "--timeout", "2s", "--exporter-timeout", "1s"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.took < Duration::from_millis(2500), "took {:?}", r.took);
    let row = |node: &str| {
        r.stdout.lines().find(|l| l.starts_with(node)).unwrap_or_else(|| panic!("{node}: {}", r.stdout)).to_string()
    };
    assert!(
        row("good ").contains("4× A100-SXM4-80GB") && row("good ").contains("0:2×3g.40gb 1:7×1g.10gb"),
        "{}",
        r.stdout
    );
    for node in ["garbage", "pending", "bare", "nvml-down", "hang-0", "hang-2"] {
        assert!(row(node).contains("unknown") && !row(node).contains(" 0%"), "{node}: {}", row(node));
    }
    assert!(!r.stdout.contains("cpu-node-1"), "a node without GPUs is not a GPU node");
    for (node, why) in [
        (
            "garbage",
            "exporter bad page (pod gpu-telemetry/gpu-exporter-garbage: the exporter's page does not parse: line 1",
        ),
        ("pending", "exporter exporter not running (pod gpu-telemetry/gpu-exporter-pending is Pending)"),
        (
            "bare",
            "exporter no exporter pod (no pod app.kubernetes.io/name=gpu-exporter in namespace gpu-telemetry on this node)",
        ),
        ("hang-1", "exporter timed out (no answer from pod gpu-telemetry/gpu-exporter-hang-1 within 1s)"),
        ("nvml-down", "exporter NVML down (Driver Not Loaded)"),
    ] {
        assert!(r.stderr.contains(&format!("Warning: node {node}: {why}")), "{node}: {}", r.stderr);
    }
    let json = f.run(&["nodes", "--timeout", "2s", "--exporter-timeout", "1s", "-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let hang = doc["items"].as_array().unwrap().iter().find(|i| i["name"] == "hang-0").unwrap();
    assert_eq!(hang["exporter"]["reason"], "timeout");
    assert_eq!(hang["gpus"], serde_json::Value::Null, "unknown, not an empty list");
}

#[test]
fn the_command_returns_by_its_deadline_however_many_exporters_hang() {
    // 40 hanging exporters, 4 reads at a time, 1s each: 10 rounds would take 10s; the
    // 2s deadline cuts them short.
    let f = fixture(40);
    let r = f.run(&["nodes", "--timeout", "2s", "--exporter-timeout", "1s", "--concurrency", "4"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.took < Duration::from_millis(2800), "took {:?}", r.took);
    assert!(
        r.stderr.contains("exporter timed out (the command's --timeout passed before this exporter was read)"),
        "{}",
        r.stderr
    );
    let proxied = f.api.requests().iter().filter(|r| r.path.contains("/proxy/")).count();
    assert!(proxied <= 12, "reads started after the deadline: {proxied}");
}

#[test]
fn command_lines_that_can_never_work_are_refused_before_any_request() {
    let f = fixture(0);
    f.api.clear_requests();
    for (args, wanted) in [
        (
            &["nodes", "--sort-by", "bogus"][..],
            "--sort-by \"bogus\": no such column; columns are node, gpus, mig, util, memory, power, hottest, health, exporter, ready",
        ),
        (&["cost", "--sort-by=-pod"], "--sort-by \"pod\": no such column"),
        (&["cost", "--price", "H100"], "--price \"H100\": expected NAME=DOLLARS"),
        (&["cost", "--price", "H100=-1"], "--price \"H100=-1\": expected NAME=DOLLARS"),
        (&["nodes", "--prices-configmap", "gpu-prices"], "--prices-configmap \"gpu-prices\": expected NAMESPACE/NAME"),
        (
            &["nodes", "--exporter-timeout", "30s", "--timeout", "5s"],
            "--exporter-timeout 30s is longer than --timeout 5s",
        ),
        (&["pods", "-A", "--source", "custom-metrics"], "--source custom-metrics reads one namespace"),
        (&["nodes", "-o", "table"], "invalid value 'table' for '--output <OUTPUT>'"),
        (
            &["nodes", "--timeout", "0s"],
            "0s is outside the valid range 1s to 10m (flag --timeout, variable KUBECTL_GPU_TIMEOUT)",
        ),
        (&["nodes", "--interval", "10"], "invalid value '10' for '--interval <INTERVAL>'"),
        (&["cost", "--idle-below", "150"], "150 is outside the valid range 0 to 100"),
        (&["cost", "--by", "team"], "invalid value 'team' for '--by <BY>'"),
    ] {
        let r = f.run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(wanted), "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}");
    }
    let r = run_with(&f.kubeconfig, &[("KUBECTL_GPU_CONCURRENCY", "0")], &["nodes"]);
    assert!(r.code == 2 && r.stderr.contains("(flag --concurrency, variable KUBECTL_GPU_CONCURRENCY)"), "{}", r.stderr);
    assert!(f.api.requests().is_empty(), "refused flags sent {:?}", f.api.requests());
}

#[test]
fn cluster_errors_name_what_was_wrong() {
    let f = fixture(0);
    let missing = std::path::Path::new("/nonexistent/kubeconfig");
    let r = run_with(missing, &[], &["nodes"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("error: ") && r.stderr.contains("/nonexistent/kubeconfig"), "{}", r.stderr);
    let r = f.run(&["nodes", "--kubeconfig", "/nonexistent/other"]);
    assert!(r.code == 1 && r.stderr.contains("kubeconfig /nonexistent/other: "), "{}", r.stderr);
    let r = f.run(&["nodes", "--context", "nope"]);
    assert!(r.code == 1 && r.stderr.contains("nope"), "{}", r.stderr);
    let r = f.run(&["gpus", "no-such-node"]);
    assert!(r.code == 1 && r.stderr.contains("error: node \"no-such-node\" not found"), "{}", r.stderr);
    let r = f.run(&["gpus", "cpu-node-1"]);
    assert!(r.code == 1 && r.stderr.contains("error: node \"cpu-node-1\" has no GPUs"), "{}", r.stderr);
    let r = f.run(&["nodes", "--context", "stranger"]);
    assert!(
        r.code == 1 && r.stderr.contains("listing nodes: Error from server (Unauthorized): Unauthorized"),
        "{}",
        r.stderr
    );
    // Nothing listens: refused at once, not at the deadline.
    let dead = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let kubeconfig = apiserver::kubeconfig(dead.path(), closed, &[("admin", ADMIN_TOKEN, "default")]);
    let r = run_with(&kubeconfig, &[], &["nodes", "--timeout", "5s"]);
    assert!(r.code == 1 && r.stderr.contains("listing nodes: "), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(4), "{:?}", r.took);
    let _ = f.addr;
}

#[test]
fn an_api_server_that_never_answers_is_an_error_at_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts every connection and never answers.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = apiserver::kubeconfig(dir.path(), addr, &[("admin", ADMIN_TOKEN, "default")]);
    let r = run_with(&kubeconfig, &[], &["nodes", "--timeout", "1s", "--exporter-timeout", "500ms"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("error: the API server did not answer within --timeout 1s"), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(3), "{:?}", r.took);
}

fn prices(f: &Fixture, data: Option<&str>) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("gpu-prices".into()),
            namespace: Some("gpu-telemetry".into()),
            ..ObjectMeta::default()
        },
        data: data.map(|d| [("prices.yaml".to_string(), d.to_string())].into()),
        ..ConfigMap::default()
    };
    f.api.add_config_map(cm);
}

#[test]
fn the_prices_config_map_overrides_the_defaults_and_a_bad_one_is_refused() {
    let f = fixture(0);
    let r = f.run(&["cost", "--by", "node", "--timeout", "2s", "--exporter-timeout", "1s"]);
    assert!(r.stdout.lines().any(|l| l.starts_with("good ") && l.contains("$14.00/h")), "{}", r.stdout);
    prices(&f, Some("models:\n  - {name: A100, dollars_per_hour: 2}\n"));
    let r = f.run(&["cost", "--by", "node", "--timeout", "2s", "--exporter-timeout", "1s", "-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let good = doc["items"].as_array().unwrap().iter().find(|i| i["node"] == "good").unwrap();
    assert_eq!(good["capacity"]["dollarsPerHour"], 8, "4 A100s at the ConfigMap's $2");
    let a100 = doc["prices"].as_array().unwrap().iter().find(|p| p["name"] == "A100").unwrap();
    assert_eq!(a100["from"], "ConfigMap gpu-telemetry/gpu-prices, key prices.yaml");
    let r = f.run(&[
        "cost",
        "--by",
        "node",
        "--price",
        "A100=3",
        "-o",
        "json",
        "--timeout",
        "2s",
        "--exporter-timeout",
        "1s",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["totals"]["capacity"]["dollarsPerHour"], 12, "the flag wins over the ConfigMap");
    for (data, wanted) in [
        (
            Some("models:\n  - {name: A100, dollars_per_hour: -2}\n"),
            "ConfigMap gpu-telemetry/gpu-prices, key prices.yaml: model \"A100\": -2 is not a price",
        ),
        (Some("models: [oops"), "ConfigMap gpu-telemetry/gpu-prices, key prices.yaml: "),
        (Some("models:\n  - {name: B200, dollars_per_hour: 8}\n"), "model \"B200\" has no match"),
        (None, "ConfigMap gpu-telemetry/gpu-prices: has no key prices.yaml"),
    ] {
        prices(&f, data);
        let r = f.run(&["cost", "--timeout", "2s", "--exporter-timeout", "1s"]);
        assert_eq!(r.code, 1, "{data:?}: {}", r.stderr);
        assert!(r.stderr.contains(wanted), "{data:?}: {}", r.stderr);
    }
}

#[test]
fn pods_fall_back_to_the_exporters_when_the_custom_metrics_api_is_not_served() {
    let f = fixture(0);
    f.api.add_pod(cluster::gpu_pod("ai", "runner", Some("good"), "Running", &[("nvidia.com/gpu", 1)]));
    let r = f.run(&["pods", "-n", "ai", "--timeout", "2s", "--exporter-timeout", "1s"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "reading gpu_utilization of pods in ai from the custom metrics API: Error from server (NotFound)"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("reading the exporters of the namespace's nodes instead"), "{}", r.stderr);
    assert!(r.stdout.contains("runner") && r.stdout.contains("not attributed"), "{}", r.stdout);
    let proxied: Vec<String> =
        f.api.requests().iter().filter(|r| r.path.contains("/proxy/")).map(|r| r.path.clone()).collect();
    assert_eq!(
        proxied,
        ["/api/v1/namespaces/gpu-telemetry/pods/gpu-exporter-good:9400/proxy/metrics"],
        "only the node the namespace runs on"
    );
    let r = f.run(&["pods", "-n", "ai", "--source", "custom-metrics"]);
    assert!(r.code == 1 && r.stderr.contains("custom metrics API: Error from server (NotFound)"), "{}", r.stderr);
}
