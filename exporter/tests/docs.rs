//! `docs/metrics.md` documents exactly the families the exporter defines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpu_exporter::render::families::ALL;

#[test]
fn metrics_doc_lists_every_family_and_nothing_else() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).unwrap();
    let documented: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect();
    let mut defined: Vec<String> = ALL.iter().map(|f| f.sample_name()).collect();
    let mut sorted_doc = documented.clone();
    sorted_doc.sort();
    defined.sort();
    assert_eq!(sorted_doc, defined);
    for family in ALL {
        let row = doc.lines().find(|l| l.starts_with(&format!("| `{}`", family.sample_name()))).unwrap();
        let kind = row.split('|').nth(2).unwrap().trim();
        let expected = match family.kind {
            gpu_exporter::exposition::Kind::Gauge => "gauge",
            gpu_exporter::exposition::Kind::Counter | gpu_exporter::exposition::Kind::BareCounter => "counter",
            gpu_exporter::exposition::Kind::Info => "info",
        };
        assert_eq!(kind, expected, "type of {}", family.sample_name());
    }
}
