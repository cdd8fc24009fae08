//! The rules of the text format that span lines, from prometheus/common
//! `expfmt/text_parse.go` (the parser of client libraries and of tools that read
//! exporters, like the metrics adapter). The Prometheus server's text parser checks
//! none of them; the prometheus/common cases expect each refused, and no server case
//! contradicts them:
//!
//! - a family has at most one `# HELP` with text and one `# TYPE`, and its `# TYPE`
//!   comes before its samples (a sample fixes an untyped family's type);
//! - in a summary, `quantile` is a float; in a histogram, `le` is a float, and neither a
//!   bucket nor `_count` is negative.
//!
//! A sample or metadata line belongs to the family of its own name if one is known,
//! else to the summary whose `_count`/`_sum` it is, else to the histogram whose
//! `_count`/`_sum`/`_bucket` it is, else to a new family of its name (`setOrCreateCurrentMF`).
//!
//! Families are kept as keyed 64-bit hashes of their names (SipHash with a random key
//! per parse), so that memory does not follow the length of names an untrusted page
//! sends; their count is bounded by [`Limits::max_families`](crate::Limits).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use crate::cursor::Cursor;
use crate::error::Result;
use crate::line::{Kind, Parsed};
use crate::number::parse_float;

#[derive(Debug, Default, Clone, Copy)]
struct Family {
    kind: Option<Kind>,
    help: bool,
}

/// How a name relates to the family it was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The family's own name, or a histogram's `_bucket`.
    Own,
    /// A summary's or histogram's `_count`.
    Count,
    /// A summary's or histogram's `_sum`.
    Sum,
}

pub(crate) struct Families {
    keys: RandomState,
    table: HashMap<u64, Family>,
    max: usize,
}

impl Families {
    pub(crate) fn new(max: usize) -> Self {
        Self { keys: RandomState::new(), table: HashMap::new(), max }
    }

    fn kind_of(&self, name: &str) -> Option<Kind> {
        self.table.get(&self.keys.hash_one(name)).and_then(|f| f.kind)
    }

    /// The family `name` belongs to, created if none.
    fn resolve(&mut self, name: &str, cur: &Cursor<'_>) -> Result<(u64, Role)> {
        let own = self.keys.hash_one(name);
        if self.table.contains_key(&own) {
            return Ok((own, Role::Own));
        }
        let count = name.strip_suffix("_count").filter(|b| !b.is_empty());
        let sum = name.strip_suffix("_sum").filter(|b| !b.is_empty());
        let bucket = name.strip_suffix("_bucket").filter(|b| !b.is_empty());
        let summary = count.map(|b| (b, Role::Count)).or(sum.map(|b| (b, Role::Sum)));
        if let Some((base, role)) = summary.filter(|(b, _)| self.kind_of(b) == Some(Kind::Summary)) {
            return Ok((self.keys.hash_one(base), role));
        }
        let histogram = summary.or(bucket.map(|b| (b, Role::Own)));
        if let Some((base, role)) = histogram.filter(|(b, _)| self.kind_of(b).is_some_and(Kind::is_histogram)) {
            return Ok((self.keys.hash_one(base), role));
        }
        if self.table.len() >= self.max {
            return Err(cur.limit("metric family count", self.max));
        }
        self.table.insert(own, Family::default());
        Ok((own, Role::Own))
    }

    fn family(&mut self, key: u64) -> &mut Family {
        self.table.entry(key).or_default()
    }

    /// A `# HELP` line with text.
    pub(crate) fn help(&mut self, name: &str, cur: &Cursor<'_>) -> Result<()> {
        let (key, _) = self.resolve(name, cur)?;
        let family = self.family(key);
        if family.help {
            return Err(cur.err_at(1, format!("second HELP line for metric family of {name:?}")));
        }
        family.help = true;
        Ok(())
    }

    /// A `# TYPE` line.
    pub(crate) fn declare(&mut self, name: &str, kind: Kind, cur: &Cursor<'_>) -> Result<()> {
        let (key, _) = self.resolve(name, cur)?;
        let family = self.family(key);
        if family.kind.is_some() {
            return Err(
                cur.err_at(1, format!("second TYPE line for metric family of {name:?}, or TYPE after its samples"))
            );
        }
        family.kind = Some(kind);
        Ok(())
    }

    /// A sample line.
    pub(crate) fn sample(&mut self, sample: &Parsed<'_>, cur: &Cursor<'_>) -> Result<()> {
        let (key, role) = self.resolve(&sample.name, cur)?;
        let kind = *self.family(key).kind.get_or_insert(Kind::Untyped);
        let mut bucket = false;
        for label in &sample.labels {
            let float_label = match kind {
                Kind::Summary => "quantile",
                k if k.is_histogram() => "le",
                _ => continue,
            };
            if label.name != float_label {
                continue;
            }
            let Some(bound) = parse_float(&label.value) else {
                return Err(cur.err_at(
                    label.column,
                    format!("expected float as value for '{float_label}' label, found {:?}", label.value),
                ));
            };
            bucket = float_label == "le" && !bound.is_nan();
        }
        if kind.is_histogram() && sample.value < 0.0 {
            let what = match role {
                Role::Count => "count",
                Role::Own if bucket => "bucket population",
                _ => return Ok(()),
            };
            return Err(cur.err_at(sample.value_column, format!("negative {what} for histogram {:?}", sample.name)));
        }
        Ok(())
    }
}
