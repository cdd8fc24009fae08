//! A simulated node's scenario file as its pods come and go: the node's own scenario
//! (its GPUs, MIG layout, faults) with the pods the API server bound to it, their
//! devices and their processes' load, written for fake-nvml to follow
//! (`FAKE_NVML_LIVE=1`) and read back here for pod-resources and `/proc`.
//!
//! Work is on the YAML tree, so every key of the node's file passes through untouched
//! except three: `pods` (replaced), a whole GPU's `values.utilization` (the sum of its
//! processes' SM utilization, at most 100) and, on a MIG GPU, the instances (a `layout`
//! is written out as the instances it stands for, in the same order, so that placements
//! do not change) with each held instance's `sm_activity` and `memory_used_mib`.

use serde_yaml_ng::{Mapping, Value};

use super::devices::Device;
use super::load::PodLoad;
use fake_nvml::scenario::Scenario;
use fake_nvml::scenario::pods::QosClass;

/// A pod placed on the node, as the scenario describes it.
#[derive(Debug, Clone)]
pub struct PlacedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub qos: QosClass,
    pub labels: std::collections::BTreeMap<String, String>,
    pub containers: Vec<PlacedContainer>,
    pub load: PodLoad,
}

/// One container: its runtime id, devices and one process per device.
#[derive(Debug, Clone)]
pub struct PlacedContainer {
    pub name: String,
    /// 64 hex digits.
    pub id: String,
    pub devices: Vec<Device>,
    /// One per device, in the same order.
    pub pids: Vec<u32>,
}

/// Why the node's file could not be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("{file}: the node's scenario is not a YAML mapping with a `gpus` list")]
    Shape { file: String },
    #[error("{file}: {source}")]
    Yaml {
        file: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
}

fn key(k: &str) -> Value {
    Value::String(k.to_string())
}

fn number(v: f64) -> Value {
    // Two decimals are plenty for a percentage and keep the file readable.
    // `+ 0.0` turns a rounded -0.0 into 0.0.
    Value::Number(serde_yaml_ng::Number::from((v * 100.0).round() / 100.0 + 0.0))
}

fn mapping(entries: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Mapping(entries.into_iter().map(|(k, v)| (key(k), v)).collect())
}

/// The node's scenario text with `pods` on it; `base` is the node's own file (named
/// `file` in errors) and `resolved` the scenario it reads as.
pub fn render(file: &str, base: &str, resolved: &Scenario, pods: &[PlacedPod]) -> Result<String, LiveError> {
    let shape = || LiveError::Shape { file: file.to_string() };
    let mut root: Value =
        serde_yaml_ng::from_str(base).map_err(|source| LiveError::Yaml { file: file.to_string(), source })?;
    let top = root.as_mapping_mut().ok_or_else(shape)?;
    let gpus = top.get_mut("gpus").and_then(Value::as_sequence_mut).ok_or_else(shape)?;
    for (index, gpu_value) in gpus.iter_mut().enumerate() {
        let gpu = gpu_value.as_mapping_mut().ok_or_else(shape)?;
        let Some(resolved_gpu) = resolved.gpus.get(index) else { continue };
        let on_gpu = |mig: Option<u32>| {
            pods.iter().flat_map(move |p| {
                p.containers.iter().flat_map(move |c| {
                    c.devices
                        .iter()
                        .filter(move |d| d.gpu == index as u32 && d.mig == mig)
                        .map(move |_| (p.load, c.devices.len()))
                })
            })
        };
        match &resolved_gpu.mig {
            None => {
                let busy: f64 = on_gpu(None).map(|(l, _)| l.sm_utilization).sum();
                let values = gpu.entry(key("values")).or_insert_with(|| Value::Mapping(Mapping::new()));
                let values = values.as_mapping_mut().ok_or_else(shape)?;
                values.insert(key("utilization"), number(busy.min(100.0)));
            }
            Some(instances) => {
                let mig = gpu.get_mut("mig").and_then(Value::as_mapping_mut).ok_or_else(shape)?;
                let mut written = Vec::new();
                for instance in instances {
                    let mut entry = Mapping::new();
                    entry.insert(key("profile"), Value::String(instance.profile.name.to_string()));
                    entry.insert(key("uuid"), Value::String(instance.uuid.clone()));
                    let held: Vec<(PodLoad, usize)> = on_gpu(Some(instance.index)).collect();
                    if !held.is_empty() {
                        let activity: f64 = held.iter().map(|(l, _)| l.sm_utilization).sum();
                        let memory: f64 = held.iter().map(|(l, n)| l.memory_used_mib / *n as f64).sum();
                        entry.insert(
                            key("values"),
                            mapping([
                                ("sm_activity", number(activity.min(100.0))),
                                ("memory_used_mib", number(memory)),
                            ]),
                        );
                    }
                    written.push(Value::Mapping(entry));
                }
                mig.remove("layout");
                mig.insert(key("instances"), Value::Sequence(written));
            }
        }
    }
    top.insert(key("pods"), Value::Sequence(pods.iter().map(pod_value).collect()));
    serde_yaml_ng::to_string(&root).map_err(|source| LiveError::Yaml { file: file.to_string(), source })
}

fn pod_value(pod: &PlacedPod) -> Value {
    let qos = match pod.qos {
        QosClass::Guaranteed => "guaranteed",
        QosClass::Burstable => "burstable",
        QosClass::BestEffort => "best_effort",
    };
    let labels = pod.labels.iter().map(|(k, v)| (key(k), Value::String(v.clone()))).collect();
    let containers = pod
        .containers
        .iter()
        .map(|c| {
            let devices = c
                .devices
                .iter()
                .filter(|d| d.claim.is_none())
                .map(|d| {
                    let mut m = Mapping::new();
                    m.insert(key("resource"), Value::String(d.resource.clone()));
                    m.insert(key("gpu"), Value::from(d.gpu));
                    if let Some(mig) = d.mig {
                        m.insert(key("mig"), Value::from(mig));
                    }
                    if let Some(replica) = d.replica {
                        m.insert(key("replica"), Value::from(replica));
                    }
                    Value::Mapping(m)
                })
                .collect();
            // Devices held through claims, as the scenario names them: the claim, the GPU
            // and the MIG instance.
            let claims = c
                .devices
                .iter()
                .filter_map(|d| {
                    let mut m = Mapping::new();
                    m.insert(key("name"), Value::String(d.claim.clone()?));
                    m.insert(key("gpu"), Value::from(d.gpu));
                    if let Some(mig) = d.mig {
                        m.insert(key("mig"), Value::from(mig));
                    }
                    Some(Value::Mapping(m))
                })
                .collect();
            let share = c.devices.len().max(1) as f64;
            let processes = c
                .devices
                .iter()
                .zip(&c.pids)
                .map(|(d, pid)| {
                    let mut m = Mapping::new();
                    m.insert(key("pid"), Value::from(*pid));
                    m.insert(key("gpu"), Value::from(d.gpu));
                    if let Some(mig) = d.mig {
                        m.insert(key("mig"), Value::from(mig));
                    }
                    m.insert(key("memory_used_mib"), number(pod.load.memory_used_mib / share));
                    m.insert(key("sm_utilization"), number(pod.load.sm_utilization));
                    Value::Mapping(m)
                })
                .collect();
            mapping([
                ("name", Value::String(c.name.clone())),
                ("id", Value::String(c.id.clone())),
                ("devices", Value::Sequence(devices)),
                ("claims", Value::Sequence(claims)),
                ("processes", Value::Sequence(processes)),
            ])
        })
        .collect();
    mapping([
        ("namespace", Value::String(pod.namespace.clone())),
        ("name", Value::String(pod.name.clone())),
        ("uid", Value::String(pod.uid.clone())),
        ("qos", Value::String(qos.into())),
        ("labels", Value::Mapping(labels)),
        ("containers", Value::Sequence(containers)),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::devices::DeviceTable;
    use super::*;

    const BASE: &str = "description: two GPUs\ngpus:\n  - model: A100-SXM4-80GB\n    values: {power_watts: 300}\n  \
                        - model: A100-SXM4-80GB\n    mig: {layout: all-3g.40gb}\n";

    fn placed(name: &str, device: Device, pid: u32, sm: f64) -> PlacedPod {
        PlacedPod {
            namespace: "ai-inference".into(),
            name: name.into(),
            uid: format!("{:08}-0000-4000-8000-000000000000", pid),
            qos: QosClass::BestEffort,
            labels: [("app".to_string(), "inference".to_string())].into(),
            containers: vec![PlacedContainer {
                name: "inference".into(),
                id: format!("{pid:064x}"),
                devices: vec![device],
                pids: vec![pid],
            }],
            load: PodLoad { sm_utilization: sm, memory_used_mib: 2000.0 },
        }
    }

    #[test]
    fn the_written_node_reads_back_with_its_pods_processes_and_load() {
        let base = Scenario::parse("node.yaml", BASE).unwrap();
        let table = DeviceTable::new(&base, 4);
        let replicas: Vec<&Device> = table.devices.iter().filter(|d| d.resource == "nvidia.com/gpu").collect();
        let mig = table.devices.iter().find(|d| d.mig == Some(1)).unwrap();
        let pods = [
            placed("a", replicas[0].clone(), 50001, 30.0),
            placed("b", replicas[1].clone(), 50002, 25.5),
            placed("c", mig.clone(), 50003, 70.0),
        ];
        let text = render("node.yaml", BASE, &base, &pods).unwrap();
        let live = Scenario::parse("live.yaml", &text).unwrap();
        assert_eq!(live.pods.len(), 3);
        assert_eq!(live.processes.len(), 3);
        assert_eq!(live.gpus[0].values.utilization.as_ref().unwrap().at(0.0), 55.5);
        assert_eq!(live.gpus[0].values.power_watts.as_ref().unwrap().at(0.0), 300.0, "other keys pass through");
        let instances = live.gpus[1].mig.as_ref().unwrap();
        assert_eq!(instances.len(), 2, "the layout written out");
        assert_eq!(instances[1].uuid, base.gpus[1].mig.as_ref().unwrap()[1].uuid);
        assert_eq!(instances[1].placement_start, base.gpus[1].mig.as_ref().unwrap()[1].placement_start);
        assert_eq!(instances[1].values.sm_activity.as_ref().unwrap().at(0.0), 70.0);
        assert!(instances[0].values.sm_activity.is_none());
        let c = &live.pods[2].containers[0];
        assert_eq!(c.devices, [(mig.resource.clone(), mig.id.clone())]);
        // Emptied again: no pods, idle GPUs.
        let text = render("node.yaml", BASE, &base, &[]).unwrap();
        let live = Scenario::parse("live.yaml", &text).unwrap();
        assert!(live.pods.is_empty());
        assert_eq!(live.gpus[0].values.utilization.as_ref().unwrap().at(0.0), 0.0);
    }

    #[test]
    fn a_device_held_through_a_claim_is_written_as_the_claim_with_its_process() {
        let base_text =
            "gpus:\n  - model: H100-SXM5-80GB\n  - model: H100-SXM5-80GB\ndra: {driver: gpu.nvidia.com, gpus: [1]}\n";
        let base = Scenario::parse("node.yaml", base_text).unwrap();
        let claimed = Device {
            resource: "gpu.nvidia.com".into(),
            id: "gpu-1".into(),
            gpu: 1,
            mig: None,
            replica: None,
            claim: Some("train-gpu".into()),
        };
        let text = render("node.yaml", base_text, &base, &[placed("t", claimed, 50001, 40.0)]).unwrap();
        let live = Scenario::parse("live.yaml", &text).unwrap();
        let c = &live.pods[0].containers[0];
        assert!(c.devices.is_empty(), "not the device plugin's: {text}");
        assert_eq!((c.claims[0].claim.as_str(), c.claims[0].device.as_str()), ("train-gpu", "gpu-1"));
        assert_eq!(live.processes.len(), 1);
        assert_eq!(live.gpus[1].values.utilization.as_ref().unwrap().at(0.0), 40.0);
    }

    #[test]
    fn a_node_file_without_gpus_is_refused() {
        let base = Scenario::parse("node.yaml", BASE).unwrap();
        let err = render("n.yaml", "description: nothing\n", &base, &[]).unwrap_err();
        assert_eq!(err.to_string(), "n.yaml: the node's scenario is not a YAML mapping with a `gpus` list");
    }
}
