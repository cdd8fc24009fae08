//! The real prometheus-adapter (v0.12.0, built from `cluster/prometheus-adapter` by
//! `scripts/go-tools build prometheus-adapter`), run as a process behind the real
//! aggregator in place of ours, so that a test can ask both the same questions through
//! the same APIServices, in turn. It runs with our adapter's identity (the ServiceAccount
//! `gpu-metrics-adapter` and the rights `deploy/base` gives it), so the two differ in
//! what they do, not in what they may read.
//!
//! Its flags are the ones its own Deployment passes (prometheus-adapter v0.12.0
//! `deploy/manifests/deployment.yaml`: `--cert-dir`/`--tls-*`, `--config`,
//! `--metrics-relist-interval`, `--prometheus-url`, `--secure-port`), with the three
//! kubeconfigs of custom-metrics-apiserver v1.30.0 (`pkg/cmd/builder.go`: the lister's,
//! and the generic API server's delegated authentication and authorization) in place of
//! the in-cluster configuration a pod has. It serves a certificate for the Service name
//! the aggregator checks, from a CA of the test's, which goes into the APIServices'
//! `caBundle` (prometheus-adapter writes none of its own).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::control_plane::ControlPlane;
use crate::joined::{NAMESPACE, route_apiservices, spawn_logged, wait_available};
use crate::pki::Ca;
use crate::simulated::Killed;

/// The real prometheus-adapter, serving behind the aggregator until dropped.
#[derive(Debug)]
pub struct PeerAdapter {
    pub addr: SocketAddr,
    pub log: PathBuf,
    _process: Killed,
}

/// The `adapter` program: from `PROMETHEUS_ADAPTER_BIN_DIR` where set, else the
/// directory `scripts/go-tools dir prometheus-adapter` gives.
#[must_use]
pub fn program() -> PathBuf {
    let dir = std::env::var_os("PROMETHEUS_ADAPTER_BIN_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            crate::go_tool_dir("prometheus-adapter").unwrap_or_else(|e| {
                panic!("this test runs the real prometheus-adapter, built from cluster/prometheus-adapter: {e}")
            })
        });
    dir.join("adapter")
}

/// A serving certificate for the name the aggregator checks (and for localhost), from a
/// CA of its own, written into `dir`.
#[derive(Debug)]
pub struct Serving {
    /// The CA's certificate, PEM: the APIServices' `caBundle`, or what a client trusts.
    pub ca_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Serving {
    #[must_use]
    pub fn new(dir: &Path) -> Serving {
        let ca = Ca::new("adapter-test-ca");
        let pair = ca.server_for(&[
            "gpu-metrics-adapter.gpu-telemetry.svc",
            "gpu-metrics-adapter.gpu-telemetry.svc.cluster.local",
            "localhost",
            "127.0.0.1",
        ]);
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &pair.cert_pem).unwrap();
        std::fs::write(&key, &pair.key_pem).unwrap();
        Serving { ca_pem: ca.cert_pem, cert, key }
    }
}

/// What a prometheus-adapter Deployment's command line says.
#[derive(Debug)]
pub struct DropIn<'a> {
    /// For the lister and the delegated authentication and authorization.
    pub kubeconfig: &'a Path,
    pub serving: &'a Serving,
    /// On 127.0.0.1.
    pub port: u16,
    pub prometheus_url: &'a str,
    /// The rules, prometheus-adapter's format.
    pub config: &'a Path,
    /// `--metrics-relist-interval`.
    pub relist: &'a str,
}

impl DropIn<'_> {
    /// `program` with these flags: prometheus-adapter's `adapter`, or ours, which takes
    /// the same ones (docs/replacing-prometheus-adapter.md).
    #[must_use]
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .args(["--bind-address=127.0.0.1", &format!("--secure-port={}", self.port)])
            .arg(format!("--tls-cert-file={}", self.serving.cert.display()))
            .arg(format!("--tls-private-key-file={}", self.serving.key.display()))
            .arg(format!("--lister-kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--authentication-kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--prometheus-url={}", self.prometheus_url))
            .arg(format!("--config={}", self.config.display()))
            .arg(format!("--metrics-relist-interval={}", self.relist))
            .arg("--v=2")
            .env_remove("KUBERNETES_SERVICE_HOST");
        command
    }
}

/// Spawns prometheus-adapter as `drop_in` says, logging into `log`; panics with the log
/// when it does not start serving.
#[must_use]
pub fn spawn(drop_in: &DropIn, log: &Path) -> Killed {
    let (process, serving) = spawn_logged(drop_in.command(&program()), log, |line| {
        line.contains("Serving securely on").then(|| line.to_owned())
    });
    assert!(
        serving.is_some(),
        "prometheus-adapter did not start serving:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    process
}

impl PeerAdapter {
    /// Starts prometheus-adapter with `config` (its own format) against Prometheus at
    /// `prometheus_url`, relisting series every `relist`, with the identity of our
    /// adapter, points the APIServices `deploy/` installed at it and waits until the
    /// aggregator calls them Available.
    pub fn start(cp: &ControlPlane, prometheus_url: &str, config: &Path, relist: &str) -> PeerAdapter {
        let dir = cp.dir.join("prometheus-adapter");
        std::fs::create_dir_all(&dir).unwrap();
        let serving = Serving::new(&dir);
        let kubeconfig = cp.service_account(NAMESPACE, "gpu-metrics-adapter", None);
        let port = crate::free_port();
        let log = dir.join("adapter.log");
        let drop_in = DropIn { kubeconfig: &kubeconfig, serving: &serving, port, prometheus_url, config, relist };
        let process = spawn(&drop_in, &log);
        let peer = PeerAdapter { addr: SocketAddr::from(([127, 0, 0, 1], port)), log, _process: process };
        let installed = route_apiservices(cp, port, Some(&serving.ca_pem));
        wait_available(cp, &installed, || peer.log_tail(20));
        peer
    }

    /// The end of its log.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        crate::joined::tail(&self.log, lines)
    }
}
