//! What the loop reports: its verdict, per-GPU signals, the breaker's answer and
//! counts of checks, actions and API errors. The loop writes a [`HealthMetrics`]
//! after every check and every API call; the exporter renders it on a scrape, which
//! never waits on the loop.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::verdict::{Health, Reason};

/// One GPU's health as last checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuHealth {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// (signal code, confirmed)
    pub signals: Vec<(String, bool)>,
    /// The loop holds the GPU alone, by device taints (DeviceTaintRules it created).
    pub quarantined: bool,
}

/// The breaker as last asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerView {
    pub open: bool,
    pub quarantined: usize,
    pub limit: usize,
    pub fleet: usize,
}

/// Everything the health families show.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthView {
    pub mode: &'static str,
    pub api: &'static str,
    pub health: Health,
    pub since: Option<SystemTime>,
    pub reasons: Vec<Reason>,
    pub gpus: Vec<GpuHealth>,
    pub quarantined: bool,
    pub opted_out: bool,
    pub breaker: Option<BreakerView>,
    /// The GPU breaker as last asked (GPUs held by device taints).
    pub gpu_breaker: Option<BreakerView>,
    /// The `resource.k8s.io` version the loop writes DeviceTaintRules in, `none` when the
    /// cluster serves none (or refused the loop's), `unknown` before it was asked.
    pub device_taints: &'static str,
    /// The effect of the loop's device taints.
    pub device_taint_effect: &'static str,
    pub actions: BTreeMap<&'static str, u64>,
    pub api_errors: BTreeMap<(&'static str, String), u64>,
    pub checks: BTreeMap<&'static str, u64>,
}

impl Default for HealthView {
    fn default() -> Self {
        HealthView {
            mode: "enforce",
            api: "report_only",
            health: Health::Unknown,
            since: None,
            reasons: Vec::new(),
            gpus: Vec::new(),
            quarantined: false,
            opted_out: false,
            breaker: None,
            gpu_breaker: None,
            device_taints: "unknown",
            device_taint_effect: "NoSchedule",
            actions: BTreeMap::new(),
            api_errors: BTreeMap::new(),
            checks: BTreeMap::new(),
        }
    }
}

/// Shared between the loop (writer) and scrapes (readers).
#[derive(Debug, Default)]
pub struct HealthMetrics {
    view: Mutex<HealthView>,
    generation: AtomicU64,
}

impl HealthMetrics {
    /// Changes the view.
    pub fn update(&self, f: impl FnOnce(&mut HealthView)) {
        let mut view = self.view.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut view);
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Bumped on every change, so a scrape re-renders only after one.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// A copy of the view.
    pub fn view(&self) -> HealthView {
        self.view.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}
