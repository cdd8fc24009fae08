//! One thread per GPU, and the deadline that keeps a hung GPU from stalling the rest.
//!
//! NVML calls cannot be cancelled, so each GPU is read on its own thread. A cycle hands
//! every idle worker a job and waits for the reports; a worker whose current call has
//! run longer than the call deadline is given up on for this cycle and reported hung,
//! naming the call. Until that call returns, the worker stays busy and later cycles
//! report the GPU still hung without queueing more work behind it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use nvml_wrapper::Nvml;

use super::read::{GpuReader, ReadReport};
use super::tracker::CallTracker;
use crate::snapshot::CallTiming;

struct Job {
    cycle: u64,
    reply: mpsc::Sender<WorkerReport>,
}

struct WorkerReport {
    index: u32,
    cycle: u64,
    report: ReadReport,
}

/// The reading thread of one GPU.
#[derive(Debug)]
pub struct GpuWorker {
    pub index: u32,
    tracker: Arc<CallTracker>,
    jobs: mpsc::Sender<Job>,
    busy: Arc<AtomicBool>,
}

/// How a GPU fared in one cycle.
#[derive(Debug, Clone)]
pub enum WorkerOutcome {
    Report(Box<ReadReport>),
    /// A call passed its deadline (this cycle or an earlier one) and has not returned.
    Hung {
        call: &'static str,
    },
    /// The worker thread is gone (it can only end by panicking).
    Dead,
}

impl GpuWorker {
    pub fn spawn(nvml: Arc<Nvml>, index: u32) -> std::io::Result<Self> {
        let tracker = Arc::new(CallTracker::default());
        let busy = Arc::new(AtomicBool::new(false));
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (thread_tracker, thread_busy) = (tracker.clone(), busy.clone());
        std::thread::Builder::new().name(format!("nvml-gpu{index}")).stack_size(1 << 20).spawn(move || {
            let mut reader = GpuReader::new(nvml, index);
            for job in inbox {
                let report = reader.read(&thread_tracker);
                thread_busy.store(false, Ordering::Release);
                // The cycle may have given up on us; a late report is simply dropped.
                let _ = job.reply.send(WorkerReport { index, cycle: job.cycle, report });
            }
        })?;
        Ok(GpuWorker { index, tracker, jobs, busy })
    }

    fn dispatch(&self, cycle: u64, reply: &mpsc::Sender<WorkerReport>) -> Result<(), WorkerOutcome> {
        if self.busy.load(Ordering::Acquire) {
            let call = self.tracker.in_flight().map_or("unknown", |(call, _)| call);
            return Err(WorkerOutcome::Hung { call });
        }
        self.busy.store(true, Ordering::Release);
        self.jobs.send(Job { cycle, reply: reply.clone() }).map_err(|_| WorkerOutcome::Dead)
    }

    /// Call timings gathered since the last cycle.
    pub fn take_timings(&self) -> BTreeMap<&'static str, CallTiming> {
        self.tracker.take_timings()
    }
}

/// Reads every GPU for cycle `cycle`, giving up on any call past `call_timeout`.
/// Returns one outcome per worker, in worker order.
pub fn read_all(workers: &[GpuWorker], cycle: u64, call_timeout: Duration) -> Vec<(u32, WorkerOutcome)> {
    let (reply, reports) = mpsc::channel();
    let mut outcomes: BTreeMap<u32, WorkerOutcome> = BTreeMap::new();
    let mut pending: Vec<&GpuWorker> = Vec::new();
    for worker in workers {
        match worker.dispatch(cycle, &reply) {
            Ok(()) => pending.push(worker),
            Err(outcome) => {
                outcomes.insert(worker.index, outcome);
            }
        }
    }
    drop(reply);
    while !pending.is_empty() {
        // Wake when the oldest in-flight call would pass its deadline.
        let wait = pending
            .iter()
            .map(|w| w.tracker.in_flight().map_or(call_timeout, |(_, ran)| call_timeout.saturating_sub(ran)))
            .min()
            .unwrap_or(call_timeout)
            .max(Duration::from_millis(1));
        match reports.recv_timeout(wait) {
            Ok(WorkerReport { index, cycle: c, report }) if c == cycle => {
                pending.retain(|w| w.index != index);
                outcomes.insert(index, WorkerOutcome::Report(Box::new(report)));
            }
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => {
                pending.retain(|w| match w.tracker.in_flight() {
                    Some((call, ran)) if ran >= call_timeout => {
                        outcomes.insert(w.index, WorkerOutcome::Hung { call });
                        false
                    }
                    _ => true,
                });
            }
            Err(RecvTimeoutError::Disconnected) => {
                for w in pending.drain(..) {
                    outcomes.insert(w.index, WorkerOutcome::Dead);
                }
            }
        }
    }
    outcomes.into_iter().collect()
}
