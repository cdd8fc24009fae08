//! Scripted writes and injected failures, for tests that assert on what a client
//! changes and on how it copes when the API server refuses:
//!
//! - [`ApiServer::expect`] queues the writes (POST, PUT, PATCH, DELETE) that must come,
//!   in order, each checked for method, path, content type and body ([`Expect`]), and
//!   optionally answered with an error status (409, 429, 5xx) instead of being applied.
//!   From the first expectation on, a write that does not match the head of the queue
//!   is answered 400 and kept as a failure; [`ApiServer::finish`] fails on those, on a
//!   request no route serves, and on an expected write that never came. Reads are never
//!   scripted: a client may read as often as it likes.
//! - [`ApiServer::fail_next`] answers the next requests of a method under a path prefix
//!   with a status, whatever they carry.
//!
//! Both are checked after authentication and before any route, so a refused request
//! changes nothing.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use axum::response::Response;
use serde_json::Value;

use super::reply::failure;
use super::{ApiServer, Recorded};

/// Content types of the patches and bodies a client sends.
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const MERGE: &str = "application/merge-patch+json";
pub const JSON: &str = "application/json";

type Check = Box<dyn Fn(&Value) -> Result<(), String> + Send>;

/// A write that must come.
pub struct Expect {
    method: String,
    path: String,
    content_type: Option<String>,
    checks: Vec<Check>,
    reply: Option<u16>,
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

    fn check(&self, r: &Recorded) -> Result<(), String> {
        if r.method != self.method || r.path != self.path {
            return Err(format!("expected {} {}", self.method, self.path));
        }
        if let Some(ct) = &self.content_type
            && &r.content_type != ct
        {
            return Err(format!("content type: expected {ct}"));
        }
        let body = r.json();
        self.checks.iter().try_for_each(|c| c(&body))
    }
}

struct Fault {
    method: String,
    path_prefix: String,
    status: u16,
    remaining: u32,
}

/// The expected writes, the injected failures and what went wrong so far.
#[derive(Default)]
pub(crate) struct Script {
    expected: VecDeque<Expect>,
    /// Writes are checked against `expected` (from the first [`ApiServer::expect`]).
    scripted: bool,
    failures: Vec<String>,
    faults: Vec<Fault>,
}

impl Script {
    /// The answer a test chose for this request, if it chose one; `None` lets the
    /// routes serve it.
    pub(super) fn intercept(&mut self, r: &Recorded) -> Option<Response> {
        if r.is_write() && self.scripted {
            let verdict = self.expected.front().map(|e| e.check(r));
            match verdict {
                Some(Ok(())) => {
                    if let Some(code) = self.expected.pop_front().and_then(|e| e.reply) {
                        return Some(failure(code, "scripted by the test"));
                    }
                }
                Some(Err(why)) => return Some(self.refuse(format!("{}: {why}", r.describe()))),
                None => return Some(self.refuse(format!("{}: no more writes expected", r.describe()))),
            }
        }
        let fault = self
            .faults
            .iter_mut()
            .find(|f| f.remaining > 0 && f.method == r.method && r.path.starts_with(&f.path_prefix))?;
        fault.remaining -= 1;
        Some(failure(fault.status, "injected by the test"))
    }

    fn refuse(&mut self, line: String) -> Response {
        self.failures.push(line);
        failure(400, "not the request the test expected")
    }

    /// A request no route serves: a failure of the test, not only a 404.
    pub(super) fn unrouted(&mut self, method: &str, path: &str) {
        self.failures.push(format!("{method} {path}: no such route in the test API server"));
    }
}

impl ApiServer {
    /// Queues a write that must come next; from the first call on, every write must
    /// match the head of the queue.
    pub fn expect(&self, e: Expect) {
        let mut s = self.state();
        s.script.scripted = true;
        s.script.expected.push_back(e);
    }

    /// The next `times` requests of `method` to a path starting with `prefix` get `status`.
    pub fn fail_next(&self, method: &str, prefix: &str, status: u16, times: u32) {
        let fault = Fault { method: method.into(), path_prefix: prefix.into(), status, remaining: times };
        self.state().script.faults.push(fault);
    }

    /// Every write so far.
    pub fn writes(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(Recorded::is_write).collect()
    }

    /// Waits until every expected write came, then fails on any unexpected or unrouted
    /// request and on an expected write that never came.
    pub fn finish(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !self.state().script.expected.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let log: Vec<String> = self.writes().iter().map(Recorded::describe).collect();
        let s = self.state();
        let failures = &s.script.failures;
        assert!(failures.is_empty(), "unexpected requests:\n{}\nwrites seen:\n{}", failures.join("\n"), log.join("\n"));
        let missing: Vec<String> = s.script.expected.iter().map(|e| format!("{} {}", e.method, e.path)).collect();
        assert!(
            missing.is_empty(),
            "expected requests that never came:\n{}\nwrites seen:\n{}",
            missing.join("\n"),
            log.join("\n")
        );
    }

    /// Fails if any request was refused as unexpected, or found no route, so far.
    pub fn assert_no_failures(&self) {
        let s = self.state();
        assert!(s.script.failures.is_empty(), "{}", s.script.failures.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;

    fn write(method: &str, path: &str, content_type: &str, body: &Value) -> Recorded {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(())
            .unwrap();
        Recorded::arrived(&request.into_parts().0, body.to_string().as_bytes(), Instant::now())
    }

    #[test]
    fn writes_must_come_as_scripted_and_in_order() {
        let mut script = Script { scripted: true, ..Script::default() };
        script.expected.push_back(Expect::patch("/api/v1/nodes/n").has("/spec/unschedulable", json!(true)));
        script.expected.push_back(Expect::post("/e").reply(409));
        let wrong = write("PATCH", "/api/v1/nodes/n", MERGE, &json!({"spec": {"unschedulable": true}}));
        assert_eq!(script.intercept(&wrong).unwrap().status(), 400);
        assert!(script.failures[0].contains("content type: expected application/strategic-merge-patch+json"));
        let uncordon = write("PATCH", "/api/v1/nodes/n", STRATEGIC, &json!({"spec": {"unschedulable": null}}));
        assert_eq!(script.intercept(&uncordon).unwrap().status(), 400);
        assert!(script.failures[1].contains("/spec/unschedulable: expected true"), "{:?}", script.failures);
        let cordon = write("PATCH", "/api/v1/nodes/n", STRATEGIC, &json!({"spec": {"unschedulable": true}}));
        assert!(script.intercept(&cordon).is_none(), "the expected write is served");
        let event = write("POST", "/e", JSON, &json!({}));
        assert_eq!(script.intercept(&event).unwrap().status(), 409, "answered as scripted");
        assert_eq!(script.intercept(&event).unwrap().status(), 400, "no more writes expected");
        let read = write("GET", "/api/v1/nodes/n", "", &Value::Null);
        assert!(script.intercept(&read).is_none(), "reads are not scripted");
    }

    #[test]
    fn an_injected_failure_answers_as_many_times_as_asked() {
        let mut script = Script::default();
        script.faults.push(Fault {
            method: "GET".into(),
            path_prefix: "/api/v1/nodes".into(),
            status: 503,
            remaining: 2,
        });
        let read = write("GET", "/api/v1/nodes/n", "", &Value::Null);
        assert_eq!(script.intercept(&read).unwrap().status(), 503);
        assert_eq!(script.intercept(&read).unwrap().status(), 503);
        assert!(script.intercept(&read).is_none());
        let elsewhere = write("GET", "/api/v1/pods", "", &Value::Null);
        assert!(script.intercept(&elsewhere).is_none());
    }
}
