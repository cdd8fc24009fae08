//! The writes a test scripts ([`Expect`]): method, path, content type and checks on the
//! body, optionally answered with an error status instead of being applied.

use serde_json::Value;

use super::{JSON, Request, STRATEGIC};

type Check = Box<dyn Fn(&Value) -> Result<(), String> + Send>;

/// A write that must come.
pub struct Expect {
    pub(super) method: String,
    pub(super) path: String,
    content_type: Option<String>,
    checks: Vec<Check>,
    pub(super) reply: Option<u16>,
}

impl Expect {
    pub fn new(method: &str, path: &str) -> Self {
        Expect { method: method.into(), path: path.into(), content_type: None, checks: Vec::new(), reply: None }
    }

    pub fn patch(path: &str) -> Self {
        Self::new("PATCH", path).content_type(STRATEGIC)
    }

    pub fn post(path: &str) -> Self {
        Self::new("POST", path).content_type(JSON)
    }

    pub fn put(path: &str) -> Self {
        Self::new("PUT", path).content_type(JSON)
    }

    pub fn content_type(mut self, ct: &str) -> Self {
        self.content_type = Some(ct.into());
        self
    }

    /// The body's value at JSON `pointer` equals `value`.
    pub fn has(mut self, pointer: &str, value: Value) -> Self {
        let p = pointer.to_string();
        self.checks.push(Box::new(move |body| match body.pointer(&p) {
            Some(v) if *v == value => Ok(()),
            other => Err(format!("{p}: expected {value}, found {other:?}")),
        }));
        self
    }

    /// The body has nothing at `pointer`.
    pub fn lacks(mut self, pointer: &str) -> Self {
        let p = pointer.to_string();
        self.checks.push(Box::new(move |body| match body.pointer(&p) {
            None => Ok(()),
            Some(v) => Err(format!("{p}: expected nothing, found {v}")),
        }));
        self
    }

    /// Any check on the body.
    pub fn body(mut self, what: &str, f: impl Fn(&Value) -> bool + Send + 'static) -> Self {
        let what = what.to_string();
        self.checks.push(Box::new(move |body| if f(body) { Ok(()) } else { Err(format!("body: {what}")) }));
        self
    }

    /// Answer with this status instead of applying the request.
    pub fn reply(mut self, status: u16) -> Self {
        self.reply = Some(status);
        self
    }

    pub(super) fn check(&self, r: &Request) -> Result<(), String> {
        if r.method != self.method || r.path != self.path {
            return Err(format!("expected {} {}", self.method, self.path));
        }
        if let Some(ct) = &self.content_type
            && &r.content_type != ct
        {
            return Err(format!("content type: expected {ct}"));
        }
        for c in &self.checks {
            c(&r.body)?;
        }
        Ok(())
    }
}
