//! The Prometheus source: answers reads for the metric names its rules define by running
//! an instant query against a Prometheus-compatible API (`POST /api/v1/query`; Prometheus,
//! Thanos, Mimir), with a deadline and a response size cap. A slow, failing or unreachable
//! Prometheus is an error (503) for that read, never a zero.

pub mod adapter;
pub mod rules;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;

use self::rules::{Names, Rule};
use super::{Error, Listed, Objects, Point, Request, ResourceInfo, Result};
use crate::http_client::HttpClient;

/// Settings of the Prometheus source.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL (`http://prometheus:9090`, or a Thanos/Mimir prefix such as `.../prometheus`).
    pub url: String,
    /// Deadline for one query.
    pub timeout: Duration,
    /// Largest accepted response body.
    pub max_body: usize,
    /// Bearer token, if any.
    pub bearer_token: Option<String>,
}

/// The Prometheus source.
#[derive(Debug)]
pub struct PrometheusSource {
    cfg: Config,
    client: HttpClient,
    rules: Vec<Rule>,
    index: HashMap<(String, String), usize>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiData {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct VectorSample {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// One sample of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value (finite).
    pub value: f64,
    /// Evaluation time, ms since the epoch.
    pub timestamp_ms: i64,
}

/// Parses a `/api/v1/query` answer into its instant vector.
pub fn parse_vector(status: u16, body: &[u8]) -> Result<Vec<Sample>> {
    let resp: ApiResponse = serde_json::from_slice(body).map_err(|e| {
        Error::Unavailable(format!("Prometheus answered HTTP {status} with a body that is not its API JSON: {e}"))
    })?;
    if resp.status != "success" {
        return Err(Error::Unavailable(format!(
            "Prometheus query failed (HTTP {status}, {}): {}",
            resp.error_type.unwrap_or_default(),
            resp.error.unwrap_or_default()
        )));
    }
    let data = resp.data.ok_or_else(|| Error::Unavailable("Prometheus answer has no data".into()))?;
    if data.result_type != "vector" {
        return Err(Error::Internal(format!("query returned a {}, not an instant vector", data.result_type)));
    }
    let samples: Vec<VectorSample> = serde_json::from_value(data.result)
        .map_err(|e| Error::Unavailable(format!("malformed vector in Prometheus answer: {e}")))?;
    Ok(samples
        .into_iter()
        .filter_map(|s| {
            let value = s.value.1.parse::<f64>().ok().filter(|v| v.is_finite())?;
            let ts = s.value.0 * 1000.0;
            Some(Sample { labels: s.metric, value, timestamp_ms: if ts.is_finite() { ts.round() as i64 } else { 0 } })
        })
        .collect())
}

impl PrometheusSource {
    /// A source over validated rules.
    pub fn new(cfg: Config, client: HttpClient, rules: Vec<Rule>) -> Self {
        let mut index = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            for resource in r.resources.keys() {
                index.insert((resource.clone(), r.name.clone()), i);
            }
        }
        Self { cfg, client, rules, index }
    }

    /// The metric names the rules define.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.name.as_str())
    }

    /// Whether a rule serves `metric` for `resource`.
    pub fn serves(&self, resource: &str, metric: &str) -> bool {
        self.index.contains_key(&(resource.to_owned(), metric.to_owned()))
    }

    /// How a rule-declared resource is described.
    pub fn resource_info(&self, resource: &str) -> Option<ResourceInfo> {
        self.rules.iter().find_map(|r| r.resources.get(resource)).map(|rr| rr.info.clone())
    }

    /// Every (resource, metric) the rules define. They are listed whether or not series
    /// exist right now, so discovery does not flap with scrape gaps.
    pub fn listed(&self) -> Vec<Listed> {
        self.rules
            .iter()
            .flat_map(|r| {
                r.resources.iter().map(|(resource, rr)| Listed {
                    resource: resource.clone(),
                    metric: r.name.clone(),
                    namespaced: rr.info.namespaced,
                })
            })
            .collect()
    }

    /// Runs one instant query.
    pub async fn instant_query(&self, promql: &str) -> Result<Vec<Sample>> {
        let url = format!("{}/api/v1/query", self.cfg.url.trim_end_matches('/'));
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .append_pair("timeout", &format!("{}ms", self.cfg.timeout.as_millis()))
            .finish();
        let mut req = http::Request::post(&url).header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(t) = &self.cfg.bearer_token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::from(form))).map_err(|e| Error::Internal(e.to_string()))?;
        let resp = self
            .client
            .send(req, self.cfg.timeout, self.cfg.max_body)
            .await
            .map_err(|e| Error::Unavailable(format!("unable to fetch metrics from Prometheus at {url}: {e}")))?;
        parse_vector(resp.status.as_u16(), &resp.body)
    }

    /// Answers a read with the rule for (resource, metric).
    pub async fn query(&self, req: &Request<'_>) -> Result<Vec<Point>> {
        let Some(rule) = self.index.get(&(req.resource.to_owned(), req.metric.to_owned())).map(|&i| &self.rules[i])
        else {
            return Ok(Vec::new());
        };
        let Some(rr) = rule.resources.get(req.resource) else { return Ok(Vec::new()) };
        let namespace = if rr.info.namespaced { req.namespace } else { None };
        let listed: Vec<&str>;
        let names = match req.objects {
            Objects::All => Names::All,
            Objects::One(n) => {
                listed = vec![n.as_str()];
                Names::Some(&listed)
            }
            Objects::Names(v) if v.is_empty() => return Ok(Vec::new()),
            Objects::Names(v) => {
                listed = v.iter().map(|s| &**s).collect();
                Names::Some(&listed)
            }
        };
        let promql = rules::render(rule, rr, namespace, names, req.metric_selector).map_err(|e| Error::Invalid(e.0))?;
        let samples = self.instant_query(&promql).await?;
        let mut seen: HashSet<Arc<str>> = HashSet::new();
        let mut out = Vec::with_capacity(samples.len());
        for s in samples {
            let Some(name) = s.labels.get(&rr.label) else { continue };
            if !req.objects.contains(name) {
                continue;
            }
            let name: Arc<str> = Arc::from(name.as_str());
            if !seen.insert(name.clone()) {
                return Err(Error::Internal(format!(
                    "rule {} returned several series for {} {name}; aggregate them with by (<<.GroupBy>>)",
                    rule.name, req.resource
                )));
            }
            out.push(Point { name, value: s.value, timestamp_ms: s.timestamp_ms, window_seconds: rule.window_seconds });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vectors_and_drops_non_finite_values() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a"},"value":[1700000000.5,"180.25"]},
            {"metric":{"pod":"b"},"value":[1700000000.5,"NaN"]},
            {"metric":{"pod":"c"},"value":[1700000000.5,"+Inf"]}]}}"#;
        let v = parse_vector(200, body).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].value, 180.25);
        assert_eq!(v[0].timestamp_ms, 1_700_000_000_500);
        assert_eq!(v[0].labels["pod"], "a");
    }

    #[test]
    fn errors_are_errors_not_zeros() {
        let e = parse_vector(400, br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#).unwrap_err();
        assert!(matches!(&e, Error::Unavailable(m) if m.contains("bad_data") && m.contains("parse error")), "{e}");
        assert!(matches!(parse_vector(502, b"<html>bad gateway</html>"), Err(Error::Unavailable(_))));
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#;
        assert!(matches!(parse_vector(200, scalar), Err(Error::Internal(_))));
        let bad = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":"x"}]}}"#;
        assert!(matches!(parse_vector(200, bad), Err(Error::Unavailable(_))));
    }
}
