//! The simulated GPU node, for end-to-end tests: fake-kubelet serves a fake-nvml
//! scenario's pod-resources socket, /proc and pod logs, and the real gpu-exporter binary
//! reads the scenario's GPUs through nvml-wrapper loading the fake library, exactly as it
//! loads libnvidia-ml.so.1 on a GPU node.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Builds the other binaries the simulated node runs (once they are built, this is a
/// no-op) and returns the directory holding them.
pub fn target_dir() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args(["build", "-p", "fake-nvml", "-p", "fake-kubelet", "-p", "gpu-exporter"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Path::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter")).parent().unwrap().to_path_buf()
}

/// A child process killed and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `ok` every 100 ms until it holds; fails after 60 s.
pub fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    wait_until_ok(what, || if ok() { Ok(()) } else { Err(String::new()) });
}

/// Polls `attempt` every 100 ms until it is `Ok`; fails after 60 s with the last error.
pub fn wait_until_ok<T>(what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "timed out waiting for {what}; last seen: {last}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// fake-kubelet and gpu-exporter running one scenario; both stop when this is dropped.
pub struct SimulatedNode {
    /// The exporter's port on 127.0.0.1 (`/metrics`).
    pub exporter_port: u16,
    // Drop order: the exporter, then the kubelet, then their files.
    _exporter: Killed,
    _kubelet: Killed,
    _dir: tempfile::TempDir,
}

impl SimulatedNode {
    /// Starts the node on `scenario` with the scenario clock frozen at `frozen_at`
    /// seconds; returns once the kubelet socket exists (the exporter may still be on its
    /// first collection: poll its output).
    pub fn start(scenario: &Path, frozen_at: &str) -> Self {
        Self::start_with(scenario, frozen_at, None)
    }

    /// As [`SimulatedNode::start`], with the exporter's pod and ResourceSlice watches on
    /// the API server `kubeconfig` names (node `test-node`) instead of no API.
    pub fn start_with(scenario: &Path, frozen_at: &str, kubeconfig: Option<&str>) -> Self {
        let target = target_dir();
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kubelet.sock");
        let kubelet = Killed(
            Command::new(target.join("fake-kubelet"))
                .arg("--scenario")
                .arg(scenario)
                .arg("--socket")
                .arg(&socket)
                .arg("--procfs")
                .arg(dir.path().join("proc"))
                .arg("--pod-logs")
                .arg(dir.path().join("pods"))
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_until("the kubelet socket", || socket.exists());

        let exporter_port = super::prometheus::Prometheus::reserve_port();
        let mut exporter = Command::new(target.join("gpu-exporter"))
            .arg("--nvml-library")
            .arg(target.join("libfake_nvml.so"))
            .args(["--web.listen-address", &format!("127.0.0.1:{exporter_port}"), "--collect-interval", "500ms"])
            .args(["--nvml.call-timeout", "200ms", "--health.enabled=false"])
            .args(match kubeconfig {
                Some(path) => {
                    vec!["--kubernetes.api", "auto", "--kubernetes.kubeconfig", path, "--node-name", "test-node"]
                }
                None => vec!["--kubernetes.api", "off"],
            })
            .arg("--kubelet.pod-resources-socket")
            .arg(&socket)
            .arg("--path.procfs")
            .arg(dir.path().join("proc"))
            .arg("--path.pod-logs")
            .arg(dir.path().join("pods"))
            .env("FAKE_NVML_SCENARIO", scenario)
            .env("FAKE_NVML_FROZEN_AT", frozen_at)
            .env("KUBECONFIG", "/nonexistent")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = exporter.stderr.take().unwrap();
        std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
        Self { exporter_port, _exporter: Killed(exporter), _kubelet: kubelet, _dir: dir }
    }

    /// The exporter's metrics URL.
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.exporter_port)
    }
}

/// The adapter binary, standalone (dev certificates, no API server), in front of one
/// exporter; it is asked through `kubectl get --raw` and stops when dropped.
pub struct StandaloneAdapter {
    pub kubeconfig: PathBuf,
    _process: Killed,
}

impl StandaloneAdapter {
    /// Writes dev certificates under `dir` and starts the adapter scraping `exporter_url`
    /// every second.
    pub fn start(dir: &Path, exporter_url: &str) -> StandaloneAdapter {
        let certs = dir.join("certs");
        let port = super::prometheus::Prometheus::reserve_port();
        let adapter = env!("CARGO_BIN_EXE_gpu-metrics-adapter");
        let status = Command::new(adapter)
            .args(["dev-certs", "--out"])
            .arg(&certs)
            .args(["--server", &format!("https://127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let process = Command::new(adapter)
            .args(["--standalone", "--bind-address=127.0.0.1", &format!("--secure-port={port}")])
            .arg(format!("--tls-cert-file={}", certs.join("serving.pem").display()))
            .arg(format!("--tls-private-key-file={}", certs.join("serving-key.pem").display()))
            .arg(format!("--client-ca-file={}", certs.join("ca.pem").display()))
            .arg(format!("--exporter-url={exporter_url}"))
            .arg("--scrape-interval=1s")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        StandaloneAdapter { kubeconfig: certs.join("kubeconfig"), _process: Killed(process) }
    }

    /// `kubectl get --raw path`, parsed; `None` when kubectl fails.
    pub fn get(&self, path: &str) -> Option<serde_json::Value> {
        let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["get", "--raw", path])
            .output()
            .unwrap();
        out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    /// The `(pod, value)` pairs of a MetricValueList at `path` once it names `pods` pods.
    pub fn wait_pods(&self, path: &str, pods: usize) -> Vec<(String, String)> {
        let mut answer = Vec::new();
        wait_until(&format!("{path} for {pods} pods"), || match self.get(path) {
            Some(list) if list["items"].as_array().is_some_and(|i| i.len() == pods) => {
                answer = pod_values(&list);
                true
            }
            _ => false,
        });
        answer
    }
}

/// `(described pod, value)` of each item of a MetricValueList, sorted.
pub fn pod_values(list: &serde_json::Value) -> Vec<(String, String)> {
    let mut values: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["describedObject"]["name"].as_str().unwrap().into(), i["value"].as_str().unwrap().into()))
        .collect();
    values.sort();
    values
}
