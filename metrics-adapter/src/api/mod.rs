//! The HTTP API: health endpoints without authentication, and behind authentication the
//! discovery documents, OpenAPI and the metric reads of `custom.metrics.k8s.io` v1beta1
//! and v1beta2. Every error is a `metav1.Status`.
//!
//! Answers from the Prometheus source carry `Server-Timing: prometheus;dur=<ms>`, the time
//! the query took, so that a client (and the benchmark) can tell the adapter's own time
//! from Prometheus'.
//!
//! Order of checks for a request: size limits (414/431), method (405), authentication
//! (401), routing (404/400), authorization (403), then the read. Discovery and OpenAPI are
//! answered to any authenticated user without a SubjectAccessReview (the default
//! `system:discovery` role grants them to everyone anyway) and never depend on the
//! sources, so `/apis` never answers 503.

pub mod error;
pub mod external;
pub mod openapi;
pub mod path;
pub mod types;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderValue, Method, StatusCode, header};
use serde::Serialize;

use self::error::ApiError;
use self::path::{ApiPath, Target};
use self::types::{GROUP, Version};
use crate::auth::authn::Authenticator;
use crate::auth::authz::{Attributes, Authorizer, Decision};
use crate::auth::{PeerCertificates, UserInfo};
use crate::objects::{self, ObjectNames};
use crate::quantity::Quantity;
use crate::source::{self, Objects, Sources, Which};

/// A named readiness check.
pub type ReadyCheck = (String, Arc<dyn Fn() -> bool + Send + Sync>);

/// Request size limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest request target (path and query), bytes.
    pub max_uri_bytes: usize,
    /// Largest total of header names and values, bytes.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_uri_bytes: 16 << 10, max_header_bytes: 64 << 10 }
    }
}

/// Everything the handlers need.
#[derive(Clone)]
pub struct AppState {
    /// Metric sources.
    pub sources: Sources,
    /// Which objects exist (pods and nodes from the label store, the rest listed);
    /// `None` in standalone mode.
    pub objects: Option<Arc<ObjectNames>>,
    /// Authentication.
    pub authn: Arc<Authenticator>,
    /// Authorization.
    pub authz: Arc<Authorizer>,
    /// Readiness checks for `/readyz`.
    pub ready_checks: Vec<ReadyCheck>,
    /// Request limits.
    pub limits: Limits,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("sources", &self.sources).field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .route("/livez", get(health))
        .route("/readyz", get(readyz))
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(state.clone(), limits))
        .with_state(state)
}

async fn health() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    let mut text = String::new();
    let mut ok = true;
    for (name, check) in &state.ready_checks {
        let pass = check();
        ok &= pass;
        text.push_str(&format!("[{}]{name} {}\n", if pass { '+' } else { '-' }, if pass { "ok" } else { "failed" }));
    }
    text.push_str(if ok { "readyz check passed\n" } else { "readyz check failed\n" });
    let code = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

async fn limits(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > state.limits.max_uri_bytes {
        return ApiError::UriTooLong(uri_len, state.limits.max_uri_bytes).into_response();
    }
    let header_len: usize = req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    if header_len > state.limits.max_header_bytes {
        return ApiError::HeadersTooLarge(header_len, state.limits.max_header_bytes).into_response();
    }
    next.run(req).await
}

fn json<T: Serialize>(value: &T) -> Response {
    json_bytes(serde_json::to_vec(value).unwrap_or_default())
}

fn json_bytes(body: Vec<u8>) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    resp
}

/// Whether the client accepts JSON (no Accept header does).
fn accepts_json(headers: &http::HeaderMap) -> bool {
    let values: Vec<&str> = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect();
    if values.is_empty() {
        return true;
    }
    values.iter().flat_map(|v| v.split(',')).any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let refused = parts.any(|p| p.trim().replace(' ', "") == "q=0");
        !refused && matches!(media.as_str(), "application/json" | "application/*" | "*/*" | "*")
    })
}

async fn dispatch(State(state): State<AppState>, req: Request) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let (result, user) = answer(&state, req).await;
    let resp = result.unwrap_or_else(IntoResponse::into_response);
    let code = resp.status().as_u16();
    let user = user.as_ref().map_or("", |u| u.name.as_str());
    let elapsed_us = started.elapsed().as_micros();
    if code >= 500 {
        tracing::warn!(%method, %path, code, user, elapsed_us, "request failed");
    } else {
        tracing::debug!(%method, %path, code, user, elapsed_us, "request");
    }
    resp
}

async fn answer(state: &AppState, req: Request) -> (Result<Response, ApiError>, Option<UserInfo>) {
    let (req, _body) = req.into_parts();
    if req.method != Method::GET && req.method != Method::HEAD {
        return (Err(ApiError::MethodNotAllowed(req.method.to_string())), None);
    }
    let certs = req.extensions.get::<PeerCertificates>().cloned();
    let user = match state.authn.authenticate(&req.headers, certs.as_ref()).await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(error = %e, path = req.uri.path(), "authentication failed");
            return (Err(ApiError::Unauthorized), None);
        }
    };
    if !accepts_json(&req.headers) {
        return (Err(ApiError::NotAcceptable), Some(user));
    }
    let result = route(state, &req, &user).await;
    (result, Some(user))
}

async fn route(state: &AppState, req: &http::request::Parts, user: &UserInfo) -> Result<Response, ApiError> {
    let raw_path = req.uri.path();
    let external = state.sources.external_served();
    match raw_path.trim_end_matches('/') {
        "/apis" => {
            let more = if external { vec![external::api_group(false)] } else { Vec::new() };
            return Ok(json(&types::api_group_list(more)));
        }
        "/openapi/v2" => return Ok(json(&openapi::v2(external))),
        "/openapi/v3" => return Ok(json(&openapi::v3_index(external))),
        p if p.starts_with("/openapi/v3/apis/custom.metrics.k8s.io/") => {
            let v = p
                .strip_prefix("/openapi/v3/apis/custom.metrics.k8s.io/")
                .and_then(Version::parse)
                .ok_or_else(ApiError::not_found_path)?;
            return Ok(json(&openapi::v3_group_version(v)));
        }
        "/openapi/v3/apis/external.metrics.k8s.io/v1beta1" if external => return Ok(json(&openapi::v3_external())),
        _ => {}
    }
    if let Some(parsed) = external::parse(raw_path) {
        if !external {
            return Err(ApiError::not_found_path());
        }
        return match parsed? {
            external::ExternalPath::Group => Ok(json(&external::api_group(true))),
            external::ExternalPath::Version => Ok(json(&external::api_resource_list(&state.sources.external_listed()))),
            external::ExternalPath::Metric { namespace, metric } => {
                read_external(state, user, &namespace, &metric, req.uri.query()).await
            }
        };
    }
    let parsed = match path::parse(raw_path) {
        None => return Err(ApiError::not_found_path()),
        Some(Err(path::PathError::NotFound)) => return Err(ApiError::not_found_path()),
        Some(Err(e @ path::PathError::Invalid(_))) => return Err(ApiError::BadRequest(e.to_string())),
        Some(Ok(p)) => p,
    };
    match parsed {
        ApiPath::Group => Ok(json(&types::api_group(true))),
        ApiPath::Version(v) => {
            let resources = state
                .sources
                .listed()
                .into_iter()
                .map(|l| types::ApiResource::metric(&l.resource, &l.metric, l.namespaced))
                .collect();
            Ok(json(&types::api_resource_list(v, resources)))
        }
        ApiPath::Metric(version, target) => read_metric(state, user, version, target, req.uri.query()).await,
    }
}

/// Request attributes for authorization, as Kubernetes' request-info parser derives them.
pub fn attributes(version: Version, target: &Target) -> Attributes {
    let base =
        |namespace: Option<String>, resource: String, subresource: Option<String>, name: String| Attributes::Resource {
            verb: "get".into(),
            namespace,
            group: GROUP.into(),
            version: version.as_str().into(),
            resource,
            subresource,
            name: Some(name),
        };
    match target {
        Target::Namespace { namespace, metric } => {
            base(Some(namespace.clone()), "metrics".into(), None, metric.clone())
        }
        Target::Objects { namespace, resource, name, metric } => {
            base(namespace.clone(), resource.clone(), Some(metric.clone()), name.clone().unwrap_or_else(|| "*".into()))
        }
    }
}

async fn authorize(state: &AppState, user: &UserInfo, attrs: &Attributes) -> Result<(), ApiError> {
    match state.authz.authorize(user, attrs).await {
        Ok(Decision::Allow) => Ok(()),
        Ok(Decision::Deny(reason)) => {
            let mut message = attrs.forbidden_message(&user.name);
            if !reason.is_empty() {
                message = format!("{message}: {reason}");
            }
            let (message, details) = match attrs {
                Attributes::Resource { resource, name, group, .. } => {
                    let name = name.clone().unwrap_or_default();
                    (
                        format!("{resource}.{group} {name:?} is forbidden: {message}"),
                        Some(types::StatusDetails { name, group: group.clone(), kind: resource.clone() }),
                    )
                }
                Attributes::NonResource { .. } => (format!("forbidden: {message}"), None),
            };
            Err(ApiError::Forbidden { message, details })
        }
        Err(e) => Err(ApiError::Internal(e.to_string())),
    }
}

async fn read_metric(
    state: &AppState,
    user: &UserInfo,
    version: Version,
    target: Target,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let q = path::parse_query(query).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    authorize(state, user, &attributes(version, &target)).await?;
    let (resource, namespace, name, metric) = match &target {
        Target::Namespace { namespace, metric } if namespace == "*" => ("namespaces", None, None, metric.as_str()),
        Target::Namespace { namespace, metric } => ("namespaces", None, Some(namespace.as_str()), metric.as_str()),
        Target::Objects { namespace, resource, name, metric } => {
            (resource.as_str(), namespace.as_deref(), name.as_deref(), metric.as_str())
        }
    };
    let which = state.sources.serving(resource, metric).ok_or_else(|| ApiError::metric_not_found(resource, metric))?;
    let info = state.sources.resource_info(resource).ok_or_else(|| ApiError::metric_not_found(resource, metric))?;
    if info.namespaced != namespace.is_some() {
        return Err(ApiError::metric_not_found(resource, metric));
    }
    let mut among = None;
    let objects = match (name, &state.objects) {
        (Some(n), _) => Objects::One(n.to_owned()),
        // Standalone: no API server to say what exists; the source answers what it has.
        (None, None) if q.label_selector.is_empty() => Objects::All,
        (None, None) => {
            return Err(ApiError::BadRequest(
                "labelSelector needs the Kubernetes API to know object labels; this adapter runs standalone".into(),
            ));
        }
        // With or without a selector, only objects that exist are answered, as
        // prometheus-adapter does (crate::objects).
        (None, Some(existing)) => {
            let picked = existing.select(resource, namespace, &q.label_selector).await.map_err(objects_error)?;
            // prometheus-adapter's rules answer 404 when nothing is selected; the direct
            // source's GPU metrics keep their empty list (`check-api` and `helm test`
            // report "0 pods" from it in a namespace without GPU pods).
            if picked.names.is_empty() && which == Which::Prometheus {
                let selector = q.label_selector.to_string();
                return Err(ApiError::no_objects(resource, metric, namespace, &selector));
            }
            among = picked.among;
            Objects::Names(picked.names)
        }
    };
    let request =
        source::Request { resource, namespace, objects: &objects, metric, metric_selector: &q.metric_selector, among };
    let (points, waited) = state.sources.query(which, &request).await.map_err(source_error)?;
    let selector = (!q.metric_selector.is_empty()).then(|| q.metric_selector.to_label_selector());
    // Sized once: at 10,000 pods regrowing this list showed in profiles.
    let mut items: Vec<types::Item<'_>> = Vec::with_capacity(points.len());
    items.extend(points.iter().filter_map(|p| {
        Some(types::Item {
            name: &p.name,
            timestamp_ms: p.timestamp_ms,
            window_seconds: p.window_seconds,
            value: Quantity::from_f64(p.value)?,
        })
    }));
    if let Some(n) = name
        && items.is_empty()
    {
        return Err(ApiError::metric_not_found_for(resource, metric, n));
    }
    let ctx = types::ListContext {
        kind: &info.kind,
        namespace,
        api_version: &info.api_version,
        metric,
        selector: selector.as_ref(),
    };
    let mut resp = json_bytes(types::metric_value_list(version, &ctx, items.into_iter()));
    if let Some(w) = waited
        && let Ok(v) = HeaderValue::from_str(&format!("prometheus;dur={:.3}", w.as_secs_f64() * 1000.0))
    {
        // W3C Server-Timing: how much of the answer's time Prometheus took.
        resp.headers_mut().insert("server-timing", v);
    }
    Ok(resp)
}

/// How a failure to name the existing objects is answered. prometheus-adapter answers
/// every one of them 500 `InternalError` "unable to list matching resources"
/// (v0.12.0, `pkg/custom-provider/provider.go`, `GetMetricBySelector`), an unknown resource
/// included; here only what the deployment or the cluster must fix is a 500, a selector
/// the API server refuses is the client's 400, and an API server that does not answer
/// usably a 503 as for the other backends.
fn objects_error(e: objects::Error) -> ApiError {
    match e {
        objects::Error::Unsupported(_) | objects::Error::Scope(_) | objects::Error::Selector { .. } => {
            ApiError::BadRequest(e.to_string())
        }
        objects::Error::UnknownResource(_) | objects::Error::Refused { .. } => ApiError::Internal(e.to_string()),
        objects::Error::NotSynced(_) | objects::Error::Unavailable { .. } => ApiError::Unavailable(e.to_string()),
    }
}

/// How a source's failure is answered: a configuration error is a 500 that says so, an
/// unreachable backend a 503.
fn source_error(e: source::Error) -> ApiError {
    match e {
        source::Error::Invalid(m) => ApiError::BadRequest(m),
        source::Error::Unavailable(m) => ApiError::Unavailable(m),
        source::Error::Internal(m) | source::Error::Config(m) => ApiError::Internal(m),
    }
}

async fn read_external(
    state: &AppState,
    user: &UserInfo,
    namespace: &str,
    metric: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let q = path::parse_query(query).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    authorize(state, user, &external::attributes(namespace, metric)).await?;
    let values = state
        .sources
        .external(namespace, metric, &q.label_selector)
        .await
        .map_err(source_error)?
        .ok_or_else(|| external::not_found(namespace, metric))?;
    Ok(json_bytes(external::metric_value_list(metric, &values)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let h = |v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            accepts_json(&m)
        };
        assert!(accepts_json(&http::HeaderMap::new()));
        assert!(h("application/json"));
        assert!(h("application/vnd.kubernetes.protobuf, */*"));
        assert!(h("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"));
        assert!(!h("application/vnd.kubernetes.protobuf"));
        assert!(!h("application/json;q=0"));
        assert!(!h("text/html"));
    }

    #[test]
    fn authorization_attributes_follow_request_info() {
        let a = attributes(
            Version::V1Beta2,
            &Target::Objects {
                namespace: Some("ai".into()),
                resource: "pods".into(),
                name: None,
                metric: "gpu_utilization".into(),
            },
        );
        let Attributes::Resource { name, subresource, resource, verb, .. } = a else { panic!("resource attrs") };
        assert_eq!(
            (name.as_deref(), subresource.as_deref(), resource.as_str(), verb.as_str()),
            (Some("*"), Some("gpu_utilization"), "pods", "get")
        );
        let a = attributes(Version::V1Beta1, &Target::Namespace { namespace: "ai".into(), metric: "m".into() });
        let Attributes::Resource { namespace, resource, name, subresource, .. } = a else { panic!("resource attrs") };
        assert_eq!(
            (namespace.as_deref(), resource.as_str(), name.as_deref(), subresource),
            (Some("ai"), "metrics", Some("m"), None)
        );
    }
}
