//! The Prometheus HTTP API client: instant queries (`/api/v1/query`) and series
//! discovery (`/api/v1/series`), by POST (a form body, the default) or GET
//! (`--prometheus-verb`), with the bearer token, the extra headers
//! (`--prometheus-header`), a deadline and a body cap. It returns the raw answer; the
//! caller parses it with [`super::answer`], borrowing from it.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use http_body_util::Full;

use crate::http_client::HttpClient;

/// Settings of the client.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL (`http://prometheus:9090`, or a Thanos/Mimir prefix such as `.../prometheus`).
    pub url: String,
    /// Deadline for one request.
    pub timeout: Duration,
    /// Largest accepted response body.
    pub max_body: usize,
    /// Bearer token, if any.
    pub bearer_token: Option<String>,
    /// Extra headers on every request (`X-Scope-OrgID` for Mimir, ...).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `GET` with the parameters in the URL instead of a `POST` form.
    pub get: bool,
}

/// A raw answer.
#[derive(Debug, Clone)]
pub struct Raw {
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: Bytes,
}

/// The request did not complete (unreachable, timeout, oversized answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to reach Prometheus at {url}: {reason}")]
pub struct Unreachable {
    /// The URL asked.
    pub url: String,
    /// Why.
    pub reason: String,
}

/// The client.
#[derive(Debug, Clone)]
pub struct Client {
    cfg: Config,
    http: HttpClient,
}

impl Client {
    /// A client over an HTTP client (which holds the TLS settings).
    pub fn new(cfg: Config, http: HttpClient) -> Self {
        Self { cfg, http }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Runs an instant query at the current time.
    pub async fn query(&self, promql: &str) -> Result<Raw, Unreachable> {
        let timeout = format!("{}ms", self.cfg.timeout.as_millis());
        self.call("/api/v1/query", &[("query", promql), ("timeout", &timeout)]).await
    }

    /// Lists the series `selector` matches between `start` and `end` (seconds since the
    /// epoch).
    pub async fn series(&self, selector: &str, start: f64, end: f64) -> Result<Raw, Unreachable> {
        let (start, end) = (format!("{start:.3}"), format!("{end:.3}"));
        self.call("/api/v1/series", &[("match[]", selector), ("start", &start), ("end", &end)]).await
    }

    async fn call(&self, path: &str, params: &[(&str, &str)]) -> Result<Raw, Unreachable> {
        let base = format!("{}{path}", self.cfg.url.trim_end_matches('/'));
        let form = {
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (k, v) in params {
                form.append_pair(k, v);
            }
            form.finish()
        };
        let fail = |reason: String| Unreachable { url: base.clone(), reason };
        let mut req = if self.cfg.get {
            http::Request::builder().method(Method::GET).uri(format!("{base}?{form}"))
        } else {
            http::Request::builder()
                .method(Method::POST)
                .uri(&base)
                .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        };
        req = req.header(http::header::ACCEPT, "application/json");
        if let Some(t) = &self.cfg.bearer_token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        for (k, v) in &self.cfg.headers {
            req = req.header(k, v);
        }
        let body = if self.cfg.get { Bytes::new() } else { Bytes::from(form) };
        let req = req.body(Full::new(body)).map_err(|e| fail(e.to_string()))?;
        let resp = self.http.send(req, self.cfg.timeout, self.cfg.max_body).await.map_err(|e| fail(e.to_string()))?;
        Ok(Raw { status: resp.status.as_u16(), body: resp.body })
    }
}

/// Parses `--prometheus-header` values (`Name=value`).
pub fn parse_headers(raw: &[String]) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    raw.iter()
        .map(|h| {
            let (k, v) = h.split_once('=').ok_or_else(|| format!("--prometheus-header {h:?}: write Name=value"))?;
            let name = HeaderName::try_from(k.trim()).map_err(|e| format!("--prometheus-header {h:?}: {e}"))?;
            let value = HeaderValue::try_from(v.trim()).map_err(|e| format!("--prometheus-header {h:?}: {e}"))?;
            Ok((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_name_equals_value() {
        let h = parse_headers(&["X-Scope-OrgID=team-a".into(), "X-Extra = b=c".into()]).unwrap();
        assert_eq!(h[0].0.as_str(), "x-scope-orgid");
        assert_eq!(h[1].1.to_str().unwrap(), "b=c");
        assert!(parse_headers(&["novalue".into()]).unwrap_err().contains("Name=value"));
        assert!(parse_headers(&["bad name=x".into()]).is_err());
    }
}
