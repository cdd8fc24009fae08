//! The static check: every field, variable and function an action uses must exist for
//! the values it is applied to, so a template that would fail at every query is refused
//! when the configuration is read.

use super::{Arg, Command, Func, Node, Pipeline, Schema, Ty};

/// Checks `nodes` against `schema`; returns the schema fields they read.
pub(super) fn check(schema: Schema, nodes: &[Node]) -> Result<Vec<&'static str>, String> {
    let mut checker = Checker { schema, scopes: vec![Vec::new()], fields: Vec::new() };
    checker.nodes(nodes, Ty::Root)?;
    Ok(checker.fields)
}

struct Checker {
    schema: Schema,
    scopes: Vec<Vec<(String, Ty)>>,
    fields: Vec<&'static str>,
}

impl Checker {
    fn nodes(&mut self, nodes: &[Node], dot: Ty) -> Result<(), String> {
        self.scopes.push(Vec::new());
        for n in nodes {
            self.node(n, dot)?;
        }
        self.scopes.pop();
        Ok(())
    }

    fn node(&mut self, node: &Node, dot: Ty) -> Result<(), String> {
        match node {
            Node::Text(_) => Ok(()),
            Node::Print(p) => self.pipeline(p, dot).map(drop),
            Node::Assign(v, p) => {
                let ty = self.pipeline(p, dot)?;
                self.declare(v, ty);
                Ok(())
            }
            Node::If(p, a, b) => {
                self.pipeline(p, dot)?;
                self.nodes(a, dot)?;
                self.nodes(b, dot)
            }
            Node::With(p, a, b) => {
                let ty = self.pipeline(p, dot)?;
                self.nodes(a, ty)?;
                self.nodes(b, dot)
            }
            Node::Range { key, value, pipe, body, empty } => {
                let ty = self.pipeline(pipe, dot)?;
                let (k, elem) = match ty {
                    Ty::List => (Ty::Int, Ty::Str),
                    Ty::Map => (Ty::Str, Ty::Str),
                    Ty::Int => (Ty::Int, Ty::Int),
                    Ty::Any => (Ty::Any, Ty::Any),
                    Ty::Str | Ty::Bool | Ty::Root => {
                        return Err(format!("range over a {} is not possible", name(ty)));
                    }
                };
                self.scopes.push(Vec::new());
                if let Some(kv) = key {
                    self.declare(kv, k);
                }
                if let Some(vv) = value {
                    self.declare(vv, elem);
                }
                self.nodes(body, elem)?;
                self.scopes.pop();
                self.nodes(empty, dot)
            }
        }
    }

    fn declare(&mut self, var: &str, ty: Ty) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((var.to_owned(), ty));
        }
    }

    fn var(&self, var: &str) -> Option<Ty> {
        if var == "$" {
            return Some(Ty::Root);
        }
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).find(|(n, _)| n == var).map(|(_, t)| *t)
    }

    fn pipeline(&mut self, p: &Pipeline, dot: Ty) -> Result<Ty, String> {
        let mut last = None;
        for c in &p.0 {
            last = Some(self.command(c, dot, last)?);
        }
        Ok(last.unwrap_or(Ty::Any))
    }

    fn command(&mut self, c: &Command, dot: Ty, piped: Option<Ty>) -> Result<Ty, String> {
        match c {
            Command::Arg(a) if piped.is_none() => self.arg(a, dot),
            Command::Arg(_) => Err("only a function can take a piped value".into()),
            Command::Call(f, args) => {
                let mut tys = args.iter().map(|a| self.arg(a, dot)).collect::<Result<Vec<_>, _>>()?;
                tys.extend(piped);
                check_call(*f, &tys)
            }
        }
    }

    fn arg(&mut self, a: &Arg, dot: Ty) -> Result<Ty, String> {
        match a {
            Arg::Dot(fields) => self.fields_of(dot, fields),
            Arg::Var(v, fields) => {
                let ty = self.var(v).ok_or_else(|| format!("undefined variable {v}"))?;
                self.fields_of(ty, fields)
            }
            Arg::Str(_) => Ok(Ty::Str),
            Arg::Int(_) => Ok(Ty::Int),
            Arg::Bool(_) => Ok(Ty::Bool),
            Arg::Paren(p) => self.pipeline(p, dot),
        }
    }

    /// The type of `fields` applied to a value of type `base`.
    fn fields_of(&mut self, base: Ty, fields: &[String]) -> Result<Ty, String> {
        let mut ty = base;
        for f in fields {
            ty = match ty {
                Ty::Root => {
                    let t = self
                        .schema
                        .field(f)
                        .ok_or_else(|| format!("unknown field .{f}; this template has {}", self.schema.known()))?;
                    if let Some((n, _)) = self.schema.fields().iter().find(|(n, _)| n == f) {
                        self.fields.push(n);
                    }
                    t
                }
                Ty::Map => Ty::Str,
                Ty::Any => Ty::Any,
                other => return Err(format!("can't evaluate field {f} in a {}", name(other))),
            };
        }
        Ok(ty)
    }
}

fn name(ty: Ty) -> &'static str {
    match ty {
        Ty::Str => "string",
        Ty::List => "slice of strings",
        Ty::Map => "map of strings",
        Ty::Int => "number",
        Ty::Bool => "boolean",
        Ty::Root => "template's data",
        Ty::Any => "value",
    }
}

fn check_call(f: Func, tys: &[Ty]) -> Result<Ty, String> {
    let n = tys.len();
    let need = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{f:?} takes {what}").to_lowercase()) };
    match f {
        Func::Index => {
            need(n >= 1, "a collection and keys")?;
            let mut ty = tys[0];
            for key in &tys[1..] {
                ty = match (ty, key) {
                    (Ty::List, Ty::Int | Ty::Any) | (Ty::Map, Ty::Str | Ty::Any) => Ty::Str,
                    (Ty::Any, _) => Ty::Any,
                    _ => return Err(format!("can't index a {} with a {}", name(ty), name(*key))),
                };
            }
            Ok(ty)
        }
        Func::Len => {
            need(n == 1, "one argument")?;
            match tys[0] {
                Ty::Str | Ty::List | Ty::Map | Ty::Any => Ok(Ty::Int),
                other => Err(format!("len of a {} is not possible", name(other))),
            }
        }
        Func::Print | Func::Println => Ok(Ty::Str),
        Func::Printf => {
            need(n >= 1 && matches!(tys[0], Ty::Str | Ty::Any), "a format string first")?;
            Ok(Ty::Str)
        }
        Func::Eq | Func::Ne => {
            need(n >= 2, "two arguments or more")?;
            Ok(Ty::Bool)
        }
        Func::Not => {
            need(n == 1, "one argument")?;
            Ok(Ty::Bool)
        }
        Func::And | Func::Or => {
            need(n >= 1, "one argument or more")?;
            Ok(Ty::Any)
        }
    }
}
