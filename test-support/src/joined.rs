//! The stack on a real control plane ([`crate::control_plane`]): simulated GPU nodes
//! joined by `fake-kubelet join`, each with its `gpu-exporter` process, and the metrics
//! adapter behind the real aggregator. Each runs with the identity `deploy/` gives it:
//! the nodes as `system:node:<name>`, the exporters with tokens of the `gpu-exporter`
//! ServiceAccount bound to the DaemonSet's pod on their node, the adapter with a token
//! of `gpu-metrics-adapter`; a permission `deploy/` lacks fails here as in a cluster.
//!
//! An exporter process stands in for the DaemonSet's pod on its node and listens on
//! that pod's IP ([`crate::netns`]), so the endpoint slice controller lists it in the
//! `gpu-exporter` Service and the API server's pods proxy reaches it, as in a cluster.
//! The one test-only departure is the adapter's: its Service becomes an ExternalName to `localhost` with the APIServices
//! pointing at the adapter's port (the aggregator dials an ExternalName's host, and
//! checks the adapter's certificate for `gpu-metrics-adapter.gpu-telemetry.svc` against
//! the caBundle the adapter writes, as in a cluster).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::control_plane::ControlPlane;
use crate::netns::HostAddress;
use crate::simulated::{Killed, binaries, http_get, value, wait_until, wait_until_ok};

/// The namespace `deploy/` installs into.
pub const NAMESPACE: &str = "gpu-telemetry";

/// One node to join.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    /// The node's fake-nvml scenario (GPUs only; its pods come from the API server).
    pub scenario: String,
    /// Time-slicing replicas per whole GPU.
    pub replicas: u32,
}

/// Joined nodes, the simulated kubelet serving them, and (once started) their exporters.
#[derive(Debug)]
pub struct JoinedFleet {
    pub dir: PathBuf,
    pub nodes: Vec<String>,
    pub exporters: Vec<Exporter>,
    load: PathBuf,
    _kubelet: Killed,
}

/// A node's exporter process, listening on an address of its own.
#[derive(Debug)]
pub struct Exporter {
    pub node: String,
    pub addr: SocketAddr,
    // Drop order: the process, then its address.
    _process: Killed,
    _address: HostAddress,
}

impl Exporter {
    /// Its `/metrics` page.
    pub fn metrics(&self) -> String {
        http_get(self.addr, "/metrics").map(|(_, body)| body).unwrap_or_default()
    }
}

/// Spawns `command`, drains its stderr into `log` and returns the first line `find`
/// accepts, within 60 s.
pub fn spawn_logged(mut command: Command, log: &Path, find: fn(&str) -> Option<String>) -> (Killed, Option<String>) {
    let mut child: Child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut file = std::fs::File::create(log).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Write;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
            if let Some(found) = find(&line) {
                let _ = tx.send(found);
            }
        }
    });
    let found = rx.recv_timeout(Duration::from_secs(60)).ok();
    (Killed::new(child), found)
}

impl JoinedFleet {
    /// Joins `nodes` to `cp` and waits until each is Ready.
    pub fn join(cp: &ControlPlane, nodes: &[NodeSpec]) -> JoinedFleet {
        let bin = binaries();
        let dir = cp.dir.join("fleet");
        std::fs::create_dir_all(&dir).unwrap();
        let load = dir.join("load.yaml");
        std::fs::write(&load, "workloads: []\n").unwrap();
        let mut command = Command::new(bin.join("fake-kubelet"));
        command.arg("join").arg("--dir").arg(&dir).arg("--load").arg(&load);
        // Pod networks of this process's own (the exporters listen on their pod IPs, and
        // tests run side by side, in several processes and several threads of one):
        // 10.<100 + pid % 150>.<16 × fleet + node>.0/24, for 16 fleets of up to 15 nodes
        // a process.
        static FLEETS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let second = 100 + std::process::id() % 150;
        let fleet = FLEETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 16;
        assert!(nodes.len() < 16, "at most 15 nodes a fleet");
        for (i, node) in nodes.iter().enumerate() {
            let scenario = dir.join(format!("{}.base.yaml", node.name));
            std::fs::write(&scenario, &node.scenario).unwrap();
            let kubeconfig = cp.user(&format!("system:node:{}", node.name), &["system:nodes"]);
            command.arg("--node").arg(format!(
                "name={},scenario={},kubeconfig={},replicas={},pod-cidr=10.{second}.{}.0/24",
                node.name,
                scenario.display(),
                kubeconfig.display(),
                node.replicas,
                16 * fleet as usize + i + 1
            ));
        }
        let (kubelet, _) =
            spawn_logged(command, &dir.join("fake-kubelet.log"), |l| l.contains("joined").then(String::new));
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        for name in &names {
            cp.wait_for(
                &format!("node {name} Ready"),
                Duration::from_secs(60),
                &["get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"],
                |s| s == "True",
            );
        }
        JoinedFleet { dir, nodes: names, exporters: Vec::new(), load, _kubelet: kubelet }
    }

    /// The directory of a node's simulated kubelet: `scenario.yaml`, `kubelet.sock`,
    /// `proc/`, `pods/`.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join(node)
    }

    /// Replaces `node`'s own scenario (the file it joined with); the simulated kubelet
    /// follows it (fake-kubelet's `join::base`), so a fault added here, such as
    /// `faults: [{at_s: 0, xid: 79}]` on a GPU, reaches the node's exporter within about
    /// a second. The GPUs must stay the same.
    pub fn set_scenario(&self, node: &str, yaml: &str) {
        let path = self.dir.join(format!("{node}.base.yaml"));
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    /// Replaces the load file (see fake-kubelet's `join::load`).
    pub fn set_load(&self, yaml: &str) {
        let tmp = self.load.with_extension("tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, &self.load).unwrap();
    }

    /// The last `lines` of node `node`'s exporter log, for a failing test's message.
    pub fn exporter_log(&self, node: &str, lines: usize) -> String {
        tail(&self.node_dir(node).join("exporter.log"), lines)
    }

    /// The simulated kubelet's log so far.
    pub fn kubelet_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("fake-kubelet.log")).unwrap_or_default()
    }

    /// Starts an exporter per node in place of the DaemonSet's pod there: on the pod's
    /// IP and port 9400 (a [`HostAddress`] at that IP), with `deploy/`'s identity (a
    /// token of the `gpu-exporter` ServiceAccount bound to that pod); waits until each
    /// has collected with the kubelet's pods and the endpoint slice controller lists it
    /// in the `gpu-exporter` Service. `args` are added to each (`--collect-interval`
    /// among them replaces the tests' 1s, `--health.dry-run=false` the report-only
    /// default). Dropping [`JoinedFleet::exporters`] stops them, for a restart.
    pub fn start_exporters(&mut self, cp: &ControlPlane, args: &[&str]) {
        for node in self.nodes.clone() {
            let dir = self.node_dir(&node);
            let (procfs, pod_logs) = (dir.join("proc"), dir.join("pods"));
            let files = NodeFiles {
                socket: &dir.join("kubelet.sock"),
                scenario: &dir.join("scenario.yaml"),
                procfs: Some(&procfs),
                pod_logs: Some(&pod_logs),
                log: &dir.join("exporter.log"),
            };
            let exporter = start_pod_exporter(cp, &node, &files, args);
            self.exporters.push(exporter);
        }
        self.wait_for_endpoints(cp);
    }

    /// Waits until the `gpu-exporter` Service's EndpointSlices list every exporter
    /// Ready, as the endpoint slice controller keeps them.
    pub fn wait_for_endpoints(&self, cp: &ControlPlane) {
        let want: Vec<String> = self.exporters.iter().map(|e| e.addr.ip().to_string()).collect();
        cp.wait_for_service_addresses(NAMESPACE, "gpu-exporter", &want, true);
    }

    /// The exporter of `node`.
    pub fn exporter(&self, node: &str) -> &Exporter {
        self.exporters.iter().find(|e| e.node == node).unwrap()
    }
}

/// Where an exporter in place of the DaemonSet's pod reads its node, and where it logs.
#[derive(Debug, Clone, Copy)]
pub struct NodeFiles<'a> {
    /// The kubelet's pod-resources socket.
    pub socket: &'a Path,
    /// fake-nvml's scenario, followed live.
    pub scenario: &'a Path,
    /// `--path.procfs` and `--path.pod-logs`, where the node has such trees.
    pub procfs: Option<&'a Path>,
    pub pod_logs: Option<&'a Path>,
    pub log: &'a Path,
}

/// Starts the exporter of `node` in place of the DaemonSet's pod there (see
/// [`JoinedFleet::start_exporters`]) and waits until it has collected with the kubelet's
/// pods; the caller waits for the EndpointSlices.
pub fn start_pod_exporter(cp: &ControlPlane, node: &str, files: &NodeFiles, args: &[&str]) -> Exporter {
    let bin = binaries();
    let pod = exporter_pod(cp, node);
    let ip: std::net::Ipv4Addr = cp
        .run(&["get", "pod", &pod, "-n", NAMESPACE, "-o", "jsonpath={.status.podIP}"])
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("the exporter pod {pod} has no IPv4 pod IP: {e}"));
    let kubeconfig = cp.service_account(NAMESPACE, "gpu-exporter", Some(&pod));
    let address = HostAddress::at(ip);
    let mut command = Command::new(bin.join("gpu-exporter"));
    command
        .arg("--nvml-library")
        .arg(bin.join("libfake_nvml.so"))
        .args(["--web.listen-address", &format!("{}:9400", address.host)])
        .args(["--log.format", "json", "--node-name", node])
        .args(["--nvml.call-timeout", "500ms"])
        .args((!args.contains(&"--collect-interval")).then_some(["--collect-interval", "1s"]).into_iter().flatten())
        // Report-only unless the test asks for more (a flag given twice is refused).
        .args((!args.iter().any(|a| a.starts_with("--health.dry-run"))).then_some("--health.dry-run=true"))
        .args(["--health.namespace", NAMESPACE])
        .arg("--kubelet.pod-resources-socket")
        .arg(files.socket)
        .arg("--kubernetes.kubeconfig")
        .arg(&kubeconfig)
        .env("FAKE_NVML_SCENARIO", files.scenario)
        .env("FAKE_NVML_LIVE", "1")
        .env_remove("KUBERNETES_SERVICE_HOST");
    if let Some(procfs) = files.procfs {
        command.arg("--path.procfs").arg(procfs);
    }
    if let Some(pod_logs) = files.pod_logs {
        command.arg("--path.pod-logs").arg(pod_logs);
    }
    command.args(args);
    let (process, addr) = spawn_logged(command, files.log, |line| {
        Some(line.split("\"address\":\"").nth(1)?.split('"').next()?.to_string())
    });
    let addr: SocketAddr = addr
        .unwrap_or_else(|| {
            panic!("the exporter of {node} did not start: {}", std::fs::read_to_string(files.log).unwrap_or_default())
        })
        .parse()
        .unwrap();
    wait_until(&format!("the exporter of {node} collecting"), Duration::from_secs(60), || {
        http_get(addr, "/metrics")
            .is_some_and(|(s, m)| s == 200 && value(&m, "gpu_exporter_pod_resources_up") == Some(1.0))
    });
    Exporter { node: node.to_string(), addr, _process: process, _address: address }
}

/// The DaemonSet's exporter pod on `node`, once the simulated kubelet runs it.
pub fn exporter_pod(cp: &ControlPlane, node: &str) -> String {
    let out = cp.wait_for(
        &format!("the gpu-exporter pod on {node} Running"),
        Duration::from_secs(60),
        &[
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/name=gpu-exporter",
            "--field-selector",
            &format!("spec.nodeName={node},status.phase=Running"),
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
        |s| !s.is_empty(),
    );
    out.trim().to_string()
}

/// What the adapter is started with besides `deploy/`'s settings.
#[derive(Debug, Clone, Default)]
pub struct AdapterOptions {
    /// `--prometheus-url` and the rules file (prometheus-adapter's format).
    pub prometheus: Option<(String, PathBuf)>,
    /// `--scrape-interval` (default 1s here).
    pub scrape_interval: Option<String>,
    /// Further flags, after the others.
    pub args: Vec<String>,
}

/// The metrics adapter, a process with `deploy/`'s identity, behind the aggregator.
#[derive(Debug)]
pub struct Adapter {
    pub addr: SocketAddr,
    pub log: PathBuf,
    _process: Killed,
}

/// The APIServices `deploy/` registers for the adapter.
pub const APISERVICES: [&str; 3] =
    ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"];

impl Adapter {
    /// Starts the adapter as its Deployment configures it (its own serving Secret, the
    /// caBundle of the APIServices, exporters from the `gpu-exporter` EndpointSlices),
    /// points the APIServices at it and waits until the aggregator calls them Available.
    /// `deploy/base` must be applied (and, for external metrics, the APIService of
    /// `components/adapter-external-metrics` with Prometheus rules that serve it).
    pub fn start(cp: &ControlPlane, options: &AdapterOptions) -> Adapter {
        let bin = binaries().join("gpu-metrics-adapter");
        let kubeconfig = cp.service_account(NAMESPACE, "gpu-metrics-adapter", None);
        let log = cp.dir.join("adapter.log");
        let mut command = Command::new(bin);
        command
            .args(["--bind-address=127.0.0.1", "--secure-port=0"])
            .args([
                "--exporter-namespace=gpu-telemetry",
                "--exporter-service=gpu-exporter",
                "--exporter-port-name=metrics",
            ])
            .arg(format!("--scrape-interval={}", options.scrape_interval.as_deref().unwrap_or("1s")))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("GPU_METRICS_ADAPTER_TLS_SECRET_NAME", "gpu-metrics-adapter-serving")
            .env("GPU_METRICS_ADAPTER_TLS_SECRET_NAMESPACE", NAMESPACE)
            .env("GPU_METRICS_ADAPTER_TLS_CA_BUNDLE_APISERVICES", APISERVICES.join(","))
            .env("GPU_METRICS_ADAPTER_TLS_SECRET_CHECK_INTERVAL", "1s")
            .env(
                "GPU_METRICS_ADAPTER_SELF_SIGNED_HOSTS",
                "gpu-metrics-adapter,gpu-metrics-adapter.gpu-telemetry,gpu-metrics-adapter.gpu-telemetry.svc,\
                 gpu-metrics-adapter.gpu-telemetry.svc.cluster.local",
            )
            .env_remove("KUBERNETES_SERVICE_HOST");
        if let Some((url, rules)) = &options.prometheus {
            command.arg(format!("--prometheus-url={url}")).arg("--prometheus-rules-file").arg(rules);
        }
        command.args(&options.args);
        let (process, addr) = spawn_logged(command, &log, |line| {
            let addr = line.contains("serving custom.metrics.k8s.io").then(|| line.split("addr=").nth(1))??;
            Some(addr.split_whitespace().next()?.to_string())
        });
        let addr: SocketAddr = addr
            .unwrap_or_else(|| {
                panic!("the adapter did not start: {}", std::fs::read_to_string(&log).unwrap_or_default())
            })
            .parse()
            .unwrap();
        let installed = route_apiservices(cp, addr.port(), None);
        let adapter = Adapter { addr, log, _process: process };
        wait_available(cp, &installed, || adapter.log_tail(20));
        adapter
    }

    /// The end of the adapter's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

/// The last `lines` lines of the file `log`.
pub(crate) fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Points the APIServices `deploy/` installed (of [`APISERVICES`]) at an adapter on this
/// host's `port`: the Service `gpu-metrics-adapter` becomes an ExternalName to localhost
/// (the aggregator dials an ExternalName's host) and each APIService takes the port, and
/// `ca_bundle` (PEM) where given: our adapter writes its own, another does not. Returns the
/// APIServices installed (the external metrics one only with the component that adds it).
pub fn route_apiservices(cp: &ControlPlane, port: u16, ca_bundle: Option<&str>) -> Vec<&'static str> {
    cp.run(&["delete", "service", "gpu-metrics-adapter", "-n", NAMESPACE, "--ignore-not-found"]);
    cp.apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: gpu-metrics-adapter, namespace: {NAMESPACE}}}\nspec:\n  \
         type: ExternalName\n  externalName: localhost\n  ports: [{{name: https, port: {port}}}]\n"
    ));
    let installed: Vec<&'static str> = APISERVICES
        .into_iter()
        .filter(|a| cp.kubectl().args(["get", "apiservice", a]).output().is_ok_and(|o| o.status.success()))
        .collect();
    let bundle = ca_bundle.map(|pem| {
        use base64::Engine as _;
        format!(
            ",\"caBundle\":\"{}\",\"insecureSkipTLSVerify\":false",
            base64::engine::general_purpose::STANDARD.encode(pem)
        )
    });
    for apiservice in &installed {
        let patch = format!("{{\"spec\":{{\"service\":{{\"port\":{port}}}{}}}}}", bundle.as_deref().unwrap_or(""));
        cp.run(&["patch", "apiservice", apiservice, "--type=merge", "-p", &patch]);
    }
    installed
}

/// Waits until the aggregator calls each of `apiservices` Available; `log` tells why not.
pub fn wait_available(cp: &ControlPlane, apiservices: &[&str], log: impl Fn() -> String) {
    for apiservice in apiservices {
        wait_until_ok(&format!("APIService {apiservice} Available"), Duration::from_secs(90), || {
            let out = cp
                .kubectl()
                .args(["get", "apiservice", apiservice, "-o"])
                .arg("jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.conditions[?(@.type==\"Available\")].message}")
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if text.starts_with("True") { Ok(()) } else { Err(format!("{text}\nadapter log:\n{}", log())) }
        });
    }
}

/// `deploy/base`, rendered by kustomize.
pub fn base() -> String {
    crate::deploy::kustomize(&crate::simulated::workspace().join("deploy/base")).0
}

/// `deploy/base` with the external metrics APIService
/// (`components/adapter-external-metrics`), rendered by kustomize.
pub fn base_with_external_metrics() -> String {
    let dir = tempfile::tempdir().unwrap();
    let deploy = crate::simulated::workspace().join("deploy");
    let rel = |p: &str| crate::deploy::relative(dir.path(), &deploy.join(p)).display().to_string();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{}]\ncomponents: [{}]\n",
            rel("base"),
            rel("components/adapter-external-metrics")
        ),
    )
    .unwrap();
    crate::deploy::kustomize(dir.path()).0
}
