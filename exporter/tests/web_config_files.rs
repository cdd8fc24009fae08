//! Web config files on disk, as the exporter loads them at start: every bad file is
//! refused with the file, the field and the reason; a complete good file loads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

use gpu_exporter::web::{ClientAuth, WebConfig, WebConfigError};
use web_support::{Ca, Dir};

/// Loads `text` as `web.yml` in `dir` and returns the refusal.
fn refused(dir: &Dir, text: &str) -> WebConfigError {
    let path = dir.write("web.yml", text);
    let err = WebConfig::load(&path).expect_err("the file must be refused");
    assert_eq!(err.file(), path);
    assert!(err.to_string().contains(&path.display().to_string()), "names the file: {err}");
    err
}

fn assert_field(err: &WebConfigError, field: &str, reason: &str) {
    assert_eq!(err.field(), Some(field), "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("field {field}: ")), "{text}");
    assert!(text.contains(reason), "expected {reason:?} in: {text}");
}

/// A directory with a valid server certificate and key written as server.crt / server.key.
fn with_server_files() -> (Dir, Ca) {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let pair = ca.server();
    dir.write("server.crt", &pair.cert_pem);
    dir.write("server.key", &pair.key_pem);
    (dir, ca)
}

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

#[test]
fn unknown_key_is_refused() {
    let (dir, _) = with_server_files();
    let err = refused(&dir, &format!("{TLS}  client_auth: RequireAndVerifyClientCert\n"));
    assert_field(&err, "tls_server_config.client_auth", "unknown field `client_auth`");
    let err = refused(&dir, "http_server_config:\n  http2: true\nbasic_auth:\n  a: b\n");
    assert_field(&err, "basic_auth", "unknown field `basic_auth`");
}

#[test]
fn missing_certificate_file_is_refused() {
    let (dir, _) = with_server_files();
    let err = refused(&dir, "tls_server_config:\n  cert_file: nowhere.crt\n  key_file: server.key\n");
    let missing = dir.path("nowhere.crt");
    assert_field(&err, "tls_server_config.cert_file", &format!("cannot read {}", missing.display()));
    let err = refused(&dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: nowhere.key\n");
    assert_field(&err, "tls_server_config.key_file", "cannot read");
}

#[test]
fn key_that_does_not_match_the_certificate_is_refused() {
    let (dir, ca) = with_server_files();
    dir.write("other.key", &ca.server().key_pem);
    let err = refused(&dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n");
    assert_field(&err, "tls_server_config.key_file", "does not match the certificate");
}

#[test]
fn unreadable_pem_is_refused() {
    let (dir, _) = with_server_files();
    dir.write("garbage.crt", "this is not PEM\n");
    let err = refused(&dir, "tls_server_config:\n  cert_file: garbage.crt\n  key_file: server.key\n");
    assert_field(&err, "tls_server_config.cert_file", "no PEM certificate found");

    dir.write("broken.crt", "-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n");
    let err = refused(&dir, "tls_server_config:\n  cert_file: broken.crt\n  key_file: server.key\n");
    assert_field(&err, "tls_server_config.cert_file", "unreadable PEM certificate");

    // A certificate where the key should be.
    let err = refused(&dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n");
    assert_field(&err, "tls_server_config.key_file", "no usable PEM private key");
}

#[test]
fn invalid_bcrypt_hash_is_refused() {
    let dir = Dir::new();
    let good = bcrypt::hash("pw", 4).unwrap();
    let err = refused(&dir, &format!("basic_auth_users:\n  alice: '{good}'\n  bob: '$2y$10$tooshort'\n"));
    assert_field(&err, "basic_auth_users.bob", "not a valid bcrypt hash");
}

#[test]
fn unknown_client_auth_type_is_refused() {
    let (dir, _) = with_server_files();
    let err = refused(&dir, &format!("{TLS}  client_auth_type: RequireAndVerifyClientCerts\n"));
    assert_field(
        &err,
        "tls_server_config.client_auth_type",
        "unknown client_auth_type \"RequireAndVerifyClientCerts\"",
    );
    assert!(
        err.to_string().contains("expected one of NoClientCert, RequestClientCert"),
        "lists the valid values: {err}"
    );
}

#[test]
fn verifying_client_certificates_without_a_client_ca_is_refused() {
    let (dir, _) = with_server_files();
    for policy in ["RequireAndVerifyClientCert", "VerifyClientCertIfGiven"] {
        let err = refused(&dir, &format!("{TLS}  client_auth_type: {policy}\n"));
        assert_field(&err, "tls_server_config.client_ca_file", "missing");
    }
}

#[test]
fn client_ca_file_without_certificates_is_refused() {
    let (dir, _) = with_server_files();
    dir.write("empty-ca.crt", "# no certificates here\n");
    let err = refused(
        &dir,
        &format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: empty-ca.crt\n"),
    );
    assert_field(&err, "tls_server_config.client_ca_file", "no PEM certificate found");
}

#[test]
fn malformed_yaml_is_refused() {
    let dir = Dir::new();
    let err = refused(&dir, "tls_server_config:\n  cert_file: \"server.crt\n  key_file: server.key\n");
    assert!(matches!(err, WebConfigError::Syntax { .. }), "{err}");
    assert!(err.to_string().contains("malformed YAML"), "{err}");
    let err = refused(&dir, "tls_server_config:\n\tcert_file: server.crt\n");
    assert!(matches!(err, WebConfigError::Syntax { .. }), "tabs are not YAML indentation: {err}");
}

#[test]
fn toolkit_settings_rustls_cannot_honour_are_refused() {
    let (dir, _) = with_server_files();
    let err = refused(&dir, &format!("{TLS}  max_version: TLS11\n"));
    assert_field(&err, "tls_server_config.max_version", "TLS11 is not supported");
    let err = refused(&dir, &format!("{TLS}  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]\n"));
    assert_field(&err, "tls_server_config.cipher_suites[0]", "is not supported");
    let err = refused(&dir, &format!("{TLS}  curve_preferences: [X25519, CurveP521]\n"));
    assert_field(&err, "tls_server_config.curve_preferences[1]", "not supported");
}

#[test]
fn missing_web_config_file_is_refused() {
    let dir = Dir::new();
    let path = dir.path("absent.yml");
    let err = WebConfig::load(&path).unwrap_err();
    assert!(matches!(err, WebConfigError::Read { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[test]
fn a_complete_toolkit_file_loads() {
    let (dir, ca) = with_server_files();
    dir.write("client-ca.crt", &ca.cert_pem);
    let hash = bcrypt::hash("pw", 4).unwrap();
    let text = format!(
        "{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client-ca.crt\n  \
         client_allowed_sans: [prometheus]\n  min_version: TLS12\n  max_version: TLS13\n  \
         cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]\n  \
         curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: false\n\
         http_server_config:\n  http2: false\n  headers:\n    Content-Security-Policy: default-src 'none'\n\
         basic_auth_users:\n  prometheus: '{hash}'\n\
         rate_limit:\n  burst: 100\n  interval: 10ms\n"
    );
    let config = WebConfig::load(&dir.write("web.yml", &text)).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.tls_enabled() && config.basic_auth_enabled() && !config.http2());
    assert_eq!(config.client_auth(), ClientAuth::RequireAndVerifyClientCert);
    assert_eq!(config.headers().len(), 1);
    assert_eq!(config.rate_limit().map(|r| r.burst), Some(100));
}

#[test]
fn inline_certificate_and_key_load() {
    let ca = Ca::new("test CA");
    let pair = ca.server();
    let indent = |pem: &str| pem.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let text = format!("tls_server_config:\n  cert: |\n{}  key: |\n{}", indent(&pair.cert_pem), indent(&pair.key_pem));
    let dir = Dir::new();
    let config = WebConfig::load(&dir.write("web.yml", &text)).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.tls_enabled());
    let other_key = ca.server().key_pem;
    let text = format!("tls_server_config:\n  cert: |\n{}  key: |\n{}", indent(&pair.cert_pem), indent(&other_key));
    let err = refused(&dir, &text);
    assert_field(&err, "tls_server_config.key", "does not match");
}
