//! A real Kubernetes control plane for a test: `scripts/cluster up` in a directory of
//! the test's own (etcd, kube-apiserver, kube-controller-manager, kube-scheduler at
//! the version `cluster/kubernetes` pins, built once into the cache), stopped and
//! removed when the handle drops. Contract tests (what Kubernetes accepts, stores,
//! refuses; RBAC; admission policies; the aggregator; the HPA controller) run here; the
//! in-test [`crate::apiserver`] keeps only what a real server cannot do on demand.
//!
//! Every call goes through the cluster's own `kubectl` (the same release), as a user
//! would make it; a failed call panics with kubectl's message.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::simulated::{wait_until_ok, workspace};

/// What a test may change about its control plane.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--horizontal-pod-autoscaler-sync-period` (default 15s, Kubernetes' own).
    pub hpa_sync_period: Option<String>,
    /// The API server's `--runtime-config`.
    pub runtime_config: Option<String>,
    /// Every component's `--feature-gates`.
    pub feature_gates: Option<String>,
    /// Where the cluster lives (default: a temporary directory of its own).
    pub dir: Option<PathBuf>,
    /// Let `scripts/cluster` print to the terminal (the build's notice, `KUBECONFIG=`
    /// as soon as the API server answers), as the demo wants.
    pub show_progress: bool,
}

/// A running control plane; dropped, it stops and its directory goes.
#[derive(Debug)]
pub struct ControlPlane {
    pub dir: PathBuf,
    /// The admin kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The cluster CA (`ca.crt`; its key is `ca_key`).
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    /// The cluster's own kubectl.
    pub kubectl: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

fn script() -> PathBuf {
    workspace().join("scripts/cluster")
}

impl ControlPlane {
    /// Starts one with Kubernetes' defaults.
    pub fn start() -> ControlPlane {
        ControlPlane::start_with(&Options::default())
    }

    /// Starts one with `options`. The first start on a machine builds the control plane
    /// (minutes; `scripts/test` builds it before the tests).
    pub fn start_with(options: &Options) -> ControlPlane {
        let holder = match &options.dir {
            Some(_) => None,
            None => Some(tempfile::Builder::new().prefix("cluster-").tempdir().unwrap()),
        };
        let dir = options.dir.clone().unwrap_or_else(|| holder.as_ref().unwrap().path().join("cluster"));
        let mut command = Command::new(script());
        command.args(["up", "--dir"]).arg(&dir);
        if let Some(p) = &options.hpa_sync_period {
            command.args(["--hpa-sync-period", p]);
        }
        if let Some(r) = &options.runtime_config {
            command.args(["--runtime-config", r]);
        }
        if let Some(f) = &options.feature_gates {
            command.args(["--feature-gates", f]);
        }
        command.stdin(Stdio::null());
        let (ok, stderr) = if options.show_progress {
            (command.status().expect("scripts/cluster runs").success(), String::new())
        } else {
            let out = command.output().expect("scripts/cluster runs");
            (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
        };
        assert!(
            ok,
            "scripts/cluster up failed (a test against the real control plane needs Go 1.26 and the Go module \
             proxy to build it once, or KUBE_BIN_DIR):\n{stderr}"
        );
        let env = std::fs::read_to_string(dir.join("env")).unwrap();
        let get = |key: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{key} missing from {}", dir.join("env").display()))
                .to_string()
        };
        ControlPlane {
            kubeconfig: get("KUBECONFIG").into(),
            server: get("API_SERVER"),
            ca: get("CA_FILE").into(),
            ca_key: get("CA_KEY_FILE").into(),
            kubectl: get("KUBECTL").into(),
            dir,
            _dir: holder,
        }
    }

    /// A kubectl command as the admin.
    pub fn kubectl(&self) -> Command {
        self.kubectl_as(&self.kubeconfig)
    }

    /// A kubectl command with `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &Path) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig").arg(kubeconfig).stdin(Stdio::null());
        c
    }

    /// Runs kubectl as the admin with `args`; panics with its stderr when it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self.kubectl().args(args).output().unwrap();
        assert!(out.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl as the admin with `args` and `stdin`, returning the whole output.
    pub fn run_with_input(&self, args: &[&str], stdin: &str) -> Output {
        self.run_as_with_input(&self.kubeconfig, args, stdin)
    }

    /// As [`ControlPlane::run_with_input`], with `kubeconfig`.
    pub fn run_as_with_input(&self, kubeconfig: &Path, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .kubectl_as(kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// `kubectl apply --server-side -f -` of `yaml` as the admin; panics when refused.
    pub fn apply(&self, yaml: &str) -> String {
        let out = self.run_with_input(&["apply", "--server-side", "--field-manager=test", "-f", "-"], yaml);
        assert!(out.status.success(), "kubectl apply --server-side: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Creates, unscheduled, the pods a fake-nvml `scenario` file runs: the objects a
    /// cluster has for the pods an exporter's page names (the adapter answers a `*` read
    /// only for pods that exist). Their namespaces must exist.
    pub fn create_pods_of(&self, scenario: &Path) {
        let text = std::fs::read_to_string(scenario).unwrap_or_else(|e| panic!("{}: {e}", scenario.display()));
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        let pods = doc["pods"].as_sequence().map(Vec::as_slice).unwrap_or_default();
        let yaml: String = pods
            .iter()
            .map(|p| {
                let labels = serde_json::to_string(&p["labels"]).unwrap_or_else(|_| "{}".into());
                unscheduled_pod(p["namespace"].as_str().unwrap(), p["name"].as_str().unwrap(), &labels)
            })
            .collect();
        self.apply(&yaml);
    }

    /// A kubeconfig for a client certificate of `name` in `groups`, signed by the
    /// cluster's CA (`scripts/cluster user`).
    pub fn user(&self, name: &str, groups: &[&str]) -> PathBuf {
        let mut c = Command::new(script());
        c.args(["user", name, "--dir"]).arg(&self.dir);
        for g in groups {
            c.args(["--group", g]);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "scripts/cluster user {name}: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    }

    /// A kubeconfig for ServiceAccount `namespace/name` with a token from the
    /// TokenRequest API, bound to `pod` (its name) when given, as a kubelet mounts it.
    pub fn service_account(&self, namespace: &str, name: &str, pod: Option<&str>) -> PathBuf {
        let mut args = vec!["create", "token", name, "-n", namespace, "--duration=24h"];
        if let Some(pod) = pod {
            args.extend(["--bound-object-kind", "Pod", "--bound-object-name", pod]);
        }
        let token = self.run(&args).trim().to_string();
        let path = self
            .dir
            .join(format!("sa-{namespace}-{name}{}.kubeconfig", pod.map_or(String::new(), |p| format!("-{p}"))));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
                 certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: \
                 c\n  context: {{cluster: c, user: {name}}}\ncurrent-context: c\n",
                self.server,
                self.ca.display()
            ),
        )
        .unwrap();
        path
    }

    /// The bearer token of a kubeconfig [`Self::service_account`] wrote, for requests
    /// kubectl cannot make (a patch of `nodes/status` without reading it first).
    pub fn token_of(kubeconfig: &Path) -> String {
        let config = std::fs::read_to_string(kubeconfig).unwrap();
        config.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap().to_string()
    }

    /// Waits until the EndpointSlices of Service `namespace/service` list every address
    /// of `ips` (only endpoints whose `ready` condition is true when `ready_only`), as
    /// the endpoint slice controller keeps them.
    pub fn wait_for_service_addresses(&self, namespace: &str, service: &str, ips: &[String], ready_only: bool) {
        let selector = format!("kubernetes.io/service-name={service}");
        let endpoints = if ready_only { "endpoints[?(@.conditions.ready==true)]" } else { "endpoints[*]" };
        let jsonpath = format!("jsonpath={{.items[*].{endpoints}.addresses[0]}}");
        self.wait_for(
            &format!("{ips:?} in the EndpointSlices of {namespace}/{service}"),
            Duration::from_secs(60),
            &["get", "endpointslices", "-n", namespace, "-l", &selector, "-o", &jsonpath],
            |s| ips.iter().all(|ip| s.split_whitespace().any(|a| a == ip)),
        );
    }

    /// Waits until `kubectl args` (as the admin) prints something `ok` accepts.
    pub fn wait_for(&self, what: &str, timeout: Duration, args: &[&str], ok: impl Fn(&str) -> bool) -> String {
        wait_until_ok(what, timeout, || {
            let out = self.kubectl().args(args).output().map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if out.status.success() && ok(&text) {
                Ok(text)
            } else {
                Err(format!("{}{}", text, String::from_utf8_lossy(&out.stderr)))
            }
        })
    }

    /// The end of a component's log, for a failing test's message.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("logs").join(format!("{component}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", "--dir"]).arg(&self.dir).stderr(Stdio::null()).status();
    }
}

/// A Pod no node runs: its scheduler (`nobody`) does not exist, so it stays Pending, an
/// object for the API server to list. `labels` is a YAML (or JSON) map, `null` for none.
#[must_use]
pub fn unscheduled_pod(namespace: &str, name: &str, labels: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}\n\
         spec: {{schedulerName: nobody, containers: [{{name: app, image: registry.invalid/app:1}}]}}\n"
    )
}
