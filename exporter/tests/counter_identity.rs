//! Counters keep one identity while the holder of their GPU changes.
//!
//! The exporter binary runs on a simulated node (scenario time stepped through
//! `FAKE_NVML_CLOCK_FILE`) with the simulated kubelet beside it, and GPU 0 goes through:
//! held by `ai/holder` -> XID 79 -> the pod is replaced by `ai/holder-2` -> the kubelet's
//! socket goes away for longer than the exporter keeps its last list -> it comes back.
//! Every scrape along the way is kept. The test asserts that
//! - the holder really changed on the GPU's gauges and on `gpu_device_pod_info`, so the
//!   sequence exercised what it claims to;
//! - every counter series of the GPU keeps exactly one label set throughout, and is in
//!   every scrape from its first on;
//! - fed to `promtool test rules` (Debian's 2.42 and a built 3.x) as input series (one scrape per 15 s of test time,
//!   Unix-time values moved onto the test's time axis), the shipped `GPUHardwareXid`
//!   alert is active at every evaluation from the XID on, always as the same single
//!   alert, naming `ai/holder` (the pod that held the GPU when the XID happened) — so it
//!   fires exactly once — and is not active before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Exporter, Launch, set_clock, wait_for, write_scenario};
use exposition_parser::{Format, Limits, Sample};
use fake_nvml::scenario::Scenario;
use serde_json::json;
use test_support::prometheus::{Flavour, Promtool};

const GPU0: &str = "GPU-c0000000-0000-4000-8000-000000000000";

/// Two H100s; GPU 0 has every counter moving (energy from its power draw, PCIe replays,
/// ECC errors with the XID) and is held by `ai/holder`; GPU 1 is nobody's.
const SCENARIO: &str = "
gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-c0000000-0000-4000-8000-000000000000
    values: {utilization: 81, memory_used_mib: 40000, power_watts: 400}
    counters: {energy_joules: 1000000, pcie_replays: 3, ecc_corrected_aggregate: 5}
    faults: [{at_s: 10, xid: 79}, {at_s: 10, ecc_errors: {corrected: 2}}]
  - {model: H100-SXM5-80GB, uuid: GPU-c0000000-0000-4000-8000-000000000001}
pods:
  - namespace: ai
    name: holder
    containers:
      - name: main
        devices: [{resource: nvidia.com/gpu, gpu: 0}]
";

/// Counter families the GPU must have, so the identity check cannot pass on nothing.
const EXPECTED_COUNTERS: &[&str] = &[
    "gpu_energy_consumption_joules_total",
    "gpu_pcie_replays_total",
    "gpu_ecc_errors_total",
    "gpu_ecc_volatile_errors_total",
    "gpu_xid_errors_total",
];

/// Holder labels, which a counter must never carry.
const HOLDER_LABELS: &[&str] = &["namespace", "pod", "container"];

/// Test time between two kept scrapes in the promtool input.
const STEP_S: u64 = 15;

/// A parsed sample line, with the series written as PromQL reads it.
trait SeriesText {
    /// `name{a="x",b="y\"z"}`: the exposition's label escaping is PromQL's.
    fn series(&self) -> String;
}

impl SeriesText for Sample {
    fn series(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(name, value)| {
                let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                format!("{name}=\"{escaped}\"")
            })
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }
}

/// A kept scrape: when it was taken (Unix seconds) and what it said.
struct Scrape {
    at: f64,
    phase: &'static str,
    text: String,
}

impl Scrape {
    fn samples(&self) -> Vec<Sample> {
        parse(&self.text)
    }

    /// Counter family names, from the `# TYPE` lines.
    fn counters(&self) -> BTreeSet<String> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
            .map(String::from)
            .collect()
    }

    /// The pods named on GPU 0's `gpu_utilization` and `gpu_device_pod_info` series.
    fn holders(&self) -> (Vec<String>, Vec<String>) {
        let of = |family: &str| -> Vec<String> {
            self.samples()
                .into_iter()
                .filter(|s| s.name == family && s.label("uuid") == Some(GPU0))
                .map(|s| s.label("pod").unwrap_or("").to_string())
                .collect()
        };
        (of("gpu_utilization"), of("gpu_device_pod_info"))
    }
}

fn parse(text: &str) -> Vec<Sample> {
    exposition_parser::parse(text.as_bytes(), Format::PrometheusText, &Limits::default(), |_| true)
        .expect("the exporter's exposition parses")
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

struct Run {
    exporter: Exporter,
    scrapes: Vec<Scrape>,
}

impl Run {
    /// Scrapes until `check` holds and keeps that scrape (and `extra` more).
    fn keep_when(&mut self, phase: &'static str, extra: usize, check: impl Fn(&Scrape) -> bool) {
        let mut last = None;
        let found = wait_for(Duration::from_secs(20), || {
            let scrape = Scrape { at: now(), phase, text: self.exporter.metrics() };
            let done = check(&scrape);
            last = Some(scrape);
            done
        });
        let last = last.unwrap();
        assert!(found.is_some(), "{phase}: timed out; last scrape:\n{}\nlogs:\n{}", last.text, self.exporter.logs());
        self.scrapes.push(last);
        for _ in 0..extra {
            // The next scrapes after a new collection cycle, so they differ in time.
            let cycles = common::sample(&self.exporter.metrics(), "gpu_exporter_collections_total", &[]).unwrap();
            self.exporter.wait_cycles(cycles as u64 + 1);
            self.scrapes.push(Scrape { at: now(), phase, text: self.exporter.metrics() });
        }
    }
}

#[test]
fn counters_keep_one_identity_across_owner_changes_and_the_xid_alert_fires_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(dir.path(), "node.yaml", SCENARIO);
    let scenario = Scenario::load(&path).unwrap();
    let mut kubelet = fake_kubelet::start_in(&scenario, "test-node", dir.path()).unwrap();
    let clock = dir.path().join("clock");
    set_clock(&clock, 0.0);
    let at = |name: &str| dir.path().join(name).display().to_string();
    let exporter = Launch::scenario(&path, None)
        .env("FAKE_NVML_CLOCK_FILE", clock.to_str().unwrap())
        .args(&[
            "--collect-interval",
            "200ms",
            "--nvml.call-timeout",
            "150ms",
            "--label",
            "cluster=c1",
            "--kubelet.pod-resources-socket",
            &at("kubelet.sock"),
            "--kubelet.refresh-interval",
            "1s",
            "--kubelet.timeout",
            "500ms",
            "--path.procfs",
            &at("proc"),
            "--path.pod-logs",
            &at("pods"),
        ])
        .start();
    exporter.wait_ready();
    let mut run = Run { exporter, scrapes: Vec::new() };
    let holder = |pod: &str| {
        let pod = pod.to_string();
        move |s: &Scrape| s.holders() == (vec![pod.clone()], vec![pod.clone()])
    };

    // Held, then the XID (with ECC errors) while held.
    run.keep_when("held", 1, holder("holder"));
    set_clock(&clock, 11.0);
    run.keep_when("xid", 1, |s| {
        s.samples().iter().any(|x| x.name == "gpu_xid_errors_total" && x.label("xid") == Some("79"))
    });
    assert_eq!(run.scrapes.last().unwrap().holders(), (vec!["holder".into()], vec!["holder".into()]));

    // The pod is replaced: same container, same GPU, a new pod.
    let mut listing = fake_kubelet::listing::pod_resources(&scenario, "test-node");
    listing[0].name = "holder-2".into();
    kubelet.lister().set_listing(listing);
    run.keep_when("replaced", 1, holder("holder-2"));

    // The kubelet goes away: the last list is kept for a while, then dropped.
    kubelet.drop_socket();
    run.keep_when("kubelet down, list kept", 0, |s| {
        common::sample(&s.text, "gpu_exporter_pod_resources_up", &[]) == Some(0.0) && holder("holder-2")(s)
    });
    run.keep_when("kubelet down, list dropped", 1, |s| s.holders() == (vec![String::new()], vec![]));

    // And comes back.
    kubelet.restore_socket().unwrap();
    run.keep_when("kubelet back", 1, holder("holder-2"));

    let scrapes = &run.scrapes;
    let phases: Vec<&str> = scrapes.iter().map(|s| s.phase).collect();
    check_counter_identity(scrapes);
    let xid_at = scrapes.iter().position(|s| s.phase == "xid").unwrap();
    if let Err(report) = promtool_xid_alert(scrapes, xid_at, dir.path()) {
        drop(kubelet);
        panic!("phases {phases:?}; test file kept in {}:\n{report}", dir.keep().display());
    }
}

/// Every counter series of GPU 0, named by its family and its own labels, has one label
/// set in all scrapes, carries no holder label, and is in every scrape from its first on.
fn check_counter_identity(scrapes: &[Scrape]) {
    // (family, labels without holder labels) -> full label sets seen; scrape indexes seen.
    let mut sets: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut seen_in: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, scrape) in scrapes.iter().enumerate() {
        let counters = scrape.counters();
        for sample in scrape.samples() {
            if !counters.contains(&sample.name) || sample.label("uuid") != Some(GPU0) {
                continue;
            }
            for holder in HOLDER_LABELS {
                assert!(sample.label(holder).is_none(), "scrape {i} ({}): {}", scrape.phase, sample.series());
            }
            let own: Vec<String> = sample
                .labels
                .iter()
                .filter(|(n, _)| !HOLDER_LABELS.contains(&n.as_str()))
                .map(|(n, v)| format!("{n}={v:?}"))
                .collect();
            let key = (sample.name.clone(), own.join(","));
            sets.entry(key.clone()).or_default().insert(sample.series());
            seen_in.entry(key).or_default().push(i);
        }
    }
    let families: BTreeSet<&str> = sets.keys().map(|(f, _)| f.as_str()).collect();
    for family in EXPECTED_COUNTERS {
        assert!(families.contains(family), "{family} never seen on {GPU0}; seen: {families:?}");
    }
    for (key, labels) in &sets {
        assert_eq!(labels.len(), 1, "{} changed its label set: {labels:#?}", key.0);
        let seen = &seen_in[key];
        let expected: Vec<usize> = (seen[0]..scrapes.len()).collect();
        assert_eq!(seen, &expected, "{} {} is missing from some scrapes", key.0, key.1);
    }
}

/// The promtool test file: every kept scrape as one step of [`STEP_S`], and the XID alert
/// expected at every step from the XID's scrape on, identical each time.
fn promtool_xid_alert(scrapes: &[Scrape], xid_at: usize, dir: &Path) -> Result<(), String> {
    let times: Vec<f64> = scrapes.iter().map(|s| s.at).collect();
    let test_time = |unix: f64| -> f64 {
        // Piecewise linear from the scrapes' wall times to their test times.
        let step = STEP_S as f64;
        match times.iter().position(|t| *t >= unix) {
            Some(0) => 0.0,
            Some(i) => step * ((i - 1) as f64 + (unix - times[i - 1]) / (times[i] - times[i - 1])),
            None => step * (times.len() - 1) as f64,
        }
    };
    // series -> value per scrape ("_" absent; "stale" right after it leaves a scrape, as
    // Prometheus marks it).
    let mut series: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for (i, scrape) in scrapes.iter().enumerate() {
        for sample in scrape.samples() {
            let value =
                if sample.name.ends_with("_timestamp_seconds") { test_time(sample.value) } else { sample.value };
            series.entry(sample.series()).or_insert_with(|| vec![None; scrapes.len()])[i] = Some(value);
        }
    }
    let input: Vec<_> = series
        .iter()
        .map(|(name, values)| {
            let mut words = Vec::new();
            for (i, v) in values.iter().enumerate() {
                words.push(match v {
                    Some(v) => format!("{v}"),
                    None if i > 0 && values[i - 1].is_some() => "stale".into(),
                    None => "_".into(),
                });
            }
            json!({"series": name, "values": words.join(" ")})
        })
        .collect();
    let alert = json!({
        "exp_labels": {
            "node": "test-node", "gpu": "0", "uuid": GPU0, "model": "NVIDIA H100 80GB HBM3", "cluster": "c1",
            "xid": "79", "severity": "critical"
        },
        "exp_annotations": {
            "summary": "GPU 0 on test-node reported XID 79.",
            "description": "XID 79 is a hardware or driver fault, not a user program's; see docs/health.md for its \
                            meaning. Held by ai/holder (container main) when it happened.",
            "runbook_url": "https://github.com/gpu-telemetry/gpu-telemetry/blob/main/alerts/runbook.md#gpuhardwarexid"
        }
    });
    let checks: Vec<_> = (0..scrapes.len())
        .map(|i| {
            let expected = if i >= xid_at { vec![alert.clone()] } else { vec![] };
            json!({"eval_time": format!("{}s", i as u64 * STEP_S), "alertname": "GPUHardwareXid", "exp_alerts": expected})
        })
        .collect();
    let rules = common::repo_root().join("alerts/gpu-rules.yaml");
    let test = json!({
        "rule_files": [rules.display().to_string()],
        "evaluation_interval": format!("{STEP_S}s"),
        "tests": [{
            "name": "a held GPU through an XID, an owner change and a kubelet outage",
            "interval": format!("{STEP_S}s"),
            "input_series": input,
            "alert_rule_test": checks,
        }]
    });
    let file = dir.join("xid-once.test.json");
    std::fs::write(&file, serde_json::to_string_pretty(&test).unwrap()).unwrap();
    let failed: Vec<String> = Flavour::ALL
        .into_iter()
        .filter_map(|flavour| {
            let run = Promtool::new(flavour).args(["test", "rules"]).arg(&file).run();
            (!run.success).then(|| format!("{flavour}: promtool test rules {}:\n{}", file.display(), run.report))
        })
        .collect();
    if failed.is_empty() { Ok(()) } else { Err(failed.join("\n")) }
}
