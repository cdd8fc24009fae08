//! The node side for real: simulated GPU nodes run by the real kubelet v1.37.2 with
//! NVIDIA's k8s-device-plugin v0.17.4 loading fake-nvml as `libnvidia-ml.so.1`, and sim-cri
//! as the runtime (`scripts/sim-node`, docs/deploy.md "The real kubelet"), joined to the
//! real control plane. What the kubelet allocates is what the exporter attributes.
//!
//! - `the_real_kubelet_allocates_whole_gpus_and_the_exporter_attributes_them`: the plugin
//!   advertises the scenario's eight H100s; a pod asking for two is scheduled, admitted
//!   and run; the exporter, reading the real kubelet's pod-resources, names the pod on
//!   exactly the GPUs the kubelet's own checkpoint records; XID 79 on a GPU makes the
//!   plugin mark it unhealthy (allocatable 8 -> 7) and the exporter's health judges the
//!   same GPU.
//! - `time_sliced_replicas_are_allocated_and_attributed`: `sharing.timeSlicing` with four
//!   replicas, renamed `nvidia.com/gpu.shared` (`renameByDefault`): the replica IDs
//!   `<uuid>::<n>` the kubelet allocates are attributed to their pods; then without
//!   `renameByDefault`, as `nvidia.com/gpu`.
//! - `mig_instances_under_the_mixed_strategy_are_allocated_and_attributed`: two H200s in
//!   MIG mode (seven 1g.18gb, two 3g.71gb): the plugin's mixed strategy advertises
//!   `nvidia.com/mig-1g.18gb` and `nvidia.com/mig-3g.71gb` (names from fake-nvml's
//!   profiles through go-nvlib), and the MIG device the kubelet allocates is the one the
//!   exporter names the pod on (`mig_uuid`). On a second node one instance is
//!   `1g.18gb+me`: it is advertised under `nvidia.com/mig-1g.18gb`, where the plugin's
//!   unanchored pattern for the plain profile takes it first.
//! - `mig_instances_under_the_single_strategy_are_allocated_and_attributed`: both H200s
//!   as seven 1g.18gb; the single strategy advertises the fourteen instances as
//!   `nvidia.com/gpu`, and a pod's two are attributed by their MIG UUIDs.
//! - Each of those also holds fake-kubelet to the real kubelet
//!   (`assert_fake_kubelet_agrees`): the real allocation written as a scenario is
//!   answered the same by fake-kubelet (`List`, `Get`, `GetAllocatableResources`), and the
//!   exporter attributes it the same through either.
//! - `a_node_that_cannot_start_says_why`: a kubelet that cannot start, a plugin that
//!   cannot register, and a fake-nvml without a symbol the plugin calls each stop
//!   scripts/sim-node with the cause (the symbol named) and the log's tail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fake_kubelet::client::PodResourcesClient;
use fake_kubelet::proto::{ContainerDevices, PodResources};
use fake_nvml::scenario::Scenario;
use serde_json::Value;
use test_support::control_plane::ControlPlane;
use test_support::sim_node::{NodeExporter, SimNode, SimNodeOptions, label, series};
use test_support::simulated::{Clock, NodeOptions, SimulatedNode, wait_until_ok};

fn scenario() -> String {
    std::fs::read_to_string(test_support::simulated::workspace().join("fake-nvml/scenarios/h100-8gpu-node.yaml"))
        .unwrap()
}

fn allocatable(cp: &ControlPlane, node: &str, resource: &str) -> Option<u64> {
    let n: Value = serde_json::from_str(&cp.run(&["get", "node", node, "-o", "json"])).unwrap();
    n["status"]["allocatable"][resource].as_str().and_then(|v| v.parse().ok())
}

/// Waits until `node` advertises `want` of `resource` as allocatable.
fn wait_allocatable(cp: &ControlPlane, what: &str, node: &str, resource: &str, want: u64) {
    wait_until_ok(what, Duration::from_secs(60), || match allocatable(cp, node, resource) {
        Some(n) if n == want => Ok(()),
        other => Err(format!("{other:?}")),
    });
}

fn pod(name: &str, node: &str, resource: &str, count: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  nodeSelector: \
         {{kubernetes.io/hostname: {node}}}\n  containers:\n    - name: main\n      image: registry.example/{name}:1\n      \
         resources: {{limits: {{{resource}: {count}}}}}\n"
    )
}

fn wait_running(cp: &ControlPlane, name: &str, node: &SimNode) {
    wait_until_ok(&format!("pod {name} Running on the real kubelet"), Duration::from_secs(60), || {
        let phase = cp.run(&["get", "pod", name, "-o", "jsonpath={.status.phase}"]);
        if phase == "Running" {
            Ok(())
        } else {
            Err(format!("{phase}\n{}", node.log("kubelet").lines().rev().take(8).collect::<Vec<_>>().join("\n")))
        }
    });
}

/// The device IDs the kubelet's checkpoint records for pod `name`'s container `main`.
fn checkpointed(cp: &ControlPlane, node: &SimNode, name: &str) -> BTreeSet<String> {
    let uid = cp.run(&["get", "pod", name, "-o", "jsonpath={.metadata.uid}"]);
    let checkpoint = node.kubelet_checkpoint();
    checkpoint["Data"]["PodDeviceEntries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["PodUID"] == uid.trim() && e["ContainerName"] == "main")
        .flat_map(|e| e["DeviceIDs"].as_object().into_iter().flat_map(|by_numa| by_numa.values()))
        .flat_map(|ids| ids.as_array().cloned().unwrap_or_default())
        .filter_map(|id| id.as_str().map(str::to_string))
        .collect()
}

/// The devices the exporter names pod `name` on, as `uuid` (whole GPUs) or
/// `uuid::replica` where it reports replicas.
fn attributed(page: &str, name: &str) -> BTreeSet<String> {
    series(page, "gpu_device_pod_info", &[("pod", name)])
        .into_iter()
        .filter_map(|l| label(l, "uuid").map(str::to_string))
        .collect()
}

/// A pod as pod-resources answers for it, in an order that does not depend on the
/// kubelet's map iteration: containers by name, each one's devices by resource and id.
fn normal(pod: &PodResources) -> PodResources {
    let mut pod = pod.clone();
    pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
    for c in &mut pod.containers {
        c.devices.sort_by(|a, b| (&a.resource_name, &a.device_ids).cmp(&(&b.resource_name, &b.device_ids)));
    }
    pod
}

fn normal_devices(devices: &[ContainerDevices]) -> Vec<ContainerDevices> {
    let mut devices = devices.to_vec();
    devices.sort_by(|a, b| (&a.resource_name, &a.device_ids).cmp(&(&b.resource_name, &b.device_ids)));
    devices
}

/// The allocation the real kubelet made for `pods`, written as the `pods` of a fake-nvml
/// scenario for the node's GPUs: each device ID back to the GPU, MIG instance or replica
/// it names.
fn allocation_as_scenario(base_yaml: &str, plugin: &str, real: &[PodResources]) -> String {
    let base = Scenario::parse("base.yaml", base_yaml).unwrap();
    let device = |resource: &str, id: &str| -> String {
        let (uuid, replica) = match id.split_once("::") {
            Some((u, r)) => (u, format!(", replica: {r}")),
            None => (id, String::new()),
        };
        for gpu in &base.gpus {
            if gpu.uuid == uuid {
                return format!("{{resource: {resource}, gpu: {}{replica}}}", gpu.index);
            }
            if let Some(i) = gpu.mig.iter().flatten().find(|i| i.uuid == uuid) {
                return format!("{{resource: {resource}, gpu: {}, mig: {}}}", gpu.index, i.index);
            }
        }
        panic!("the real kubelet allocated {id}, which the scenario does not have");
    };
    let mut yaml: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(base_yaml).unwrap();
    for key in ["pods", "host_processes", "device_plugin"] {
        yaml.remove(key);
    }
    let mut text = serde_yaml_ng::to_string(&yaml).unwrap();
    text.push_str(&format!("device_plugin: {plugin}\npods:\n"));
    for pod in real {
        text.push_str(&format!("  - namespace: {}\n    name: {}\n    containers:\n", pod.namespace, pod.name));
        for c in &pod.containers {
            let devices: Vec<String> =
                c.devices.iter().flat_map(|d| d.device_ids.iter().map(|id| device(&d.resource_name, id))).collect();
            text.push_str(&format!("      - {{name: {}, devices: [{}]}}\n", c.name, devices.join(", ")));
        }
    }
    text
}

/// The contract fake-kubelet keeps with the real kubelet: the real one's allocation for
/// `pods`, written as a scenario with the plugin's settings (`plugin`, the scenario's
/// `device_plugin`), is answered by fake-kubelet as the real one answers it (`List`'s
/// entries for those pods, `Get`, `GetAllocatableResources`' devices), and the exporter
/// attributes the same devices to the same pods through either (`exporter_args` given
/// to both).
fn assert_fake_kubelet_agrees(
    node: &SimNode,
    real_exporter: &NodeExporter,
    base_yaml: &str,
    plugin: &str,
    pods: &[&str],
    exporter_args: &[&str],
) {
    let mut real = PodResourcesClient::connect(&node.pod_resources_socket()).unwrap();
    let real_pods: Vec<PodResources> =
        real.list().unwrap().into_iter().filter(|p| pods.contains(&p.name.as_str())).map(|p| normal(&p)).collect();
    assert_eq!(real_pods.len(), pods.len(), "the real kubelet lists {pods:?}: {real_pods:?}");
    let scenario_yaml = allocation_as_scenario(base_yaml, plugin, &real_pods);
    let dir = tempfile::tempdir().unwrap();
    let scenario_file = dir.path().join("allocation.yaml");
    std::fs::write(&scenario_file, &scenario_yaml).unwrap();
    let scenario = Scenario::load(&scenario_file).unwrap_or_else(|e| panic!("{e}\n{scenario_yaml}"));
    let fake_server = fake_kubelet::start_in(&scenario, &node.name, dir.path()).unwrap();
    let mut fake = PodResourcesClient::connect(fake_server.socket()).unwrap();

    let fake_pods: Vec<PodResources> = fake.list().unwrap().iter().map(normal).collect();
    assert_eq!(fake_pods, real_pods, "List, fake-kubelet against the real kubelet");
    for pod in &real_pods {
        let from_real = real.get(&pod.namespace, &pod.name).unwrap().map(|p| normal(&p));
        let from_fake = fake.get(&pod.namespace, &pod.name).unwrap().map(|p| normal(&p));
        assert_eq!(from_fake, from_real, "Get {}/{}", pod.namespace, pod.name);
    }
    let gone = (real.get("default", "no-such-pod").unwrap_err(), fake.get("default", "no-such-pod").unwrap_err());
    assert_eq!((gone.1.code(), gone.1.message()), (gone.0.code(), gone.0.message()), "Get of an unknown pod");
    assert_eq!(
        normal_devices(&fake.allocatable().unwrap().devices),
        normal_devices(&real.allocatable().unwrap().devices),
        "GetAllocatableResources, fake-kubelet against the real kubelet"
    );

    // The exporter's attribution through each: the pods on the same devices.
    let through_fake = SimulatedNode::start_with(
        &node.name,
        &scenario_file,
        Clock::Frozen(0.0),
        NodeOptions { args: exporter_args, ..NodeOptions::default() },
    );
    let attribution = |page: &str| -> BTreeSet<String> {
        series(page, "gpu_device_pod_info", &[])
            .into_iter()
            .filter(|l| pods.iter().any(|p| l.contains(&format!("pod=\"{p}\""))))
            .map(|l| l.rsplit_once(' ').map_or(l, |(labels, _)| labels).to_string())
            .collect()
    };
    let holding: Vec<&str> = real_pods
        .iter()
        .filter(|p| p.containers.iter().any(|c| !c.devices.is_empty()))
        .map(|p| p.name.as_str())
        .collect();
    let want = wait_until_ok("the exporter on the real kubelet naming every pod", Duration::from_secs(30), || {
        let seen = attribution(&real_exporter.metrics());
        let named = |p: &&str| seen.iter().any(|l| l.contains(&format!("pod=\"{p}\"")));
        if holding.iter().all(named) { Ok(seen) } else { Err(format!("{holding:?}: {seen:#?}")) }
    });
    wait_until_ok("the same attribution through fake-kubelet", Duration::from_secs(30), || {
        let got = attribution(&through_fake.metrics());
        if got == want { Ok(()) } else { Err(format!("fake-kubelet: {got:#?}\nreal kubelet: {want:#?}")) }
    });
}

#[test]
fn the_real_kubelet_allocates_whole_gpus_and_the_exporter_attributes_them() {
    let cp = ControlPlane::start();
    let node = SimNode::start(&cp, "sim-whole", &scenario(), &SimNodeOptions::default()).unwrap();
    wait_allocatable(&cp, "eight GPUs allocatable", "sim-whole", "nvidia.com/gpu", 8);
    let exporter = node.start_exporter(&[]);

    cp.apply(&pod("trainer", "sim-whole", "nvidia.com/gpu", 2));
    wait_running(&cp, "trainer", &node);
    let allocated = checkpointed(&cp, &node, "trainer");
    assert_eq!(allocated.len(), 2, "the kubelet's checkpoint: {}", node.kubelet_checkpoint());
    let seen = wait_until_ok("the exporter naming the trainer", Duration::from_secs(30), || {
        let found = attributed(&exporter.metrics(), "trainer");
        if found.len() == 2 { Ok(found) } else { Err(format!("{found:?}\n{}", exporter.log_tail(5))) }
    });
    assert_eq!(seen, allocated, "the exporter attributes what the real kubelet allocated");
    cp.apply(&pod("idle", "sim-whole", "cpu", 1));
    wait_running(&cp, "idle", &node);
    assert_fake_kubelet_agrees(&node, &exporter, &scenario(), "{}", &["trainer", "idle"], &[]);

    // XID 79 on a GPU the trainer does not hold: NVIDIA's plugin marks it unhealthy and
    // the kubelet advertises one fewer; the exporter's health loop judges the same GPU.
    let page = exporter.metrics();
    let free = series(&page, "gpu_memory_total_bytes", &[])
        .into_iter()
        .filter_map(|l| label(l, "uuid"))
        .find(|u| !allocated.contains(*u))
        .unwrap()
        .to_string();
    let text = scenario();
    let anchor = format!("uuid: {free}\n");
    assert!(text.contains(&anchor), "{free} in the scenario");
    node.set_scenario(&text.replacen(&anchor, &format!("uuid: {free}\n    faults: [{{at_s: 0, xid: 79}}]\n"), 1));
    wait_until_ok("the plugin marking the GPU unhealthy", Duration::from_secs(60), || {
        match allocatable(&cp, "sim-whole", "nvidia.com/gpu") {
            Some(7) => Ok(()),
            other => Err(format!(
                "{other:?}\n{}",
                node.log("device-plugin").lines().rev().take(5).collect::<Vec<_>>().join("\n")
            )),
        }
    });
    assert!(node.log("device-plugin").contains("marking device as unhealthy"), "the plugin says why");
    wait_until_ok("the exporter's verdict on the same GPU", Duration::from_secs(30), || {
        let page = exporter.metrics();
        let verdict = series(&page, "gpu_health_gpu_healthy", &[("uuid", &free)]);
        match verdict.as_slice() {
            [l] if l.ends_with(" 0") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // The others stay healthy for both.
    let page = exporter.metrics();
    let unhealthy: Vec<&str> =
        series(&page, "gpu_health_gpu_healthy", &[]).into_iter().filter(|l| l.ends_with(" 0")).collect();
    assert_eq!(unhealthy.len(), 1, "{unhealthy:?}");
}

#[test]
fn time_sliced_replicas_are_allocated_and_attributed() {
    let cp = ControlPlane::start();
    // NVIDIA's config format (k8s-device-plugin v0.17.4, api/config/v1: sharing.timeSlicing).
    let config = "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n      - name: \
                  nvidia.com/gpu\n        replicas: 4\n";
    let options = SimNodeOptions { plugin_config: Some(config.into()), ..SimNodeOptions::default() };
    let node = SimNode::start(&cp, "sim-shared", &scenario(), &options).unwrap();
    wait_until_ok("32 shared replicas allocatable", Duration::from_secs(60), || {
        match (
            allocatable(&cp, "sim-shared", "nvidia.com/gpu.shared"),
            allocatable(&cp, "sim-shared", "nvidia.com/gpu"),
        ) {
            (Some(32), None | Some(0)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // A renamed resource is the exporter's to be told of (docs/attribution.md).
    let exporter = node.start_exporter(&["--kubelet.resource-names", "nvidia.com/gpu.shared"]);
    for name in ["chat-0", "chat-1"] {
        cp.apply(&pod(name, "sim-shared", "nvidia.com/gpu.shared", 1));
    }
    for name in ["chat-0", "chat-1"] {
        wait_running(&cp, name, &node);
        let ids = checkpointed(&cp, &node, name);
        assert_eq!(ids.len(), 1, "{name}: {}", node.kubelet_checkpoint());
        let id = ids.iter().next().unwrap();
        let (uuid, replica) = id.split_once("::").unwrap_or_else(|| panic!("a replica ID is <uuid>::<n>: {id}"));
        assert!(replica.parse::<u32>().is_ok(), "{id}");
        wait_until_ok(&format!("the exporter naming {name} on {uuid}"), Duration::from_secs(30), || {
            let page = exporter.metrics();
            let found = attributed(&page, name);
            let any = page.lines().any(|l| l.contains(&format!("pod=\"{name}\"")) && l.contains(uuid));
            if any { Ok(()) } else { Err(format!("{found:?}\n{}", exporter.log_tail(5))) }
        });
    }
    let renamed = "{time_slicing: {replicas: 4, rename_by_default: true}}";
    let names = ["--kubelet.resource-names", "nvidia.com/gpu.shared"];
    assert_fake_kubelet_agrees(&node, &exporter, &scenario(), renamed, &["chat-0", "chat-1"], &names);

    // Without renameByDefault the replicas keep the plain resource name, which the
    // exporter reads by default.
    let config = config.replace("renameByDefault: true", "renameByDefault: false");
    let options = SimNodeOptions { plugin_config: Some(config), ..SimNodeOptions::default() };
    let plain = SimNode::start(&cp, "sim-shared-plain", &scenario(), &options).unwrap();
    wait_allocatable(&cp, "32 replicas as nvidia.com/gpu", "sim-shared-plain", "nvidia.com/gpu", 32);
    let exporter = plain.start_exporter(&[]);
    cp.apply(&pod("chat-plain", "sim-shared-plain", "nvidia.com/gpu", 1));
    wait_running(&cp, "chat-plain", &plain);
    let ids = checkpointed(&cp, &plain, "chat-plain");
    assert!(ids.iter().all(|id| id.contains("::")) && ids.len() == 1, "one replica: {ids:?}");
    let plugin = "{time_slicing: {replicas: 4}}";
    assert_fake_kubelet_agrees(&plain, &exporter, &scenario(), plugin, &["chat-plain"], &[]);
}

#[test]
fn mig_instances_under_the_mixed_strategy_are_allocated_and_attributed() {
    let cp = ControlPlane::start();
    let scenario =
        std::fs::read_to_string(test_support::simulated::workspace().join("fake-nvml/scenarios/h200-mig-node.yaml"))
            .unwrap();
    let options = SimNodeOptions { mig_strategy: Some("mixed"), ..SimNodeOptions::default() };
    let node = SimNode::start(&cp, "sim-mig", &scenario, &options).unwrap();
    wait_until_ok("the MIG resources allocatable", Duration::from_secs(60), || {
        match (
            allocatable(&cp, "sim-mig", "nvidia.com/mig-1g.18gb"),
            allocatable(&cp, "sim-mig", "nvidia.com/mig-3g.71gb"),
        ) {
            (Some(7), Some(2)) => Ok(()),
            other => Err(format!(
                "{other:?}\n{}",
                node.log("device-plugin").lines().rev().take(5).collect::<Vec<_>>().join("\n")
            )),
        }
    });
    let exporter = node.start_exporter(&[]);
    cp.apply(&pod("small", "sim-mig", "nvidia.com/mig-1g.18gb", 1));
    wait_running(&cp, "small", &node);
    let allocated = checkpointed(&cp, &node, "small");
    assert_eq!(allocated.len(), 1, "{}", node.kubelet_checkpoint());
    let mig = allocated.iter().next().unwrap().clone();
    assert!(mig.starts_with("MIG-"), "a MIG device's ID is its MIG UUID: {mig}");
    wait_until_ok("the exporter naming the small pod on its instance", Duration::from_secs(30), || {
        let page = exporter.metrics();
        let on: Vec<&str> = series(&page, "gpu_device_pod_info", &[("pod", "small")]);
        match on.as_slice() {
            [l] if label(l, "mig_uuid") == Some(mig.as_str()) && label(l, "mig_profile") == Some("1g.18gb") => Ok(()),
            other => Err(format!("{other:?}\n{}", exporter.log_tail(5))),
        }
    });
    assert_fake_kubelet_agrees(&node, &exporter, &scenario, "{mig_strategy: mixed}", &["small"], &[]);

    // A media-extension instance (`1g.18gb+me`): NVIDIA's plugin lists a pattern per
    // profile in profile order and matches it anywhere in the name, so the plain
    // `1g.18gb` takes it (fake_nvml::scenario::mig::mixed_resource, which fake-kubelet
    // follows): seven `nvidia.com/mig-1g.18gb`, no `nvidia.com/mig-1g.18gb.me`.
    let plain = "        - {profile: 1g.18gb}\n        - {profile: 1g.18gb}\n  - model";
    assert!(scenario.contains(plain), "the H200 MIG scenario's layout");
    let media = scenario.replacen(plain, "        - {profile: 1g.18gb}\n        - {profile: 1g.18gb+me}\n  - model", 1);
    let me_node = SimNode::start(&cp, "sim-mig-me", &media, &options).unwrap();
    wait_until_ok("the media instance counted under 1g.18gb", Duration::from_secs(60), || {
        match (
            allocatable(&cp, "sim-mig-me", "nvidia.com/mig-1g.18gb"),
            allocatable(&cp, "sim-mig-me", "nvidia.com/mig-1g.18gb.me"),
        ) {
            (Some(7), None) => Ok(()),
            other => Err(format!(
                "{other:?}\n{}",
                me_node.log("device-plugin").lines().rev().take(5).collect::<Vec<_>>().join("\n")
            )),
        }
    });
}

#[test]
fn mig_instances_under_the_single_strategy_are_allocated_and_attributed() {
    let cp = ControlPlane::start();
    // The single strategy wants one profile on every GPU: both H200s as seven 1g.18gb.
    let h200 =
        std::fs::read_to_string(test_support::simulated::workspace().join("fake-nvml/scenarios/h200-mig-node.yaml"))
            .unwrap();
    assert!(h200.contains("layout: all-3g.71gb"), "the H200 MIG scenario's layout");
    let scenario = h200.replace("layout: all-3g.71gb", "layout: all-1g.18gb");
    let options = SimNodeOptions { mig_strategy: Some("single"), ..SimNodeOptions::default() };
    let node = SimNode::start(&cp, "sim-single", &scenario, &options).unwrap();
    wait_until_ok("fourteen MIG devices as nvidia.com/gpu", Duration::from_secs(60), || {
        match (
            allocatable(&cp, "sim-single", "nvidia.com/gpu"),
            allocatable(&cp, "sim-single", "nvidia.com/mig-1g.18gb"),
        ) {
            (Some(14), None | Some(0)) => Ok(()),
            other => Err(format!(
                "{other:?}\n{}",
                node.log("device-plugin").lines().rev().take(5).collect::<Vec<_>>().join("\n")
            )),
        }
    });
    let exporter = node.start_exporter(&[]);
    cp.apply(&pod("single", "sim-single", "nvidia.com/gpu", 2));
    wait_running(&cp, "single", &node);
    let allocated = checkpointed(&cp, &node, "single");
    assert!(allocated.len() == 2 && allocated.iter().all(|id| id.starts_with("MIG-")), "{allocated:?}");
    wait_until_ok("the exporter naming the pod on both instances", Duration::from_secs(30), || {
        let page = exporter.metrics();
        let on: BTreeSet<String> = series(&page, "gpu_device_pod_info", &[("pod", "single")])
            .into_iter()
            .filter_map(|l| label(l, "mig_uuid").map(str::to_string))
            .collect();
        if on == allocated { Ok(()) } else { Err(format!("{on:?}\n{}", exporter.log_tail(5))) }
    });
    assert_fake_kubelet_agrees(&node, &exporter, &scenario, "{mig_strategy: single}", &["single"], &[]);
}

#[test]
fn a_node_that_cannot_start_says_why() {
    let cp = ControlPlane::start();
    let broken = cp.dir.join("broken.kubeconfig");
    std::fs::write(&broken, "apiVersion: v1\nkind: Config\nclusters: [this is not a cluster]\n").unwrap();
    let options =
        SimNodeOptions { override_args: vec![("--kubeconfig", broken.display().to_string())], ..Default::default() };
    let said = SimNode::start(&cp, "sim-broken", &scenario(), &options).unwrap_err();
    assert!(said.contains("sim-broken: the kubelet did not start"), "{said}");
    assert!(said.contains("kubeconfig"), "the kubelet's own words are shown: {said}");

    let options =
        SimNodeOptions { plugin_config: Some("version: v1\nsharing: sideways\n".into()), ..Default::default() };
    let said = SimNode::start(&cp, "sim-badplugin", &scenario(), &options).unwrap_err();
    assert!(said.contains("sim-badplugin: NVIDIA's device plugin"), "{said}");
    assert!(said.contains("config"), "the plugin's own words are shown: {said}");

    // A fake-nvml that lacks a symbol the plugin calls at start-up: a copy of the library
    // whose nvmlDeviceGetMinorNumber is renamed in its symbol tables.
    let bins = cp.dir.join("bins-without-a-symbol");
    std::fs::create_dir_all(&bins).unwrap();
    let built = test_support::simulated::binaries();
    for program in ["fake-nvml", "sim-cri"] {
        std::os::unix::fs::symlink(built.join(program), bins.join(program)).unwrap();
    }
    let mut library = std::fs::read(built.join("libfake_nvml.so")).unwrap();
    let (name, renamed) = (b"nvmlDeviceGetMinorNumber\0", b"nvmlDeviceGetMinorNumbeX\0");
    let mut renames = 0;
    for at in 0..library.len() - name.len() {
        if &library[at..at + name.len()] == name {
            library[at..at + name.len()].copy_from_slice(renamed);
            renames += 1;
        }
    }
    assert!(renames > 0, "the library names nvmlDeviceGetMinorNumber");
    std::fs::write(bins.join("libfake_nvml.so"), library).unwrap();
    let options = SimNodeOptions { bin_dir: Some(bins), ..Default::default() };
    let said = SimNode::start(&cp, "sim-nosymbol", &scenario(), &options).unwrap_err();
    assert!(said.contains("fake-nvml lacks an NVML symbol the plugin called"), "{said}");
    assert!(said.contains("undefined symbol: nvmlDeviceGetMinorNumber"), "the symbol is named: {said}");
}
