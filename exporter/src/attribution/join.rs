//! The join: a snapshot's GPUs, MIG instances and processes, the kubelet's device
//! allocations, PID owners and pod metadata in; device owners and per-pod usage out.
//! Pure: no I/O, so every rule here is unit-tested on hand-made inputs.
//!
//! Rules, in the order they apply:
//! 1. **Ended pods are dropped first.** An allocation of a pod the directory says ended
//!    (Succeeded, Failed, or absent from a synced API watch) is ignored even while the
//!    kubelet still lists it; so is a process whose pod ended.
//! 2. **Holders.** A device plugin's id is a GPU UUID, a MIG UUID, or a time-slicing /
//!    MPS replica `<uuid>::<n>`; the part before `::` names the device. A DRA allocation
//!    names a device by driver, pool and name, which the node's ResourceSlices map to a
//!    UUID; it keeps its claim's name for the owner labels. Allocations that name no
//!    device of this snapshot (or, for DRA, none a slice publishes) are counted as
//!    unknown and otherwise ignored. Pods that share one claim are holders of its device
//!    like pods that share a time-sliced GPU.
//! 3. **Exclusive.** A device with exactly one holder container is that container's: its
//!    series carry the owner's labels, and the container's usage is the device's own
//!    numbers (GPU utilization, or the MIG instance's GPM SM activity; used memory).
//! 4. **Shared.** A device with several holders, or with processes but no holder, is
//!    split by process: each container gets the sum of its processes' SM utilization and
//!    used memory. A holder with no process shows 0. Processes are tied to containers by
//!    PID -> cgroup -> pod UID + container id -> pod directory.
//! 5. **Memory cap.** Per device and then per GPU, when the containers' memory adds up to
//!    more than the device reports used (figures read at slightly different moments),
//!    every container's figure is scaled down by the same factor so the sum equals it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use regex::Regex;

use super::directory::{PodDirectory, PodMeta};
use super::pod_resources::{AllocatedDevice, Allocation};
use super::procfs::PidOwner;
use super::resource_slices::SliceDirectory;
use crate::snapshot::attribution::{
    AttributionResult, ContainerRef, DraDeviceName, MigRef, PodInfo, PodUsage, Unattributed,
};
use crate::snapshot::{GpuSnapshot, MigInstance, ProcessUsage};

/// Everything the join reads besides the GPUs.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The kubelet's allocations (empty when pod-resources is down or disabled).
    pub allocations: &'a [Allocation],
    /// Owner of every PID in the snapshot.
    pub pids: &'a HashMap<u32, PidOwner>,
    pub directory: &'a PodDirectory,
    /// The node's DRA devices (empty without a ResourceSlice watch).
    pub slices: &'a SliceDirectory,
    /// Pod labels to copy onto `gpu_pod_info`; `None` copies none.
    pub label_allowlist: Option<&'a Regex>,
}

/// The device part of a kubelet device id: `<uuid>::<replica>` -> `<uuid>`.
pub fn device_uuid(device_id: &str) -> &str {
    device_id.split_once("::").map_or(device_id, |(uuid, _)| uuid)
}

/// Every PID the join will ask about.
pub fn pids(gpus: &[GpuSnapshot]) -> impl Iterator<Item = u32> + '_ {
    gpus.iter().flat_map(|g| {
        let mig = g.mig.iter().flat_map(|m| &m.instances).flat_map(|i| &i.processes);
        g.processes.iter().chain(mig).map(|p| p.pid)
    })
}

#[derive(Clone, Copy)]
struct Device<'a> {
    gpu: &'a GpuSnapshot,
    mig: Option<&'a MigInstance>,
}

impl<'a> Device<'a> {
    fn uuid(&self) -> &'a str {
        self.mig.map_or(&self.gpu.identity.uuid, |m| &m.uuid)
    }

    fn processes(&self) -> &[ProcessUsage] {
        self.mig.map_or(&self.gpu.processes, |m| &m.processes)
    }

    fn used_memory(&self) -> Option<u64> {
        match self.mig {
            Some(m) => m.memory.map(|m| m.used_bytes),
            None => self.gpu.readings.as_ref()?.memory.map(|m| m.used_bytes),
        }
    }

    fn utilization(&self) -> Option<f64> {
        match self.mig {
            Some(m) => m.sm_activity_percent,
            None => self.gpu.readings.as_ref()?.utilization_percent.map(f64::from),
        }
    }

    fn mig_ref(&self) -> Option<MigRef> {
        self.mig.map(|m| MigRef {
            uuid: m.uuid.clone(),
            profile: m.profile.clone(),
            gpu_instance_id: m.gpu_instance_id,
            compute_instance_id: m.compute_instance_id,
        })
    }
}

/// Joins one snapshot's GPUs with the sources. Health fields are left for the caller.
pub fn join(gpus: &[GpuSnapshot], sources: &Sources<'_>) -> AttributionResult {
    let mut result = AttributionResult::default();
    let devices: Vec<Device<'_>> = gpus
        .iter()
        .flat_map(|gpu| {
            let whole = std::iter::once(Device { gpu, mig: None });
            let instances = gpu.mig.iter().flat_map(|m| &m.instances).map(move |mig| Device { gpu, mig: Some(mig) });
            whole.chain(instances)
        })
        .collect();
    let by_uuid: HashMap<&str, Device<'_>> = devices.iter().map(|d| (d.uuid(), *d)).collect();

    let holders = holders(&by_uuid, sources, &mut result.unknown_devices);
    for (uuid, set) in &holders.by_device {
        if let (1, Some(only)) = (set.len(), set.first()) {
            result.owners.insert((*uuid).to_string(), only.clone());
            if let Some(claim) = holders.claim(uuid, only) {
                result.owner_claims.insert((*uuid).to_string(), claim);
            }
        }
    }

    for device in &devices {
        if device.gpu.readings.is_none() {
            continue;
        }
        let device_holders = holders.by_device.get(device.uuid());
        match device_holders {
            Some(set) if set.len() == 1 => {
                if let Some(owner) = set.first() {
                    result.usage.push(PodUsage {
                        gpu: device.gpu.index,
                        mig: device.mig_ref(),
                        owner: owner.clone(),
                        exclusive: true,
                        utilization_percent: device.utilization(),
                        memory_used_bytes: device.used_memory().map(|b| b as f64),
                        claim: holders.claim(device.uuid(), owner),
                    });
                }
                count_unattributed(device, sources, &mut result.unattributed);
            }
            _ => shared(device, &holders, sources, &mut result),
        }
    }
    cap_per_gpu(gpus, &mut result);
    result.pods = pod_infos(&result, sources);
    result.dra_devices = dra_devices(gpus, sources.slices);
    result
}

/// Who holds each device, from the kubelet, without ended pods.
struct Holders<'a> {
    by_device: HashMap<&'a str, BTreeSet<ContainerRef>>,
    /// Per device, the claim through which each holder holds it (DRA allocations).
    claims: HashMap<&'a str, BTreeMap<ContainerRef, String>>,
}

impl Holders<'_> {
    fn claim(&self, uuid: &str, holder: &ContainerRef) -> Option<String> {
        self.claims.get(uuid)?.get(holder).cloned()
    }
}

/// Rule 2: each allocation to its device; `unknown` counts those that name none.
fn holders<'a>(by_uuid: &HashMap<&'a str, Device<'a>>, sources: &Sources<'_>, unknown: &mut u64) -> Holders<'a> {
    let mut holders = Holders { by_device: HashMap::new(), claims: HashMap::new() };
    for a in sources.allocations {
        if sources.directory.ended(&a.namespace, &a.pod) {
            continue;
        }
        let uuid = match &a.device {
            AllocatedDevice::Plugin { device_id, .. } => Some(device_uuid(device_id)),
            AllocatedDevice::Claim { device, .. } => sources.slices.get(device).map(|d| d.uuid.as_str()),
        };
        let Some(device) = uuid.and_then(|u| by_uuid.get(u)) else {
            *unknown += 1;
            continue;
        };
        let holder =
            ContainerRef { namespace: a.namespace.clone(), pod: a.pod.clone(), container: a.container.clone() };
        if let AllocatedDevice::Claim { claim, .. } = &a.device {
            holders.claims.entry(device.uuid()).or_default().insert(holder.clone(), claim.clone());
        }
        holders.by_device.entry(device.uuid()).or_default().insert(holder);
    }
    holders
}

/// Each GPU's DRA devices: the slice devices that are it, its MIG instances, or name it
/// as their parent.
fn dra_devices(gpus: &[GpuSnapshot], slices: &SliceDirectory) -> BTreeMap<String, Vec<DraDeviceName>> {
    let mut out: BTreeMap<String, Vec<DraDeviceName>> = BTreeMap::new();
    for (name, published) in &slices.devices {
        let gpu = gpus.iter().find(|g| {
            g.identity.uuid == published.uuid
                || published.parent_uuid.as_deref() == Some(g.identity.uuid.as_str())
                || g.mig.iter().flat_map(|m| &m.instances).any(|i| i.uuid == published.uuid)
        });
        if let Some(gpu) = gpu {
            out.entry(gpu.identity.uuid.clone()).or_default().push(name.clone());
        }
    }
    for names in out.values_mut() {
        names.sort();
    }
    out
}

/// Rule 4: usage by process on a device with no single holder.
fn shared(device: &Device<'_>, all: &Holders<'_>, sources: &Sources<'_>, result: &mut AttributionResult) {
    let holders = all.by_device.get(device.uuid());
    // Whole GPUs have per-process SM samples (a process without one ran no kernel);
    // MIG instances have none.
    let sampled = device.mig.is_none();
    let mut sums: BTreeMap<ContainerRef, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for holder in holders.into_iter().flatten() {
        sums.insert(holder.clone(), (sampled.then_some(0.0), Some(0.0)));
    }
    for process in device.processes() {
        let owner = match process_owner(process.pid, holders, sources) {
            Outcome::Owner(owner) => owner,
            Outcome::Ended => continue,
            Outcome::Unattributed(reason) => {
                *result.unattributed.entry(reason).or_default() += 1;
                continue;
            }
        };
        let entry = sums.entry(owner).or_insert((sampled.then_some(0.0), None));
        if let Some(sm) = process.sm_utilization_percent {
            entry.0 = Some(entry.0.unwrap_or(0.0) + sm);
        }
        if let Some(bytes) = process.used_memory_bytes {
            entry.1 = Some(entry.1.unwrap_or(0.0) + bytes as f64);
        }
    }
    let start = result.usage.len();
    for (owner, (utilization, memory)) in sums {
        result.usage.push(PodUsage {
            gpu: device.gpu.index,
            mig: device.mig_ref(),
            claim: all.claim(device.uuid(), &owner),
            owner,
            exclusive: false,
            utilization_percent: utilization,
            memory_used_bytes: memory,
        });
    }
    let scaled = device.used_memory().is_some_and(|cap| scale_to(&mut result.usage[start..], cap as f64));
    if scaled && !result.memory_scaled_gpus.contains(&device.gpu.index) {
        result.memory_scaled_gpus.push(device.gpu.index);
    }
}

/// Processes on an exclusive device are the owner's; only the ones `/proc` cannot place
/// are counted.
fn count_unattributed(device: &Device<'_>, sources: &Sources<'_>, counts: &mut BTreeMap<Unattributed, u64>) {
    for process in device.processes() {
        if let Outcome::Unattributed(reason) = process_owner(process.pid, None, sources) {
            *counts.entry(reason).or_default() += 1;
        }
    }
}

enum Outcome {
    Owner(ContainerRef),
    /// Its pod ended; its numbers go nowhere.
    Ended,
    Unattributed(Unattributed),
}

fn process_owner(pid: u32, holders: Option<&BTreeSet<ContainerRef>>, sources: &Sources<'_>) -> Outcome {
    let cgroup = match sources.pids.get(&pid) {
        Some(PidOwner::Pod(owner)) => owner,
        Some(PidOwner::NotInPod) => return Outcome::Unattributed(Unattributed::NotInPod),
        Some(PidOwner::Exited) => return Outcome::Unattributed(Unattributed::Exited),
        Some(PidOwner::Unreadable) | None => return Outcome::Unattributed(Unattributed::ProcfsUnreadable),
    };
    let Some(pod) = sources.directory.by_uid(&cgroup.pod_uid) else {
        return Outcome::Unattributed(Unattributed::UnknownPod);
    };
    if pod.phase.is_some_and(|p| p.is_terminal()) {
        return Outcome::Ended;
    }
    let container = container_name(pod, cgroup.container_id.as_deref(), holders);
    Outcome::Owner(ContainerRef { namespace: pod.namespace.clone(), pod: pod.name.clone(), container })
}

/// The container by id when the directory knows ids; else the pod's only container that
/// holds this device, or the pod's only container; else unknown (empty).
fn container_name(pod: &PodMeta, id: Option<&str>, holders: Option<&BTreeSet<ContainerRef>>) -> String {
    if let Some(name) = id.and_then(|id| pod.container_by_id(id)) {
        return name.to_string();
    }
    let mut holding = holders.into_iter().flatten().filter(|h| h.namespace == pod.namespace && h.pod == pod.name);
    if let (Some(only), None) = (holding.next(), holding.next()) {
        return only.container.clone();
    }
    match pod.containers.as_slice() {
        [only] => only.name.clone(),
        _ => String::new(),
    }
}

/// Scales the entries' memory down so they add up to at most `cap`. True if it did.
fn scale_to(entries: &mut [PodUsage], cap: f64) -> bool {
    let total: f64 = entries.iter().filter_map(|u| u.memory_used_bytes).sum();
    if total <= cap || total <= 0.0 {
        return false;
    }
    let factor = cap / total;
    for entry in entries {
        if let Some(m) = entry.memory_used_bytes.as_mut() {
            *m = (*m * factor).floor();
        }
    }
    true
}

/// Rule 5 across a GPU's devices (its MIG instances together).
fn cap_per_gpu(gpus: &[GpuSnapshot], result: &mut AttributionResult) {
    for gpu in gpus {
        let Some(used) = gpu.readings.as_ref().and_then(|r| r.memory).map(|m| m.used_bytes) else { continue };
        let mut entries: Vec<&mut PodUsage> = result.usage.iter_mut().filter(|u| u.gpu == gpu.index).collect();
        let total: f64 = entries.iter().filter_map(|u| u.memory_used_bytes).sum();
        if total <= used as f64 || total <= 0.0 {
            continue;
        }
        let factor = used as f64 / total;
        for entry in &mut entries {
            if let Some(m) = entry.memory_used_bytes.as_mut() {
                *m = (*m * factor).floor();
            }
        }
        if !result.memory_scaled_gpus.contains(&gpu.index) {
            result.memory_scaled_gpus.push(gpu.index);
        }
    }
    result.memory_scaled_gpus.sort_unstable();
}

/// One `gpu_pod_info` per pod that owns or uses a device.
fn pod_infos(result: &AttributionResult, sources: &Sources<'_>) -> Vec<PodInfo> {
    let named: BTreeSet<(&str, &str)> = result
        .usage
        .iter()
        .map(|u| &u.owner)
        .chain(result.owners.values())
        .map(|o| (o.namespace.as_str(), o.pod.as_str()))
        .collect();
    named
        .into_iter()
        .map(|(namespace, pod)| {
            let meta = sources.directory.by_name(namespace, pod);
            PodInfo {
                namespace: namespace.to_string(),
                pod: pod.to_string(),
                uid: meta.map(|m| m.uid.clone()).unwrap_or_default(),
                labels: match (meta, sources.label_allowlist) {
                    (Some(meta), Some(allow)) => allowed_labels(&meta.labels, allow),
                    _ => Vec::new(),
                },
            }
        })
        .collect()
}

/// Labels whose name the allowlist matches (it is anchored by
/// [`super::config::AttributionArgs::label_allowlist`]), as `label_<sanitised name>`; on a
/// clash after sanitising, the first name in sort order wins.
pub fn allowed_labels(labels: &BTreeMap<String, String>, allow: &Regex) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in labels {
        if !allow.is_match(name) {
            continue;
        }
        let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        let label = format!("label_{safe}");
        if !out.iter().any(|(n, _)| *n == label) {
            out.push((label, value.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::cgroup::CgroupOwner;
    use super::super::directory::{ContainerMeta, PodPhase};
    use super::super::resource_slices::SliceDevice;
    use super::*;
    use crate::snapshot::{GpuIdentity, GpuReadings, GpuState, MemoryReading, MigState};

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32, utilization: u32, used: u64) -> GpuSnapshot {
        GpuSnapshot {
            index,
            identity: GpuIdentity { uuid: format!("GPU-{index}"), ..GpuIdentity::default() },
            state: GpuState::Ok,
            readings: Some(GpuReadings {
                utilization_percent: Some(utilization),
                memory: Some(MemoryReading { total_bytes: 80 * GIB, used_bytes: used, reserved_bytes: 0 }),
                ..GpuReadings::default()
            }),
            ..GpuSnapshot::default()
        }
    }

    fn instance(gi: u32, used: u64, sm: Option<f64>, processes: Vec<ProcessUsage>) -> MigInstance {
        MigInstance {
            uuid: format!("MIG-{gi}"),
            profile: "3g.40gb".into(),
            gpu_instance_id: gi,
            compute_instance_id: 0,
            compute_slices: 3,
            memory: Some(MemoryReading { total_bytes: 40 * GIB, used_bytes: used, reserved_bytes: 0 }),
            sm_activity_percent: sm,
            processes,
            ..MigInstance::default()
        }
    }

    fn process(pid: u32, mib: u64, sm: Option<f64>) -> ProcessUsage {
        ProcessUsage { pid, used_memory_bytes: Some(mib << 20), sm_utilization_percent: sm }
    }

    fn alloc(pod: &str, container: &str, device: &str) -> Allocation {
        Allocation::plugin("ns", pod, container, "nvidia.com/gpu", device)
    }

    fn meta(pod: &str, containers: &[(&str, &str)], phase: Option<PodPhase>) -> PodMeta {
        PodMeta {
            uid: format!("uid-{pod}"),
            namespace: "ns".into(),
            name: pod.into(),
            phase,
            containers: containers
                .iter()
                .map(|(name, id)| ContainerMeta { name: (*name).into(), id: Some((*id).into()) })
                .collect(),
            labels: [("app".to_string(), pod.to_string()), ("team.io/owner".to_string(), "ml".to_string())]
                .into_iter()
                .collect(),
        }
    }

    fn in_pod(pod: &str, container_id: &str) -> PidOwner {
        PidOwner::Pod(CgroupOwner { pod_uid: format!("uid-{pod}"), container_id: Some(container_id.into()) })
    }

    fn cref(pod: &str, container: &str) -> ContainerRef {
        ContainerRef { namespace: "ns".into(), pod: pod.into(), container: container.into() }
    }

    fn run(
        gpus: &[GpuSnapshot],
        allocations: &[Allocation],
        pids: &HashMap<u32, PidOwner>,
        dir: &PodDirectory,
    ) -> AttributionResult {
        let slices = SliceDirectory::default();
        join(gpus, &Sources { allocations, pids, directory: dir, slices: &slices, label_allowlist: None })
    }

    fn usage<'a>(r: &'a AttributionResult, pod: &str) -> Vec<&'a PodUsage> {
        r.usage.iter().filter(|u| u.owner.pod == pod).collect()
    }

    #[test]
    fn an_exclusive_gpu_gives_its_owner_the_gpu_numbers() {
        let mut g = gpu(0, 70, 20 * GIB);
        g.processes = vec![process(100, 1000, Some(12.0))];
        let dir = PodDirectory::new([meta("train", &[("main", "c1")], Some(PodPhase::Running))], true);
        let pids = HashMap::from([(100, in_pod("train", "c1"))]);
        let r = run(&[g], &[alloc("train", "main", "GPU-0")], &pids, &dir);
        assert_eq!(r.owners["GPU-0"], cref("train", "main"));
        let u = usage(&r, "train");
        assert_eq!(u.len(), 1);
        assert!(u[0].exclusive);
        assert_eq!(u[0].utilization_percent, Some(70.0), "the device's utilization, not the process's 12");
        assert_eq!(u[0].memory_used_bytes, Some((20 * GIB) as f64));
        assert!(r.unattributed.is_empty());
    }

    #[test]
    fn mig_instances_are_owned_one_by_one_with_gpm_activity() {
        let mut g = gpu(0, 0, 40 * GIB);
        g.mig = Some(MigState {
            instances: vec![
                instance(1, 30 * GIB, Some(62.0), vec![process(41, 30000, None)]),
                instance(2, 5 * GIB, None, vec![]),
            ],
            ..MigState::default()
        });
        let dir = PodDirectory::new(
            [meta("llm", &[("inference", "c1")], Some(PodPhase::Running)), meta("emb", &[("e", "c2")], None)],
            false,
        );
        let allocations = [alloc("llm", "inference", "MIG-1"), alloc("emb", "e", "MIG-2")];
        let r = run(&[g], &allocations, &HashMap::new(), &dir);
        assert_eq!(r.owners.len(), 2);
        assert!(!r.owners.contains_key("GPU-0"), "the GPU itself is nobody's");
        let llm = usage(&r, "llm");
        assert_eq!(llm[0].mig.as_ref().map(|m| (m.uuid.as_str(), m.gpu_instance_id)), Some(("MIG-1", 1)));
        assert_eq!(llm[0].utilization_percent, Some(62.0));
        assert_eq!(llm[0].memory_used_bytes, Some((30 * GIB) as f64));
        let emb = usage(&r, "emb");
        assert_eq!(emb[0].utilization_percent, None, "no GPM: no per-instance utilization");
        // The process on the exclusive instance could not be read in /proc: counted.
        assert_eq!(r.unattributed[&Unattributed::ProcfsUnreadable], 1);
    }

    #[test]
    fn a_time_sliced_gpu_is_split_by_process() {
        let mut g = gpu(2, 74, 62000 << 20);
        g.processes = vec![
            process(1, 15500, Some(24.0)),
            process(2, 15500, Some(19.0)),
            process(3, 1000, Some(5.0)),
            process(9, 500, None),
        ];
        let dir = PodDirectory::new(
            [
                meta("pool-a", &[("inference", "ca")], Some(PodPhase::Running)),
                meta("pool-b", &[("inference", "cb")], Some(PodPhase::Running)),
                meta("idle", &[("inference", "ci")], Some(PodPhase::Running)),
            ],
            true,
        );
        let allocations = [
            alloc("pool-a", "inference", "GPU-2::0"),
            alloc("pool-b", "inference", "GPU-2::1"),
            alloc("idle", "inference", "GPU-2::2"),
        ];
        let pids = HashMap::from([
            (1, in_pod("pool-a", "ca")),
            (2, in_pod("pool-b", "cb")),
            (3, in_pod("pool-a", "ca")),
            (9, PidOwner::NotInPod),
        ]);
        let r = run(&[g], &allocations, &pids, &dir);
        assert!(r.owners.is_empty(), "three holders: nobody owns the GPU");
        let a = usage(&r, "pool-a");
        assert_eq!(a[0].utilization_percent, Some(29.0));
        assert_eq!(a[0].memory_used_bytes, Some((16500u64 << 20) as f64));
        assert!(!a[0].exclusive);
        assert_eq!(usage(&r, "pool-b")[0].utilization_percent, Some(19.0));
        let idle = usage(&r, "idle");
        assert_eq!((idle[0].utilization_percent, idle[0].memory_used_bytes), (Some(0.0), Some(0.0)));
        assert_eq!(r.unattributed[&Unattributed::NotInPod], 1);
        assert!(r.memory_scaled_gpus.is_empty());
    }

    fn dra(device: &str) -> DraDeviceName {
        DraDeviceName { driver: "gpu.nvidia.com".into(), pool: "node-a".into(), device: device.into() }
    }

    fn claim(pod: &str, container: &str, claim: &str, device: &str) -> Allocation {
        Allocation {
            namespace: "ns".into(),
            pod: pod.into(),
            container: container.into(),
            device: AllocatedDevice::Claim { claim: claim.into(), device: dra(device) },
        }
    }

    fn slices(devices: &[(&str, &str, Option<&str>)]) -> SliceDirectory {
        let devices = devices.iter().map(|(name, uuid, parent)| {
            let device = SliceDevice { uuid: (*uuid).into(), parent_uuid: parent.map(String::from), profile: None };
            (dra(name), device)
        });
        SliceDirectory { devices: devices.collect() }
    }

    fn run_dra(
        gpus: &[GpuSnapshot],
        allocations: &[Allocation],
        pids: &HashMap<u32, PidOwner>,
        slices: &SliceDirectory,
        dir: &PodDirectory,
    ) -> AttributionResult {
        join(gpus, &Sources { allocations, pids, directory: dir, slices, label_allowlist: None })
    }

    #[test]
    fn a_dra_device_is_attributed_like_a_device_plugin_one_and_keeps_its_claim() {
        let mut mig_gpu = gpu(1, 0, 10 * GIB);
        mig_gpu.mig =
            Some(MigState { instances: vec![instance(7, 9 * GIB, Some(40.0), vec![])], ..MigState::default() });
        let gpus = [gpu(0, 70, 20 * GIB), mig_gpu];
        let published = slices(&[("gpu-0", "GPU-0", None), ("gpu-1-mig-3g40gb-9-0", "MIG-7", Some("GPU-1"))]);
        let dir = PodDirectory::new(
            [meta("train", &[("main", "c1")], Some(PodPhase::Running)), meta("llm", &[("srv", "c2")], None)],
            true,
        );
        let allocations =
            [claim("train", "main", "train-gpu", "gpu-0"), claim("llm", "srv", "llm-slice", "gpu-1-mig-3g40gb-9-0")];
        let r = run_dra(&gpus, &allocations, &HashMap::new(), &published, &dir);
        assert_eq!(r.owners["GPU-0"], cref("train", "main"));
        assert_eq!(r.owners["MIG-7"], cref("llm", "srv"));
        assert_eq!(r.owner_claims["GPU-0"], "train-gpu");
        assert_eq!(r.owner_claims["MIG-7"], "llm-slice");
        let train = usage(&r, "train");
        assert_eq!((train[0].utilization_percent, train[0].claim.as_deref()), (Some(70.0), Some("train-gpu")));
        assert_eq!(usage(&r, "llm")[0].utilization_percent, Some(40.0));
        assert_eq!(r.unknown_devices, 0);
        assert_eq!(r.dra_devices["GPU-0"], vec![dra("gpu-0")]);
        assert_eq!(r.dra_devices["GPU-1"], vec![dra("gpu-1-mig-3g40gb-9-0")]);
    }

    #[test]
    fn pods_sharing_one_claim_split_its_gpu_by_process() {
        let mut g = gpu(0, 60, 30 * GIB);
        g.processes = vec![process(1, 10000, Some(35.0)), process(2, 8000, Some(20.0))];
        let dir = PodDirectory::new(
            [
                meta("a", &[("main", "ca")], Some(PodPhase::Running)),
                meta("b", &[("main", "cb")], Some(PodPhase::Running)),
            ],
            true,
        );
        let pids = HashMap::from([(1, in_pod("a", "ca")), (2, in_pod("b", "cb"))]);
        let allocations = [claim("a", "main", "shared", "gpu-0"), claim("b", "main", "shared", "gpu-0")];
        let r = run_dra(&[g], &allocations, &pids, &slices(&[("gpu-0", "GPU-0", None)]), &dir);
        assert!(r.owners.is_empty() && r.owner_claims.is_empty(), "two holders: nobody owns the GPU");
        let a = usage(&r, "a");
        assert_eq!(
            (a[0].utilization_percent, a[0].claim.as_deref(), a[0].exclusive),
            (Some(35.0), Some("shared"), false)
        );
        assert_eq!(usage(&r, "b")[0].utilization_percent, Some(20.0));
    }

    #[test]
    fn dra_devices_no_slice_maps_to_a_gpu_of_this_node_are_unknown_never_guessed() {
        let gpus = [gpu(0, 10, GIB), gpu(1, 20, GIB)];
        let dir = PodDirectory::new([meta("a", &[("main", "ca")], Some(PodPhase::Running))], true);
        // gpu-1 is in no slice; gpu-9's slice names a GPU NVML does not report.
        let published = slices(&[("gpu-9", "GPU-9", None)]);
        let allocations =
            [claim("a", "main", "x", "gpu-1"), claim("a", "main", "y", "gpu-9"), alloc("a", "main", "GPU-0")];
        let r = run_dra(&gpus, &allocations, &HashMap::new(), &published, &dir);
        assert_eq!(r.unknown_devices, 2);
        assert_eq!(r.owners.keys().collect::<Vec<_>>(), ["GPU-0"], "the device plugin's GPU on the same node");
        assert!(r.owner_claims.is_empty());
        assert!(!r.owners.contains_key("GPU-1"), "not guessed from the device name");
        assert!(r.dra_devices.is_empty(), "a slice device of no GPU here belongs to none");
    }

    #[test]
    fn pods_never_add_up_to_more_memory_than_the_gpu_uses() {
        let mut g = gpu(0, 50, 30000 << 20);
        g.processes = vec![process(1, 20000, Some(10.0)), process(2, 20000, Some(10.0))];
        let dir = PodDirectory::new([meta("a", &[("c", "ca")], None), meta("b", &[("c", "cb")], None)], false);
        let pids = HashMap::from([(1, in_pod("a", "ca")), (2, in_pod("b", "cb"))]);
        let r = run(&[g], &[], &pids, &dir);
        let total: f64 = r.usage.iter().filter_map(|u| u.memory_used_bytes).sum();
        assert!(total <= (30000u64 << 20) as f64, "{total}");
        assert_eq!(usage(&r, "a")[0].memory_used_bytes, usage(&r, "b")[0].memory_used_bytes, "scaled alike");
        assert_eq!(r.memory_scaled_gpus, [0]);
    }

    #[test]
    fn ended_pods_leave_even_while_the_kubelet_lists_them() {
        let g = gpu(0, 50, GIB);
        let g1 = gpu(1, 60, GIB);
        let g2 = gpu(2, 60, GIB);
        let dir = PodDirectory::new(
            [
                meta("done", &[("c", "c1")], Some(PodPhase::Succeeded)),
                meta("failed", &[("c", "c2")], Some(PodPhase::Failed)),
            ],
            true,
        );
        let allocations = [alloc("done", "c", "GPU-0"), alloc("failed", "c", "GPU-1"), alloc("deleted", "c", "GPU-2")];
        let r = run(&[g, g1, g2], &allocations, &HashMap::new(), &dir);
        assert!(r.owners.is_empty(), "{:?}", r.owners);
        assert!(r.usage.is_empty());
        assert!(r.pods.is_empty());
        // Without an authoritative source the deleted pod still counts (the kubelet lists it).
        let logs = PodDirectory::new([], false);
        let r = run(&[gpu(2, 60, GIB)], &[alloc("deleted", "c", "GPU-2")], &HashMap::new(), &logs);
        assert_eq!(r.owners["GPU-2"], cref("deleted", "c"));
    }

    #[test]
    fn a_process_of_an_ended_pod_is_dropped_silently() {
        let mut g = gpu(0, 50, GIB);
        g.processes = vec![process(1, 100, Some(1.0))];
        let dir = PodDirectory::new([meta("done", &[("c", "c1")], Some(PodPhase::Failed))], true);
        let r = run(&[g], &[], &HashMap::from([(1, in_pod("done", "c1"))]), &dir);
        assert!(r.usage.is_empty());
        assert!(r.unattributed.is_empty());
    }

    #[test]
    fn unknown_device_ids_are_counted_not_attributed() {
        let allocations = [alloc("x", "c", "GPU-404"), alloc("y", "c", "MIG-404::3"), alloc("z", "c", "GPU-0")];
        let r = run(&[gpu(0, 1, 0)], &allocations, &HashMap::new(), &PodDirectory::default());
        assert_eq!(r.unknown_devices, 2);
        assert_eq!(r.owners.keys().collect::<Vec<_>>(), ["GPU-0"]);
    }

    #[test]
    fn without_the_api_processes_are_named_as_far_as_possible() {
        let mut g = gpu(0, 50, 10 * GIB);
        g.processes = vec![process(1, 100, Some(3.0)), process(2, 100, Some(4.0)), process(3, 100, Some(5.0))];
        // Log directories: names, no ids, no phase.
        let mut two = meta("two", &[("a", ""), ("b", "")], None);
        let mut one = meta("one", &[("only", "")], None);
        for p in [&mut two, &mut one] {
            for c in &mut p.containers {
                c.id = None;
            }
        }
        let dir = PodDirectory::new([two, one], false);
        let pids = HashMap::from([
            (1, in_pod("one", "c1")),
            (2, in_pod("two", "c2")),
            (3, PidOwner::Pod(CgroupOwner { pod_uid: "uid-stranger".into(), container_id: None })),
        ]);
        let r = run(&[g.clone()], &[], &pids, &dir);
        assert_eq!(usage(&r, "one")[0].owner.container, "only");
        assert_eq!(usage(&r, "two")[0].owner.container, "", "two containers, no ids: the pod but not the container");
        assert_eq!(r.unattributed[&Unattributed::UnknownPod], 1);
        // A holder list from the kubelet settles the container.
        let r = run(&[g], &[alloc("two", "b", "GPU-0::0"), alloc("one", "only", "GPU-0::1")], &pids, &dir);
        assert_eq!(usage(&r, "two")[0].owner.container, "b");
    }

    #[test]
    fn a_gpu_without_readings_keeps_its_owner_but_shows_no_usage() {
        let mut g = gpu(0, 50, GIB);
        g.readings = None;
        g.state = GpuState::Failed { error: "x".into() };
        let r = run(&[g], &[alloc("a", "c", "GPU-0")], &HashMap::new(), &PodDirectory::default());
        assert_eq!(r.owners["GPU-0"], cref("a", "c"));
        assert!(r.usage.is_empty());
    }

    #[test]
    fn pod_info_carries_allow_listed_labels_only() {
        let dir = PodDirectory::new([meta("a", &[("c", "c1")], Some(PodPhase::Running))], true);
        let allow = Regex::new("^(?:app|team\\.io/.*|team\\.io_owner)$").unwrap();
        let r = join(
            &[gpu(0, 1, 0)],
            &Sources {
                allocations: &[alloc("a", "c", "GPU-0")],
                pids: &HashMap::new(),
                directory: &dir,
                slices: &SliceDirectory::default(),
                label_allowlist: Some(&allow),
            },
        );
        assert_eq!(r.pods.len(), 1);
        assert_eq!(r.pods[0].uid, "uid-a");
        assert_eq!(
            r.pods[0].labels,
            [("label_app".to_string(), "a".to_string()), ("label_team_io_owner".to_string(), "ml".to_string())]
        );
        // Two names that sanitise alike: the first in sort order wins.
        let labels: BTreeMap<String, String> =
            [("team.io/owner".to_string(), "a".to_string()), ("team.io_owner".to_string(), "b".to_string())].into();
        assert_eq!(allowed_labels(&labels, &allow), [("label_team_io_owner".to_string(), "a".to_string())]);
    }
}
