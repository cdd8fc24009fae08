//! What the in-test API server keeps of each request ([`Recorded`]), for tests that
//! assert on the traffic: who asked what, with which body and content type, when, and
//! how it was answered (status, bytes, objects listed).

use std::collections::BTreeMap;
use std::time::Instant;

use axum::http::request::Parts;
use axum::response::Response;
use serde_json::Value;

/// How many objects a list answered with; a list handler leaves it on its response.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listed(pub usize);

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    /// The `Accept` header, as sent.
    pub accept: String,
    pub body: String,
    pub user: String,
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
    /// How long the server took to answer (the body built, for a list).
    pub took: std::time::Duration,
    /// Bytes of the answer's body, when they were known as it was sent (not a watch).
    pub response_bytes: u64,
    /// Objects in the answer, for a list.
    pub listed: usize,
}

impl Recorded {
    /// A request as it arrives, before it is answered.
    pub(super) fn arrived(parts: &Parts, body: &[u8], at: Instant) -> Recorded {
        let content_type = parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        Recorded {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            content_type: content_type.to_string(),
            accept: parts.headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string(),
            body: String::from_utf8_lossy(body).into_owned(),
            user: String::new(),
            status: 0,
            at,
            took: std::time::Duration::ZERO,
            response_bytes: 0,
            listed: 0,
        }
    }

    /// Notes how it was answered.
    pub(super) fn answered(&mut self, response: &Response) {
        self.status = response.status().as_u16();
        self.took = self.at.elapsed();
        self.response_bytes = axum::body::HttpBody::size_hint(response.body()).exact().unwrap_or(0);
        self.listed = response.extensions().get::<Listed>().map_or(0, |l| l.0);
    }

    /// The query parameter `name`, decoded.
    pub fn param(&self, name: &str) -> Option<String> {
        let uri: axum::http::Uri = format!("/?{}", self.query).parse().ok()?;
        let axum::extract::Query(mut params) =
            axum::extract::Query::<BTreeMap<String, String>>::try_from_uri(&uri).ok()?;
        params.remove(name)
    }

    /// The body as JSON (`null` when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Whether it asked to change something (anything but a GET).
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }

    /// One line for a failure message.
    pub fn describe(&self) -> String {
        format!("{} {}?{} [{}] {}", self.method, self.path, self.query, self.content_type, self.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_kept_as_it_came_and_as_it_was_answered() {
        let request = axum::http::Request::patch("/api/v1/nodes/n?fieldManager=me%2Fyou")
            .header("content-type", "application/merge-patch+json")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let mut r = Recorded::arrived(&parts, br#"{"spec":{"unschedulable":true}}"#, Instant::now());
        assert_eq!(r.param("fieldManager").as_deref(), Some("me/you"));
        assert_eq!(r.json()["spec"]["unschedulable"], true);
        assert!(r.is_write());
        let mut response = super::super::reply::json(&serde_json::json!({"items": [1, 2]}));
        response.extensions_mut().insert(Listed(2));
        r.answered(&response);
        assert_eq!((r.status, r.response_bytes, r.listed), (200, 15, 2));
    }
}
