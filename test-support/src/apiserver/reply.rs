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

pub(super) fn json<T: Serialize>(value: &T) -> Response {
    (StatusCode::OK, [("content-type", "application/json")], serde_json::to_string(value).unwrap()).into_response()
}
