//! A cursor over one line, with the tokens both formats share: bare and quoted names,
//! quoted strings with their escapes, blanks, and errors that carry the position.

use std::borrow::Cow;

use crate::error::{Error, Result, syntax};

/// Which escapes a quoted string may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escapes {
    /// `\\`, `\"` and `\n` only; any other is an error (prometheus/common
    /// `expfmt/text_parse.go`, `readTokenAsLabelValue`).
    Strict,
    /// Any backslash pair: `\\`, `\"` and `\n` are decoded and any other is kept as
    /// written (prometheus/prometheus `model/textparse/openmetricslex.l` lexes
    /// `\"(\\.|[^\\"])*\"`, and `lvalReplacer` decodes only those three).
    Any,
}

/// What a quoted string is, for its limits and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quoted {
    /// A metric or label name: must not be empty, may not hold NUL.
    Name,
    /// A label value: may be empty, may hold NUL.
    Value,
    /// An OpenMetrics exemplar's label value: may be empty, may not hold NUL (the
    /// lexer lets NUL through only in sample label values, HELP text and comments).
    ExemplarValue,
}

pub(crate) struct Cursor<'a> {
    line: &'a str,
    pos: usize,
    lineno: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(line: &'a str, lineno: usize) -> Self {
        Self { line, pos: 0, lineno }
    }

    /// 1-based column of the next byte.
    pub(crate) fn column(&self) -> usize {
        self.pos + 1
    }

    pub(crate) fn err(&self, message: impl Into<String>) -> Error {
        syntax(self.lineno, self.column(), message)
    }

    pub(crate) fn err_at(&self, column: usize, message: impl Into<String>) -> Error {
        syntax(self.lineno, column, message)
    }

    pub(crate) fn limit(&self, what: &'static str, limit: usize) -> Error {
        Error::Limit { line: self.lineno, what, limit }
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.pos).copied()
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.line.len()
    }

    pub(crate) fn rest(&self) -> &'a str {
        self.line.get(self.pos..).unwrap_or_default()
    }

    /// Consumes the next byte (an ASCII one: callers have peeked it).
    pub(crate) fn bump(&mut self) {
        if !self.at_end() {
            self.pos += 1;
        }
    }

    /// Consumes `b` if it is next.
    pub(crate) fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// Consumes `s` if the line continues with it.
    pub(crate) fn eat_str(&mut self, s: &str) -> bool {
        let hit = self.rest().starts_with(s);
        if hit {
            self.pos += s.len();
        }
        hit
    }

    /// Skips spaces and tabs; returns how many.
    pub(crate) fn skip_blanks(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Consumes the rest of the line.
    pub(crate) fn take_rest(&mut self) -> &'a str {
        let rest = self.rest();
        self.pos = self.line.len();
        rest
    }

    /// Consumes bytes while `f` holds. `f` must hold only for ASCII bytes or for every
    /// byte of a character, so that the cut is a character boundary.
    pub(crate) fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let rest = self.rest();
        let n = rest.bytes().position(|c| !f(c)).unwrap_or(rest.len());
        self.pos += n;
        rest.get(..n).unwrap_or_default()
    }

    /// Describes the next character for an error message.
    pub(crate) fn found(&self) -> String {
        match self.rest().chars().next() {
            Some(c) => format!("{c:?}"),
            None => "end of line".to_owned(),
        }
    }

    pub(crate) fn expect(&mut self, b: u8, what: &str) -> Result<()> {
        if self.eat(b) { Ok(()) } else { Err(self.err(format!("expected {what}, found {}", self.found()))) }
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`, or "" when the next byte cannot start one.
    pub(crate) fn bare_metric_name(&mut self) -> &'a str {
        if !self.peek().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':') {
            return "";
        }
        self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, or "" when the next byte cannot start one.
    pub(crate) fn bare_label_name(&mut self) -> &'a str {
        if !self.peek().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') {
            return "";
        }
        self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_')
    }

    /// A double-quoted string, decoded, at most `max` bytes once decoded. The cursor
    /// must be on the opening quote.
    pub(crate) fn quoted(&mut self, kind: Quoted, escapes: Escapes, max: usize) -> Result<Cow<'a, str>> {
        let open = self.column();
        self.expect(b'"', "'\"'")?;
        let body_start = self.pos;
        let bytes = self.line.as_bytes();
        // Escapes at most halve the length: past this many bytes the decoded text is
        // over the limit too, and need not be read further.
        let raw_max = max.saturating_mul(2).saturating_add(2);
        let mut owned: Option<String> = None;
        let mut copied_to = body_start;
        let mut i = body_start;
        loop {
            let rest = bytes.get(i..).unwrap_or_default();
            let Some(skip) = rest.iter().position(|c| matches!(c, b'"' | b'\\' | 0)) else { break };
            i += skip;
            if i - body_start > raw_max {
                self.pos = i;
                return Err(self.limit(kind.limit_name(), max));
            }
            match bytes.get(i) {
                Some(b'"') => {
                    let tail = self.line.get(copied_to..i).unwrap_or_default();
                    self.pos = i + 1;
                    let text = match owned {
                        Some(mut s) => {
                            s.push_str(tail);
                            Cow::Owned(s)
                        }
                        None => Cow::Borrowed(tail),
                    };
                    if text.len() > max {
                        return Err(self.limit(kind.limit_name(), max));
                    }
                    if kind == Quoted::Name && text.is_empty() {
                        return Err(self.err_at(open, "empty quoted name"));
                    }
                    return Ok(text);
                }
                Some(b'\\') => {
                    let decoded = match bytes.get(i + 1) {
                        Some(b'\\') => "\\",
                        Some(b'"') => "\"",
                        Some(b'n') => "\n",
                        // Kept as written: the next search copies it with the text.
                        Some(&c) if escapes == Escapes::Any && (c != 0 || kind == Quoted::Value) => {
                            i += 2;
                            continue;
                        }
                        Some(_) => {
                            self.pos = i;
                            let seq: String = self.line.get(i..).unwrap_or_default().chars().take(2).collect();
                            return Err(self.err(format!("invalid escape sequence '{seq}' (only \\\\, \\\" and \\n)")));
                        }
                        None => break,
                    };
                    let s = owned.get_or_insert_with(String::new);
                    s.push_str(self.line.get(copied_to..i).unwrap_or_default());
                    s.push_str(decoded);
                    i += 2;
                    copied_to = i;
                }
                _ if kind != Quoted::Value => {
                    self.pos = i;
                    return Err(self.err("NUL byte outside a label value"));
                }
                _ => i += 1,
            }
        }
        self.pos = self.line.len();
        Err(self.err_at(open, "unterminated quoted string"))
    }
}

impl Quoted {
    fn limit_name(self) -> &'static str {
        match self {
            Quoted::Name => "quoted name length",
            Quoted::Value | Quoted::ExemplarValue => "label value length",
        }
    }
}
