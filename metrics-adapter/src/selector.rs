//! Kubernetes label selectors: the string grammar of `k8s.io/apimachinery/pkg/labels`
//! (`=`, `==`, `!=`, `in`, `notin`, `>`, `<`, existence and `!` non-existence), matching
//! against a label set, and the `metav1.LabelSelector` JSON form that v1beta2 echoes back.
//!
//! The parser follows the Go lexer and grammar closely, including its corner cases:
//! `a=` means "a equals the empty string", `a in ()` is the set `{""}`, and `in`/`notin`
//! are keywords only where an operator is expected. Keys are validated as qualified names
//! and values as label values. Errors carry the byte offset where parsing broke so a
//! client gets a 400 that points at the problem.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// A selector operator, as in `k8s.io/apimachinery/pkg/selection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value`
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>5`
    GreaterThan,
    /// `key<5`
    LessThan,
}

impl Operator {
    fn symbol(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        }
    }
}

/// One requirement of a selector: a key, an operator and (sorted, unique) values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// The label key this requirement tests.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, sorted and de-duplicated (empty for `Exists`/`DoesNotExist`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set satisfies this requirement. `get` looks a label up by key.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let found = get(&self.key);
        match self.op {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                found.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotEquals | Operator::NotIn => found.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => found.is_some(),
            Operator::DoesNotExist => found.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(have) = found.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(want) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.op == Operator::GreaterThan { have > want } else { have < want }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::In | Operator::NotIn => {
                write!(f, "{} {} ({})", self.key, self.op.symbol(), self.values.join(","))
            }
            _ => write!(f, "{}{}{}", self.key, self.op.symbol(), self.values.first().map_or("", String::as_str)),
        }
    }
}

/// A parsed label selector: the conjunction of its requirements. Empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    reqs: Vec<Requirement>,
}

/// Where and why a selector string failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at position {position}: {message}")]
pub struct ParseError {
    /// Byte offset in the selector string where the offending token starts.
    pub position: usize,
    /// What was found and what was expected.
    pub message: String,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ParseError>;

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses the Kubernetes string form of a label selector.
    pub fn parse(input: &str) -> Result<Self> {
        let mut parser = Parser { lexer: Lexer { input, pos: 0 } };
        let mut reqs = parser.parse()?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { reqs })
    }

    /// Whether this selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
        self.reqs.iter().all(|r| r.matches(get))
    }

    /// Whether a list of `(key, value)` pairs satisfies every requirement.
    pub fn matches_pairs<K: AsRef<str>, V: AsRef<str>>(&self, labels: &[(K, V)]) -> bool {
        self.matches(|k| labels.iter().find(|(lk, _)| lk.as_ref() == k).map(|(_, v)| v.as_ref()))
    }

    /// The `metav1.LabelSelector` form, as Go's `metav1.ParseToLabelSelector` builds it:
    /// `=`/`==` go to `matchLabels`, everything else to `matchExpressions`. `!=` is written
    /// as `NotIn` with one value (the same set), `>`/`<` as `Gt`/`Lt`.
    pub fn to_label_selector(&self) -> LabelSelector {
        let mut out = LabelSelector::default();
        for r in &self.reqs {
            let operator = match r.op {
                Operator::Equals | Operator::DoubleEquals => {
                    if let Some(v) = r.values.first() {
                        out.match_labels.insert(r.key.clone(), v.clone());
                    }
                    continue;
                }
                Operator::In => "In",
                Operator::NotIn | Operator::NotEquals => "NotIn",
                Operator::Exists => "Exists",
                Operator::DoesNotExist => "DoesNotExist",
                Operator::GreaterThan => "Gt",
                Operator::LessThan => "Lt",
            };
            out.match_expressions.push(LabelSelectorRequirement {
                key: r.key.clone(),
                operator,
                values: r.values.clone(),
            });
        }
        out
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// `metav1.LabelSelector`, field order and omission as Go's encoder writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// `key: value` equality requirements.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// `metav1.LabelSelectorRequirement`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist` (or `Gt`/`Lt`).
    pub operator: &'static str,
    /// Values, sorted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    In,
    NotIn,
    Eq,
    DoubleEq,
    NotEq,
    Not,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::In => "'in'".into(),
            Tok::NotIn => "'notin'".into(),
            Tok::Eq => "'='".into(),
            Tok::DoubleEq => "'=='".into(),
            Tok::NotEq => "'!='".into(),
            Tok::Not => "'!'".into(),
            Tok::Gt => "'>'".into(),
            Tok::Lt => "'<'".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::End => "end of string".into(),
        }
    }
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    /// Scans the next token; returns it with its starting offset.
    fn next(&mut self) -> Result<(Tok, usize)> {
        let bytes = self.input.as_bytes();
        while self.pos < bytes.len() && is_space(bytes[self.pos]) {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&first) = bytes.get(self.pos) else {
            return Ok((Tok::End, start));
        };
        if is_special(first) {
            // Longest run of special symbols that forms a known token, as the Go lexer does.
            let mut best: Option<(Tok, usize)> = None;
            let mut end = self.pos;
            while end < bytes.len() && is_special(bytes[end]) {
                end += 1;
                let tok = match &self.input[start..end] {
                    "=" => Some(Tok::Eq),
                    "==" => Some(Tok::DoubleEq),
                    "!=" => Some(Tok::NotEq),
                    "!" => Some(Tok::Not),
                    "(" => Some(Tok::Open),
                    ")" => Some(Tok::Close),
                    "," => Some(Tok::Comma),
                    ">" => Some(Tok::Gt),
                    "<" => Some(Tok::Lt),
                    _ => None,
                };
                match tok {
                    Some(t) => best = Some((t, end)),
                    None if best.is_some() => break,
                    None => {}
                }
            }
            return match best {
                Some((tok, end)) => {
                    self.pos = end;
                    Ok((tok, start))
                }
                None => Err(ParseError {
                    position: start,
                    message: format!("unexpected symbols '{}'", &self.input[start..end]),
                }),
            };
        }
        let mut end = self.pos;
        while end < bytes.len() && !is_space(bytes[end]) && !is_special(bytes[end]) {
            end += 1;
        }
        self.pos = end;
        let word = &self.input[start..end];
        let tok = match word {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident(word.to_owned()),
        };
        Ok((tok, start))
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
}

/// In value positions the keywords are plain identifiers (Go's `Values` parser context).
fn as_value(tok: Tok) -> Tok {
    match tok {
        Tok::In => Tok::Ident("in".into()),
        Tok::NotIn => Tok::Ident("notin".into()),
        other => other,
    }
}

impl Parser<'_> {
    fn peek(&mut self) -> Result<(Tok, usize)> {
        let save = self.lexer.pos;
        let t = self.lexer.next();
        self.lexer.pos = save;
        t
    }

    fn consume(&mut self) -> Result<(Tok, usize)> {
        self.lexer.next()
    }

    fn parse(&mut self) -> Result<Vec<Requirement>> {
        let mut reqs = Vec::new();
        loop {
            let (tok, pos) = self.peek()?;
            match as_value(tok) {
                Tok::End => return Ok(reqs),
                Tok::Ident(_) | Tok::Not => {
                    reqs.push(self.parse_requirement()?);
                    let (tok, pos) = self.consume()?;
                    match tok {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (next, npos) = self.peek()?;
                            if !matches!(as_value(next.clone()), Tok::Ident(_) | Tok::Not) {
                                return Err(err(
                                    npos,
                                    format!("found {}, expected: identifier after ','", next.describe()),
                                ));
                            }
                        }
                        other => {
                            return Err(err(
                                pos,
                                format!("found {}, expected: ',' or end of string", other.describe()),
                            ));
                        }
                    }
                }
                other => {
                    return Err(err(
                        pos,
                        format!("found {}, expected: !, identifier, or end of string", other.describe()),
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement> {
        let (mut tok, mut pos) = self.consume()?;
        let negated = tok == Tok::Not;
        if negated {
            (tok, pos) = self.consume()?;
        }
        let key = match as_value(tok) {
            Tok::Ident(k) => k,
            other => return Err(err(pos, format!("found {}, expected: identifier", other.describe()))),
        };
        validate_key(&key).map_err(|m| err(pos, m))?;
        let (next, _) = self.peek()?;
        if negated {
            return Ok(Requirement { key, op: Operator::DoesNotExist, values: Vec::new() });
        }
        if matches!(next, Tok::End | Tok::Comma) {
            return Ok(Requirement { key, op: Operator::Exists, values: Vec::new() });
        }
        let (optok, oppos) = self.consume()?;
        let op = match optok {
            Tok::Eq => Operator::Equals,
            Tok::DoubleEq => Operator::DoubleEquals,
            Tok::NotEq => Operator::NotEquals,
            Tok::In => Operator::In,
            Tok::NotIn => Operator::NotIn,
            Tok::Gt => Operator::GreaterThan,
            Tok::Lt => Operator::LessThan,
            other => {
                return Err(err(
                    oppos,
                    format!("found {}, expected: one of '=', '==', '!=', 'in', 'notin', '>', '<'", other.describe()),
                ));
            }
        };
        let (values, vpos) = match op {
            Operator::In | Operator::NotIn => self.parse_value_set()?,
            _ => self.parse_exact_value()?,
        };
        let mut checked = Vec::with_capacity(values.len());
        for v in values {
            validate_value(&v).map_err(|m| err(vpos, m))?;
            checked.push(v);
        }
        if matches!(op, Operator::GreaterThan | Operator::LessThan) {
            let v = checked.first().map(String::as_str).unwrap_or_default();
            if v.parse::<i64>().is_err() {
                return Err(err(vpos, format!("for '>' and '<' the value must be an integer, found '{v}'")));
            }
        }
        checked.sort();
        checked.dedup();
        Ok(Requirement { key, op, values: checked })
    }

    fn parse_exact_value(&mut self) -> Result<(Vec<String>, usize)> {
        let (tok, pos) = self.peek()?;
        if matches!(tok, Tok::End | Tok::Comma) {
            return Ok((vec![String::new()], pos));
        }
        let (tok, pos) = self.consume()?;
        match as_value(tok) {
            Tok::Ident(v) => Ok((vec![v], pos)),
            other => Err(err(pos, format!("found {}, expected: identifier", other.describe()))),
        }
    }

    fn parse_value_set(&mut self) -> Result<(Vec<String>, usize)> {
        let (tok, pos) = self.consume()?;
        if tok != Tok::Open {
            return Err(err(pos, format!("found {}, expected: '('", tok.describe())));
        }
        let (tok, pos) = self.peek()?;
        match as_value(tok) {
            Tok::Close => {
                self.consume()?;
                Ok((vec![String::new()], pos))
            }
            Tok::Ident(_) | Tok::Comma => {
                let values = self.parse_identifier_list()?;
                let (tok, cpos) = self.consume()?;
                if tok != Tok::Close {
                    return Err(err(cpos, format!("found {}, expected: ')'", tok.describe())));
                }
                Ok((values, pos))
            }
            other => Err(err(pos, format!("found {}, expected: ',', ')' or identifier", other.describe()))),
        }
    }

    /// `a,b`, with empty entries for leading, doubled or trailing commas (as Go does).
    fn parse_identifier_list(&mut self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        loop {
            let (tok, pos) = self.consume()?;
            match as_value(tok) {
                Tok::Ident(v) => {
                    out.push(v);
                    let (next, npos) = self.peek()?;
                    match next {
                        Tok::Comma => continue,
                        Tok::Close => return Ok(out),
                        other => {
                            return Err(err(npos, format!("found {}, expected: ',' or ')'", other.describe())));
                        }
                    }
                }
                Tok::Comma => {
                    if out.is_empty() {
                        out.push(String::new());
                    }
                    let (next, _) = self.peek()?;
                    match as_value(next) {
                        Tok::Close => {
                            out.push(String::new());
                            return Ok(out);
                        }
                        Tok::Comma => out.push(String::new()),
                        _ => {}
                    }
                }
                other => return Err(err(pos, format!("found {}, expected: ',' or identifier", other.describe()))),
            }
        }
    }
}

fn err(position: usize, message: String) -> ParseError {
    ParseError { position, message }
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 bytes.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lower-case alphanumerics, `-` and `.`, at most 253 bytes.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A string in a form a label selector can name: unchanged if it is a valid label value,
/// otherwise each character outside `[A-Za-z0-9-_.]` becomes `-`, leading and trailing
/// non-alphanumerics are dropped and the result is cut to 63 bytes
/// (`"NVIDIA H100 80GB HBM3"` becomes `"NVIDIA-H100-80GB-HBM3"`).
pub fn to_label_value(s: &str) -> std::borrow::Cow<'_, str> {
    if validate_value(s).is_ok() {
        return std::borrow::Cow::Borrowed(s);
    }
    let mapped: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' }).collect();
    let mut out = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned();
    out.truncate(63);
    while out.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        out.pop();
    }
    std::borrow::Cow::Owned(out)
}

fn validate_key(key: &str) -> std::result::Result<(), String> {
    let ok = match key.split_once('/') {
        None => is_qualified_name_part(key),
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_qualified_name_part(name),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid label key \"{key}\": a qualified name must be at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character, with an optional DNS subdomain prefix and '/'"
        ))
    }
}

fn validate_value(value: &str) -> std::result::Result<(), String> {
    if value.is_empty() || is_qualified_name_part(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value \"{value}\": a label value must be empty or at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn sel(s: &str) -> Selector {
        match Selector::parse(s) {
            Ok(sel) => sel,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    #[test]
    fn empty_and_blank_select_everything() {
        for s in ["", "   ", "\t"] {
            let sel = sel(s);
            assert!(sel.is_empty());
            assert!(sel.matches_pairs(&labels(&[("a", "b")])));
            assert!(sel.matches_pairs::<String, String>(&[]));
        }
    }

    #[test]
    fn equality_operators() {
        let l = labels(&[("app", "inference"), ("tier", "gpu")]);
        assert!(sel("app=inference").matches_pairs(&l));
        assert!(sel("app==inference").matches_pairs(&l));
        assert!(!sel("app=other").matches_pairs(&l));
        assert!(sel("app!=other").matches_pairs(&l));
        assert!(!sel("app!=inference").matches_pairs(&l));
        // != matches objects without the key at all, as in Kubernetes.
        assert!(sel("missing!=x").matches_pairs(&l));
        assert!(sel("app = inference , tier == gpu").matches_pairs(&l));
        assert!(!sel("app=inference,tier=cpu").matches_pairs(&l));
    }

    #[test]
    fn set_operators() {
        let l = labels(&[("env", "prod"), ("model", "H100")]);
        assert!(sel("env in (prod, staging)").matches_pairs(&l));
        assert!(!sel("env in (dev)").matches_pairs(&l));
        assert!(sel("env notin (dev,qa)").matches_pairs(&l));
        assert!(!sel("env notin (prod)").matches_pairs(&l));
        assert!(sel("missing notin (prod)").matches_pairs(&l));
        assert!(!sel("missing in (prod)").matches_pairs(&l));
    }

    #[test]
    fn existence_operators() {
        let l = labels(&[("mig_profile", "3g.40gb")]);
        assert!(sel("mig_profile").matches_pairs(&l));
        assert!(!sel("!mig_profile").matches_pairs(&l));
        assert!(sel("!gpu").matches_pairs(&l));
        assert!(!sel("gpu").matches_pairs(&l));
        assert!(sel("mig_profile,!gpu").matches_pairs(&l));
    }

    #[test]
    fn numeric_comparisons() {
        let l = labels(&[("gpu", "3")]);
        assert!(sel("gpu>2").matches_pairs(&l));
        assert!(!sel("gpu>3").matches_pairs(&l));
        assert!(sel("gpu<4").matches_pairs(&l));
        assert!(!sel("gpu<1").matches_pairs(&l));
        assert!(!sel("other>1").matches_pairs(&l));
        assert!(!sel("gpu>1").matches_pairs(&labels(&[("gpu", "x")])));
    }

    #[test]
    fn go_corner_cases() {
        // `a=` is "a equals the empty string".
        let s = sel("a=");
        assert!(s.matches_pairs(&labels(&[("a", "")])));
        assert!(!s.matches_pairs(&labels(&[("a", "x")])));
        // `in ()` is the set {""}.
        let s = sel("a in ()");
        assert_eq!(s.requirements()[0].values(), [String::new()]);
        // keywords are identifiers in value positions
        assert!(sel("a in (in, notin)").matches_pairs(&labels(&[("a", "notin")])));
        assert!(sel("a=in").matches_pairs(&labels(&[("a", "in")])));
        // empty entries from commas
        assert_eq!(sel("a in (x,)").requirements()[0].values(), ["", "x"]);
        // prefixed keys
        assert!(sel("app.kubernetes.io/name=vllm").matches_pairs(&labels(&[("app.kubernetes.io/name", "vllm")])));
    }

    #[test]
    fn requirements_are_sorted_by_key_and_values_deduplicated() {
        let s = sel("z=1,a in (b,a,b),m");
        let keys: Vec<_> = s.requirements().iter().map(Requirement::key).collect();
        assert_eq!(keys, ["a", "m", "z"]);
        assert_eq!(s.requirements()[0].values(), ["a", "b"]);
        assert_eq!(s.to_string(), "a in (a,b),m,z=1");
    }

    #[test]
    fn malformed_selectors_say_where() {
        let cases: &[(&str, usize, &str)] = &[
            ("app in (a", 9, "expected: ',' or ')'"),
            ("app in a", 7, "expected: '('"),
            ("app=inference,", 14, "identifier after ','"),
            (",app", 0, "expected: !, identifier"),
            ("app inn (a)", 4, "expected: one of"),
            ("!app=x", 4, "expected: ',' or end of string"),
            ("app=a b", 6, "expected: ',' or end of string"),
            ("a>b", 2, "must be an integer"),
            ("-bad=x", 0, "invalid label key"),
            ("app=bad/value", 4, "invalid label value"),
            ("a===b", 3, "expected: identifier"),
            ("a in (b c)", 8, "expected: ',' or ')'"),
            ("a=(b)", 2, "expected: identifier"),
            ("a/b/c=x", 0, "invalid label key"),
        ];
        for (input, position, needle) in cases {
            match Selector::parse(input) {
                Ok(s) => panic!("{input:?} parsed as {s}"),
                Err(e) => {
                    assert_eq!(e.position, *position, "{input:?}: {e}");
                    assert!(e.message.contains(needle), "{input:?}: {e}");
                }
            }
        }
    }

    #[test]
    fn overlong_key_or_value_is_rejected() {
        let long = "a".repeat(64);
        assert!(Selector::parse(&format!("{long}=x")).is_err());
        assert!(Selector::parse(&format!("k={long}")).is_err());
        assert!(Selector::parse(&format!("k={}", "a".repeat(63))).is_ok());
    }

    #[test]
    fn label_value_form_of_free_text() {
        assert_eq!(to_label_value("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
        assert_eq!(to_label_value("3g.40gb"), "3g.40gb");
        assert_eq!(to_label_value(" (x) "), "x");
        assert_eq!(to_label_value(""), "");
        assert_eq!(to_label_value(&format!("{}-b", "a".repeat(62))).len(), 62);
        assert!(validate_value(&to_label_value("Ünïcode GPU / 48GB")).is_ok());
    }

    #[test]
    fn label_selector_json_matches_go() {
        let s = sel("model=H100,mig_profile in (3g.40gb,1g.10gb),!spare,gpu!=0,node");
        let json = serde_json::to_string(&s.to_label_selector()).unwrap();
        assert_eq!(
            json,
            r#"{"matchLabels":{"model":"H100"},"matchExpressions":[{"key":"gpu","operator":"NotIn","values":["0"]},{"key":"mig_profile","operator":"In","values":["1g.10gb","3g.40gb"]},{"key":"node","operator":"Exists"},{"key":"spare","operator":"DoesNotExist"}]}"#
        );
        assert_eq!(serde_json::to_string(&sel("").to_label_selector()).unwrap(), "{}");
    }
}
