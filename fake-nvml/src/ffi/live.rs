//! Live scenarios: with `FAKE_NVML_LIVE=1` the scenario file is read again when it
//! changes, so that a simulated node's pods and load can come and go while the exporter
//! runs (fake-kubelet's `join` mode rewrites it as pods are bound and deleted).
//!
//! A changed file is looked at no more often than every [`CHECK_EVERY`], from whichever
//! NVML call comes first. The GPUs must stay the same (the same UUIDs in the same
//! order): a driver never renumbers GPUs under a running process, and NVML handles are
//! indexes into them. What carries over is what a real GPU keeps: the scenario clock and
//! each GPU's energy counter. A file that does not parse, or that changes the GPUs, is
//! refused on stderr and the node goes on as it was. An accepted file rewrites the host
//! tree under `FAKE_NVML_HOST_ROOT` ([`crate::host`]), where that is set.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Loaded;
use crate::node::Node;
use crate::scenario::Scenario;

/// The shortest time between two looks at the file.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// What identifies one version of the file: modification time, size and inode (a
/// rename over it gives a new inode even within one mtime tick).
type Stamp = (i64, i64, u64, u64);

/// The file being followed and what was last seen of it.
#[derive(Debug)]
pub struct Live {
    path: PathBuf,
    seen: Mutex<(Option<Stamp>, Instant)>,
}

impl Live {
    /// `Some` when `FAKE_NVML_LIVE=1`, following `path`.
    pub fn from_env(path: Option<PathBuf>) -> Option<Arc<Live>> {
        let on = std::env::var("FAKE_NVML_LIVE").is_ok_and(|v| v == "1");
        let path = path.filter(|_| on)?;
        let stamp = stamp(&path);
        Some(Arc::new(Live { path, seen: Mutex::new((stamp, Instant::now())) }))
    }

    /// A new state when the file changed since the last look and reads as the same
    /// GPUs; `None` otherwise (also while another thread is looking).
    pub fn reload(self: &Arc<Self>, current: &Loaded) -> Option<Loaded> {
        let mut seen = self.seen.try_lock().ok()?;
        if seen.1.elapsed() < CHECK_EVERY {
            return None;
        }
        seen.1 = Instant::now();
        let now = stamp(&self.path);
        if now.is_none() || now == seen.0 {
            return None;
        }
        seen.0 = now;
        let scenario = match Scenario::load(&self.path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("fake-nvml: the changed scenario is refused, the node goes on as it was: {e}");
                return None;
            }
        };
        let before: Vec<&str> = current.node.scenario.gpus.iter().map(|g| g.uuid.as_str()).collect();
        let after: Vec<&str> = scenario.gpus.iter().map(|g| g.uuid.as_str()).collect();
        if before != after {
            eprintln!(
                "fake-nvml: {}: the changed scenario has other GPUs ({} instead of {}); refused, the node goes on \
                 as it was",
                self.path.display(),
                after.join(","),
                before.join(",")
            );
            return None;
        }
        if let Err(e) = crate::host::write_from_env(&scenario) {
            eprintln!("fake-nvml: the changed scenario's host tree could not be written: {e}");
        }
        let node = Node::new(scenario);
        node.carry_energy_from(&current.node, current.clock.now());
        Some(Loaded { node, clock: current.clock.clone(), live: Some(Arc::clone(self)) })
    }
}

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.mtime(), m.mtime_nsec(), m.size(), m.ino()))
}
