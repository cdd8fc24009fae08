//! Scenario time: seconds since the simulated node started (the first `nvmlInit`).
//!
//! Three modes, chosen by environment variables read at `nvmlInit`:
//! - `FAKE_NVML_FROZEN_AT=S`: time stands still at S (golden-file tests).
//! - `FAKE_NVML_CLOCK_FILE=PATH`: time is the number written in PATH, read on every
//!   call, so a test can step a run through a fault timeline.
//! - otherwise real time, optionally shifted by `FAKE_NVML_START_AT=S` and scaled by
//!   `FAKE_NVML_SPEED=X`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub enum Clock {
    Frozen(f64),
    File(PathBuf),
    Real { started: Instant, start_at: f64, speed: f64 },
}

impl Clock {
    /// Builds the clock from the environment; a malformed variable is an error naming it.
    pub fn from_env() -> Result<Self, String> {
        let number = |name: &str| -> Result<Option<f64>, String> {
            match std::env::var(name) {
                Ok(text) => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(Some)
                    .ok_or_else(|| format!("{name}={text:?} is not a number >= 0")),
                Err(_) => Ok(None),
            }
        };
        if let Some(at) = number("FAKE_NVML_FROZEN_AT")? {
            return Ok(Clock::Frozen(at));
        }
        if let Some(path) = std::env::var_os("FAKE_NVML_CLOCK_FILE") {
            return Ok(Clock::File(path.into()));
        }
        let speed = number("FAKE_NVML_SPEED")?.unwrap_or(1.0);
        if speed == 0.0 {
            return Err("FAKE_NVML_SPEED=0 would stop time; use FAKE_NVML_FROZEN_AT".into());
        }
        Ok(Clock::Real { started: Instant::now(), start_at: number("FAKE_NVML_START_AT")?.unwrap_or(0.0), speed })
    }

    /// The current scenario time in seconds.
    pub fn now(&self) -> f64 {
        match self {
            Clock::Frozen(at) => *at,
            // A missing or half-written file reads as time 0 rather than failing the call.
            Clock::File(path) => std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .unwrap_or(0.0),
            Clock::Real { started, start_at, speed } => start_at + started.elapsed().as_secs_f64() * speed,
        }
    }

    /// Real time that corresponds to `seconds` of scenario time (for sleeping).
    pub fn real_duration(&self, seconds: f64) -> Duration {
        let scaled = match self {
            Clock::Real { speed, .. } => seconds / speed,
            _ => seconds,
        };
        Duration::from_secs_f64(scaled.clamp(0.0, 3600.0))
    }
}
