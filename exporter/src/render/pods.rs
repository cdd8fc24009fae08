//! Pod attribution families (the owner labels themselves are `super::labels`).
//!
//! Per-pod series carry the GPU's labels (`node`, `gpu`, `uuid`, `model`, constant
//! labels), on MIG instances also `mig_profile`, `gpu_instance_id`,
//! `compute_instance_id` and `mig_uuid`, then `namespace`, `pod`, `container`. Nothing
//! here renders when attribution is not running.
//!
//! `gpu_device_pod_info` is the attribution info family: one series per device (GPU or
//! MIG instance) that exactly one container holds, with the same labels as the device's
//! gauges. A device held through a ResourceClaim (DRA) adds `claim` after `container`,
//! on the device's gauges, this family and the per-pod series alike. Counters carry no owner labels (see [`super`]); joining them with this family
//! on the device labels names the holder.

use std::collections::HashMap;

use super::families as f;
use super::labels::{LabelSet, push_container, push_mig_labels, push_owner, push_owner_labels};
use super::sink::Exposition;
use super::{flag, unix_seconds};
use crate::snapshot::Snapshot;
use crate::snapshot::attribution::{AttributionResult, Unattributed};

/// The GPU label sets, with `namespace`, `pod`, `container` added where one container
/// holds the whole GPU.
pub(super) fn with_owner_labels(snapshot: &Snapshot, base: &[LabelSet]) -> Vec<LabelSet> {
    snapshot
        .gpus
        .iter()
        .zip(base)
        .map(|(gpu, labels)| {
            let mut labels = labels.clone();
            push_owner_labels(&mut labels, snapshot, &gpu.identity.uuid);
            labels
        })
        .collect()
}

/// Renders the pod and attribution families. `gpu_labels` are without owner labels;
/// `None` when our naming is not served, which leaves only the sources' own
/// (`gpu_exporter_*`) families.
pub(super) fn render_pods(
    enc: &mut dyn Exposition,
    snapshot: &Snapshot,
    gpu_labels: Option<&[LabelSet]>,
    own: &LabelSet,
) {
    let Some(result) = &snapshot.attribution else { return };
    let Some(gpu_labels) = gpu_labels else {
        render_sources(enc, result, own);
        return;
    };
    let by_index: HashMap<u32, &LabelSet> = snapshot.gpus.iter().map(|g| g.index).zip(gpu_labels).collect();
    render_pod_info(enc, result, own);
    render_device_pod_info(enc, snapshot, result, gpu_labels);
    let usage_labels: Vec<Option<LabelSet>> = result
        .usage
        .iter()
        .map(|u| {
            let mut labels = (*by_index.get(&u.gpu)?).clone();
            if let Some(mig) = &u.mig {
                labels.push("mig_profile", mig.profile.as_str());
                labels.push("gpu_instance_id", mig.gpu_instance_id.to_string());
                labels.push("compute_instance_id", mig.compute_instance_id.to_string());
                labels.push("mig_uuid", mig.uuid.as_str());
            }
            push_container(&mut labels, &u.owner, u.claim.as_deref());
            Some(labels)
        })
        .collect();
    enc.emit(&f::POD_UTILIZATION, &mut |s| {
        for (u, labels) in result.usage.iter().zip(&usage_labels) {
            if let (Some(v), Some(l)) = (u.utilization_percent, labels) {
                s.sample(l, &[], v);
            }
        }
    });
    enc.emit(&f::POD_MEMORY_USED, &mut |s| {
        for (u, labels) in result.usage.iter().zip(&usage_labels) {
            if let (Some(v), Some(l)) = (u.memory_used_bytes, labels) {
                s.sample(l, &[], v);
            }
        }
    });
    enc.emit(&f::POD_MEMORY_SCALED, &mut |s| {
        for (gpu, labels) in snapshot.gpus.iter().zip(gpu_labels) {
            if gpu.readings.is_some() {
                s.sample(labels, &[], flag(result.memory_scaled_gpus.contains(&gpu.index)));
            }
        }
    });
    render_sources(enc, result, own);
}

fn render_pod_info(enc: &mut dyn Exposition, result: &AttributionResult, own: &LabelSet) {
    enc.emit(&f::POD_INFO, &mut |s| {
        for pod in &result.pods {
            let mut extra: Vec<(&str, &str)> =
                vec![("namespace", &pod.namespace), ("pod", &pod.pod), ("uid", &pod.uid)];
            extra.extend(pod.labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            s.sample(own, &extra, 1.0);
        }
    });
}

/// One series per held device, GPUs in snapshot order, each followed by its MIG instances.
/// Stale and lost GPUs keep theirs: holding a device does not depend on it answering, and
/// an XID on a lost GPU is exactly when the holder matters.
fn render_device_pod_info(
    enc: &mut dyn Exposition,
    snapshot: &Snapshot,
    result: &AttributionResult,
    gpu_labels: &[LabelSet],
) {
    enc.emit(&f::DEVICE_POD_INFO, &mut |s| {
        for (gpu, labels) in snapshot.gpus.iter().zip(gpu_labels) {
            let mut l = labels.clone();
            if push_owner(&mut l, result, &gpu.identity.uuid) {
                s.sample(&l, &[], 1.0);
            }
            for instance in gpu.mig.iter().flat_map(|m| &m.instances) {
                let mut l = labels.clone();
                push_mig_labels(&mut l, instance);
                if push_owner(&mut l, result, &instance.uuid) {
                    s.sample(&l, &[], 1.0);
                }
            }
        }
    });
}

fn render_sources(enc: &mut dyn Exposition, result: &AttributionResult, own: &LabelSet) {
    if let Some(kubelet) = &result.pod_resources {
        enc.emit(&f::POD_RESOURCES_UP, &mut |s| s.sample(own, &[], flag(kubelet.up)));
        enc.emit(&f::POD_RESOURCES_LAST_SUCCESS, &mut |s| {
            if let Some(t) = kubelet.last_success {
                s.sample(own, &[], unix_seconds(t));
            }
        });
        enc.emit(&f::POD_RESOURCES_ERRORS, &mut |s| {
            for (reason, count) in &kubelet.errors {
                s.sample(own, &[("reason", reason)], *count as f64);
            }
        });
        enc.emit(&f::POD_RESOURCES_UNKNOWN_DEVICES, &mut |s| s.sample(own, &[], result.unknown_devices as f64));
    }
    if let Some(watch) = &result.pod_watch {
        enc.emit(&f::POD_WATCH_UP, &mut |s| s.sample(own, &[], flag(watch.up)));
        enc.emit(&f::POD_WATCH_PODS, &mut |s| s.sample(own, &[], watch.pods as f64));
    }
    if let Some(slices) = &result.slice_watch {
        enc.emit(&f::SLICE_WATCH_UP, &mut |s| s.sample(own, &[], flag(slices.up)));
        enc.emit(&f::SLICE_DEVICES, &mut |s| s.sample(own, &[], slices.devices as f64));
    }
    enc.emit(&f::UNATTRIBUTED_PROCESSES, &mut |s| {
        for reason in Unattributed::ALL {
            let count = result.unattributed.get(&reason).copied().unwrap_or(0);
            s.sample(own, &[("reason", reason.as_str())], count as f64);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::super::{RenderContext, render};
    use super::*;
    use crate::exposition::Format;
    use crate::snapshot::attribution::{ContainerRef, MigRef, PodInfo, PodResourcesHealth, PodUsage, PodWatchHealth};
    use crate::snapshot::{GpuIdentity, GpuReadings, GpuSnapshot, GpuState};

    fn ctx() -> RenderContext {
        RenderContext {
            node: "n1".into(),
            extra_labels: vec![("cluster".into(), "prod".into())],
            version: "0".into(),
            revision: "r".into(),
            ..RenderContext::default()
        }
    }

    fn gpu(index: u32) -> GpuSnapshot {
        GpuSnapshot {
            index,
            identity: GpuIdentity { uuid: format!("GPU-{index}"), model: "M".into(), ..GpuIdentity::default() },
            state: GpuState::Ok,
            readings: Some(GpuReadings { utilization_percent: Some(70), ..GpuReadings::default() }),
            ..GpuSnapshot::default()
        }
    }

    fn owner(pod: &str) -> ContainerRef {
        ContainerRef { namespace: "ai".into(), pod: pod.into(), container: "main".into() }
    }

    fn snapshot() -> Snapshot {
        let result = AttributionResult {
            owners: [("GPU-0".to_string(), owner("train"))].into_iter().collect(),
            usage: vec![
                PodUsage {
                    gpu: 0,
                    mig: None,
                    owner: owner("train"),
                    exclusive: true,
                    utilization_percent: Some(70.0),
                    memory_used_bytes: Some(1024.0),
                    claim: None,
                },
                PodUsage {
                    gpu: 1,
                    mig: Some(MigRef {
                        uuid: "MIG-1".into(),
                        profile: "1g.10gb".into(),
                        gpu_instance_id: 9,
                        compute_instance_id: 0,
                    }),
                    owner: owner("emb"),
                    exclusive: true,
                    utilization_percent: None,
                    memory_used_bytes: Some(2048.0),
                    claim: None,
                },
            ],
            pods: vec![PodInfo {
                namespace: "ai".into(),
                pod: "train".into(),
                uid: "u1".into(),
                labels: vec![("label_app".into(), "trainer".into())],
            }],
            unattributed: [(Unattributed::Exited, 2)].into_iter().collect(),
            unknown_devices: 1,
            memory_scaled_gpus: vec![1],
            pod_resources: Some(PodResourcesHealth {
                up: true,
                last_success: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
                errors: [("socket_missing", 3)].into_iter().collect(),
            }),
            pod_watch: Some(PodWatchHealth { up: false, pods: 4 }),
            slice_watch: None,
            owner_claims: Default::default(),
            dra_devices: Default::default(),
        };
        Snapshot { gpus: vec![gpu(0), gpu(1)], attribution: Some(result), ..Snapshot::default() }
    }

    #[test]
    fn an_owned_gpu_carries_its_owner_and_pods_get_their_series() {
        let text = render(&snapshot(), &ctx(), Format::PrometheusText);
        assert!(
            text.contains("gpu_utilization{node=\"n1\",gpu=\"0\",uuid=\"GPU-0\",model=\"M\",cluster=\"prod\",namespace=\"ai\",pod=\"train\",container=\"main\"} 70\n"),
            "{text}"
        );
        assert!(
            text.contains("gpu_utilization{node=\"n1\",gpu=\"1\",uuid=\"GPU-1\",model=\"M\",cluster=\"prod\"} 70\n")
        );
        assert!(text.contains(
            "gpu_pod_utilization{node=\"n1\",gpu=\"0\",uuid=\"GPU-0\",model=\"M\",cluster=\"prod\",namespace=\"ai\",pod=\"train\",container=\"main\"} 70\n"
        ));
        assert!(text.contains(
            "gpu_pod_memory_used_bytes{node=\"n1\",gpu=\"1\",uuid=\"GPU-1\",model=\"M\",cluster=\"prod\",mig_profile=\"1g.10gb\",gpu_instance_id=\"9\",compute_instance_id=\"0\",mig_uuid=\"MIG-1\",namespace=\"ai\",pod=\"emb\",container=\"main\"} 2048\n"
        ), "{text}");
        assert_eq!(text.matches("gpu_pod_utilization{").count(), 1, "no figure, no series");
        assert!(text.contains("gpu_pod_info{node=\"n1\",cluster=\"prod\",namespace=\"ai\",pod=\"train\",uid=\"u1\",label_app=\"trainer\"} 1\n"));
        assert!(
            text.contains(
                "gpu_pod_memory_scaled{node=\"n1\",gpu=\"1\",uuid=\"GPU-1\",model=\"M\",cluster=\"prod\"} 1\n"
            )
        );
        assert!(text.contains("gpu_exporter_pod_resources_up{node=\"n1\",cluster=\"prod\"} 1\n"));
        assert!(text.contains(
            "gpu_exporter_pod_resources_last_success_timestamp_seconds{node=\"n1\",cluster=\"prod\"} 1700000000\n"
        ));
        assert!(text.contains(
            "gpu_exporter_pod_resources_errors_total{node=\"n1\",cluster=\"prod\",reason=\"socket_missing\"} 3\n"
        ));
        assert!(text.contains("gpu_exporter_pod_resources_unknown_devices{node=\"n1\",cluster=\"prod\"} 1\n"));
        assert!(text.contains("gpu_exporter_pod_watch_up{node=\"n1\",cluster=\"prod\"} 0\n"));
        assert!(
            text.contains("gpu_exporter_unattributed_processes{node=\"n1\",cluster=\"prod\",reason=\"exited\"} 2\n")
        );
        assert!(
            text.contains(
                "gpu_exporter_unattributed_processes{node=\"n1\",cluster=\"prod\",reason=\"unknown_pod\"} 0\n"
            )
        );
    }

    #[test]
    fn mig_instance_label_lists_get_their_owner() {
        let mut snapshot = snapshot();
        if let Some(a) = snapshot.attribution.as_mut() {
            a.owners.insert("MIG-1".into(), owner("emb"));
        }
        let mut labels = LabelSet::of(&[("node", "n1")]);
        push_owner_labels(&mut labels, &snapshot, "MIG-1");
        assert_eq!(labels.escaped(), "node=\"n1\",namespace=\"ai\",pod=\"emb\",container=\"main\"");
        let mut untouched = LabelSet::of(&[("node", "n1")]);
        push_owner_labels(&mut untouched, &snapshot, "MIG-unowned");
        assert_eq!(untouched.escaped(), "node=\"n1\"");
    }

    /// GPU 0 held by `train` with every counter and an XID; GPU 1 in MIG mode with its
    /// instance `MIG-1` held by `emb`.
    fn held_with_counters() -> Snapshot {
        use crate::snapshot::{EccCounts, MigInstance, MigState, XidRecord};
        let mut snapshot = snapshot();
        if let Some(r) = snapshot.gpus[0].readings.as_mut() {
            r.energy_joules = Some(5000.0);
            r.pcie_replays = Some(2);
            r.ecc = Some(EccCounts { corrected_volatile: 3, uncorrected_volatile: 1, ..EccCounts::default() });
        }
        snapshot.gpus[0]
            .xids
            .insert(79, XidRecord { count: 1, last_seen: UNIX_EPOCH + Duration::from_secs(1_700_000_000) });
        snapshot.gpus[1].mig = Some(MigState {
            instances: vec![MigInstance {
                uuid: "MIG-1".into(),
                profile: "1g.10gb".into(),
                gpu_instance_id: 9,
                compute_instance_id: 0,
                compute_slices: 1,
                ..MigInstance::default()
            }],
            ..MigState::default()
        });
        if let Some(a) = snapshot.attribution.as_mut() {
            a.owners.insert("MIG-1".into(), owner("emb"));
        }
        snapshot
    }

    #[test]
    fn held_devices_have_an_info_series_with_their_gauge_labels() {
        let text = render(&held_with_counters(), &ctx(), Format::PrometheusText);
        let info = samples(&text, "gpu_device_pod_info");
        assert_eq!(
            info,
            [
                "gpu_device_pod_info{node=\"n1\",gpu=\"0\",uuid=\"GPU-0\",model=\"M\",cluster=\"prod\",namespace=\"ai\",pod=\"train\",container=\"main\"} 1",
                "gpu_device_pod_info{node=\"n1\",gpu=\"1\",uuid=\"GPU-1\",model=\"M\",cluster=\"prod\",mig_profile=\"1g.10gb\",gpu_instance_id=\"9\",compute_instance_id=\"0\",mig_uuid=\"MIG-1\",namespace=\"ai\",pod=\"emb\",container=\"main\"} 1",
            ],
            "{text}"
        );
        // The info series has exactly the labels of the device's gauges, so a gauge joins 1:1.
        for line in info {
            let labels = line.split_once('{').and_then(|(_, rest)| rest.split_once('}')).map(|(l, _)| l).unwrap();
            let gauge = if labels.contains("mig_uuid") { "gpu_mig_instance_info" } else { "gpu_utilization" };
            assert!(text.contains(&format!("{gauge}{{{labels}}} ")), "{gauge} lacks {labels}:\n{text}");
        }
    }

    #[test]
    fn counters_and_xid_times_keep_the_device_labels_of_a_held_device() {
        let text = render(&held_with_counters(), &ctx(), Format::PrometheusText);
        let counters: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.strip_suffix(" counter")).collect();
        for family in [
            "gpu_energy_consumption_joules_total",
            "gpu_pcie_replays_total",
            "gpu_ecc_volatile_errors_total",
            "gpu_xid_errors_total",
        ] {
            assert!(counters.contains(&family), "{family} not rendered:\n{text}");
        }
        let held = "namespace=\"ai\",pod=\"train\"";
        for family in counters.iter().copied().chain(["gpu_xid_last_seen_timestamp_seconds"]) {
            for line in samples(&text, family) {
                assert!(!line.contains("pod="), "{line}");
            }
        }
        assert!(text.contains(
            "gpu_energy_consumption_joules_total{node=\"n1\",gpu=\"0\",uuid=\"GPU-0\",model=\"M\",cluster=\"prod\"} 5000\n"
        ), "{text}");
        assert!(text.contains(
            "gpu_xid_errors_total{node=\"n1\",gpu=\"0\",uuid=\"GPU-0\",model=\"M\",cluster=\"prod\",xid=\"79\"} 1\n"
        ));
        // Gauges of the same GPU keep the holder (the HPA and the adapter read them there).
        let power = samples(&text, "gpu_utilization").into_iter().find(|l| l.contains("GPU-0")).unwrap();
        assert!(power.contains(held), "{power}");
    }

    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines().filter(|l| !l.starts_with('#') && l.split(['{', ' ']).next() == Some(name)).collect()
    }

    /// The attribution and MIG families come out the same from both encoders.
    #[test]
    fn both_encodings_write_the_same_pod_families() {
        use super::super::{Encoding, render_encoded};
        for format in [Format::PrometheusText, Format::OpenMetrics] {
            let snapshot = std::sync::Arc::new(held_with_counters());
            let ours = render_encoded(&snapshot, &ctx(), format, &[], Encoding::Ours);
            let client = render_encoded(&snapshot, &ctx(), format, &[], Encoding::PrometheusClient);
            assert!(ours.contains("gpu_device_pod_info{") && ours.contains("mig_uuid=\"MIG-1\""), "{ours}");
            super::super::tests::assert_same_exposition(&client, &ours);
        }
    }

    #[test]
    fn nothing_renders_without_attribution() {
        let snapshot = Snapshot { gpus: vec![gpu(0)], ..Snapshot::default() };
        let text = render(&snapshot, &ctx(), Format::OpenMetrics);
        assert!(!text.contains("gpu_pod"), "{text}");
        assert!(!text.contains("pod_resources"));
        assert!(!text.contains("namespace="));
    }
}
