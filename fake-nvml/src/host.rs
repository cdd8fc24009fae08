//! What a GPU node's driver puts on the host besides NVML, written from the scenario
//! under a root of the caller's choosing, so that NVIDIA's device plugin reads the
//! simulated node and never the machine it runs on.
//!
//! Where the plugin reads (k8s-device-plugin v0.17.4):
//! - `internal/mig/mig-dp.go` `GetMigCapabilityDevicePaths` reads
//!   `/proc/driver/nvidia-caps/mig-minors` and turns each line into the capability path
//!   `/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/[ci<ci>/]access` and the
//!   device node `/dev/nvidia-caps/nvidia-cap<n>`; `internal/rm/nvml_devices.go`
//!   (`nvmlMigDevice.GetPaths`) refuses a MIG device whose GI or CI is missing from that
//!   table, so without the file no MIG device is advertised.
//! - `internal/rm/nvml_devices.go` names a GPU's device node `/dev/nvidia<minor>` from
//!   `nvmlDeviceGetMinorNumber`, and reads `/sys/bus/pci/devices/<bus id>/numa_node`
//!   for its topology hint (go-gpuallocator's `internal/links/pciinfo.go` reads it too).
//! - `internal/rm/nvml_manager.go` / `internal/plugin/server.go` add `/dev/nvidiactl`,
//!   `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` and `/dev/nvidia-modeset` to an
//!   allocation where they exist (`os.Stat`).
//! - `cmd/nvidia-device-plugin/root.go`: with `--container-driver-root=DIR`, device
//!   nodes are given to the kubelet under `DIR/dev` when that directory exists, and
//!   `libnvidia-ml.so.1` is looked for under `DIR/usr/lib64`, `DIR/usr/lib/<arch>-linux-gnu`
//!   and the like.
//! - nvidia-container-toolkit v1.17.8 `internal/nvcaps/nvcaps.go` (vendored there, used
//!   for CDI specs) parses the same `mig-minors` format.
//!
//! The tree ([`tree`]), relative to the root:
//! - `proc/driver/nvidia-caps/mig-minors`: the driver's whole, fixed table (`config 1`,
//!   `monitor 2`, then `gpu<g>/gi<i>/access` and `gpu<g>/gi<i>/ci<c>/access` for 32
//!   GPUs, 15 GPU instances and 8 compute instances, up to `gpu31/gi14/ci7/access
//!   4322`), as NVIDIA's MIG User Guide ("Device Nodes and Capabilities") shows it;
//! - `proc/driver/nvidia/capabilities/mig/{config,monitor}` and, per MIG device of the
//!   scenario, `.../gpu<minor>/mig/gi<gi>/access` and `.../gi<gi>/ci<ci>/access`, each
//!   `DeviceFileMinor: <n>\nDeviceFileMode: <mode>\nDeviceFileModify: 1\n` as in the
//!   same guide;
//! - `dev/nvidia<minor>` per GPU, `dev/nvidiactl`, `dev/nvidia-uvm`,
//!   `dev/nvidia-uvm-tools`, `dev/nvidia-modeset`, and `dev/nvidia-caps/nvidia-cap<n>`
//!   for `config`, `monitor` and each GPU and compute instance of the scenario. These
//!   are empty regular files, not character devices: making device nodes needs
//!   privileges, and the plugin only builds paths from minors and `stat`s the optional
//!   ones (the kubelet hands the paths to the container runtime unopened);
//! - `sys/bus/pci/devices/<bus id>/numa_node` per GPU ([`crate::topology`]);
//! - with a library path given, `usr/lib/<arch>-linux-gnu/libnvidia-ml.so.1` as a symlink
//!   to it, for `--container-driver-root`.
//!
//! The plugin reads `mig-minors`, `numa_node` and the optional device nodes at fixed
//! absolute paths, so it must run where the root's `proc/driver/nvidia-caps`, `sys/bus/pci`
//! and `dev` are mounted over the real ones (a private mount namespace); see
//! `docs/nvml-consumers.md`. Minor numbers: GPU `i` of the scenario has minor `i`.
//!
//! The tree is written by `fake-nvml host-tree SCENARIO ROOT` and, when
//! `FAKE_NVML_HOST_ROOT` is set, by `nvmlInit` (and again when a live scenario is
//! reloaded). Every file is written to a temporary name and renamed, so that a reader
//! never sees half a file; files of MIG devices that a reloaded scenario no longer has
//! are left in place.

use std::path::{Path, PathBuf};

use crate::scenario::Scenario;
use crate::topology::numa_node;

/// The environment variable that makes `nvmlInit` write the tree under its value.
pub const HOST_ROOT_ENV: &str = "FAKE_NVML_HOST_ROOT";

/// GPUs, GPU instances and compute instances per GPU the driver's `mig-minors` covers.
const MINOR_TABLE_GPUS: u32 = 32;
const MINOR_TABLE_GPU_INSTANCES: u32 = 15;
const MINOR_TABLE_COMPUTE_INSTANCES: u32 = 8;
/// `DeviceFileMode` of `mig/config` (0400) and of the other capabilities (0444).
const MODE_CONFIG: u32 = 0o400;
const MODE_READ: u32 = 0o444;

/// Why the tree could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{path}: cannot write the simulated host tree: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// One entry of the tree, relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file with these contents (empty for a device node).
    File { path: PathBuf, contents: String },
    /// A symlink to `target`.
    Link { path: PathBuf, target: PathBuf },
}

impl Entry {
    pub fn path(&self) -> &Path {
        match self {
            Entry::File { path, .. } | Entry::Link { path, .. } => path,
        }
    }
}

fn file(path: impl Into<PathBuf>, contents: impl Into<String>) -> Entry {
    Entry::File { path: path.into(), contents: contents.into() }
}

/// The minor of the `gpu<gpu>/gi<gi>/access` capability (`None` past the table).
pub fn gpu_instance_minor(gpu: u32, gi: u32) -> Option<u32> {
    (gpu < MINOR_TABLE_GPUS && gi < MINOR_TABLE_GPU_INSTANCES)
        .then(|| 3 + (gpu * MINOR_TABLE_GPU_INSTANCES + gi) * (1 + MINOR_TABLE_COMPUTE_INSTANCES))
}

/// The minor of the `gpu<gpu>/gi<gi>/ci<ci>/access` capability (`None` past the table).
pub fn compute_instance_minor(gpu: u32, gi: u32, ci: u32) -> Option<u32> {
    (ci < MINOR_TABLE_COMPUTE_INSTANCES).then_some(())?;
    gpu_instance_minor(gpu, gi).map(|m| m + 1 + ci)
}

/// `/proc/driver/nvidia-caps/mig-minors` as the driver writes it.
pub fn mig_minors() -> String {
    let mut text = String::from("config 1\nmonitor 2\n");
    for gpu in 0..MINOR_TABLE_GPUS {
        for gi in 0..MINOR_TABLE_GPU_INSTANCES {
            if let Some(minor) = gpu_instance_minor(gpu, gi) {
                text.push_str(&format!("gpu{gpu}/gi{gi}/access {minor}\n"));
            }
            for ci in 0..MINOR_TABLE_COMPUTE_INSTANCES {
                if let Some(minor) = compute_instance_minor(gpu, gi, ci) {
                    text.push_str(&format!("gpu{gpu}/gi{gi}/ci{ci}/access {minor}\n"));
                }
            }
        }
    }
    text
}

fn capability(minor: u32, mode: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
}

/// The bus id as `/sys/bus/pci/devices` names it: lower case, four-digit domain.
pub fn sysfs_bus_id(gpu: &crate::scenario::Gpu) -> String {
    let a = gpu.pci;
    format!("{:04x}:{:02x}:{:02x}.{:x}", a.domain, a.bus, a.device, a.function)
}

/// The whole tree for `scenario`; with `library`, the `libnvidia-ml.so.1` link too.
pub fn tree(scenario: &Scenario, library: Option<&Path>) -> Vec<Entry> {
    let caps = Path::new("proc/driver/nvidia/capabilities");
    let mut entries = vec![
        file("proc/driver/nvidia-caps/mig-minors", mig_minors()),
        file(caps.join("mig/config"), capability(1, MODE_CONFIG)),
        file(caps.join("mig/monitor"), capability(2, MODE_READ)),
        file("dev/nvidiactl", ""),
        file("dev/nvidia-uvm", ""),
        file("dev/nvidia-uvm-tools", ""),
        file("dev/nvidia-modeset", ""),
        file("dev/nvidia-caps/nvidia-cap1", ""),
        file("dev/nvidia-caps/nvidia-cap2", ""),
    ];
    let count = scenario.gpus.len() as u32;
    for gpu in &scenario.gpus {
        let minor = gpu.minor_number();
        entries.push(file(format!("dev/nvidia{minor}"), ""));
        let numa = numa_node(gpu.index, count);
        entries.push(file(format!("sys/bus/pci/devices/{}/numa_node", sysfs_bus_id(gpu)), format!("{numa}\n")));
        for instance in gpu.mig.iter().flatten() {
            let (gi, ci) = (instance.gpu_instance_id, instance.compute_instance_id);
            let dir = caps.join(format!("gpu{minor}/mig/gi{gi}"));
            if let Some(n) = gpu_instance_minor(minor, gi) {
                entries.push(file(dir.join("access"), capability(n, MODE_READ)));
                entries.push(file(format!("dev/nvidia-caps/nvidia-cap{n}"), ""));
            }
            if let Some(n) = compute_instance_minor(minor, gi, ci) {
                entries.push(file(dir.join(format!("ci{ci}/access")), capability(n, MODE_READ)));
                entries.push(file(format!("dev/nvidia-caps/nvidia-cap{n}"), ""));
            }
        }
    }
    if let Some(target) = library {
        let dir = format!("usr/lib/{}-linux-gnu", std::env::consts::ARCH);
        entries.push(Entry::Link { path: Path::new(&dir).join("libnvidia-ml.so.1"), target: target.to_path_buf() });
    }
    entries
}

/// Writes [`tree`] under `root`, each file atomically.
pub fn write(scenario: &Scenario, root: &Path, library: Option<&Path>) -> Result<()> {
    for entry in tree(scenario, library) {
        let path = root.join(entry.path());
        let failed = |source| HostError::Write { path: path.display().to_string(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&temporary);
        match &entry {
            Entry::File { contents, .. } => std::fs::write(&temporary, contents).map_err(failed)?,
            Entry::Link { target, .. } => std::os::unix::fs::symlink(target, &temporary).map_err(failed)?,
        }
        std::fs::rename(&temporary, &path).map_err(failed)?;
    }
    Ok(())
}

/// Writes [`tree`] under `FAKE_NVML_HOST_ROOT` when that is set (and not empty);
/// nothing otherwise.
pub fn write_from_env(scenario: &Scenario) -> Result<()> {
    match std::env::var_os(HOST_ROOT_ENV) {
        Some(root) if !root.is_empty() => write(scenario, Path::new(&root), None),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minors_table_is_the_drivers() {
        let text = mig_minors();
        let lines: Vec<&str> = text.lines().collect();
        // NVIDIA's MIG User Guide and nvidia-container-toolkit's comments quote these lines.
        assert_eq!(
            lines[..6],
            [
                "config 1",
                "monitor 2",
                "gpu0/gi0/access 3",
                "gpu0/gi0/ci0/access 4",
                "gpu0/gi0/ci1/access 5",
                "gpu0/gi0/ci2/access 6"
            ]
        );
        assert!(lines.contains(&"gpu3/gi3/ci3/access 439"));
        assert!(lines.contains(&"gpu6/gi11/ci7/access 920"));
        assert_eq!(lines.last(), Some(&"gpu31/gi14/ci7/access 4322"));
        assert_eq!(lines.len(), 2 + 32 * 15 * 9);
        assert_eq!(compute_instance_minor(0, 1, 0), Some(13));
        assert_eq!(compute_instance_minor(32, 0, 0), None);
    }

    #[test]
    fn the_tree_follows_the_scenario() {
        let scenario = Scenario::parse(
            "n.yaml",
            "gpus:\n  - {model: H100-SXM5-80GB, mig: {layout: all-3g.40gb}}\n  - {model: H100-SXM5-80GB, pci_bus_id: '00000000:3B:00.0'}\n",
        )
        .unwrap();
        let entries = tree(&scenario, None);
        let paths: Vec<String> = entries.iter().map(|e| e.path().display().to_string()).collect();
        for wanted in [
            "dev/nvidia0",
            "dev/nvidia1",
            "proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
            "proc/driver/nvidia/capabilities/gpu0/mig/gi2/ci0/access",
            "dev/nvidia-caps/nvidia-cap12",
            "dev/nvidia-caps/nvidia-cap13",
            "sys/bus/pci/devices/0000:3b:00.0/numa_node",
        ] {
            assert!(paths.iter().any(|p| p == wanted), "{wanted} missing from {paths:?}");
        }
        assert!(!paths.iter().any(|p| p.contains("gpu1/mig")), "GPU 1 is not in MIG mode");
        let gi1 = entries.iter().find(|e| e.path().ends_with("gpu0/mig/gi1/access")).unwrap();
        assert_eq!(
            gi1,
            &file(
                "proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
                "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
            )
        );
        let numa = entries.iter().find(|e| e.path().ends_with("0000:3b:00.0/numa_node")).unwrap();
        assert_eq!(numa, &file("sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n"));
    }
}
