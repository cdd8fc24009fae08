//! The collection loop: owns the NVML session, runs one cycle per interval on its own
//! thread, and publishes each result as a [`Snapshot`].
//!
//! - NVML down (library missing, driver not loaded, init hung) is a state, not a crash:
//!   the loop publishes snapshots saying why and retries init with exponential backoff.
//! - A GPU whose call passes its deadline is marked stale and skipped until the call
//!   returns; the others keep updating. A lost GPU is marked lost.
//! - XID events arrive between cycles; each one republishes the snapshot at once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::nvml::events::{XidLog, spawn_listener};
use crate::nvml::read::ReadOutcome;
use crate::nvml::worker::{GpuWorker, WorkerOutcome, read_all};
use crate::nvml::{self, Session};
use crate::snapshot::{CallErrorKey, CollectorStats, GpuSnapshot, GpuState, NvmlStatus, Snapshot};

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct CollectorSettings {
    pub library: PathBuf,
    pub interval: Duration,
    pub call_timeout: Duration,
    /// Longest wait between NVML init attempts.
    pub init_retry_max: Duration,
    /// Joins each published snapshot's GPUs with pods; `None` publishes no attribution.
    pub attribution: Option<Arc<crate::attribution::Attributor>>,
}

/// What wakes the loop between cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// An XID event was recorded.
    Xid,
    Stop,
}

/// Controls a running collector.
#[derive(Debug)]
pub struct CollectorHandle {
    wake: mpsc::Sender<Wake>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CollectorHandle {
    /// Asks the loop to stop and waits up to `timeout` for it. A loop blocked in a hung
    /// NVML call cannot be interrupted; it is then left behind as the process exits.
    pub fn stop(mut self, timeout: Duration) {
        let _ = self.wake.send(Wake::Stop);
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + timeout;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

/// Starts the loop; snapshots are published on the returned receiver.
pub fn spawn(settings: CollectorSettings) -> std::io::Result<(CollectorHandle, watch::Receiver<Arc<Snapshot>>)> {
    let (publish, snapshots) = watch::channel(Arc::new(Snapshot::default()));
    let (wake, wakes) = mpsc::channel();
    let mut collector = Collector::new(settings, publish, wake.clone());
    let thread = std::thread::Builder::new().name("collector".into()).spawn(move || collector.run(&wakes))?;
    Ok((CollectorHandle { wake, thread: Some(thread) }, snapshots))
}

struct Active {
    workers: Vec<GpuWorker>,
    stop_events: Arc<AtomicBool>,
}

impl Drop for Active {
    fn drop(&mut self) {
        self.stop_events.store(true, Ordering::Relaxed);
    }
}

struct Collector {
    settings: CollectorSettings,
    publish: watch::Sender<Arc<Snapshot>>,
    wake: mpsc::Sender<Wake>,
    active: Option<Active>,
    xids: Arc<XidLog>,
    status: NvmlStatus,
    gpus: Vec<GpuSnapshot>,
    stats: CollectorStats,
    cycle: u64,
    generation: u64,
    taken_at: Option<SystemTime>,
    /// The last cycle's join with pods.
    attribution: Option<crate::attribution::AttributionResult>,
}

impl Collector {
    fn new(settings: CollectorSettings, publish: watch::Sender<Arc<Snapshot>>, wake: mpsc::Sender<Wake>) -> Self {
        Collector {
            settings,
            publish,
            wake,
            active: None,
            xids: Arc::new(XidLog::default()),
            status: NvmlStatus::Starting,
            gpus: Vec::new(),
            stats: CollectorStats::default(),
            cycle: 0,
            generation: 0,
            taken_at: None,
            attribution: None,
        }
    }

    fn run(&mut self, wakes: &mpsc::Receiver<Wake>) {
        let mut backoff = Duration::from_secs(1);
        let mut next_init = Instant::now();
        loop {
            let started = Instant::now();
            if self.active.is_none() && started >= next_init {
                if self.try_open() {
                    backoff = Duration::from_secs(1);
                } else {
                    next_init = Instant::now() + backoff;
                    backoff = (backoff * 2).min(self.settings.init_retry_max);
                }
            }
            if self.active.is_some() {
                self.cycle();
            }
            self.attribute();
            self.publish();
            let until = if self.active.is_some() { started + self.settings.interval } else { next_init };
            if !self.wait_until(until, wakes) {
                return;
            }
        }
    }

    /// Sleeps until `until`, republishing on XID events. False when asked to stop.
    fn wait_until(&mut self, until: Instant, wakes: &mpsc::Receiver<Wake>) -> bool {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match wakes.recv_timeout(left) {
                Ok(Wake::Xid) => self.publish(),
                Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return false,
                Err(RecvTimeoutError::Timeout) => return true,
            }
        }
    }

    fn try_open(&mut self) -> bool {
        self.stats.init_attempts_total += 1;
        match nvml::open(&self.settings.library, self.settings.call_timeout) {
            Ok(session) => match self.start(session) {
                Ok(()) => true,
                Err(e) => {
                    self.set_down(crate::snapshot::NvmlDownReason::Other, format!("cannot start NVML threads: {e}"));
                    false
                }
            },
            Err(e) => {
                self.set_down(e.reason, e.message);
                false
            }
        }
    }

    fn set_down(&mut self, error: crate::snapshot::NvmlDownReason, message: String) {
        let changed = !matches!(&self.status, NvmlStatus::Down { message: m, .. } if *m == message);
        if changed {
            tracing::error!(reason = error.as_str(), %message, "NVML is down; serving without GPU data and retrying");
        }
        self.status = NvmlStatus::Down { error, message };
    }

    fn start(&mut self, session: Session) -> std::io::Result<()> {
        let workers = (0..session.gpu_count)
            .map(|index| GpuWorker::spawn(session.nvml.clone(), index))
            .collect::<std::io::Result<Vec<_>>>()?;
        let stop_events = Arc::new(AtomicBool::new(false));
        let wake = self.wake.clone();
        spawn_listener(
            session.nvml.clone(),
            session.gpu_count,
            self.xids.clone(),
            move |_, _| {
                let _ = wake.send(Wake::Xid);
            },
            stop_events.clone(),
        )?;
        tracing::info!(
            gpus = session.gpu_count,
            driver = %session.driver.driver_version,
            cuda = %session.driver.cuda_version,
            "NVML initialised"
        );
        self.status = NvmlStatus::Up(session.driver.clone());
        self.gpus = (0..session.gpu_count).map(|index| GpuSnapshot { index, ..GpuSnapshot::default() }).collect();
        self.active = Some(Active { workers, stop_events });
        Ok(())
    }

    fn cycle(&mut self) {
        let Some(active) = &self.active else { return };
        let started = Instant::now();
        self.cycle += 1;
        let outcomes = read_all(&active.workers, self.cycle, self.settings.call_timeout);
        let now = SystemTime::now();
        for (index, outcome) in outcomes {
            let Some(gpu) = self.gpus.get_mut(index as usize) else { continue };
            apply_outcome(gpu, outcome, now, &mut self.stats.errors);
        }
        for worker in &active.workers {
            for (call, timing) in worker.take_timings() {
                let total = self.stats.calls.entry(call).or_default();
                total.count += timing.count;
                total.total += timing.total;
            }
        }
        self.stats.cycles_total += 1;
        self.stats.last_cycle_duration = started.elapsed();
        self.taken_at = Some(now);
    }

    /// Joins this cycle's GPUs with pods. Once per loop iteration: an XID republish
    /// between cycles changes no process or allocation, so it reuses the result.
    fn attribute(&mut self) {
        self.attribution = self.settings.attribution.as_ref().map(|a| a.attach(&self.gpus));
    }

    fn publish(&mut self) {
        self.generation += 1;
        let gpus: Vec<GpuSnapshot> =
            self.gpus.iter().map(|g| GpuSnapshot { xids: self.xids.for_gpu(g.index), ..g.clone() }).collect();
        let snapshot = Snapshot {
            generation: self.generation,
            taken_at: self.taken_at,
            nvml: self.status.clone(),
            gpus,
            stats: self.stats.clone(),
            attribution: self.attribution.clone(),
        };
        self.publish.send_replace(Arc::new(snapshot));
    }
}

/// Folds one GPU's cycle outcome into its persistent state.
fn apply_outcome(
    gpu: &mut GpuSnapshot,
    outcome: WorkerOutcome,
    now: SystemTime,
    errors: &mut BTreeMap<CallErrorKey, u64>,
) {
    let mut count = |call: &'static str, error: &str| {
        *errors.entry(CallErrorKey { gpu: Some(gpu.index), call, error: error.to_string() }).or_default() += 1;
    };
    let new_state = match outcome {
        WorkerOutcome::Report(report) => {
            if let Some(identity) = report.identity {
                gpu.identity = identity;
            }
            for (call, error) in &report.failures {
                count(call, error);
            }
            match report.outcome {
                ReadOutcome::Read(readings) => {
                    gpu.readings = Some(*readings);
                    gpu.mig = report.mig;
                    gpu.processes = report.processes;
                    gpu.last_success = Some(now);
                    GpuState::Ok
                }
                ReadOutcome::Lost => match gpu.state {
                    GpuState::Lost { since } => GpuState::Lost { since },
                    _ => GpuState::Lost { since: now },
                },
                ReadOutcome::Failed(error) => GpuState::Failed { error },
            }
        }
        WorkerOutcome::Hung { call } => match gpu.state {
            GpuState::Stale { call, since } => GpuState::Stale { call, since },
            _ => {
                count(call, "deadline_exceeded");
                GpuState::Stale { call, since: now }
            }
        },
        WorkerOutcome::Dead => GpuState::Failed { error: "worker_thread_ended".into() },
    };
    if new_state != GpuState::Ok {
        gpu.readings = None;
        gpu.mig = None;
        gpu.processes.clear();
    }
    log_transition(gpu, &new_state);
    gpu.state = new_state;
}

fn log_transition(gpu: &GpuSnapshot, new: &GpuState) {
    let same_kind = std::mem::discriminant(&gpu.state) == std::mem::discriminant(new);
    if same_kind {
        return;
    }
    let (index, uuid) = (gpu.index, gpu.identity.uuid.as_str());
    match new {
        GpuState::Ok if gpu.state != GpuState::Unknown => tracing::info!(gpu = index, uuid, "GPU answers again"),
        GpuState::Ok | GpuState::Unknown => {}
        GpuState::Stale { call, .. } => {
            tracing::warn!(gpu = index, uuid, call, "NVML call past its deadline; GPU marked stale")
        }
        GpuState::Lost { .. } => tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus)"),
        GpuState::Failed { error } => tracing::warn!(gpu = index, uuid, error, "GPU could not be read"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::read::ReadReport;
    use crate::snapshot::{GpuIdentity, GpuReadings};

    fn report(outcome: ReadOutcome) -> WorkerOutcome {
        WorkerOutcome::Report(Box::new(ReadReport {
            outcome,
            identity: Some(GpuIdentity { uuid: "GPU-1".into(), ..GpuIdentity::default() }),
            failures: vec![("nvmlDeviceGetPowerUsage", "unknown")],
            mig: None,
            processes: Vec::new(),
        }))
    }

    #[test]
    fn a_hung_gpu_loses_its_readings_and_counts_one_error_per_hang() {
        let mut gpu = GpuSnapshot::default();
        let mut errors = BTreeMap::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        apply_outcome(&mut gpu, report(ReadOutcome::Read(Box::default())), t0, &mut errors);
        assert_eq!(gpu.state, GpuState::Ok);
        assert_eq!(gpu.last_success, Some(t0));
        let t1 = t0 + Duration::from_secs(5);
        apply_outcome(&mut gpu, WorkerOutcome::Hung { call: "nvmlDeviceGetPowerUsage" }, t1, &mut errors);
        apply_outcome(
            &mut gpu,
            WorkerOutcome::Hung { call: "nvmlDeviceGetPowerUsage" },
            t1 + Duration::from_secs(5),
            &mut errors,
        );
        assert_eq!(gpu.state, GpuState::Stale { call: "nvmlDeviceGetPowerUsage", since: t1 });
        assert!(gpu.readings.is_none());
        assert_eq!(gpu.last_success, Some(t0), "the last good time is kept");
        let hung = CallErrorKey { gpu: Some(0), call: "nvmlDeviceGetPowerUsage", error: "deadline_exceeded".into() };
        assert_eq!(errors[&hung], 1);
    }

    #[test]
    fn lost_keeps_the_time_it_was_first_seen() {
        let mut gpu = GpuSnapshot { readings: Some(GpuReadings::default()), ..GpuSnapshot::default() };
        let mut errors = BTreeMap::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(7);
        apply_outcome(&mut gpu, report(ReadOutcome::Lost), t0, &mut errors);
        apply_outcome(&mut gpu, report(ReadOutcome::Lost), t0 + Duration::from_secs(9), &mut errors);
        assert_eq!(gpu.state, GpuState::Lost { since: t0 });
        assert!(gpu.readings.is_none());
        assert_eq!(gpu.identity.uuid, "GPU-1");
    }
}
