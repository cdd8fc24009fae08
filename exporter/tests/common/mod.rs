//! Shared by the end-to-end tests: the simulated NVML library, the exporter binary as
//! a child process on a loopback port, and a small blocking HTTP client.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The built `libfake_nvml.so`, building it first if needed (once per test binary).
pub fn fake_library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = Command::new(env!("CARGO"))
                .args(["build", "-p", "fake-nvml", "--lib"])
                .current_dir(repo_root())
                .output()
                .expect("cargo runs");
            assert!(out.status.success(), "building fake-nvml failed: {}", String::from_utf8_lossy(&out.stderr));
            let exe = std::env::current_exe().unwrap();
            let target = exe.parent().and_then(Path::parent).unwrap();
            let lib = target.join("libfake_nvml.so");
            assert!(lib.exists(), "{} missing after the build", lib.display());
            lib
        })
        .clone()
}

/// A shipped scenario under `fake-nvml/scenarios/`.
pub fn shipped_scenario(name: &str) -> PathBuf {
    repo_root().join("fake-nvml/scenarios").join(format!("{name}.yaml"))
}

/// Writes a scenario into a temporary directory.
pub fn write_scenario(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Sets the scenario time a clocked exporter reads (`FAKE_NVML_CLOCK_FILE`).
pub fn set_clock(path: &Path, t: f64) {
    std::fs::write(path, t.to_string()).unwrap();
}

/// Collection every 300 ms with a 250 ms deadline per NVML call: a clocked test's
/// steps show within a second.
pub const QUICK_CYCLES: &[&str] = &["--collect-interval", "300ms", "--nvml.call-timeout", "250ms"];

/// The exporter on `scenario` with `args`, ready, its scenario time read from a file the
/// test steps with [`set_clock`], starting at `start`; the directory holds both files.
pub fn clocked(scenario: &str, start: f64, args: &[&str]) -> (tempfile::TempDir, PathBuf, Exporter) {
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("clock");
    set_clock(&clock, start);
    let scenario = write_scenario(dir.path(), "node.yaml", scenario);
    let exporter =
        Launch::scenario(&scenario, None).env("FAKE_NVML_CLOCK_FILE", clock.to_str().unwrap()).args(args).start();
    exporter.wait_ready();
    (dir, clock, exporter)
}

/// A running exporter; killed when dropped.
pub struct Exporter {
    child: Child,
    pub address: String,
    logs: Arc<Mutex<String>>,
}

/// How to start the exporter.
pub struct Launch {
    pub library: PathBuf,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
}

impl Launch {
    /// The simulated node `scenario`, with time frozen at `frozen_at` seconds if given.
    pub fn scenario(scenario: &Path, frozen_at: Option<f64>) -> Self {
        let mut env = vec![("FAKE_NVML_SCENARIO".to_string(), scenario.display().to_string())];
        if let Some(t) = frozen_at {
            env.push(("FAKE_NVML_FROZEN_AT".into(), t.to_string()));
        }
        Launch { library: fake_library(), env, args: Vec::new() }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Starts the binary and waits until it listens.
    pub fn start(self) -> Exporter {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"));
        command
            .arg("--nvml-library")
            .arg(&self.library)
            .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--node-name", "test-node"])
            .args(&self.args)
            .env_remove("NODE_NAME")
            // Never reach a real cluster from a test; tests that want an API server set their own.
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            // Tests that want the pod watch set this (or --kubernetes.kubeconfig) themselves.
            .env("GPU_EXPORTER_KUBERNETES_API", "off");
        for (k, v) in &self.env {
            command.env(k, v);
        }
        spawn(command)
    }
}

/// Starts an exporter command (with `--log.format json` and a listen address among its
/// arguments) and waits until it listens; its stderr is kept for assertions.
pub fn spawn(mut command: Command) -> Exporter {
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("exporter starts");
    let stderr = child.stderr.take().unwrap();
    let logs = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = logs.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("\"address\":\"").nth(1) {
                let _ = tx.send(rest.split('"').next().unwrap_or_default().to_string());
            }
            let mut logs = sink.lock().unwrap();
            logs.push_str(&line);
            logs.push('\n');
        }
    });
    let address = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(a) => a,
        Err(_) => {
            let _ = child.kill();
            panic!("exporter did not start listening; logs:\n{}", logs.lock().unwrap());
        }
    };
    Exporter { child, address, logs }
}

impl Exporter {
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(&self.address, path, headers)
    }

    /// The first sample of `name` with all of `labels`, from a fresh scrape.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        sample(&self.metrics(), name, labels)
    }

    /// The text exposition, after checking the status.
    pub fn metrics(&self) -> String {
        let r = self.get("/metrics", &[]);
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// Scrapes until `check` holds for a scrape (30 s at most) and returns that scrape;
    /// on timeout fails with the last scrape and the logs.
    pub fn wait_metrics(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = wait_for(Duration::from_secs(30), || {
            last = self.metrics();
            check(&last)
        });
        assert!(found.is_some(), "timed out waiting for {what}; last scrape:\n{last}\nlogs:\n{}", self.logs());
        last
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&self) {
        wait_for(Duration::from_secs(20), || self.get("/readyz", &[]).status == 200)
            .unwrap_or_else(|| panic!("exporter never became ready; logs:\n{}", self.logs()));
    }

    /// Waits until the exporter has run at least `n` collection cycles.
    pub fn wait_cycles(&self, n: u64) {
        wait_for(Duration::from_secs(20), || {
            sample(&self.metrics(), "gpu_exporter_collections_total", &[]).is_some_and(|v| v >= n as f64)
        })
        .unwrap_or_else(|| panic!("fewer than {n} cycles ran; logs:\n{}", self.logs()));
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "exporter ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exporter on a simulated node with the simulated kubelet beside it (pod-resources
/// socket, procfs and pod log trees); both stop when dropped.
pub struct Node {
    pub exporter: Exporter,
    _kubelet: fake_kubelet::KubeletServer,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Node {
    type Target = Exporter;
    fn deref(&self) -> &Exporter {
        &self.exporter
    }
}

/// Starts the exporter on `scenario` (time frozen at `frozen_at` seconds if given) with
/// the simulated kubelet, collecting every 200ms, with `args` added; returns once the
/// pod-resources list came in and two more cycles ran, so pods and XIDs due by then
/// are on the page.
pub fn start_node(scenario: &Path, frozen_at: Option<f64>, args: &[&str]) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let kubelet =
        fake_kubelet::start_in(&fake_nvml::scenario::Scenario::load(scenario).unwrap(), "test-node", dir.path())
            .unwrap();
    let at = |name: &str| dir.path().join(name).display().to_string();
    let exporter = Launch::scenario(scenario, frozen_at)
        .args(&["--collect-interval", "200ms", "--nvml.call-timeout", "150ms"])
        .args(&["--kubelet.pod-resources-socket", &at("kubelet.sock")])
        .args(&["--path.procfs", &at("proc"), "--path.pod-logs", &at("pods")])
        .args(args)
        .start();
    exporter.wait_ready();
    // The first pod-resources list and pod log scan run at start, beside the first cycles.
    wait_for(Duration::from_secs(20), || {
        sample(&exporter.metrics(), "gpu_exporter_pod_resources_up", &[]) == Some(1.0)
    })
    .unwrap_or_else(|| panic!("pod-resources never came up; logs:\n{}", exporter.logs()));
    // XIDs due by the frozen time arrive right after registration, and the pod log scan
    // beside the first list; two more cycles make sure.
    let cycles = sample(&exporter.metrics(), "gpu_exporter_collections_total", &[]).unwrap_or(0.0) as u64;
    exporter.wait_cycles(cycles + 2);
    Node { exporter, _kubelet: kubelet, _dir: dir }
}

/// Polls `check` until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut check: impl FnMut() -> bool) -> Option<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return Some(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub raw_body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A plain HTTP/1.1 GET with `Connection: close`.
pub fn http_get(address: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    try_http_get(address, path, headers).unwrap_or_else(|e| panic!("GET http://{address}{path}: {e}"))
}

/// As [`http_get`], but a connection failure is an error rather than a panic.
pub fn try_http_get(address: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    Ok(parse_response(&raw))
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v == "chunked") {
        body = dechunk(&body);
    }
    Response { status, headers, body: String::from_utf8_lossy(&body).to_string(), raw_body: body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 4 + size..];
    }
}

/// The value of the first sample of `name` whose labels include all of `labels`.
pub fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let limits = exposition_parser::Limits::default();
    let format = exposition_parser::Format::PrometheusText;
    let parsed = exposition_parser::parse(exposition.as_bytes(), format, &limits, |family| family == name)
        .expect("the exporter's exposition parses");
    parsed.into_iter().find(|s| labels.iter().all(|(k, v)| s.label(k) == Some(v))).map(|s| s.value)
}

/// Every sample line of `name`.
pub fn samples<'a>(exposition: &'a str, name: &str) -> Vec<&'a str> {
    exposition.lines().filter(|l| !l.starts_with('#') && l.split(['{', ' ']).next() == Some(name)).collect()
}
