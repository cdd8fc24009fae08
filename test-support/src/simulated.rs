//! Simulated GPU nodes and the metrics adapter, as child processes: for each node,
//! `fake-kubelet` serves the scenario's pod-resources socket, `/proc` and pod logs, and
//! the real `gpu-exporter` reads the scenario's GPUs through `nvml-wrapper` loading the
//! fake NVML library, exactly as it loads `libnvidia-ml.so.1` on a GPU node. The
//! adapter runs standalone over its exporters with certificates from its own
//! `dev-certs`. Every process is killed when its handle is dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::apiserver::Backend;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Builds fake-nvml, fake-kubelet, gpu-exporter and gpu-metrics-adapter once per test
/// binary; returns the directory that holds them.
pub fn binaries() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // A debug build, also when a benchmark (a release build) asks, unless
            // SIMULATED_RELEASE=1 asks for the release binaries (benchmarks only).
            let release = std::env::var_os("SIMULATED_RELEASE").is_some_and(|v| v == "1");
            let out = Command::new(env!("CARGO"))
                .arg("build")
                .args(release.then_some("--release"))
                .args(["-p", "fake-nvml", "-p", "fake-kubelet", "-p", "gpu-exporter", "-p", "gpu-metrics-adapter"])
                .args(["-p", "kubectl-gpu", "-p", "sim-cri"])
                .current_dir(workspace())
                .output()
                .expect("cargo runs");
            assert!(
                out.status.success(),
                "building the simulated node failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from);
            target.join(if release { "release" } else { "debug" })
        })
        .clone()
}

/// A child process killed and reaped when dropped, and killed when the test process
/// exits even if it never is: tests keep their simulated cluster in a `static`, which
/// Rust never drops, and an orphaned exporter would outlive the run.
#[derive(Debug)]
pub struct Killed(pub Child);

static CHILDREN: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

extern "C" fn kill_children() {
    let children = CHILDREN.lock().map(|c| c.clone()).unwrap_or_default();
    for pid in children {
        // SAFETY: kill(2) with a pid this process spawned; no memory is touched.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Kills `pid` (a process group where negative) when the test process exits.
pub fn kill_at_exit(pid: i32) {
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function that only reads a static and calls kill(2).
        unsafe {
            libc::atexit(kill_children);
        }
    });
    CHILDREN.lock().unwrap().push(pid);
}

impl Killed {
    pub fn new(child: Child) -> Killed {
        if let Ok(pid) = i32::try_from(child.id()) {
            kill_at_exit(pid);
        }
        Killed(child)
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if let (Ok(pid), Ok(mut children)) = (i32::try_from(self.0.id()), CHILDREN.lock()) {
            children.retain(|c| *c != pid);
        }
    }
}

/// Polls `ok` every 50 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    wait_until_ok(what, timeout, || if ok() { Ok(()) } else { Err(String::from("not yet")) });
}

/// Polls `attempt` every 50 ms until it is `Ok`; panics naming `what` and the last
/// error after `timeout`.
pub fn wait_until_ok<T>(what: &str, timeout: Duration, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "timed out waiting for {what}; last seen: {last}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A blocking HTTP GET; `None` when nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The value of the first sample of `family` on an exporter page.
pub fn value(page: &str, family: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.split(['{', ' ']).next() == Some(family))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The scenario clock of a simulated node.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// Frozen at this many scenario seconds.
    Frozen(f64),
    /// Read from a file the test writes ([`SimulatedNode::set_clock`]), starting here.
    Driven(f64),
}

/// One simulated GPU node: its exporter and kubelet.
#[derive(Debug)]
pub struct SimulatedNode {
    pub name: String,
    pub exporter: SocketAddr,
    clock: Option<PathBuf>,
    // Drop order: the exporter, then the kubelet, then their files.
    _exporter: Killed,
    _kubelet: Killed,
    _dir: tempfile::TempDir,
}

fn exporter_address(child: &mut Child) -> SocketAddr {
    address_from_stderr(child, "the exporter listens", |line| {
        Some(line.split("\"address\":\"").nth(1)?.split('"').next().unwrap_or_default().to_string())
    })
}

/// The address a metrics adapter started with `--secure-port=0` serves on, from the
/// "serving custom.metrics.k8s.io" line of its stderr (which `child` must pipe).
pub fn adapter_address(child: &mut Child) -> SocketAddr {
    address_from_stderr(child, "the adapter serves", |line| {
        let addr = line.contains("serving custom.metrics.k8s.io").then(|| line.split("addr=").nth(1))??;
        Some(addr.split_whitespace().next().unwrap_or_default().to_string())
    })
}

/// The first address `find` reads from a line of the child's piped stderr, within 60 s;
/// the rest of stderr is drained so that the child never blocks on a full pipe.
fn address_from_stderr(child: &mut Child, what: &str, find: fn(&str) -> Option<String>) -> SocketAddr {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = find(&line) {
                let _ = tx.send(addr);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect(what).parse().unwrap()
}

/// What else a simulated node's exporter is given.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeOptions<'a> {
    /// `--label` constant labels (`k=v,...`) on every series.
    pub labels: Option<&'a str>,
    /// An API server's kubeconfig: the exporter watches its node's pods and
    /// ResourceSlices there (health stays off, so it writes nothing). `None`: no API.
    pub kubeconfig: Option<&'a Path>,
    /// More exporter flags, after the ones above (`--metrics.naming=both`, say).
    pub args: &'a [&'a str],
}

impl SimulatedNode {
    /// Starts node `name` on `scenario` with constant `labels`; returns once its
    /// exporter has collected.
    pub fn start(name: &str, scenario: &Path, clock: Clock, labels: &str) -> SimulatedNode {
        SimulatedNode::start_with(name, scenario, clock, NodeOptions { labels: Some(labels), ..NodeOptions::default() })
    }

    /// As [`SimulatedNode::start`], with `options`.
    pub fn start_with(name: &str, scenario: &Path, clock: Clock, options: NodeOptions) -> SimulatedNode {
        let bin = binaries();
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kubelet.sock");
        let kubelet = Command::new(bin.join("fake-kubelet"))
            .arg("--scenario")
            .arg(scenario)
            .args(["--node-name", name])
            .arg("--socket")
            .arg(&socket)
            .arg("--procfs")
            .arg(dir.path().join("proc"))
            .arg("--pod-logs")
            .arg(dir.path().join("pods"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let kubelet = Killed::new(kubelet);
        wait_until("the kubelet socket", Duration::from_secs(30), || socket.exists());
        let mut command = Command::new(bin.join("gpu-exporter"));
        command
            .arg("--nvml-library")
            .arg(bin.join("libfake_nvml.so"))
            .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--node-name", name])
            .args(["--collect-interval", "200ms", "--nvml.call-timeout", "150ms"])
            .arg("--kubelet.pod-resources-socket")
            .arg(&socket)
            .arg("--path.procfs")
            .arg(dir.path().join("proc"))
            .arg("--path.pod-logs")
            .arg(dir.path().join("pods"))
            .env("FAKE_NVML_SCENARIO", scenario)
            .env("KUBECONFIG", "/nonexistent")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(labels) = options.labels {
            command.args(["--label", labels]);
        }
        match options.kubeconfig {
            Some(kubeconfig) => {
                command.args(["--kubernetes.api", "auto", "--health.enabled=false", "--kubernetes.kubeconfig"]);
                command.arg(kubeconfig);
            }
            None => {
                command.args(["--kubernetes.api", "off"]);
            }
        }
        command.args(options.args);
        let clock_file = match clock {
            Clock::Frozen(t) => {
                command.env("FAKE_NVML_FROZEN_AT", t.to_string());
                None
            }
            Clock::Driven(t) => {
                let file = dir.path().join("clock");
                std::fs::write(&file, t.to_string()).unwrap();
                command.env("FAKE_NVML_CLOCK_FILE", &file);
                Some(file)
            }
        };
        let mut child = command.spawn().unwrap();
        let exporter = exporter_address(&mut child);
        let node = SimulatedNode {
            name: name.into(),
            exporter,
            clock: clock_file,
            _exporter: Killed::new(child),
            _kubelet: kubelet,
            _dir: dir,
        };
        node.wait_for("three collections with the kubelet's pods attributed", |m| {
            value(m, "gpu_exporter_collections_total").is_some_and(|n| n >= 3.0)
                && value(m, "gpu_exporter_pod_resources_up") == Some(1.0)
        });
        node
    }

    /// Sets the scenario clock of a node started with [`Clock::Driven`].
    pub fn set_clock(&self, t: f64) {
        std::fs::write(self.clock.as_ref().expect("a driven clock"), t.to_string()).unwrap();
    }

    /// The exporter's metrics URL.
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.exporter)
    }

    /// The exporter's `/metrics` page.
    pub fn metrics(&self) -> String {
        let (status, body) = http_get(self.exporter, "/metrics").expect("the exporter answers");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until the page satisfies `ok`.
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) {
        wait_until(&format!("{}: {what}", self.name), Duration::from_secs(60), || {
            http_get(self.exporter, "/metrics").is_some_and(|(s, body)| s == 200 && ok(&body))
        });
    }

    /// The backend that forwards `pods/proxy` to this exporter.
    pub fn backend(&self) -> Backend {
        Backend::Http(self.exporter)
    }
}

/// gpu-metrics-adapter, standalone, scraping some exporters.
#[derive(Debug)]
pub struct MetricsAdapter {
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
    _process: Killed,
}

impl MetricsAdapter {
    /// Starts the adapter over `exporters` (scraped every second); returns once it serves.
    pub fn start(exporters: &[SocketAddr]) -> MetricsAdapter {
        let bin = binaries().join("gpu-metrics-adapter");
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        let out = Command::new(&bin)
            .args(["dev-certs", "--out"])
            .arg(&certs)
            .args(["--server", "https://127.0.0.1:6443"])
            .output()
            .unwrap();
        assert!(out.status.success(), "dev-certs: {}", String::from_utf8_lossy(&out.stderr));
        let urls: Vec<String> = exporters.iter().map(|a| format!("http://{a}/metrics")).collect();
        let mut child = Command::new(&bin)
            .args(["--standalone", "--bind-address=127.0.0.1", "--secure-port=0", "--scrape-interval=1s"])
            .arg(format!("--tls-cert-file={}", certs.join("serving.pem").display()))
            .arg(format!("--tls-private-key-file={}", certs.join("serving-key.pem").display()))
            .arg(format!("--client-ca-file={}", certs.join("ca.pem").display()))
            .arg(format!("--exporter-url={}", urls.join(",")))
            .env("KUBECONFIG", "/nonexistent")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = adapter_address(&mut child);
        MetricsAdapter { addr, dir, _process: Killed::new(child) }
    }

    /// `kubectl get --raw path` against the adapter with its dev-certs kubeconfig
    /// (client certificate in `system:masters`), parsed; `None` when kubectl fails.
    pub fn get(&self, path: &str) -> Option<serde_json::Value> {
        let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(self.dir.path().join("certs/kubeconfig"))
            .arg(format!("--server=https://{}", self.addr))
            .args(["get", "--raw", path])
            .output()
            .unwrap();
        out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    /// The backend that forwards `custom.metrics.k8s.io` to the adapter, with the
    /// dev-certs client certificate (in `system:masters`).
    pub fn backend(&self) -> Backend {
        let certs = self.dir.path().join("certs");
        let read = |f: &str| std::fs::read(certs.join(f)).unwrap();
        Backend::https(self.addr, "127.0.0.1", &read("ca.pem"), &read("client.pem"), &read("client-key.pem"))
    }
}
