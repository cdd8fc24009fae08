//! Replays the fuzz corpus (`fuzz/corpus/`) through the same checks as the fuzz targets,
//! plus a few thousand deterministic mutations of each seed, so every `cargo test` run
//! exercises the parsers on hostile input without needing nightly or libFuzzer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use exposition_parser::{Format, Limits, parse};
use gpu_metrics_adapter::selector::Selector;
use gpu_metrics_adapter::source::direct::model::{FAMILIES, GpuMetric, Names, Report, Snapshot};

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(name);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out
}

/// The expfmt fuzz target's body. Returns whether the default-limits parse succeeded.
fn check_expfmt(data: &[u8]) -> bool {
    let tiny = Limits {
        max_bytes: 4096,
        max_line_bytes: 512,
        max_samples: 16,
        max_labels: 4,
        max_label_value_bytes: 32,
        max_families: 4,
    };
    for format in [Format::PrometheusText, Format::OpenMetrics] {
        for limits in [Limits::default(), tiny] {
            if let Ok(samples) = parse(data, format, &limits, |_| true) {
                assert!(samples.len() <= limits.max_samples);
                for s in &samples {
                    assert!(!s.name.is_empty());
                    assert!(s.labels.len() <= limits.max_labels);
                    let mut keys: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
                    keys.sort_unstable();
                    keys.dedup();
                    assert_eq!(keys.len(), s.labels.len(), "duplicate labels accepted");
                }
            }
        }
    }
    match parse(data, Format::PrometheusText, &Limits::default(), |n| FAMILIES.contains(&n)) {
        Ok(samples) => {
            let report = Report::from_samples(&samples, 0);
            let snap = Snapshot::build([&report]);
            for m in GpuMetric::ALL {
                for v in snap.pods("ns", Names::All, m, &Selector::everything(), 0) {
                    assert!(v.value.v.is_finite(), "non-finite value served");
                }
                for v in snap.nodes(Names::All, m, &Selector::everything(), 0) {
                    assert!(v.value.v.is_finite(), "non-finite value served");
                }
            }
            true
        }
        Err(_) => false,
    }
}

/// The selector fuzz target's body.
fn check_selector(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = Selector::parse(text) {
        let printed = sel.to_string();
        let again = Selector::parse(&printed).unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}: {e}"));
        assert_eq!(sel, again, "{text:?}");
        let _ = sel.to_label_selector();
    }
}

fn mutate(rng: &mut fastrand::Rng, seed: &[u8]) -> Vec<u8> {
    const SPECIAL: &[u8] = b"{}\",=\\\n #!()<>\t\r0.eE+-";
    let mut v = seed.to_vec();
    for _ in 0..rng.usize(1..6) {
        match rng.u8(0..6) {
            0 if !v.is_empty() => {
                let i = rng.usize(0..v.len());
                v[i] = rng.u8(..);
            }
            1 => {
                let i = rng.usize(0..=v.len());
                v.insert(i, SPECIAL[rng.usize(0..SPECIAL.len())]);
            }
            2 if !v.is_empty() => {
                let i = rng.usize(0..v.len());
                v.remove(i);
            }
            3 if !v.is_empty() => {
                let cut = rng.usize(0..v.len());
                v.truncate(cut);
            }
            4 if !v.is_empty() => {
                let a = rng.usize(0..v.len());
                let b = rng.usize(a..=v.len().min(a + 64));
                let chunk = v[a..b].to_vec();
                let at = rng.usize(0..=v.len());
                v.splice(at..at, chunk);
            }
            _ => v.extend_from_slice(b"\ngpu_utilization{namespace=\"ns\",pod=\"p\",uuid=\"u\",node=\"n\"} 1e308\n"),
        }
    }
    v
}

#[test]
fn expfmt_corpus_replays_without_panics() {
    let seeds = corpus("expfmt");
    let parsed: Vec<(&str, bool)> = seeds.iter().map(|(n, d)| (n.as_str(), check_expfmt(d))).collect();
    // The corpus holds both valid and invalid inputs, and the fixtures parse.
    assert!(parsed.iter().any(|(_, ok)| *ok) && parsed.iter().any(|(_, ok)| !*ok), "{parsed:?}");
    assert!(parsed.iter().filter(|(n, _)| n.ends_with(".prom")).all(|(_, ok)| *ok), "{parsed:?}");
    let mut rng = fastrand::Rng::with_seed(0x6770_755f);
    for (_, seed) in &seeds {
        for _ in 0..300 {
            check_expfmt(&mutate(&mut rng, seed));
        }
    }
}

#[test]
fn selector_corpus_replays_and_round_trips() {
    let seeds = corpus("selector");
    for (_, d) in &seeds {
        check_selector(d);
    }
    let mut rng = fastrand::Rng::with_seed(0x5e1e_c708);
    for (_, seed) in &seeds {
        for _ in 0..2000 {
            check_selector(&mutate(&mut rng, seed));
        }
    }
}
