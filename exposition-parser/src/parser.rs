//! The parser proper: a payload read one line at a time, with the limits, the UTF-8
//! rule, `# EOF`, and the rules every sample obeys in both formats (no label given
//! twice, no `__name__` label), around the line grammars of [`crate::text`] and
//! [`crate::openmetrics`] and the family rules of [`crate::families`].

use crate::cursor::Cursor;
use crate::error::{Error, Result, syntax};
use crate::families::Families;
use crate::line::{Line, Parsed};
use crate::{Format, Limits, Sample, openmetrics, text};

/// A payload read one line at a time, for callers that receive it in pieces (for
/// whole payloads, [`crate::parse`] does the splitting). Feed every line, in order,
/// without its `\n`, then call [`Parser::finish`].
pub struct Parser {
    format: Format,
    limits: Limits,
    lines: usize,
    bytes: usize,
    samples: usize,
    ended: bool,
    families: Families,
}

impl Parser {
    /// A parser of a payload in `format`, refused past `limits`.
    pub fn new(format: Format, limits: Limits) -> Self {
        Self {
            format,
            limits,
            lines: 0,
            bytes: 0,
            samples: 0,
            ended: false,
            families: Families::new(limits.max_families),
        }
    }

    /// Whether the payload has ended (OpenMetrics `# EOF`): any further line is refused,
    /// and a caller reading from a stream may stop.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Lines read so far.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Parses the next line (without its `\n`). Returns its sample if it is a sample of
    /// a family for which `wanted(name)` is true; every line is checked either way.
    pub fn line(&mut self, raw: &[u8], wanted: impl Fn(&str) -> bool) -> Result<Option<Sample>> {
        self.lines += 1;
        let lineno = self.lines;
        let offset = self.bytes;
        self.bytes = self.bytes.saturating_add(raw.len()).saturating_add(1);
        let size = offset.saturating_add(raw.len());
        if size > self.limits.max_bytes {
            return Err(Error::TooLarge { size, limit: self.limits.max_bytes });
        }
        if raw.len() > self.limits.max_line_bytes {
            return Err(Error::Limit { line: lineno, what: "line length", limit: self.limits.max_line_bytes });
        }
        if self.ended {
            return Err(syntax(lineno, 1, "unexpected data after '# EOF'"));
        }
        let text_format = self.format == Format::PrometheusText;
        if text_format && text::is_plain_comment(raw) {
            return Ok(None);
        }
        let line = std::str::from_utf8(raw).map_err(|e| Error::NotUtf8(offset + e.valid_up_to()))?;
        let mut cur = Cursor::new(line, lineno);
        let parsed = match self.format {
            Format::PrometheusText => text::line(&mut cur, &self.limits)?,
            Format::OpenMetrics => openmetrics::line(&mut cur, &self.limits)?,
        };
        match parsed {
            Line::Skip | Line::Unit => Ok(None),
            Line::Eof => {
                self.ended = true;
                Ok(None)
            }
            Line::Help { name, has_text } => {
                if text_format && has_text {
                    self.families.help(&name, &cur)?;
                }
                Ok(None)
            }
            Line::Type { name, kind } => {
                if text_format {
                    self.families.declare(&name, kind, &cur)?;
                }
                Ok(None)
            }
            Line::Sample(sample) => {
                self.samples += 1;
                if self.samples > self.limits.max_samples {
                    return Err(Error::Limit { line: lineno, what: "sample count", limit: self.limits.max_samples });
                }
                check_labels(&sample, &cur)?;
                if text_format {
                    self.families.sample(&sample, &cur)?;
                }
                Ok(wanted(&sample.name).then(|| owned(sample)))
            }
        }
    }

    /// The payload has been read to its end: an OpenMetrics one must have ended with
    /// `# EOF`, or it was cut short.
    pub fn finish(&self) -> Result<()> {
        if self.format == Format::OpenMetrics && !self.ended {
            return Err(Error::MissingEof { lines: self.lines });
        }
        Ok(())
    }
}

/// No label twice (prometheus/common `expfmt/text_parse.go`; the Prometheus server
/// refuses such a series at its scrape), and no `__name__` label (reserved: the name is
/// the metric's).
fn check_labels(sample: &Parsed<'_>, cur: &Cursor<'_>) -> Result<()> {
    for (i, label) in sample.labels.iter().enumerate() {
        if label.name == "__name__" {
            return Err(cur.err_at(label.column, "label name \"__name__\" is reserved"));
        }
        if sample.labels.iter().take(i).any(|earlier| earlier.name == label.name) {
            return Err(cur.err_at(label.column, format!("duplicate label {:?}", label.name)));
        }
    }
    Ok(())
}

fn owned(sample: Parsed<'_>) -> Sample {
    Sample {
        name: sample.name.into_owned(),
        labels: sample.labels.into_iter().map(|l| (l.name.into_owned(), l.value.into_owned())).collect(),
        value: sample.value,
        timestamp_ms: sample.timestamp_ms,
    }
}
