//! Helpers the workspace's integration tests share, so that no crate's tests carry a
//! copy of another's: a test certificate authority ([`pki`]), a TLS client
//! configuration ([`tls`]), every rendering of the `deploy/` manifests ([`deploy`]), the
//! in-test Kubernetes API server ([`apiserver`]: one state behind one router, for the
//! plugin, the adapter, the exporter and the health loop alike), typed Kubernetes
//! objects for it ([`cluster`]), simulated GPU nodes and the metrics adapter as
//! processes behind it ([`simulated`]), a real Prometheus and promtool of either major
//! version ([`prometheus`]), golden files and README blocks that `UPDATE_GOLDEN=1`
//! rewrites ([`golden`]), a free loopback port ([`free_port`]), and loopback connection
//! attacks on a serving edge ([`attack`]). Against the real thing: a Kubernetes control
//! plane built from its Go modules ([`control_plane`], `scripts/cluster`) with simulated
//! nodes joined to it, their exporters on addresses of their own ([`netns`]) and the
//! adapter behind the aggregator ([`joined`]), the real prometheus-adapter behind it in
//! turn ([`peer_adapter`]), and an application's per-pod metrics ([`app_metrics`]). A dev-dependency only; nothing here ships.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod apiserver;
pub mod app_metrics;
pub mod attack;
pub mod cluster;
pub mod control_plane;
pub mod deploy;
pub mod golden;
pub mod joined;
pub mod netns;
pub mod peer_adapter;
pub mod pki;
pub mod prometheus;
pub mod seed_hpa;
pub mod sim_node;
pub mod simulated;
pub mod tls;

/// A loopback port free now, for a process whose address must be known before it
/// starts (another process may take it in between).
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The directory `scripts/go-tools dir <tool>` prints: a tool built from its Go module
/// under `cluster/`, built first when the cache lacks it (scripts/test builds them before
/// the tests that use them, so none is built inside a test's wait), or why not.
pub fn go_tool_dir(tool: &str) -> Result<std::path::PathBuf, String> {
    let script = simulated::workspace().join("scripts/go-tools");
    let out = std::process::Command::new(&script)
        .args(["dir", tool])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("`scripts/go-tools dir {tool}` failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// What a program printed and how it exited (-1: killed by a signal).
#[derive(Debug)]
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

/// Runs `program` with `args` as a user's kubectl plugin runs: `KUBECONFIG` set to
/// `kubeconfig`, `PATH` kept, nothing else of this machine's environment, and a `HOME`
/// that does not exist (so no `~/.kube/config` is read).
pub fn run_with_kubeconfig(program: &std::path::Path, kubeconfig: &std::path::Path, args: &[&str]) -> Ran {
    let out = std::process::Command::new(program)
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    Ran {
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        code: out.status.code().unwrap_or(-1),
    }
}
