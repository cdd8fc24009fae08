//! Shared by the tests that load the built library through `nvml-wrapper`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

/// The built `libfake_nvml.so`, building it first.
pub fn library() -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["build", "-p", "fake-nvml", "--lib"])
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exe = std::env::current_exe().expect("test path");
    exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("libfake_nvml.so")
}

/// A scenario on a clock the test steps: the scenario written to a temp dir, the library
/// pointed at it, the clock file at 0 s.
pub struct SteppedNode {
    /// Keeps the files alive.
    pub dir: tempfile::TempDir,
    /// Write a number of seconds here to move the scenario's time.
    pub clock: PathBuf,
}

impl SteppedNode {
    /// Writes `scenario` and sets `FAKE_NVML_SCENARIO` and `FAKE_NVML_CLOCK_FILE`.
    ///
    /// # Safety
    /// Sets process environment variables: no other thread may read or write the
    /// environment meanwhile (the callers are test binaries with a single test).
    pub unsafe fn start(scenario: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("node.yaml");
        std::fs::write(&path, scenario).expect("write scenario");
        let clock = dir.path().join("clock");
        std::fs::write(&clock, "0").expect("write clock");
        // SAFETY: the caller guarantees no other thread uses the environment.
        unsafe {
            std::env::set_var("FAKE_NVML_SCENARIO", &path);
            std::env::set_var("FAKE_NVML_CLOCK_FILE", &clock);
        }
        Self { dir, clock }
    }
}
