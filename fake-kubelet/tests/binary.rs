//! The `fake-kubelet` binary: writes its trees, serves the socket, drops it on SIGUSR1,
//! restores it on SIGUSR2, and removes it on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn wait(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, name: &str) {
    assert!(Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().unwrap().success());
}

fn can_connect(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

#[test]
fn signals_drop_and_restore_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fake-nvml/scenarios/seed-mixed-node.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-kubelet"))
        .arg("--socket")
        .arg(&socket)
        .arg("--procfs")
        .arg(dir.path().join("proc"))
        .arg("--pod-logs")
        .arg(dir.path().join("pods"))
        .env("FAKE_NVML_SCENARIO", &scenario)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait("the socket is served", || can_connect(&socket));
    let cgroup = std::fs::read_to_string(dir.path().join("proc/43001/cgroup")).unwrap();
    assert!(cgroup.starts_with("0::/kubepods.slice/kubepods-pod"), "{cgroup}");
    assert_eq!(std::fs::read_dir(dir.path().join("pods")).unwrap().count(), 12);

    signal(child.id(), "USR1");
    wait("the socket is gone", || !socket.exists());
    signal(child.id(), "USR2");
    wait("the socket is back", || can_connect(&socket));

    signal(child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "fake-kubelet ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    assert!(!socket.exists());
}

#[test]
fn a_wrong_scenario_is_refused_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bad.yaml");
    std::fs::write(&scenario, "gpus: [{model: NOPE}]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fake-kubelet"))
        .arg("--scenario")
        .arg(&scenario)
        .arg("--socket")
        .arg(dir.path().join("k.sock"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml"), "{stderr}");
}
