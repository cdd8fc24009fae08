//! PID to pod and container through `<procfs>/<pid>/cgroup`, cached by PID and start time.
//!
//! NVML reports host PIDs, so `--path.procfs` must be the host's `/proc` (the DaemonSet
//! mounts it, or runs with `hostPID`). Each cycle reads `<pid>/stat` for the process's
//! start time (field 22, in clock ticks since boot): while it is unchanged the cached
//! owner is reused; a changed start time means the PID was reused by another process,
//! and its cgroup file is read again, so a recycled PID is never charged to the pod that
//! had it before. A process that exits between NVML's list and this read has no
//! `<pid>` directory any more: it is reported as [`PidOwner::Exited`], quietly, since on
//! a busy node that is normal. PIDs not asked about in a cycle leave the cache.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::cgroup::{CgroupOwner, parse_cgroup_file};

/// Why a PID could not be read; only used inside this module, callers get [`PidOwner`].
#[derive(Debug, thiserror::Error)]
pub enum ProcfsError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: no start time in the stat line")]
    Stat(PathBuf),
}

pub type Result<T, E = ProcfsError> = std::result::Result<T, E>;

/// What `/proc` says about a GPU process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidOwner {
    /// In a pod's cgroup.
    Pod(CgroupOwner),
    /// Alive, but not in any pod (a host process, or a path hidden by a cgroup namespace).
    NotInPod,
    /// Gone from `/proc` (it exited after NVML listed it).
    Exited,
    /// `/proc` could not be read for another reason (permissions, a missing mount).
    Unreadable,
}

#[derive(Debug, Clone)]
struct Entry {
    start_ticks: u64,
    owner: PidOwner,
}

/// Reads and caches PID owners under one procfs root.
#[derive(Debug)]
pub struct ProcReader {
    root: PathBuf,
    cache: HashMap<u32, Entry>,
    /// Whether a read failure other than "exited" was logged already.
    warned: bool,
}

impl ProcReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProcReader { root: root.into(), cache: HashMap::new(), warned: false }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Owners of `pids`; the cache keeps only these PIDs afterwards.
    pub fn owners(&mut self, pids: impl IntoIterator<Item = u32>) -> HashMap<u32, PidOwner> {
        let mut out = HashMap::new();
        for pid in pids {
            if out.contains_key(&pid) {
                continue;
            }
            let owner = self.owner(pid);
            out.insert(pid, owner);
        }
        self.cache.retain(|pid, _| out.contains_key(pid));
        out
    }

    fn owner(&mut self, pid: u32) -> PidOwner {
        let start_ticks = match read_start_ticks(&self.root, pid) {
            Ok(t) => t,
            Err(e) => return self.failure(pid, &e),
        };
        if let Some(entry) = self.cache.get(&pid).filter(|e| e.start_ticks == start_ticks) {
            return entry.owner.clone();
        }
        let path = self.root.join(pid.to_string()).join("cgroup");
        let owner = match std::fs::read_to_string(&path) {
            Ok(text) => parse_cgroup_file(&text).map_or(PidOwner::NotInPod, PidOwner::Pod),
            Err(source) => return self.failure(pid, &ProcfsError::Read { path, source }),
        };
        self.cache.insert(pid, Entry { start_ticks, owner: owner.clone() });
        owner
    }

    fn failure(&mut self, pid: u32, error: &ProcfsError) -> PidOwner {
        self.cache.remove(&pid);
        if exited(error) {
            return PidOwner::Exited;
        }
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                procfs = %self.root.display(),
                %error,
                "cannot read GPU processes' cgroups; is the host /proc mounted at --path.procfs? (logged once)"
            );
        }
        PidOwner::Unreadable
    }
}

fn exited(error: &ProcfsError) -> bool {
    match error {
        ProcfsError::Read { source, .. } => {
            // ESRCH: the process died while its file was open.
            matches!(source.kind(), ErrorKind::NotFound) || source.raw_os_error() == Some(3)
        }
        // A stat line cut short: the process was being torn down.
        ProcfsError::Stat(_) => true,
    }
}

/// Field 22 of `<root>/<pid>/stat`. The command name (field 2) is in parentheses and may
/// hold spaces and parentheses itself, so fields are counted after the last `)`.
fn read_start_ticks(root: &Path, pid: u32) -> Result<u64> {
    let path = root.join(pid.to_string()).join("stat");
    let text = std::fs::read_to_string(&path).map_err(|source| ProcfsError::Read { path: path.clone(), source })?;
    parse_start_ticks(&text).ok_or(ProcfsError::Stat(path))
}

/// The start time from a stat line.
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the command: field 3 (state) is the first; start time is field 22.
    after.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50";
    const CID: &str = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";

    fn stat_line(pid: u32, comm: &str, start: u64) -> String {
        format!(
            "{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 {start} 123456789 2000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0\n"
        )
    }

    fn write_proc(root: &Path, pid: u32, start: u64, cgroup: &str) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), stat_line(pid, "python3", start)).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
    }

    #[test]
    fn start_time_survives_odd_command_names() {
        assert_eq!(parse_start_ticks(&stat_line(7, "a) b (c", 987654)), Some(987654));
        assert_eq!(parse_start_ticks(&stat_line(7, "tritonserver", 42)), Some(42));
        assert_eq!(parse_start_ticks("7 (x) S 1 2"), None);
        assert_eq!(parse_start_ticks("no parenthesis"), None);
    }

    #[test]
    fn owners_are_cached_and_a_reused_pid_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let pod = format!("0::/kubepods/pod{UID}/{CID}\n");
        write_proc(dir.path(), 4242, 1000, &pod);
        write_proc(dir.path(), 900, 10, "0::/system.slice/sshd.service\n");
        let mut reader = ProcReader::new(dir.path());
        let first = reader.owners([4242, 900, 4242]);
        let expected = PidOwner::Pod(CgroupOwner { pod_uid: UID.into(), container_id: Some(CID.into()) });
        assert_eq!(first[&4242], expected);
        assert_eq!(first[&900], PidOwner::NotInPod);

        // Same start time: the cgroup file is not read again (its new content is ignored).
        std::fs::write(dir.path().join("4242/cgroup"), "0::/user.slice\n").unwrap();
        assert_eq!(reader.owners([4242])[&4242], expected);

        // A new process with the same PID: read again.
        std::fs::write(dir.path().join("4242/stat"), stat_line(4242, "bash", 5000)).unwrap();
        assert_eq!(reader.owners([4242])[&4242], PidOwner::NotInPod);
    }

    #[test]
    fn a_pid_that_exited_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        write_proc(dir.path(), 4242, 1000, &format!("0::/kubepods/pod{UID}/{CID}\n"));
        let mut reader = ProcReader::new(dir.path());
        assert!(matches!(reader.owners([4242])[&4242], PidOwner::Pod(_)));
        std::fs::remove_dir_all(dir.path().join("4242")).unwrap();
        let again = reader.owners([4242, 31337]);
        assert_eq!(again[&4242], PidOwner::Exited);
        assert_eq!(again[&31337], PidOwner::Exited);
        assert!(!reader.warned, "an exited process is not worth a warning");
        assert!(reader.cache.is_empty());
    }

    #[test]
    fn a_process_torn_down_between_stat_and_cgroup_reads_is_exited() {
        let dir = tempfile::tempdir().unwrap();
        let pid_dir = dir.path().join("77");
        std::fs::create_dir_all(&pid_dir).unwrap();
        std::fs::write(pid_dir.join("stat"), stat_line(77, "x", 5)).unwrap();
        // No cgroup file: the process went away after its stat was read.
        let mut reader = ProcReader::new(dir.path());
        assert_eq!(reader.owners([77])[&77], PidOwner::Exited);
        // A truncated stat line reads the same way.
        std::fs::write(pid_dir.join("stat"), "77 (x) Z").unwrap();
        assert_eq!(reader.owners([77])[&77], PidOwner::Exited);
    }

    #[test]
    fn unreadable_procfs_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        // A file where a directory should be: reading <root>/<pid>/stat fails with ENOTDIR.
        let root = dir.path().join("not-a-dir");
        std::fs::write(&root, "x").unwrap();
        let mut reader = ProcReader::new(&root);
        assert_eq!(reader.owners([5])[&5], PidOwner::Unreadable);
        assert!(reader.warned);
    }
}
