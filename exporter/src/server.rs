//! HTTP routes: `/metrics` (content-negotiated, optionally gzip), `/healthz`, `/readyz`.
//!
//! A scrape renders the latest published snapshot, never NVML. The rendered bytes are
//! cached per snapshot generation, format and encoding, so concurrent scrapers between
//! two cycles share one render.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use tokio::sync::watch;

use crate::exposition::Format;
use crate::render::{RenderContext, Section, render_with};
use crate::snapshot::{NvmlStatus, Snapshot};

/// Shared by all requests.
#[derive(Debug)]
pub struct AppState {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    context: RenderContext,
    /// Families rendered after the exporter's own (the health loop's).
    sections: Vec<Arc<dyn Section>>,
    cache: Mutex<Vec<CachedBody>>,
}

#[derive(Debug, Clone)]
struct CachedBody {
    generation: u64,
    sections: u64,
    format: Format,
    gzip: bool,
    body: Bytes,
}

impl AppState {
    pub fn new(snapshots: watch::Receiver<Arc<Snapshot>>, context: RenderContext) -> Arc<Self> {
        Self::with_sections(snapshots, context, Vec::new())
    }

    /// Like [`AppState::new`], with more families rendered after the exporter's own.
    pub fn with_sections(
        snapshots: watch::Receiver<Arc<Snapshot>>,
        context: RenderContext,
        sections: Vec<Arc<dyn Section>>,
    ) -> Arc<Self> {
        Arc::new(AppState { snapshots, context, sections, cache: Mutex::new(Vec::new()) })
    }

    fn body(&self, format: Format, gzip: bool) -> Bytes {
        let snapshot = self.snapshots.borrow().clone();
        let sections = self.sections.iter().fold(0u64, |acc, s| acc.wrapping_mul(31).wrapping_add(s.generation()));
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.retain(|c| c.generation == snapshot.generation && c.sections == sections);
        if let Some(hit) = cache.iter().find(|c| c.format == format && c.gzip == gzip) {
            return hit.body.clone();
        }
        let text = render_with(&snapshot, &self.context, format, &self.sections);
        let body = if gzip { Bytes::from(gzip_bytes(text.as_bytes())) } else { Bytes::from(text) };
        cache.push(CachedBody { generation: snapshot.generation, sections, format, gzip, body: body.clone() });
        body
    }
}

fn gzip_bytes(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 4), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(data);
    encoder.finish().unwrap_or_default()
}

/// The exporter's routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(landing))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    let gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.split(';').next().is_some_and(|e| e.trim() == "gzip")));
    let body = state.body(format, gzip);
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once NVML is up and one cycle has completed; otherwise 503 with the reason.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let snapshot = state.snapshots.borrow().clone();
    match &snapshot.nvml {
        NvmlStatus::Up(_) if snapshot.stats.cycles_total > 0 => (StatusCode::OK, "ready\n".to_string()),
        NvmlStatus::Up(_) => (StatusCode::SERVICE_UNAVAILABLE, "waiting for the first collection cycle\n".into()),
        NvmlStatus::Starting => (StatusCode::SERVICE_UNAVAILABLE, "NVML not initialised yet\n".into()),
        NvmlStatus::Down { error, message } => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("NVML is down ({}): {message}\n", error.as_str()))
        }
    }
    .into_response()
}

async fn landing() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<html><head><title>GPU exporter</title></head><body><h1>GPU exporter</h1>\
         <p><a href=\"/metrics\">Metrics</a> · <a href=\"/healthz\">Health</a> · \
         <a href=\"/readyz\">Readiness</a></p></body></html>\n",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{DriverInfo, NvmlDownReason};
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn app(snapshot: Snapshot) -> (Router, watch::Sender<Arc<Snapshot>>) {
        let (tx, rx) = watch::channel(Arc::new(snapshot));
        let ctx = RenderContext { node: "n1".into(), ..RenderContext::default() };
        (router(AppState::new(rx, ctx)), tx)
    }

    async fn get(app: &Router, path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
        let mut request = Request::get(path);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
        (status, headers, body)
    }

    #[tokio::test]
    async fn metrics_follow_the_accept_header() {
        let (app, _tx) = app(Snapshot::default());
        let (status, headers, body) = get(&app, "/metrics", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], "text/plain; version=0.0.4; charset=utf-8");
        assert!(!String::from_utf8(body).unwrap().contains("# EOF"));
        let (_, headers, body) =
            get(&app, "/metrics", &[("accept", "application/openmetrics-text;version=1.0.0")]).await;
        assert_eq!(headers[header::CONTENT_TYPE], "application/openmetrics-text; version=1.0.0; charset=utf-8");
        assert!(String::from_utf8(body).unwrap().ends_with("# EOF\n"));
    }

    #[tokio::test]
    async fn gzip_when_asked() {
        let (app, _tx) = app(Snapshot::default());
        let (_, headers, body) = get(&app, "/metrics", &[("accept-encoding", "gzip")]).await;
        assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut text).unwrap();
        assert!(text.contains("gpu_exporter_nvml_up"), "{text}");
    }

    #[tokio::test]
    async fn a_new_snapshot_replaces_the_cached_body() {
        let (app, tx) = app(Snapshot { generation: 1, ..Snapshot::default() });
        let (_, _, first) = get(&app, "/metrics", &[]).await;
        assert!(String::from_utf8(first).unwrap().contains("gpu_exporter_nvml_up{node=\"n1\"} 0"));
        tx.send_replace(Arc::new(Snapshot {
            generation: 2,
            nvml: NvmlStatus::Up(DriverInfo::default()),
            ..Snapshot::default()
        }));
        let (_, _, second) = get(&app, "/metrics", &[]).await;
        assert!(String::from_utf8(second).unwrap().contains("gpu_exporter_nvml_up{node=\"n1\"} 1"));
    }

    #[tokio::test]
    async fn readiness_needs_nvml_and_one_cycle() {
        let down = Snapshot {
            nvml: NvmlStatus::Down { error: NvmlDownReason::LibraryNotLoaded, message: "no such file".into() },
            ..Snapshot::default()
        };
        let (app, tx) = app(down);
        let (status, _, body) = get(&app, "/readyz", &[]).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(String::from_utf8(body).unwrap(), "NVML is down (library_not_loaded): no such file\n");
        assert_eq!(get(&app, "/healthz", &[]).await.0, StatusCode::OK);
        let mut up = Snapshot { generation: 3, nvml: NvmlStatus::Up(DriverInfo::default()), ..Snapshot::default() };
        tx.send_replace(Arc::new(up.clone()));
        assert_eq!(get(&app, "/readyz", &[]).await.0, StatusCode::SERVICE_UNAVAILABLE);
        up.stats.cycles_total = 1;
        tx.send_replace(Arc::new(up));
        assert_eq!(get(&app, "/readyz", &[]).await.0, StatusCode::OK);
    }
}
