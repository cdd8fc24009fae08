//! `scripts/real-gpu-check` runs on machines without a GPU only against the simulated
//! node, with a stand-in `nvidia-smi` that prints what a real one would for the same
//! node (readings, and on the MIG GPU `mig -lgip`, `mig -lgi` and `-L`). This keeps
//! the script working between the times a real GPU is at hand.

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
  - model: H100-SXM5-80GB
    uuid: GPU-22222222-2222-3333-4444-555555555555
    values: {memory_used_mib: 0, power_watts: 300, temperature_c: 50}
    mig:
      instances:
        - {profile: 3g.40gb, uuid: MIG-33333333-2222-3333-4444-555555555555}
        - {profile: 1g.10gb+me, uuid: MIG-44444444-2222-3333-4444-555555555555}
";

const READINGS: &str = "\
0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA H100 80GB HBM3, 81559, 40960, 62, 348.10, 1755, 2619
1, GPU-22222222-2222-3333-4444-555555555555, NVIDIA H100 80GB HBM3, 81559, 0, 50, 300.00, 1980, 2619";

const MIG_MODE: &str = "0, Disabled\n1, Enabled";

/// `nvidia-smi mig -lgip -i 1` for the MIG GPU above: 3g.40gb and 1g.10gb+me taken.
const PROFILES: &str = "\
+-------------------------------------------------------------------------------+
| GPU instance profiles:                                                        |
| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                                Free/Total   GiB              CE    JPEG  OFA  |
|===============================================================================|
|   1  MIG 1g.10gb         19     3/7        9.75       No     16     1     0   |
|                                                               1     0     0   |
+-------------------------------------------------------------------------------+
|   1  MIG 1g.10gb+me      20     0/1        9.75       No     16     1     0   |
|                                                               1     1     1   |
+-------------------------------------------------------------------------------+
|   1  MIG 1g.20gb         15     1/4        19.62      No     16     1     0   |
|                                                               1     0     0   |
+-------------------------------------------------------------------------------+
|   1  MIG 2g.20gb         14     1/3        19.62      No     32     1     0   |
|                                                               2     0     0   |
+-------------------------------------------------------------------------------+
|   1  MIG 3g.40gb          9     0/2        39.38      No     60     2     0   |
|                                                               3     0     0   |
+-------------------------------------------------------------------------------+
|   1  MIG 4g.40gb          5     0/1        39.38      No     64     2     0   |
|                                                               4     0     0   |
+-------------------------------------------------------------------------------+
|   1  MIG 7g.80gb          0     0/1        78.88      No    132     4     0   |
|                                                               7     1     1   |
+-------------------------------------------------------------------------------+";

const INSTANCES: &str = "\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name               Profile  Instance   Placement  |
|                            ID       ID       Start:Size |
|=========================================================|
|   1  MIG 3g.40gb            9        1          0:4     |
+---------------------------------------------------------+
|   1  MIG 1g.10gb+me        20        2          4:1     |
+---------------------------------------------------------+";

const LIST: &str = "\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-2222-3333-4444-555555555555)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-22222222-2222-3333-4444-555555555555)
  MIG 3g.40gb     Device  0: (UUID: MIG-33333333-2222-3333-4444-555555555555)
  MIG 1g.10gb+me  Device  1: (UUID: MIG-44444444-2222-3333-4444-555555555555)";

/// What the stand-in prints for each kind of query.
struct Smi<'a> {
    readings: &'a str,
    profiles: &'a str,
    instances: &'a str,
    list: &'a str,
}

const MATCHING: Smi<'static> = Smi { readings: READINGS, profiles: PROFILES, instances: INSTANCES, list: LIST };

fn stand_in_nvidia_smi(dir: &Path, smi: &Smi<'_>) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, text) in [
        ("readings", smi.readings),
        ("mig-mode", MIG_MODE),
        ("lgip", smi.profiles),
        ("lgi", smi.instances),
        ("list", smi.list),
    ] {
        std::fs::write(dir.join(name), format!("{text}\n")).unwrap();
    }
    let d = dir.display();
    let script = bin.join("nvidia-smi");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$*\" in\n  *driver_version*) echo 550.90.07;;\n  *mig.mode.current*) cat {d}/mig-mode;;\n  \
             *-lgip*) cat {d}/lgip;;\n  *-lgi*) cat {d}/lgi;;\n  -L) cat {d}/list;;\n  *) cat {d}/readings;;\nesac\n"
        ),
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
    let report = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), report)
}

#[test]
fn matching_readings_pass_and_call_latencies_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    stand_in_nvidia_smi(dir.path(), &MATCHING);
    let (code, report) = run_check(dir.path(), test_support::free_port());
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("| 0 | memory total | 81559 MiB | 81559 MiB | 1 MiB | ok |"), "{report}");
    assert!(report.contains("| nvmlDeviceGetPowerUsage |"), "{report}");
    assert!(report.contains("all comparisons within tolerance"), "{report}");
}

#[test]
fn the_mig_layout_and_the_reads_on_mig_handles_are_compared() {
    let dir = tempfile::tempdir().unwrap();
    stand_in_nvidia_smi(dir.path(), &MATCHING);
    let (code, report) = run_check(dir.path(), test_support::free_port());
    assert_eq!(code, 0, "{report}");
    for row in [
        "| 1 | profile 1g.10gb (id 19): instances free | 3 | 3 | ok |",
        "| 1 | profile 1g.10gb+me (id 20): instances free | 0 | 0 | ok |",
        "| 1 | profile 7g.80gb (id 0): instances free | 0 | 0 | ok |",
        "| 1 | GPU instance 1 | 3g.40gb | 3g.40gb | ok |",
        "| 1 | GPU instance 2 | 1g.10gb+me | 1g.10gb+me | ok |",
        "| 1 | MIG device MIG-44444444-2222-3333-4444-555555555555 | 1g.10gb+me | 1g.10gb+me | ok |",
        "| 1 | MIG device MIG-33333333-2222-3333-4444-555555555555 memory total (MIG handle) | 40325 MiB | 40320 MiB | ok |",
        "| 1 | MIG device MIG-44444444-2222-3333-4444-555555555555 processes (MIG handle) | answered | 0 | ok |",
    ] {
        assert!(report.contains(row), "missing {row}:\n{report}");
    }
}

#[test]
fn a_reading_outside_its_tolerance_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let readings = READINGS.replace(", 62, 348.10,", ", 75, 350.50,");
    stand_in_nvidia_smi(dir.path(), &Smi { readings: &readings, ..MATCHING });
    let (code, report) = run_check(dir.path(), test_support::free_port());
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("| 0 | temperature | 75 C | 61 C | 3 C | FAIL |"), "{report}");
}

#[test]
fn a_mig_layout_the_exporter_does_not_show_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    // A driver that offers a profile and has a MIG device the exporter does not report.
    let profiles = PROFILES.replace(
        "|   1  MIG 1g.20gb ",
        "|   1  MIG 1g.10gb-me      47     7/7        9.75       No     16     0     0   |\n|   1  MIG 1g.20gb ",
    );
    let list = format!("{LIST}\n  MIG 1g.10gb     Device  2: (UUID: MIG-55555555-2222-3333-4444-555555555555)");
    stand_in_nvidia_smi(dir.path(), &Smi { profiles: &profiles, list: &list, ..MATCHING });
    let (code, report) = run_check(dir.path(), test_support::free_port());
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("| 1 | profile 1g.10gb-me (id 47): instances free | 7 | absent | FAIL |"), "{report}");
    assert!(
        report.contains("| 1 | MIG device MIG-55555555-2222-3333-4444-555555555555 | 1g.10gb | absent | FAIL |"),
        "{report}"
    );
    assert!(report.contains("comparison(s) outside tolerance"), "{report}");
}
