//! Cold render of one snapshot by each encoding, side by side in one run: our encoder
//! and prometheus-client (docs/design.md records the decision these figures back).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_exporter::exposition::Format;
use gpu_exporter::render::{Encoding, RenderContext, render_encoded};
use gpu_exporter::snapshot::Snapshot;

use super::{micros, percentile};

const RUNS: usize = 2000;

/// Prints a table row per encoding and format: p50, p99, bytes. Runs alternate between
/// the encodings so both see the same machine state.
pub fn compare(title: &str, snapshot: &Snapshot, ctx: &RenderContext) {
    // The server renders a shared snapshot; so does this (neither encoding copies it).
    let snapshot = &Arc::new(snapshot.clone());
    println!("\n## Cold render by encoding: {title} ({RUNS} renders each, alternating)\n");
    println!("| encoding | format | p50 | p99 | bytes | same bytes |");
    println!("|---|---|---|---|---|---|");
    for format in [Format::OpenMetrics, Format::PrometheusText] {
        let encodings = [Encoding::Ours, Encoding::PrometheusClient];
        let mut times: [Vec<Duration>; 2] = [Vec::with_capacity(RUNS), Vec::with_capacity(RUNS)];
        for _ in 0..RUNS {
            for (encoding, times) in encodings.iter().zip(times.iter_mut()) {
                let started = Instant::now();
                let text = render_encoded(snapshot, ctx, format, &[], *encoding);
                times.push(started.elapsed());
                std::hint::black_box(text);
            }
        }
        let texts = encodings.map(|e| render_encoded(snapshot, ctx, format, &[], e));
        for ((encoding, times), text) in encodings.iter().zip(times.iter_mut()).zip(&texts) {
            times.sort();
            println!(
                "| {encoding:?} | {format:?} | {} | {} | {} | {} |",
                micros(percentile(times, 0.5)),
                micros(percentile(times, 0.99)),
                text.len(),
                text == &texts[0]
            );
        }
    }
}
