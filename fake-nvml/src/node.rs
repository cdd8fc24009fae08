//! The simulated node at a given scenario time: readings, counters and fault state.
//!
//! Everything here is computed from the resolved [`Scenario`] and a time `t`; the only
//! state kept is the energy integral, which needs the power history.

use std::sync::Mutex;

use crate::scenario::fault::NvLinkErrorCounts;
use crate::scenario::nvlink::integrate;
use crate::scenario::{FaultKind, Gpu, MigInstance, Process, RecoveryAction, Scenario, Signal};

/// The simulated node.
#[derive(Debug)]
pub struct Node {
    pub scenario: Scenario,
    pub gpus: Vec<SimGpu>,
}

/// One simulated GPU.
#[derive(Debug)]
pub struct SimGpu {
    pub spec: Gpu,
    energy: Mutex<EnergyIntegral>,
}

#[derive(Debug)]
struct EnergyIntegral {
    t: f64,
    joules: f64,
}

/// Row-remapping state (`nvmlDeviceGetRemappedRows`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failed: bool,
}

/// Page-retirement state (`nvmlDeviceGetRetiredPages*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetiredPages {
    pub single_bit: u32,
    pub double_bit: u32,
    pub pending: bool,
}

/// ECC counters (`nvmlDeviceGetTotalEccErrors`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EccCounts {
    pub corrected_volatile: u64,
    pub uncorrected_volatile: u64,
    pub corrected_aggregate: u64,
    pub uncorrected_aggregate: u64,
}

impl Node {
    /// Processes alive at `t` on GPU `gpu`: all of them, or those of one MIG instance.
    pub fn processes_on(&self, gpu: u32, instance: Option<u32>, t: f64) -> impl Iterator<Item = &Process> {
        self.scenario
            .processes
            .iter()
            .filter(move |p| p.gpu == gpu && p.alive(t) && (instance.is_none() || p.mig == instance))
    }

    pub fn new(scenario: Scenario) -> Self {
        let gpus = scenario
            .gpus
            .iter()
            .map(|spec| SimGpu {
                energy: Mutex::new(EnergyIntegral { t: 0.0, joules: spec.counters.energy_joules }),
                spec: spec.clone(),
            })
            .collect();
        Node { scenario, gpus }
    }

    /// Takes over the energy counters of `before`'s GPUs (matched by UUID), integrated
    /// up to `t`, so that a reloaded scenario keeps counting where the old one was.
    pub fn carry_energy_from(&self, before: &Node, t: f64) {
        for gpu in &self.gpus {
            if let Some(old) = before.gpus.iter().find(|o| o.spec.uuid == gpu.spec.uuid) {
                let joules = old.energy_joules(t);
                if let Ok(mut energy) = gpu.energy.lock() {
                    *energy = EnergyIntegral { t, joules };
                }
            }
        }
    }
}

fn value(signal: &Option<Signal>, t: f64, default: f64) -> f64 {
    signal.as_ref().map_or(default, |s| s.at(t))
}

impl SimGpu {
    /// The faults whose time has come, in order.
    fn faults_until(&self, t: f64) -> impl Iterator<Item = &crate::scenario::Fault> {
        self.spec.faults.iter().take_while(move |f| f.at_s <= t)
    }

    /// Time of the last reset at or before `t` (0 if none).
    fn last_reset(&self, t: f64) -> f64 {
        self.faults_until(t).filter(|f| f.kind == FaultKind::Reset).map(|f| f.at_s).last().unwrap_or(f64::NEG_INFINITY)
    }

    pub fn is_lost(&self, t: f64) -> bool {
        let mut lost = false;
        for f in self.faults_until(t) {
            match f.kind {
                FaultKind::Lost => lost = true,
                FaultKind::Reset => lost = false,
                _ => {}
            }
        }
        lost
    }

    /// If `call` is inside a hang window at `t`, the scenario seconds left in it.
    pub fn hang_remaining(&self, call: &str, t: f64) -> Option<f64> {
        self.faults_until(t)
            .filter_map(|f| match &f.kind {
                FaultKind::Hang { call: c, for_s } if (c == "*" || c == call) && t < f.at_s + for_s => {
                    Some(f.at_s + for_s - t)
                }
                _ => None,
            })
            .reduce(f64::max)
    }

    /// The NVML error code a scheduled `error` fault makes `call` answer at `t`, on the
    /// GPU's own handle (`mig: None`) or on the handle of MIG device `mig`.
    pub fn injected_error(&self, call: &str, mig: Option<u32>, t: f64) -> Option<u32> {
        self.faults_until(t)
            .filter_map(|f| match &f.kind {
                FaultKind::Error(e) if (e.call == "*" || e.call == call) && e.mig == mig && t < f.at_s + e.for_s => {
                    Some(e.code.code())
                }
                _ => None,
            })
            .last()
    }

    pub fn utilization(&self, t: f64) -> u32 {
        percent(value(&self.spec.values.utilization, t, 0.0))
    }

    pub fn memory_activity(&self, t: f64) -> u32 {
        percent(value(&self.spec.values.memory_activity, t, 0.0))
    }

    /// Memory used: the GPU's own signal, else what its processes hold (`processes`
    /// are this GPU's processes alive at `t`).
    pub fn memory_used_bytes<'a>(&self, t: f64, processes: impl Iterator<Item = &'a Process>) -> u64 {
        let usable = self.spec.model.memory_total_bytes - self.spec.model.memory_reserved_bytes;
        let bytes = match &self.spec.values.memory_used_mib {
            Some(signal) => (signal.at(t).max(0.0) * 1024.0 * 1024.0) as u64,
            None => processes.map(|p| process_memory_bytes(p, t)).sum(),
        };
        bytes.min(usable)
    }

    pub fn power_watts(&self, t: f64) -> f64 {
        let default = self.spec.power_limit_watts * 0.1;
        value(&self.spec.values.power_watts, t, default).clamp(0.0, self.spec.power_limit_watts * 1.2)
    }

    /// Total energy in joules: the starting value plus the integral of power.
    pub fn energy_joules(&self, t: f64) -> f64 {
        let mut integral = match self.energy.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Trapezoids of at most one second keep periodic power shapes accurate.
        while integral.t < t {
            let step = (t - integral.t).min(1.0);
            let p0 = self.power_watts(integral.t);
            let p1 = self.power_watts(integral.t + step);
            integral.joules += (p0 + p1) / 2.0 * step;
            integral.t += step;
        }
        integral.joules
    }

    pub fn temperature_c(&self, t: f64) -> u32 {
        let base = value(&self.spec.values.temperature_c, t, 35.0);
        let reset = self.last_reset(t);
        let ramp = self
            .faults_until(t)
            .filter(|f| f.at_s > reset)
            .filter_map(|f| match f.kind {
                FaultKind::TemperatureRamp { to, over_s } => Some((f.at_s, to, over_s)),
                _ => None,
            })
            .last();
        let celsius = match ramp {
            Some((at, to, over_s)) => {
                let from = value(&self.spec.values.temperature_c, at, 35.0);
                from + (to - from) * ((t - at) / over_s).clamp(0.0, 1.0)
            }
            None => base,
        };
        celsius.round().clamp(0.0, 200.0) as u32
    }

    pub fn sm_clock_mhz(&self, t: f64) -> u32 {
        let max = f64::from(self.spec.model.max_sm_clock_mhz);
        value(&self.spec.values.sm_clock_mhz, t, max).round().clamp(0.0, max) as u32
    }

    pub fn mem_clock_mhz(&self, t: f64) -> u32 {
        let max = f64::from(self.spec.model.max_mem_clock_mhz);
        value(&self.spec.values.mem_clock_mhz, t, max).round().clamp(0.0, max) as u32
    }

    pub fn encoder_utilization(&self, t: f64) -> u32 {
        percent(value(&self.spec.values.encoder_utilization, t, 0.0))
    }

    pub fn decoder_utilization(&self, t: f64) -> u32 {
        percent(value(&self.spec.values.decoder_utilization, t, 0.0))
    }

    /// PCIe throughput in KB/s, as NVML reports it.
    pub fn pcie_kbps(&self, transmit: bool, t: f64) -> u32 {
        let signal = if transmit {
            &self.spec.values.pcie_tx_bytes_per_second
        } else {
            &self.spec.values.pcie_rx_bytes_per_second
        };
        (value(signal, t, 0.0).max(0.0) / 1024.0).round().min(f64::from(u32::MAX)) as u32
    }

    pub fn performance_state(&self, t: f64) -> u32 {
        value(&self.spec.values.performance_state, t, 0.0).round().clamp(0.0, 15.0) as u32
    }

    pub fn pcie_replays(&self, t: f64) -> u64 {
        self.spec.counters.pcie_replays
            + self
                .faults_until(t)
                .map(|f| match f.kind {
                    FaultKind::PcieReplays(n) => n,
                    _ => 0,
                })
                .sum::<u64>()
    }

    pub fn ecc_counts(&self, t: f64) -> EccCounts {
        let reset = self.last_reset(t);
        let mut counts = EccCounts {
            corrected_aggregate: self.spec.counters.ecc_corrected_aggregate,
            uncorrected_aggregate: self.spec.counters.ecc_uncorrected_aggregate,
            ..EccCounts::default()
        };
        for f in self.faults_until(t) {
            if let FaultKind::EccErrors { corrected, uncorrected } = f.kind {
                counts.corrected_aggregate += corrected;
                counts.uncorrected_aggregate += uncorrected;
                if f.at_s > reset {
                    counts.corrected_volatile += corrected;
                    counts.uncorrected_volatile += uncorrected;
                }
            }
        }
        counts
    }

    pub fn remapped_rows(&self, t: f64) -> RemappedRows {
        let mut rows = RemappedRows::default();
        for f in self.faults_until(t) {
            match f.kind {
                FaultKind::RemappedRows { correctable, uncorrectable, pending, failed } => {
                    rows.correctable += correctable;
                    rows.uncorrectable += uncorrectable;
                    rows.pending |= pending;
                    rows.failed |= failed;
                }
                // A reset applies pending remaps; a failure stays until the board is replaced.
                FaultKind::Reset => rows.pending = false,
                _ => {}
            }
        }
        rows
    }

    pub fn retired_pages(&self, t: f64) -> RetiredPages {
        let mut pages = RetiredPages::default();
        for f in self.faults_until(t) {
            match f.kind {
                FaultKind::RetiredPages { single_bit, double_bit, pending } => {
                    pages.single_bit += single_bit;
                    pages.double_bit += double_bit;
                    pages.pending |= pending;
                }
                FaultKind::Reset => pages.pending = false,
                _ => {}
            }
        }
        pages
    }

    pub fn recovery_action(&self, t: f64) -> RecoveryAction {
        let mut action = RecoveryAction::None;
        for f in self.faults_until(t) {
            match f.kind {
                FaultKind::RecoveryAction(a) => action = a,
                FaultKind::Reset => action = RecoveryAction::None,
                _ => {}
            }
        }
        action
    }

    /// The active clock-event reasons as NVML's bit mask.
    pub fn clock_event_reasons(&self, t: f64) -> u64 {
        let mut mask = 0;
        if self.utilization(t) == 0 {
            mask |= 0x1; // GPU idle
        }
        if self.power_watts(t) >= self.spec.power_limit_watts * 0.98 {
            mask |= 0x4; // software power cap
        }
        for f in self.faults_until(t) {
            if let FaultKind::ClockEvents { reasons, for_s } = &f.kind
                && for_s.is_none_or(|d| t < f.at_s + d)
            {
                mask |= reasons.iter().fold(0, |m, r| m | r.bit());
            }
        }
        mask
    }

    /// Memory temperature, °C: the scenario's signal, else the GPU temperature plus 4;
    /// `None` on a board without a memory sensor.
    pub fn memory_temperature_c(&self, t: f64) -> Option<u32> {
        if !self.spec.model.memory_temperature() {
            return None;
        }
        let celsius = match &self.spec.values.memory_temperature_c {
            Some(signal) => signal.at(t),
            None => f64::from(self.temperature_c(t)) + 4.0,
        };
        Some(celsius.round().clamp(0.0, 200.0) as u32)
    }

    /// The windows `[from, to)` during which NVLink link `link` is down, of the faults
    /// scheduled up to `t` (`to` is infinite while neither a duration nor a reset ends it).
    fn nvlink_down_windows(&self, link: u32, t: f64) -> Vec<(f64, f64)> {
        let resets: Vec<f64> = self.faults_until(t).filter(|f| f.kind == FaultKind::Reset).map(|f| f.at_s).collect();
        self.faults_until(t)
            .filter_map(|f| match f.kind {
                FaultKind::NvLinkDown { link: l, for_s } if l == link => {
                    let reset = resets.iter().copied().find(|r| *r > f.at_s).unwrap_or(f64::INFINITY);
                    let end = for_s.map_or(f64::INFINITY, |d| f.at_s + d).min(reset);
                    Some((f.at_s, end))
                }
                _ => None,
            })
            .collect()
    }

    /// Whether NVLink link `link` is up at `t`.
    pub fn nvlink_active(&self, link: u32, t: f64) -> bool {
        !self.nvlink_down_windows(link, t).iter().any(|(from, to)| *from <= t && t < *to)
    }

    /// Data bytes link `link` carried up to `t` (transmit or receive): the signal's
    /// integral over the time the link was up.
    pub fn nvlink_bytes(&self, link: u32, transmit: bool, t: f64) -> f64 {
        let nvlink = &self.spec.nvlink;
        let signal = if transmit { &nvlink.tx_bytes_per_second } else { &nvlink.rx_bytes_per_second };
        let mut down = self.nvlink_down_windows(link, t);
        down.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Merge overlapping windows so no stretch is taken away twice.
        let mut merged: Vec<(f64, f64)> = Vec::new();
        for (from, to) in down {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        let lost: f64 = merged.iter().map(|(from, to)| integrate(signal, *from, to.min(t))).sum();
        (integrate(signal, 0.0, t) - lost).max(0.0)
    }

    /// NVLink link `link`'s error counters since the last reset.
    pub fn nvlink_errors(&self, link: u32, t: f64) -> NvLinkErrorCounts {
        let reset = self.last_reset(t);
        let mut counts = NvLinkErrorCounts::default();
        for f in self.faults_until(t).filter(|f| f.at_s > reset) {
            if let FaultKind::NvLinkErrors { link: l, counts: c } = f.kind
                && l == link
            {
                counts.crc_flit += c.crc_flit;
                counts.crc_data += c.crc_data;
                counts.replay += c.replay;
                counts.recovery += c.recovery;
            }
        }
        counts
    }

    /// XID events scheduled on this GPU: `(at_s, xid)` in time order.
    pub fn xid_events(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.spec.faults.iter().filter_map(|f| match f.kind {
            FaultKind::Xid(x) => Some((f.at_s, x)),
            _ => None,
        })
    }
}

/// Memory used in a MIG instance: its own signal, else what its processes hold.
pub fn instance_memory_used_bytes(node: &Node, gpu: u32, instance: &MigInstance, t: f64) -> u64 {
    let limit = instance.profile.memory_mib * 1024 * 1024;
    let bytes = match &instance.values.memory_used_mib {
        Some(signal) => (signal.at(t).max(0.0) * 1024.0 * 1024.0) as u64,
        None => node.processes_on(gpu, Some(instance.index), t).map(|p| process_memory_bytes(p, t)).sum(),
    };
    bytes.min(limit)
}

/// GPM activity of a MIG instance in percent: `metric` is one of the instance values.
pub fn instance_activity(signal: &Option<Signal>, t: f64) -> f64 {
    value(signal, t, 0.0).clamp(0.0, 100.0)
}

/// Memory a process holds, in bytes.
pub fn process_memory_bytes(process: &Process, t: f64) -> u64 {
    (value(&process.memory_used_mib, t, 0.0).max(0.0) * 1024.0 * 1024.0) as u64
}

/// Percent of the GPU's SMs a process keeps busy.
pub fn process_sm_utilization(process: &Process, t: f64) -> u32 {
    percent(value(&process.sm_utilization, t, 0.0))
}

fn percent(v: f64) -> u32 {
    v.round().clamp(0.0, 100.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(gpu_yaml: &str) -> Node {
        let text = format!("gpus:\n  - {gpu_yaml}\n");
        Node::new(Scenario::parse("t.yaml", &text).unwrap())
    }

    #[test]
    fn lost_until_reset() {
        let n = node("{model: H100-SXM5-80GB, faults: [{at_s: 10, lost: true}, {at_s: 20, reset: true}]}");
        let g = &n.gpus[0];
        assert!(!g.is_lost(9.9));
        assert!(g.is_lost(10.0));
        assert!(!g.is_lost(20.0));
    }

    #[test]
    fn hang_window_names_the_call() {
        let n = node("{model: H100-SXM5-80GB, faults: [{at_s: 5, hang: {call: nvmlDeviceGetPowerUsage, for_s: 3}}]}");
        let g = &n.gpus[0];
        assert_eq!(g.hang_remaining("nvmlDeviceGetPowerUsage", 6.0), Some(2.0));
        assert_eq!(g.hang_remaining("nvmlDeviceGetName", 6.0), None);
        assert_eq!(g.hang_remaining("nvmlDeviceGetPowerUsage", 8.0), None);
    }

    #[test]
    fn an_error_window_names_the_call_and_the_handle() {
        let n = node(
            "{model: H100-SXM5-80GB, mig: {layout: all-3g.40gb}, faults: [{at_s: 5, error: {call: nvmlDeviceGetEccMode, code: UNKNOWN, for_s: 2}}, {at_s: 5, error: {call: nvmlDeviceGetMemoryInfo_v2, code: TIMEOUT, for_s: 2, mig: 1}}]}",
        );
        let g = &n.gpus[0];
        assert_eq!(g.injected_error("nvmlDeviceGetEccMode", None, 4.9), None);
        assert_eq!(g.injected_error("nvmlDeviceGetEccMode", None, 5.0), Some(999));
        assert_eq!(g.injected_error("nvmlDeviceGetEccMode", None, 7.0), None, "the window ended");
        assert_eq!(g.injected_error("nvmlDeviceGetMemoryInfo_v2", Some(1), 6.0), Some(10));
        assert_eq!(g.injected_error("nvmlDeviceGetMemoryInfo_v2", Some(0), 6.0), None, "another MIG device");
        assert_eq!(g.injected_error("nvmlDeviceGetMemoryInfo_v2", None, 6.0), None, "the parent GPU");
    }

    #[test]
    fn ecc_volatile_clears_on_reset_aggregate_does_not() {
        let n = node(
            "{model: A100-SXM4-80GB, counters: {ecc_corrected_aggregate: 4}, faults: [{at_s: 1, ecc_errors: {corrected: 3, uncorrected: 1}}, {at_s: 2, reset: true}]}",
        );
        let g = &n.gpus[0];
        let before = g.ecc_counts(1.5);
        assert_eq!((before.corrected_volatile, before.uncorrected_volatile), (3, 1));
        assert_eq!(before.corrected_aggregate, 7);
        let after = g.ecc_counts(2.0);
        assert_eq!((after.corrected_volatile, after.uncorrected_volatile), (0, 0));
        assert_eq!(after.uncorrected_aggregate, 1);
    }

    #[test]
    fn temperature_ramp_starts_from_the_current_value() {
        let n = node(
            "{model: H100-SXM5-80GB, values: {temperature_c: 60}, faults: [{at_s: 100, temperature_ramp: {to: 96, over_s: 36}}]}",
        );
        let g = &n.gpus[0];
        assert_eq!(g.temperature_c(50.0), 60);
        assert_eq!(g.temperature_c(118.0), 78);
        assert_eq!(g.temperature_c(500.0), 96);
    }

    #[test]
    fn energy_integrates_power() {
        let n = node("{model: H100-SXM5-80GB, values: {power_watts: 300}, counters: {energy_joules: 1000}}");
        let g = &n.gpus[0];
        assert_eq!(g.energy_joules(0.0), 1000.0);
        assert!((g.energy_joules(10.0) - 4000.0).abs() < 1e-6);
        assert!((g.energy_joules(10.0) - 4000.0).abs() < 1e-6, "stable when time stands still");
    }

    #[test]
    fn memory_used_never_exceeds_what_is_usable() {
        let n = node("{model: RTX-4090-24GB, values: {memory_used_mib: 999999}}");
        let g = &n.gpus[0];
        assert_eq!(g.memory_used_bytes(0.0, std::iter::empty()), (24564 - 312) * 1024 * 1024);
    }

    #[test]
    fn an_nvlink_link_goes_down_carries_nothing_and_comes_back_at_a_reset() {
        let n = node(
            "{model: H100-SXM5-80GB, nvlink: {tx_bytes_per_second: 1000, rx_bytes_per_second: 10}, faults: [{at_s: 10, nvlink_down: {link: 2}}, {at_s: 12, nvlink_errors: {link: 2, replay: 3, crc_flit: 1}}, {at_s: 20, reset: true}, {at_s: 30, nvlink_down: {link: 2, for_s: 5}}]}",
        );
        let g = &n.gpus[0];
        assert!(g.nvlink_active(2, 9.9));
        assert!(!g.nvlink_active(2, 10.0));
        assert!(g.nvlink_active(1, 15.0), "another link");
        assert!(g.nvlink_active(2, 20.0), "a reset brings it back");
        assert!(!g.nvlink_active(2, 34.0));
        assert!(g.nvlink_active(2, 35.0), "the window ended");
        assert_eq!(g.nvlink_bytes(1, true, 40.0), 40_000.0);
        assert_eq!(g.nvlink_bytes(2, true, 40.0), 40_000.0 - 10_000.0 - 5_000.0);
        assert_eq!(g.nvlink_bytes(2, false, 15.0), 100.0);
        let errors = g.nvlink_errors(2, 15.0);
        assert_eq!((errors.replay, errors.crc_flit, errors.crc_data), (3, 1, 0));
        assert_eq!(g.nvlink_errors(2, 20.0), NvLinkErrorCounts::default(), "a reset clears them");
    }

    #[test]
    fn memory_temperature_follows_the_gpu_or_its_signal_and_is_absent_without_a_sensor() {
        let n = node("{model: H100-SXM5-80GB, values: {temperature_c: 60}}");
        assert_eq!(n.gpus[0].memory_temperature_c(0.0), Some(64));
        let n = node("{model: H200-SXM-141GB, values: {memory_temperature_c: 71}}");
        assert_eq!(n.gpus[0].memory_temperature_c(0.0), Some(71));
        assert_eq!(node("{model: L40S-48GB}").gpus[0].memory_temperature_c(0.0), None);
    }

    #[test]
    fn clock_events_expire() {
        let n = node(
            "{model: H100-SXM5-80GB, values: {utilization: 50}, faults: [{at_s: 5, clock_events: {reasons: [hw_thermal_slowdown], for_s: 10}}]}",
        );
        let g = &n.gpus[0];
        assert_eq!(g.clock_event_reasons(4.0), 0);
        assert_eq!(g.clock_event_reasons(6.0), 0x40);
        assert_eq!(g.clock_event_reasons(15.0), 0);
    }
}
