//! What one line says, once its grammar is checked: the shared result of the text
//! ([`crate::text`]) and OpenMetrics ([`crate::openmetrics`]) line grammars, before
//! the rules that span lines ([`crate::families`]) and the caller's filter apply.

use std::borrow::Cow;

/// A metric family's type, as a `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    /// `untyped` (text) or `unknown` (OpenMetrics).
    Untyped,
    Info,
    StateSet,
}

impl Kind {
    /// Whether samples of the family carry `le` buckets and `_count`.
    pub(crate) fn is_histogram(self) -> bool {
        matches!(self, Kind::Histogram | Kind::GaugeHistogram)
    }
}

/// One label of a sample, with the column of its name for errors.
#[derive(Debug)]
pub(crate) struct Label<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) value: Cow<'a, str>,
    pub(crate) column: usize,
}

/// A sample line.
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) labels: Vec<Label<'a>>,
    pub(crate) value: f64,
    /// 1-based column of the value, for errors about it.
    pub(crate) value_column: usize,
    pub(crate) timestamp_ms: Option<i64>,
}

/// A line, classified.
#[derive(Debug)]
pub(crate) enum Line<'a> {
    /// A blank line or a comment.
    Skip,
    /// `# HELP name [text]`; `has_text` when anything but blanks follows the name.
    Help {
        name: Cow<'a, str>,
        has_text: bool,
    },
    /// `# TYPE name kind`.
    Type {
        name: Cow<'a, str>,
        kind: Kind,
    },
    /// `# UNIT name unit` (OpenMetrics; checked by its grammar).
    Unit,
    /// `# EOF` (OpenMetrics).
    Eof,
    Sample(Parsed<'a>),
}
