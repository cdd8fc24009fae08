//! Every duration and number flag of the exporter has a stated valid range, and the
//! parser enforces exactly that range. Table-driven, one row per flag:
//! - every argument of `Args::command()` whose value is a duration or a number must have
//!   a row (a new flag without one fails here), and every row must be a real argument;
//! - the `--help` text of the flag states the range;
//! - each bound itself is accepted, a value just outside each bound is refused, and the
//!   refusal names the flag, its environment variable and the range;
//! - the same out-of-range values set through the environment variable make the real
//!   binary exit with code 2 and a message naming the flag, the variable and the range.
//!
//! And once end to end, with a kubeconfig pointing at the in-test API server: a refused
//! health setting (out of range, or refused later by the settings check) and a refused
//! cross-check stop the binary with exit code 2 before it makes any API request, while
//! the same command with valid settings does reach the API server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use clap::{CommandFactory as _, Parser as _};
use flag_ranges::table::{self, Row, row, run_to_exit};
use gpu_exporter::config::Args;
use test_support::apiserver::ApiServer;
use test_support::cluster::registered_node;

const ROWS: &[Row] = &[
    row("collect-interval", "GPU_EXPORTER_COLLECT_INTERVAL", "100ms to 5m", ["100ms", "5m"], ["99ms", "5m1ms"]),
    row("nvml.call-timeout", "GPU_EXPORTER_NVML_CALL_TIMEOUT", "50ms to 1m", ["50ms", "1m"], ["0s", "1m1ms"]),
    row("nvml.init-retry-max", "GPU_EXPORTER_NVML_INIT_RETRY_MAX", "1s to 1h", ["1s", "1h"], ["999ms", "1h1ms"]),
    row("shutdown-timeout", "GPU_EXPORTER_SHUTDOWN_TIMEOUT", "0s to 2m", ["0s", "2m"], ["-1s", "2m1ms"]),
    row(
        "web.header-read-timeout",
        "GPU_EXPORTER_WEB_HEADER_READ_TIMEOUT",
        "1s to 1m",
        ["1s", "1m"],
        ["999ms", "1m1ms"],
    ),
    row(
        "web.tls-handshake-timeout",
        "GPU_EXPORTER_WEB_TLS_HANDSHAKE_TIMEOUT",
        "1s to 1m",
        ["1s", "1m"],
        ["999ms", "1m1ms"],
    ),
    row("web.max-connections", "GPU_EXPORTER_WEB_MAX_CONNECTIONS", "16 to 65536", ["16", "65536"], ["15", "65537"]),
    row(
        "web.max-connections-per-ip",
        "GPU_EXPORTER_WEB_MAX_CONNECTIONS_PER_IP",
        "1 to 65536",
        ["1", "65536"],
        ["0", "65537"],
    ),
    row(
        "kubelet.refresh-interval",
        "GPU_EXPORTER_KUBELET_REFRESH_INTERVAL",
        "1s to 5m",
        ["1s", "5m"],
        ["999ms", "5m1ms"],
    ),
    row("kubelet.timeout", "GPU_EXPORTER_KUBELET_TIMEOUT", "100ms to 1m", ["100ms", "1m"], ["99ms", "1m1ms"]),
    row("health.check-interval", "CHECK_INTERVAL", "1s to 1h", ["1", "3600"], ["0", "3601"]),
    row("health.memory-error-threshold", "MEMORY_ERROR_THRESHOLD", "0 to 100000", ["0", "100000"], ["-1", "100001"]),
    row("health.temperature-threshold", "TEMPERATURE_THRESHOLD", "60 to 105", ["60", "105"], ["59", "106"]),
    row("health.slowdown-margin", "GPU_EXPORTER_HEALTH_SLOWDOWN_MARGIN", "0 to 15", ["0", "15"], ["-1", "16"]),
    row("health.retired-pages-limit", "GPU_EXPORTER_HEALTH_RETIRED_PAGES_LIMIT", "0 to 64", ["0", "64"], ["-1", "65"]),
    row(
        "health.nvlink-error-threshold",
        "GPU_EXPORTER_HEALTH_NVLINK_ERROR_THRESHOLD",
        "0 to 1000000000",
        ["0", "1000000000"],
        ["-1", "1000000001"],
    ),
    row("health.debounce-checks", "GPU_EXPORTER_HEALTH_DEBOUNCE_CHECKS", "1 to 20", ["1", "20"], ["0", "21"]),
    row("health.recovery-checks", "GPU_EXPORTER_HEALTH_RECOVERY_CHECKS", "1 to 20", ["1", "20"], ["0", "21"]),
    row("health.min-quarantine", "GPU_EXPORTER_HEALTH_MIN_QUARANTINE", "0s to 24h", ["0", "24h"], ["-1s", "86401"]),
    row(
        "health.breaker.max-fraction",
        "GPU_EXPORTER_HEALTH_BREAKER_MAX_FRACTION",
        "0 to 1",
        ["0", "1"],
        ["-0.001", "1.001"],
    ),
    row("health.breaker.max-nodes", "GPU_EXPORTER_HEALTH_BREAKER_MAX_NODES", "1 to 5000", ["1", "5000"], ["0", "5001"]),
    row(
        "health.breaker.max-gpu-fraction",
        "GPU_EXPORTER_HEALTH_BREAKER_MAX_GPU_FRACTION",
        "0 to 1",
        ["0", "1"],
        ["-0.001", "1.001"],
    ),
    row(
        "health.breaker.max-gpus",
        "GPU_EXPORTER_HEALTH_BREAKER_MAX_GPUS",
        "1 to 40000",
        ["1", "40000"],
        ["0", "40001"],
    ),
    row(
        "health.gpu-quarantine.max-fraction",
        "GPU_EXPORTER_HEALTH_GPU_QUARANTINE_MAX_FRACTION",
        "0 to 1",
        ["0", "1"],
        ["-0.001", "1.001"],
    ),
    row("health.api-attempts", "GPU_EXPORTER_HEALTH_API_ATTEMPTS", "1 to 10", ["1", "10"], ["0", "11"]),
    row("health.api-timeout", "GPU_EXPORTER_HEALTH_API_TIMEOUT", "1s to 2m", ["1s", "2m"], ["999ms", "121"]),
];

fn parse(flag: &str, value: &str) -> Result<Args, clap::Error> {
    Args::try_parse_from(["gpu-exporter".to_owned(), format!("--{flag}={value}")])
}

#[test]
fn every_duration_and_number_flag_has_a_row_and_every_row_a_flag() {
    table::check_rows_cover(&Args::command(), ROWS);
    Args::try_parse_from(["gpu-exporter"]).expect("every default is inside its range");
}

#[test]
fn every_range_is_in_the_docs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for row in ROWS {
        // The health loop's flags in docs/health.md, the others in the README.
        let (file, start) = if row.flag.starts_with("health.") {
            ("docs/health.md", format!("| `--{}` | `{}` | ", row.flag, row.env))
        } else {
            ("README.md", format!("| `--{}` | `{}` | {} |", row.flag, row.env, row.range))
        };
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let line = text.lines().find(|l| l.starts_with(&start));
        let line = line.unwrap_or_else(|| panic!("{file} has no row starting {start}"));
        assert!(
            line.contains(&format!("| {}", row.range)),
            "{file}: the row of --{} lacks {}: {line}",
            row.flag,
            row.range
        );
    }
}

#[test]
fn each_bound_is_accepted_and_just_outside_is_refused_naming_flag_variable_and_range() {
    table::check_bounds(ROWS, parse);
}

#[test]
fn out_of_range_values_from_the_environment_stop_the_binary_naming_flag_variable_and_range() {
    table::check_refused_from_env(ROWS, |row, value| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"));
        // Nothing else from the test's environment; should the value be accepted, the
        // exporter starts on a free loopback port and is killed by run_to_exit.
        command
            .env_clear()
            .env(row.env, value)
            .env("GPU_EXPORTER_WEB_LISTEN_ADDRESS", "127.0.0.1:0")
            .env("GPU_EXPORTER_KUBERNETES_API", "off")
            .env("KUBECONFIG", "/nonexistent/kubeconfig");
        command
    });
}

// ---- no API request after a refusal -----------------------------------------------------

/// The exporter on a one-GPU simulated node, the pod watch and the health loop both
/// pointed at `kubeconfig`, plus `extra` arguments and environment.
fn exporter_command(
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let scenario = common::write_scenario(dir, "node.yaml", "gpus: [{model: H100-SXM5-80GB}]\n");
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"));
    command
        .arg("--nvml-library")
        .arg(common::fake_library())
        .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--node-name", "test-node"])
        .args(["--collect-interval", "200ms", "--nvml.call-timeout", "100ms", "--health.check-interval", "1"])
        .args(["--health.namespace", "gpu-telemetry"])
        .args(args)
        .env_remove("NODE_NAME")
        .env_remove("POD_NAMESPACE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("GPU_EXPORTER_KUBERNETES_API", "auto")
        .env("KUBECONFIG", kubeconfig)
        .env("FAKE_NVML_SCENARIO", scenario);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// A refused command line: arguments, environment, what the message must say.
type Refusal = (&'static [&'static str], &'static [(&'static str, &'static str)], &'static [&'static str]);

#[test]
fn a_refused_setting_makes_no_api_request() {
    let dir = tempfile::tempdir().unwrap();

    // The control: with valid settings the same command does talk to the API server, so
    // silence below is the refusal's doing, not a kubeconfig that leads nowhere.
    let control = ApiServer::open().run();
    control.add_node(registered_node("test-node"));
    let config = control.kubeconfig(dir.path());
    let exporter = common::spawn(exporter_command(dir.path(), &config, &[], &[]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while control.requests().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!control.requests().is_empty(), "the valid exporter never reached the API; logs:\n{}", exporter.logs());
    drop(exporter);

    let api = ApiServer::open().run();
    api.add_node(registered_node("test-node"));
    let config = api.kubeconfig(dir.path());
    let cases: [Refusal; 5] = [
        // Out of range, from the original deployment's variable.
        (
            &[],
            &[("TEMPERATURE_THRESHOLD", "500")],
            &["--health.temperature-threshold", "TEMPERATURE_THRESHOLD", "60 to 105"],
        ),
        (&[], &[("GPU_EXPORTER_HEALTH_DEBOUNCE_CHECKS", "0")], &["--health.debounce-checks", "1 to 20"]),
        // Refused by the settings check after parsing.
        (&["--health.domain", "Not A Domain"], &[], &["--health.domain \"Not A Domain\""]),
        // A value that is not one of a flag's choices.
        (
            &["--health.gpu-quarantine.effect", "PreferNoSchedule"],
            &[],
            &["--health.gpu-quarantine.effect", "NoSchedule", "NoExecute"],
        ),
        // A cross-check between two flags.
        (
            &["--kubelet.refresh-interval", "2s", "--kubelet.timeout", "2s"],
            &[],
            &["--kubelet.timeout (GPU_EXPORTER_KUBELET_TIMEOUT) 2s must be shorter than --kubelet.refresh-interval"],
        ),
    ];
    for (args, env, expected) in cases {
        let (code, stderr) = run_to_exit(exporter_command(dir.path(), &config, args, env), Duration::from_secs(20));
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        for part in expected {
            assert!(stderr.contains(part), "{args:?} {env:?}: the refusal lacks {part:?}: {stderr}");
        }
        let seen: Vec<String> = api.requests().iter().map(|r| r.describe()).collect();
        assert!(seen.is_empty(), "{args:?} {env:?}: API requests after a refusal: {seen:#?}");
    }
}
