//! `scripts/cluster` when things go wrong: a port in use, the state of a cluster that
//! crashed, a build that fails, binaries that are not there. Each gets a message that
//! says what happened, and nothing is left running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use test_support::simulated::workspace;

fn cluster(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(workspace().join("scripts/cluster"));
    c.args(args).arg("--dir").arg(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The pids a cluster directory recorded that still run.
fn running(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("run")) else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|pid| pid.trim().to_string())
        .filter(|pid| alive(pid))
        .collect()
}

/// Whether `pid` runs (a zombie, killed and not yet reaped, does not).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"))
}

#[test]
fn a_port_in_use_is_named_and_nothing_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = cluster(&["up", "--port", &port], &dir, &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&format!("--port {port}: 127.0.0.1:{port} is already in use")), "{}", stderr(&out));
    assert!(running(&dir).is_empty());
    let out = cluster(&["up", "--port", "99999"], &dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--port 99999 is not a port number"), "{}", stderr(&out));
}

#[test]
fn the_state_of_a_crashed_cluster_is_said_and_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let out = cluster(&["up"], &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pids = running(&dir);
    assert_eq!(pids.len(), 4, "etcd, the API server, the controller-manager and the scheduler");
    // A second up while it runs: refused, the running one untouched.
    let out = cluster(&["up"], &dir, &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("a cluster already runs in"), "{}", stderr(&out));
    assert_eq!(running(&dir).len(), 4);
    // The machine "crashes": every process killed, the directory left behind.
    for pid in &pids {
        Command::new("kill").args(["-9", pid]).status().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = cluster(&["up"], &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("did not stop cleanly"), "{}", stderr(&out));
    assert_eq!(running(&dir).len(), 4);
    let status = cluster(&["status"], &dir, &[]);
    assert!(status.status.success());
    let out = cluster(&["down"], &dir, &[]);
    assert!(out.status.success());
    assert!(!dir.exists(), "down removes the directory");
    for pid in running(&dir).iter().chain(&pids) {
        assert!(!alive(pid), "{pid} still runs");
    }
    // A directory that is not a cluster's is never removed.
    std::fs::create_dir_all(dir.join("precious")).unwrap();
    let out = cluster(&["up"], &dir, &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not a cluster directory of this script"), "{}", stderr(&out));
    assert!(dir.join("precious").exists());
}

#[test]
fn a_failing_build_and_missing_binaries_are_named_and_nothing_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    // An empty cache forces a build; an architecture Go does not know fails it at once,
    // as a broken module or a lost proxy would.
    let cache = tmp.path().join("cache");
    let out = cluster(&["up"], &dir, &[("GPU_TELEMETRY_CACHE", cache.to_str().unwrap()), ("GOARCH", "bogus")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("building kubernetes v1.37.2 failed"), "{}", stderr(&out));
    assert!(running(&dir).is_empty());
    // KUBE_BIN_DIR without the programs.
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let out = cluster(&["up"], &dir, &[("KUBE_BIN_DIR", bin.to_str().unwrap())]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("has no executable kube-apiserver"), "{}", stderr(&out));
    assert!(running(&dir).is_empty());
}
