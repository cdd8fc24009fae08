//! Exporter benchmark on the simulated 8-GPU H100 node. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p gpu-exporter --bench exporter` (release build).
//! Measures, in one run:
//! - the collection cycle in-process with the fake library (the exporter's own
//!   overhead: threads, deadlines, snapshot; the fake's calls cost well under 1 µs);
//! - a cold render of the exposition from a snapshot;
//! - the same cold render by each encoding (ours, prometheus-client), both formats,
//!   side by side (docs/design.md);
//! - `/metrics` latency p50/p99 under 10 concurrent keep-alive scrapers, as Prometheus
//!   asks (OpenMetrics, gzip) and as plain text;
//! - series and bytes per scrape, resident memory, CPU per second at a 1 s interval;
//! - node_exporter 1.5 scraped the same way, as the per-sample reference.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_exporter::exposition::Format;
use gpu_exporter::nvml::worker::{GpuWorker, read_all};
use gpu_exporter::render::{RenderContext, render};
use gpu_exporter::snapshot::{
    ClockEvents, EccCounts, GpuReadings, GpuSnapshot, GpuState, MemoryReading, NvLinkErrors, NvLinkReading,
    RecoveryAction, RemappedRows, Snapshot,
};
use support::{
    PROMETHEUS_ACCEPT, SCRAPERS, SCRAPES_PER_SCRAPER, Spawned, build_fake, micros, percentile, repo_root, resource_use,
    scrape_load, target_dir,
};

fn main() {
    // Ignore libtest's arguments (`--bench`).
    let scenario = repo_root().join("fake-nvml/scenarios/h100-8gpu-node.yaml");
    let library = build_fake(&target_dir());
    // SAFETY: set before any other thread starts.
    unsafe { std::env::set_var("FAKE_NVML_SCENARIO", &scenario) };

    println!("# gpu-exporter benchmark: {} ({} GPUs)\n", scenario.display(), 8);
    cycle_in_process(&library);
    cold_render();
    let exporter = Spawned::exporter(&library, &scenario, &["--kubelet.pod-resources-socket=".to_string()]);
    let node_exporter = Spawned::node_exporter();
    println!("\n## /metrics under {SCRAPERS} concurrent keep-alive scrapers ({SCRAPES_PER_SCRAPER} scrapes each)\n");
    println!("| target | request | series | bytes | p50 | p99 | p50 per series |");
    println!("|---|---|---|---|---|---|---|");
    let (om_series, _) = scrape_load(&exporter.address, "gpu-exporter", "OpenMetrics + gzip", PROMETHEUS_ACCEPT, true);
    scrape_load(&exporter.address, "gpu-exporter", "text 0.0.4", "text/plain", false);
    if let Some(ne) = &node_exporter {
        scrape_load(&ne.address, "node_exporter 1.5", "text 0.0.4 + gzip", PROMETHEUS_ACCEPT, true);
        scrape_load(&ne.address, "node_exporter 1.5", "text 0.0.4", "text/plain", false);
    } else {
        println!("| node_exporter | not installed (apt-get install prometheus-node-exporter) | | | | | |");
    }
    let _ = om_series;
    resource_use(&exporter);
}

fn cycle_in_process(library: &Path) {
    let session = gpu_exporter::nvml::open(library, Duration::from_secs(5)).expect("open the fake NVML");
    let workers: Vec<GpuWorker> =
        (0..session.gpu_count).map(|i| GpuWorker::spawn(session.nvml.clone(), i).unwrap()).collect();
    for cycle in 1..=50 {
        read_all(&workers, cycle, Duration::from_secs(2));
    }
    let mut times = Vec::new();
    for cycle in 51..=3050 {
        let started = Instant::now();
        let outcomes = read_all(&workers, cycle, Duration::from_secs(2));
        times.push(started.elapsed());
        assert_eq!(outcomes.len(), 8);
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let calls: u64 = workers.iter().flat_map(|w| w.take_timings().into_values()).map(|t| t.count).sum();
    println!("## Collection cycle, in process, fake NVML ({} cycles)\n", times.len());
    println!("| mean | p50 | p99 | NVML calls per cycle |");
    println!("|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} |",
        micros(mean),
        micros(percentile(&times, 0.5)),
        micros(percentile(&times, 0.99)),
        calls / (3050 - 50 + 50)
    );
}

fn cold_render() {
    let gpus: Vec<GpuSnapshot> = (0..8)
        .map(|index| GpuSnapshot {
            index,
            state: GpuState::Ok,
            readings: Some(full_readings()),
            ..GpuSnapshot::default()
        })
        .collect();
    let snapshot = Snapshot { gpus, ..Snapshot::default() };
    let ctx = RenderContext { node: "bench".into(), ..RenderContext::default() };
    let mut times = Vec::new();
    for _ in 0..2000 {
        let started = Instant::now();
        let text = render(&snapshot, &ctx, Format::OpenMetrics);
        times.push(started.elapsed());
        std::hint::black_box(text);
    }
    times.sort();
    println!("\n## Cold render of one snapshot (8 GPUs, before caching)\n");
    println!(
        "| p50 | p99 |\n|---|---|\n| {} | {} |",
        micros(percentile(&times, 0.5)),
        micros(percentile(&times, 0.99))
    );
    support::encodings::compare("plain 8-GPU node", &snapshot, &ctx);
}

/// A reading with every field present, as an H100 gives it.
fn full_readings() -> GpuReadings {
    GpuReadings {
        utilization_percent: Some(71),
        memory_controller_percent: Some(33),
        memory: Some(MemoryReading {
            total_bytes: 85_520_809_984,
            used_bytes: 71_303_168_000,
            reserved_bytes: 548_405_248,
        }),
        power_watts: Some(512.25),
        power_limit_watts: Some(700.0),
        energy_joules: Some(9_812_345.678),
        temperature_celsius: Some(63),
        temperature_slowdown_celsius: Some(89),
        temperature_shutdown_celsius: Some(92),
        sm_clock_mhz: Some(1980),
        mem_clock_mhz: Some(2619),
        sm_clock_max_mhz: Some(1980),
        mem_clock_max_mhz: Some(2619),
        encoder_percent: None,
        decoder_percent: Some(0),
        pcie_tx_bytes_per_second: Some(102_400_000),
        pcie_rx_bytes_per_second: Some(81_920_000),
        pcie_replays: Some(0),
        performance_state: Some(0),
        ecc_enabled: Some(true),
        ecc: Some(EccCounts::default()),
        retired_pages: None,
        remapped_rows: Some(RemappedRows::default()),
        clock_events: Some(ClockEvents { supported: 0x1ff, active: 0x4 }),
        recovery_action: Some(RecoveryAction::None),
        mig_enabled: Some(false),
        sm_activity_percent: Some(68.5),
        tensor_activity_percent: Some(41.0),
        dram_activity_percent: Some(30.25),
        graphics_activity_percent: Some(70.5),
        memory_temperature_celsius: Some(67),
        // An H100 SXM5 has 18 NVLink links.
        nvlinks: (0..18)
            .map(|link| NvLinkReading {
                link,
                active: Some(true),
                tx_bytes: Some(1_234_567_890_000 + u64::from(link)),
                rx_bytes: Some(1_234_567_000_000 + u64::from(link)),
                errors: NvLinkErrors { crc_flit: Some(0), crc_data: Some(0), replay: Some(0), recovery: Some(0) },
            })
            .collect(),
        nvlink_data_bytes_per_second: Some(52_428_800_000.0),
    }
}
