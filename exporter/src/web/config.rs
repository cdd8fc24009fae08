//! The `--web.config.file` format of the Prometheus exporter-toolkit: parsing and
//! validation into a [`WebConfig`] that the server uses as is.
//!
//! Format (field names exactly as the toolkit spells them):
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # or `cert:` with inline PEM
//!   key_file: server.key         # or `key:` with inline PEM
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: ca.crt       # or `client_ca:` with inline PEM
//!   client_allowed_sans: [prometheus.monitoring.svc]
//!   min_version: TLS12
//!   max_version: TLS13
//!   cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]
//!   curve_preferences: [X25519, CurveP256]
//!   prefer_server_cipher_suites: true
//! http_server_config:
//!   http2: true
//!   headers: {X-Frame-Options: deny}
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hash
//! rate_limit: {burst: 10, interval: 1s}
//! ```
//!
//! Decisions:
//! - Strict like the toolkit's `yaml.UnmarshalStrict`: unknown keys and wrong types are
//!   refused. Every refusal names the file, the field (dotted path) and the reason, and
//!   the exporter stops at start instead of serving something the operator did not ask for.
//! - Everything is checked at load, including reading and matching certificate and key,
//!   parsing the client CA and every bcrypt hash, so a bad file never reaches serving.
//! - Relative file paths are relative to the web config file's directory (toolkit rule).
//! - Settings the toolkit accepts but this exporter cannot honour are refused with the
//!   reason (TLS 1.0/1.1, CBC suites, P-521); settings that would have no effect are
//!   refused too: TLS options without a certificate, `client_ca_file` with
//!   `NoClientCert`, `client_allowed_sans` when a client may present no certificate, a
//!   rate limit with `burst: 0`. Where Go would silently ignore such a setting, a refusal
//!   is the safer surprise.
//! - Certificate, key and client CA files are re-read when they change (see the `tls`
//!   module and the shared edge, `https-edge`); users, headers and the other settings
//!   are fixed at start.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::basic_auth::{BasicAuthError, Users};
use super::headers;
use super::rate_limit::parse_go_duration;
use https_edge::{PemSource, ServerTls};

use super::tls::{self, ClientAuth, TlsSettings, TlsVersion};

/// A web config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// The file itself could not be read.
    #[error("web config {}: cannot read the file: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML.
    #[error("web config {}: malformed YAML: {reason}", file.display())]
    Syntax { file: PathBuf, reason: String },
    /// A field is unknown, of the wrong type, or has a value that cannot be used.
    #[error("web config {}: field {field}: {reason}", file.display())]
    Invalid { file: PathBuf, field: String, reason: String },
}

impl WebConfigError {
    /// The file the error is about.
    pub fn file(&self) -> &Path {
        match self {
            WebConfigError::Read { file, .. }
            | WebConfigError::Syntax { file, .. }
            | WebConfigError::Invalid { file, .. } => file,
        }
    }

    /// The field (dotted path) the error is about, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            WebConfigError::Invalid { field, .. } => Some(field),
            WebConfigError::Read { .. } | WebConfigError::Syntax { .. } => None,
        }
    }
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, WebConfigError>;

/// A field-level problem before the file name is attached.
struct FieldError {
    field: String,
    reason: String,
}

fn field_error(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
    FieldError { field: field.into(), reason: reason.into() }
}

/// A parsed and validated web config.
pub struct WebConfig {
    source: Option<PathBuf>,
    tls: Option<Arc<ServerTls>>,
    client_auth: ClientAuth,
    http2: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
    users: Option<Users>,
    rate_limit: Option<RateLimitSettings>,
}

/// `rate_limit`: a bucket of `burst` requests refilled at one per `interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitSettings {
    pub burst: u32,
    pub interval: Duration,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("source", &self.source)
            .field("tls", &self.tls)
            .field("client_auth", &self.client_auth)
            .field("http2", &self.http2)
            .field("headers", &self.headers)
            .field("users", &self.users)
            .field("rate_limit", &self.rate_limit)
            .finish()
    }
}

impl WebConfig {
    /// Reads and validates a web config file, including the files it names.
    pub fn load(path: &Path) -> Result<WebConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| WebConfigError::Read { file: path.to_path_buf(), source })?;
        WebConfig::parse(&text, path)
    }

    /// Validates web config text as if read from `path` (which anchors relative paths
    /// and names the file in errors).
    pub fn parse(text: &str, path: &Path) -> Result<WebConfig> {
        let raw = parse_raw(text, path)?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        let mut config = validate(raw, base).map_err(|e| WebConfigError::Invalid {
            file: path.to_path_buf(),
            field: e.field,
            reason: e.reason,
        })?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// No web config file: plain HTTP (HTTP/1.1 and h2c), no authentication, no extra headers.
    pub fn none() -> WebConfig {
        WebConfig {
            source: None,
            tls: None,
            client_auth: ClientAuth::NoClientCert,
            http2: true,
            headers: Vec::new(),
            users: None,
            rate_limit: None,
        }
    }

    /// The file this config was loaded from, if any.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// Whether connections are served over TLS.
    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether HTTP/2 is offered (`http_server_config.http2`, default true).
    pub fn http2(&self) -> bool {
        self.http2
    }

    /// Whether requests need basic-auth credentials.
    pub fn basic_auth_enabled(&self) -> bool {
        self.users.is_some()
    }

    /// The headers set on every response.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The server-wide request rate limit, if configured.
    pub fn rate_limit(&self) -> Option<RateLimitSettings> {
        self.rate_limit
    }

    /// The client authentication policy (`NoClientCert` without TLS).
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    pub(crate) fn tls(&self) -> Option<&Arc<ServerTls>> {
        self.tls.as_ref()
    }

    pub(crate) fn users(&self) -> Option<&Users> {
        self.users.as_ref()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of web config sections")]
struct RawConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<RawRateLimit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    prefer_server_cipher_suites: Option<bool>,
    client_allowed_sans: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    burst: Option<u32>,
    interval: Option<serde_yaml_ng::Value>,
}

fn parse_raw(text: &str, path: &Path) -> Result<RawConfig> {
    // Syntax first, so malformed YAML is reported as such with its line and column.
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)
        .map_err(|e| WebConfigError::Syntax { file: path.to_path_buf(), reason: e.to_string() })?;
    if value.is_null() {
        return Ok(RawConfig::default());
    }
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        WebConfigError::Invalid {
            file: path.to_path_buf(),
            field: if field == "." { "(top level)".to_owned() } else { field },
            reason: e.into_inner().to_string(),
        }
    })
}

fn validate(raw: RawConfig, base: &Path) -> std::result::Result<WebConfig, FieldError> {
    let http = raw.http_server_config.unwrap_or_default();
    let http2 = http.http2.unwrap_or(true);
    let headers = headers::validate(&http.headers.unwrap_or_default())
        .map_err(|e| field_error(format!("http_server_config.headers.{}", e.header()), e.to_string()))?;
    let settings = tls_settings(raw.tls_server_config.unwrap_or_default(), base, http2)?;
    let client_auth = settings.as_ref().map_or(ClientAuth::NoClientCert, |s| s.client_auth);
    let tls = match settings {
        Some(settings) => Some(Arc::new(settings.serve().map_err(|e| field_error(e.field(), e.to_string()))?)),
        None => None,
    };
    let users = match raw.basic_auth_users {
        Some(table) if !table.is_empty() => Some(Users::new(table).map_err(|e| match &e {
            BasicAuthError::InvalidHash { user, .. } | BasicAuthError::InvalidUser(user) => {
                field_error(format!("basic_auth_users.{user}"), e.to_string())
            }
            BasicAuthError::Random => field_error("basic_auth_users", e.to_string()),
        })?),
        _ => None,
    };
    let rate_limit = rate_limit(raw.rate_limit)?;
    Ok(WebConfig { source: None, tls, client_auth, http2, headers, users, rate_limit })
}

/// `cert_file` or inline `cert` (and the same for key and client CA); empty means unset.
fn pem_source(
    file: Option<String>,
    inline: Option<String>,
    file_field: &str,
    inline_field: &str,
    base: &Path,
) -> std::result::Result<Option<PemSource>, FieldError> {
    let file = file.filter(|f| !f.is_empty());
    let inline = inline.filter(|i| !i.is_empty());
    match (file, inline) {
        (Some(_), Some(_)) => Err(field_error(
            format!("tls_server_config.{inline_field}"),
            format!("set either {file_field} or {inline_field}, not both"),
        )),
        (Some(file), None) => Ok(Some(PemSource::File(base.join(file)))),
        (None, Some(inline)) => Ok(Some(PemSource::Inline(inline))),
        (None, None) => Ok(None),
    }
}

/// `tls_server_config`, validated; `None` when TLS is not configured. Each step is one
/// of the functions below, in the order the toolkit's fields depend on each other.
fn tls_settings(raw: RawTls, base: &Path, http2: bool) -> std::result::Result<Option<TlsSettings>, FieldError> {
    let cert = pem_source(raw.cert_file, raw.cert, "cert_file", "cert", base)?;
    let key = pem_source(raw.key_file, raw.key, "key_file", "key", base)?;
    let client_ca = pem_source(raw.client_ca_file, raw.client_ca, "client_ca_file", "client_ca", base)?;
    let client_auth_name = raw.client_auth_type.unwrap_or_default();

    let enabled = cert.is_some() || key.is_some() || client_ca.is_some() || !client_auth_name.is_empty();
    if !enabled {
        let options = TlsOptions {
            min_version: raw.min_version.is_some(),
            max_version: raw.max_version.is_some(),
            cipher_suites: raw.cipher_suites.is_some(),
            curve_preferences: raw.curve_preferences.is_some(),
            prefer_server_cipher_suites: raw.prefer_server_cipher_suites.is_some(),
            client_allowed_sans: raw.client_allowed_sans.is_some(),
        };
        return refuse_options_without_tls(&options).map(|()| None);
    }
    let (cert, key) = identity(cert, key)?;
    let client_auth = client_auth(&client_auth_name, client_ca.as_ref())?;
    Ok(Some(TlsSettings {
        cert,
        key,
        client_ca,
        client_auth,
        allowed_sans: allowed_sans(raw.client_allowed_sans, client_auth)?,
        min_version: version(raw.min_version, "min_version", TlsVersion::Tls12)?,
        max_version: version(raw.max_version, "max_version", TlsVersion::Tls13)?,
        cipher_suites: named_list(raw.cipher_suites, "cipher_suites", tls::cipher_suite)?,
        curves: named_list(raw.curve_preferences, "curve_preferences", tls::curve)?,
        prefer_server_cipher_suites: raw.prefer_server_cipher_suites.unwrap_or(true),
        http2,
    }))
}

/// Which TLS options a `tls_server_config` without certificate sets.
struct TlsOptions {
    min_version: bool,
    max_version: bool,
    cipher_suites: bool,
    curve_preferences: bool,
    prefer_server_cipher_suites: bool,
    client_allowed_sans: bool,
}

/// TLS options without a certificate would have no effect: refused, naming the first.
fn refuse_options_without_tls(options: &TlsOptions) -> std::result::Result<(), FieldError> {
    let set = [
        ("min_version", options.min_version),
        ("max_version", options.max_version),
        ("cipher_suites", options.cipher_suites),
        ("curve_preferences", options.curve_preferences),
        ("prefer_server_cipher_suites", options.prefer_server_cipher_suites),
        ("client_allowed_sans", options.client_allowed_sans),
    ];
    match set.iter().find(|(_, set)| *set) {
        Some((name, _)) => Err(field_error(
            format!("tls_server_config.{name}"),
            "set, but TLS is not configured: give cert_file and key_file (or cert and key)",
        )),
        None => Ok(()),
    }
}

/// The serving certificate and key, both required once TLS is configured.
fn identity(
    cert: Option<PemSource>,
    key: Option<PemSource>,
) -> std::result::Result<(PemSource, PemSource), FieldError> {
    let cert = cert.ok_or_else(|| {
        field_error(
            "tls_server_config.cert_file",
            "missing: TLS settings are given but no certificate (cert_file or cert)",
        )
    })?;
    let key = key.ok_or_else(|| {
        field_error(
            "tls_server_config.key_file",
            "missing: TLS settings are given but no private key (key_file or key)",
        )
    })?;
    Ok((cert, key))
}

/// `client_auth_type`, consistent with whether a client CA is given.
fn client_auth(name: &str, client_ca: Option<&PemSource>) -> std::result::Result<ClientAuth, FieldError> {
    let client_auth = ClientAuth::parse(name).ok_or_else(|| {
        field_error(
            "tls_server_config.client_auth_type",
            format!("unknown client_auth_type {name:?}; expected one of {}", ClientAuth::NAMES),
        )
    })?;
    if client_ca.is_some() && client_auth == ClientAuth::NoClientCert {
        return Err(field_error(
            "tls_server_config.client_auth_type",
            "a client CA is configured but client_auth_type is NoClientCert; \
             set client_auth_type (for example RequireAndVerifyClientCert) or remove the client CA",
        ));
    }
    if client_auth.verifies_chain() && client_ca.is_none() {
        return Err(field_error(
            "tls_server_config.client_ca_file",
            format!("missing: client_auth_type {name} verifies client certificates against it"),
        ));
    }
    Ok(client_auth)
}

/// `client_allowed_sans`: only where every client must present a certificate, never empty.
fn allowed_sans(
    raw: Option<Vec<String>>,
    client_auth: ClientAuth,
) -> std::result::Result<Option<Vec<String>>, FieldError> {
    match raw {
        Some(_) if !client_auth.requires_cert() => Err(field_error(
            "tls_server_config.client_allowed_sans",
            "requires client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert \
             (otherwise a client without a certificate is not checked)",
        )),
        Some(list) if list.is_empty() => {
            Err(field_error("tls_server_config.client_allowed_sans", "empty list: it would refuse every client"))
        }
        other => Ok(other),
    }
}

/// `min_version` / `max_version`, or `default` when unset.
fn version(value: Option<String>, field: &str, default: TlsVersion) -> std::result::Result<TlsVersion, FieldError> {
    match value {
        None => Ok(default),
        Some(name) => {
            TlsVersion::parse(&name).map_err(|reason| field_error(format!("tls_server_config.{field}"), reason))
        }
    }
}

/// A list of toolkit names (`cipher_suites`, `curve_preferences`) resolved one by one;
/// unset or empty means the defaults. A bad name is reported with its index.
fn named_list<T>(
    names: Option<Vec<String>>,
    field: &str,
    resolve: fn(&str) -> std::result::Result<T, String>,
) -> std::result::Result<Option<Vec<T>>, FieldError> {
    let Some(names) = names.filter(|n| !n.is_empty()) else { return Ok(None) };
    let resolved = names
        .iter()
        .enumerate()
        .map(|(i, name)| resolve(name).map_err(|r| field_error(format!("tls_server_config.{field}[{i}]"), r)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Some(resolved))
}

fn rate_limit(raw: Option<RawRateLimit>) -> std::result::Result<Option<RateLimitSettings>, FieldError> {
    let Some(raw) = raw else { return Ok(None) };
    let interval = match raw.interval {
        None | Some(serde_yaml_ng::Value::Null) => Duration::ZERO,
        Some(serde_yaml_ng::Value::String(text)) => {
            parse_go_duration(&text).map_err(|e| field_error("rate_limit.interval", e.to_string()))?
        }
        Some(serde_yaml_ng::Value::Number(n)) => match n.as_u64() {
            Some(nanos) => Duration::from_nanos(nanos),
            None => return Err(field_error("rate_limit.interval", format!("{n} is not a non-negative duration"))),
        },
        Some(other) => {
            return Err(field_error(
                "rate_limit.interval",
                format!(
                    "expected a duration such as \"1s\", got {}",
                    serde_yaml_ng::to_string(&other).unwrap_or_default().trim()
                ),
            ));
        }
    };
    // As in the toolkit, a zero interval means no rate limit.
    if interval.is_zero() {
        return Ok(None);
    }
    let burst = raw.burst.unwrap_or(0);
    if burst == 0 {
        return Err(field_error(
            "rate_limit.burst",
            "must be at least 1 when an interval is set (0 refuses every request)",
        ));
    }
    Ok(Some(RateLimitSettings { burst, interval }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig> {
        WebConfig::parse(text, Path::new("/etc/gpu-exporter/web.yml"))
    }

    fn invalid(text: &str) -> (String, String) {
        match parse(text) {
            Err(WebConfigError::Invalid { field, reason, file }) => {
                assert_eq!(file, Path::new("/etc/gpu-exporter/web.yml"));
                (field, reason)
            }
            other => panic!("expected a field error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn empty_file_means_plain_http_without_auth() {
        for text in ["", "# nothing\n", "---\n", "tls_server_config:\nbasic_auth_users:\n"] {
            let c = parse(text).unwrap();
            assert!(!c.tls_enabled() && !c.basic_auth_enabled() && c.http2(), "{text:?}");
            assert_eq!(c.source(), Some(Path::new("/etc/gpu-exporter/web.yml")));
        }
        let none = WebConfig::none();
        assert!(!none.tls_enabled() && none.source().is_none() && none.rate_limit().is_none());
    }

    #[test]
    fn http_section_and_users_are_read() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let c = parse(&format!(
            "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  prometheus: '{hash}'\nrate_limit:\n  burst: 5\n  interval: 200ms\n"
        ))
        .unwrap();
        assert!(!c.http2());
        assert!(c.basic_auth_enabled());
        assert_eq!(c.users().map(Users::len), Some(1));
        assert_eq!(c.headers().len(), 1);
        assert_eq!(c.headers()[0].0, "x-frame-options");
        assert_eq!(c.rate_limit(), Some(RateLimitSettings { burst: 5, interval: Duration::from_millis(200) }));
        assert_eq!(c.client_auth(), ClientAuth::NoClientCert);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_place() {
        let (field, reason) = invalid("basic_auth_user:\n  a: b\n");
        assert_eq!(field, "basic_auth_user");
        assert!(reason.contains("unknown field `basic_auth_user`"), "{reason}");
        let (field, reason) = invalid("tls_server_config:\n  cert_fille: a.crt\n");
        assert_eq!(field, "tls_server_config.cert_fille");
        assert!(reason.contains("cert_file"), "lists the expected fields: {reason}");
        let (field, _) = invalid("http_server_config:\n  http3: true\n");
        assert_eq!(field, "http_server_config.http3");
    }

    #[test]
    fn wrong_types_are_refused_with_their_place() {
        let (field, reason) = invalid("http_server_config:\n  http2: maybe\n");
        assert_eq!(field, "http_server_config.http2");
        assert!(reason.contains("line 2"), "{reason}");
        let (field, _) = invalid("tls_server_config:\n  cipher_suites: TLS_AES_128_GCM_SHA256\n");
        assert_eq!(field, "tls_server_config.cipher_suites");
        let (field, _) = invalid("- just\n- a list\n");
        assert_eq!(field, "(top level)");
    }

    #[test]
    fn malformed_yaml_is_a_syntax_error_with_location() {
        let err = parse("tls_server_config:\n  cert_file: [a.crt\n").unwrap_err();
        assert!(matches!(err, WebConfigError::Syntax { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("/etc/gpu-exporter/web.yml") && text.contains("line"), "{text}");
    }

    #[test]
    fn duplicate_keys_are_refused_like_go_strict_yaml() {
        let err = parse("basic_auth_users:\n  alice: x\n  alice: y\n").unwrap_err();
        assert!(err.to_string().contains("duplicate entry with key \"alice\""), "{err}");
    }

    #[test]
    fn invalid_bcrypt_hash_names_the_user() {
        let (field, reason) = invalid("basic_auth_users:\n  alice: not-a-hash\n");
        assert_eq!(field, "basic_auth_users.alice");
        assert!(reason.contains("bcrypt"), "{reason}");
    }

    #[test]
    fn header_outside_the_toolkit_list_is_refused() {
        let (field, reason) = invalid("http_server_config:\n  headers:\n    Server: gpu\n");
        assert_eq!(field, "http_server_config.headers.Server");
        assert!(reason.contains("can not be configured"), "{reason}");
    }

    #[test]
    fn tls_combinations_that_cannot_work_are_refused() {
        let cases = [
            ("tls_server_config:\n  min_version: TLS13\n", "tls_server_config.min_version", "TLS is not configured"),
            ("tls_server_config:\n  key_file: k.pem\n", "tls_server_config.cert_file", "no certificate"),
            ("tls_server_config:\n  cert_file: c.pem\n", "tls_server_config.key_file", "no private key"),
            (
                "tls_server_config:\n  cert_file: c.pem\n  cert: inline\n  key_file: k.pem\n",
                "tls_server_config.cert",
                "not both",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_auth_type: VerifyClientCert\n",
                "tls_server_config.client_auth_type",
                "unknown client_auth_type \"VerifyClientCert\"",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_auth_type: RequireAndVerifyClientCert\n",
                "tls_server_config.client_ca_file",
                "missing",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_ca_file: ca.pem\n",
                "tls_server_config.client_auth_type",
                "NoClientCert",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_auth_type: VerifyClientCertIfGiven\n  \
                 client_ca_file: ca.pem\n  client_allowed_sans: [a]\n",
                "tls_server_config.client_allowed_sans",
                "RequireAnyClientCert",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: TLS10\n",
                "tls_server_config.min_version",
                "rustls",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  cipher_suites: [TLS_AES_128_GCM_SHA256, BOGUS]\n",
                "tls_server_config.cipher_suites[1]",
                "unknown cipher suite",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  curve_preferences: [CurveP521]\n",
                "tls_server_config.curve_preferences[0]",
                "P-521",
            ),
        ];
        for (text, want_field, want_reason) in cases {
            let (field, reason) = invalid(text);
            assert_eq!(field, want_field, "{text}");
            assert!(reason.contains(want_reason), "{text}: {reason}");
        }
    }

    #[test]
    fn missing_certificate_file_is_named_with_its_resolved_path() {
        let (field, reason) = invalid("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n");
        assert_eq!(field, "tls_server_config.cert_file");
        assert!(reason.contains("/etc/gpu-exporter/missing.crt"), "relative to the config's directory: {reason}");
    }

    #[test]
    fn rate_limit_values() {
        let (field, _) = invalid("rate_limit:\n  interval: 1s\n");
        assert_eq!(field, "rate_limit.burst");
        let (field, reason) = invalid("rate_limit:\n  burst: 1\n  interval: 1 second\n");
        assert_eq!(field, "rate_limit.interval");
        assert!(reason.contains("Go duration"), "{reason}");
        let (field, _) = invalid("rate_limit:\n  burst: 1\n  interval: -5\n");
        assert_eq!(field, "rate_limit.interval");
        let c = parse("rate_limit:\n  burst: 3\n  interval: 1000000000\n").unwrap();
        assert_eq!(c.rate_limit(), Some(RateLimitSettings { burst: 3, interval: Duration::from_secs(1) }));
        assert_eq!(parse("rate_limit:\n  burst: 3\n").unwrap().rate_limit(), None);
    }

    #[test]
    fn errors_render_file_field_and_reason() {
        let err = parse("basic_auth_users:\n  alice: plain\n").unwrap_err();
        assert_eq!(err.field(), Some("basic_auth_users.alice"));
        assert_eq!(err.file(), Path::new("/etc/gpu-exporter/web.yml"));
        let text = err.to_string();
        assert!(text.starts_with("web config /etc/gpu-exporter/web.yml: field basic_auth_users.alice: "), "{text}");
    }
}
