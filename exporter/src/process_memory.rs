//! Process-wide memory settings applied once at start, before any thread exists.
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
