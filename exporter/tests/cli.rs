//! Bad command lines are refused at start with exit code 2 and a message naming the flag.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-exporter")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn a_reserved_constant_label_is_refused() {
    let (code, stderr) = run(&["--label", "uuid=x"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--label \"uuid\": the exporter sets this label itself"), "{stderr}");
}

#[test]
fn a_malformed_duration_is_refused() {
    let (code, stderr) = run(&["--collect-interval", "soon"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--collect-interval") && stderr.contains("\"soon\""), "{stderr}");
}

#[test]
fn a_log_level_that_is_no_level_is_refused() {
    let (code, stderr) = run(&["--log.level", "info,gpu_exporter=loud"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--log.level") && stderr.contains("\"loud\" is not a level"), "{stderr}");
}

#[test]
fn a_bad_listen_address_is_refused() {
    let (code, stderr) = run(&["--web.listen-address", "nowhere"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--web.listen-address \"nowhere\""), "{stderr}");
}

#[test]
fn flags_can_come_from_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-exporter")).env("GPU_EXPORTER_LABELS", "model=x").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--label \"model\""));
}

#[test]
fn a_dcgm_exporter_release_outside_the_range_stops_the_binary_naming_flag_variable_and_range() {
    for value in ["4.9.0", "2.4.7-2.6.11", "3.3.7", "four"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"))
            .env("GPU_EXPORTER_METRICS_DCGM_EXPORTER_VERSION", value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        for part in [
            "--metrics.dcgm-exporter-version",
            "GPU_EXPORTER_METRICS_DCGM_EXPORTER_VERSION",
            "3.0.0 to 4.8.3",
            &format!("'{value}'"),
        ] {
            assert!(stderr.contains(part), "{value}: the refusal lacks {part:?}: {stderr}");
        }
    }
}

#[test]
fn a_bad_web_config_file_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, "basic_auth_users:\n  prometheus: not-a-bcrypt-hash\n").unwrap();
    let (code, stderr) = run(&["--web.config.file", path.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains(path.to_str().unwrap()) && stderr.contains("basic_auth_users"), "{stderr}");

    std::fs::write(&path, "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n").unwrap();
    let (code, stderr) = run(&["--web.config.file", path.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("tls_server_config.cert_file") && stderr.contains("missing.crt"), "{stderr}");
}
