//! Timing for the benchmarks: latency percentiles of sequential requests.
#![allow(dead_code)] // included whole by each benchmark, which uses a part

use std::time::{Duration, Instant};

/// The `p` quantile (0 to 1) of `sorted`, the nearest sample.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Median, 99th percentile and how many samples.
pub struct Stats {
    pub p50: Duration,
    pub p99: Duration,
    pub n: usize,
}

impl Stats {
    /// Of `samples`, in any order.
    pub fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        Stats { p50: percentile(&samples, 0.5), p99: percentile(&samples, 0.99), n: samples.len() }
    }
}

/// Times `iters` calls of `f`, one after the other, after `warmup` untimed ones.
pub async fn measure<F: AsyncFnMut()>(warmup: usize, iters: usize, mut f: F) -> Stats {
    for _ in 0..warmup {
        f().await;
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        f().await;
        samples.push(t.elapsed());
    }
    Stats::of(samples)
}
