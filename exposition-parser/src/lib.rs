//! The project's one parser of Prometheus exposition text: the text format 0.0.4 (the
//! adapter's scrapes of the exporters, and every test that reads `/metrics`) and
//! OpenMetrics 1.0 text, each as Prometheus reads it. Its verdicts are checked against
//! Prometheus's own parser test cases (`tests/reference_cases.rs`).
//!
//! **Which Prometheus.** Two Prometheus parsers read the text format: the server's
//! scrape parser (prometheus/prometheus `model/textparse/promparse.go`), and
//! prometheus/common `expfmt/text_parse.go`, which client libraries and tools that read
//! exporters use. They differ. Text mode (`text.rs`) takes the server's grammar, and
//! adds the refusals of expfmt that no server case contradicts: escapes other than
//! `\\`, `\"`, `\n`; a label named twice or `__name__`; a second HELP or TYPE, or TYPE
//! after samples; a `le`/`quantile` that is not a float; a negative histogram bucket or
//! count (`families.rs`). Where expfmt's cases need more than the server reads, it reads
//! that too: negative timestamps, and `gauge_histogram`/`gaugehistogram` as types.
//! Where the two disagree on an input, the server wins; one expfmt case truly cannot
//! match both: a last sample line without its `\n` (`testTextParseError_00`) is read,
//! as the server reads it (its own cases end so). Inputs neither suite covers follow the
//! server's grammar, not its lexer's accidents (a NUL at the start of a line does not
//! end the page here, and a metadata name must end at a blank). A `\r` before `\n` is
//! not a line end in either parser, so CRLF pages are refused.
//!
//! OpenMetrics mode (`openmetrics.rs`) follows the server's
//! `model/textparse/openmetricsparse.go`: a page must end with `# EOF` and hold nothing
//! after it; a page without it was cut short and is refused ([`Error::MissingEof`]), so a
//! caller reading a page in pieces uses [`Parser`] and calls [`Parser::finish`] at its
//! end. Like that parser it does not check the OpenMetrics rules that span lines
//! (family order, `_total`, `_created`, bucket order, exemplar sizes).
//!
//! It is written for untrusted input: it never panics, works on one line at a time, and
//! enforces [`Limits`] (body size, line length, sample count, labels per sample, label
//! value length, metric families). Like Prometheus, any malformed line fails the whole
//! payload, because a partial scrape could silently drop a pod's devices. Every line is
//! checked; only samples of the families the caller wants are materialised.

#![forbid(unsafe_code)]

mod cursor;
mod error;
mod families;
mod line;
mod number;
mod openmetrics;
mod parser;
mod text;

pub use error::{Error, Result};
pub use parser::Parser;

/// Which text format the payload claims to be (from the response `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4` (timestamps in milliseconds).
    PrometheusText,
    /// `application/openmetrics-text` (timestamps in seconds, `# EOF` terminator).
    OpenMetrics,
}

impl Format {
    /// Picks the format from a `Content-Type` header value.
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        match content_type {
            Some(ct) if ct.trim_start().to_ascii_lowercase().starts_with("application/openmetrics-text") => {
                Format::OpenMetrics
            }
            _ => Format::PrometheusText,
        }
    }
}

/// Bounds on what one payload may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted payload, in bytes.
    pub max_bytes: usize,
    /// Longest accepted line, in bytes.
    pub max_line_bytes: usize,
    /// Most samples (all families, wanted or not).
    pub max_samples: usize,
    /// Most labels on one sample.
    pub max_labels: usize,
    /// Longest label value (or quoted name), in bytes.
    pub max_label_value_bytes: usize,
    /// Most metric families a text payload names (in HELP, TYPE and sample lines), for
    /// the rules that span lines. The exporters' pages name under a hundred.
    pub max_families: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 20,
            max_line_bytes: 64 << 10,
            max_samples: 500_000,
            max_labels: 64,
            max_label_value_bytes: 4096,
            max_families: 20_000,
        }
    }
}

/// One parsed sample of a wanted family.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels in the order they appeared.
    pub labels: Vec<(String, String)>,
    /// The value (may be NaN or infinite; callers decide what to serve).
    pub value: f64,
    /// Sample timestamp in milliseconds since the epoch, if the exposition carried one
    /// (an OpenMetrics one past the range of `i64` milliseconds saturates).
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of a label, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Parses a whole payload, keeping samples of families for which `wanted(name)` is true.
pub fn parse(body: &[u8], format: Format, limits: &Limits, wanted: impl Fn(&str) -> bool) -> Result<Vec<Sample>> {
    if body.len() > limits.max_bytes {
        return Err(Error::TooLarge { size: body.len(), limit: limits.max_bytes });
    }
    let mut parser = Parser::new(format, *limits);
    let mut out = Vec::new();
    // A final `\n` ends the last line; it does not start another.
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    if !body.is_empty() {
        for raw in body.split(|b| *b == b'\n') {
            if let Some(sample) = parser.line(raw, &wanted)? {
                out.push(sample);
            }
        }
    }
    parser.finish()?;
    Ok(out)
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
pub fn is_metric_name(s: &str) -> bool {
    let mut chars = s.bytes();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`
pub fn is_label_name(s: &str) -> bool {
    let mut chars = s.bytes();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}
