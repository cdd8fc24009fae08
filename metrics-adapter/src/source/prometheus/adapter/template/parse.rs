//! Lexing and parsing: the text split into literal text and actions (trim markers
//! applied, comments dropped), each action into tokens, the actions into a tree.

use super::{Arg, Command, FUNCS, Node, Pipeline, UNSUPPORTED};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    Text(String),
    /// An action's inside (delimiters and trim markers removed), with its offset.
    Action(usize, String),
}

pub(super) type PResult<T> = Result<T, (usize, String)>;

/// Splits the text into literal text and actions, applying trim markers and dropping
/// comments.
pub(super) fn split(text: &str) -> PResult<Vec<Piece>> {
    let mut out = Vec::new();
    let mut rest = 0;
    let mut trim_next = false;
    while let Some(found) = text[rest..].find("<<") {
        let open = rest + found;
        let mut literal = &text[rest..open];
        if trim_next {
            literal = literal.trim_start();
        }
        let mut inner_start = open + 2;
        let trim_left = text[inner_start..].starts_with("- ") || text[inner_start..].starts_with("-\n");
        if trim_left {
            literal = literal.trim_end();
            inner_start += 1;
        }
        if !literal.is_empty() {
            out.push(Piece::Text(literal.to_owned()));
        }
        let close = find_close(text, inner_start)?;
        let mut inner_end = close;
        trim_next = false;
        if text[..close].ends_with(" -") || text[..close].ends_with("\n-") {
            inner_end -= 1;
            trim_next = true;
        }
        let inner = text[inner_start..inner_end].trim();
        if !(inner.starts_with("/*") && inner.ends_with("*/")) {
            out.push(Piece::Action(open, inner.to_owned()));
        }
        rest = close + 2;
    }
    let mut literal = &text[rest..];
    if trim_next {
        literal = literal.trim_start();
    }
    if !literal.is_empty() {
        out.push(Piece::Text(literal.to_owned()));
    }
    Ok(out)
}

/// The offset of the `>>` closing the action that starts at `from`, skipping quoted text.
fn find_close(text: &str, from: usize) -> PResult<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'"' | b'`' => {
                let quote = bytes[i];
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    if quote == b'"' && bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= bytes.len() {
                    return Err((from, "unterminated quoted string in action".into()));
                }
            }
            b'>' if bytes.get(i + 1) == Some(&b'>') => return Ok(i),
            _ => {}
        }
        i += 1;
    }
    Err((from.saturating_sub(2), "unclosed action: << without >>".into()))
}

// ---------------------------------------------------------------- parsing actions

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Field(String),
    /// `.name` right after a field or variable (`.A.b`, `$x.b`).
    Chain(String),
    Var(String),
    Str(String),
    Int(i64),
    Pipe,
    Open,
    Close,
    Comma,
    Declare,
}

/// A double-quoted string's value from `start` (after the quote) and the index after its
/// closing quote.
fn quoted(offset: usize, chars: &[char], start: usize) -> PResult<(String, usize)> {
    let mut value = String::new();
    let mut i = start;
    loop {
        match chars.get(i) {
            None => return Err((offset, "unterminated string".into())),
            Some('"') => return Ok((value, i + 1)),
            Some('\\') => {
                let escaped = match chars.get(i + 1) {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('r') => '\r',
                    Some('"') => '"',
                    Some('\\') => '\\',
                    other => {
                        return Err((offset, format!("unsupported escape \\{}", other.copied().unwrap_or(' '))));
                    }
                };
                value.push(escaped);
                i += 2;
            }
            Some(&c) => {
                value.push(c);
                i += 1;
            }
        }
    }
}

/// The single-character tokens.
fn punctuation(c: char) -> Option<Tok> {
    match c {
        '|' => Some(Tok::Pipe),
        '(' => Some(Tok::Open),
        ')' => Some(Tok::Close),
        ',' => Some(Tok::Comma),
        _ => None,
    }
}

fn tokens(offset: usize, s: &str) -> PResult<Vec<Tok>> {
    let fail = |r: String| Err((offset, r));
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            c if punctuation(c).is_some() => {
                out.extend(punctuation(c));
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::Declare);
                i += 2;
            }
            '=' => return fail("assignment with = is not supported; declare variables with :=".into()),
            '.' => {
                let start = i + 1;
                let mut end = start;
                while end < chars.len() && ident(chars[end]) {
                    end += 1;
                }
                let name: String = chars[start..end].iter().collect();
                let chained = i > 0 && (ident(chars[i - 1]) || chars[i - 1] == '$');
                out.push(if chained { Tok::Chain(name) } else { Tok::Field(name) });
                i = end;
            }
            '$' => {
                let mut end = i + 1;
                while end < chars.len() && ident(chars[end]) {
                    end += 1;
                }
                out.push(Tok::Var(chars[i..end].iter().collect()));
                i = end;
            }
            '"' => {
                let (value, next) = quoted(offset, &chars, i + 1)?;
                out.push(Tok::Str(value));
                i = next;
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..].iter().position(|&c| c == '`').map(|p| start + p);
                let Some(end) = end else { return fail("unterminated raw string".into()) };
                out.push(Tok::Str(chars[start..end].iter().collect()));
                i = end + 1;
            }
            c if c.is_ascii_digit() || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                let mut end = i + 1;
                while end < chars.len() && chars[end].is_ascii_digit() {
                    end += 1;
                }
                let text: String = chars[i..end].iter().collect();
                let n = text.parse().map_err(|_| (offset, format!("number {text} out of range")))?;
                out.push(Tok::Int(n));
                i = end;
            }
            c if ident(c) => {
                let mut end = i;
                while end < chars.len() && ident(chars[end]) {
                    end += 1;
                }
                out.push(Tok::Word(chars[i..end].iter().collect()));
                i = end;
            }
            other => return fail(format!("unexpected character {other:?} in action")),
        }
    }
    Ok(out)
}

pub(super) struct Parser {
    actions: Vec<Piece>,
    pos: usize,
}

/// How a block ended: `(offset, "end" | "else" | "else if ...")`.
type BlockEnd = Option<(usize, String)>;

impl Parser {
    pub(super) fn new(actions: Vec<Piece>) -> Self {
        Self { actions, pos: 0 }
    }

    /// Nodes up to the end of input or an `end`/`else` action (returned, unconsumed text).
    pub(super) fn block(&mut self) -> PResult<(Vec<Node>, BlockEnd)> {
        let mut nodes = Vec::new();
        while let Some(piece) = self.actions.get(self.pos).cloned() {
            self.pos += 1;
            let (offset, inner) = match piece {
                Piece::Text(t) => {
                    nodes.push(Node::Text(t));
                    continue;
                }
                Piece::Action(o, i) => (o, i),
            };
            let toks = tokens(offset, &inner)?;
            match toks.first() {
                Some(Tok::Word(w)) if w == "end" || w == "else" => return Ok((nodes, Some((offset, inner)))),
                Some(Tok::Word(w)) if w == "if" || w == "with" => {
                    let pipe = pipeline(offset, &toks[1..])?;
                    let (then, other) = self.branches(offset)?;
                    nodes.push(if w == "if" { Node::If(pipe, then, other) } else { Node::With(pipe, then, other) });
                }
                Some(Tok::Word(w)) if w == "range" => nodes.push(self.range(offset, &toks[1..])?),
                Some(Tok::Word(w)) if UNSUPPORTED.contains(&w.as_str()) && !is_func(w) => {
                    return Err((offset, format!("{w} is not supported in this adapter's templates")));
                }
                Some(Tok::Var(v)) if toks.get(1) == Some(&Tok::Declare) => {
                    nodes.push(Node::Assign(v.clone(), pipeline(offset, &toks[2..])?));
                }
                _ => nodes.push(Node::Print(pipeline(offset, &toks)?)),
            }
        }
        Ok((nodes, None))
    }

    /// The branches of an `if` or `with` after its action, through its `end`.
    fn branches(&mut self, offset: usize) -> PResult<(Vec<Node>, Vec<Node>)> {
        let (then, end) = self.block()?;
        let Some((at, word)) = end else { return Err((offset, "if/with without end".into())) };
        if word == "end" {
            return Ok((then, Vec::new()));
        }
        let rest = word.strip_prefix("else").unwrap_or_default().trim();
        if rest.is_empty() {
            let (other, end) = self.block()?;
            return match end {
                Some((_, w)) if w == "end" => Ok((then, other)),
                _ => Err((at, "else without end".into())),
            };
        }
        // `else if ...`: a nested if that shares this end.
        let toks = tokens(at, rest)?;
        match toks.first() {
            Some(Tok::Word(w)) if w == "if" || w == "with" => {
                let pipe = pipeline(at, &toks[1..])?;
                let (t, o) = self.branches(at)?;
                let nested = if w == "if" { Node::If(pipe, t, o) } else { Node::With(pipe, t, o) };
                Ok((then, vec![nested]))
            }
            _ => Err((at, format!("unexpected {{{{{word}}}}}"))),
        }
    }

    fn range(&mut self, offset: usize, toks: &[Tok]) -> PResult<Node> {
        let (key, value, rest) = match toks {
            [Tok::Var(k), Tok::Comma, Tok::Var(v), Tok::Declare, rest @ ..] => (Some(k.clone()), Some(v.clone()), rest),
            [Tok::Var(v), Tok::Declare, rest @ ..] => (None, Some(v.clone()), rest),
            _ => (None, None, toks),
        };
        let pipe = pipeline(offset, rest)?;
        let (body, empty) = self.branches(offset)?;
        Ok(Node::Range { key, value, pipe, body, empty })
    }
}

fn is_func(w: &str) -> bool {
    FUNCS.iter().any(|(n, _)| *n == w)
}

fn pipeline(offset: usize, toks: &[Tok]) -> PResult<Pipeline> {
    if toks.is_empty() {
        return Err((offset, "missing value in action".into()));
    }
    let mut commands = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Open => depth += 1,
            Tok::Close => depth = depth.saturating_sub(1),
            Tok::Pipe if depth == 0 => {
                commands.push(command(offset, &toks[start..i])?);
                start = i + 1;
            }
            _ => {}
        }
    }
    commands.push(command(offset, &toks[start..])?);
    Ok(Pipeline(commands))
}

fn command(offset: usize, toks: &[Tok]) -> PResult<Command> {
    let (first, rest) = toks.split_first().ok_or((offset, "empty command in pipeline".to_owned()))?;
    if let Tok::Word(w) = first
        && w != "true"
        && w != "false"
        && w != "nil"
    {
        let func = FUNCS.iter().find(|(n, _)| n == w).map(|(_, f)| *f).ok_or_else(|| {
            let why = if UNSUPPORTED.contains(&w.as_str()) { "is not supported here" } else { "is not defined" };
            (offset, format!("function {w:?} {why}"))
        })?;
        return Ok(Command::Call(func, args(offset, rest)?));
    }
    let mut all = args(offset, toks)?;
    if all.len() != 1 {
        return Err((offset, "only a function can take arguments".into()));
    }
    Ok(Command::Arg(all.remove(0)))
}

fn args(offset: usize, toks: &[Tok]) -> PResult<Vec<Arg>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let arg = match &toks[i] {
            Tok::Field(f) => {
                let mut fields = if f.is_empty() { Vec::new() } else { vec![f.clone()] };
                i += chain(offset, &toks[i + 1..], &mut fields)?;
                Arg::Dot(fields)
            }
            Tok::Var(v) => {
                let mut fields = Vec::new();
                i += chain(offset, &toks[i + 1..], &mut fields)?;
                Arg::Var(v.clone(), fields)
            }
            Tok::Str(s) => Arg::Str(s.clone()),
            Tok::Int(n) => Arg::Int(*n),
            Tok::Word(w) if w == "true" || w == "false" => Arg::Bool(w == "true"),
            Tok::Open => {
                let mut depth = 1;
                let start = i + 1;
                while depth > 0 {
                    i += 1;
                    match toks.get(i) {
                        Some(Tok::Open) => depth += 1,
                        Some(Tok::Close) => depth -= 1,
                        Some(_) => {}
                        None => return Err((offset, "unclosed (".into())),
                    }
                }
                Arg::Paren(Box::new(pipeline(offset, &toks[start..i])?))
            }
            Tok::Word(w) if is_func(w) => {
                return Err((offset, format!("function {w} as an argument needs parentheses")));
            }
            other => return Err((offset, format!("unexpected {other:?} in action"))),
        };
        out.push(arg);
        i += 1;
    }
    Ok(out)
}

/// Appends the chained field names at the start of `toks`; returns how many there were.
fn chain(offset: usize, toks: &[Tok], fields: &mut Vec<String>) -> PResult<usize> {
    let mut n = 0;
    while let Some(Tok::Chain(name)) = toks.get(n) {
        if name.is_empty() {
            return Err((offset, "a field name is missing after .".into()));
        }
        fields.push(name.clone());
        n += 1;
    }
    Ok(n)
}
