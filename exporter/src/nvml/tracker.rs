//! Which NVML call a worker thread is in, since when, and how long calls take.
//!
//! NVML calls are blocking C calls that cannot be cancelled. The worker announces each
//! call here; the collector, waiting on a deadline, reads it to tell a slow GPU from a
//! hung one and to name the call that hung.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::snapshot::CallTiming;

/// Shared between one worker and the collector.
#[derive(Debug, Default)]
pub struct CallTracker {
    current: Mutex<Option<(&'static str, Instant)>>,
    timings: Mutex<BTreeMap<&'static str, CallTiming>>,
}

impl CallTracker {
    /// Runs `call` named `name`, marking it in flight meanwhile.
    pub fn run<T>(&self, name: &'static str, call: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        set(&self.current, Some((name, started)));
        let result = call();
        let elapsed = started.elapsed();
        set(&self.current, None);
        let mut timings = lock(&self.timings);
        let timing = timings.entry(name).or_default();
        timing.count += 1;
        timing.total += elapsed;
        result
    }

    /// The call in flight and how long it has run.
    pub fn in_flight(&self) -> Option<(&'static str, Duration)> {
        lock(&self.current).map(|(name, started)| (name, started.elapsed()))
    }

    /// Takes the timings gathered since the last call.
    pub fn take_timings(&self) -> BTreeMap<&'static str, CallTiming> {
        std::mem::take(&mut *lock(&self.timings))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data is still plain values.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn set<T>(m: &Mutex<T>, value: T) {
    *lock(m) = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_in_flight_only_while_it_runs() {
        let tracker = std::sync::Arc::new(CallTracker::default());
        let t = tracker.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            t.run("nvmlDeviceGetPowerUsage", || {
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(50));
            })
        });
        rx.recv().unwrap();
        let (name, _) = tracker.in_flight().expect("in flight");
        assert_eq!(name, "nvmlDeviceGetPowerUsage");
        handle.join().unwrap();
        assert!(tracker.in_flight().is_none());
        let timings = tracker.take_timings();
        assert_eq!(timings["nvmlDeviceGetPowerUsage"].count, 1);
        assert!(timings["nvmlDeviceGetPowerUsage"].total >= Duration::from_millis(50));
        assert!(tracker.take_timings().is_empty());
    }
}
