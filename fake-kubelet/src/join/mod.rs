//! `fake-kubelet join`: simulated GPU nodes that join a real API server.
//!
//! Each node is a scenario file (its GPUs and MIG layout) and a kubeconfig with the
//! node's own identity (`system:node:<name>` in `system:nodes`, so that the Node
//! authorizer and NodeRestriction judge it as they judge a kubelet). Per node this
//! registers the Node ([`node_object`]), keeps it Ready with its Lease and status
//! heartbeats, and runs the pods the scheduler binds to it as a kubelet with the NVIDIA
//! device plugin would: devices allocated ([`devices`]), processes started on them,
//! the pod marked Running and Ready with an IP from the node's pod range ([`pods`]),
//! and a deleted pod's devices freed and its deletion confirmed. A pod's ResourceClaims,
//! once the scheduler has allocated them from the node's DRA pool (a ResourceSlice the
//! test or the demo publishes, as the driver would), are its devices too, reported in
//! pod-resources' `dynamic_resources`; the node publishes no slice itself.
//!
//! What the exporter of the node reads follows the pods: the node's scenario file
//! rewritten with them ([`live`]; fake-nvml follows it with `FAKE_NVML_LIVE=1`), the
//! pod-resources socket, `/proc/<pid>/cgroup` and `/var/log/pods`, all under
//! `<dir>/<node>/`. The processes' SM utilization comes from a load file spread over the
//! workloads' Ready pods ([`load`]), so the HPA's replicas share a demand as behind a
//! Service. A node's own scenario is read again when it changes ([`base`]), so that a
//! test can inject a fault (an XID, a lost GPU) into a running node.

mod base;
pub mod devices;
mod kubelet;
pub mod live;
pub mod load;
pub mod node_object;
pub mod pods;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fake_nvml::scenario::Scenario;
use tokio::sync::Mutex;

use crate::proto::{AllocatableResourcesResponse, ContainerDevices};
use crate::server::Lister;
use devices::DeviceTable;
use live::{PlacedContainer, PlacedPod};
use load::{LoadFile, PodSeat};
use node_object::NodeSettings;

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("--node {0}: {1}")]
    NodeArg(String, String),
    #[error(transparent)]
    Scenario(#[from] fake_nvml::scenario::ScenarioError),
    #[error(transparent)]
    Load(#[from] load::LoadError),
    #[error(transparent)]
    Live(#[from] live::LiveError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
    #[error("node {node}: {what}: {source}")]
    Kube {
        node: String,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}: cannot read the kubeconfig: {1}")]
    Kubeconfig(String, String),
}

pub type Result<T, E = JoinError> = std::result::Result<T, E>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JoinError + '_ {
    move |source| JoinError::Io { path: path.display().to_string(), source }
}

/// One `--node` argument: `name=N,scenario=FILE,kubeconfig=FILE[,pod-cidr=C]
/// [,address=IP][,replicas=R][,mig-config=NAME]`.
#[derive(Debug, Clone)]
pub struct NodeArg {
    pub name: String,
    pub scenario: PathBuf,
    pub kubeconfig: PathBuf,
    pub pod_cidr: Option<String>,
    pub address: Option<String>,
    pub replicas: u32,
    pub mig_config: Option<String>,
}

impl std::str::FromStr for NodeArg {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for part in text.split(',') {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("{part:?} is not key=value"))?;
            if fields.insert(k, v).is_some() {
                return Err(format!("{k} is given twice"));
            }
        }
        let known = ["name", "scenario", "kubeconfig", "pod-cidr", "address", "replicas", "mig-config"];
        if let Some(k) = fields.keys().find(|k| !known.contains(k)) {
            return Err(format!("unknown key {k:?} (known: {})", known.join(", ")));
        }
        let need = |k: &str| fields.get(k).map(|v| v.to_string()).ok_or_else(|| format!("{k}= is missing"));
        let replicas = match fields.get("replicas") {
            Some(r) => r.parse::<u32>().ok().filter(|r| (1..=64).contains(r)).ok_or("replicas= is not 1 to 64")?,
            None => 1,
        };
        if let Some(cidr) = fields.get("pod-cidr")
            && pod_network(cidr).is_none()
        {
            return Err(format!("pod-cidr={cidr} is not of the form a.b.c.0/24"));
        }
        Ok(NodeArg {
            name: need("name")?,
            scenario: need("scenario")?.into(),
            kubeconfig: need("kubeconfig")?.into(),
            pod_cidr: fields.get("pod-cidr").map(|s| s.to_string()),
            address: fields.get("address").map(|s| s.to_string()),
            replicas,
            mig_config: fields.get("mig-config").map(|s| s.to_string()),
        })
    }
}

/// `a.b.c` of `a.b.c.0/24`.
fn pod_network(cidr: &str) -> Option<String> {
    let net = cidr.strip_suffix(".0/24")?;
    let parts: Vec<&str> = net.split('.').collect();
    (parts.len() == 3 && parts.iter().all(|p| p.parse::<u8>().is_ok())).then(|| net.to_string())
}

/// Everything `join` is told.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    pub nodes: Vec<NodeArg>,
    /// Where each node's files go: `<dir>/<node>/{scenario.yaml,kubelet.sock,proc,pods}`.
    pub dir: PathBuf,
    pub load: Option<PathBuf>,
    pub kubelet_version: String,
}

/// A pod running on a node.
#[derive(Debug, Clone)]
struct Running {
    placed: PlacedPod,
    ip: u8,
}

/// One simulated node's state.
#[derive(Debug)]
struct SimNode {
    settings: NodeSettings,
    network: String,
    base_file: String,
    base_text: String,
    base: Scenario,
    table: DeviceTable,
    dir: PathBuf,
    lister: Lister,
    pods: BTreeMap<String, Running>,
    next_pid: u32,
    written: String,
}

impl SimNode {
    fn taken(&self) -> BTreeSet<String> {
        self.pods
            .values()
            .flat_map(|r| &r.placed.containers)
            .flat_map(|c| &c.devices)
            .filter(|d| d.claim.is_none())
            .map(|d| d.id.clone())
            .collect()
    }

    /// Device `device` of the node's DRA pool, held through `claim`.
    fn claimed(&self, claim: &str, device: &str) -> std::result::Result<devices::Device, String> {
        let dra = self.base.dra.as_ref().ok_or("the node has no DRA driver")?;
        for gpu in self.base.gpus.iter().filter(|g| dra.publishes(g.index)) {
            let instances: Vec<Option<&fake_nvml::scenario::mig::MigInstance>> = match &gpu.mig {
                Some(instances) => instances.iter().map(Some).collect(),
                None => vec![None],
            };
            for instance in instances {
                if fake_nvml::scenario::dra::device_name(gpu, instance) == device {
                    return Ok(devices::Device {
                        resource: dra.driver.clone(),
                        id: device.to_string(),
                        gpu: gpu.index,
                        mig: instance.map(|i| i.index),
                        replica: None,
                        claim: Some(claim.to_string()),
                    });
                }
            }
        }
        Err(format!("claim {claim} holds {device}, which the node's DRA driver does not publish"))
    }

    fn free_ip(&self) -> Option<u8> {
        let used: BTreeSet<u8> = self.pods.values().map(|r| r.ip).collect();
        (2..=254).find(|ip| !used.contains(ip))
    }
}

/// The whole simulated fleet, shared by the node tasks and the load loop.
#[derive(Debug)]
pub struct Fleet {
    nodes: Vec<SimNode>,
    load: LoadFile,
}

/// Runs the fleet until the process is told to stop.
pub async fn run(config: JoinConfig) -> Result<()> {
    let mut nodes = Vec::new();
    for (i, arg) in config.nodes.iter().enumerate() {
        nodes.push(prepare(i, arg, &config)?);
    }
    let load = match &config.load {
        Some(path) => LoadFile::read(path)?,
        None => LoadFile::default(),
    };
    let fleet = Arc::new(Mutex::new(Fleet { nodes, load }));
    rewrite(&mut *fleet.lock().await)?;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, arg) in config.nodes.iter().enumerate() {
        let client = kubelet::client(&arg.kubeconfig).await?;
        let node = {
            let f = fleet.lock().await;
            node_object::node(&f.nodes[i].settings, &f.nodes[i].base, &f.nodes[i].table, jiff::Timestamp::now())
        };
        kubelet::register(&client, &node).await?;
        tasks.spawn(kubelet::heartbeat(client.clone(), arg.name.clone()));
        tasks.spawn(kubelet::run_pods(client, Arc::clone(&fleet), i));
    }
    if let Some(path) = config.load.clone() {
        tasks.spawn(follow_load(Arc::clone(&fleet), path));
    }
    tasks.spawn(follow_bases(Arc::clone(&fleet)));
    tracing::info!(nodes = config.nodes.len(), "joined");
    // The tasks run until one fails for good (they retry what can be retried).
    match tasks.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(JoinError::Io { path: "task".into(), source: std::io::Error::other(e.to_string()) }),
        None => Ok(()),
    }
}

fn prepare(index: usize, arg: &NodeArg, config: &JoinConfig) -> Result<SimNode> {
    let base_file = arg.scenario.display().to_string();
    let base_text = std::fs::read_to_string(&arg.scenario).map_err(io(&arg.scenario))?;
    let base = Scenario::parse(&base_file, &base_text)?;
    if !base.pods.is_empty() || !base.processes.is_empty() {
        return Err(JoinError::NodeArg(
            arg.name.clone(),
            format!("{base_file} lists pods or processes; a joined node's pods come from the API server"),
        ));
    }
    let table = DeviceTable::new(&base, arg.replicas);
    let cidr = arg.pod_cidr.clone().unwrap_or_else(|| format!("10.244.{}.0/24", index + 1));
    let network = pod_network(&cidr).ok_or_else(|| JoinError::NodeArg(arg.name.clone(), "bad pod-cidr".into()))?;
    let mig_config = arg.mig_config.clone().unwrap_or_else(|| {
        if base.gpus.iter().any(|g| g.mig.is_some()) { "custom" } else { "all-disabled" }.to_string()
    });
    let settings = NodeSettings {
        name: arg.name.clone(),
        address: arg.address.clone().unwrap_or_else(|| "127.0.0.1".into()),
        pod_cidr: cidr,
        replicas: arg.replicas,
        mig_config,
        kubelet_version: config.kubelet_version.clone(),
    };
    let dir = config.dir.join(&arg.name);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let lister = Lister::new(Vec::new(), allocatable(&table));
    crate::server::serve(&dir.join("kubelet.sock"), lister.clone())?;
    Ok(SimNode {
        settings,
        network,
        base_file,
        base_text,
        base,
        table,
        dir,
        lister,
        pods: BTreeMap::new(),
        next_pid: 40_000 + 10_000 * index as u32,
        written: String::new(),
    })
}

/// Every device the node's plugin offers, as `GetAllocatableResources` lists them.
fn allocatable(table: &DeviceTable) -> AllocatableResourcesResponse {
    let mut devices: Vec<ContainerDevices> = Vec::new();
    for d in &table.devices {
        match devices.iter_mut().find(|c| c.resource_name == d.resource) {
            Some(c) => c.device_ids.push(d.id.clone()),
            None => devices.push(ContainerDevices {
                resource_name: d.resource.clone(),
                device_ids: vec![d.id.clone()],
                topology: None,
            }),
        }
    }
    AllocatableResourcesResponse { devices, cpu_ids: Vec::new(), memory: Vec::new() }
}

/// Spreads the load over every node's pods and rewrites what changed: each node's
/// scenario, pod-resources answer, `/proc` and pod log trees.
fn rewrite(fleet: &mut Fleet) -> Result<()> {
    let seats: Vec<(usize, String, PodSeat)> = fleet
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            n.pods.iter().map(move |(uid, r)| {
                let devices = r.placed.containers.iter().flat_map(|c| &c.devices).map(|d| (d.gpu, d.mig)).collect();
                let seat = PodSeat {
                    namespace: r.placed.namespace.clone(),
                    labels: r.placed.labels.clone(),
                    ready: true,
                    node: n.settings.name.clone(),
                    devices,
                };
                (i, uid.clone(), seat)
            })
        })
        .collect();
    let loads = load::spread(&fleet.load, &seats.iter().map(|(_, _, s)| s.clone()).collect::<Vec<_>>());
    for ((node, uid, _), pod_load) in seats.iter().zip(loads) {
        if let Some(r) = fleet.nodes[*node].pods.get_mut(uid) {
            r.placed.load = pod_load;
        }
    }
    for node in &mut fleet.nodes {
        let pods: Vec<PlacedPod> = node.pods.values().map(|r| r.placed.clone()).collect();
        let text = live::render(&node.base_file, &node.base_text, &node.base, &pods)?;
        if text == node.written {
            continue;
        }
        let path = node.dir.join("scenario.yaml");
        let tmp = node.dir.join(".scenario.yaml.tmp");
        std::fs::write(&tmp, &text).map_err(io(&tmp))?;
        let scenario = Scenario::parse(&path.display().to_string(), &text)?;
        // /proc first, then the socket, then the file NVML follows: the exporter never
        // sees a process whose cgroup or pod it cannot find yet.
        let proc_dir = node.dir.join("proc");
        crate::procfs::write_tree(&scenario, &proc_dir).map_err(|e| JoinError::Io {
            path: proc_dir.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
        remove_stale_pids(&proc_dir, &scenario);
        crate::pod_logs::write_tree(&scenario, &node.dir.join("pods")).map_err(io(&node.dir))?;
        node.lister.set_listing(crate::listing::pod_resources(&scenario, &node.settings.name));
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        node.written = text;
    }
    Ok(())
}

fn remove_stale_pids(proc_dir: &Path, scenario: &Scenario) {
    let live: BTreeSet<String> = scenario.processes.iter().map(|p| p.pid.to_string()).collect();
    let Ok(entries) = std::fs::read_dir(proc_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.chars().all(|c| c.is_ascii_digit()) && !live.contains(&name) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Reads the load file again when it changes, and spreads it.
async fn follow_load(fleet: Arc<Mutex<Fleet>>, path: PathBuf) -> Result<()> {
    let mut last = None;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let text = std::fs::read_to_string(&path).ok();
        if text == last {
            continue;
        }
        last = text;
        match LoadFile::read(&path) {
            Ok(load) => {
                let mut f = fleet.lock().await;
                f.load = load;
                rewrite(&mut f)?;
                tracing::info!(file = %path.display(), "load changed");
            }
            // A half-edited file is reported and the old load kept.
            Err(e) => tracing::warn!("{e}; keeping the previous load"),
        }
    }
}

/// Reads each node's own scenario again when it changes ([`base`]) and rewrites the
/// node with it; a refused change is reported once and the node keeps its file.
async fn follow_bases(fleet: Arc<Mutex<Fleet>>) -> Result<()> {
    let mut refused: BTreeMap<usize, String> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut f = fleet.lock().await;
        let mut changed = false;
        for (i, node) in f.nodes.iter_mut().enumerate() {
            let Ok(text) = std::fs::read_to_string(&node.base_file) else { continue };
            if text == node.base_text || refused.get(&i) == Some(&text) {
                continue;
            }
            match base::rebase(&node.base_file, &text, node.settings.replicas, &node.table) {
                Ok(scenario) => {
                    node.base = scenario;
                    node.base_text = text;
                    refused.remove(&i);
                    changed = true;
                    tracing::info!(node = %node.settings.name, file = %node.base_file, "scenario changed");
                }
                Err(e) => {
                    tracing::warn!(node = %node.settings.name, "{e}; keeping the node's scenario as it was");
                    refused.insert(i, text);
                }
            }
        }
        if changed {
            rewrite(&mut f)?;
        }
    }
}

/// Devices held through ResourceClaims, by container: (claim, device name in the node's
/// DRA pool).
type Claimed = BTreeMap<String, Vec<(String, String)>>;

/// Places `pod` on node `index`: its devices (the device plugin's, and those of
/// `claimed`), processes and IP. `Err` names what the node lacks.
fn place(
    fleet: &mut Fleet,
    index: usize,
    pod: &k8s_openapi::api::core::v1::Pod,
    claimed: &Claimed,
) -> std::result::Result<Running, String> {
    let node = &mut fleet.nodes[index];
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut taken = node.taken();
    let mut containers = Vec::new();
    for (name, wanted) in pods::device_requests(pod) {
        let mut devices = Vec::new();
        for (resource, count) in wanted {
            let got = node.table.allocate(&resource, count, &taken).map_err(|e| e.to_string())?;
            taken.extend(got.iter().map(|d| d.id.clone()));
            devices.extend(got);
        }
        for (claim, device) in claimed.get(&name).into_iter().flatten() {
            devices.push(node.claimed(claim, device)?);
        }
        let pids: Vec<u32> = devices
            .iter()
            .map(|_| {
                node.next_pid += 1;
                node.next_pid
            })
            .collect();
        containers.push(PlacedContainer { id: pods::container_id(&uid, &name), name, devices, pids });
    }
    let ip = node.free_ip().ok_or("the node's pod range is full")?;
    Ok(Running {
        placed: PlacedPod {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
            qos: pods::qos(pod),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            containers,
            load: load::PodLoad { sm_utilization: 0.0, memory_used_mib: 0.0 },
        },
        ip,
    })
}
