//! Answers of the API server, read within bounds. kube's own `request*` methods read a
//! whole body, error answers included, before anything can look at its size; through
//! `pods/proxy` that body is an exporter's, whatever its size. Here every body is read
//! a chunk at a time and cut at a limit:
//!
//! - an error answer: its first [`MAX_ERROR_BYTES`], worded as kube words it
//!   (`Error from server (...)`, through [`super::describe`]);
//! - an object or one page of a list: [`MAX_OBJECT_BYTES`] or [`MAX_LIST_PAGE_BYTES`],
//!   then refused with the limit named;
//! - an exporter page: chunk by chunk into [`crate::page`], which sets its own bounds.

use std::ops::ControlFlow;

use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;

/// The most of an error answer read (a `Status` is a few hundred bytes).
pub const MAX_ERROR_BYTES: usize = 64 << 10;
/// The largest single object accepted (etcd stores at most 1.5 MiB an object).
pub const MAX_OBJECT_BYTES: usize = 8 << 20;
/// The largest page of a list accepted: 500 objects of up to 128 KiB each (a Node with
/// its image list, a Pod with its managed fields take tens of KiB).
pub const MAX_LIST_PAGE_BYTES: usize = 64 << 20;

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the answer is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the answer does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

/// The kube error for an error answer, as kube builds it from the whole body: the
/// `Status` it carries, or its text.
pub(crate) fn api_error(code: u16, body: &[u8]) -> kube::Error {
    if let Ok(mut status) = serde_json::from_slice::<kube::core::Status>(body) {
        if status.code == 0 {
            status.code = code;
        }
        return kube::Error::Api(Box::new(status));
    }
    let text = String::from_utf8_lossy(body);
    kube::Error::Api(Box::new(kube::core::Status::failure(text.trim(), "Failed to parse error data").with_code(code)))
}

/// Feeds `body` to `each` a chunk at a time until it ends or `each` breaks.
pub async fn each_chunk<B>(
    mut body: Body,
    mut each: impl FnMut(&[u8]) -> ControlFlow<B>,
) -> Result<Option<B>, kube::Error> {
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data()
            && let ControlFlow::Break(b) = each(&data)
        {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// At most `limit` bytes of `body`, and whether there was more.
pub async fn collect(body: Body, limit: usize) -> Result<(Vec<u8>, bool), kube::Error> {
    let mut out = Vec::new();
    let cut = each_chunk(body, |chunk| {
        let room = limit - out.len();
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    })
    .await?;
    Ok((out, cut.is_some()))
}

/// Sends `request`; an error answer (4xx, 5xx) is a [`kube::Error::Api`] read from at
/// most [`MAX_ERROR_BYTES`] of its body.
pub async fn send(client: &Client, request: http::Request<Vec<u8>>) -> Result<http::Response<Body>, kube::Error> {
    let response = client.send(request.map(Body::from)).await?;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        let (body, _) = collect(response.into_body(), MAX_ERROR_BYTES).await?;
        return Err(api_error(status.as_u16(), &body));
    }
    Ok(response)
}

/// Sends `request` and decodes its JSON answer of at most `limit` bytes.
pub async fn json<T: serde::de::DeserializeOwned>(
    client: &Client,
    request: http::Request<Vec<u8>>,
    limit: usize,
) -> Result<T, BodyError> {
    let response = send(client, request).await?;
    let (body, cut) = collect(response.into_body(), limit).await?;
    if cut {
        return Err(BodyError::TooLarge { limit });
    }
    Ok(serde_json::from_slice(&body)?)
}

/// How [`super::describe`] words the error, for messages.
pub fn describe(e: &BodyError) -> String {
    match e {
        BodyError::Kube(e) => super::describe(e),
        other => other.to_string(),
    }
}

/// The HTTP status of an error answer.
pub fn status_code(e: &BodyError) -> Option<u16> {
    match e {
        BodyError::Kube(e) => super::status_code(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_answers_are_worded_as_kube_words_them() {
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods is forbidden","reason":"Forbidden","code":403}"#;
        assert_eq!(super::super::describe(&api_error(403, status)), "Error from server (Forbidden): pods is forbidden");
        let text = b"error trying to reach service: dial tcp 10.0.0.1:9400: connect: connection refused\n";
        let e = api_error(503, text);
        assert_eq!(
            super::super::describe(&e),
            "Error from server (503): error trying to reach service: dial tcp 10.0.0.1:9400: connect: connection refused"
        );
        assert_eq!(super::super::status_code(&e), Some(503));
    }
}
