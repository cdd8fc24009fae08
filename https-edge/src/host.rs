//! The `Host` rule of HTTP/1.1, checked before a request reaches the caller's service.
//!
//! RFC 9112 section 3.2 (<https://www.rfc-editor.org/rfc/rfc9112#section-3.2>): a
//! server must answer `400 (Bad Request)` to an HTTP/1.1 request that lacks a `Host`
//! header field, and to any request with more than one `Host` field line or a `Host`
//! field with an invalid value. hyper leaves that to the application; both binaries
//! get it here. HTTP/1.0 requests may omit `Host`. HTTP/2 carries the authority in its
//! `:authority` pseudo-header, and `Host` is optional there (RFC 9113 section 8.3.1),
//! so only a repeated or invalid `Host` is refused on HTTP/2.
//!
//! The value is `uri-host [ ":" port ]` (RFC 9110 section 7.2); an empty value is what a
//! client sends for a target without authority and is accepted. `http::uri::Authority`
//! reads the rest; a userinfo part (`user@host`) is not part of `Host` and is refused.

use axum::body::Body;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderValue, Request, Response, StatusCode, Version};

/// Why a request's `Host` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HostError {
    /// An HTTP/1.1 request without `Host`.
    #[error("an HTTP/1.1 request needs a Host header (RFC 9112 section 3.2)")]
    Missing,
    /// More than one `Host` field line.
    #[error("{0} Host headers; a request has at most one (RFC 9112 section 3.2)")]
    Repeated(usize),
    /// A value that is not `host[:port]`.
    #[error("the Host header {0:?} is not host[:port] (RFC 9112 section 3.2)")]
    Invalid(String),
}

/// Checks `request`'s `Host` header fields.
pub(crate) fn check<B>(request: &Request<B>) -> Result<(), HostError> {
    let mut values = request.headers().get_all(HOST).iter();
    let Some(first) = values.next() else {
        return if request.version() == Version::HTTP_11 { Err(HostError::Missing) } else { Ok(()) };
    };
    let more = values.count();
    if more > 0 {
        return Err(HostError::Repeated(more + 1));
    }
    if valid(first) { Ok(()) } else { Err(HostError::Invalid(String::from_utf8_lossy(first.as_bytes()).into_owned())) }
}

fn valid(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return true;
    }
    // `Authority` accepts any text after the last colon; a port is digits (RFC 3986 3.2.3).
    let host_end = bytes.iter().rposition(|b| *b == b']').unwrap_or(0);
    let port_ok = match bytes.iter().rposition(|b| *b == b':') {
        Some(colon) if colon > host_end => bytes.get(colon + 1..).unwrap_or_default().iter().all(u8::is_ascii_digit),
        _ => true,
    };
    port_ok && !bytes.contains(&b'@') && http::uri::Authority::try_from(bytes).is_ok()
}

/// The `400` for a refused `Host`.
pub(crate) fn refusal(error: &HostError) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("Bad Request: {error}\n")));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: Version, hosts: &[&'static str]) -> Request<()> {
        let mut builder = Request::builder().uri("/metrics").version(version);
        for host in hosts {
            builder = builder.header(HOST, *host);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn http11_needs_exactly_one_valid_host() {
        assert_eq!(check(&request(Version::HTTP_11, &["10.0.0.1:9400"])), Ok(()));
        assert_eq!(check(&request(Version::HTTP_11, &["gpu-exporter.gpu-telemetry.svc"])), Ok(()));
        assert_eq!(check(&request(Version::HTTP_11, &["[::1]:6443"])), Ok(()));
        assert_eq!(check(&request(Version::HTTP_11, &[""])), Ok(()), "empty: a target without authority");
        assert_eq!(check(&request(Version::HTTP_11, &[])), Err(HostError::Missing));
        assert_eq!(check(&request(Version::HTTP_11, &["a", "b"])), Err(HostError::Repeated(2)));
        assert_eq!(check(&request(Version::HTTP_11, &["a", "a", "a"])), Err(HostError::Repeated(3)));
        for bad in ["user@host", "a b", "host:port", "/path"] {
            assert!(matches!(check(&request(Version::HTTP_11, &[bad])), Err(HostError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn other_versions_may_omit_host_but_not_repeat_it() {
        assert_eq!(check(&request(Version::HTTP_10, &[])), Ok(()));
        assert_eq!(check(&request(Version::HTTP_2, &[])), Ok(()));
        assert_eq!(check(&request(Version::HTTP_10, &["a", "b"])), Err(HostError::Repeated(2)));
        assert_eq!(check(&request(Version::HTTP_2, &["a", "b"])), Err(HostError::Repeated(2)));
        let response = refusal(&HostError::Missing);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}
