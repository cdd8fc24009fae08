//! The Prometheus text format 0.0.4, one line at a time, as the Prometheus server
//! scrapes it (prometheus/prometheus `model/textparse/promlex.l` and `promparse.go`),
//! made stricter where prometheus/common's `expfmt/text_parse.go` refuses and no scrape
//! case accepts (see the crate's header for the list):
//!
//! - leading blanks, blank lines and any `#` line other than `# HELP`/`# TYPE` are
//!   skipped (`#EOF` and `# EOF` are comments here, not an end);
//! - `# HELP name [text]`, `# TYPE name type` with one blank before the type and
//!   nothing after it; a name is bare or quoted;
//! - `name[{labels}] value [timestamp]`, or `{"name",labels} value [timestamp]`; blanks
//!   may surround the braces, the equals signs and the commas, the comma between two
//!   labels may be left out (as `promparse.go`'s `parseLVals` allows), and the value may
//!   follow the name or the `}` without a blank (`m{a="b"}1`, read by both parsers);
//! - quoted strings know `\\`, `\"` and `\n` only; the timestamp is an integer of
//!   milliseconds, signed (expfmt reads `-2`, and its cases expect it read).

use std::borrow::Cow;

use crate::Limits;
use crate::cursor::{Cursor, Escapes, Quoted};
use crate::error::Result;
use crate::line::{Kind, Label, Line, Parsed};
use crate::number::{parse_float, parse_int};

fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

fn without_blanks(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| is_blank(**c)).count();
    b.get(n..).unwrap_or_default()
}

/// Whether a raw line is a plain comment (which need not be UTF-8): `#` followed by
/// anything but blanks and then `HELP` or `TYPE` and a blank.
pub(crate) fn is_plain_comment(raw: &[u8]) -> bool {
    let Some(rest) = without_blanks(raw).strip_prefix(b"#") else { return false };
    if !rest.first().copied().is_some_and(is_blank) {
        return true;
    }
    let rest = without_blanks(rest);
    let keyword = rest.starts_with(b"HELP") || rest.starts_with(b"TYPE");
    !(keyword && rest.get(4).copied().is_some_and(is_blank))
}

/// Classifies and checks one line (without its `\n`).
pub(crate) fn line<'a>(cur: &mut Cursor<'a>, limits: &Limits) -> Result<Line<'a>> {
    cur.skip_blanks();
    if cur.at_end() {
        return Ok(Line::Skip);
    }
    if cur.eat(b'#') {
        return metadata(cur, limits);
    }
    sample(cur, limits).map(Line::Sample)
}

fn metadata<'a>(cur: &mut Cursor<'a>, limits: &Limits) -> Result<Line<'a>> {
    if cur.skip_blanks() == 0 {
        return Ok(Line::Skip);
    }
    let help = if cur.eat_str("HELP") {
        true
    } else if cur.eat_str("TYPE") {
        false
    } else {
        return Ok(Line::Skip);
    };
    if cur.skip_blanks() == 0 {
        return Ok(Line::Skip);
    }
    let keyword = if help { "HELP" } else { "TYPE" };
    let name: Cow<'a, str> = if cur.peek() == Some(b'"') {
        cur.quoted(Quoted::Name, Escapes::Strict, limits.max_label_value_bytes)?
    } else {
        let name = cur.bare_metric_name();
        if name.is_empty() {
            return Err(cur.err(format!("expected metric name after {keyword}, found {}", cur.found())));
        }
        name.into()
    };
    if !cur.at_end() && !cur.peek().is_some_and(is_blank) {
        return Err(cur.err(format!("invalid metric name in {keyword} line: unexpected {}", cur.found())));
    }
    if help {
        let has_text = !cur.take_rest().trim_matches([' ', '\t']).is_empty();
        return Ok(Line::Help { name, has_text });
    }
    // One blank, then the type and nothing else (promparse.go keeps all but the first
    // character after the name).
    if cur.at_end() {
        return Err(cur.err("expected the type after the metric name in TYPE line"));
    }
    cur.bump();
    let at = cur.column();
    let word = cur.take_rest();
    let kind = match word {
        "counter" => Kind::Counter,
        "gauge" => Kind::Gauge,
        "histogram" => Kind::Histogram,
        "summary" => Kind::Summary,
        "untyped" => Kind::Untyped,
        // Not in promparse.go; expfmt reads both spellings, and its cases expect them read.
        "gauge_histogram" | "gaugehistogram" => Kind::GaugeHistogram,
        _ => return Err(cur.err_at(at, format!("unknown metric type {word:?} in TYPE line"))),
    };
    Ok(Line::Type { name, kind })
}

fn sample<'a>(cur: &mut Cursor<'a>, limits: &Limits) -> Result<Parsed<'a>> {
    let start = cur.column();
    let bare = cur.bare_metric_name();
    let mut name: Option<Cow<'a, str>> = None;
    if !bare.is_empty() {
        name = Some(bare.into());
        cur.skip_blanks();
    } else if cur.peek() != Some(b'{') {
        return Err(cur.err(format!("expected metric name, found {}", cur.found())));
    }
    // Room for an exporter's usual label set, so that it is not grown label by label.
    let mut labels = Vec::with_capacity(16);
    if cur.peek() == Some(b'{') {
        label_set(cur, limits, &mut name, &mut labels)?;
        cur.skip_blanks();
    }
    let name = name.ok_or_else(|| cur.err_at(start, "metric name not set"))?;
    if cur.at_end() {
        return Err(cur.err("expected value after metric, found end of line"));
    }
    let value_column = cur.column();
    let token = cur.take_while(|c| !is_blank(c));
    let value = parse_float(token).ok_or_else(|| cur.err_at(value_column, format!("invalid value {token:?}")))?;
    let mut timestamp_ms = None;
    if cur.skip_blanks() > 0 && !cur.at_end() {
        let at = cur.column();
        let token = cur.take_while(|c| !is_blank(c));
        timestamp_ms = Some(
            parse_int(token)
                .ok_or_else(|| cur.err_at(at, format!("invalid timestamp {token:?} (integer milliseconds)")))?,
        );
        cur.skip_blanks();
    }
    if !cur.at_end() {
        return Err(cur.err(format!("unexpected {} after sample", cur.found())));
    }
    Ok(Parsed { name, labels, value, value_column, timestamp_ms })
}

/// `{...}`: labels, and the quoted metric name if the line has no bare one.
fn label_set<'a>(
    cur: &mut Cursor<'a>,
    limits: &Limits,
    name: &mut Option<Cow<'a, str>>,
    labels: &mut Vec<Label<'a>>,
) -> Result<()> {
    cur.expect(b'{', "'{'")?;
    loop {
        cur.skip_blanks();
        if cur.eat(b'}') {
            return Ok(());
        }
        let column = cur.column();
        let quoted = cur.peek() == Some(b'"');
        let key: Cow<'a, str> = if quoted {
            cur.quoted(Quoted::Name, Escapes::Strict, limits.max_label_value_bytes)?
        } else {
            let key = cur.bare_label_name();
            if key.is_empty() {
                return Err(cur.err(format!("expected label name, found {}", cur.found())));
            }
            key.into()
        };
        cur.skip_blanks();
        if quoted && matches!(cur.peek(), Some(b',' | b'}')) {
            if name.is_some() {
                return Err(cur.err_at(column, "metric name given twice"));
            }
            *name = Some(key);
            cur.eat(b',');
            continue;
        }
        cur.expect(b'=', "'=' after label name")?;
        cur.skip_blanks();
        if cur.peek() != Some(b'"') {
            return Err(cur.err(format!("expected '\"' at start of label value, found {}", cur.found())));
        }
        let value = cur.quoted(Quoted::Value, Escapes::Strict, limits.max_label_value_bytes)?;
        labels.push(Label { name: key, value, column });
        if labels.len() > limits.max_labels {
            return Err(cur.limit("label count", limits.max_labels));
        }
        cur.skip_blanks();
        cur.eat(b',');
    }
}
