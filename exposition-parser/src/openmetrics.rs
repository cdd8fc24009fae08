//! OpenMetrics 1.0 text, one line at a time, as the Prometheus server scrapes it
//! (prometheus/prometheus `model/textparse/openmetricslex.l` and
//! `openmetricsparse.go`):
//!
//! - no blank lines, no leading blanks, no comments but `# HELP`, `# TYPE`, `# UNIT`
//!   and the final `# EOF`; every separator is exactly one space;
//! - `# HELP name text`, `# TYPE name type` (OpenMetrics type names), `# UNIT name unit`
//!   where the unit, if any, ends the name after a `_`; the space after the name is
//!   required even when the text is empty;
//! - `name[{labels}] value [timestamp] [# {labels} value [timestamp]]`, or
//!   `{"name",labels} ...`; no blanks inside the braces; labels separated by commas (a
//!   trailing one is allowed); timestamps in seconds, finite;
//! - quoted strings may hold any backslash pair (`\\`, `\"` and `\n` are decoded, the
//!   rest kept as written).

use std::borrow::Cow;

use crate::Limits;
use crate::cursor::{Cursor, Escapes, Quoted};
use crate::error::Result;
use crate::line::{Kind, Label, Line, Parsed};
use crate::number::{parse_float, seconds_to_ms};

/// Classifies and checks one line (without its `\n`).
pub(crate) fn line<'a>(cur: &mut Cursor<'a>, limits: &Limits) -> Result<Line<'a>> {
    match cur.peek() {
        None => Err(cur.err("blank line (OpenMetrics has none before '# EOF')")),
        Some(b'#') => metadata(cur, limits),
        Some(c) if c == b'{' || c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
            sample(cur, limits).map(Line::Sample)
        }
        Some(_) => Err(cur.err(format!("expected metric name, '{{' or '#', found {}", cur.found()))),
    }
}

fn metadata<'a>(cur: &mut Cursor<'a>, limits: &Limits) -> Result<Line<'a>> {
    cur.bump();
    if !cur.eat(b' ') {
        return Err(cur.err(format!("expected one space after '#', found {}", cur.found())));
    }
    if cur.rest() == "EOF" {
        return Ok(Line::Eof);
    }
    let keyword = ["HELP", "TYPE", "UNIT"].into_iter().find(|k| cur.rest().starts_with(k));
    let Some(keyword) = keyword.filter(|k| cur.eat_str(k) && cur.eat(b' ')) else {
        return Err(cur.err("expected HELP, TYPE, UNIT or EOF (OpenMetrics has no other comments)"));
    };
    let name: Cow<'a, str> = if cur.peek() == Some(b'"') {
        cur.quoted(Quoted::Name, Escapes::Any, limits.max_label_value_bytes)?
    } else {
        let name = cur.bare_metric_name();
        if name.is_empty() {
            return Err(cur.err(format!("expected metric name after {keyword}, found {}", cur.found())));
        }
        name.into()
    };
    if !cur.eat(b' ') {
        return Err(cur.err(format!("expected one space and text after the name in {keyword}, found {}", cur.found())));
    }
    let at = cur.column();
    let text = cur.take_rest();
    match keyword {
        "HELP" => Ok(Line::Help { name, has_text: !text.is_empty() }),
        "TYPE" => {
            let kind = match text {
                "counter" => Kind::Counter,
                "gauge" => Kind::Gauge,
                "histogram" => Kind::Histogram,
                "gaugehistogram" => Kind::GaugeHistogram,
                "summary" => Kind::Summary,
                "info" => Kind::Info,
                "stateset" => Kind::StateSet,
                "unknown" => Kind::Untyped,
                _ => return Err(cur.err_at(at, format!("unknown metric type {text:?} in TYPE line"))),
            };
            Ok(Line::Type { name, kind })
        }
        _ => {
            let suffixed = name.strip_suffix(text).is_some_and(|stem| stem.ends_with('_'));
            if !text.is_empty() && !suffixed {
                return Err(cur.err_at(at, format!("unit {text:?} is not a suffix of metric {name:?}")));
            }
            Ok(Line::Unit)
        }
    }
}

fn sample<'a>(cur: &mut Cursor<'a>, limits: &Limits) -> Result<Parsed<'a>> {
    let start = cur.column();
    let bare = cur.bare_metric_name();
    let mut name: Option<Cow<'a, str>> = (!bare.is_empty()).then(|| bare.into());
    // Room for an exporter's usual label set, so that it is not grown label by label.
    let mut labels = Vec::with_capacity(16);
    if cur.peek() == Some(b'{') {
        label_set(cur, limits, Some(&mut name), &mut labels)?;
    }
    let name = name.ok_or_else(|| cur.err_at(start, "metric name not set"))?;
    let value_column = cur.column() + 1;
    let token = spaced_token(cur, "value")?;
    let value = parse_float(token).ok_or_else(|| cur.err_at(value_column, format!("invalid value {token:?}")))?;
    let mut timestamp_ms = None;
    if !cur.at_end() && !exemplar(cur, limits)? {
        let at = cur.column() + 1;
        let token = spaced_token(cur, "timestamp")?;
        timestamp_ms = Some(
            seconds_to_ms(token)
                .ok_or_else(|| cur.err_at(at, format!("invalid timestamp {token:?} (finite seconds)")))?,
        );
        if !cur.at_end() && !exemplar(cur, limits)? {
            return Err(cur.err(format!("unexpected {} after timestamp", cur.found())));
        }
    }
    Ok(Parsed { name, labels, value, value_column, timestamp_ms })
}

/// One space, then a token up to the next space or the end of the line.
fn spaced_token<'a>(cur: &mut Cursor<'a>, what: &str) -> Result<&'a str> {
    if !cur.eat(b' ') {
        return Err(cur.err(format!("expected one space and the {what}, found {}", cur.found())));
    }
    let token = cur.take_while(|c| c != b' ');
    if token.is_empty() {
        return Err(cur.err(format!("expected the {what}, found {}", cur.found())));
    }
    Ok(token)
}

/// ` # {labels} value [timestamp]` to the end of the line, if the line continues with
/// ` # {`; it is checked and dropped.
fn exemplar(cur: &mut Cursor<'_>, limits: &Limits) -> Result<bool> {
    if !cur.rest().starts_with(" # {") {
        return Ok(false);
    }
    cur.eat_str(" # ");
    let mut labels = Vec::new();
    label_set(cur, limits, None, &mut labels)?;
    let at = cur.column() + 1;
    let token = spaced_token(cur, "exemplar value")?;
    parse_float(token).ok_or_else(|| cur.err_at(at, format!("invalid exemplar value {token:?}")))?;
    if !cur.at_end() {
        let at = cur.column() + 1;
        let token = spaced_token(cur, "exemplar timestamp")?;
        seconds_to_ms(token)
            .ok_or_else(|| cur.err_at(at, format!("invalid exemplar timestamp {token:?} (finite seconds)")))?;
        if !cur.at_end() {
            return Err(cur.err(format!("unexpected {} after exemplar timestamp", cur.found())));
        }
    }
    Ok(true)
}

/// `{...}` with no blanks: labels, and (outside exemplars, where `name` is `None`) the
/// quoted metric name if the line has no bare one.
fn label_set<'a>(
    cur: &mut Cursor<'a>,
    limits: &Limits,
    mut name: Option<&mut Option<Cow<'a, str>>>,
    labels: &mut Vec<Label<'a>>,
) -> Result<()> {
    cur.expect(b'{', "'{'")?;
    let values = if name.is_some() { Quoted::Value } else { Quoted::ExemplarValue };
    loop {
        if cur.eat(b'}') {
            return Ok(());
        }
        let column = cur.column();
        let quoted = cur.peek() == Some(b'"');
        let key: Cow<'a, str> = if quoted {
            cur.quoted(Quoted::Name, Escapes::Any, limits.max_label_value_bytes)?
        } else {
            let key = cur.bare_label_name();
            if key.is_empty() {
                return Err(cur.err(format!("expected label name, found {}", cur.found())));
            }
            key.into()
        };
        if quoted && matches!(cur.peek(), Some(b',' | b'}')) {
            let Some(name) = name.as_deref_mut() else {
                return Err(cur.err_at(column, "an exemplar has no metric name: expected '=' after the label name"));
            };
            if name.is_some() {
                return Err(cur.err_at(column, "metric name given twice"));
            }
            *name = Some(key);
            cur.eat(b',');
            continue;
        }
        cur.expect(b'=', "'=' after label name")?;
        if cur.peek() != Some(b'"') {
            return Err(cur.err(format!("expected '\"' at start of label value, found {}", cur.found())));
        }
        let value = cur.quoted(values, Escapes::Any, limits.max_label_value_bytes)?;
        labels.push(Label { name: key, value, column });
        if labels.len() > limits.max_labels {
            return Err(cur.limit("label count", limits.max_labels));
        }
        if !cur.eat(b',') && cur.peek() != Some(b'}') {
            return Err(cur.err(format!("expected ',' or '}}' after label value, found {}", cur.found())));
        }
    }
}
