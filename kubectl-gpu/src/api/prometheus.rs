//! A Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics), as
//! `rightsize` reads it: instant queries, `GET <base>/api/v1/query?query=...&time=...`.
//!
//! - **Through the API server** (`--prometheus-service namespace/name:port`): the
//!   services `proxy` subresource, `/api/v1/namespaces/{ns}/services/{name}:{port}/proxy`,
//!   so RBAC applies (`get` on `services/proxy` in that namespace) and no port-forward is
//!   needed. The port is a number or the Service port's name; `https:name:port` for a
//!   TLS port, as kube-apiserver takes it.
//! - **Directly** (`--prometheus-url`): a client of its own for that URL (a path prefix
//!   such as Thanos' or Mimir's `/prometheus` is kept), without the kubeconfig's
//!   credentials: they are the cluster's, not the Prometheus'.
//!
//! Answers are read within bounds ([`super::body`]): an answer past
//! [`MAX_ANSWER_BYTES`] is refused with the limit named, an error answer is read to
//! 64 KiB and quoted in Prometheus' words where it has them.

use kube::client::Body;
use kube::{Client, Config};

use super::body;
use crate::rightsize::history::{self, Sample};

/// The largest answer accepted: 10,000 pods' series with their labels take about 5 MiB.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Why the history could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("--prometheus-service {0:?}: expected NAMESPACE/NAME:PORT (PORT a number or a port name)")]
    Service(String),
    #[error("--prometheus-url {url:?}: {message}")]
    Url { url: String, message: String },
    #[error("{at}: {message}")]
    Request { at: String, message: String },
}

pub type Result<T, E = PrometheusError> = std::result::Result<T, E>;

/// Where the query API is.
#[derive(Clone)]
pub struct Prometheus {
    client: Client,
    /// Path before `/api/v1/query`.
    prefix: String,
    /// How the messages name it.
    pub name: String,
}

/// `namespace/name:port` as (namespace, `name:port`).
pub fn parse_service(text: &str) -> Result<(String, String)> {
    let refuse = || PrometheusError::Service(text.into());
    let (ns, target) = text.split_once('/').ok_or_else(refuse)?;
    let (name, port) = target.rsplit_once(':').ok_or_else(refuse)?;
    let name = name.strip_prefix("https:").unwrap_or(name);
    let valid = |s: &str| {
        !s.is_empty() && !s.starts_with('.') && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    if !valid(ns) || !valid(name) || !valid(port) {
        return Err(refuse());
    }
    Ok((ns.to_string(), target.to_string()))
}

impl Prometheus {
    /// Through the API server's services proxy.
    pub fn service(client: &Client, text: &str) -> Result<Prometheus> {
        let (ns, target) = parse_service(text)?;
        Ok(Prometheus {
            client: client.clone(),
            prefix: format!("/api/v1/namespaces/{ns}/services/{target}/proxy"),
            name: format!("Prometheus service {ns}/{target}"),
        })
    }

    /// At a URL of its own.
    pub fn url(url: &str) -> Result<Prometheus> {
        let refuse = |message: String| PrometheusError::Url { url: url.into(), message };
        let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| refuse(e.to_string()))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(refuse("expected http(s)://HOST[:PORT][/PATH]".into()));
        }
        let mut config = Config::new(uri);
        config.default_retry = false;
        let client = Client::try_from(config).map_err(|e| refuse(e.to_string()))?;
        Ok(Prometheus { client, prefix: String::new(), name: format!("Prometheus at {url}") })
    }

    /// The path of an instant query.
    pub fn query_path(&self, query: &str, time: f64) -> String {
        let encoded: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .append_pair("time", &format!("{time:.3}"))
            .finish();
        format!("{}/api/v1/query?{encoded}", self.prefix)
    }

    /// Runs one instant query at `time`.
    pub async fn query(&self, query: &str, time: f64) -> Result<Vec<Sample>> {
        let at = || self.name.clone();
        let request = http::Request::get(self.query_path(query, time))
            .header("accept", "application/json")
            .body(Vec::new())
            .map_err(|e| PrometheusError::Request { at: at(), message: e.to_string() })?;
        let response = self
            .client
            .send(request.map(Body::from))
            .await
            .map_err(|e| PrometheusError::Request { at: at(), message: super::describe(&e) })?;
        let status = response.status();
        let limit = if status.is_success() { MAX_ANSWER_BYTES } else { body::MAX_ERROR_BYTES };
        let (bytes, cut) = body::collect(response.into_body(), limit)
            .await
            .map_err(|e| PrometheusError::Request { at: at(), message: super::describe(&e) })?;
        if status.is_success() && cut {
            return Err(PrometheusError::Request {
                at: at(),
                message: format!("the answer is larger than the limit of {MAX_ANSWER_BYTES} bytes"),
            });
        }
        if !status.is_success() {
            return Err(PrometheusError::Request { at: at(), message: refusal(status.as_u16(), &bytes) });
        }
        history::parse_answer(&bytes).map_err(|e| PrometheusError::Request { at: at(), message: e.to_string() })
    }
}

/// What an error answer says: Prometheus words its refusals (`errorType`, `error`); the
/// API server (a 403 of the services proxy, a 503 with no endpoint) its own, in a
/// `Status`, which also carries `"status": "Failure"` and so must not be read as
/// Prometheus' answer, whose words it lacks.
fn refusal(code: u16, bytes: &[u8]) -> String {
    let is_status = serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| v["kind"] == "Status");
    match history::parse_answer(bytes) {
        Err(e @ history::HistoryError::Query { .. }) if !is_status => e.to_string(),
        _ => super::describe(&body::api_error(code, bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_worded_by_whoever_refused() {
        // As kube-apiserver refuses a user without services/proxy.
        let forbidden = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"services \"prometheus:9090\" is forbidden: User \"carol\" cannot get resource \"services/proxy\" in API group \"\" in the namespace \"gpu-telemetry\"","reason":"Forbidden","details":{"name":"prometheus:9090","kind":"services"},"code":403}"#;
        assert_eq!(
            refusal(403, forbidden),
            "Error from server (Forbidden): services \"prometheus:9090\" is forbidden: User \"carol\" cannot get \
             resource \"services/proxy\" in API group \"\" in the namespace \"gpu-telemetry\""
        );
        let prometheus = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        assert_eq!(refusal(400, prometheus), "Prometheus refused the query (bad_data): parse error at char 3");
        assert_eq!(refusal(502, b"bad gateway"), "Error from server (502): bad gateway");
    }

    #[test]
    fn a_service_is_namespace_name_and_port() {
        assert_eq!(
            parse_service("monitoring/prometheus:9090").unwrap(),
            ("monitoring".into(), "prometheus:9090".into())
        );
        assert_eq!(parse_service("monitoring/prometheus-k8s:web").unwrap().1, "prometheus-k8s:web");
        assert_eq!(parse_service("monitoring/https:thanos:10902").unwrap().1, "https:thanos:10902");
        for bad in ["prometheus:9090", "monitoring/prometheus", "/p:1", "m/p:", "m/p q:1", "m/../x:1/"] {
            let e = parse_service(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--prometheus-service {bad:?}: expected NAMESPACE/NAME:PORT")), "{e}");
        }
        let e = Prometheus::url("ftp://x").err().unwrap().to_string();
        assert!(e.contains("expected http(s)://HOST"), "{e}");
    }
}
