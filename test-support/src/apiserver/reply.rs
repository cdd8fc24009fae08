//! How the in-test API server answers: a JSON body, or a `Status` as kube-apiserver
//! writes one for a failure.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Serialize;

pub(super) fn status(code: StatusCode, reason: &str, message: impl Into<String>) -> Response {
    let body = Status {
        code: Some(i32::from(code.as_u16())),
        message: Some(message.into()),
        reason: Some(reason.into()),
        status: Some("Failure".into()),
        ..Status::default()
    };
    let mut value = serde_json::to_value(&body).unwrap();
    value["kind"] = "Status".into();
    value["apiVersion"] = "v1".into();
    (code, [("content-type", "application/json")], value.to_string()).into_response()
}

/// A failure a test chose by its code (an injected or scripted answer), with the
/// reason kube-apiserver gives that code.
pub(super) fn failure(code: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    status(code, reason_of(code), message)
}

/// The `reason` of a `Status` with this code.
pub(super) fn reason_of(code: StatusCode) -> &'static str {
    match code.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// The 409 a write carrying a stale `resourceVersion` (or failing a precondition) gets.
pub(super) fn conflict(resource: &str, name: &str) -> Response {
    let message = format!(
        "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your \
         changes to the latest version and try again"
    );
    status(StatusCode::CONFLICT, "Conflict", message)
}

pub(super) fn json<T: Serialize>(value: &T) -> Response {
    (StatusCode::OK, [("content-type", "application/json")], serde_json::to_string(value).unwrap()).into_response()
}

/// The 201 of a create.
pub(super) fn created<T: Serialize>(value: &T) -> Response {
    (StatusCode::CREATED, [("content-type", "application/json")], serde_json::to_string(value).unwrap()).into_response()
}
