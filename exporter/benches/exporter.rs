//! Exporter benchmark on the simulated 8-GPU H100 node. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p gpu-exporter --bench exporter` (release build).
//! Measures, in one run:
//! - the collection cycle in-process with the fake library (the exporter's own
//!   overhead: threads, deadlines, snapshot; the fake's calls cost well under 1 µs);
//! - a cold render of the exposition from a snapshot;
//! - `/metrics` latency p50/p99 under 10 concurrent keep-alive scrapers, as Prometheus
//!   asks (OpenMetrics, gzip) and as plain text;
//! - series and bytes per scrape, resident memory, CPU per second at a 1 s interval;
//! - node_exporter 1.5 scraped the same way, as the per-sample reference.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_exporter::nvml::worker::{GpuWorker, read_all};
use gpu_exporter::render::encode::Format;
use gpu_exporter::render::{RenderContext, render};
use gpu_exporter::snapshot::{
    ClockEvents, EccCounts, GpuReadings, GpuSnapshot, GpuState, MemoryReading, RecoveryAction, RemappedRows, Snapshot,
};

const SCRAPERS: usize = 10;
const SCRAPES_PER_SCRAPER: usize = 300;
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gpu-exporter")).parent().unwrap().to_path_buf()
}

fn build_fake(profile_dir: &Path) -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "fake-nvml", "--lib"])
        .current_dir(repo_root())
        .status()
        .unwrap();
    assert!(status.success());
    profile_dir.join("libfake_nvml.so")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    // Ignore libtest's arguments (`--bench`).
    let scenario = repo_root().join("fake-nvml/scenarios/h100-8gpu-node.yaml");
    let library = build_fake(&target_dir());
    // SAFETY: set before any other thread starts.
    unsafe { std::env::set_var("FAKE_NVML_SCENARIO", &scenario) };

    println!("# gpu-exporter benchmark: {} ({} GPUs)\n", scenario.display(), 8);
    cycle_in_process(&library);
    cold_render();
    let exporter = Spawned::exporter(&library, &scenario);
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
    }
}

struct Spawned {
    child: Child,
    address: String,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Spawned {
    fn exporter(library: &Path, scenario: &Path) -> Spawned {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"))
            .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--collect-interval", "1s"])
            .args(["--nvml.call-timeout", "500ms"])
            .arg("--nvml-library")
            .arg(library)
            .env("FAKE_NVML_SCENARIO", scenario)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let address = loop {
            let line = lines.next().expect("exporter output").unwrap();
            if let Some(rest) = line.split("\"address\":\"").nth(1) {
                break rest.split('"').next().unwrap().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let spawned = Spawned { child, address };
        while get(&mut connect(&spawned.address), "/readyz", "*/*", false).0 != 200 {
            std::thread::sleep(Duration::from_millis(50));
        }
        spawned
    }

    fn node_exporter() -> Option<Spawned> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let address = format!("127.0.0.1:{port}");
        let child = Command::new("prometheus-node-exporter")
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let spawned = Spawned { child, address };
        for _ in 0..100 {
            if TcpStream::connect(&spawned.address).is_ok() {
                return Some(spawned);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

fn connect(address: &str) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    BufReader::new(stream)
}

/// One keep-alive GET; returns (status, body bytes as received).
fn get(conn: &mut BufReader<TcpStream>, path: &str, accept: &str, gzip: bool) -> (u16, Vec<u8>) {
    let encoding = if gzip { "Accept-Encoding: gzip\r\n" } else { "" };
    let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: {accept}\r\n{encoding}\r\n");
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let mut status_line = String::new();
    conn.read_line(&mut status_line).unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut length = None;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if let Some(n) = length {
        body.resize(n, 0);
        conn.read_exact(&mut body).unwrap();
    } else if chunked {
        loop {
            let mut size = String::new();
            conn.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            conn.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    (status, body)
}

fn decoded_text(body: &[u8], gzip: bool) -> String {
    if gzip && body.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(body).read_to_string(&mut text).unwrap();
        text
    } else {
        String::from_utf8_lossy(body).to_string()
    }
}

fn scrape_load(address: &str, target: &str, label: &str, accept: &str, gzip: bool) -> (usize, usize) {
    let (_, body) = get(&mut connect(address), "/metrics", accept, gzip);
    let text = decoded_text(&body, gzip);
    let series = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
    let bytes = body.len();
    let address = Arc::new(address.to_string());
    let accept = Arc::new(accept.to_string());
    let threads: Vec<_> = (0..SCRAPERS)
        .map(|_| {
            let (address, accept) = (address.clone(), accept.clone());
            std::thread::spawn(move || {
                let mut conn = connect(&address);
                let mut times = Vec::with_capacity(SCRAPES_PER_SCRAPER);
                for _ in 0..SCRAPES_PER_SCRAPER {
                    let started = Instant::now();
                    let (status, _) = get(&mut conn, "/metrics", &accept, gzip);
                    times.push(started.elapsed());
                    assert_eq!(status, 200);
                }
                times
            })
        })
        .collect();
    let mut times: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    times.sort();
    let p50 = percentile(&times, 0.5);
    println!(
        "| {target} | {label} | {series} | {bytes} | {} | {} | {:.2} µs |",
        micros(p50),
        micros(percentile(&times, 0.99)),
        p50.as_secs_f64() * 1e6 / series.max(1) as f64
    );
    (series, bytes)
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU time of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn resource_use(exporter: &Spawned) {
    let pid = exporter.child.id();
    let ticks_per_second = 100.0; // USER_HZ on Linux
    let window = Duration::from_secs(30);
    let before = cpu_ticks(pid);
    std::thread::sleep(window);
    let after = cpu_ticks(pid);
    let cpu_percent = (after - before) as f64 / ticks_per_second / window.as_secs_f64() * 100.0;
    println!("\n## Resources of the exporter process (collect interval 1 s)\n");
    println!("| RSS now | RSS peak | CPU, idle between cycles ({}s window) |", window.as_secs());
    println!("|---|---|---|");
    println!(
        "| {:.1} MiB | {:.1} MiB | {:.2} % of a core |",
        proc_status_kib(pid, "VmRSS:") as f64 / 1024.0,
        proc_status_kib(pid, "VmHWM:") as f64 / 1024.0,
        cpu_percent
    );
}
