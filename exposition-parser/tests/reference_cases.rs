//! Runs the parser over the public exposition-format test cases kept outside the
//! repository, in `../shared/reference/exposition-cases/` relative to the workspace
//! root: `<set>/<case>/input.txt`, `expect` (`ok` or `error`) and `format`
//! (`openmetrics` or `text`); that folder's README says where each set comes from.
//!
//! On `prometheus-textparse/` (the Prometheus server's parsers) and
//! `prometheus-common-expfmt/` (client_golang's parser) every verdict must be
//! Prometheus's, but for the cases in [`CONFLICTS`], where the two disagree and the
//! server's verdict is kept (see the crate's header). On `openmetrics-suite/` every
//! valid page must be accepted; its invalid pages are counted for information (the
//! server's OpenMetrics parser accepts many of them, and so do we). When the folder is
//! absent (a clone without the reference data) the test says so and returns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use exposition_parser::{Format, Limits, parse};

/// Cases whose verdict we do not give, each with the reason: the other Prometheus
/// parser's cases require the opposite.
const CONFLICTS: &[(&str, &str)] = &[(
    "prometheus-common-expfmt/expfmt_testTextParseError_00",
    "a last line without its '\\n' is read, as the server's promparse.go reads it \
     (prometheus-textparse/prom_TestPromParse_input and prom_TestPromNullByteHandling_00 end so)",
)];

const SETS: [&str; 3] = ["openmetrics-suite", "prometheus-textparse", "prometheus-common-expfmt"];

/// One case of a set.
struct Case {
    /// `<set>/<case>`.
    id: String,
    set: &'static str,
    input: Vec<u8>,
    ok: bool,
    format: Format,
}

fn reference_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    workspace.join("../shared/reference/exposition-cases")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn word(path: &Path) -> String {
    String::from_utf8(read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_owned()
}

fn load(root: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for set in SETS {
        let dir = root.join(set);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut folders: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
        folders.sort();
        for folder in folders {
            let format = match word(&folder.join("format")).as_str() {
                "openmetrics" => Format::OpenMetrics,
                "text" => Format::PrometheusText,
                other => panic!("{}: unknown format {other:?}", folder.display()),
            };
            let ok = match word(&folder.join("expect")).as_str() {
                "ok" => true,
                "error" => false,
                other => panic!("{}: unknown expectation {other:?}", folder.display()),
            };
            let name = folder.file_name().unwrap().to_string_lossy();
            let input = read(&folder.join("input.txt"));
            cases.push(Case { id: format!("{set}/{name}"), set, input, ok, format });
        }
    }
    cases
}

/// One set and format: valid accepted of valid, invalid refused of invalid.
#[derive(Default)]
struct Tally {
    valid: (usize, usize),
    invalid: (usize, usize),
}

#[test]
fn verdicts_agree_with_prometheus_reference_cases() {
    let root = reference_dir();
    if !root.is_dir() {
        println!(
            "SKIPPED: the reference cases are not at {} (they are not part of the repository); nothing was checked",
            root.display()
        );
        return;
    }
    let cases = load(&root);
    assert!(cases.len() > 300, "only {} cases under {}", cases.len(), root.display());
    let mut tallies: BTreeMap<(&str, &str), Tally> = BTreeMap::new();
    let mut disagreements = Vec::new();
    let mut conflicts_seen = 0;
    for case in &cases {
        let verdict = parse(&case.input, case.format, &Limits::default(), |_| true);
        let format = if case.format == Format::OpenMetrics { "openmetrics" } else { "text" };
        let tally = tallies.entry((case.set, format)).or_default();
        let counts = if case.ok { &mut tally.valid } else { &mut tally.invalid };
        counts.1 += 1;
        let agrees = verdict.is_ok() == case.ok;
        counts.0 += usize::from(agrees);
        let informational = case.set == "openmetrics-suite" && !case.ok;
        let conflict = CONFLICTS.iter().find(|(id, _)| *id == case.id);
        if conflict.is_some() {
            conflicts_seen += 1;
        }
        let why = match &verdict {
            Ok(samples) => format!("accepted ({} samples), expected a refusal", samples.len()),
            Err(e) => format!("refused ({e}), expected it accepted"),
        };
        match (agrees, conflict) {
            (true, None) => {}
            (false, None) if informational => {}
            (false, None) => disagreements.push(format!("{} ({format}): {why}", case.id)),
            (false, Some((_, reason))) => println!("known conflict {}: {why}: {reason}", case.id),
            (true, Some(_)) => {
                disagreements.push(format!("{} ({format}): listed as a conflict but now agrees; unlist it", case.id))
            }
        }
    }
    for ((set, format), t) in &tallies {
        println!(
            "{set} ({format}): valid accepted {}/{}, invalid refused {}/{}",
            t.valid.0, t.valid.1, t.invalid.0, t.invalid.1
        );
    }
    assert_eq!(conflicts_seen, CONFLICTS.len(), "a case listed in CONFLICTS is missing from {}", root.display());
    assert!(disagreements.is_empty(), "{} cases disagree:\n{}", disagreements.len(), disagreements.join("\n"));
}
