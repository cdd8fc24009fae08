//! The project's one parser of the Prometheus text exposition format 0.0.4 (the
//! adapter's scrapes of the exporters, and every test that reads `/metrics`). It also
//! tolerates OpenMetrics 1.0 text (`# EOF`, `# UNIT`, timestamps in seconds, exemplars) and quoted
//! UTF-8 metric and label names.
//!
//! It is written for untrusted input: it never panics, works on one line at a time, and
//! enforces [`Limits`] (body size, line length, sample count, labels per sample, label value
//! length). Like Prometheus, any malformed line fails the whole payload, because a partial
//! scrape could silently drop a pod's devices. Only the families the caller wants are
//! materialised; other lines are checked for a valid metric name and skipped.

#![forbid(unsafe_code)]

use std::fmt;

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
    /// Longest label value, in bytes.
    pub max_label_value_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 20,
            max_line_bytes: 64 << 10,
            max_samples: 500_000,
            max_labels: 64,
            max_label_value_bytes: 4096,
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
    /// Sample timestamp in milliseconds since the epoch, if the exposition carried one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of a label, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Why a payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The payload is larger than [`Limits::max_bytes`].
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Payload size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The payload is not UTF-8.
    #[error("payload is not valid UTF-8 (at byte {0})")]
    NotUtf8(usize),
    /// A limit other than size was exceeded.
    #[error("line {line}: {what} exceeds the limit of {limit}")]
    Limit {
        /// 1-based line number.
        line: usize,
        /// Which limit.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A line does not follow the grammar.
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// 1-based byte column.
        column: usize,
        /// What went wrong.
        message: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Parses a payload, keeping samples of families for which `wanted(name)` is true.
pub fn parse(body: &[u8], format: Format, limits: &Limits, wanted: impl Fn(&str) -> bool) -> Result<Vec<Sample>> {
    if body.len() > limits.max_bytes {
        return Err(Error::TooLarge { size: body.len(), limit: limits.max_bytes });
    }
    let text = std::str::from_utf8(body).map_err(|e| Error::NotUtf8(e.valid_up_to()))?;
    let mut out = Vec::new();
    let mut samples = 0usize;
    for (idx, raw) in text.split('\n').enumerate() {
        let lineno = idx + 1;
        if raw.len() > limits.max_line_bytes {
            return Err(Error::Limit { line: lineno, what: "line length", limit: limits.max_line_bytes });
        }
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            if check_comment(rest, lineno)? == Comment::Eof {
                break;
            }
            continue;
        }
        samples += 1;
        if samples > limits.max_samples {
            return Err(Error::Limit { line: lineno, what: "sample count", limit: limits.max_samples });
        }
        let mut cur = Cursor { line, pos: 0, lineno };
        if let Some(sample) = cur.sample(format, limits, &wanted)? {
            out.push(sample);
        }
    }
    Ok(out)
}

#[derive(Debug, PartialEq, Eq)]
enum Comment {
    Other,
    Eof,
}

/// Checks a `#` line. `# EOF` ends the payload (OpenMetrics; harmless in 0.0.4 text).
fn check_comment(rest: &str, lineno: usize) -> Result<Comment> {
    let body = rest.trim_start_matches([' ', '\t']);
    if body.trim_end() == "EOF" {
        return Ok(Comment::Eof);
    }
    let mut parts = body.splitn(3, [' ', '\t']);
    if parts.next() != Some("TYPE") {
        return Ok(Comment::Other);
    }
    let name = parts.next().unwrap_or_default();
    let kind = parts.next().unwrap_or_default().trim();
    let quoted = name.len() >= 2 && name.starts_with('"') && name.ends_with('"');
    if !(is_metric_name(name) || quoted) {
        return Err(syntax(lineno, 1, format!("invalid metric name {name:?} in TYPE line")));
    }
    const KINDS: [&str; 9] =
        ["counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset", "gaugehistogram"];
    if !KINDS.contains(&kind) {
        return Err(syntax(lineno, 1, format!("unknown metric type {kind:?} in TYPE line")));
    }
    Ok(Comment::Other)
}

fn syntax(line: usize, column: usize, message: String) -> Error {
    Error::Syntax { line, column, message }
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

struct Cursor<'a> {
    line: &'a str,
    pos: usize,
    lineno: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: impl fmt::Display) -> Error {
        syntax(self.lineno, self.pos + 1, message.to_string())
    }

    fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.pos += 1;
        }
        // Only ASCII bytes are accepted by the predicates used, so this is a char boundary.
        self.line.get(start..self.pos).unwrap_or_default()
    }

    fn expect(&mut self, b: u8, what: &str) -> Result<()> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(format!("expected {what}, found {}", self.found())))
        }
    }

    fn found(&self) -> String {
        match self.line.get(self.pos..).and_then(|s| s.chars().next()) {
            Some(c) => format!("{c:?}"),
            None => "end of line".to_owned(),
        }
    }

    /// A double-quoted string with `\\`, `\"` and `\n` escapes.
    fn quoted(&mut self, max: usize) -> Result<String> {
        self.expect(b'"', "'\"'")?;
        let mut out = String::new();
        let rest = self.line.get(self.pos..).unwrap_or_default();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((j, other)) => {
                        self.pos += j;
                        return Err(self.err(format!("invalid escape sequence '\\{other}'")));
                    }
                    None => break,
                },
                c => out.push(c),
            }
            if out.len() > max {
                self.pos += i;
                return Err(Error::Limit { line: self.lineno, what: "label value length", limit: max });
            }
        }
        self.pos = self.line.len();
        Err(self.err("unterminated quoted string"))
    }

    fn sample(&mut self, format: Format, limits: &Limits, wanted: &impl Fn(&str) -> bool) -> Result<Option<Sample>> {
        // Metric name: bare, or quoted as the first item inside the braces.
        let mut name = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':').to_owned();
        let mut blanks = self.skip_blanks();
        let braces = self.peek() == Some(b'{');
        if name.is_empty() && !braces {
            return Err(self.err(format!("expected metric name, found {}", self.found())));
        }
        if !name.is_empty() && !is_metric_name(&name) {
            return Err(syntax(self.lineno, 1, format!("invalid metric name {name:?}")));
        }
        let mut labels = Vec::new();
        if braces {
            self.pos += 1;
            self.skip_blanks();
            if name.is_empty() {
                if self.peek() != Some(b'"') {
                    return Err(self.err(format!("expected metric name, found {}", self.found())));
                }
                name = self.quoted(limits.max_label_value_bytes)?;
                self.skip_blanks();
                if self.peek() == Some(b',') {
                    self.pos += 1;
                } else if self.peek() != Some(b'}') {
                    return Err(self.err(format!("expected ',' or '}}', found {}", self.found())));
                }
            }
            if !wanted(&name) {
                return Ok(None);
            }
            self.labels(limits, &mut labels)?;
            blanks = self.skip_blanks();
        } else if !wanted(&name) {
            return Ok(None);
        }
        if blanks == 0 {
            return Err(self.err(format!("expected whitespace before value, found {}", self.found())));
        }
        let value_start = self.pos;
        let token = self.take_while(|c| c != b' ' && c != b'\t');
        let value = parse_value(token)
            .ok_or_else(|| syntax(self.lineno, value_start + 1, format!("invalid value {token:?}")))?;
        let mut timestamp_ms = None;
        if self.skip_blanks() > 0 && !matches!(self.peek(), None | Some(b'#')) {
            let ts_start = self.pos;
            let token = self.take_while(|c| c != b' ' && c != b'\t');
            timestamp_ms = Some(
                parse_timestamp(token, format)
                    .ok_or_else(|| syntax(self.lineno, ts_start + 1, format!("invalid timestamp {token:?}")))?,
            );
            self.skip_blanks();
        }
        match self.peek() {
            None => {}
            // An OpenMetrics exemplar (`# {trace_id="..."} 1.0`): accepted and ignored.
            Some(b'#') => {}
            Some(_) => return Err(self.err(format!("unexpected {} after sample", self.found()))),
        }
        Ok(Some(Sample { name, labels, value, timestamp_ms }))
    }

    fn labels(&mut self, limits: &Limits, labels: &mut Vec<(String, String)>) -> Result<()> {
        loop {
            self.skip_blanks();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(());
            }
            let key_pos = self.pos;
            let key = if self.peek() == Some(b'"') {
                self.quoted(limits.max_label_value_bytes)?
            } else {
                let k = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_').to_owned();
                if !is_label_name(&k) {
                    return Err(self.err(format!("expected label name, found {}", self.found())));
                }
                k
            };
            self.skip_blanks();
            self.expect(b'=', "'='")?;
            self.skip_blanks();
            let value = self.quoted(limits.max_label_value_bytes)?;
            if labels.iter().any(|(k, _)| *k == key) {
                return Err(syntax(self.lineno, key_pos + 1, format!("duplicate label {key:?}")));
            }
            labels.push((key, value));
            if labels.len() > limits.max_labels {
                return Err(Error::Limit { line: self.lineno, what: "label count", limit: limits.max_labels });
            }
            self.skip_blanks();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.err(format!("expected ',' or '}}', found {}", self.found()))),
            }
        }
    }
}

/// Go's `strconv.ParseFloat` as Prometheus uses it: decimal and exponent forms plus
/// `NaN`, `Inf`, `+Inf`, `-Inf` (any case).
fn parse_value(token: &str) -> Option<f64> {
    if token.is_empty() || token.len() > 64 {
        return None;
    }
    let unsigned = token.strip_prefix(['+', '-']).unwrap_or(token);
    match unsigned.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => {
            return Some(if token.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY });
        }
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    // Rust also accepts forms like "infinity" spelled oddly; restrict to plain decimals.
    if !unsigned.bytes().all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-')) {
        return None;
    }
    token.parse::<f64>().ok()
}

fn parse_timestamp(token: &str, format: Format) -> Option<i64> {
    match format {
        Format::PrometheusText => token.parse::<i64>().ok(),
        Format::OpenMetrics => {
            let secs = parse_value(token)?;
            let ms = (secs * 1000.0).round();
            (ms.is_finite() && ms.abs() < 9.0e18).then_some(ms as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(body: &str) -> Result<Vec<Sample>> {
        parse(body.as_bytes(), Format::PrometheusText, &Limits::default(), |_| true)
    }

    #[test]
    fn parses_exporter_families() {
        let body = "# HELP gpu_utilization GPU utilization in percent.\n\
            # TYPE gpu_utilization gauge\n\
            gpu_utilization{node=\"gpu-node-1\",gpu=\"0\",uuid=\"GPU-a\",model=\"NVIDIA H100 80GB HBM3\",namespace=\"ai-inference\",pod=\"inference-pool-0\",container=\"inference\"} 85\n\
            gpu_utilization{node=\"gpu-node-1\",gpu=\"1\",uuid=\"GPU-b\",model=\"NVIDIA H100 80GB HBM3\"} 12.5 1700000000000\n";
        let samples = all(body).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].name, "gpu_utilization");
        assert_eq!(samples[0].label("pod"), Some("inference-pool-0"));
        assert_eq!(samples[0].value, 85.0);
        assert_eq!(samples[0].timestamp_ms, None);
        assert_eq!(samples[1].value, 12.5);
        assert_eq!(samples[1].timestamp_ms, Some(1_700_000_000_000));
    }

    #[test]
    fn keeps_only_wanted_families() {
        let body = "a 1\nb{x=\"y\"} 2\nc 3\n";
        let samples = parse(body.as_bytes(), Format::PrometheusText, &Limits::default(), |n| n == "b").unwrap();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].labels, vec![("x".to_owned(), "y".to_owned())]);
    }

    #[test]
    fn escapes_special_values_and_spacing() {
        let body = "m{a=\"q\\\"uote\",b=\"back\\\\slash\",c=\"new\\nline\", } +Inf\r\n\
                    m { a = \"x\" }   NaN  \n\
                    m -1.5e3\n\
                    m{} -Inf\n";
        let s = all(body).unwrap();
        assert_eq!(s[0].label("a"), Some("q\"uote"));
        assert_eq!(s[0].label("b"), Some("back\\slash"));
        assert_eq!(s[0].label("c"), Some("new\nline"));
        assert!(s[0].value.is_infinite() && s[0].value > 0.0);
        assert!(s[1].value.is_nan());
        assert_eq!(s[2].value, -1500.0);
        assert!(s[3].value.is_infinite() && s[3].value < 0.0);
    }

    #[test]
    fn tolerates_openmetrics() {
        let body = "# TYPE gpu_utilization gauge\n# UNIT gpu_utilization percent\n\
                    gpu_utilization{gpu=\"0\"} 50 1700000000.5 # {trace_id=\"abc\"} 1.0\n\
                    {\"gpu.utilization\",gpu=\"1\"} 7\n# EOF\ngarbage after eof\n";
        let s = parse(body.as_bytes(), Format::OpenMetrics, &Limits::default(), |_| true).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].timestamp_ms, Some(1_700_000_000_500));
        assert_eq!(s[1].name, "gpu.utilization");
        assert_eq!(s[1].label("gpu"), Some("1"));
        assert_eq!(Format::from_content_type(Some("application/openmetrics-text; version=1.0.0")), Format::OpenMetrics);
        assert_eq!(Format::from_content_type(Some("text/plain; version=0.0.4")), Format::PrometheusText);
        assert_eq!(Format::from_content_type(None), Format::PrometheusText);
    }

    #[test]
    fn malformed_lines_fail_the_payload_with_position() {
        let cases: &[(&str, &str)] = &[
            ("m{a=\"x\"", "expected ',' or '}'"),
            ("m{a=x} 1", "expected '\"'"),
            ("m{a=\"x\"}", "expected whitespace"),
            ("m{a=\"x\"} 1..2", "invalid value"),
            ("m{a=\"x\"}1", "expected whitespace"),
            ("m 1 abc", "invalid timestamp"),
            ("m 1 2 3", "unexpected"),
            ("m{a=\"x\",a=\"y\"} 1", "duplicate label"),
            ("m{a=\"\\q\"} 1", "invalid escape"),
            ("m{a=\"open} 1", "unterminated"),
            ("9m 1", "invalid metric name"),
            ("m{0a=\"x\"} 1", "expected label name"),
            ("m 0x10", "invalid value"),
            ("# TYPE m wrongtype", "unknown metric type"),
            ("# TYPE 9m gauge", "invalid metric name"),
            ("=1", "expected metric name"),
        ];
        for (body, needle) in cases {
            match all(body) {
                Ok(s) => panic!("{body:?} parsed: {s:?}"),
                Err(e) => assert!(e.to_string().contains(needle), "{body:?}: {e}"),
            }
        }
        match all("ok 1\nm{a=x} 1\n") {
            Err(Error::Syntax { line, column, .. }) => assert_eq!((line, column), (2, 5)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn limits_are_enforced() {
        let limits =
            Limits { max_bytes: 100, max_line_bytes: 30, max_samples: 2, max_labels: 2, max_label_value_bytes: 5 };
        let p = |b: &str| parse(b.as_bytes(), Format::PrometheusText, &limits, |_| true);
        assert!(matches!(p(&"m 1\n".repeat(30)), Err(Error::TooLarge { .. })));
        assert!(matches!(
            p(&format!("m{{a=\"{}\"}} 1", "x".repeat(40))),
            Err(Error::Limit { what: "line length", .. })
        ));
        assert!(matches!(p("a 1\nb 1\nc 1\n"), Err(Error::Limit { what: "sample count", .. })));
        assert!(matches!(p("m{a=\"1\",b=\"2\",c=\"3\"} 1"), Err(Error::Limit { what: "label count", .. })));
        assert!(matches!(p("m{a=\"123456\"} 1"), Err(Error::Limit { what: "label value length", .. })));
        assert!(matches!(
            parse(&[b'm', b' ', 0xff], Format::PrometheusText, &limits, |_| true),
            Err(Error::NotUtf8(2))
        ));
    }

    #[test]
    fn comments_and_blank_lines_are_skipped() {
        let s = all("\n# just a comment\n#\n# HELP m help with \"quotes\"\n\nm 1\n").unwrap();
        assert_eq!(s.len(), 1);
    }
}
