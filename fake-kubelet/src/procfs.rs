//! A fake `/proc` for the scenario's GPU processes: `<dir>/<pid>/cgroup` and
//! `<dir>/<pid>/stat`, in the node's cgroup flavour (cgroup v1 or v2, systemd or
//! cgroupfs driver, containerd or CRI-O naming, the pod's QoS class), as the exporter
//! finds them under `--path.procfs`.
//!
//! Processes with `in_procfs: false` are left out: they stand for processes that exited
//! between NVML's list and the exporter's look at `/proc`. Host processes get a
//! `system.slice` cgroup.

use std::path::Path;

use fake_nvml::scenario::pods::{CgroupDriver, QosClass, Runtime};
use fake_nvml::scenario::{KubeletSpec, Pod, Scenario};

/// Why the tree could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ProcfsError {
    #[error("{path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = ProcfsError> = std::result::Result<T, E>;

/// The cgroup path of a container in the kubelet's flavour.
pub fn container_cgroup(kubelet: &KubeletSpec, qos: QosClass, pod_uid: &str, container_id: &str) -> String {
    let container = match (kubelet.cgroup_driver, kubelet.runtime) {
        (CgroupDriver::Systemd, Runtime::Containerd) => format!("cri-containerd-{container_id}.scope"),
        (CgroupDriver::Systemd, Runtime::CriO) => format!("crio-{container_id}.scope"),
        (CgroupDriver::Cgroupfs, Runtime::Containerd) => container_id.to_string(),
        (CgroupDriver::Cgroupfs, Runtime::CriO) => format!("crio-{container_id}"),
    };
    let qos_name = match qos {
        QosClass::Guaranteed => None,
        QosClass::Burstable => Some("burstable"),
        QosClass::BestEffort => Some("besteffort"),
    };
    match (kubelet.cgroup_driver, qos_name) {
        (CgroupDriver::Systemd, None) => {
            format!("/kubepods.slice/kubepods-pod{}.slice/{container}", pod_uid.replace('-', "_"))
        }
        (CgroupDriver::Systemd, Some(q)) => format!(
            "/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{}.slice/{container}",
            pod_uid.replace('-', "_")
        ),
        (CgroupDriver::Cgroupfs, None) => format!("/kubepods/pod{pod_uid}/{container}"),
        (CgroupDriver::Cgroupfs, Some(q)) => format!("/kubepods/{q}/pod{pod_uid}/{container}"),
    }
}

/// The content of `/proc/<pid>/cgroup` for a process in `path`.
pub fn cgroup_file(kubelet: &KubeletSpec, path: &str) -> String {
    if kubelet.cgroup_version == 1 {
        let controllers = ["pids", "memory", "devices", "cpu,cpuacct", "cpuset", "hugetlb", "blkio", "freezer"];
        let mut out = String::new();
        for (i, c) in controllers.iter().enumerate() {
            out.push_str(&format!("{}:{c}:{path}\n", controllers.len() + 1 - i));
        }
        out.push_str(&format!("1:name=systemd:{path}\n0::/\n"));
        out
    } else {
        format!("0::{path}\n")
    }
}

/// A `/proc/<pid>/stat` line with `start_ticks` in field 22.
pub fn stat_line(pid: u32, comm: &str, start_ticks: u64) -> String {
    format!(
        "{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 2000 0 0 0 150 40 0 0 20 0 24 0 {start_ticks} 9876543210 40000 18446744073709551615 1 1 0 0 0 0 0 4096 1260 0 0 0 17 5 0 0 0 0 0\n"
    )
}

/// The cgroup path of one scenario process.
pub fn process_cgroup(scenario: &Scenario, owner: Option<(usize, usize)>) -> String {
    let Some((p, c)) = owner else { return "/system.slice/gpu-job.service".into() };
    match scenario.pods.get(p).and_then(|pod: &Pod| pod.containers.get(c).map(|container| (pod, container))) {
        Some((pod, container)) => container_cgroup(&scenario.kubelet, pod.qos, &pod.uid, &container.id),
        None => "/system.slice/gpu-job.service".into(),
    }
}

/// Writes the tree for every process with `in_procfs: true` under `dir`.
pub fn write_tree(scenario: &Scenario, dir: &Path) -> Result<()> {
    for process in scenario.processes.iter().filter(|p| p.in_procfs) {
        let pid_dir = dir.join(process.pid.to_string());
        let cgroup = cgroup_file(&scenario.kubelet, &process_cgroup(scenario, process.owner));
        let stat = stat_line(process.pid, "python3", 100_000 + u64::from(process.pid));
        for (path, content) in [(pid_dir.join("cgroup"), cgroup), (pid_dir.join("stat"), stat)] {
            std::fs::create_dir_all(&pid_dir)
                .and_then(|()| std::fs::write(&path, content))
                .map_err(|source| ProcfsError::Write { path: path.display().to_string(), source })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50";
    const CID: &str = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";

    fn spec(version: u8, driver: CgroupDriver, runtime: Runtime) -> KubeletSpec {
        KubeletSpec { cgroup_version: version, cgroup_driver: driver, runtime }
    }

    #[test]
    fn paths_follow_the_flavour() {
        let u = UID.replace('-', "_");
        let cases = [
            (
                spec(2, CgroupDriver::Systemd, Runtime::Containerd),
                QosClass::Burstable,
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope"
                ),
            ),
            (
                spec(2, CgroupDriver::Systemd, Runtime::CriO),
                QosClass::Guaranteed,
                format!("/kubepods.slice/kubepods-pod{u}.slice/crio-{CID}.scope"),
            ),
            (
                spec(1, CgroupDriver::Cgroupfs, Runtime::Containerd),
                QosClass::BestEffort,
                format!("/kubepods/besteffort/pod{UID}/{CID}"),
            ),
            (
                spec(1, CgroupDriver::Cgroupfs, Runtime::CriO),
                QosClass::Guaranteed,
                format!("/kubepods/pod{UID}/crio-{CID}"),
            ),
        ];
        for (kubelet, qos, expected) in cases {
            assert_eq!(container_cgroup(&kubelet, qos, UID, CID), expected);
        }
    }

    #[test]
    fn cgroup_files_have_the_version_shape() {
        let v2 = cgroup_file(&spec(2, CgroupDriver::Systemd, Runtime::Containerd), "/a");
        assert_eq!(v2, "0::/a\n");
        let v1 = cgroup_file(&spec(1, CgroupDriver::Cgroupfs, Runtime::Containerd), "/a");
        assert!(v1.starts_with("9:pids:/a\n8:memory:/a\n"), "{v1}");
        assert!(v1.ends_with("1:name=systemd:/a\n0::/\n"), "{v1}");
    }
}
