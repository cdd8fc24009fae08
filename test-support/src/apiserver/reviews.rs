//! TokenReview and SubjectAccessReview as the API server answers a delegating
//! authenticator (the metrics adapter): tokens the test registers, a policy the test
//! sets (everything denied until it does), and a switch that answers both with 500.
//! Bodies are checked as the real server checks them (content type, kind, apiVersion).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::ApiServer;
use super::reply::status;

pub(super) async fn token_review(State(s): State<ApiServer>, headers: HeaderMap, body: Bytes) -> Response {
    if s.state().fail_reviews {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "etcd is having a bad day");
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/json") {
        return status(StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType", "want application/json");
    }
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    if review["apiVersion"] != "authentication.k8s.io/v1" || review["kind"] != "TokenReview" {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not a TokenReview");
    }
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let found = s.state().tokens.get(token).cloned();
    let st = match found {
        Some((user, groups)) => {
            json!({"authenticated": true, "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}})
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    let answer = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {"creationTimestamp": null}, "spec": review["spec"], "status": st});
    (StatusCode::CREATED, [("content-type", "application/json")], answer.to_string()).into_response()
}

pub(super) async fn access_review(State(s): State<ApiServer>, body: Bytes) -> Response {
    if s.state().fail_reviews {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "etcd is having a bad day");
    }
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    if review["kind"] != "SubjectAccessReview" {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not a SubjectAccessReview");
    }
    let user = review["spec"]["user"].as_str().unwrap_or_default();
    let policy = s.state().policy.clone();
    let (allowed, reason) = policy.map_or((false, String::new()), |p| p(user, &review["spec"]));
    let answer = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": null}, "spec": review["spec"],
        "status": {"allowed": allowed, "reason": reason}});
    (StatusCode::CREATED, [("content-type", "application/json")], answer.to_string()).into_response()
}
