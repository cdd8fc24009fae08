//! Extra response headers from `http_server_config.headers`.
//!
//! The exporter-toolkit deliberately allows only a fixed set of security headers, and for
//! two of them only fixed values, "to ensure consistency in the Prometheus ecosystem".
//! This module applies the same rule so a web config that works with a Go exporter works
//! here and vice versa: header names are matched exactly as the toolkit spells them, an
//! unlisted header or a value outside a fixed set is refused at start, and every value
//! must also be a valid HTTP header value. The validated headers are set on every
//! response, including 401 and 429 answers, as the toolkit does.

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue};

/// Why a configured header was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    /// The header is not one the exporter-toolkit allows.
    #[error("HTTP header {0:?} can not be configured; allowed: {allowed}", allowed = allowed_names())]
    NotAllowed(String),
    /// The header only takes some fixed values.
    #[error("invalid value {value:?} for {name}; expected one of: {expected}")]
    BadValue { name: String, value: String, expected: String },
    /// The value cannot be sent in an HTTP header (control characters, non-visible bytes).
    #[error("value {value:?} for {name} is not a valid HTTP header value")]
    Unencodable { name: String, value: String },
}

impl HeaderError {
    /// The configured header name the error is about.
    pub fn header(&self) -> &str {
        match self {
            HeaderError::NotAllowed(name) => name,
            HeaderError::BadValue { name, .. } | HeaderError::Unencodable { name, .. } => name,
        }
    }
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, HeaderError>;

/// Header names the toolkit accepts, each with its fixed values (empty: any value).
const ALLOWED: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

fn allowed_names() -> String {
    ALLOWED.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

/// Validates `http_server_config.headers` and returns them ready to set on responses.
pub fn validate(headers: &BTreeMap<String, String>) -> Result<Vec<(HeaderName, HeaderValue)>> {
    headers.iter().map(|(name, value)| validate_one(name, value)).collect()
}

fn validate_one(name: &str, value: &str) -> Result<(HeaderName, HeaderValue)> {
    let (_, fixed) =
        ALLOWED.iter().find(|(allowed, _)| *allowed == name).ok_or_else(|| HeaderError::NotAllowed(name.to_owned()))?;
    if !fixed.is_empty() && !fixed.contains(&value) {
        return Err(HeaderError::BadValue {
            name: name.to_owned(),
            value: value.to_owned(),
            expected: fixed.join(", "),
        });
    }
    let unencodable = || HeaderError::Unencodable { name: name.to_owned(), value: value.to_owned() };
    let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| unencodable())?;
    let header_value = HeaderValue::from_str(value).map_err(|_| unencodable())?;
    Ok((header_name, header_value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn accepts_the_toolkit_headers() {
        let out = validate(&map(&[
            ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
            ("X-Content-Type-Options", "nosniff"),
            ("X-Frame-Options", "sameorigin"),
            ("X-XSS-Protection", "1; mode=block"),
            ("Content-Security-Policy", "default-src 'self'"),
        ]))
        .unwrap();
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "content-security-policy",
                "strict-transport-security",
                "x-content-type-options",
                "x-frame-options",
                "x-xss-protection"
            ]
        );
        let frame = out.iter().find(|(n, _)| n == "x-frame-options").unwrap();
        assert_eq!(frame.1, "sameorigin");
    }

    #[test]
    fn refuses_headers_outside_the_list() {
        let err = validate(&map(&[("X-Powered-By", "rust")])).unwrap_err();
        assert_eq!(err, HeaderError::NotAllowed("X-Powered-By".into()));
        assert_eq!(err.header(), "X-Powered-By");
        assert!(err.to_string().contains("Strict-Transport-Security"), "{err}");
        // The toolkit matches names exactly as it spells them.
        assert!(matches!(validate(&map(&[("x-frame-options", "deny")])), Err(HeaderError::NotAllowed(_))));
    }

    #[test]
    fn refuses_values_outside_a_fixed_set() {
        let err = validate(&map(&[("X-Frame-Options", "allow-from https://x")])).unwrap_err();
        assert!(matches!(&err, HeaderError::BadValue { expected, .. } if expected == "deny, sameorigin"), "{err}");
        assert!(matches!(validate(&map(&[("X-Content-Type-Options", "sniff")])), Err(HeaderError::BadValue { .. })));
    }

    #[test]
    fn refuses_values_http_cannot_carry() {
        let err = validate(&map(&[("Content-Security-Policy", "a\r\nSet-Cookie: x")])).unwrap_err();
        assert!(matches!(err, HeaderError::Unencodable { .. }), "{err}");
    }
}
