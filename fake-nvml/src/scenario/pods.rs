//! Pods and processes on the simulated node.
//!
//! NVML sees processes (PID, GPU or MIG instance, memory, SM utilization); the kubelet
//! sees pods, their containers and the device ids allocated to them; `/proc/<pid>/cgroup`
//! ties a PID to its pod and container. One scenario describes all three so that the
//! simulated NVML library and the simulated kubelet (`fake-kubelet`) agree.
//!
//! ```yaml
//! kubelet: {cgroup_version: 2, cgroup_driver: systemd, runtime: containerd}
//! pods:
//!   - namespace: inference
//!     name: llm-0
//!     containers:
//!       - name: server
//!         devices: [{resource: nvidia.com/mig-3g.40gb, gpu: 0, mig: 1}]
//!         processes: [{pid: 4242, gpu: 0, mig: 1, memory_used_mib: 30000, sm_utilization: 60}]
//! host_processes: [{pid: 900, gpu: 3, memory_used_mib: 500}]
//! ```
//! A device entry names a whole GPU (`gpu: 2`), a MIG instance (`gpu: 0, mig: 1`, by its
//! position in the layout) or a time-slicing replica (`gpu: 2, replica: 3`, the device
//! plugin's `<uuid>::3`; under `device_plugin.time_slicing` every whole GPU is held as a
//! replica), under the resource the plugin offers it as (see [`super::DevicePlugin`]). A claim entry (`claims: [{name: c, gpu: 0, mig: 1}]`) names a
//! device the node's DRA driver publishes (see [`super::dra`]).

use serde::Deserialize;

use super::dra::{self, Dra};
use super::{DevicePlugin, Gpu, MigStrategy, Signal, TimeSlicing};

/// How the node's container runtime names cgroups.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeletSpec {
    #[serde(default = "default_cgroup_version")]
    pub cgroup_version: u8,
    #[serde(default)]
    pub cgroup_driver: CgroupDriver,
    #[serde(default)]
    pub runtime: Runtime,
}

impl Default for KubeletSpec {
    fn default() -> Self {
        KubeletSpec { cgroup_version: 2, cgroup_driver: CgroupDriver::Systemd, runtime: Runtime::Containerd }
    }
}

fn default_cgroup_version() -> u8 {
    2
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupDriver {
    #[default]
    Systemd,
    Cgroupfs,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    #[default]
    Containerd,
    CriO,
}

impl Runtime {
    /// The prefix of `status.containerStatuses[].containerID`.
    pub fn scheme(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        }
    }
}

/// Pod QoS class, which decides the cgroup parent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QosClass {
    #[default]
    Guaranteed,
    Burstable,
    BestEffort,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    #[serde(default)]
    pub qos: QosClass,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub containers: Vec<ContainerSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    pub name: String,
    /// 64 hex digits; generated when absent.
    pub id: Option<String>,
    #[serde(default)]
    pub devices: Vec<DeviceRef>,
    /// Devices allocated through ResourceClaims.
    #[serde(default)]
    pub claims: Vec<ClaimRef>,
    #[serde(default)]
    pub processes: Vec<ProcessSpec>,
}

/// A device allocated through a ResourceClaim of the pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRef {
    /// The ResourceClaim's name.
    pub name: String,
    pub gpu: u32,
    pub mig: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRef {
    /// e.g. `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`.
    pub resource: String,
    pub gpu: u32,
    pub mig: Option<u32>,
    pub replica: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: u32,
    pub gpu: u32,
    /// Position of the MIG instance the process runs in.
    pub mig: Option<u32>,
    /// Default 0.
    pub memory_used_mib: Option<Signal>,
    /// Percent of the GPU's SMs the process kept busy. Default 0.
    pub sm_utilization: Option<Signal>,
    /// Scenario second the process starts (default 0) and ends (default never).
    #[serde(default)]
    pub start_s: f64,
    pub end_s: Option<f64>,
    /// False for a process that has already left `/proc` when the exporter looks.
    #[serde(default = "yes")]
    pub in_procfs: bool,
    /// A client of the MPS server: NVML lists it among MPS processes, not compute ones.
    #[serde(default)]
    pub mps: bool,
}

fn yes() -> bool {
    true
}

/// A resolved pod.
#[derive(Debug, Clone)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub qos: QosClass,
    pub labels: std::collections::BTreeMap<String, String>,
    pub containers: Vec<Container>,
}

#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
    /// 64 hex digits, without the runtime scheme.
    pub id: String,
    /// Resource name and device id as the kubelet reports them.
    pub devices: Vec<(String, String)>,
    /// Devices allocated through claims.
    pub claims: Vec<ClaimedDevice>,
}

/// A device a container holds through a claim, as pod-resources reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDevice {
    pub claim: String,
    /// The device's name in the DRA driver's pool.
    pub device: String,
    /// `GPU-...` or `MIG-...`, for checks.
    pub uuid: String,
}

/// A process NVML reports, resolved.
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    pub gpu: u32,
    pub mig: Option<u32>,
    pub memory_used_mib: Option<Signal>,
    pub sm_utilization: Option<Signal>,
    pub start_s: f64,
    pub end_s: Option<f64>,
    pub in_procfs: bool,
    pub mps: bool,
    /// (pod index, container index) in `Scenario::pods`; `None` for host processes.
    pub owner: Option<(usize, usize)>,
}

impl Process {
    pub fn alive(&self, t: f64) -> bool {
        t >= self.start_s && self.end_s.is_none_or(|end| t < end)
    }
}

/// Deterministic UID for a pod without one.
pub fn default_pod_uid(namespace: &str, name: &str) -> String {
    let h = fnv(format!("{namespace}/{name}").as_bytes());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (h >> 32) as u32,
        (h >> 16) as u16,
        (h >> 4) & 0xfff,
        (h >> 20) & 0xfff,
        h & 0xffff_ffff_ffff
    )
}

/// Deterministic 64-hex-digit container id.
pub fn default_container_id(pod_uid: &str, container: &str) -> String {
    let a = fnv(format!("{pod_uid}/{container}/a").as_bytes());
    let b = fnv(format!("{pod_uid}/{container}/b").as_bytes());
    let c = fnv(format!("{pod_uid}/{container}/c").as_bytes());
    let d = fnv(format!("{pod_uid}/{container}/d").as_bytes());
    format!("{a:016x}{b:016x}{c:016x}{d:016x}")
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Resolves pods and processes against the GPUs; device ids become what the kubelet
/// reports (GPU UUID, MIG UUID, or `<uuid>::<replica>`). Errors are (field, reason).
pub(super) fn resolve(
    gpus: &[Gpu],
    dra: Option<&Dra>,
    plugin: DevicePlugin,
    specs: Vec<PodSpec>,
    host: Vec<ProcessSpec>,
) -> Result<(Vec<Pod>, Vec<Process>), (String, String)> {
    let mut pods_out: Vec<Pod> = Vec::new();
    let mut processes: Vec<Process> = Vec::new();
    // Device id -> who holds it, to refuse double allocation.
    let mut taken: Vec<(String, String)> = Vec::new();
    for (p, pod) in specs.into_iter().enumerate() {
        let at = |field: &str| format!("pods[{p}].{field}");
        if pods_out.iter().any(|o| o.namespace == pod.namespace && o.name == pod.name) {
            return Err((at("name"), format!("{}/{} is listed twice", pod.namespace, pod.name)));
        }
        let uid = match pod.uid {
            Some(u) if u.len() == 36 && u.chars().all(|c| c.is_ascii_hexdigit() || c == '-') => u,
            Some(u) => return Err((at("uid"), format!("{u:?} is not a UUID"))),
            None => default_pod_uid(&pod.namespace, &pod.name),
        };
        if pod.containers.is_empty() {
            return Err((at("containers"), "a pod has at least one container".into()));
        }
        let mut containers: Vec<Container> = Vec::new();
        for (c, spec) in pod.containers.into_iter().enumerate() {
            let at = |field: &str| format!("pods[{p}].containers[{c}].{field}");
            if containers.iter().any(|o| o.name == spec.name) {
                return Err((at("name"), format!("container {:?} is listed twice", spec.name)));
            }
            let id = match spec.id {
                Some(id) if id.len() == 64 && id.chars().all(|ch| ch.is_ascii_hexdigit()) => id,
                Some(id) => return Err((at("id"), format!("{id:?} is not 64 hex digits"))),
                None => default_container_id(&uid, &spec.name),
            };
            let owner = format!("{}/{}/{}", pod.namespace, pod.name, spec.name);
            let mut devices = Vec::new();
            for (d, device) in spec.devices.iter().enumerate() {
                if dra.is_some_and(|dra| dra.publishes(device.gpu)) {
                    let reason =
                        format!("GPU {} is the DRA driver's (dra.gpus): allocate it through a claim", device.gpu);
                    return Err((at(&format!("devices[{d}]")), reason));
                }
                if let Some(t) = plugin.time_slicing.filter(|_| device.mig.is_none()) {
                    shared_replica(t, device).map_err(|r| (at(&format!("devices[{d}]")), r))?;
                }
                let device_id =
                    device_id(gpus, plugin.mig_strategy, device).map_err(|r| (at(&format!("devices[{d}]")), r))?;
                if let Some((_, holder)) = taken.iter().find(|(id, _)| *id == device_id) {
                    return Err((
                        at(&format!("devices[{d}]")),
                        format!("{device_id} is already allocated to {holder}"),
                    ));
                }
                taken.push((device_id.clone(), owner.clone()));
                devices.push((device.resource.clone(), device_id));
            }
            let claims = resolve_claims(gpus, dra, &pod.namespace, &spec.claims, &mut taken)
                .map_err(|(i, r)| (at(&format!("claims[{i}]")), r))?;
            for (i, process) in spec.processes.into_iter().enumerate() {
                let resolved = resolve_process(gpus, process, Some((pods_out.len(), c)))
                    .map_err(|(f, r)| (at(&format!("processes[{i}].{f}")), r))?;
                processes.push(resolved);
            }
            containers.push(Container { name: spec.name, id, devices, claims });
        }
        pods_out.push(Pod {
            namespace: pod.namespace,
            name: pod.name,
            uid,
            qos: pod.qos,
            labels: pod.labels,
            containers,
        });
    }
    for (i, process) in host.into_iter().enumerate() {
        let resolved =
            resolve_process(gpus, process, None).map_err(|(f, r)| (format!("host_processes[{i}].{f}"), r))?;
        processes.push(resolved);
    }
    let mut pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    if let Some(w) = pids.windows(2).find(|w| w[0] == w[1]) {
        return Err(("pods".into(), format!("PID {} is used by two processes", w[0])));
    }
    Ok((pods_out, processes))
}

/// A container's claims, against the DRA driver's devices. A device is one claim's:
/// pods of the namespace that name the same claim share it. The error is (index, reason).
fn resolve_claims(
    gpus: &[Gpu],
    dra: Option<&Dra>,
    namespace: &str,
    specs: &[ClaimRef],
    taken: &mut Vec<(String, String)>,
) -> Result<Vec<ClaimedDevice>, (usize, String)> {
    let mut out = Vec::with_capacity(specs.len());
    for (i, claim) in specs.iter().enumerate() {
        let fail = |reason: String| (i, reason);
        let dra = dra.ok_or_else(|| fail("the scenario has no `dra` section: no driver publishes devices".into()))?;
        if claim.name.is_empty() {
            return Err(fail("a claim has a name".into()));
        }
        if !dra.publishes(claim.gpu) {
            return Err(fail(format!("the DRA driver does not publish GPU {} (dra.gpus)", claim.gpu)));
        }
        let gpu = gpus.get(claim.gpu as usize).ok_or_else(|| fail(format!("there is no GPU {}", claim.gpu)))?;
        let instance = match (claim.mig, &gpu.mig) {
            (Some(m), Some(instances)) => Some(instances.get(m as usize).ok_or_else(|| {
                fail(format!("GPU {} has no MIG instance {m} (it has {})", claim.gpu, instances.len()))
            })?),
            (None, None) => None,
            (Some(_), None) => return Err(fail(format!("GPU {} is not in MIG mode", claim.gpu))),
            (None, Some(_)) => {
                let reason = format!("GPU {} is in MIG mode: the driver publishes its instances; name one", claim.gpu);
                return Err(fail(reason));
            }
        };
        let uuid = instance.map_or(&gpu.uuid, |i| &i.uuid).clone();
        let holder = format!("claim {namespace}/{}", claim.name);
        match taken.iter().find(|(id, _)| *id == uuid) {
            Some((_, other)) if *other != holder => {
                return Err(fail(format!("{uuid} is already allocated to {other}")));
            }
            Some(_) => {}
            None => taken.push((uuid.clone(), holder)),
        }
        out.push(ClaimedDevice { claim: claim.name.clone(), device: dra::device_name(gpu, instance), uuid });
    }
    Ok(out)
}

/// A whole GPU under time-slicing is held as one of its replicas, under the plugin's
/// resource name.
fn shared_replica(t: TimeSlicing, device: &DeviceRef) -> Result<(), String> {
    match device.replica {
        None => {
            Err(format!("GPU {} is time-sliced (device_plugin.time_slicing): name the replica it holds", device.gpu))
        }
        Some(r) if r >= t.replicas => Err(format!(
            "GPU {} has replicas 0 to {} (device_plugin.time_slicing.replicas), not {r}",
            device.gpu,
            t.replicas - 1
        )),
        Some(_) if device.resource != t.resource() => {
            Err(format!("a time-sliced replica is offered as {}, not {}", t.resource(), device.resource))
        }
        Some(_) => Ok(()),
    }
}

fn device_id(gpus: &[Gpu], strategy: MigStrategy, device: &DeviceRef) -> Result<String, String> {
    let gpu = gpus.get(device.gpu as usize).ok_or_else(|| format!("there is no GPU {}", device.gpu))?;
    let base = match (device.mig, &gpu.mig) {
        (Some(m), Some(instances)) => {
            let instance = instances
                .get(m as usize)
                .ok_or_else(|| format!("GPU {} has no MIG instance {m} (it has {})", device.gpu, instances.len()))?;
            let offered = super::mig::offered_as(strategy, &instance.profile, &gpu.mig_profiles);
            if device.resource != offered {
                return Err(format!(
                    "MIG instance {m} of GPU {} is a {}; its resource is {offered} (device_plugin.mig_strategy), not {}",
                    device.gpu, instance.profile.name, device.resource
                ));
            }
            instance.uuid.clone()
        }
        (Some(_), None) => return Err(format!("GPU {} is not in MIG mode", device.gpu)),
        (None, Some(_)) => return Err(format!("GPU {} is in MIG mode: name an instance with `mig`", device.gpu)),
        (None, None) => gpu.uuid.clone(),
    };
    Ok(match device.replica {
        Some(r) => format!("{base}::{r}"),
        None => base,
    })
}

fn resolve_process(
    gpus: &[Gpu],
    spec: ProcessSpec,
    owner: Option<(usize, usize)>,
) -> Result<Process, (String, String)> {
    let gpu =
        gpus.get(spec.gpu as usize).ok_or_else(|| ("gpu".to_string(), format!("there is no GPU {}", spec.gpu)))?;
    match (spec.mig, &gpu.mig) {
        (Some(m), Some(instances)) if (m as usize) >= instances.len() => {
            return Err(("mig".into(), format!("GPU {} has no MIG instance {m}", spec.gpu)));
        }
        (Some(_), None) => return Err(("mig".into(), format!("GPU {} is not in MIG mode", spec.gpu))),
        (None, Some(_)) => {
            return Err((
                "mig".into(),
                format!("GPU {} is in MIG mode: name the instance the process runs in", spec.gpu),
            ));
        }
        _ => {}
    }
    if spec.pid < 2 {
        return Err(("pid".into(), format!("{} is not a process id a GPU job can have", spec.pid)));
    }
    for (name, signal) in [("memory_used_mib", &spec.memory_used_mib), ("sm_utilization", &spec.sm_utilization)] {
        if let Some(s) = signal {
            s.validate().map_err(|r| (name.to_string(), r))?;
        }
    }
    Ok(Process {
        pid: spec.pid,
        gpu: spec.gpu,
        mig: spec.mig,
        memory_used_mib: spec.memory_used_mib,
        sm_utilization: spec.sm_utilization,
        start_s: spec.start_s,
        end_s: spec.end_s,
        in_procfs: spec.in_procfs,
        mps: spec.mps,
        owner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_stable_and_distinct() {
        assert_eq!(default_pod_uid("a", "b"), default_pod_uid("a", "b"));
        assert_ne!(default_pod_uid("a", "b"), default_pod_uid("a", "c"));
        let id = default_container_id("uid", "server");
        assert_eq!(id.len(), 64);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
