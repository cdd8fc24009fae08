//! The GPU price table: dollars per hour by model, and the utilization floor under
//! which an allocated device counts as idle.
//!
//! The defaults are `alerts/gpu-prices.yaml`, compiled in; the `gpu-cost` recording
//! rules are generated from the same file ([`crate::rules`]), and a test fails while the
//! two disagree. A cluster overrides them with a ConfigMap in the same format, and a run
//! with `--price NAME=DOLLARS`; precedence is flag, then ConfigMap, then the defaults.
//!
//! Matching: each entry's `match` is a regular expression on the whole NVML model name
//! (anchored at both ends, as PromQL's `=~`), and the first entry that matches prices the
//! GPU. An override whose `name` is an entry's name (case-insensitive) replaces that
//! entry's price (and its `match`, if it gives one) in place; any other override is a
//! new entry put ahead of the table. A `--price` name that is not an entry's matches
//! every model whose name contains it. A model no entry matches has no price: callers
//! report it as unpriced and never count it as zero.

use regex::Regex;
use serde::Deserialize;

/// The table shipped in the repository.
pub const DEFAULT_TABLE: &str = include_str!("../../alerts/gpu-prices.yaml");

/// Why a price table or an override was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PriceError {
    #[error("{source_name}: {message}")]
    Yaml { source_name: String, message: String },
    #[error("{source_name}: model {name:?}: match {pattern:?} is not a regular expression: {reason}")]
    Pattern { source_name: String, name: String, pattern: String, reason: String },
    #[error("{source_name}: model {name:?}: {value} is not a price in dollars per hour (a number, 0 or more)")]
    Price { source_name: String, name: String, value: f64 },
    #[error("{source_name}: model {name:?} has no match and is not an entry of the table it overrides")]
    NoMatch { source_name: String, name: String },
    #[error("{source_name}: model {name:?} appears twice")]
    Duplicate { source_name: String, name: String },
    #[error("{source_name}: idle_below_percent {value} is outside 0 to 100")]
    Floor { source_name: String, value: f64 },
    #[error("--price {text:?}: expected NAME=DOLLARS, e.g. --price H100=4.5 (dollars per hour, 0 or more)")]
    Flag { text: String },
}

pub type Result<T, E = PriceError> = std::result::Result<T, E>;

/// One priced model.
#[derive(Debug, Clone)]
pub struct Entry {
    /// What the table calls it (`A100`); overrides refer to entries by it.
    pub name: String,
    /// The regular expression as written.
    pub pattern: String,
    regex: Regex,
    pub dollars_per_hour: f64,
    /// Where this entry's price came from (`defaults`, `ConfigMap gpu-telemetry/gpu-prices`, `--price`).
    pub origin: String,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.pattern == other.pattern
            && self.dollars_per_hour == other.dollars_per_hour
            && self.origin == other.origin
    }
}

impl Entry {
    /// Whether this entry prices the model named `model`.
    pub fn matches(&self, model: &str) -> bool {
        self.regex.is_match(model)
    }
}

/// The price table in effect.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    pub entries: Vec<Entry>,
    pub idle_below_percent: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTable {
    idle_below_percent: Option<f64>,
    #[serde(default)]
    models: Vec<FileEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: String,
    #[serde(rename = "match")]
    pattern: Option<String>,
    dollars_per_hour: f64,
}

fn compile(source_name: &str, name: &str, pattern: &str) -> Result<Regex> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| PriceError::Pattern {
        source_name: source_name.into(),
        name: name.into(),
        pattern: pattern.into(),
        reason: e.to_string().lines().last().unwrap_or_default().trim().to_string(),
    })
}

fn check_price(source_name: &str, name: &str, value: f64) -> Result<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(PriceError::Price { source_name: source_name.into(), name: name.into(), value })
    }
}

fn parse_file(source_name: &str, text: &str) -> Result<FileTable> {
    let table: FileTable = serde_yaml_ng::from_str(text)
        .map_err(|e| PriceError::Yaml { source_name: source_name.into(), message: e.to_string() })?;
    let mut seen = std::collections::BTreeSet::new();
    for entry in &table.models {
        if !seen.insert(entry.name.to_lowercase()) {
            return Err(PriceError::Duplicate { source_name: source_name.into(), name: entry.name.clone() });
        }
        check_price(source_name, &entry.name, entry.dollars_per_hour)?;
    }
    if let Some(value) = table.idle_below_percent
        && !(0.0..=100.0).contains(&value)
    {
        return Err(PriceError::Floor { source_name: source_name.into(), value });
    }
    Ok(table)
}

impl PriceTable {
    /// Parses a whole table (the shipped file's format); every entry needs a `match`.
    pub fn parse(source_name: &str, text: &str) -> Result<PriceTable> {
        let file = parse_file(source_name, text)?;
        let mut entries = Vec::new();
        for e in file.models {
            let Some(pattern) = e.pattern else {
                return Err(PriceError::NoMatch { source_name: source_name.into(), name: e.name });
            };
            let regex = compile(source_name, &e.name, &pattern)?;
            entries.push(Entry {
                name: e.name,
                pattern,
                regex,
                dollars_per_hour: e.dollars_per_hour,
                origin: source_name.into(),
            });
        }
        Ok(PriceTable { entries, idle_below_percent: file.idle_below_percent.unwrap_or(10.0) })
    }

    /// The shipped table.
    pub fn defaults() -> Result<PriceTable> {
        PriceTable::parse("defaults", DEFAULT_TABLE)
    }

    /// Applies a ConfigMap's table (same format; `match` may be left out for an entry
    /// of this table, whose price it then changes).
    pub fn overlay(&mut self, source_name: &str, text: &str) -> Result<()> {
        let file = parse_file(source_name, text)?;
        let mut added = Vec::new();
        for e in file.models {
            if let Some(existing) = self.entries.iter_mut().find(|x| x.name.eq_ignore_ascii_case(&e.name)) {
                if let Some(pattern) = e.pattern {
                    existing.regex = compile(source_name, &e.name, &pattern)?;
                    existing.pattern = pattern;
                }
                existing.dollars_per_hour = e.dollars_per_hour;
                existing.origin = source_name.into();
                continue;
            }
            let Some(pattern) = e.pattern else {
                return Err(PriceError::NoMatch { source_name: source_name.into(), name: e.name });
            };
            let regex = compile(source_name, &e.name, &pattern)?;
            added.push(Entry {
                name: e.name,
                pattern,
                regex,
                dollars_per_hour: e.dollars_per_hour,
                origin: source_name.into(),
            });
        }
        added.append(&mut self.entries);
        self.entries = added;
        if let Some(floor) = file.idle_below_percent {
            self.idle_below_percent = floor;
        }
        Ok(())
    }

    /// Applies one `--price NAME=DOLLARS`.
    pub fn apply_flag(&mut self, text: &str) -> Result<()> {
        let (name, price) = parse_flag(text)?;
        if let Some(existing) = self.entries.iter_mut().find(|x| x.name.eq_ignore_ascii_case(&name)) {
            existing.dollars_per_hour = price;
            existing.origin = "--price".into();
            return Ok(());
        }
        let pattern = format!(".*{}.*", regex::escape(&name));
        let regex = compile("--price", &name, &pattern)?;
        self.entries.insert(0, Entry { name, pattern, regex, dollars_per_hour: price, origin: "--price".into() });
        Ok(())
    }

    /// The entry that prices `model`, if any.
    pub fn lookup(&self, model: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.matches(model))
    }

    /// The price of one `model` GPU per hour, if it has one.
    pub fn price(&self, model: &str) -> Option<f64> {
        self.lookup(model).map(|e| e.dollars_per_hour)
    }
}

/// `NAME=DOLLARS` of a `--price` flag.
pub fn parse_flag(text: &str) -> Result<(String, f64)> {
    let refuse = || PriceError::Flag { text: text.into() };
    let (name, value) = text.rsplit_once('=').ok_or_else(refuse)?;
    let name = name.trim();
    let value: f64 = value.trim().trim_start_matches('$').parse().map_err(|_| refuse())?;
    if name.is_empty() || !value.is_finite() || value < 0.0 {
        return Err(refuse());
    }
    Ok((name.to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODELS: &[(&str, Option<f64>)] = &[
        ("NVIDIA A100-SXM4-80GB", Some(3.5)),
        ("NVIDIA A100 80GB PCIe", Some(3.5)),
        ("NVIDIA H100 80GB HBM3", Some(4.5)),
        ("NVIDIA H200", Some(6.0)),
        ("NVIDIA L40S", Some(1.5)),
        ("NVIDIA GeForce RTX 4090", Some(0.8)),
        ("Tesla V100-SXM2-32GB", None),
        ("NVIDIA H100", Some(4.5)),
    ];

    #[test]
    fn the_shipped_table_is_the_seeds() {
        let table = PriceTable::defaults().unwrap();
        for (model, price) in MODELS {
            assert_eq!(table.price(model), *price, "{model}");
        }
        assert_eq!(table.idle_below_percent, 10.0);
        let names: Vec<&str> = table.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["A100", "H100", "H200", "L40S", "RTX 4090"]);
    }

    #[test]
    fn patterns_are_anchored_like_promql() {
        let table = PriceTable::parse("t", "models:\n  - {name: X, match: 'H100', dollars_per_hour: 1}\n").unwrap();
        assert_eq!(table.price("H100"), Some(1.0));
        assert_eq!(table.price("NVIDIA H100"), None, "not a substring match");
    }

    #[test]
    fn a_config_map_changes_prices_and_adds_models_ahead() {
        let mut table = PriceTable::defaults().unwrap();
        table
            .overlay(
                "ConfigMap gpu-telemetry/gpu-prices",
                "idle_below_percent: 5\nmodels:\n  - {name: h100, dollars_per_hour: 2.25}\n  - {name: V100, match: 'Tesla V100.*', dollars_per_hour: 1.1}\n  - {name: A100 40GB, match: 'NVIDIA A100.*40GB', dollars_per_hour: 2}\n",
            )
            .unwrap();
        assert_eq!(table.price("NVIDIA H100 80GB HBM3"), Some(2.25));
        assert_eq!(table.price("Tesla V100-SXM2-32GB"), Some(1.1));
        assert_eq!(table.price("NVIDIA A100-SXM4-40GB"), Some(2.0), "a new entry goes ahead of the defaults");
        assert_eq!(table.price("NVIDIA A100-SXM4-80GB"), Some(3.5));
        assert_eq!(table.idle_below_percent, 5.0);
        assert_eq!(table.lookup("NVIDIA H100").unwrap().origin, "ConfigMap gpu-telemetry/gpu-prices");
    }

    #[test]
    fn a_flag_changes_an_entry_or_adds_a_substring_match() {
        let mut table = PriceTable::defaults().unwrap();
        table.apply_flag("H100=4").unwrap();
        table.apply_flag("Tesla V100=$2.1").unwrap();
        table.apply_flag("a.b=1").unwrap();
        assert_eq!(table.price("NVIDIA H100 80GB HBM3"), Some(4.0));
        assert_eq!(table.price("Tesla V100-SXM2-32GB"), Some(2.1));
        assert_eq!(table.price("axb"), None, "a flag's name is literal text, not a pattern");
        assert_eq!(table.lookup("NVIDIA H100").unwrap().origin, "--price");
    }

    #[test]
    fn bad_input_is_refused_naming_what_was_wrong() {
        let cases: &[(&str, &str)] = &[
            ("models: [", "cm: "),
            (
                "models:\n  - {name: X, match: '(', dollars_per_hour: 1}\n",
                "model \"X\": match \"(\" is not a regular expression",
            ),
            ("models:\n  - {name: X, match: 'x', dollars_per_hour: -1}\n", "model \"X\": -1 is not a price"),
            ("models:\n  - {name: X, match: 'x', dollars_per_hour: .nan}\n", "model \"X\": NaN is not a price"),
            ("models:\n  - {name: X, dollars_per_hour: 1}\n", "model \"X\" has no match"),
            (
                "models:\n  - {name: X, match: x, dollars_per_hour: 1}\n  - {name: x, match: y, dollars_per_hour: 1}\n",
                "appears twice",
            ),
            ("idle_below_percent: 101\n", "idle_below_percent 101 is outside 0 to 100"),
            ("models:\n  - {name: X, match: x, price: 1}\n", "unknown field `price`"),
        ];
        for (text, wanted) in cases {
            let mut table = PriceTable::defaults().unwrap();
            let e = table.overlay("cm", text).unwrap_err().to_string();
            assert!(e.contains(wanted) && e.starts_with("cm: "), "{text}: {e}");
        }
        for bad in ["H100", "=3", "H100=", "H100=x", "H100=-1", "H100=inf"] {
            let e = PriceTable::defaults().unwrap().apply_flag(bad).unwrap_err();
            assert_eq!(e, PriceError::Flag { text: bad.into() });
            assert!(e.to_string().contains("expected NAME=DOLLARS"));
        }
    }
}
