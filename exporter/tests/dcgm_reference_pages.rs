//! Our page in dcgm-exporter's naming against real dcgm-exporter pages, one test per
//! page shape: the exporter runs on a simulated node of the same GPUs, MIG layout and
//! pods (`tests/fixtures/dcgm-pages/`), told the release the page came from
//! (`--metrics.dcgm-exporter-version`, the version its `.src` states or infers), and its
//! page must have
//! - the same `DCGM_*` families, but for the differences each case lists with its
//!   reason (docs/replacing-dcgm-exporter.md, "Where we differ");
//! - the same HELP and TYPE lines for every family both have;
//! - the same series on the same entities: per family, the GPUs and GPU instances
//!   written and, for each, the label names in their order.
//!
//! Label values differ (UUIDs, node, pod names are the scenario's own), except
//! `GPU_I_PROFILE` where the simulated GPU is the page's: that is DCGM's name of the
//! instance, which the case checks.
//!
//! The pages are reference data beside the repository, not part of it: they are read
//! from `../shared/reference/dcgm-exporter-pages/` (from the workspace root), with their
//! `.src` notes, and every test here skips, saying so, where that folder is absent. A
//! page that is an excerpt (its `.src` says PARTIAL, or a grep sample) is compared for
//! what it shows: its families and series must be on ours, not the reverse.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use exposition_parser::{Format, Limits};

/// Why a family is on one page and not the other: each is a paragraph of
/// docs/replacing-dcgm-exporter.md, "Where we differ".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// `DCGM_FI_DEV_VGPU_LICENSE_STATUS`: a vGPU guest's licence, which we do not read.
    NotServed,
    /// DCGM writes 0 for a board without a memory temperature sensor; a reading we do
    /// not have is absent.
    NoMemorySensor,
    /// `DCGM_FI_PROF_*` activities come from GPM, which NVML has from Hopper on; DCGM's
    /// profiling module also serves older boards.
    NoGpm,
    /// DCGM writes an NVLink bandwidth of 0 on a board without NVLink (to 4.6.0).
    NoNvlink,
    /// We write `DCGM_FI_DEV_XID_ERRORS` 0 before any XID; DCGM 4.5 and later leave it
    /// blank, and dcgm-exporter then leaves the family out.
    XidZeroBeforeFirst,
    /// The page's counters file was the user's own, with fields outside the default set.
    CustomCounters,
    /// DCGM's source reads a GPU-level field asked of a GPU instance from its GPU; the
    /// page's DCGM 3.0/3.1 and driver 520 left the remapped rows blank on instances.
    RemappedRowsOnInstances,
}

/// One page shape.
struct Case {
    /// The page's file name without `.txt`.
    page: &'static str,
    /// The release the page came from, as the flag takes it.
    release: &'static str,
    /// Under `tests/fixtures/dcgm-pages/`.
    scenario: &'static str,
    /// Families on the page and not on ours, each with its reason.
    only_on_page: &'static [(&'static str, Why)],
    /// Families on ours and not on the page, each with its reason.
    only_on_ours: &'static [(&'static str, Why)],
    /// An excerpt: compared for what it shows.
    excerpt: bool,
    /// The page's own counters file had no `DCGM_FI_DRIVER_VERSION` label row.
    no_driver_label: bool,
    /// The simulated GPU is the page's, so `GPU_I_PROFILE` values must match too.
    same_mig_profiles: bool,
}

const CASE: Case = Case {
    page: "",
    release: "",
    scenario: "",
    only_on_page: &[],
    only_on_ours: &[],
    excerpt: false,
    no_driver_label: false,
    same_mig_profiles: false,
};

const NO_GPM: [(&str, Why); 3] = [
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Why::NoGpm),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Why::NoGpm),
    ("DCGM_FI_PROF_DRAM_ACTIVE", Why::NoGpm),
];

/// Pages no case compares, and why.
const NOT_COMPARED: &[(&str, &str)] = &[
    (
        "3.3.3-3.3.0_dcgm-issue149-dgx-a100-nvlink-excerpt",
        "its one family, DCGM_FI_PROF_NVLINK_TX_BYTES, is not in the default counters",
    ),
    (
        "3.3.x-dev_pr239-xid-errors-count-excerpt",
        "a development build's DCGM_EXP_XID_ERRORS_COUNT, not in the default counters",
    ),
    ("unknown-4.3.1-4.4.0-inferred_vks-h100-20c-vgpu-pod-xid-nvlink", "a vGPU guest, where we do not run"),
    ("unknown-4.x_vks-grid-a100-40c-vgpu-plain", "a vGPU guest, where we do not run"),
];

/// The folder of reference pages, if it is there.
fn pages_dir() -> Option<PathBuf> {
    let dir = common::repo_root().join("../shared/reference/dcgm-exporter-pages");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipped: the reference pages are not at {} (they live beside the repository, not in it)",
            dir.display()
        );
        None
    }
}

/// A page as far as the comparison goes.
#[derive(Debug, Default)]
struct Page {
    help: BTreeMap<String, String>,
    kind: BTreeMap<String, String>,
    /// Per family: (gpu, GPU instance or not, label names in order), one per series.
    series: BTreeMap<String, Vec<(String, bool, Vec<String>)>>,
    /// Per family: the `GPU_I_PROFILE` values, one per instance series.
    profiles: BTreeMap<String, Vec<String>>,
}

impl Page {
    fn read(text: &str, drop_label: Option<&str>) -> Page {
        let mut page = Page::default();
        for line in text.lines() {
            let header = |prefix: &str, into: &mut BTreeMap<String, String>| {
                if let Some((name, rest)) = line.strip_prefix(prefix).and_then(|l| l.split_once(' ')) {
                    into.insert(name.to_string(), rest.to_string());
                }
            };
            header("# HELP ", &mut page.help);
            header("# TYPE ", &mut page.kind);
        }
        let samples = exposition_parser::parse(text.as_bytes(), Format::PrometheusText, &Limits::default(), |name| {
            name.starts_with("DCGM_")
        })
        .unwrap_or_else(|e| panic!("unreadable page: {e}\n{text}"));
        for sample in samples {
            let names = sample.labels.iter().map(|(n, _)| n.clone()).filter(|n| Some(n.as_str()) != drop_label);
            let gpu = sample.label("gpu").unwrap_or_default().to_string();
            let profile = sample.label("GPU_I_PROFILE").map(|p| p.trim_matches('*').to_string());
            page.series.entry(sample.name.clone()).or_default().push((gpu, profile.is_some(), names.collect()));
            if let Some(profile) = profile {
                page.profiles.entry(sample.name).or_default().push(profile);
            }
        }
        for entries in page.series.values_mut() {
            entries.sort();
        }
        for entries in page.profiles.values_mut() {
            entries.sort();
        }
        page.help.retain(|name, _| name.starts_with("DCGM_"));
        page.kind.retain(|name, _| name.starts_with("DCGM_"));
        page
    }

    fn families(&self) -> BTreeSet<&str> {
        self.series.keys().chain(self.help.keys()).chain(self.kind.keys()).map(String::as_str).collect()
    }
}

/// Whether every entry of `part` is in `whole`, as many times (both sorted).
fn within<T: Ord + Clone>(part: &[T], whole: &[T]) -> bool {
    let mut rest = whole.to_vec();
    part.iter().all(|item| match rest.binary_search(item) {
        Ok(at) => {
            rest.remove(at);
            true
        }
        Err(_) => false,
    })
}

fn check(case: &Case) {
    let Some(dir) = pages_dir() else { return };
    let text = std::fs::read_to_string(dir.join(format!("{}.txt", case.page))).unwrap();
    let src = std::fs::read_to_string(dir.join(format!("{}.src", case.page))).unwrap();
    let fidelity = src.lines().find_map(|l| l.strip_prefix("fidelity:")).unwrap_or_default();
    assert_eq!(
        case.excerpt,
        fidelity.contains("PARTIAL") || fidelity.contains("grep"),
        "{}: excerpt or not, as its .src says: {fidelity}",
        case.page
    );
    let reference = Page::read(&text, None);

    let scenario = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcgm-pages").join(case.scenario);
    let node = common::start_node(
        &scenario,
        None,
        &["--metrics.naming", "dcgm-exporter", "--metrics.dcgm-exporter-version", case.release],
    );
    // Time runs (not frozen), so the NVLink bandwidth, a rate between two cycles, is there.
    let ours_text = node.metrics();
    let ours = Page::read(&ours_text, case.no_driver_label.then_some("DCGM_FI_DRIVER_VERSION"));
    let context = || format!("{} at {}\nour page:\n{ours_text}", case.page, case.release);

    let (page_families, our_families) = (reference.families(), ours.families());
    let only_on_page: BTreeSet<&str> = page_families.difference(&our_families).copied().collect();
    let expected: BTreeSet<&str> = case.only_on_page.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        only_on_page,
        expected,
        "families on the page and not on ours (expected {:?}): {}",
        case.only_on_page,
        context()
    );
    if !case.excerpt {
        let only_on_ours: BTreeSet<&str> = our_families.difference(&page_families).copied().collect();
        let expected: BTreeSet<&str> = case.only_on_ours.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            only_on_ours,
            expected,
            "families on ours and not on the page (expected {:?}): {}",
            case.only_on_ours,
            context()
        );
    }
    for family in page_families.intersection(&our_families) {
        for (what, page_lines, our_lines) in
            [("HELP", &reference.help, &ours.help), ("TYPE", &reference.kind, &ours.kind)]
        {
            if let Some(line) = page_lines.get(*family) {
                assert_eq!(our_lines.get(*family), Some(line), "{what} of {family}: {}", context());
            }
        }
        let (page_series, our_series) = (
            reference.series.get(*family).cloned().unwrap_or_default(),
            ours.series.get(*family).cloned().unwrap_or_default(),
        );
        if case.excerpt {
            assert!(
                within(&page_series, &our_series),
                "{family}: {page_series:?} not all in {our_series:?}: {}",
                context()
            );
        } else {
            assert_eq!(our_series, page_series, "{family}: entities and label names: {}", context());
        }
        if case.same_mig_profiles {
            assert_eq!(
                ours.profiles.get(*family),
                reference.profiles.get(*family),
                "{family}: GPU_I_PROFILE: {}",
                context()
            );
        }
    }
}

macro_rules! page_shape {
    ($name:ident, $case:expr) => {
        #[test]
        fn $name() {
            check(&$case);
        }
    };
}

// GPU operator v25.10.0's 4.4.1-4.6.0, a pod on the GPU: pod_uid="" on every series.
page_shape!(
    lke_rtx_4000_ada_with_a_pod_at_4_6_0,
    Case {
        page: "4.4.1-4.6.0_lke-rtx4000ada-gpu-operator-pod-labels",
        release: "4.4.1-4.6.0-distroless",
        scenario: "lke-rtx4000ada-pod.yaml",
        only_on_page: &[
            ("DCGM_FI_DEV_MEMORY_TEMP", Why::NoMemorySensor),
            ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Why::NoNvlink),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Why::NotServed),
            NO_GPM[0],
            NO_GPM[1],
            NO_GPM[2],
        ],
        ..CASE
    }
);

// Captured 2026-03 on the GPU operator, which then shipped 4.8.0 (v26.3.0 and v26.3.1).
page_shape!(
    kops_l4_idle_at_4_8_0,
    Case {
        page: "unknown-4.x_kops-l4-gpu-operator-plain",
        release: "4.8.0",
        scenario: "kops-l4-idle.yaml",
        only_on_page: &[
            ("DCGM_FI_DEV_MEMORY_TEMP", Why::NoMemorySensor),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Why::NotServed),
            NO_GPM[0],
            NO_GPM[1],
            NO_GPM[2],
        ],
        only_on_ours: &[("DCGM_FI_DEV_XID_ERRORS", Why::XidZeroBeforeFirst)],
        ..CASE
    }
);

// The standalone chart in 2026-04: 4.5.2-4.8.1, as its .src infers.
page_shape!(
    upcloud_l40s_idle_at_4_8_1,
    Case {
        page: "unknown-4.x_upcloud-l40s-standalone-chart-plain",
        release: "4.5.2-4.8.1",
        scenario: "upcloud-l40s-idle.yaml",
        only_on_page: &[
            ("DCGM_FI_DEV_MEMORY_TEMP", Why::NoMemorySensor),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Why::NotServed),
            NO_GPM[0],
            NO_GPM[1],
            NO_GPM[2],
        ],
        only_on_ours: &[("DCGM_FI_DEV_XID_ERRORS", Why::XidZeroBeforeFirst)],
        ..CASE
    }
);

// pod_uid on the held GPU dates it 4.5.0 to 4.8.1; captured 2026-03, when the GPU
// operator shipped 4.8.0.
page_shape!(
    aicr_eight_h100_one_pod_at_4_8_0,
    Case {
        page: "unknown-4.4-plus_aicr-8xh100-pod-grep-sample",
        release: "4.8.0",
        scenario: "aicr-8xh100-pod.yaml",
        excerpt: true,
        ..CASE
    }
);

// The three Run:ai T4 samples of November 2024: 3.3.7-3.5.0 or 3.3.8-3.6.0, the same shape.
page_shape!(
    runai_t4_whole_gpu_pod_at_3_5_0,
    Case {
        page: "3.3.7-or-3.3.8_runai-t4-gpu-operator-whole-gpu-pod",
        release: "3.3.7-3.5.0",
        scenario: "runai-t4-pod.yaml",
        only_on_page: &[
            ("DCGM_FI_DEV_MEMORY_TEMP", Why::NoMemorySensor),
            ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Why::NoNvlink),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Why::NotServed),
            NO_GPM[0],
            NO_GPM[1],
            NO_GPM[2],
        ],
        ..CASE
    }
);

page_shape!(
    runai_t4_fractional_reservation_pod_at_3_6_0,
    Case {
        page: "3.3.7-or-3.3.8_runai-t4-gpu-operator-fractional-shared-gpu",
        release: "3.3.8-3.6.0",
        scenario: "runai-t4-pod.yaml",
        only_on_page: &[
            ("DCGM_FI_DEV_MEMORY_TEMP", Why::NoMemorySensor),
            ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Why::NoNvlink),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Why::NotServed),
            NO_GPM[0],
            NO_GPM[1],
            NO_GPM[2],
        ],
        ..CASE
    }
);

page_shape!(
    runai_t4_idle_at_3_5_0,
    Case {
        page: "3.3.7-or-3.3.8_runai-t4-gpu-operator-idle-gpu",
        release: "3.5.0",
        scenario: "runai-t4-idle.yaml",
        only_on_page: &[
            ("DCGM_FI_DEV_MEMORY_TEMP", Why::NoMemorySensor),
            ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Why::NoNvlink),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Why::NotServed),
            NO_GPM[0],
            NO_GPM[1],
            NO_GPM[2],
        ],
        ..CASE
    }
);

// January 2023: 3.0.4-3.0.0 (GPU operator v22.9.0) or 3.1.3-3.1.2 (v22.9.1), the same
// shape: no pci_bus_id, no err_code, empty pod labels on the idle GPU.
page_shape!(
    runai_two_t4_reservation_pod_and_idle_gpu_at_3_1_2,
    Case {
        page: "unknown-3.0-or-3.1_runai-2xt4-fractional-reservation-pod",
        release: "3.1.3-3.1.2",
        scenario: "runai-2xt4-reservation.yaml",
        only_on_page: &[("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Why::NoNvlink), NO_GPM[0], NO_GPM[1], NO_GPM[2],],
        ..CASE
    }
);

page_shape!(
    runai_a100_mig_idle_instances_at_3_0_0,
    Case {
        page: "unknown-3.0-or-3.1_runai-a100-mig-2x1g5gb-2g10gb",
        release: "3.0.4-3.0.0",
        scenario: "runai-a100-mig-idle.yaml",
        only_on_page: &NO_GPM,
        only_on_ours: &[
            ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Why::RemappedRowsOnInstances),
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Why::RemappedRowsOnInstances),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", Why::RemappedRowsOnInstances),
        ],
        ..CASE
    }
);

// GPU operator v23.9.2's 3.3.0-3.2.0; the 80 GB A100's 7g.80gb is DCGM's 7g.79gb.
page_shape!(
    a100_80gb_one_7g_instance_at_3_2_0,
    Case {
        page: "3.3.0-3.2.0_gpu-operator-issue687-a100-mig-7g-excerpt",
        release: "3.3.0-3.2.0",
        scenario: "a100-80gb-mig-7g.yaml",
        only_on_page: &[("DCGM_FI_DEV_MAX_SM_CLOCK", Why::CustomCounters)],
        excerpt: true,
        same_mig_profiles: true,
        ..CASE
    }
);

page_shape!(
    h100_nvl_1g_instances_at_4_1_3,
    Case {
        page: "4.2.3-4.1.3_issue544-h100nvl-mig-excerpt",
        release: "4.2.3-4.1.3",
        scenario: "h100nvl-mig-1g.yaml",
        excerpt: true,
        ..CASE
    }
);

page_shape!(
    a30_1g_instances_own_counters_at_3_4_1,
    Case {
        page: "3.3.5-3.4.1_issue317-a30-mig-1g6gb-excerpt",
        release: "3.3.5-3.4.1",
        scenario: "a30-mig-1g.yaml",
        excerpt: true,
        no_driver_label: true,
        ..CASE
    }
);

/// The names of the cases above, for the check that every page is accounted for.
const COMPARED: &[&str] = &[
    "4.4.1-4.6.0_lke-rtx4000ada-gpu-operator-pod-labels",
    "unknown-4.x_kops-l4-gpu-operator-plain",
    "unknown-4.x_upcloud-l40s-standalone-chart-plain",
    "unknown-4.4-plus_aicr-8xh100-pod-grep-sample",
    "3.3.7-or-3.3.8_runai-t4-gpu-operator-whole-gpu-pod",
    "3.3.7-or-3.3.8_runai-t4-gpu-operator-fractional-shared-gpu",
    "3.3.7-or-3.3.8_runai-t4-gpu-operator-idle-gpu",
    "unknown-3.0-or-3.1_runai-2xt4-fractional-reservation-pod",
    "unknown-3.0-or-3.1_runai-a100-mig-2x1g5gb-2g10gb",
    "3.3.0-3.2.0_gpu-operator-issue687-a100-mig-7g-excerpt",
    "4.2.3-4.1.3_issue544-h100nvl-mig-excerpt",
    "3.3.5-3.4.1_issue317-a30-mig-1g6gb-excerpt",
];

/// A page added to the folder is compared or named here with the reason it is not.
#[test]
fn every_reference_page_is_compared_or_named_with_its_reason() {
    let Some(dir) = pages_dir() else { return };
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".txt").map(String::from))
        .collect();
    pages.sort();
    let mut accounted: Vec<String> =
        COMPARED.iter().chain(NOT_COMPARED.iter().map(|(page, _)| page)).map(|p| p.to_string()).collect();
    accounted.sort();
    assert_eq!(pages, accounted, "every page in {} is compared, or not, with a reason", dir.display());
    for page in &pages {
        assert!(dir.join(format!("{page}.src")).is_file(), "{page} has its .src");
    }
}
