//! The exporter's code is linked grouped by when it runs (`exporter/link/text-order.ld`,
//! written by `scripts/gen-text-order`; docs/benchmarks.md, "Exporter memory"). The
//! script's patterns name mangled symbol prefixes, so a change of mangling scheme or a
//! renamed module would make them match nothing and the memory gain vanish silently.
//! These tests read the binary Cargo built for them and fail instead.

#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const EXPORTER: &str = env!("CARGO_BIN_EXE_gpu-exporter");

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `(address, size)` of a section, from `readelf -SW`.
fn section(binary: &str, name: &str) -> Option<(u64, u64)> {
    run("readelf", &["-SW", binary]).lines().find_map(|line| {
        let fields: Vec<&str> = line.split(|c: char| c.is_whitespace() || c == ']').filter(|f| !f.is_empty()).collect();
        let at = fields.iter().position(|f| *f == name)?;
        let address = u64::from_str_radix(fields.get(at + 2)?, 16).ok()?;
        let size = u64::from_str_radix(fields.get(at + 4)?, 16).ok()?;
        Some((address, size))
    })
}

/// Addresses of the defined text symbols whose demangled name starts with `prefix`.
fn symbols(binary: &str, prefix: &str) -> Vec<u64> {
    run("nm", &["-C", "--defined-only", binary])
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let address = parts.next()?;
            let kind = parts.next()?;
            let name = parts.next()?;
            let wanted = matches!(kind, "t" | "T") && name.trim_start_matches('<').starts_with(prefix);
            wanted.then(|| u64::from_str_radix(address, 16).ok()).flatten()
        })
        .collect()
}

#[test]
fn the_linker_script_is_what_the_generator_writes() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/gen-text-order");
    let out = Command::new("python3").arg(script).arg("--check").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn each_group_places_its_crates_in_the_ordered_section() {
    let (start, size) = section(EXPORTER, ".text.ordered").expect("the exporter binary has a .text.ordered section");
    let inside = |address: u64| (start..start + size).contains(&address);
    // One crate of each group: the steady state, the health loop, the start-up code.
    for prefix in ["gpu_exporter::collect", "gpu_health::", "clap_builder::"] {
        let found = symbols(EXPORTER, prefix);
        assert!(!found.is_empty(), "no {prefix} symbols in {EXPORTER}");
        let placed = found.iter().filter(|a| inside(**a)).count();
        assert!(placed * 10 >= found.len() * 9, "{prefix}: {placed} of {} symbols in .text.ordered", found.len());
    }
    // What no group names stays in .text, after the groups.
    let (text, _) = section(EXPORTER, ".text").expect(".text");
    assert!(text >= start + size, ".text at {text:#x} should follow .text.ordered ({start:#x} + {size:#x})");
}
