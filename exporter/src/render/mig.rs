//! Families of GPM activity, MIG layout and processes, and the per-instance label list.
//!
//! A MIG instance's series carry the GPU's labels (its `uuid` is the parent GPU's)
//! plus `mig_profile`, `gpu_instance_id`, `compute_instance_id` and `mig_uuid` (the
//! MIG device UUID the device plugin allocates). Summing a family over a node must
//! therefore filter `mig_profile=""` or `mig_profile!=""` to avoid counting a GPU's
//! memory twice.

use super::families as f;
use super::labels::{LabelSet, push_mig_labels, push_owner_labels};
use super::sink::Exposition;
use crate::exposition::Family;
use crate::snapshot::{GpuSnapshot, MigInstance, Snapshot};

/// Label sets of the MIG instances of GPUs that answered this cycle: (labels, instance).
pub fn instance_labels<'a>(snapshot: &'a Snapshot, gpu_labels: &[LabelSet]) -> Vec<(LabelSet, &'a MigInstance)> {
    let mut out = Vec::new();
    for (gpu, labels) in snapshot.gpus.iter().zip(gpu_labels) {
        if gpu.readings.is_none() {
            continue;
        }
        for instance in gpu.mig.iter().flat_map(|m| &m.instances) {
            let mut l = labels.clone();
            push_mig_labels(&mut l, instance);
            push_owner_labels(&mut l, snapshot, &instance.uuid);
            out.push((l, instance));
        }
    }
    out
}

/// The instance's value in one of the contract families, if it has one.
pub fn instance_value(family: &str, instance: &MigInstance) -> Option<f64> {
    match family {
        // Per-instance utilization is GPM SM activity; absent where the GPU has no GPM (A100).
        "gpu_utilization" => instance.sm_activity_percent,
        "gpu_memory_utilization" => instance.memory.map(|m| m.utilization_percent()),
        "gpu_memory_used_bytes" => instance.memory.map(|m| m.used_bytes as f64),
        "gpu_memory_total_bytes" => instance.memory.map(|m| m.total_bytes as f64),
        _ => None,
    }
}

fn answered<'a>(snapshot: &'a Snapshot, labels: &'a [LabelSet]) -> Vec<(&'a GpuSnapshot, &'a LabelSet)> {
    snapshot.gpus.iter().zip(labels).filter(|(g, _)| g.readings.is_some()).collect()
}

/// Renders the GPM, MIG and process families.
pub fn render_mig(
    enc: &mut dyn Exposition,
    snapshot: &Snapshot,
    gpu_labels: &[LabelSet],
    instances: &[(LabelSet, &MigInstance)],
) {
    let gpus = answered(snapshot, gpu_labels);
    type GpuActivity = fn(&GpuSnapshot) -> Option<f64>;
    type InstanceActivity = fn(&MigInstance) -> Option<f64>;
    let activity: [(&Family, GpuActivity, InstanceActivity); 4] = [
        (&f::SM_ACTIVITY, |g| g.readings.as_ref()?.sm_activity_percent, |i| i.sm_activity_percent),
        (&f::TENSOR_ACTIVITY, |g| g.readings.as_ref()?.tensor_activity_percent, |i| i.tensor_activity_percent),
        (&f::DRAM_ACTIVITY, |g| g.readings.as_ref()?.dram_activity_percent, |i| i.dram_activity_percent),
        (&f::GRAPHICS_ACTIVITY, |g| g.readings.as_ref()?.graphics_activity_percent, |i| i.graphics_activity_percent),
    ];
    for (family, of_gpu, of_instance) in activity {
        enc.emit(family, &mut |s| {
            for (gpu, l) in &gpus {
                if let Some(v) = of_gpu(gpu) {
                    s.sample(l, &[], v);
                }
            }
            for (l, instance) in instances {
                if let Some(v) = of_instance(instance) {
                    s.sample(l, &[], v);
                }
            }
        });
    }
    enc.emit(&f::MIG_ENABLED, &mut |s| {
        for (gpu, l) in &gpus {
            if let Some(enabled) = gpu.readings.as_ref().and_then(|r| r.mig_enabled) {
                s.sample(l, &[], if enabled { 1.0 } else { 0.0 });
            }
        }
    });
    enc.emit(&f::MIG_INSTANCE_INFO, &mut |s| instances.iter().for_each(|(l, _)| s.sample(l, &[], 1.0)));
    enc.emit(&f::MIG_INSTANCE_SLICES, &mut |s| {
        instances.iter().for_each(|(l, instance)| s.sample(l, &[], f64::from(instance.compute_slices)));
    });
    enc.emit(&f::MIG_SLICES_FREE, &mut |s| {
        for (gpu, l) in &gpus {
            if let Some(mig) = &gpu.mig {
                s.sample(l, &[], f64::from(mig.free_compute_slices));
            }
        }
    });
    enc.emit(&f::MIG_SLICES_TOTAL, &mut |s| {
        for (gpu, l) in &gpus {
            if let Some(mig) = &gpu.mig {
                s.sample(l, &[], f64::from(mig.total_compute_slices));
            }
        }
    });
    enc.emit(&f::MIG_PROFILE_AVAILABLE, &mut |s| {
        for (gpu, l) in &gpus {
            for (profile, count) in gpu.mig.iter().flat_map(|m| &m.available_by_profile) {
                s.sample(l, &[("mig_profile", profile)], f64::from(*count));
            }
        }
    });
    enc.emit(&f::PROCESSES, &mut |s| {
        for (gpu, l) in &gpus {
            if gpu.mig.is_none() {
                s.sample(l, &[], gpu.processes.len() as f64);
            }
        }
        for (l, instance) in instances {
            s.sample(l, &[], instance.processes.len() as f64);
        }
    });
}
