//! `--metrics.naming dcgm-exporter` serves dcgm-exporter 4.8's default counters with the
//! names, types and help strings of its `etc/default-counters.csv` (a copy of the file
//! at tag 4.5.3-4.8.2 is `tests/fixtures/dcgm-exporter/default-counters.csv`), and every
//! active row of that file is either served or named here as not served, with the reason
//! docs/replacing-dcgm-exporter.md gives.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use gpu_exporter::exposition::Kind;
use gpu_exporter::render::dcgm::fields::FIELDS;

/// Active rows we do not serve as a family: the label row, and readings we do not take.
const NOT_SERVED: &[&str] = &["DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DRIVER_VERSION"];

/// (name, type, help) of each row that is not a comment.
fn rows() -> Vec<(String, String, String)> {
    let path = common::repo_root().join("exporter/tests/fixtures/dcgm-exporter/default-counters.csv");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut parts = l.splitn(3, ',').map(|p| p.trim().to_string());
            (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap())
        })
        .collect()
}

#[test]
fn every_served_field_is_the_files_and_every_active_row_is_accounted_for() {
    let rows = rows();
    for field in FIELDS {
        let family = &field.family;
        let (_, kind, help) = rows.iter().find(|(n, _, _)| n == family.name).unwrap_or_else(|| {
            panic!("{} is not an active row of default-counters.csv", family.name);
        });
        let ours = match family.kind {
            Kind::Gauge => "gauge",
            Kind::BareCounter => "counter",
            other => panic!("{}: {other:?} is no type of the file", family.name),
        };
        assert_eq!(ours, kind, "type of {}", family.name);
        assert_eq!(family.help, help, "help of {}", family.name);
    }
    let served: Vec<&str> = FIELDS.iter().map(|f| f.family.name).collect();
    for (name, _, _) in &rows {
        assert!(
            served.contains(&name.as_str()) != NOT_SERVED.contains(&name.as_str()),
            "{name}: served, or listed as not served, exactly once"
        );
    }
    let order: Vec<&str> = rows.iter().map(|(n, _, _)| n.as_str()).filter(|n| served.contains(n)).collect();
    assert_eq!(order, served, "served in the file's order");
}

/// docs/replacing-dcgm-exporter.md names every served field with its native twin, every
/// field left out, and only deploy paths that exist.
#[test]
fn the_replacing_guide_covers_every_field_and_names_real_paths() {
    let root = common::repo_root();
    let guide = std::fs::read_to_string(root.join("docs/replacing-dcgm-exporter.md")).unwrap();
    let table: Vec<&str> = guide.lines().filter(|l| l.starts_with("| `DCGM_")).collect();
    for field in FIELDS {
        let row = table.iter().find(|l| l.contains(&format!("`{}`", field.family.name)));
        let row = row.unwrap_or_else(|| panic!("{} has no row in the guide's table", field.family.name));
        assert!(row.contains("`gpu_"), "{}: its row names no native twin: {row}", field.family.name);
    }
    for name in NOT_SERVED {
        assert!(guide.contains(&format!("`{name}`")), "{name} is not served and the guide does not say so");
    }
    let paths: Vec<&str> = guide
        .split('`')
        .filter(|p| {
            p.starts_with("deploy/")
                || p.starts_with("docs/")
                || p.starts_with("exporter/")
                || p.starts_with("metrics-adapter/")
        })
        .collect();
    assert!(paths.contains(&"deploy/components/dcgm-exporter-names"), "{paths:?}");
    for path in paths {
        let path = path.split_whitespace().next().unwrap();
        assert!(root.join(path).exists(), "the guide names {path}, which does not exist");
    }
}

/// docs/replacing-dcgm-exporter.md has the release table: a row starting at every
/// release whose page differs from the one before it, and the flag's range.
#[test]
fn the_replacing_guide_has_a_row_for_every_release_that_changed_the_page() {
    use gpu_exporter::render::dcgm::version::{NEWEST, OLDEST, RELEASES};
    let guide = std::fs::read_to_string(common::repo_root().join("docs/replacing-dcgm-exporter.md")).unwrap();
    let rows: Vec<&str> = guide.lines().filter(|l| l.starts_with("| ")).collect();
    let mut changed = 0;
    for pair in RELEASES.windows(2) {
        let ((_, before), (dcgm, after)) = (pair[0], pair[1]);
        if before.shape() == after.shape() {
            continue;
        }
        changed += 1;
        let starts = [format!("| {after} (`{dcgm}-{after}`)"), format!("| **{after}** (`{dcgm}-{after}`)")];
        assert!(
            rows.iter().any(|row| starts.iter().any(|s| row.starts_with(s.as_str()))),
            "the guide's release table has no row starting at {dcgm}-{after}"
        );
    }
    assert_eq!(changed, 7, "releases that changed the page we serve");
    assert!(guide.contains(&format!("**{OLDEST} to {NEWEST}**")), "the guide states the range");
}
