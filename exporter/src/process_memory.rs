//! Process-wide memory settings: malloc tunables applied once at start, before any
//! thread exists, and the release of the start-up code pages after the first cycle.
//!
//! glibc gives every thread that allocates its own malloc arena. The exporter has a
//! reading thread per GPU plus the collector and event threads, and each arena keeps
//! its own touched pages: on the busy node benchmark (8 GPUs, 12 threads) the arenas
//! and stacks held 2.11 MiB, and with one arena 0.24 MiB, the heap growing from 1.33 to
//! 2.43 MiB: 0.8 MiB less resident (`cargo bench -p gpu-exporter --bench busy_node`,
//! docs/benchmarks.md). The threads allocate little per cycle, so one lock costs nothing
//! measurable.
//!
//! The rendered expositions (about 260 KB each on that node) are replaced every cycle.
//! glibc raises its mmap threshold to the largest block freed, so after the first cycle
//! they come from the heap and leave it fragmented. A fixed 64 KiB threshold keeps every
//! large buffer in its own mapping, returned whole when freed: the heap went from 2.43
//! to 1.73 MiB for 0.26 MiB more in live mappings.
//!
//! An operator's own `MALLOC_ARENA_MAX` / `MALLOC_MMAP_THRESHOLD_` wins over these
//! defaults.
//!
//! Code pages: the kernel maps a file's pages around each fault in 64 KiB windows, so the
//! start-up code (flags, YAML, kubeconfig, loading NVML) and its neighbours stay mapped
//! for the life of the process although they never run again. Once the first
//! collection cycle is done, [`release_code_pages`] unmaps the executable's own code
//! (`MADV_DONTNEED`: the pages stay in the page cache, the steady state faults back
//! what it runs at the cost of a minor fault each). With the code grouped by when it
//! runs (`exporter/link/text-order.ld`) the binary's resident code on the busy node
//! went from 3.6 to 2.8 MiB (docs/benchmarks.md, "Exporter memory"). The pages stay in
//! the page cache and in the container's cgroup until the kernel reclaims them: RSS and
//! the working set drop, the cgroup's page cache does not.

/// Sets glibc's malloc tunables as described above, each unless its environment
/// variable is set. No effect on other C libraries.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        set_unless_overridden("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 1);
        set_unless_overridden("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_unless_overridden(variable: &str, parameter: libc::c_int, value: libc::c_int) {
    if std::env::var_os(variable).is_some() {
        return;
    }
    // SAFETY: mallopt only changes allocator tunables; it is called from main before any
    // other thread is started, with parameters glibc documents and positive values.
    // A refusal (return 0) leaves glibc's default, which only costs memory.
    let _accepted = unsafe { libc::mallopt(parameter, value) };
}

/// Unmaps the executable's own code pages (its read-and-execute mappings in
/// `/proc/self/maps`) so that only the code that runs from now on is faulted back in.
/// Returns how many bytes of mappings were released. Linux only; elsewhere, or with
/// `GPU_EXPORTER_RELEASE_STARTUP_CODE=off`, it releases nothing.
pub fn release_code_pages() -> std::io::Result<usize> {
    if std::env::var("GPU_EXPORTER_RELEASE_STARTUP_CODE").as_deref() == Ok("off") {
        return Ok(0);
    }
    #[cfg(target_os = "linux")]
    {
        let executable = std::fs::read_link("/proc/self/exe")?;
        let maps = std::fs::read_to_string("/proc/self/maps")?;
        let mut released = 0;
        for (start, end) in code_mappings(&maps, &executable.to_string_lossy()) {
            // SAFETY: the range is a whole mapping of our own executable that is readable
            // and executable but not writable, so it holds no private changes to lose:
            // MADV_DONTNEED only drops the page-table entries, and the next access reads
            // the same bytes from the page cache (or the file), as after reclaim.
            let status = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
            if status != 0 {
                return Err(std::io::Error::last_os_error());
            }
            released += end - start;
        }
        Ok(released)
    }
    #[cfg(not(target_os = "linux"))]
    Ok(0)
}

/// The `(start, end)` of each `r-x` mapping of `path` in a `/proc/<pid>/maps` text.
fn code_mappings(maps: &str, path: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let permissions = fields.next()?;
            let mapped = fields.nth(3)?;
            if !permissions.starts_with("r-x") || mapped != path {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some((usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_executables_own_code_mappings_are_chosen() {
        let maps = "\
55d0c0000000-55d0c0100000 r--p 00000000 fd:01 42 /usr/bin/gpu-exporter
55d0c0100000-55d0c0700000 r-xp 00100000 fd:01 42 /usr/bin/gpu-exporter
55d0c0700000-55d0c0800000 rw-p 00700000 fd:01 42 /usr/bin/gpu-exporter
7f0000000000-7f0000100000 r-xp 00000000 fd:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000201000 r-xp 00000000 00:00 0
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(code_mappings(maps, "/usr/bin/gpu-exporter"), vec![(0x55d0c0100000, 0x55d0c0700000)]);
        assert!(code_mappings("garbage\n\n", "/usr/bin/gpu-exporter").is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn releasing_our_own_code_leaves_the_process_running() {
        let released = release_code_pages().expect("madvise on our own code");
        assert!(released > 0, "the test binary has code mappings");
        // The code runs on after the release: it reads its own mappings again.
        let executable = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let again: usize = code_mappings(&maps, &executable.to_string_lossy()).iter().map(|(s, e)| e - s).sum();
        assert_eq!(again, released);
    }
}
