//! Rendering, with Go's printing of values.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Arg, Command, Data, Func, Node, Pipeline};

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Root,
    Str(String),
    List(Vec<String>),
    Map(BTreeMap<String, String>),
    Int(i64),
    Bool(bool),
    /// A missing map key (`<no value>`).
    Missing,
}

impl Value {
    fn truthy(&self) -> bool {
        match self {
            Value::Root => true,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Int(n) => *n != 0,
            Value::Bool(b) => *b,
            Value::Missing => false,
        }
    }

    fn show(&self, out: &mut String) {
        match self {
            Value::Root => out.push_str("{...}"),
            Value::Str(s) => out.push_str(s),
            Value::List(l) => {
                let _ = write!(out, "[{}]", l.join(" "));
            }
            Value::Map(m) => {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                let _ = write!(out, "map[{}]", parts.join(" "));
            }
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Value::Missing => out.push_str("<no value>"),
        }
    }

    fn shown(&self) -> String {
        let mut s = String::new();
        self.show(&mut s);
        s
    }
}

/// Renders `nodes` with `data`.
pub(super) fn render(nodes: &[Node], data: &Data) -> String {
    let mut out = String::new();
    let mut ex = Exec { data, vars: vec![vec![("$".to_owned(), Value::Root)]] };
    ex.nodes(nodes, &Value::Root, &mut out);
    out
}

struct Exec<'a> {
    data: &'a Data,
    vars: Vec<Vec<(String, Value)>>,
}

impl Exec<'_> {
    fn nodes(&mut self, nodes: &[Node], dot: &Value, out: &mut String) {
        self.vars.push(Vec::new());
        for n in nodes {
            self.node(n, dot, out);
        }
        self.vars.pop();
    }

    fn node(&mut self, node: &Node, dot: &Value, out: &mut String) {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Print(p) => self.pipeline(p, dot).show(out),
            Node::Assign(v, p) => {
                let value = self.pipeline(p, dot);
                if let Some(scope) = self.vars.last_mut() {
                    scope.push((v.clone(), value));
                }
            }
            Node::If(p, a, b) => {
                let branch = if self.pipeline(p, dot).truthy() { a } else { b };
                self.nodes(branch, dot, out);
            }
            Node::With(p, a, b) => {
                let value = self.pipeline(p, dot);
                if value.truthy() { self.nodes(a, &value, out) } else { self.nodes(b, dot, out) }
            }
            Node::Range { key, value, pipe, body, empty } => {
                let items: Vec<(Value, Value)> = match self.pipeline(pipe, dot) {
                    Value::List(l) => {
                        l.into_iter().enumerate().map(|(i, v)| (Value::Int(i as i64), Value::Str(v))).collect()
                    }
                    Value::Map(m) => m.into_iter().map(|(k, v)| (Value::Str(k), Value::Str(v))).collect(),
                    Value::Int(n) => (0..n.max(0)).map(|i| (Value::Int(i), Value::Int(i))).collect(),
                    _ => Vec::new(),
                };
                if items.is_empty() {
                    self.nodes(empty, dot, out);
                }
                for (k, v) in items {
                    let mut scope = Vec::new();
                    if let Some(kv) = key {
                        scope.push((kv.clone(), k));
                    }
                    if let Some(vv) = value {
                        scope.push((vv.clone(), v.clone()));
                    }
                    self.vars.push(scope);
                    self.nodes(body, &v, out);
                    self.vars.pop();
                }
            }
        }
    }

    fn pipeline(&mut self, p: &Pipeline, dot: &Value) -> Value {
        let mut last: Option<Value> = None;
        for c in &p.0 {
            last = Some(match c {
                Command::Arg(a) => self.arg(a, dot),
                Command::Call(f, args) => {
                    let mut values: Vec<Value> = args.iter().map(|a| self.arg(a, dot)).collect();
                    values.extend(last.take());
                    call(*f, values)
                }
            });
        }
        last.unwrap_or(Value::Missing)
    }

    fn arg(&mut self, a: &Arg, dot: &Value) -> Value {
        match a {
            Arg::Dot(fields) => self.fields(dot.clone(), fields),
            Arg::Var(v, fields) => {
                let base = if v == "$" {
                    Value::Root
                } else {
                    self.vars
                        .iter()
                        .rev()
                        .flat_map(|s| s.iter().rev())
                        .find(|(n, _)| n == v)
                        .map_or(Value::Missing, |(_, x)| x.clone())
                };
                self.fields(base, fields)
            }
            Arg::Str(s) => Value::Str(s.clone()),
            Arg::Int(n) => Value::Int(*n),
            Arg::Bool(b) => Value::Bool(*b),
            Arg::Paren(p) => self.pipeline(p, dot),
        }
    }

    fn fields(&self, mut value: Value, fields: &[String]) -> Value {
        for f in fields {
            value = match value {
                Value::Root => self.root_field(f),
                Value::Map(m) => m.get(f).map_or(Value::Missing, |v| Value::Str(v.clone())),
                _ => Value::Missing,
            };
        }
        value
    }

    fn root_field(&self, f: &str) -> Value {
        if let Some(s) = self.data.strings.get(f) {
            return Value::Str(s.clone());
        }
        if let Some(l) = self.data.lists.get(f) {
            return Value::List(l.clone());
        }
        self.data.maps.get(f).map_or(Value::Str(String::new()), |m| Value::Map(m.clone()))
    }
}

fn call(f: Func, args: Vec<Value>) -> Value {
    match f {
        Func::Index => {
            let mut it = args.into_iter();
            let mut v = it.next().unwrap_or(Value::Missing);
            for key in it {
                v = match (v, key) {
                    (Value::List(l), Value::Int(i)) => usize::try_from(i)
                        .ok()
                        .and_then(|i| l.get(i).cloned())
                        .map_or(Value::Str(String::new()), Value::Str),
                    (Value::Map(m), Value::Str(k)) => Value::Str(m.get(&k).cloned().unwrap_or_default()),
                    _ => Value::Missing,
                };
            }
            v
        }
        Func::Len => Value::Int(match args.first() {
            Some(Value::Str(s)) => s.len() as i64,
            Some(Value::List(l)) => l.len() as i64,
            Some(Value::Map(m)) => m.len() as i64,
            _ => 0,
        }),
        Func::Print => Value::Str(go_print(&args)),
        Func::Println => {
            let parts: Vec<String> = args.iter().map(Value::shown).collect();
            Value::Str(format!("{}\n", parts.join(" ")))
        }
        Func::Printf => {
            let mut it = args.into_iter();
            let format = it.next().map(|v| v.shown()).unwrap_or_default();
            Value::Str(printf(&format, &it.collect::<Vec<_>>()))
        }
        Func::Eq => {
            let first = args.first().cloned().unwrap_or(Value::Missing);
            Value::Bool(args.iter().skip(1).any(|a| same(a, &first)))
        }
        Func::Ne => Value::Bool(args.len() >= 2 && !same(&args[0], &args[1])),
        Func::Not => Value::Bool(!args.first().is_some_and(Value::truthy)),
        Func::And => {
            let last = args.last().cloned().unwrap_or(Value::Missing);
            args.into_iter().find(|a| !a.truthy()).unwrap_or(last)
        }
        Func::Or => {
            let last = args.last().cloned().unwrap_or(Value::Missing);
            args.into_iter().find(Value::truthy).unwrap_or(last)
        }
    }
}

fn same(a: &Value, b: &Value) -> bool {
    a.shown() == b.shown()
}

/// Go's `fmt.Sprint`: spaces between operands when neither is a string.
fn go_print(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        let is_str = |v: &Value| matches!(v, Value::Str(_));
        if i > 0 && !is_str(a) && !is_str(&args[i - 1]) {
            out.push(' ');
        }
        a.show(&mut out);
    }
    out
}

/// Go's `fmt.Sprintf` for the verbs `%s`, `%v`, `%d`, `%q` and `%%`.
fn printf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut next = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(verb @ ('s' | 'v' | 'd' | 'q')) => match next.next() {
                Some(v) if verb == 'q' => out.push_str(&go_quote(&v.shown())),
                Some(v) => v.show(&mut out),
                None => {
                    let _ = write!(out, "%!{verb}(MISSING)");
                }
            },
            Some(other) => {
                let _ = write!(out, "%!{other}(unsupported)");
            }
            None => out.push_str("%!(NOVERB)"),
        }
    }
    out
}

/// Go's `strconv.Quote` for the text labels and names hold: a double-quoted string with
/// `\"`, `\\` and escapes for control characters.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
