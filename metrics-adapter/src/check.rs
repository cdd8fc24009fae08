//! `gpu-metrics-adapter check-api`: asks `custom.metrics.k8s.io` through the Kubernetes API
//! server, as the HPA controller does, and says whether it answers. The Helm chart's
//! `helm test` hook runs it in the adapter's image under a ServiceAccount that may read
//! the metric and nothing else.
//!
//! Two requests, each judged by [`judge`] (pure, unit-tested): the version's discovery
//! document (is the APIService registered, and does the aggregator reach the adapter?),
//! then the metric of every pod of a namespace (does the adapter serve it, and may the
//! caller read it?). Any other answer than 200 is an error naming the request, the status
//! and what it usually means.

use std::time::Duration;

use http_body_util::BodyExt as _;
use serde_json::Value;

use crate::config::{Args, CheckApiArgs};

/// Why the check failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// No client could be made (no in-cluster environment, a bad kubeconfig).
    #[error("{0}")]
    Client(String),
    /// The request did not complete.
    #[error("GET {path}: {reason}")]
    Request { path: String, reason: String },
    /// An answer other than the one wanted.
    #[error("GET {path}: {status}: {message}{hint}")]
    Answer { path: String, status: u16, message: String, hint: &'static str },
}

/// The check's result.
pub type Result<T, E = CheckError> = std::result::Result<T, E>;

/// The two paths asked, in order.
pub fn paths(args: &CheckApiArgs) -> [String; 2] {
    let version = format!("/apis/custom.metrics.k8s.io/{}", args.api_version);
    let metric = format!("{version}/namespaces/{}/pods/*/{}", args.namespace, args.metric);
    [version, metric]
}

/// What an answer means: its parsed body when 200, else why not.
pub fn judge(path: &str, status: u16, body: &[u8]) -> Result<Value> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if status == 200 {
        return parsed.ok_or_else(|| CheckError::Answer {
            path: path.into(),
            status,
            message: "the body is not JSON".into(),
            hint: "",
        });
    }
    let message = parsed
        .as_ref()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().chars().take(300).collect());
    let hint = match status {
        401 => " (the caller's credentials were not accepted)",
        403 => " (RBAC does not let the caller read this metric: the chart's test Role grants it)",
        404 if path.matches('/').count() <= 3 => {
            " (the APIService for this version is not registered: was the chart installed?)"
        }
        404 => " (the adapter does not serve this metric for pods)",
        503 => {
            " (the API server cannot reach the adapter: `kubectl get apiservice` shows why, e.g. no ready \
             replica or a caBundle that does not verify its certificate)"
        }
        _ => "",
    };
    Err(CheckError::Answer { path: path.into(), status, message, hint })
}

/// The number of values in a `MetricValueList`.
pub fn count_items(list: &Value) -> Result<usize, String> {
    match (list["kind"].as_str(), list["items"].as_array()) {
        (Some("MetricValueList"), Some(items)) => Ok(items.len()),
        (Some("MetricValueList"), None) if list["items"].is_null() => Ok(0),
        _ => Err(format!("expected a MetricValueList, got {}", list["kind"])),
    }
}

async fn get(client: &kube::Client, path: &str, timeout: Duration) -> Result<Value> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(|e| CheckError::Request { path: path.into(), reason: e.to_string() })?;
    let failed = |reason: String| CheckError::Request { path: path.into(), reason };
    let answer = tokio::time::timeout(timeout, async {
        let response = client.send(request).await.map_err(|e| failed(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(|e| failed(e.to_string()))?.to_bytes();
        Ok::<_, CheckError>((status, body))
    })
    .await
    .map_err(|_| failed(format!("no answer within {}", crate::config::show_duration(timeout))))??;
    judge(path, answer.0, &answer.1)
}

/// Runs the check; `Ok` is the line to print.
pub async fn run(server: &Args, args: &CheckApiArgs) -> Result<String> {
    let mut config = crate::app::kube_config(server).await.map_err(|e| CheckError::Client(e.to_string()))?;
    // An aggregated API that is down answers 503; say so at once instead of retrying.
    config.default_retry = false;
    let client = kube::Client::try_from(config).map_err(|e| CheckError::Client(e.to_string()))?;
    let [discovery, metric] = paths(args);
    let listed = get(&client, &discovery, args.timeout).await?;
    let wanted = format!("pods/{}", args.metric);
    let names: Vec<&str> =
        listed["resources"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    if !names.contains(&wanted.as_str()) {
        return Err(CheckError::Answer {
            path: discovery,
            status: 200,
            message: format!("{wanted} is not among the served metrics {names:?}"),
            hint: "",
        });
    }
    let list = get(&client, &metric, args.timeout).await?;
    let n = count_items(&list).map_err(|message| CheckError::Answer {
        path: metric.clone(),
        status: 200,
        message,
        hint: "",
    })?;
    Ok(format!(
        "custom.metrics.k8s.io/{} answers through the API server: {wanted} listed; {n} pod(s) of namespace {} have a value",
        args.api_version, args.namespace
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(line: &[&str]) -> CheckApiArgs {
        let cli = crate::config::Cli::try_parse_from(line).unwrap();
        match cli.command {
            Some(crate::config::Command::CheckApi(a)) => a,
            other => panic!("not check-api: {other:?}"),
        }
    }

    #[test]
    fn asks_discovery_then_the_metric_of_every_pod_of_the_namespace() {
        let a = args(&["x", "check-api", "--namespace", "gpu-telemetry"]);
        assert_eq!(
            paths(&a),
            [
                "/apis/custom.metrics.k8s.io/v1beta2".to_owned(),
                "/apis/custom.metrics.k8s.io/v1beta2/namespaces/gpu-telemetry/pods/*/gpu_utilization".to_owned()
            ]
        );
        let a = args(&["x", "check-api", "--namespace=n", "--metric=m", "--api-version=v1beta1"]);
        assert_eq!(paths(&a)[1], "/apis/custom.metrics.k8s.io/v1beta1/namespaces/n/pods/*/m");
        assert!(crate::config::Cli::try_parse_from(["x", "check-api", "--namespace=n", "--api-version=v2"]).is_err());
        assert!(crate::config::Cli::try_parse_from(["x", "check-api"]).is_err(), "--namespace is required");
    }

    #[test]
    fn each_failure_says_what_it_usually_means() {
        let status = |code: u16, message: &str| {
            serde_json::json!({"kind": "Status", "code": code, "message": message}).to_string().into_bytes()
        };
        let d = "/apis/custom.metrics.k8s.io/v1beta2";
        let m = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/n/pods/*/gpu_utilization";
        let e = judge(d, 503, &status(503, "service unavailable")).unwrap_err().to_string();
        assert!(e.contains("503: service unavailable") && e.contains("cannot reach the adapter"), "{e}");
        let e = judge(d, 404, b"404 page not found").unwrap_err().to_string();
        assert!(e.contains("404 page not found") && e.contains("not registered"), "{e}");
        let e = judge(m, 404, &status(404, "the server could not find the metric")).unwrap_err().to_string();
        assert!(e.contains("does not serve this metric"), "{e}");
        let e = judge(m, 403, &status(403, "forbidden")).unwrap_err().to_string();
        assert!(e.starts_with(&format!("GET {m}: 403: forbidden")) && e.contains("RBAC"), "{e}");
        assert!(judge(d, 200, b"<html>").unwrap_err().to_string().contains("not JSON"));
        assert_eq!(judge(d, 200, b"{\"kind\":\"APIResourceList\"}").unwrap()["kind"], "APIResourceList");
    }

    #[test]
    fn counts_the_values_of_a_metric_value_list() {
        let list = |items: Value| serde_json::json!({"kind": "MetricValueList", "items": items});
        assert_eq!(count_items(&list(serde_json::json!([{}, {}]))), Ok(2));
        assert_eq!(count_items(&list(Value::Null)), Ok(0));
        assert!(count_items(&serde_json::json!({"kind": "Status"})).is_err());
    }
}
