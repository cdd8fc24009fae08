//! The health flags at the command line: the original deployment's variable names are
//! read, and a wrong value is refused at start with exit code 2 and the flag's name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-exporter"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn the_original_variable_names_are_read() {
    let (code, stderr) = run(&[], &[("CHECK_INTERVAL", "0")]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--health.check-interval") && stderr.contains("CHECK_INTERVAL"), "{stderr}");
    assert!(stderr.contains("0 is outside the valid range 1s to 1h"), "{stderr}");
    let (code, stderr) = run(&[], &[("MEMORY_ERROR_THRESHOLD", "ten")]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--health.memory-error-threshold"), "{stderr}");
    let (code, stderr) = run(&[], &[("TEMPERATURE_THRESHOLD", "hot")]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--health.temperature-threshold"), "{stderr}");
    let (code, stderr) = run(&[], &[("AUTO_CORDON", "maybe")]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--health.auto-cordon"), "{stderr}");
}

#[test]
fn wrong_health_values_are_refused_by_name() {
    let (code, stderr) = run(&["--health.xid-classes", "79=panic"], &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--health.xid-classes \"79=panic\": class \"panic\""), "{stderr}");
    let (code, stderr) = run(&["--health.breaker.max-fraction", "1.5"], &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("'1.5' for '--health.breaker.max-fraction"), "{stderr}");
    assert!(stderr.contains("outside the valid range 0 to 1"), "{stderr}");
    // Every range, flag by flag: tests/cli_ranges.rs.
}
