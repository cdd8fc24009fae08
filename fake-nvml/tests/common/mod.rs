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
