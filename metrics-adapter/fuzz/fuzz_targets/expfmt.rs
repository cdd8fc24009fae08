//! Fuzzes the exposition parser and everything built from its output: parsing under
//! default and tiny limits, in both formats, then the direct source's report and snapshot.
#![no_main]

use exposition_parser::{Format, Limits, parse};
use gpu_metrics_adapter::selector::Selector;
use gpu_metrics_adapter::source::direct::model::{FAMILIES, GpuMetric, Names, Report, Snapshot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
                }
            }
        }
    }
    if let Ok(samples) = parse(data, Format::PrometheusText, &Limits::default(), |n| FAMILIES.contains(&n)) {
        let report = Report::from_samples(&samples, 0);
        let snap = Snapshot::build([&report]);
        for m in GpuMetric::ALL {
            let _ = snap.pods("ns", Names::All, m, &Selector::everything(), 0);
            let _ = snap.nodes(Names::All, m, &Selector::everything(), 0);
        }
    }
});
