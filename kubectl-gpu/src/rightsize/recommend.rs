//! The recommendation for one workload: from what it used over the window to the
//! smallest device that holds it, "keep", "outgrew" or "unknown", with what makes the
//! verdict unsafe or uncertain.
//!
//! The rules (docs/kubectl-gpu.md, "rightsize: the rules"):
//! - **Memory** sizes on the **peak**, never on the p95: a device must hold
//!   peak × (1 + headroom) (20 % by default). A workload is never offered less memory
//!   than its observed peak.
//! - **Compute** sizes on the p95, as a fraction of the GPU: utilization of a whole GPU
//!   or (per-pod) of a time-sliced GPU is already a share of the GPU; SM activity of a MIG
//!   instance is scaled by the instance's compute slices over 7. A device holds it when
//!   that fraction keeps the device at most 90 % busy ([`Rules::compute_target_percent`]).
//!   Without a compute figure (MIG on an A100, which has no GPM), or when the device is at
//!   its ceiling, the device keeps at least the compute it has now.
//! - **Devices**: on a MIG-capable model, its MIG profiles (no `+me`) and the whole GPU
//!   (rather than `7g`, which costs the same and gives less); on a model without MIG,
//!   time-slicing shares of 1/8, 1/4, 1/2 and the whole GPU. A share's memory is its
//!   fraction of the GPU's: time-slicing does not isolate memory, so the pods of a GPU
//!   must fit it together. Powers of two, because a GPU's time-slicing replicas are one
//!   number and such shares pack GPUs without remainder.
//! - **Smallest** is cheapest ([`Device::fraction`]); a move is recommended only to a
//!   device that costs less than the current one. None: **keep**.
//! - **Outgrew**: an OOM kill in the window, or a peak at 95 % or more of the memory
//!   the device guarantees; it names the cheapest device that holds the workload, if the
//!   model has one.
//! - **Unknown**: no readings at all. Never "0 %, shrink it".

use super::catalog::{self, COMPUTE_SLICES, CatalogError, Model, Profile};

/// Why an observation was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecommendError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("{field}: {value} is not {what}")]
    Figure { field: &'static str, value: f64, what: &'static str },
    #[error("a time-slice share needs 1 or more pods per GPU, not 0")]
    Replicas,
}

pub type Result<T, E = RecommendError> = std::result::Result<T, E>;

/// What a workload holds now, as the exporter and the pod spec say it.
#[derive(Debug, Clone, PartialEq)]
pub enum Holding {
    /// A whole GPU, not in MIG mode.
    Whole,
    /// A MIG instance of this profile (`3g.40gb`).
    Mig(String),
    /// A time-sliced (or MPS) GPU shared by this many pods, each with an equal share
    /// (`crate::share`'s rule).
    TimeSlice { pods_per_gpu: u32 },
}

/// A device of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Device {
    Whole,
    Mig(&'static Profile),
    /// `1/denominator` of a GPU's time.
    Share {
        denominator: u32,
    },
}

impl Device {
    /// The share of the GPU it costs: 1, a profile's larger slice share, or 1/n.
    pub fn fraction(&self) -> f64 {
        match self {
            Device::Whole => 1.0,
            Device::Mig(p) => p.fraction(),
            Device::Share { denominator } => 1.0 / f64::from(*denominator),
        }
    }

    /// The compute it guarantees, as a fraction of the GPU.
    pub fn compute_fraction(&self) -> f64 {
        match self {
            Device::Mig(p) => p.compute_fraction(),
            other => other.fraction(),
        }
    }

    /// The memory it guarantees.
    pub fn memory_bytes(&self, model: &Model) -> f64 {
        match self {
            Device::Whole => model.memory_bytes,
            Device::Mig(p) => p.memory_bytes,
            Device::Share { denominator } => model.memory_bytes / f64::from(*denominator),
        }
    }

    /// `GPU`, `MIG 1g.20gb`, `1/4 GPU (time-sliced)`.
    pub fn label(&self) -> String {
        match self {
            Device::Whole => "GPU".into(),
            Device::Mig(p) => format!("MIG {}", p.name),
            Device::Share { denominator } => format!("1/{denominator} GPU (time-sliced)"),
        }
    }
}

/// What was observed of one workload over the window. Memory in bytes; compute in
/// percent of the device it holds (utilization of a whole GPU; the per-pod utilization
/// of a time-sliced GPU, a percent of the GPU; SM activity of a MIG instance). A figure
/// is `None` where no series gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The NVML model name (the exporter's `model` label) or a catalog key.
    pub model: String,
    pub holding: Holding,
    /// Pods of the workload, each holding one such device.
    pub pods: u32,
    pub peak_memory_bytes: Option<f64>,
    pub p95_memory_bytes: Option<f64>,
    pub p95_compute_percent: Option<f64>,
    /// How much of the window the readings cover.
    pub history_seconds: f64,
    pub window_seconds: f64,
    pub oom_kills: u32,
    pub restarts: u32,
    /// Whether any series of the workload had a sample in the window.
    pub has_readings: bool,
}

/// The knobs of the rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Memory above the peak a device must hold (0.2 = 20 %).
    pub headroom: f64,
    /// How busy the new device may be at the workload's p95, percent.
    pub compute_target_percent: f64,
    /// At or above this percent of its ceiling a device is taken as throttling.
    pub ceiling_percent: f64,
    /// A peak at or above this share of the device's memory means it outgrew it.
    pub memory_full: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules { headroom: 0.2, compute_target_percent: 90.0, ceiling_percent: 95.0, memory_full: 0.95 }
    }
}

impl Rules {
    /// Rules with this headroom (`--headroom 20` is 20 %, 0 to 1000).
    pub fn with_headroom_percent(percent: f64) -> Result<Rules> {
        if !percent.is_finite() || !(0.0..=1000.0).contains(&percent) {
            return Err(RecommendError::Figure {
                field: "--headroom",
                value: percent,
                what: "a headroom in percent from 0 to 1000",
            });
        }
        Ok(Rules { headroom: percent / 100.0, ..Rules::default() })
    }
}

/// What to do with the workload's device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// A cheaper device holds it.
    Move(Device),
    /// No cheaper device holds it.
    Keep,
    /// The device is too small (OOM kill or a full peak); `to` is the cheapest that
    /// holds it, `None` where the model has nothing bigger.
    Outgrew { to: Option<Device> },
    /// No readings: nothing can be said.
    Unknown,
}

/// What makes a recommendation unsafe or uncertain, or worth a note.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Flag {
    /// The readings cover less than the window.
    ShortHistory {
        covered_seconds: f64,
        window_seconds: f64,
    },
    OomKilled {
        count: u32,
    },
    Restarted {
        count: u32,
    },
    /// The p95 compute is at the device's ceiling: the workload may be throttled, and
    /// its true need is unknown (at least what it has).
    Throttled {
        p95_percent: f64,
    },
    /// No series at all.
    NoReadings,
    /// Memory but no compute figure (a MIG instance of a GPU without GPM).
    NoComputeReadings,
    /// The peak is more than twice the p95: sized on the peak.
    SpikyMemory {
        peak_bytes: f64,
        p95_bytes: f64,
    },
    /// The current device holds the peak but not the headroom above it.
    BelowHeadroom {
        needed_bytes: f64,
        device_bytes: f64,
    },
}

impl Flag {
    /// Whether it makes the recommendation unsafe or uncertain (the others are notes).
    pub fn is_warning(&self) -> bool {
        !matches!(self, Flag::SpikyMemory { .. } | Flag::BelowHeadroom { .. })
    }

    /// A short text for tables: `history 2d of 7d`, `OOM killed 1x`.
    pub fn text(&self) -> String {
        let gib = |b: f64| format!("{:.1} GiB", b / 1_073_741_824.0);
        match self {
            Flag::ShortHistory { covered_seconds, window_seconds } => {
                format!("history {} of {}", days(*covered_seconds), days(*window_seconds))
            }
            Flag::OomKilled { count } => format!("OOM killed {count}x"),
            Flag::Restarted { count } => format!("restarted {count}x"),
            Flag::Throttled { p95_percent } => format!("at its ceiling (p95 {p95_percent:.0}%), may be throttled"),
            Flag::NoReadings => "no readings".into(),
            Flag::NoComputeReadings => "no compute readings".into(),
            Flag::SpikyMemory { peak_bytes, p95_bytes } => {
                format!("spiky memory (peak {}, p95 {})", gib(*peak_bytes), gib(*p95_bytes))
            }
            Flag::BelowHeadroom { needed_bytes, device_bytes } => {
                format!("headroom short ({} wanted, {} on the device)", gib(*needed_bytes), gib(*device_bytes))
            }
        }
    }
}

fn days(seconds: f64) -> String {
    let hours = seconds / 3600.0;
    if hours >= 24.0 { format!("{:.1}d", hours / 24.0).replace(".0d", "d") } else { format!("{hours:.0}h") }
}

/// The recommendation for one workload.
#[derive(Debug, Clone)]
pub struct Recommendation {
    pub model: &'static Model,
    pub current: Device,
    pub verdict: Verdict,
    /// peak × (1 + headroom), where the peak is known.
    pub needed_memory_bytes: Option<f64>,
    /// p95 compute as a fraction of the GPU, where known.
    pub needed_compute_fraction: Option<f64>,
    pub flags: Vec<Flag>,
}

impl Recommendation {
    /// The device the workload ends on: the current one unless it moves or outgrew it.
    pub fn target(&self) -> Device {
        match self.verdict {
            Verdict::Move(d) | Verdict::Outgrew { to: Some(d) } => d,
            _ => self.current,
        }
    }

    /// Whether nothing makes it unsafe or uncertain.
    pub fn is_certain(&self) -> bool {
        !self.flags.iter().any(Flag::is_warning)
    }
}

fn check(field: &'static str, value: Option<f64>, max: f64, what: &'static str) -> Result<Option<f64>> {
    match value {
        Some(v) if !v.is_finite() || v < 0.0 || v > max => Err(RecommendError::Figure { field, value: v, what }),
        other => Ok(other),
    }
}

/// The device a workload holds, on its model.
pub fn resolve(model: &'static Model, holding: &Holding) -> Result<Device> {
    Ok(match holding {
        Holding::Whole => Device::Whole,
        Holding::Mig(name) => Device::Mig(model.profile(name)?),
        Holding::TimeSlice { pods_per_gpu: 0 } => return Err(RecommendError::Replicas),
        Holding::TimeSlice { pods_per_gpu } => Device::Share { denominator: *pods_per_gpu },
    })
}

/// The devices a workload on `model` may be given, cheapest first.
pub fn candidates(model: &'static Model) -> Vec<Device> {
    if model.has_mig() {
        let mut v: Vec<Device> =
            model.ladder().into_iter().filter(|p| p.compute_slices < COMPUTE_SLICES).map(Device::Mig).collect();
        v.push(Device::Whole);
        v
    } else {
        [8, 4, 2].into_iter().map(|denominator| Device::Share { denominator }).chain([Device::Whole]).collect()
    }
}

/// Recommends a device for one workload.
pub fn recommend(observed: &Observed, rules: &Rules) -> Result<Recommendation> {
    let model = catalog::model(&observed.model)?;
    let current = resolve(model, &observed.holding)?;
    let peak = check("peak memory", observed.peak_memory_bytes, f64::MAX, "a number of bytes, 0 or more")?;
    let p95_memory = check("p95 memory", observed.p95_memory_bytes, f64::MAX, "a number of bytes, 0 or more")?;
    let p95_compute = check("p95 compute", observed.p95_compute_percent, 100.0, "a percentage from 0 to 100")?;
    if !(observed.window_seconds.is_finite() && observed.window_seconds > 0.0) {
        return Err(RecommendError::Figure {
            field: "window",
            value: observed.window_seconds,
            what: "a duration in seconds, more than 0",
        });
    }
    check("history", Some(observed.history_seconds), f64::MAX, "a duration in seconds")?;

    let mut flags = Vec::new();
    if observed.history_seconds < observed.window_seconds {
        flags.push(Flag::ShortHistory {
            covered_seconds: observed.history_seconds,
            window_seconds: observed.window_seconds,
        });
    }
    if observed.oom_kills > 0 {
        flags.push(Flag::OomKilled { count: observed.oom_kills });
    }
    if observed.restarts > 0 {
        flags.push(Flag::Restarted { count: observed.restarts });
    }
    let unknown = |mut flags: Vec<Flag>| {
        flags.push(Flag::NoReadings);
        Recommendation {
            model,
            current,
            verdict: Verdict::Unknown,
            needed_memory_bytes: None,
            needed_compute_fraction: None,
            flags,
        }
    };
    let Some(peak) = peak.filter(|_| observed.has_readings) else {
        return Ok(unknown(flags));
    };

    // Percent of the device → fraction of the GPU.
    let basis = match current {
        Device::Mig(p) => p.compute_fraction(),
        Device::Whole | Device::Share { .. } => 1.0,
    };
    let ceiling = match current {
        Device::Share { .. } => current.fraction() * 100.0,
        _ => 100.0,
    };
    let throttled = p95_compute.is_some_and(|u| u >= ceiling * rules.ceiling_percent / 100.0);
    match p95_compute {
        None => flags.push(Flag::NoComputeReadings),
        Some(u) if throttled => flags.push(Flag::Throttled { p95_percent: u }),
        Some(_) => {}
    }
    if let Some(p95) = p95_memory
        && peak > 2.0 * p95
        && peak >= 1_073_741_824.0
    {
        flags.push(Flag::SpikyMemory { peak_bytes: peak, p95_bytes: p95 });
    }

    let needed_memory = peak * (1.0 + rules.headroom);
    let needed_compute = p95_compute.map(|u| u / 100.0 * basis);
    let holds = |d: &Device| {
        let compute_ok = match needed_compute {
            Some(c) if !throttled => c <= d.compute_fraction() * rules.compute_target_percent / 100.0,
            // Unknown or capped need: no less compute than now.
            _ => d.compute_fraction() >= current.compute_fraction() - 1e-9,
        };
        d.memory_bytes(model) >= needed_memory && compute_ok
    };
    let device_memory = current.memory_bytes(model);
    let outgrew = observed.oom_kills > 0 || peak >= rules.memory_full * device_memory;
    let options = candidates(model);
    let verdict = if outgrew {
        Verdict::Outgrew { to: options.iter().copied().find(|d| d.fraction() > current.fraction() + 1e-9 && holds(d)) }
    } else if let Some(d) = options.iter().copied().find(|d| d.fraction() < current.fraction() - 1e-9 && holds(d)) {
        Verdict::Move(d)
    } else {
        if device_memory < needed_memory {
            flags.push(Flag::BelowHeadroom { needed_bytes: needed_memory, device_bytes: device_memory });
        }
        Verdict::Keep
    };
    Ok(Recommendation {
        model,
        current,
        verdict,
        needed_memory_bytes: Some(needed_memory),
        needed_compute_fraction: needed_compute,
        flags,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const GIB: f64 = 1_073_741_824.0;
    pub const WEEK: f64 = 7.0 * 86_400.0;

    /// A week of readings for one pod.
    pub fn observed(model: &str, holding: Holding, peak_gib: f64, p95_compute: Option<f64>) -> Observed {
        Observed {
            model: model.into(),
            holding,
            pods: 1,
            peak_memory_bytes: Some(peak_gib * GIB),
            p95_memory_bytes: Some(peak_gib * GIB * 0.9),
            p95_compute_percent: p95_compute,
            history_seconds: WEEK,
            window_seconds: WEEK,
            oom_kills: 0,
            restarts: 0,
            has_readings: true,
        }
    }

    fn mig(name: &str) -> Holding {
        Holding::Mig(name.into())
    }

    fn profile_of(d: Device) -> &'static str {
        match d {
            Device::Mig(p) => p.name,
            other => panic!("not a MIG device: {other:?}"),
        }
    }

    #[test]
    fn the_70b_pod_keeps_its_3g_40gb() {
        // Peak 35 GiB: with 20 % headroom it needs 42 GiB. The cheaper profiles (1g.10gb,
        // 1g.20gb, 2g.20gb) hold at most 19.5 GiB, so it keeps the 3g.40gb; that holds
        // the peak (39.25 GiB) but not the headroom, which is noted. 35 GiB is 89 % of
        // the instance: not outgrown.
        let o = observed("NVIDIA A100-SXM4-80GB", mig("3g.40gb"), 35.0, Some(40.0));
        let r = recommend(&o, &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Keep);
        assert!((r.needed_memory_bytes.unwrap() / GIB - 42.0).abs() < 1e-9);
        let [Flag::BelowHeadroom { needed_bytes, device_bytes }] = r.flags[..] else { panic!("{:?}", r.flags) };
        assert_eq!(((needed_bytes / GIB).round(), device_bytes / GIB), (42.0, 39.25));
        assert!(r.is_certain(), "a note, not a warning");
    }

    #[test]
    fn the_embedding_pod_keeps_its_1g_10gb() {
        // 6 GiB × 1.2 = 7.2 GiB fits the 9.5 GiB instance, and no profile is cheaper.
        let o = observed("NVIDIA A100-SXM4-80GB", mig("1g.10gb"), 6.0, None);
        let r = recommend(&o, &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Keep);
        assert_eq!(r.flags, [Flag::NoComputeReadings], "an A100 instance has no SM activity (no GPM)");
        let on_h100 =
            recommend(&observed("NVIDIA H100 80GB HBM3", mig("1g.10gb"), 6.0, Some(30.0)), &Rules::default()).unwrap();
        assert_eq!((on_h100.verdict, on_h100.flags.as_slice()), (Verdict::Keep, &[][..]));
    }

    #[test]
    fn a_whole_a100_at_12_percent_with_a_14_gib_peak_moves_to_1g_20gb() {
        // Needs 16.8 GiB and 0.12 of the GPU. 1g.10gb (9.5 GiB) lacks the memory;
        // 1g.20gb (19.5 GiB, 1/7 = 0.143 of the compute, 12/14.3 = 84 % busy) holds it
        // and costs max(1/7, 2/8) = 1/4, less than 2g.20gb's 2/7.
        let o = observed("NVIDIA A100-SXM4-80GB", Holding::Whole, 14.0, Some(12.0));
        let r = recommend(&o, &Rules::default()).unwrap();
        assert_eq!(profile_of(r.target()), "1g.20gb");
        assert!(matches!(r.verdict, Verdict::Move(_)));
        assert_eq!(r.needed_compute_fraction, Some(0.12));
        assert!(r.is_certain());
        // At 13 % the 1g slice would be 91 % busy: the next profile with the memory.
        let busier = recommend(&observed("NVIDIA A100-SXM4-80GB", Holding::Whole, 14.0, Some(13.0)), &Rules::default());
        assert_eq!(profile_of(busier.unwrap().target()), "2g.20gb");
    }

    #[test]
    fn a_time_sliced_pool_gets_the_share_its_use_fits() {
        // Four pods per L40S (1/4 each). A pod peaking at 4 GiB, p95 8 % of the GPU:
        // 4.8 GiB fits 1/8 of 44.9 GiB (5.6 GiB), and 8 % is 64 % of an eighth.
        let pool = observed("NVIDIA L40S", Holding::TimeSlice { pods_per_gpu: 4 }, 4.0, Some(8.0));
        let r = recommend(&pool, &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Move(Device::Share { denominator: 8 }));
        // Busier (20 % of the GPU): a quarter is 80 % busy, an eighth would be 160 %. Keep.
        let busy = observed("NVIDIA L40S", Holding::TimeSlice { pods_per_gpu: 4 }, 4.0, Some(20.0));
        assert_eq!(recommend(&busy, &Rules::default()).unwrap().verdict, Verdict::Keep);
        // Two pods on a GPU, each with little use: down to a quarter (6 GiB needs more than an eighth).
        let pair = observed("NVIDIA L40S", Holding::TimeSlice { pods_per_gpu: 2 }, 6.0, Some(10.0));
        assert_eq!(
            recommend(&pair, &Rules::default()).unwrap().verdict,
            Verdict::Move(Device::Share { denominator: 4 })
        );
        // At its share's ceiling (24 % of the GPU on a quarter): throttled, kept.
        let capped = observed("NVIDIA L40S", Holding::TimeSlice { pods_per_gpu: 4 }, 2.0, Some(24.0));
        let r = recommend(&capped, &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Keep);
        assert_eq!(r.flags, [Flag::Throttled { p95_percent: 24.0 }]);
        assert!(!r.is_certain());
    }

    #[test]
    fn spiky_memory_is_sized_on_its_peak() {
        // p95 5 GiB would fit 1g.10gb; the 30 GiB peak needs 36 GiB: 3g.40gb.
        let mut o = observed("NVIDIA H100 80GB HBM3", Holding::Whole, 30.0, Some(10.0));
        o.p95_memory_bytes = Some(5.0 * GIB);
        let r = recommend(&o, &Rules::default()).unwrap();
        assert_eq!(profile_of(r.target()), "3g.40gb");
        assert_eq!(r.flags, [Flag::SpikyMemory { peak_bytes: 30.0 * GIB, p95_bytes: 5.0 * GIB }]);
        assert!(r.target().memory_bytes(r.model) >= 30.0 * GIB, "never less memory than the peak");
    }

    #[test]
    fn never_less_memory_than_the_peak_whatever_the_headroom() {
        let rules = Rules::with_headroom_percent(0.0).unwrap();
        for peak in [0.5, 9.0, 9.5, 12.0, 19.4, 23.0, 30.0, 39.0, 60.0, 79.0] {
            for model in ["NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA GeForce RTX 4090"] {
                if peak * GIB > catalog::model(model).unwrap().memory_bytes {
                    continue; // no GPU reads more than it has
                }
                let r = recommend(&observed(model, Holding::Whole, peak, Some(1.0)), &rules).unwrap();
                assert!(r.target().memory_bytes(r.model) >= peak * GIB, "{model} {peak}: {:?}", r.verdict);
            }
        }
    }

    #[test]
    fn short_history_oom_and_restarts_are_named() {
        let mut o = observed("NVIDIA A100-SXM4-80GB", Holding::Whole, 14.0, Some(12.0));
        o.history_seconds = 2.0 * 86_400.0;
        o.restarts = 3;
        let r = recommend(&o, &Rules::default()).unwrap();
        assert_eq!(profile_of(r.target()), "1g.20gb", "still a recommendation");
        assert_eq!(
            r.flags,
            [
                Flag::ShortHistory { covered_seconds: 2.0 * 86_400.0, window_seconds: WEEK },
                Flag::Restarted { count: 3 }
            ]
        );
        assert!(!r.is_certain());
        assert_eq!(r.flags[0].text(), "history 2d of 7d");
        // An OOM kill on a 1g.10gb means it outgrew it, whatever its peak reads.
        let mut oom = observed("NVIDIA A100-SXM4-80GB", mig("1g.10gb"), 8.0, None);
        oom.oom_kills = 1;
        let r = recommend(&oom, &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Outgrew { to: r.model.profile("1g.20gb").ok().map(Device::Mig) });
        assert!(r.flags.contains(&Flag::OomKilled { count: 1 }));
    }

    #[test]
    fn a_full_peak_means_it_outgrew_the_device() {
        // 9.2 GiB of a 9.62 GiB instance (96 %): outgrew; 1g.20gb holds 11 GiB.
        let r =
            recommend(&observed("NVIDIA H100 80GB HBM3", mig("1g.10gb"), 9.2, Some(50.0)), &Rules::default()).unwrap();
        assert_eq!(profile_of(r.target()), "1g.20gb");
        assert!(matches!(r.verdict, Verdict::Outgrew { .. }));
        // A whole GPU at its memory: nothing bigger on the model.
        let r = recommend(&observed("NVIDIA L40S", Holding::Whole, 44.0, Some(50.0)), &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Outgrew { to: None });
    }

    #[test]
    fn a_gpu_without_mig_gets_a_share_never_a_profile() {
        // RTX 4090 (23.9 GiB): 2 GiB peak, 5 % busy → an eighth (3 GiB).
        let r =
            recommend(&observed("NVIDIA GeForce RTX 4090", Holding::Whole, 2.0, Some(5.0)), &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Move(Device::Share { denominator: 8 }));
        // V100 32GB, 10 GiB peak: 12 GiB needs half the GPU.
        let r =
            recommend(&observed("Tesla V100-SXM2-32GB", Holding::Whole, 10.0, Some(20.0)), &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Move(Device::Share { denominator: 2 }));
        assert_eq!(r.target().label(), "1/2 GPU (time-sliced)");
    }

    #[test]
    fn no_readings_is_unknown_never_shrink() {
        let mut o = observed("NVIDIA A100-SXM4-80GB", Holding::Whole, 0.0, None);
        o.has_readings = false;
        let r = recommend(&o, &Rules::default()).unwrap();
        assert_eq!((r.verdict, r.target()), (Verdict::Unknown, Device::Whole));
        assert_eq!(r.flags, [Flag::NoReadings]);
        o.has_readings = true;
        o.peak_memory_bytes = None;
        assert_eq!(recommend(&o, &Rules::default()).unwrap().verdict, Verdict::Unknown);
    }

    #[test]
    fn without_a_compute_figure_the_compute_is_kept() {
        // An A100 3g.40gb with a 5 GiB peak and no SM activity: 1g.10gb, 1g.20gb and
        // 2g.20gb have the memory but fewer compute slices; none is offered.
        let r = recommend(&observed("NVIDIA A100-SXM4-80GB", mig("3g.40gb"), 5.0, None), &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Keep);
        // A whole GPU without utilization keeps all its compute: only the whole GPU does.
        let r = recommend(&observed("NVIDIA A100-SXM4-80GB", Holding::Whole, 5.0, None), &Rules::default()).unwrap();
        assert_eq!(r.verdict, Verdict::Keep);
    }

    #[test]
    fn bad_input_is_refused_naming_what_was_wrong() {
        let rules = Rules::default();
        let e = recommend(&observed("NVIDIA A100-SXM4-40GB", Holding::Whole, 1.0, None), &rules).unwrap_err();
        assert!(e.to_string().contains("\"NVIDIA A100-SXM4-40GB\" is not one rightsize knows"), "{e}");
        let e = recommend(&observed("NVIDIA H200", mig("3g.40gb"), 1.0, None), &rules).unwrap_err();
        assert!(e.to_string().starts_with("H200-141GB has no MIG profile \"3g.40gb\"; it has 1g.18gb"), "{e}");
        let e = recommend(&observed("NVIDIA L40S", mig("1g.10gb"), 1.0, None), &rules).unwrap_err();
        assert!(e.to_string().contains("L40S has no MIG"), "{e}");
        let e =
            recommend(&observed("NVIDIA L40S", Holding::TimeSlice { pods_per_gpu: 0 }, 1.0, None), &rules).unwrap_err();
        assert_eq!(e, RecommendError::Replicas);
        let e = recommend(&observed("NVIDIA L40S", Holding::Whole, 1.0, Some(130.0)), &rules).unwrap_err();
        assert_eq!(e.to_string(), "p95 compute: 130 is not a percentage from 0 to 100");
        let e = recommend(&observed("NVIDIA L40S", Holding::Whole, -1.0, None), &rules).unwrap_err();
        assert!(e.to_string().starts_with("peak memory: -1073741824 is not a number of bytes"), "{e}");
        let mut no_window = observed("NVIDIA L40S", Holding::Whole, 1.0, None);
        no_window.window_seconds = 0.0;
        let e = recommend(&no_window, &rules).unwrap_err();
        assert_eq!(e.to_string(), "window: 0 is not a duration in seconds, more than 0");
        for bad in [-1.0, f64::NAN, 5000.0] {
            assert!(Rules::with_headroom_percent(bad).unwrap_err().to_string().starts_with("--headroom: "));
        }
    }
}
