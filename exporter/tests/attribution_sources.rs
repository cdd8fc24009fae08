//! Attribution's sources against the simulated kubelet: pod-resources over a real unix
//! socket (and that socket going away and coming back), procfs trees in every cgroup
//! flavour, the pod log tree, and the whole stage on the seed's mixed node.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_kubelet::KubeletServer;
use fake_nvml::scenario::Scenario;
use gpu_exporter::attribution::cgroup::CgroupOwner;
use gpu_exporter::attribution::kubelet::{self, KubeletCache};
use gpu_exporter::attribution::pod_resources::{AllocatedDevice, PodResourcesClient, ResourceFilter};
use gpu_exporter::attribution::procfs::{PidOwner, ProcReader};
use gpu_exporter::attribution::{Attributor, ContainerRef, Unattributed, pod_logs};
use gpu_exporter::snapshot::{
    GpuIdentity, GpuReadings, GpuSnapshot, GpuState, MemoryReading, MigInstance, MigState, ProcessUsage,
};

const MIB: u64 = 1 << 20;

fn scenario(name: &str) -> Scenario {
    Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../fake-nvml/scenarios").join(format!("{name}.yaml")))
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn client(socket: &Path) -> PodResourcesClient {
    PodResourcesClient::new(socket, Duration::from_secs(2), ResourceFilter::default())
}

/// What the exporter's NVML side reads from the simulated node at scenario time `t`.
fn gpus_of(scenario: &Scenario, t: f64) -> Vec<GpuSnapshot> {
    let processes = |gpu: u32, mig: Option<u32>| -> Vec<ProcessUsage> {
        scenario
            .processes
            .iter()
            .filter(|p| p.gpu == gpu && p.mig == mig && p.alive(t))
            .map(|p| ProcessUsage {
                pid: p.pid,
                used_memory_bytes: Some(p.memory_used_mib.as_ref().map_or(0.0, |s| s.at(t)) as u64 * MIB),
                sm_utilization_percent: mig.is_none().then(|| p.sm_utilization.as_ref().map_or(0.0, |s| s.at(t))),
            })
            .collect()
    };
    scenario
        .gpus
        .iter()
        .map(|g| {
            let used = g.values.memory_used_mib.as_ref().map_or(0.0, |s| s.at(t)) as u64 * MIB;
            GpuSnapshot {
                index: g.index,
                identity: GpuIdentity { uuid: g.uuid.clone(), ..GpuIdentity::default() },
                state: GpuState::Ok,
                readings: Some(GpuReadings {
                    utilization_percent: Some(g.values.utilization.as_ref().map_or(0.0, |s| s.at(t)) as u32),
                    memory: Some(MemoryReading { total_bytes: 80 * 1024 * MIB, used_bytes: used, reserved_bytes: 0 }),
                    ..GpuReadings::default()
                }),
                mig: g.mig.as_ref().map(|instances| MigState {
                    instances: instances
                        .iter()
                        .map(|i| MigInstance {
                            uuid: i.uuid.clone(),
                            profile: i.profile.name.to_string(),
                            gpu_instance_id: i.gpu_instance_id,
                            compute_instance_id: i.compute_instance_id,
                            memory: Some(MemoryReading {
                                total_bytes: 10 * 1024 * MIB,
                                used_bytes: i.values.memory_used_mib.as_ref().map_or(0.0, |s| s.at(t)) as u64 * MIB,
                                reserved_bytes: 0,
                            }),
                            // GPM only on Hopper and newer.
                            sm_activity_percent: i.values.sm_activity.as_ref().filter(|_| g.model.gpm).map(|s| s.at(t)),
                            processes: processes(g.index, Some(i.index)),
                            ..MigInstance::default()
                        })
                        .collect(),
                    ..MigState::default()
                }),
                processes: if g.mig.is_some() { Vec::new() } else { processes(g.index, None) },
                ..GpuSnapshot::default()
            }
        })
        .collect()
}

#[test]
fn list_over_the_socket_keeps_gpu_devices_as_the_plugin_named_them() {
    let dir = tempfile::tempdir().unwrap();
    let seed = scenario("seed-mixed-node");
    let server =
        KubeletServer::start(dir.path().join("kubelet.sock"), fake_kubelet::lister(&seed, "test-node")).unwrap();
    let allocations = runtime().block_on(client(server.socket()).list()).unwrap();
    assert_eq!(allocations.len(), 12, "one device per seed pod");
    let llm = allocations.iter().find(|a| a.pod == "llm-inference-70b").unwrap();
    assert_eq!((llm.namespace.as_str(), llm.container.as_str()), ("ai-inference", "inference"));
    assert_eq!(
        llm.device,
        AllocatedDevice::Plugin {
            resource: "nvidia.com/mig-3g.40gb".into(),
            device_id: "MIG-a0000000-0000-4000-8000-000000000001".into()
        }
    );
    let replicas = allocations
        .iter()
        .filter(|a| a.device_id().is_some_and(|id| id.starts_with("GPU-a0000000-0000-4000-8000-000000000300::")));
    assert_eq!(replicas.count(), 4);
}

#[test]
fn other_resources_are_ignored_unless_named() {
    use fake_kubelet::proto::{ContainerDevices, ContainerResources, PodResources};
    let dir = tempfile::tempdir().unwrap();
    let pod = PodResources {
        name: "p".into(),
        namespace: "ns".into(),
        containers: vec![ContainerResources {
            name: "c".into(),
            devices: vec![
                ContainerDevices {
                    resource_name: "example.com/fpga".into(),
                    device_ids: vec!["f0".into()],
                    topology: None,
                },
                ContainerDevices {
                    resource_name: "nvidia.com/gpu.shared".into(),
                    device_ids: vec!["GPU-1::2".into()],
                    topology: None,
                },
            ],
            cpu_ids: vec![2, 3],
            memory: vec![],
            dynamic_resources: vec![],
        }],
    };
    let server =
        KubeletServer::start(dir.path().join("kubelet.sock"), fake_kubelet::Lister::new(vec![pod], Default::default()))
            .unwrap();
    let rt = runtime();
    assert!(rt.block_on(client(server.socket()).list()).unwrap().is_empty());
    let mut named = PodResourcesClient::new(
        server.socket(),
        Duration::from_secs(2),
        ResourceFilter { extra: vec!["nvidia.com/gpu.shared".into()], ..ResourceFilter::default() },
    );
    let found = rt.block_on(named.list()).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].device_id(), Some("GPU-1::2"));
}

#[test]
fn a_client_survives_the_socket_going_away_and_coming_back() {
    let dir = tempfile::tempdir().unwrap();
    let seed = scenario("seed-mixed-node");
    let mut server =
        KubeletServer::start(dir.path().join("kubelet.sock"), fake_kubelet::lister(&seed, "test-node")).unwrap();
    let rt = runtime();
    let mut c = client(server.socket());
    assert_eq!(rt.block_on(c.list()).unwrap().len(), 12);
    server.drop_socket();
    let err = rt.block_on(c.list()).unwrap_err();
    assert!(matches!(err.reason(), "rpc" | "socket_missing"), "{err}");
    assert_eq!(rt.block_on(c.list()).unwrap_err().reason(), "socket_missing");
    server.restore_socket().unwrap();
    assert_eq!(rt.block_on(c.list()).unwrap().len(), 12, "reconnected to the new socket");
}

#[test]
fn the_refresh_loop_reports_the_socket_state_and_keeps_its_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let seed = scenario("seed-mixed-node");
    let mut server =
        KubeletServer::start(dir.path().join("kubelet.sock"), fake_kubelet::lister(&seed, "test-node")).unwrap();
    let interval = Duration::from_millis(100);
    let cache = Arc::new(KubeletCache::new(interval));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.spawn(kubelet::run(client(server.socket()), cache.clone(), interval));
    let wait = |what: &str, check: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait("first list", &|| cache.health().up);
    assert_eq!(cache.allocations().len(), 12);
    server.drop_socket();
    wait("down", &|| !cache.health().up);
    assert!(cache.health().errors.values().sum::<u64>() >= 1);
    assert_eq!(cache.allocations().len(), 12, "the last list is kept for a while");
    wait("grace over", &|| cache.allocations().is_empty());
    let calls_before = server.lister().list_calls();
    server.restore_socket().unwrap();
    wait("up again", &|| cache.health().up);
    assert_eq!(cache.allocations().len(), 12);
    // One call per interval, not more: the exporter never calls List on demand.
    std::thread::sleep(Duration::from_millis(550));
    let calls = server.lister().list_calls() - calls_before;
    assert!((4..=8).contains(&calls), "{calls} calls in about 6 intervals");
}

const FLAVOURS: &[&str] = &[
    "{cgroup_version: 2, cgroup_driver: systemd, runtime: containerd}",
    "{cgroup_version: 2, cgroup_driver: systemd, runtime: cri-o}",
    "{cgroup_version: 2, cgroup_driver: cgroupfs, runtime: containerd}",
    "{cgroup_version: 2, cgroup_driver: cgroupfs, runtime: cri-o}",
    "{cgroup_version: 1, cgroup_driver: systemd, runtime: containerd}",
    "{cgroup_version: 1, cgroup_driver: systemd, runtime: cri-o}",
    "{cgroup_version: 1, cgroup_driver: cgroupfs, runtime: containerd}",
    "{cgroup_version: 1, cgroup_driver: cgroupfs, runtime: cri-o}",
];

fn flavour_scenario(kubelet: &str) -> Scenario {
    let text = format!(
        "kubelet: {kubelet}
gpus:
  - {{model: H100-SXM5-80GB}}
pods:
  - namespace: a
    name: guaranteed
    qos: guaranteed
    containers: [{{name: c, processes: [{{pid: 101, gpu: 0}}]}}]
  - namespace: a
    name: burstable
    qos: burstable
    containers: [{{name: c, processes: [{{pid: 102, gpu: 0}}]}}, {{name: d, processes: [{{pid: 103, gpu: 0}}]}}]
  - namespace: a
    name: besteffort
    qos: best_effort
    containers: [{{name: c, processes: [{{pid: 104, gpu: 0}}, {{pid: 105, gpu: 0, in_procfs: false}}]}}]
host_processes: [{{pid: 900, gpu: 0}}]
"
    );
    Scenario::parse("flavour.yaml", &text).unwrap()
}

#[test]
fn every_cgroup_flavour_gives_pod_uid_and_container_id() {
    for kubelet in FLAVOURS {
        let scenario = flavour_scenario(kubelet);
        let dir = tempfile::tempdir().unwrap();
        fake_kubelet::procfs::write_tree(&scenario, dir.path()).unwrap();
        let mut reader = ProcReader::new(dir.path());
        let owners = reader.owners(scenario.processes.iter().map(|p| p.pid));
        for process in &scenario.processes {
            let expected = match process.owner {
                _ if !process.in_procfs => PidOwner::Exited,
                None => PidOwner::NotInPod,
                Some((p, c)) => {
                    let pod = &scenario.pods[p];
                    PidOwner::Pod(CgroupOwner {
                        pod_uid: pod.uid.clone(),
                        container_id: Some(pod.containers[c].id.clone()),
                    })
                }
            };
            assert_eq!(owners[&process.pid], expected, "{kubelet}: PID {}", process.pid);
        }
    }
}

#[test]
fn the_pod_log_tree_names_the_scenario_pods() {
    let seed = scenario("seed-mixed-node");
    let dir = tempfile::tempdir().unwrap();
    fake_kubelet::pod_logs::write_tree(&seed, dir.path()).unwrap();
    let found = pod_logs::scan(dir.path()).unwrap();
    assert_eq!(found.len(), seed.pods.len());
    for pod in &seed.pods {
        let meta = found.by_uid(&pod.uid).unwrap();
        assert_eq!((meta.namespace.as_str(), meta.name.as_str()), (pod.namespace.as_str(), pod.name.as_str()));
        assert_eq!(meta.containers.len(), pod.containers.len());
    }
}

/// The stage on the seed's node without an API server: exclusive MIG owners from the
/// kubelet, time-sliced GPUs split by process and named from the pod log tree.
#[test]
fn the_seed_node_is_attributed_without_an_api_server() {
    let seed = scenario("seed-mixed-node");
    let dir = tempfile::tempdir().unwrap();
    let server = fake_kubelet::start_in(&seed, "test-node", dir.path()).unwrap();
    let cache = Arc::new(KubeletCache::new(Duration::from_secs(10)));
    cache.record_success(runtime().block_on(client(server.socket()).list()).unwrap());
    let logs = Arc::new(Mutex::new(pod_logs::scan(&dir.path().join("pods")).unwrap()));
    let attributor = Attributor::new(dir.path().join("proc"), None).with_kubelet(cache).with_pod_logs(logs);
    let gpus = gpus_of(&seed, 0.0);
    let result = attributor.attach(&gpus);

    let owner = |pod: &str, container: &str| ContainerRef {
        namespace: "ai-inference".into(),
        pod: pod.into(),
        container: container.into(),
    };
    assert_eq!(result.owners["MIG-a0000000-0000-4000-8000-000000000001"], owner("llm-inference-70b", "inference"));
    let one_g: Vec<&str> = gpus[1].mig.as_ref().unwrap().instances.iter().map(|i| i.uuid.as_str()).collect();
    assert_eq!(result.owners[one_g[0]], owner("embedding-service", "embedding"));
    assert_eq!(result.owners[one_g[1]], owner("reranker", "reranker"));
    assert_eq!(result.owners.len(), 4, "3 owned 1g instances + the 70B's 3g instance; time-sliced GPUs are shared");

    let llm = result.usage.iter().find(|u| u.owner.pod == "llm-inference-70b").unwrap();
    assert!(llm.exclusive);
    assert_eq!(llm.mig.as_ref().unwrap().profile, "3g.40gb");
    assert_eq!(llm.memory_used_bytes, Some((36000 * MIB) as f64));
    assert_eq!(llm.utilization_percent, None, "A100: no GPM, no per-instance utilization");

    let pool: Vec<_> = result.usage.iter().filter(|u| u.gpu == 2).collect();
    assert_eq!(pool.len(), 4);
    let first = pool.iter().find(|u| u.owner.pod == "inference-pool-7d9f8b6c5-2xk4q").unwrap();
    assert!(!first.exclusive);
    assert_eq!(first.owner.container, "inference");
    assert_eq!(first.utilization_percent, Some(24.0));
    assert_eq!(first.memory_used_bytes, Some((15500 * MIB) as f64));
    let pool_memory: f64 = pool.iter().filter_map(|u| u.memory_used_bytes).sum();
    assert!(pool_memory <= (62000 * MIB) as f64);
    assert_eq!(result.usage.iter().filter(|u| u.gpu == 3).count(), 4);
    assert!(result.unattributed.values().all(|n| *n == 0), "{:?}", result.unattributed);
    assert_eq!(result.pods.len(), 12);
    assert!(result.pod_resources.as_ref().unwrap().up);
    assert!(result.pod_watch.is_none());
}

/// A PID that exits between NVML's list and the `/proc` read is counted, quietly.
#[test]
fn processes_gone_from_proc_are_counted_as_exited() {
    let scenario = flavour_scenario(FLAVOURS[0]);
    let dir = tempfile::tempdir().unwrap();
    fake_kubelet::procfs::write_tree(&scenario, &dir.path().join("proc")).unwrap();
    fake_kubelet::pod_logs::write_tree(&scenario, &dir.path().join("pods")).unwrap();
    let logs = Arc::new(Mutex::new(pod_logs::scan(&dir.path().join("pods")).unwrap()));
    let attributor = Attributor::new(dir.path().join("proc"), None).with_pod_logs(logs);
    let gpus = gpus_of(&scenario, 0.0);
    let before = attributor.attach(&gpus);
    assert_eq!(before.unattributed.get(&Unattributed::Exited), Some(&1), "PID 105 is not in /proc");
    assert_eq!(before.unattributed.get(&Unattributed::NotInPod), Some(&1), "PID 900 is a host process");
    let named: Vec<&str> = before.usage.iter().map(|u| u.owner.container.as_str()).collect();
    assert_eq!(named, ["c", "", "c"], "without ids or holders, a two-container pod's container stays unnamed");
    let burstable = before.usage.iter().find(|u| u.owner.pod == "burstable").unwrap();
    assert_eq!(burstable.owner.container, "");
    // PID 101 exits now, after NVML listed it.
    std::fs::remove_dir_all(dir.path().join("proc/101")).unwrap();
    let after = attributor.attach(&gpus);
    assert_eq!(after.unattributed.get(&Unattributed::Exited), Some(&2));
    assert!(after.usage.iter().all(|u| u.owner.pod != "guaranteed"));
}
