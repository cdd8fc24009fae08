//! Which dcgm-exporter release's page to copy (`--metrics.dcgm-exporter-version`), and
//! what differs between releases ([`Shape`]).
//!
//! A dcgm-exporter image tag names two versions, `4.5.3-4.8.2`: the DCGM it is built on,
//! then the exporter's own. The flag takes the exporter's (`4.8.2`), the one every
//! change below is dated by; the whole tag (`4.5.3-4.8.2`, also with an image suffix,
//! `4.4.1-4.6.0-distroless`) is read too, as the GPU operator's `values.yaml` writes it.
//! A DCGM version given alone (`3.3.7`, of the tag `3.3.7-3.5.0`) is refused with the
//! tag it belongs to, so that the two are never mixed up.
//!
//! The range is 3.0.0 (tag `3.0.4-3.0.0`, GPU operator v22.9.0) to 4.8.3 (tag
//! `4.6.0-4.8.3`, GPU operator v26.7.0). The default is 4.8.2, the newest release whose
//! counters file can be cited (`etc/default-counters.csv` at tag `4.5.3-4.8.2`, commit
//! 691c92762eb551313c825f6efe4ceeee20982801); 4.8.3 is the same page with the host label
//! renamed, from the commit that follows that tag on `main` (see [`Shape::host_label`]).
//! docs/replacing-dcgm-exporter.md has the table of releases and what each changed.
//!
//! Every date below is read at its source, NVIDIA/dcgm-exporter at the named tags. The
//! fields are those of `etc/dcp-metrics-included.csv`, the file the GPU operator
//! deploys; from 4.0.1 on its active rows are those of `etc/default-counters.csv`, and
//! before that the operator's file is the one whose pages users saw.

use std::fmt;

/// An exporter version, `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
    pub patch: u16,
}

/// A version, for `const` tables.
pub const fn v(major: u16, minor: u16, patch: u16) -> Version {
    Version { major, minor, patch }
}

/// The oldest release served: tag `3.0.4-3.0.0`.
pub const OLDEST: Version = v(3, 0, 0);
/// The newest release served: tag `4.6.0-4.8.3`.
pub const NEWEST: Version = v(4, 8, 3);
/// The default: the newest release whose counters file can be cited.
pub const DEFAULT: Version = v(4, 8, 2);

impl Default for Version {
    fn default() -> Self {
        DEFAULT
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The image tags of the releases in the range, (DCGM, exporter): the tags and release
/// commits of NVIDIA/dcgm-exporter from `3.0.4-3.0.0` to `4.5.3-4.8.2`, and
/// `4.6.0-4.8.3` (its release pull request #711, and the image the GPU operator
/// v26.7.0 bundle names).
pub const RELEASES: &[(Version, Version)] = &[
    (v(3, 0, 4), v(3, 0, 0)),
    (v(3, 1, 3), v(3, 1, 2)),
    (v(3, 1, 6), v(3, 1, 3)),
    (v(3, 1, 7), v(3, 1, 4)),
    (v(3, 1, 8), v(3, 1, 5)),
    (v(3, 2, 3), v(3, 1, 6)),
    (v(3, 2, 5), v(3, 1, 7)),
    (v(3, 2, 5), v(3, 1, 8)),
    (v(3, 3, 0), v(3, 2, 0)),
    (v(3, 3, 3), v(3, 3, 0)),
    (v(3, 3, 3), v(3, 3, 1)),
    (v(3, 3, 5), v(3, 4, 0)),
    (v(3, 3, 5), v(3, 4, 1)),
    (v(3, 3, 6), v(3, 4, 2)),
    (v(3, 3, 7), v(3, 5, 0)),
    (v(3, 3, 8), v(3, 6, 0)),
    (v(3, 3, 9), v(3, 6, 1)),
    (v(4, 0, 0), v(4, 0, 1)),
    (v(4, 1, 1), v(4, 0, 3)),
    (v(4, 1, 1), v(4, 0, 4)),
    (v(4, 2, 0), v(4, 1, 0)),
    (v(4, 2, 3), v(4, 1, 1)),
    (v(4, 2, 3), v(4, 1, 2)),
    (v(4, 2, 3), v(4, 1, 3)),
    (v(4, 2, 3), v(4, 2, 0)),
    (v(4, 2, 3), v(4, 3, 0)),
    (v(4, 3, 1), v(4, 4, 0)),
    (v(4, 3, 1), v(4, 4, 1)),
    (v(4, 4, 0), v(4, 5, 0)),
    (v(4, 4, 1), v(4, 5, 2)),
    (v(4, 4, 1), v(4, 6, 0)),
    (v(4, 4, 2), v(4, 7, 0)),
    (v(4, 4, 2), v(4, 7, 1)),
    (v(4, 5, 1), v(4, 8, 0)),
    (v(4, 5, 2), v(4, 8, 1)),
    (v(4, 5, 3), v(4, 8, 2)),
    (v(4, 6, 0), v(4, 8, 3)),
];

/// What the flag's refusal shows as the accepted forms.
const FORMS: &str = "the exporter's version, e.g. 4.8.2, or the image tag, e.g. 4.5.3-4.8.2";

fn number(text: &str) -> Option<Version> {
    let mut parts = text.split('.');
    let mut next = || parts.next().filter(|p| !p.is_empty() && p.len() <= 4).and_then(|p| p.parse::<u16>().ok());
    let version = v(next()?, next()?, next()?);
    parts.next().is_none().then_some(version)
}

/// Reads the flag: `4.8.2`, `4.5.3-4.8.2` or `4.5.3-4.8.2-distroless`. Any
/// `MAJOR.MINOR.PATCH` is read (the range is checked after); a DCGM version alone and a
/// tag whose two halves belong to no release are refused.
pub fn parse(text: &str) -> Result<Version, String> {
    let trimmed = text.trim();
    let refuse = |why: &str| format!("{trimmed:?} is not a dcgm-exporter version ({FORMS}): {why}");
    let mut parts = trimmed.splitn(3, '-');
    let first = parts.next().unwrap_or_default();
    let Some(first) = number(first) else { return Err(refuse("expected MAJOR.MINOR.PATCH")) };
    let Some(second) = parts.next() else {
        let dcgm_only: Vec<String> = RELEASES
            .iter()
            .filter(|(dcgm, _)| *dcgm == first)
            .map(|(dcgm, exporter)| format!("{dcgm}-{exporter}"))
            .collect();
        if !dcgm_only.is_empty() && !RELEASES.iter().any(|(_, exporter)| *exporter == first) {
            return Err(refuse(&format!(
                "{first} is the DCGM version of {}; give the exporter's, the part after the dash",
                dcgm_only.join(", ")
            )));
        }
        return Ok(first);
    };
    let Some(exporter) = number(second) else { return Err(refuse("expected DCGM-EXPORTER, e.g. 4.5.3-4.8.2")) };
    // A third part is the image's flavour (`ubuntu22.04`, `distroless`, `ubi9`).
    if parts.next().is_some_and(|suffix| !suffix.starts_with(|c: char| c.is_ascii_alphabetic())) {
        return Err(refuse("expected an image suffix such as -ubuntu22.04 or -distroless after the tag"));
    }
    let known_exporter = RELEASES.iter().find(|(_, e)| *e == exporter);
    match known_exporter {
        Some((dcgm, _)) if *dcgm != first => {
            Err(refuse(&format!("exporter {exporter} was released as {dcgm}-{exporter}, not with DCGM {first}")))
        }
        _ => Ok(exporter),
    }
}

/// The flag's value parser: [`parse`], then the range [`OLDEST`] to [`NEWEST`].
pub fn parser() -> flag_ranges::Bounded<Version> {
    flag_ranges::Bounded::new(parse, ToString::to_string, OLDEST, NEWEST)
}

/// What a release writes differently, for the fields and labels we serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// `pci_bus_id` after `UUID`: from 3.5.0 (tag `3.3.7-3.5.0`, pull request #326), in
    /// the template of `pkg/dcgmexporter/pipeline.go`.
    pub pci_bus_id: bool,
    /// `err_code` and `err_msg` on `DCGM_FI_DEV_XID_ERRORS`: from 3.4.2 (tag
    /// `3.3.6-3.4.2`, #309), `toMetric` in `pkg/dcgmexporter/gpu_collector.go`.
    pub xid_error_labels: bool,
    /// The host label: `Hostname` to 4.8.2; `hostname` from 4.8.3, which carries commit
    /// d5e5f510a1b6b393f39a43293ccd9dc985defc79 ("Rename Hostname label to hostname
    /// (#655)", `internal/pkg/rendermetrics/render_metrics.go`), the commit on `main`
    /// right after the tag `4.5.3-4.8.2`, merged 2026-05-12, before release #711
    /// (2026-07-14).
    pub host_label: &'static str,
    /// `pod_uid` on every series of a device a pod holds, `""` unless the exporter was
    /// told to look the UID up: 4.5.0 (tag `4.4.0-4.5.0`, #531) to 4.8.1, where
    /// `internal/pkg/transformation/kubernetes.go` sets it unconditionally; from 4.8.2
    /// only with `--kubernetes-enable-pod-uid` (commit 7b8b700, #626), off by default.
    pub pod_uid: bool,
    /// `container=""`, `namespace=""`, `pod=""` on a device no container holds, when
    /// the exporter maps pods: to 3.4.0. From 3.4.1 (tag `3.3.5-3.4.1`)
    /// `pkg/dcgmexporter/kubernetes.go` labels only devices found in the kubelet's list.
    pub idle_pod_labels: bool,
    /// `DCGM_FI_DEV_FB_RESERVED` in the default set: from 4.4.0 (tag `4.3.1-4.4.0`).
    pub fb_reserved: bool,
    /// The `DCGM_FI_PROF_*` ratios' help strings end "(in %)." to 3.4.2; from 3.5.0
    /// (tag `3.3.7-3.5.0`) they name no unit.
    pub prof_help_in_percent: bool,
}

impl Version {
    /// The shape of this release's page.
    pub fn shape(self) -> Shape {
        Shape {
            pci_bus_id: self >= v(3, 5, 0),
            xid_error_labels: self >= v(3, 4, 2),
            host_label: if self >= v(4, 8, 3) { "hostname" } else { "Hostname" },
            pod_uid: (v(4, 5, 0)..=v(4, 8, 1)).contains(&self),
            idle_pod_labels: self <= v(3, 4, 0),
            fb_reserved: self >= v(4, 4, 0),
            prof_help_in_percent: self <= v(3, 4, 2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporters_version_and_the_whole_tag_are_read() {
        assert_eq!(parse("4.8.2"), Ok(v(4, 8, 2)));
        assert_eq!(parse(" 4.5.3-4.8.2 "), Ok(v(4, 8, 2)));
        assert_eq!(parse("4.4.1-4.6.0-distroless"), Ok(v(4, 6, 0)));
        assert_eq!(parse("3.3.0-3.2.0-ubuntu22.04"), Ok(v(3, 2, 0)));
        // Out of range is read here and refused by the range check.
        assert_eq!(parse("4.9.0"), Ok(v(4, 9, 0)));
        assert_eq!(parse("2.4.7-2.6.11"), Ok(v(2, 6, 11)));
    }

    #[test]
    fn malformed_and_mixed_up_versions_are_refused_with_the_reason() {
        for (text, reason) in [
            ("", "expected MAJOR.MINOR.PATCH"),
            ("4.8", "expected MAJOR.MINOR.PATCH"),
            ("4.8.2.1", "expected MAJOR.MINOR.PATCH"),
            ("v4.8.2", "expected MAJOR.MINOR.PATCH"),
            ("4.8.x", "expected MAJOR.MINOR.PATCH"),
            ("4.5.3-", "expected DCGM-EXPORTER"),
            ("4.5.3-4.8.2-1", "image suffix"),
            ("3.3.7", "3.3.7 is the DCGM version of 3.3.7-3.5.0"),
            ("4.2.3", "4.2.3 is the DCGM version of 4.2.3-4.1.1, 4.2.3-4.1.2, 4.2.3-4.1.3, 4.2.3-4.2.0, 4.2.3-4.3.0"),
            ("4.5.2-4.8.2", "exporter 4.8.2 was released as 4.5.3-4.8.2, not with DCGM 4.5.2"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(reason), "{text:?}: {err}");
            assert!(err.contains("e.g. 4.8.2") && err.contains("4.5.3-4.8.2"), "{err}");
        }
        // 3.3.0 is both a DCGM version (3.3.0-3.2.0) and an exporter release (3.3.3-3.3.0).
        assert_eq!(parse("3.3.0"), Ok(v(3, 3, 0)));
    }

    #[test]
    fn the_range_is_the_table_and_the_default_inside_it() {
        assert_eq!(RELEASES.first().map(|r| r.1), Some(OLDEST));
        assert_eq!(RELEASES.last().map(|r| r.1), Some(NEWEST));
        assert!(RELEASES.windows(2).all(|w| w[0].1 < w[1].1), "exporter versions rise tag by tag");
        assert!(RELEASES.iter().any(|r| r.1 == DEFAULT));
        let p = parser();
        assert_eq!(p.range(), "3.0.0 to 4.8.3");
        assert_eq!(p.check("4.9.0").unwrap_err(), "4.9.0 is outside the valid range 3.0.0 to 4.8.3");
        assert_eq!(p.check("2.4.7-2.6.11").unwrap_err(), "2.4.7-2.6.11 is outside the valid range 3.0.0 to 4.8.3");
        assert_eq!(p.check("4.6.0-4.8.3"), Ok(NEWEST));
        assert_eq!(Version::default().to_string(), "4.8.2");
    }

    #[test]
    fn each_change_starts_at_its_release() {
        let shape = |text: &str| parse(text).unwrap().shape();
        assert_eq!(shape("3.0.0").host_label, "Hostname");
        assert_eq!(shape("4.8.2").host_label, "Hostname");
        assert_eq!(shape("4.8.3").host_label, "hostname");
        assert!(!shape("3.4.2").pci_bus_id && shape("3.5.0").pci_bus_id);
        assert!(!shape("3.4.1").xid_error_labels && shape("3.4.2").xid_error_labels);
        assert!(!shape("4.4.0").pod_uid && shape("4.5.0").pod_uid && shape("4.8.1").pod_uid && !shape("4.8.2").pod_uid);
        assert!(shape("3.4.0").idle_pod_labels && !shape("3.4.1").idle_pod_labels);
        assert!(!shape("4.2.0").fb_reserved && shape("4.4.0").fb_reserved);
        assert!(shape("3.4.2").prof_help_in_percent && !shape("3.5.0").prof_help_in_percent);
    }
}
