//! Every duration and number flag of the adapter has a stated valid range, and the
//! parser enforces exactly that range. Table-driven, one row per flag:
//! - every argument of `Cli::command()` whose value is a duration or a number must have a
//!   row (a new flag without one fails here), and every row must be a real argument;
//! - the `--help` text of the flag and the README's flag table state the range;
//! - each bound itself is accepted, a value just outside each bound is refused, and the
//!   refusal names the flag, its environment variable and the range;
//! - the same out-of-range values set through the environment variable make the real
//!   binary exit with code 2 and a message naming the flag, the variable and the range.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clap::{CommandFactory as _, Parser as _};
use flag_ranges::table::{self, Row, row, run_to_exit};
use gpu_metrics_adapter::config::{Args, Cli};

const ROWS: &[Row] = &[
    row("secure-port", "GPU_METRICS_ADAPTER_SECURE_PORT", "0 to 65535", ["0", "65535"], ["-1", "65536"]),
    row(
        "tls-reload-interval",
        "GPU_METRICS_ADAPTER_TLS_RELOAD_INTERVAL",
        "100ms to 1h",
        ["100ms", "1h"],
        ["99ms", "1h1ms"],
    ),
    row(
        "tls-ca-validity",
        "GPU_METRICS_ADAPTER_TLS_CA_VALIDITY",
        "9s to 87600h",
        ["9s", "87600h"],
        ["8s999ms", "87600h1ms"],
    ),
    row(
        "tls-cert-validity",
        "GPU_METRICS_ADAPTER_TLS_CERT_VALIDITY",
        "3s to 29200h",
        ["3s", "29200h"],
        ["2s999ms", "29200h1ms"],
    ),
    row(
        "tls-secret-check-interval",
        "GPU_METRICS_ADAPTER_TLS_SECRET_CHECK_INTERVAL",
        "100ms to 1h",
        ["100ms", "1h"],
        ["99ms", "1h1ms"],
    ),
    row("kube-api-timeout", "GPU_METRICS_ADAPTER_KUBE_API_TIMEOUT", "1s to 5m", ["1s", "5m"], ["999ms", "5m1ms"]),
    row(
        "authentication-config-refresh",
        "GPU_METRICS_ADAPTER_AUTHENTICATION_CONFIG_REFRESH",
        "100ms to 1h",
        ["100ms", "1h"],
        ["99ms", "1h1ms"],
    ),
    row(
        "authentication-token-cache-ttl",
        "GPU_METRICS_ADAPTER_AUTHENTICATION_TOKEN_CACHE_TTL",
        "0s to 1h",
        ["0s", "1h"],
        ["-1s", "1h1ms"],
    ),
    row(
        "authorization-cache-allow-ttl",
        "GPU_METRICS_ADAPTER_AUTHORIZATION_CACHE_ALLOW_TTL",
        "0s to 1h",
        ["0s", "1h"],
        ["-1s", "1h1ms"],
    ),
    row(
        "authorization-cache-deny-ttl",
        "GPU_METRICS_ADAPTER_AUTHORIZATION_CACHE_DENY_TTL",
        "0s to 1h",
        ["0s", "1h"],
        ["-1s", "1h1ms"],
    ),
    row("scrape-interval", "GPU_METRICS_ADAPTER_SCRAPE_INTERVAL", "100ms to 5m", ["100ms", "5m"], ["0s", "5m1ms"]),
    row(
        "metrics-relist-interval",
        "GPU_METRICS_ADAPTER_METRICS_RELIST_INTERVAL",
        "1s to 1h",
        ["1s", "1h"],
        ["999ms", "1h1ms"],
    ),
    row("metrics-max-age", "GPU_METRICS_ADAPTER_METRICS_MAX_AGE", "1s to 24h", ["1s", "24h"], ["999ms", "24h1ms"]),
    row("v", "GPU_METRICS_ADAPTER_V", "0 to 10", ["0", "10"], ["-1", "11"]),
    row("scrape-timeout", "GPU_METRICS_ADAPTER_SCRAPE_TIMEOUT", "100ms to 5m", ["100ms", "5m"], ["99ms", "5m1ms"]),
    row(
        "scrape-max-bytes",
        "GPU_METRICS_ADAPTER_SCRAPE_MAX_BYTES",
        "4096 to 1073741824",
        ["4096", "1073741824"],
        ["4095", "1073741825"],
    ),
    row("scrape-concurrency", "GPU_METRICS_ADAPTER_SCRAPE_CONCURRENCY", "1 to 5000", ["1", "5000"], ["0", "5001"]),
    row("max-age", "GPU_METRICS_ADAPTER_MAX_AGE", "1s to 15m", ["1s", "15m"], ["999ms", "15m1ms"]),
    row(
        "prometheus-timeout",
        "GPU_METRICS_ADAPTER_PROMETHEUS_TIMEOUT",
        "100ms to 5m",
        ["100ms", "5m"],
        ["99ms", "5m1ms"],
    ),
    row(
        "prometheus-max-bytes",
        "GPU_METRICS_ADAPTER_PROMETHEUS_MAX_BYTES",
        "4096 to 1073741824",
        ["4096", "1073741824"],
        ["4095", "1073741825"],
    ),
    row(
        "max-request-uri-bytes",
        "GPU_METRICS_ADAPTER_MAX_REQUEST_URI_BYTES",
        "1024 to 1048576",
        ["1024", "1048576"],
        ["1023", "1048577"],
    ),
    row(
        "max-request-header-bytes",
        "GPU_METRICS_ADAPTER_MAX_REQUEST_HEADER_BYTES",
        "4096 to 1048576",
        ["4096", "1048576"],
        ["4095", "1048577"],
    ),
    row("header-read-timeout", "GPU_METRICS_ADAPTER_HEADER_READ_TIMEOUT", "1s to 1m", ["1s", "1m"], ["999ms", "1m1ms"]),
    row(
        "tls-handshake-timeout",
        "GPU_METRICS_ADAPTER_TLS_HANDSHAKE_TIMEOUT",
        "1s to 1m",
        ["1s", "1m"],
        ["999ms", "1m1ms"],
    ),
    row("max-connections", "GPU_METRICS_ADAPTER_MAX_CONNECTIONS", "16 to 65536", ["16", "65536"], ["15", "65537"]),
    row(
        "max-connections-per-ip",
        "GPU_METRICS_ADAPTER_MAX_CONNECTIONS_PER_IP",
        "1 to 65536",
        ["1", "65536"],
        ["0", "65537"],
    ),
    row("shutdown-drain", "GPU_METRICS_ADAPTER_SHUTDOWN_DRAIN", "0s to 5m", ["0s", "5m"], ["-1s", "5m1ms"]),
];

/// The flags of the `check-api` subcommand (`helm test`'s hook).
const CHECK_API_ROWS: &[Row] =
    &[row("timeout", "GPU_METRICS_ADAPTER_CHECK_TIMEOUT", "1s to 5m", ["1s", "5m"], ["999ms", "5m1ms"])];

fn parse(flag: &str, value: &str) -> Result<Args, clap::Error> {
    Args::parse_from_args(["gpu-metrics-adapter".to_owned(), format!("--{flag}={value}")])
}

fn parse_check_api(flag: &str, value: &str) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(["gpu-metrics-adapter", "check-api", "--namespace=default", &format!("--{flag}={value}")])
}

#[test]
fn every_duration_and_number_flag_has_a_row_and_every_row_a_flag() {
    let all: Vec<Row> = ROWS.iter().chain(CHECK_API_ROWS).cloned().collect();
    table::check_rows_cover(&Cli::command(), &all);
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for row in &all {
        let table_row = format!("| `--{}` | `{}` | {} |", row.flag, row.env, row.range);
        assert!(readme.contains(&table_row), "metrics-adapter/README.md lacks the row {table_row}");
    }
    Args::parse_from_args(["gpu-metrics-adapter"]).expect("every default is inside its range");
}

#[test]
fn each_bound_is_accepted_and_just_outside_is_refused_naming_flag_variable_and_range() {
    table::check_bounds(ROWS, parse);
    table::check_bounds(CHECK_API_ROWS, parse_check_api);
}

#[test]
fn out_of_range_values_from_the_environment_stop_the_binary_naming_flag_variable_and_range() {
    table::check_refused_from_env(ROWS, |row, value| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"));
        // Nothing else from the test's environment; should the value be accepted, the
        // adapter would start standalone on a free loopback port until run_to_exit kills it.
        command
            .env_clear()
            .env(row.env, value)
            .env("GPU_METRICS_ADAPTER_STANDALONE", "true")
            .env("GPU_METRICS_ADAPTER_BIND_ADDRESS", "127.0.0.1")
            .env("GPU_METRICS_ADAPTER_EXPORTER_URL", "http://127.0.0.1:9/metrics");
        if row.env != "GPU_METRICS_ADAPTER_SECURE_PORT" {
            command.env("GPU_METRICS_ADAPTER_SECURE_PORT", "0");
        }
        command
    });
}

#[test]
fn a_cross_check_is_refused_with_both_flags_before_any_client_is_built() {
    let args = Args::parse_from_args(["x", "--scrape-interval=1m", "--max-age=30s"]).unwrap();
    let err = gpu_metrics_adapter::app::check_flags(&args).unwrap_err().to_string();
    for part in
        ["--max-age (GPU_METRICS_ADAPTER_MAX_AGE) 30s", "--scrape-interval (GPU_METRICS_ADAPTER_SCRAPE_INTERVAL) 1m"]
    {
        assert!(err.contains(part), "{part} in {err}");
    }
    let args = Args::parse_from_args(["x", "--scrape-interval=1m", "--max-age=1m"]).unwrap();
    assert!(gpu_metrics_adapter::app::check_flags(&args).is_ok());
    let args = Args::parse_from_args(["x", "--scrape-interval=1m", "--max-age=30s", "--direct-source=false"]).unwrap();
    assert!(gpu_metrics_adapter::app::check_flags(&args).is_ok(), "max-age only bounds the direct source");
    let args = Args::parse_from_args(["x", "--max-connections=64", "--max-connections-per-ip=65"]).unwrap();
    let err = gpu_metrics_adapter::app::check_flags(&args).unwrap_err().to_string();
    for part in [
        "--max-connections-per-ip (GPU_METRICS_ADAPTER_MAX_CONNECTIONS_PER_IP) 65",
        "--max-connections (GPU_METRICS_ADAPTER_MAX_CONNECTIONS) 64",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
    let args = Args::parse_from_args(["x", "--max-connections=64", "--max-connections-per-ip=64"]).unwrap();
    assert!(gpu_metrics_adapter::app::check_flags(&args).is_ok());
}

#[test]
fn a_refusal_through_the_log_is_plain_text_off_a_terminal() {
    // A configuration refused after parsing goes through the log (tracing); piped into a
    // container log it must carry no colour escapes.
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"));
    command.env_clear().args(["--standalone", "--bind-address=127.0.0.1", "--secure-port=0"]);
    let (code, stderr) = run_to_exit(command, Duration::from_secs(20));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--exporter-url"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "escape codes in {stderr:?}");
}

#[test]
fn a_log_level_that_is_no_level_stops_the_binary_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-metrics-adapter"))
        .env_clear()
        .args(["--standalone", "--log.level=info,gpu_metrics_adapter=loud"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--log.level") && stderr.contains("\"loud\" is not a level"), "{stderr}");
}
