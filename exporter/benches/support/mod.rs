//! Shared by the exporter benchmarks: building the fake library, spawning the exporter
//! and node_exporter, a keep-alive HTTP client, scrape load and process resources.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod encodings;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SCRAPERS: usize = 10;
pub const SCRAPES_PER_SCRAPER: usize = 300;
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gpu-exporter")).parent().unwrap().to_path_buf()
}

/// The exporter binary under test: cargo's build for this bench, or another build named
/// by `GPU_EXPORTER_BENCH_BINARY` (to compare profiles or features side by side).
pub fn exporter_binary() -> PathBuf {
    std::env::var_os("GPU_EXPORTER_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpu-exporter")))
}

pub fn build_fake(profile_dir: &Path) -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "fake-nvml", "--lib"])
        .current_dir(repo_root())
        .status()
        .unwrap();
    assert!(status.success());
    profile_dir.join("libfake_nvml.so")
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

pub struct Spawned {
    pub child: Child,
    pub address: String,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Spawned {
    /// The exporter on the simulated node `scenario`, collecting every second; `extra`
    /// flags are appended. Health and the pod watch are off: no API server here.
    pub fn exporter(library: &Path, scenario: &Path, extra: &[String]) -> Spawned {
        let mut child = Command::new(exporter_binary())
            .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--collect-interval", "1s"])
            .args(["--nvml.call-timeout", "500ms", "--health.enabled=false", "--kubernetes.api", "off"])
            .args(extra)
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

    pub fn node_exporter() -> Option<Spawned> {
        let port = test_support::free_port();
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

pub fn connect(address: &str) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    BufReader::new(stream)
}

/// One keep-alive GET; returns (status, body bytes as received).
pub fn get(conn: &mut BufReader<TcpStream>, path: &str, accept: &str, gzip: bool) -> (u16, Vec<u8>) {
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

pub fn decoded_text(body: &[u8], gzip: bool) -> String {
    if gzip && body.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(body).read_to_string(&mut text).unwrap();
        text
    } else {
        String::from_utf8_lossy(body).to_string()
    }
}

pub fn scrape_load(address: &str, target: &str, label: &str, accept: &str, gzip: bool) -> (usize, usize) {
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

pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU time of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

pub fn resource_use(exporter: &Spawned) {
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
    rss_by_mapping(pid);
}

/// Where the resident memory is, from `/proc/<pid>/smaps`: file-backed pages grouped by
/// file (the binary's own code, the NVML library, libc), anonymous pages split into
/// the heap, thread stacks and the rest (malloc arenas of other threads, tokio buffers).
pub fn rss_by_mapping(pid: u32) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut by_name: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut current = String::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let (perms, path) = (fields.next().unwrap_or(""), fields.nth(3).unwrap_or(""));
            current = match path {
                "" => "anonymous (arenas, thread stacks, other)".to_string(),
                p if p.starts_with('[') => p.to_string(),
                p => {
                    let file = p.rsplit('/').next().unwrap_or(p);
                    let kind = if perms.contains('x') { "code" } else { "data" };
                    format!("{file} ({kind})")
                }
            };
        } else if first == "Rss:" {
            let kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            *by_name.entry(current.clone()).or_default() += kib;
        }
    }
    let mut rows: Vec<(String, u64)> = by_name.into_iter().filter(|(_, kib)| *kib >= 64).collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.1));
    println!("\n| resident by mapping (`/proc/<pid>/smaps`, ≥ 64 KiB) | MiB |\n|---|---|");
    for (name, kib) in rows {
        println!("| {name} | {:.2} |", kib as f64 / 1024.0);
    }
    println!("| threads | {} |", proc_status_kib(pid, "Threads:"));
}
