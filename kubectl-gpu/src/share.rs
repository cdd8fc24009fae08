//! Devices and the share of a GPU each holder has: the rule both `kubectl gpu` and the
//! `gpu-cost` recording rules apply.
//!
//! A **device** is what a pod is given: a whole GPU not in MIG mode, or a MIG instance.
//! Its **fraction** of the GPU is 1 for a whole GPU and, for a MIG instance, its compute
//! slices over the GPU's (`gpu_mig_instance_compute_slices / gpu_mig_compute_slices`:
//! 3g.40gb on an A100 is 3/7). Compute slices rather than memory slices because they
//! are what limits how the GPU can be cut (the GPU's 7 slices are the unit every MIG
//! profile is sized in) and both are exported; free slices are nobody's and count as
//! unallocated capacity.
//!
//! A device's **holders** are the pods the exporter attributes it to (see
//! [`crate::readings`]). Several holders (time-slicing, MPS, a shared MIG instance) split
//! it **equally**: each holder's **share** is fraction / holders. The exporter does not
//! say how many time-slice replicas each pod got, and a Prometheus rule cannot see the
//! device plugin's replica count, so an equal split is the rule that both sides can
//! compute from the same samples; with the seed's 4 replicas per GPU and 4 pods, it is
//! 1/4 each either way. The GPU's holders pay for all of it: a time-sliced GPU with two
//! of four replicas taken is split in halves, not quarters plus an unallocated half.
//!
//! A holder's **utilization of its share** is its own utilization of the device
//! (`gpu_pod_utilization`, percent of the device) times the number of holders, at most
//! 100: a pod given a quarter of a GPU's time that keeps the GPU 20 % busy uses 80 % of
//! what it was given. It is **idle** when that is under the floor (10 %); when the
//! exporter has no utilization for it (MIG instances of GPUs without GPM, such as
//! A100, and shared MIG instances), it is idle if the device runs no process at all,
//! and unknown otherwise.

use crate::readings::{Gpu, Holder, MigInstance};

/// Whether a holder is idle on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Idle {
    Idle,
    Busy,
    /// No utilization figure, and processes are running.
    Unknown,
}

/// A device of a GPU.
#[derive(Debug, Clone, Copy)]
pub struct Device<'a> {
    pub gpu: &'a Gpu,
    pub instance: Option<&'a MigInstance>,
}

impl<'a> Device<'a> {
    /// Every device of a GPU: the GPU itself unless it is in MIG mode, else its instances.
    pub fn of(gpu: &'a Gpu) -> Vec<Device<'a>> {
        if gpu.mig_enabled || !gpu.instances.is_empty() {
            gpu.instances.iter().map(|i| Device { gpu, instance: Some(i) }).collect()
        } else {
            vec![Device { gpu, instance: None }]
        }
    }

    /// The device's fraction of its GPU; `None` for a MIG instance whose slice counts
    /// the exporter did not give.
    pub fn fraction(&self) -> Option<f64> {
        match self.instance {
            None => Some(1.0),
            Some(i) => match (i.slices, self.gpu.mig_slices) {
                (Some(s), Some(total)) if total > 0.0 => Some(s / total),
                _ => None,
            },
        }
    }

    pub fn holders(&self) -> &'a [Holder] {
        match self.instance {
            None => &self.gpu.holders,
            Some(i) => &i.holders,
        }
    }

    /// Each holder's share of the GPU.
    pub fn share(&self) -> Option<f64> {
        let n = self.holders().len();
        if n == 0 { None } else { self.fraction().map(|f| f / n as f64) }
    }

    /// Processes on the device.
    pub fn processes(&self) -> Option<f64> {
        match self.instance {
            None => self.gpu.processes,
            Some(i) => i.processes,
        }
    }

    /// The device's own utilization (GPU utilization, or GPM SM activity of an instance).
    pub fn utilization(&self) -> Option<f64> {
        match self.instance {
            None => self.gpu.utilization,
            Some(i) => i.utilization,
        }
    }

    pub fn memory(&self) -> (Option<f64>, Option<f64>) {
        match self.instance {
            None => (self.gpu.memory_used_bytes, self.gpu.memory_total_bytes),
            Some(i) => (i.memory_used_bytes, i.memory_total_bytes),
        }
    }

    /// `holder`'s utilization of its share, percent (at most 100).
    pub fn utilization_of_share(&self, holder: &Holder) -> Option<f64> {
        let n = self.holders().len().max(1) as f64;
        holder.utilization.map(|u| (u * n).min(100.0))
    }

    /// Whether `holder` is idle under `floor` percent.
    pub fn idle(&self, holder: &Holder, floor: f64) -> Idle {
        match self.utilization_of_share(holder) {
            Some(u) if u < floor => Idle::Idle,
            Some(_) => Idle::Busy,
            None if self.processes() == Some(0.0) => Idle::Idle,
            None => Idle::Unknown,
        }
    }

    /// What the views call the device: `GPU 2` or `MIG 3g.40gb`.
    pub fn label(&self) -> String {
        match self.instance {
            None => format!("GPU {}", self.gpu.index),
            Some(i) => format!("MIG {}", i.profile),
        }
    }

    /// The device's id in the `gpus` view: `2`, or `0/1` (GPU/GPU instance), with
    /// `.<ci>` for a compute instance other than 0.
    pub fn id(&self) -> String {
        match self.instance {
            None => self.gpu.index.to_string(),
            Some(i) if i.compute_instance_id == 0 => format!("{}/{}", self.gpu.index, i.gpu_instance_id),
            Some(i) => format!("{}/{}.{}", self.gpu.index, i.gpu_instance_id, i.compute_instance_id),
        }
    }
}

/// A share as the views write it: `1`, `3/7`, `1/4`, `3/14`.
pub fn share_text(device: &Device<'_>) -> String {
    let holders = device.holders().len().max(1) as u64;
    let (num, den) = match (device.instance, device.gpu.mig_slices) {
        (None, _) => (1, holders),
        (Some(i), Some(total)) => match i.slices {
            Some(s) => (s.round() as u64, total.round() as u64 * holders),
            None => return "?".into(),
        },
        (Some(_), None) => return "?".into(),
    };
    let g = gcd(num, den).max(1);
    let (num, den) = (num / g, den / g);
    if den == 1 { num.to_string() } else { format!("{num}/{den}") }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pod: &str, util: Option<f64>) -> Holder {
        Holder {
            namespace: "ns".into(),
            pod: pod.into(),
            utilization: util,
            memory_used_bytes: Some(0.0),
            ..Holder::default()
        }
    }

    fn mig_gpu() -> Gpu {
        Gpu {
            mig_enabled: true,
            mig_slices: Some(7.0),
            instances: vec![
                MigInstance {
                    profile: "3g.40gb".into(),
                    gpu_instance_id: 1,
                    slices: Some(3.0),
                    holders: vec![holder("llm", None)],
                    processes: Some(1.0),
                    ..MigInstance::default()
                },
                MigInstance {
                    profile: "3g.40gb".into(),
                    gpu_instance_id: 2,
                    slices: Some(3.0),
                    processes: Some(0.0),
                    ..MigInstance::default()
                },
            ],
            ..Gpu::default()
        }
    }

    #[test]
    fn a_mig_instance_is_its_compute_slices_of_the_gpu() {
        let gpu = mig_gpu();
        let devices = Device::of(&gpu);
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0].fraction(), Some(3.0 / 7.0));
        assert_eq!(devices[0].share(), Some(3.0 / 7.0));
        assert_eq!(devices[1].share(), None, "nobody holds it");
        assert_eq!(share_text(&devices[0]), "3/7");
        assert_eq!(devices[0].label(), "MIG 3g.40gb");
        assert_eq!(devices[0].id(), "0/1");
        // An A100's instance has no utilization: running a process means unknown, none means idle.
        assert_eq!(devices[0].idle(&devices[0].holders()[0], 10.0), Idle::Unknown);
        let mut idle = mig_gpu();
        idle.instances[0].processes = Some(0.0);
        let d = Device::of(&idle);
        assert_eq!(d[0].idle(&d[0].holders()[0], 10.0), Idle::Idle);
    }

    #[test]
    fn a_shared_gpu_is_split_equally_and_idle_is_judged_on_the_share() {
        let gpu = Gpu {
            index: 2,
            utilization: Some(74.0),
            processes: Some(4.0),
            holders: vec![
                holder("a", Some(24.0)),
                holder("b", Some(2.0)),
                holder("c", Some(30.0)),
                holder("d", Some(0.0)),
            ],
            ..Gpu::default()
        };
        let d = Device::of(&gpu)[0];
        assert_eq!(d.share(), Some(0.25));
        assert_eq!(share_text(&d), "1/4");
        let verdicts: Vec<Idle> = d.holders().iter().map(|h| d.idle(h, 10.0)).collect();
        assert_eq!(verdicts, [Idle::Busy, Idle::Idle, Idle::Busy, Idle::Idle], "2 % of the GPU is 8 % of a quarter");
        assert_eq!(d.utilization_of_share(&d.holders()[2]), Some(100.0), "capped");
        assert_eq!(d.id(), "2");
    }

    #[test]
    fn an_exclusive_gpu_is_one_share_and_a_missing_slice_count_is_no_share() {
        let gpu = Gpu { holders: vec![holder("x", Some(5.0))], ..Gpu::default() };
        let d = Device::of(&gpu)[0];
        assert_eq!((d.share(), share_text(&d).as_str()), (Some(1.0), "1"));
        assert_eq!(d.idle(&d.holders()[0], 10.0), Idle::Idle);
        let mut mig = mig_gpu();
        mig.mig_slices = None;
        let d = Device::of(&mig)[0];
        assert_eq!((d.share(), share_text(&d).as_str()), (None, "?"));
        let shared_mig = Gpu {
            mig_slices: Some(7.0),
            instances: vec![MigInstance {
                slices: Some(3.0),
                compute_instance_id: 1,
                holders: vec![holder("a", None), holder("b", None)],
                ..MigInstance::default()
            }],
            ..Gpu::default()
        };
        let d = Device::of(&shared_mig)[0];
        assert_eq!(share_text(&d), "3/14");
        assert_eq!(d.id(), "0/0.1");
    }
}
