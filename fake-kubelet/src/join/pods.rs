//! What the simulated kubelet reads from and writes to a Pod: the devices its
//! containers ask for, its QoS class, and the status a kubelet reports once its
//! containers run.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use fake_nvml::scenario::pods::QosClass;

/// The extended resources a container asks for that the device plugin serves
/// (`nvidia.com/...`), with counts; extended resources are whole numbers and their
/// requests equal their limits.
pub fn device_requests(pod: &Pod) -> Vec<(String, BTreeMap<String, u64>)> {
    let Some(spec) = &pod.spec else { return Vec::new() };
    spec.containers
        .iter()
        .map(|c| {
            let limits = c.resources.as_ref().and_then(|r| r.limits.clone()).unwrap_or_default();
            let wanted = limits
                .iter()
                .filter(|(name, _)| name.starts_with("nvidia.com/"))
                .filter_map(|(name, q)| q.0.parse::<u64>().ok().map(|n| (name.clone(), n)))
                .filter(|(_, n)| *n > 0)
                .collect();
            (c.name.clone(), wanted)
        })
        .collect()
}

/// The pod's QoS class by the kubelet's rule (`pkg/apis/core/v1/helper/qos`): no CPU or
/// memory request or limit anywhere is BestEffort; every container with CPU and memory
/// limits equal to its requests is Guaranteed; anything else Burstable.
pub fn qos(pod: &Pod) -> QosClass {
    let Some(spec) = &pod.spec else { return QosClass::BestEffort };
    let compute = ["cpu", "memory"];
    let mut any = false;
    let mut guaranteed = true;
    for c in &spec.containers {
        let r = c.resources.clone().unwrap_or_default();
        let limits = r.limits.unwrap_or_default();
        // Requests default to the limits where only limits are given.
        let mut requests = r.requests.unwrap_or_default();
        for (k, v) in &limits {
            requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for name in compute {
            let (req, lim) = (requests.get(name), limits.get(name));
            any |= req.is_some() || lim.is_some();
            guaranteed &= matches!((req, lim), (Some(a), Some(b)) if a == b);
        }
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// The `status` of a pod whose containers all run and are ready.
pub fn running_status(
    pod: &Pod,
    host_ip: &str,
    pod_ip: &str,
    container_ids: &[(String, String)],
    qos: QosClass,
    now: jiff::Timestamp,
) -> PodStatus {
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    };
    let images: BTreeMap<&str, &str> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| (c.name.as_str(), c.image.as_deref().unwrap_or("")))
        .collect();
    PodStatus {
        phase: Some("Running".into()),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: Some(pod_ip.into()),
        pod_ips: Some(vec![PodIP { ip: pod_ip.into() }]),
        start_time: Some(Time(now)),
        qos_class: Some(
            match qos {
                QosClass::Guaranteed => "Guaranteed",
                QosClass::Burstable => "Burstable",
                QosClass::BestEffort => "BestEffort",
            }
            .into(),
        ),
        conditions: Some(
            ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"].map(condition).to_vec(),
        ),
        container_statuses: Some(
            container_ids
                .iter()
                .map(|(name, id)| ContainerStatus {
                    name: name.clone(),
                    ready: true,
                    started: Some(true),
                    restart_count: 0,
                    image: images.get(name.as_str()).copied().unwrap_or("").into(),
                    image_id: String::new(),
                    container_id: Some(format!("containerd://{id}")),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: Some(Time(now)) }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                })
                .collect(),
        ),
        ..PodStatus::default()
    }
}

/// The status of a pod the node cannot admit: its devices are not there.
pub fn refused_status(message: &str) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some("UnexpectedAdmissionError".into()),
        message: Some(format!("Allocate failed due to {message}, which is unexpected")),
        ..PodStatus::default()
    }
}

/// A container id (64 hex digits) that stays the same for the same pod and container.
pub fn container_id(pod_uid: &str, container: &str) -> String {
    (0..4u64)
        .map(|round| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ round;
            for b in pod_uid.bytes().chain([0]).chain(container.bytes()) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            format!("{h:016x}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_json::from_value(serde_yaml_ng::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn gpu_limits_are_the_device_requests_and_decide_nothing_about_qos() {
        let p = pod("spec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: '1'}}}, {name: b}]}");
        assert_eq!(device_requests(&p), [("a".into(), [("nvidia.com/gpu".into(), 1)].into()), ("b".into(), [].into())]);
        assert_eq!(qos(&p), QosClass::BestEffort);
        let p = pod("spec: {containers: [{name: a, resources: {limits: {cpu: '2', memory: 1Gi}}}]}");
        assert_eq!(qos(&p), QosClass::Guaranteed);
        let p = pod("spec: {containers: [{name: a, resources: {requests: {cpu: '1'}}}]}");
        assert_eq!(qos(&p), QosClass::Burstable);
    }

    #[test]
    fn container_ids_are_stable_hex() {
        let id = container_id("6f1e8c1a-0000-4000-8000-000000000001", "inference");
        assert_eq!(id.len(), 64);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(id, container_id("6f1e8c1a-0000-4000-8000-000000000001", "inference"));
        assert_ne!(id, container_id("6f1e8c1a-0000-4000-8000-000000000001", "sidecar"));
    }
}
