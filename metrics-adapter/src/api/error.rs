//! Errors of the HTTP API, each answered as a `metav1.Status` with the code and reason
//! the Kubernetes API server would use.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::types::{GROUP, Status, StatusDetails};

/// An API failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400
    #[error("{0}")]
    BadRequest(String),
    /// 401
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 with Go's forbidden message.
    #[error("{message}")]
    Forbidden {
        /// Full message.
        message: String,
        /// Details (resource and name), if a resource request.
        details: Option<StatusDetails>,
    },
    /// 404
    #[error("{message}")]
    NotFound {
        /// Message.
        message: String,
        /// Details.
        details: Option<StatusDetails>,
    },
    /// 405
    #[error("method {0} is not allowed; this API is read-only")]
    MethodNotAllowed(String),
    /// 406
    #[error("only the following media types are accepted: application/json")]
    NotAcceptable,
    /// 414
    #[error("request URI of {0} bytes exceeds the limit of {1} bytes")]
    UriTooLong(usize, usize),
    /// 431
    #[error("request headers of {0} bytes exceed the limit of {1} bytes")]
    HeadersTooLarge(usize, usize),
    /// 500
    #[error("{0}")]
    Internal(String),
    /// 503
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// 404 for a path this server does not serve.
    pub fn not_found_path() -> Self {
        ApiError::NotFound { message: "the server could not find the requested resource".into(), details: None }
    }

    /// 404 for an unknown metric of a resource, as Go adapters word it.
    pub fn metric_not_found(resource: &str, metric: &str) -> Self {
        ApiError::NotFound {
            message: format!("the server could not find the metric {metric} for {resource}"),
            details: Some(StatusDetails { name: String::new(), group: GROUP.into(), kind: resource.into() }),
        }
    }

    /// 404 for a `*` read that names no object: none of `resource` exists in `namespace`
    /// (the cluster, for a cluster-scoped one), or none matches `selector`.
    /// prometheus-adapter answers it so, having no name to query (v0.12.0,
    /// `pkg/custom-provider/series_registry.go`, `QueryForMetric`); its message is the
    /// first half of this one.
    pub fn no_objects(resource: &str, metric: &str, namespace: Option<&str>, selector: &str) -> Self {
        let scope = namespace.map(|ns| format!(" in namespace {ns}")).unwrap_or_default();
        let why = if selector.is_empty() {
            format!("no {resource} exist{scope}")
        } else {
            format!("no {resource}{scope} match the labelSelector {selector}")
        };
        ApiError::NotFound {
            message: format!("the server could not find the metric {metric} for {resource}: {why}"),
            details: Some(StatusDetails { name: String::new(), group: GROUP.into(), kind: resource.into() }),
        }
    }

    /// 404 for a metric that has no value for one object.
    pub fn metric_not_found_for(resource: &str, metric: &str, name: &str) -> Self {
        ApiError::NotFound {
            message: format!("the server could not find the metric {metric} for {resource} {name}"),
            details: Some(StatusDetails { name: name.into(), group: GROUP.into(), kind: resource.into() }),
        }
    }

    /// The status code.
    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            ApiError::UriTooLong(..) => StatusCode::URI_TOO_LONG,
            ApiError::HeadersTooLarge(..) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Status {
        let reason = match self {
            ApiError::BadRequest(_) | ApiError::UriTooLong(..) | ApiError::HeadersTooLarge(..) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::NotAcceptable => "NotAcceptable",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unavailable(_) => "ServiceUnavailable",
        };
        let status = Status::failure(self.code().as_u16(), reason, self.to_string());
        match self {
            ApiError::Forbidden { details: Some(d), .. } | ApiError::NotFound { details: Some(d), .. } => {
                status.with_details(d.clone())
            }
            _ => status,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut resp = (self.code(), body).into_response();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
        if self == ApiError::Unauthorized {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"gpu-metrics-adapter\""));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_reasons() {
        let cases = [
            (ApiError::BadRequest("x".into()), 400, "BadRequest"),
            (ApiError::Unauthorized, 401, "Unauthorized"),
            (ApiError::Forbidden { message: "no".into(), details: None }, 403, "Forbidden"),
            (ApiError::not_found_path(), 404, "NotFound"),
            (ApiError::MethodNotAllowed("POST".into()), 405, "MethodNotAllowed"),
            (ApiError::NotAcceptable, 406, "NotAcceptable"),
            (ApiError::UriTooLong(10, 5), 414, "BadRequest"),
            (ApiError::HeadersTooLarge(10, 5), 431, "BadRequest"),
            (ApiError::Internal("x".into()), 500, "InternalError"),
            (ApiError::Unavailable("x".into()), 503, "ServiceUnavailable"),
        ];
        for (e, code, reason) in cases {
            let s = e.status();
            assert_eq!((s.code, s.reason), (code, reason), "{e:?}");
            assert_eq!(e.code().as_u16(), code);
        }
        let s = ApiError::metric_not_found_for("pods", "gpu_utilization", "p-0").status();
        assert_eq!(s.message, "the server could not find the metric gpu_utilization for pods p-0");
        assert_eq!(s.details.unwrap().name, "p-0");
    }
}
