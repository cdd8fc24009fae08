//! `scripts/real-gpu-check` runs on machines without a GPU only against the simulated
//! node, with a stand-in `nvidia-smi` that prints what a real one would for the same
//! node. This keeps the script working between the times a real GPU is at hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{fake_library, repo_root, write_scenario};

const SCENARIO: &str = "gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-11111111-2222-3333-4444-555555555555
    values: {utilization: 63, memory_used_mib: 40960, power_watts: 350.5, temperature_c: 61, sm_clock_mhz: 1755, mem_clock_mhz: 2619}
";

fn stand_in_nvidia_smi(dir: &Path, csv_row: &str) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("nvidia-smi");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ncase \"$*\" in\n  *driver_version*) echo 550.90.07;;\n  *) echo '{csv_row}';;\nesac\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn run_check(dir: &Path, port: u16) -> (i32, String) {
    let scenario = write_scenario(dir, "node.yaml", SCENARIO);
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(repo_root().join("scripts/real-gpu-check"))
        .arg(env!("CARGO_BIN_EXE_gpu-exporter"))
        .arg(port.to_string())
        .env("PATH", path)
        .env("GPU_EXPORTER_NVML_LIBRARY", fake_library())
        .env("FAKE_NVML_SCENARIO", scenario)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn matching_readings_pass_and_call_latencies_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    stand_in_nvidia_smi(
        dir.path(),
        "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA H100 80GB HBM3, 81559, 40960, 62, 348.10, 1755, 2619",
    );
    let (code, report) = run_check(dir.path(), free_port());
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("| 0 | memory total | 81559 MiB | 81559 MiB | 1 MiB | ok |"), "{report}");
    assert!(report.contains("| nvmlDeviceGetPowerUsage |"), "{report}");
    assert!(report.contains("all comparisons within tolerance"), "{report}");
}

#[test]
fn a_reading_outside_its_tolerance_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    stand_in_nvidia_smi(
        dir.path(),
        "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA H100 80GB HBM3, 81559, 40960, 75, 350.50, 1755, 2619",
    );
    let (code, report) = run_check(dir.path(), free_port());
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("| 0 | temperature | 75 C | 61 C | 3 C | FAIL |"), "{report}");
}
