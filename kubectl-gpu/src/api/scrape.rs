//! Exporter pages through the API server's pods `proxy` subresource:
//! `GET /api/v1/namespaces/{ns}/pods/{[https:]pod:port}/proxy/metrics`.
//!
//! - **Bounded:** at most `--concurrency` (64) reads in flight; a fleet of 1,000 nodes is
//!   read in about 16 rounds of one exporter's latency.
//! - **Deadlines:** each read has `--exporter-timeout` (3 s) and none outlives the run's
//!   `--timeout` (10 s): a read not finished by then, or not started, is unknown
//!   (`timed out`), and the command still returns in time.
//! - **Unknown, never zero:** a 403 is `forbidden` (RBAC on `pods/proxy`), a 502/503 or no
//!   answer `unreachable` (the API server could not reach the pod), a page that does not
//!   parse `bad page`, one past a limit `page over limit`; each with the API server's
//!   words, or the limit, as the detail.
//! - **Streamed:** a page is parsed as it arrives and cut at the metrics adapter's limits
//!   ([`crate::page`]); an error answer is read to 64 KiB ([`body`]). Memory per read
//!   does not follow the page's size, and a page that never ends ends at 16 MiB.
//!
//! The port is the exporter container's port of that name (`metrics`) or number: the
//! pod proxy takes a number.

use std::ops::ControlFlow;
use std::time::Duration;

use exposition_parser::{Format, Limits, Sample};
use futures::StreamExt;
use kube::Client;
use tokio::time::Instant;

use super::{body, describe, status_code};
use crate::cli::Scheme;
use crate::cluster::PodInfo;
use crate::fleet::{Exporter, UnknownReason};
use crate::page::{MAX_KEPT_BYTES, PageError, PageParser};
use crate::readings;

/// How to read the exporters.
#[derive(Debug, Clone)]
pub struct ScrapeOptions {
    pub namespace: String,
    pub port: String,
    pub scheme: Scheme,
    pub per_read: Duration,
    pub deadline: Instant,
    pub concurrency: usize,
}

/// The proxy path of an exporter pod's `/metrics`.
pub fn proxy_path(namespace: &str, pod: &str, port: u16, scheme: Scheme) -> String {
    let scheme = match scheme {
        Scheme::Http => "",
        Scheme::Https => "https:",
    };
    format!("/api/v1/namespaces/{namespace}/pods/{scheme}{pod}:{port}/proxy/metrics")
}

fn unknown(reason: UnknownReason, detail: impl Into<String>) -> Exporter {
    Exporter::Unknown { reason, detail: detail.into() }
}

/// The port to read on `pod`: `port` as a number, or the container port of that name.
pub fn resolve_port(pod: &PodInfo, port: &str) -> Option<u16> {
    port.parse().ok().or_else(|| pod.ports.get(port).copied())
}

/// Reads one exporter pod.
pub async fn read(client: &Client, pod: &PodInfo, options: &ScrapeOptions) -> Exporter {
    if pod.phase != "Running" {
        return unknown(UnknownReason::NotRunning, format!("pod {}/{} is {}", pod.namespace, pod.name, pod.phase));
    }
    let Some(port) = resolve_port(pod, &options.port) else {
        return unknown(
            UnknownReason::Unreachable,
            format!("pod {}/{} has no port {:?}", pod.namespace, pod.name, options.port),
        );
    };
    let left = options.deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return unknown(UnknownReason::Timeout, "the command's --timeout passed before this exporter was read");
    }
    let limit = left.min(options.per_read);
    let path = proxy_path(&options.namespace, &pod.name, port, options.scheme);
    let request = match http::Request::get(&path).header("accept", "text/plain;version=0.0.4").body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return unknown(UnknownReason::Unreachable, e.to_string()),
    };
    let who = format!("pod {}/{}", pod.namespace, pod.name);
    match tokio::time::timeout(limit, read_page(client, request)).await {
        Err(_) => unknown(
            UnknownReason::Timeout,
            format!("no answer from {who} within {}", flag_ranges::show_duration(limit)),
        ),
        Ok(Err(Failed::Api(e))) => {
            let reason = match status_code(&e) {
                Some(401 | 403) => UnknownReason::Forbidden,
                _ => UnknownReason::Unreachable,
            };
            unknown(reason, describe(&e))
        }
        Ok(Err(Failed::Page(e))) => {
            let reason = if e.is_limit() { UnknownReason::OverLimit } else { UnknownReason::BadPage };
            unknown(reason, format!("{who}: {e}"))
        }
        Ok(Ok(samples)) => Exporter::from_readings(readings::from_samples(&samples)),
    }
}

enum Failed {
    Api(kube::Error),
    Page(PageError),
}

/// Reads one page as it arrives into [`PageParser`], within the adapter's limits: the
/// read stops, and the connection is dropped, at the first limit passed.
async fn read_page(client: &Client, request: http::Request<Vec<u8>>) -> Result<Vec<Sample>, Failed> {
    let response = body::send(client, request).await.map_err(Failed::Api)?;
    let content_type = response.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let format = Format::from_content_type(content_type);
    let mut page =
        PageParser::new(format, Limits::default(), MAX_KEPT_BYTES, |f: &str| readings::FAMILIES.contains(&f));
    let stopped = body::each_chunk(response.into_body(), |chunk| match page.feed(chunk) {
        Ok(false) => ControlFlow::Continue(()),
        Ok(true) => ControlFlow::Break(None),
        Err(e) => ControlFlow::Break(Some(e)),
    })
    .await
    .map_err(Failed::Api)?;
    if let Some(Some(e)) = stopped {
        return Err(Failed::Page(e));
    }
    page.finish().map_err(Failed::Page)
}

/// Reads many exporter pods, at most `options.concurrency` at once, each read (and the
/// parse of its page) a task of its own so that pages are parsed on every core; results
/// in the order of `pods`.
pub async fn read_all(
    client: &Client,
    pods: Vec<(String, PodInfo)>,
    options: &ScrapeOptions,
) -> Vec<(String, Exporter)> {
    let reads = pods.into_iter().map(|(node, pod)| {
        let (client, options) = (client.clone(), options.clone());
        async move {
            let task = tokio::spawn(async move { read(&client, &pod, &options).await });
            let exporter =
                task.await.unwrap_or_else(|e| unknown(UnknownReason::Unreachable, format!("the read failed: {e}")));
            (node, exporter)
        }
    });
    futures::stream::iter(reads).buffered(options.concurrency.max(1)).collect().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_path_names_scheme_pod_and_port() {
        assert_eq!(
            proxy_path("gpu-telemetry", "gpu-exporter-x", 9400, Scheme::Http),
            "/api/v1/namespaces/gpu-telemetry/pods/gpu-exporter-x:9400/proxy/metrics"
        );
        assert_eq!(
            proxy_path("gpu-telemetry", "gpu-exporter-x", 9400, Scheme::Https),
            "/api/v1/namespaces/gpu-telemetry/pods/https:gpu-exporter-x:9400/proxy/metrics"
        );
        let pod = PodInfo { ports: [("metrics".to_string(), 9400)].into(), ..PodInfo::default() };
        assert_eq!(resolve_port(&pod, "metrics"), Some(9400));
        assert_eq!(resolve_port(&pod, "9401"), Some(9401));
        assert_eq!(resolve_port(&pod, "web"), None);
    }
}
