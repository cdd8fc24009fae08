//! NVIDIA's own NVML consumers against fake-nvml.
//!
//! The lists below are every NVML symbol each consumer calls on the paths the simulated
//! node exercises, each with where the consumer calls it, read from the consumers'
//! sources (`docs/nvml-consumers.md` says how, and names the symbols again):
//! - [`DEVICE_PLUGIN`]: NVIDIA's k8s-device-plugin, tag v0.17.4
//!   (github.com/NVIDIA/k8s-device-plugin), with the libraries it vendors under
//!   `vendor/github.com/NVIDIA/`: go-nvml v0.12.9-0 (`pkg/nvml`), go-nvlib v0.7.4
//!   (`pkg/nvlib`), go-gpuallocator v0.5.0. go-nvml binds each symbol lazily, so the first
//!   call to a missing one kills the plugin; where go-nvml picks the newest of several
//!   versions of a call (`pkg/nvml/lib.go`, `updateVersionedSymbols`), the list names the
//!   version it picks on a current driver.
//! - [`NVIDIA_ML_PY`]: nvidia-ml-py 13.615.71 (PyPI), `pynvml.py`: the common query path
//!   (init, versions, enumeration, identity, memory, utilization, temperature, power,
//!   clocks, processes, MIG). pynvml looks each symbol up at call time and raises
//!   `NVMLError_FunctionNotFound` for a missing one.
//! - [`GPUSTAT`]: gpustat 1.1.1 (PyPI; github.com/wookayin/gpustat tag v1.1.1),
//!   `gpustat/core.py` `GPUStatCollection.new_query` and `gpustat/nvml.py`: its default
//!   view.
//!
//! [`every_symbol_the_consumers_call_is_exported`] fails when the built library stops
//! exporting one of them. [`pynvml_and_gpustat_see_the_scenario`] runs the real
//! nvidia-ml-py and gpustat (installed by `scripts/install-test-deps`) on fake-nvml loaded
//! as `libnvidia-ml.so.1`, compares what they saw with the scenario, and checks that every
//! symbol they looked up is exported and on these lists. [`the_host_tree_command_writes_the_node`]
//! checks `fake-nvml host-tree`. The device plugin's call sequences themselves are walked
//! in `tests/device_plugin_calls.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use nvml_wrapper_sys::bindings::NvmlLib;

/// A consumer's list: (symbol, where the consumer calls it).
type Calls = &'static [(&'static str, &'static str)];

/// k8s-device-plugin v0.17.4. Paths are relative to the repository at that tag;
/// `go-nvml/`, `go-nvlib/` and `go-gpuallocator/` stand for `vendor/github.com/NVIDIA/<name>/`.
const DEVICE_PLUGIN: Calls = &[
    // Loading and start-up.
    ("nvmlInit_v2", "go-nvml/pkg/nvml/init.go Init (lib.go picks _v2)"),
    ("nvmlShutdown", "go-nvml/pkg/nvml/init.go Shutdown"),
    ("nvmlErrorString", "go-nvml/pkg/nvml/lib.go load (errorStringFunc, return.go Error)"),
    ("nvmlDeviceGetCount_v2", "go-nvlib/pkg/nvlib/device/device.go VisitDevices (lib.go picks _v2)"),
    ("nvmlDeviceGetHandleByIndex_v2", "go-nvlib/pkg/nvlib/device/device.go VisitDevices (lib.go picks _v2)"),
    ("nvmlDeviceGetName", "go-nvlib/pkg/nvlib/device/device.go isSkipped; internal/rm/device_map.go buildGPUDeviceMap"),
    ("nvmlDeviceGetMigMode", "go-nvlib/pkg/nvlib/device/device.go IsMigEnabled, IsMigCapable (also looked up by name)"),
    ("nvmlDeviceGetUUID", "internal/rm/nvml_devices.go GetUUID; internal/rm/health.go"),
    ("nvmlDeviceGetMinorNumber", "internal/rm/nvml_devices.go GetPaths"),
    ("nvmlDeviceGetPciInfo_v3", "internal/rm/nvml_devices.go GetNumaNode (lib.go picks _v3)"),
    ("nvmlDeviceGetMemoryInfo", "internal/rm/nvml_devices.go GetTotalMemory; go-nvlib mig_device.go GetProfile"),
    ("nvmlDeviceGetCudaComputeCapability", "internal/rm/nvml_devices.go GetComputeCapability"),
    // MIG, mixed and single strategies.
    (
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "go-nvlib/pkg/nvlib/device/device.go VisitMigProfiles; mig_device.go GetProfile",
    ),
    ("nvmlDeviceGetMaxMigDeviceCount", "go-nvlib/pkg/nvlib/device/device.go VisitMigDevices"),
    ("nvmlDeviceGetMigDeviceHandleByIndex", "go-nvlib/pkg/nvlib/device/device.go VisitMigDevices"),
    ("nvmlDeviceIsMigDeviceHandle", "go-nvlib/pkg/nvlib/device/mig_device.go NewMigDevice"),
    (
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "go-nvlib mig_device.go GetProfile; internal/rm/nvml_devices.go, health.go",
    ),
    (
        "nvmlDeviceGetAttributes_v2",
        "go-nvlib mig_device.go GetProfile; internal/rm/device_map.go (single) (lib.go picks _v2)",
    ),
    (
        "nvmlDeviceGetGpuInstanceId",
        "go-nvlib mig_device.go GetProfile; internal/rm/nvml_devices.go GetPaths; health.go",
    ),
    (
        "nvmlDeviceGetComputeInstanceId",
        "go-nvlib mig_device.go GetProfile; internal/rm/nvml_devices.go GetPaths; health.go",
    ),
    ("nvmlDeviceGetGpuInstanceById", "go-nvlib/pkg/nvlib/device/mig_device.go GetProfile"),
    ("nvmlGpuInstanceGetInfo", "go-nvlib/pkg/nvlib/device/mig_device.go GetProfile"),
    ("nvmlGpuInstanceGetComputeInstanceById", "go-nvlib/pkg/nvlib/device/mig_device.go GetProfile"),
    ("nvmlComputeInstanceGetInfo_v2", "go-nvlib/pkg/nvlib/device/mig_device.go GetProfile (lib.go picks _v2)"),
    ("nvmlGpuInstanceGetComputeInstanceProfileInfo", "go-nvlib/pkg/nvlib/device/mig_device.go GetProfile"),
    // Health events.
    ("nvmlEventSetCreate", "internal/rm/health.go checkHealth"),
    ("nvmlDeviceGetHandleByUUID", "internal/rm/health.go checkHealth, getMigDeviceParts (GPU and MIG UUIDs)"),
    ("nvmlDeviceGetSupportedEventTypes", "internal/rm/health.go checkHealth"),
    ("nvmlDeviceRegisterEvents", "internal/rm/health.go checkHealth"),
    ("nvmlEventSetWait_v2", "internal/rm/health.go checkHealth (lib.go picks _v2)"),
    ("nvmlEventSetFree", "internal/rm/health.go checkHealth"),
    // Preferred allocation (internal/rm/nvml_manager.go alignedAlloc -> go-gpuallocator).
    ("nvmlDeviceGetTopologyCommonAncestor", "go-gpuallocator/internal/links/device.go GetP2PLink"),
    ("nvmlDeviceGetNvLinkState", "go-gpuallocator/internal/links/device.go getAllNvLinkRemotePciInfo"),
    (
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "go-gpuallocator/internal/links/device.go getAllNvLinkRemotePciInfo (lib.go picks _v2)",
    ),
    // Time-slicing (internal/rm/device_map.go updateDeviceMapWithReplicas, allocate.go
    // distributedAlloc) makes no NVML call beyond those above.
];

/// nvidia-ml-py 13.615.71, `pynvml.py`: the C symbol behind each function of the common path.
const NVIDIA_ML_PY: Calls = &[
    ("nvmlInitWithFlags", "nvmlInit, nvmlInitWithFlags"),
    ("nvmlShutdown", "nvmlShutdown"),
    ("nvmlErrorString", "nvmlErrorString (NVMLError.__str__)"),
    ("nvmlSystemGetDriverVersion", "nvmlSystemGetDriverVersion"),
    ("nvmlSystemGetNVMLVersion", "nvmlSystemGetNVMLVersion"),
    ("nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion"),
    ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion_v2"),
    ("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"),
    ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
    ("nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByUUID"),
    ("nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"),
    ("nvmlDeviceGetName", "nvmlDeviceGetName"),
    ("nvmlDeviceGetUUID", "nvmlDeviceGetUUID"),
    ("nvmlDeviceGetIndex", "nvmlDeviceGetIndex"),
    ("nvmlDeviceGetSerial", "nvmlDeviceGetSerial"),
    ("nvmlDeviceGetMinorNumber", "nvmlDeviceGetMinorNumber"),
    ("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo"),
    ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo(handle)"),
    ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)"),
    ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetUtilizationRates"),
    ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperature"),
    ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerUsage"),
    ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetEnforcedPowerLimit"),
    ("nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementLimit"),
    ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTotalEnergyConsumption"),
    ("nvmlDeviceGetClockInfo", "nvmlDeviceGetClockInfo"),
    ("nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMaxClockInfo"),
    ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses"),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses"),
    ("nvmlDeviceGetMigMode", "nvmlDeviceGetMigMode"),
    ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMaxMigDeviceCount"),
    ("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetMigDeviceHandleByIndex"),
    ("nvmlDeviceIsMigDeviceHandle", "nvmlDeviceIsMigDeviceHandle"),
    ("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"),
    ("nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetGpuInstanceId"),
    ("nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetComputeInstanceId"),
    ("nvmlDeviceGetAttributes_v2", "nvmlDeviceGetAttributes"),
    ("nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceProfileInfo (version=2, the default)"),
    ("nvmlDeviceGetGpuInstanceById", "nvmlDeviceGetGpuInstanceById"),
    ("nvmlGpuInstanceGetInfo", "nvmlGpuInstanceGetInfo"),
    ("nvmlGpuInstanceGetComputeInstanceById", "nvmlGpuInstanceGetComputeInstanceById"),
    ("nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceGetInfo"),
    ("nvmlGpuInstanceGetComputeInstanceProfileInfoV", "nvmlGpuInstanceGetComputeInstanceProfileInfo (version=2)"),
];

/// gpustat 1.1.1: `gpustat/core.py` `GPUStatCollection.new_query` through `gpustat/nvml.py`.
const GPUSTAT: Calls = &[
    ("nvmlInitWithFlags", "core.py new_query: N.nvmlInit"),
    ("nvmlShutdown", "core.py new_query: N.nvmlShutdown"),
    ("nvmlErrorString", "NVMLError.__str__ of an error it logs"),
    ("nvmlDeviceGetCount_v2", "core.py new_query: N.nvmlDeviceGetCount"),
    ("nvmlDeviceGetHandleByIndex_v2", "core.py new_query: N.nvmlDeviceGetHandleByIndex"),
    ("nvmlDeviceGetName", "core.py get_gpu_info"),
    ("nvmlDeviceGetUUID", "core.py get_gpu_info"),
    ("nvmlDeviceGetTemperature", "core.py get_gpu_info"),
    ("nvmlDeviceGetFanSpeed", "core.py get_gpu_info (not modelled: NOT_SUPPORTED)"),
    ("nvmlDeviceGetMemoryInfo_v2", "nvml.py nvmlDeviceGetMemoryInfo (version=nvmlMemory_v2)"),
    ("nvmlDeviceGetUtilizationRates", "core.py get_gpu_info"),
    ("nvmlDeviceGetEncoderUtilization", "core.py get_gpu_info"),
    ("nvmlDeviceGetDecoderUtilization", "core.py get_gpu_info"),
    ("nvmlDeviceGetPowerUsage", "core.py get_gpu_info"),
    ("nvmlDeviceGetEnforcedPowerLimit", "core.py get_gpu_info"),
    ("nvmlDeviceGetComputeRunningProcesses_v3", "core.py get_gpu_info (nvml.py falls back to _v2)"),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", "core.py get_gpu_info (nvml.py falls back to _v2)"),
    ("nvmlDeviceGetIndex", "core.py get_gpu_info"),
    ("nvmlSystemGetDriverVersion", "core.py new_query"),
];

const CONSUMERS: &[(&str, Calls)] = &[
    ("k8s-device-plugin v0.17.4", DEVICE_PLUGIN),
    ("nvidia-ml-py 13.615.71", NVIDIA_ML_PY),
    ("gpustat 1.1.1", GPUSTAT),
];

/// Python packages the Python test needs, as `scripts/install-test-deps` pins them.
const PYTHON_PACKAGES: &str = "nvidia-ml-py==13.615.71 gpustat==1.1.1";

#[test]
fn every_symbol_the_consumers_call_is_exported() {
    let path = common::library();
    // SAFETY: loading the library runs no code of ours (no constructors); its symbols
    // are only looked up here, never called.
    let lib = unsafe { NvmlLib::new(&path) }.expect("the built library loads");
    let mut missing = Vec::new();
    for (consumer, calls) in CONSUMERS {
        for (symbol, site) in *calls {
            // SAFETY: the symbol is looked up, not called; the pointer type is never used.
            if unsafe { lib.__library.get::<*const ()>(symbol.as_bytes()) }.is_err() {
                missing.push(format!("{symbol} ({consumer}: {site})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} does not export what NVIDIA's consumers call:\n{}",
        path.display(),
        missing.join("\n")
    );
}

#[test]
fn the_lists_are_in_the_docs() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/nvml-consumers.md");
    let text = std::fs::read_to_string(&docs).expect("docs/nvml-consumers.md");
    for (consumer, calls) in CONSUMERS {
        for (symbol, _) in *calls {
            assert!(text.contains(&format!("`{symbol}`")), "{}: {consumer} calls `{symbol}`", docs.display());
        }
    }
}

/// A node with a whole GPU (with a process) and a GPU cut into two MIG devices.
const SCENARIO: &str = r#"
driver_version: 550.90.07
cuda_version: "12.4"
gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-11111111-2222-3333-4444-555555555555
    values: {utilization: 37, temperature_c: 41, power_watts: 250, memory_used_mib: 1024}
  - model: H100-SXM5-80GB
    uuid: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee
    pci_bus_id: "00000000:9A:00.0"
    values: {temperature_c: 35, power_watts: 70}
    mig:
      instances:
        - {profile: 3g.40gb, uuid: MIG-aaaaaaaa-0000-4000-8000-000000000001}
        - {profile: 1g.10gb+me, uuid: MIG-aaaaaaaa-0000-4000-8000-000000000002}
host_processes:
  - {pid: 4242, gpu: 0, memory_used_mib: 512}
"#;

const MIB: u64 = 1024 * 1024;

/// The lines of the helper's output that start with `tag`, split at tabs.
fn facts<'a>(output: &'a str, tag: &str) -> Vec<Vec<&'a str>> {
    output.lines().map(|l| l.split('\t').collect::<Vec<_>>()).filter(|f| f[0] == tag).map(|f| f[1..].to_vec()).collect()
}

/// `python3`, with nvidia-ml-py and gpustat importable; a test failure saying how to
/// install them otherwise (the repository's tests fail on a missing tool rather than skip).
fn python() -> String {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python).args(["-c", "import pynvml, gpustat"]).output();
    match probe {
        Ok(out) if out.status.success() => python,
        Ok(out) => panic!(
            "this test needs nvidia-ml-py and gpustat for {python}: run scripts/install-test-deps, or \
             `{python} -m pip install {PYTHON_PACKAGES}` ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("this test needs {python} ({e}); set PYTHON to another interpreter"),
    }
}

#[test]
fn pynvml_and_gpustat_see_the_scenario() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir(&lib_dir).unwrap();
    std::os::unix::fs::symlink(common::library(), lib_dir.join("libnvidia-ml.so.1")).unwrap();
    let scenario = dir.path().join("node.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let helper: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvml_consumers.py");
    let out = Command::new(&python)
        .arg(&helper)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env("FAKE_NVML_SCENARIO", &scenario)
        .env("FAKE_NVML_FROZEN_AT", "0")
        .env_remove("FAKE_NVML_HOST_ROOT")
        .env_remove("FAKE_NVML_LIVE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}\n{}", helper.display(), String::from_utf8_lossy(&out.stderr));

    // pynvml's common path.
    assert_eq!(facts(&stdout, "driver"), [["550.90.07"]]);
    assert_eq!(facts(&stdout, "cuda"), [["12040"]]);
    assert_eq!(facts(&stdout, "count"), [["2"]]);
    let total = (81559 * MIB).to_string();
    let gpus = facts(&stdout, "gpu");
    let (used0, used1) = ((1024 * MIB).to_string(), "0".to_string());
    assert_eq!(
        gpus[0],
        [
            "0",
            "GPU-11111111-2222-3333-4444-555555555555",
            "NVIDIA H100 80GB HBM3",
            &total,
            &used0,
            "0",
            "00000000:18:00.0",
            "41",
            "250000",
            "700000",
            "1980",
            "1980",
            "37",
            "4242",
            "-",
            "0"
        ]
    );
    assert_eq!(
        gpus[1],
        [
            "1",
            "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            "NVIDIA H100 80GB HBM3",
            &total,
            &used1,
            "1",
            "00000000:9A:00.0",
            "35",
            "70000",
            "700000",
            "1980",
            "1980",
            "NA",
            "-",
            "-",
            "1"
        ],
        "a GPU in MIG mode has no utilization (NOT_SUPPORTED)"
    );
    assert_eq!(facts(&stdout, "error"), [["utilization", "NVMLError_NotSupported"]]);
    assert_eq!(
        facts(&stdout, "byuuid"),
        [["GPU-11111111-2222-3333-4444-555555555555", "0"], ["GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "1"]]
    );
    assert_eq!(facts(&stdout, "unknown_uuid"), [["NVMLError_NotFound", "Not Found"]]);
    let parent = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    let (large, small) = ((40320 * MIB).to_string(), (9984 * MIB).to_string());
    assert_eq!(
        facts(&stdout, "mig"),
        [
            [
                "1",
                "0",
                "MIG-aaaaaaaa-0000-4000-8000-000000000001",
                "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                &large,
                "1",
                "0",
                parent,
                "9",
                "MIG 3g.40gb",
                "2",
                "MIG 3g.40gb",
                "60"
            ],
            [
                "1",
                "1",
                "MIG-aaaaaaaa-0000-4000-8000-000000000002",
                "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me",
                &small,
                "2",
                "0",
                parent,
                "20",
                "MIG 1g.10gb+me",
                "0",
                "MIG 1g.10gb+me",
                "16"
            ]
        ]
    );

    // gpustat's default view.
    assert_eq!(
        facts(&stdout, "gpustat"),
        [
            [
                "0",
                "GPU-11111111-2222-3333-4444-555555555555",
                "NVIDIA H100 80GB HBM3",
                "81559",
                "1024",
                "41",
                "250",
                "37"
            ],
            [
                "1",
                "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                "NVIDIA H100 80GB HBM3",
                "81559",
                "0",
                "35",
                "70",
                "None"
            ]
        ]
    );
    let view = facts(&stdout, "view");
    assert!(view[0][0].contains("550.90.07"), "the header names the driver: {view:?}");
    assert!(
        view[1][0].starts_with("[0] NVIDIA H100 80GB HBM3 |") && view[1][0].contains("1024 / 81559 MB"),
        "{view:?}"
    );
    assert!(view[2][0].starts_with("[1] NVIDIA H100 80GB HBM3 |") && view[2][0].contains("0 / 81559 MB"), "{view:?}");

    // Every symbol they looked up was there, and is on the lists above.
    let listed: Vec<&str> = NVIDIA_ML_PY.iter().chain(GPUSTAT).map(|(s, _)| *s).collect();
    let looked_up = facts(&stdout, "symbol");
    assert!(looked_up.len() > 30, "{looked_up:?}");
    for fact in &looked_up {
        assert_eq!(fact[1], "found", "pynvml found no {}", fact[0]);
        assert!(listed.contains(&fact[0]), "{} is looked up but on no list: add it with its call site", fact[0]);
    }
}

#[test]
fn the_host_tree_command_writes_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("node.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let root = dir.path().join("host");
    let library = common::library();
    let out = Command::new(env!("CARGO_BIN_EXE_fake-nvml"))
        .args(["host-tree".as_ref(), scenario.as_os_str(), root.as_os_str(), "--library".as_ref(), library.as_os_str()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let minors = read("proc/driver/nvidia-caps/mig-minors");
    assert!(minors.starts_with("config 1\nmonitor 2\ngpu0/gi0/access 3\n"), "{}", &minors[..60]);
    // GPU 1 (minor 1) has GPU instances 1 and 2, each with compute instance 0.
    for (gi, minor) in [(1, 147), (2, 156)] {
        assert!(minors.contains(&format!("gpu1/gi{gi}/access {minor}\n")));
        assert_eq!(
            read(&format!("proc/driver/nvidia/capabilities/gpu1/mig/gi{gi}/access")),
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
        );
        assert!(root.join(format!("proc/driver/nvidia/capabilities/gpu1/mig/gi{gi}/ci0/access")).is_file());
        assert!(root.join(format!("dev/nvidia-caps/nvidia-cap{}", minor + 1)).is_file());
    }
    assert!(!root.join("proc/driver/nvidia/capabilities/gpu0").exists(), "GPU 0 is not in MIG mode");
    for node in ["dev/nvidia0", "dev/nvidia1", "dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools"] {
        assert!(root.join(node).is_file(), "{node}");
    }
    assert_eq!(read("sys/bus/pci/devices/0000:18:00.0/numa_node"), "0\n");
    assert_eq!(read("sys/bus/pci/devices/0000:9a:00.0/numa_node"), "1\n");
    let link = root.join(format!("usr/lib/{}-linux-gnu/libnvidia-ml.so.1", std::env::consts::ARCH));
    assert_eq!(std::fs::read_link(&link).unwrap(), library);

    let bad = Command::new(env!("CARGO_BIN_EXE_fake-nvml")).args(["host-tree", "/nonexistent.yaml", "/tmp/x"]).output();
    let bad = bad.unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent.yaml"), "names the file");
}
