//! The exporter-toolkit's `tls_server_config` on the shared HTTPS edge (`https-edge`):
//! the toolkit's Go names mapped to rustls settings, its client-auth policies mapped to
//! the edge's client-certificate request, and the edge's errors mapped back to the
//! web-config field they come from.
//!
//! What it maps, from the exporter-toolkit's Go names to rustls (ring provider only):
//! - `min_version` / `max_version`: `TLS12`, `TLS13` (default TLS12..TLS13). rustls has no
//!   TLS 1.0/1.1, so `TLS10` and `TLS11` are refused with that reason.
//! - `cipher_suites`: Go's names of the suites rustls implements (ECDHE with AES-GCM or
//!   ChaCha20-Poly1305, and the three TLS 1.3 suites). Go applies the list to TLS 1.2 only
//!   and keeps every TLS 1.3 suite; so does this module when the list names no TLS 1.3
//!   suite. A list that names TLS 1.3 suites restricts TLS 1.3 too (stricter than Go, as
//!   asked). Suites Go knows but rustls does not do (CBC, RSA key exchange) are refused
//!   by name; unknown names are refused as unknown.
//! - `curve_preferences`: `X25519`, `CurveP256`, `CurveP384`, in the given order;
//!   `CurveP521` is refused (ring has no P-521 key exchange).
//! - `prefer_server_cipher_suites` (default true): rustls `ignore_client_order`.
//! - `client_auth_type`: `NoClientCert` (default), `RequestClientCert` (ask, accept
//!   anything, check only the handshake signature), `RequireAnyClientCert` (same, but a
//!   certificate is required), `VerifyClientCertIfGiven` and `RequireAndVerifyClientCert`
//!   (webpki chain check against `client_ca_file`, client-auth EKU, in the handshake).
//!   `RequireClientCert` is accepted as the toolkit's old alias of `RequireAnyClientCert`.
//!   Where Go fails the handshake of a client without a certificate under the two
//!   `Require...` policies, the edge lets it finish and the serving layer answers `403`
//!   to every request on that connection except the probe paths (why: [`super`]); a
//!   certificate that is presented is checked in the handshake as in Go, and a bad one
//!   still fails it.
//! - `client_allowed_sans`: after the above, the client certificate must carry one of the
//!   listed SAN values (exact string match, as Go does).
//!
//! Certificate, key and client CA files are re-read when they change, on every new
//! handshake (the toolkit re-reads them per handshake too); how the edge notices a
//! change and what happens when the new files are unusable: `https_edge::reload`.

use std::time::Duration;

use rustls::crypto::SupportedKxGroup;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use https_edge::{
    ClientCertRequest, ClientCerts, Identity, Material, PemSource, ServerTls, TlsError as EdgeError,
    TlsSettings as EdgeSettings,
};

/// A TLS setting that cannot be used, with the web-config field it comes from.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct TlsError {
    field: &'static str,
    reason: String,
}

impl TlsError {
    /// The web-config field (dotted path) the error is about.
    pub fn field(&self) -> &'static str {
        self.field
    }
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, TlsError>;

/// The web-config field a kind of PEM material is set by.
fn field_of(material: Material, source: &PemSource) -> &'static str {
    match (material, source) {
        (Material::Cert, PemSource::File(_)) => "tls_server_config.cert_file",
        (Material::Cert, PemSource::Inline(_)) => "tls_server_config.cert",
        (Material::Key, PemSource::File(_)) => "tls_server_config.key_file",
        (Material::Key, PemSource::Inline(_)) => "tls_server_config.key",
        (Material::ClientCa, PemSource::File(_)) => "tls_server_config.client_ca_file",
        (Material::ClientCa, PemSource::Inline(_)) => "tls_server_config.client_ca",
    }
}

/// The toolkit's `client_auth_type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// Every accepted spelling, for messages.
    pub const NAMES: &'static str =
        "NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert";

    /// Parses a toolkit name; the empty string means `NoClientCert`, as in Go.
    pub fn parse(name: &str) -> Option<ClientAuth> {
        Some(match name {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            _ => return None,
        })
    }

    /// Whether a client certificate is checked against `client_ca_file`.
    pub fn verifies_chain(self) -> bool {
        matches!(self, ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert)
    }

    /// Whether a handshake without a client certificate fails.
    pub fn requires_cert(self) -> bool {
        matches!(self, ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert)
    }
}

/// A TLS protocol version as the toolkit names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    /// Parses `TLS12` / `TLS13`; explains why `TLS10` / `TLS11` cannot be served.
    pub fn parse(name: &str) -> std::result::Result<TlsVersion, String> {
        match name {
            "TLS12" => Ok(TlsVersion::Tls12),
            "TLS13" => Ok(TlsVersion::Tls13),
            "TLS10" | "TLS11" => Err(format!(
                "{name} is not supported: this exporter uses rustls, which implements only TLS12 and TLS13"
            )),
            _ => Err(format!("unknown TLS version {name:?}; expected TLS12 or TLS13")),
        }
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        }
    }
}

/// Go's names of the suites the rustls ring provider implements.
fn supported_suites() -> [(&'static str, SupportedCipherSuite); 9] {
    use rustls::crypto::ring::cipher_suite as cs;
    [
        ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
        ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
        ("TLS_CHACHA20_POLY1305_SHA256", cs::TLS13_CHACHA20_POLY1305_SHA256),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
        ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
        ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ]
}

/// Suites Go's `tls.CipherSuites()` lists (so the toolkit accepts them) that rustls lacks.
const GO_SUITES_RUSTLS_LACKS: &[&str] = &[
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
];

/// Resolves one of Go's cipher-suite names.
pub fn cipher_suite(name: &str) -> std::result::Result<SupportedCipherSuite, String> {
    let supported = supported_suites();
    if let Some((_, suite)) = supported.iter().find(|(go_name, _)| *go_name == name) {
        return Ok(*suite);
    }
    let choices = supported.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    if GO_SUITES_RUSTLS_LACKS.contains(&name) {
        Err(format!(
            "cipher suite {name} is not supported: rustls implements only AEAD suites with ECDHE key exchange; \
             supported: {choices}"
        ))
    } else {
        Err(format!("unknown cipher suite {name:?}; supported: {choices}"))
    }
}

/// Resolves one of the toolkit's curve names to a ring key-exchange group.
pub fn curve(name: &str) -> std::result::Result<&'static dyn SupportedKxGroup, String> {
    use rustls::crypto::ring::kx_group;
    match name {
        "X25519" => Ok(kx_group::X25519),
        "CurveP256" => Ok(kx_group::SECP256R1),
        "CurveP384" => Ok(kx_group::SECP384R1),
        "CurveP521" => Err("curve CurveP521 is not supported: the rustls ring provider has no P-521 key exchange; \
                            supported: X25519, CurveP256, CurveP384"
            .to_owned()),
        _ => Err(format!("unknown curve {name:?}; supported: X25519, CurveP256, CurveP384")),
    }
}

/// The suites to offer for a configured list: the list in its order, plus every TLS 1.3
/// suite when the list names none (Go's `cipher_suites` does not touch TLS 1.3).
pub fn effective_suites(listed: &[SupportedCipherSuite]) -> Vec<SupportedCipherSuite> {
    let is13 = |s: &SupportedCipherSuite| s.version() == &rustls::version::TLS13;
    let mut out = listed.to_vec();
    if !listed.iter().any(is13) {
        out.extend(rustls::crypto::ring::DEFAULT_CIPHER_SUITES.iter().copied().filter(is13));
    }
    out
}

/// Validated `tls_server_config`, ready to serve with.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cert: PemSource,
    pub key: PemSource,
    pub client_ca: Option<PemSource>,
    pub client_auth: ClientAuth,
    pub allowed_sans: Option<Vec<String>>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    /// `None`: the provider's defaults.
    pub cipher_suites: Option<Vec<SupportedCipherSuite>>,
    /// `None`: the provider's defaults.
    pub curves: Option<Vec<&'static dyn SupportedKxGroup>>,
    pub prefer_server_cipher_suites: bool,
    /// Offer HTTP/2 through ALPN (`http_server_config.http2`).
    pub http2: bool,
}

impl TlsSettings {
    fn versions(&self) -> Vec<&'static SupportedProtocolVersion> {
        [TlsVersion::Tls13, TlsVersion::Tls12]
            .into_iter()
            .filter(|v| (self.min_version..=self.max_version).contains(v))
            .map(TlsVersion::rustls)
            .collect()
    }

    fn client_certs(&self) -> ClientCerts {
        if self.client_auth == ClientAuth::NoClientCert {
            return ClientCerts::Off;
        }
        ClientCerts::Request(ClientCertRequest {
            ca: self.client_ca.clone(),
            verify_chain: self.client_auth.verifies_chain(),
            allowed_sans: self.allowed_sans.clone(),
        })
    }

    /// The edge's settings for this `tls_server_config`.
    pub fn edge(&self) -> EdgeSettings {
        let mut edge = EdgeSettings::new(Identity::Pem { cert: self.cert.clone(), key: self.key.clone() });
        edge.client_certs = self.client_certs();
        edge.versions = self.versions();
        edge.cipher_suites = self.cipher_suites.as_deref().map(effective_suites);
        edge.kx_groups.clone_from(&self.curves);
        edge.ignore_client_order = self.prefer_server_cipher_suites;
        edge.http2 = self.http2;
        edge
    }

    /// Checks what can be checked without files: version range and suite coverage.
    pub fn check_static(&self) -> Result<()> {
        if self.min_version > self.max_version {
            return Err(TlsError {
                field: "tls_server_config.min_version",
                reason: "min_version is above max_version".to_owned(),
            });
        }
        self.edge().check().map_err(|e| self.field_error(e))
    }

    /// Reads the files and starts serving with them; they are re-read on every
    /// handshake that finds them changed.
    pub fn serve(&self) -> Result<ServerTls> {
        self.check_static()?;
        ServerTls::new(self.edge(), Duration::ZERO).map_err(|e| self.field_error(e))
    }

    /// The edge's error, with the field it comes from.
    fn field_error(&self, error: EdgeError) -> TlsError {
        let field = match &error {
            EdgeError::Pem(e) => {
                let source = match e.material() {
                    Material::Cert => Some(&self.cert),
                    Material::Key => Some(&self.key),
                    Material::ClientCa => self.client_ca.as_ref(),
                };
                source.map_or("tls_server_config.client_ca_file", |s| field_of(e.material(), s))
            }
            EdgeError::MissingClientCa => "tls_server_config.client_ca_file",
            EdgeError::NoUsableSuite(_) => "tls_server_config.cipher_suites",
            EdgeError::Config(_) => "tls_server_config",
        };
        TlsError { field, reason: error.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_client_auth_types() {
        assert_eq!(ClientAuth::parse(""), Some(ClientAuth::NoClientCert));
        assert_eq!(ClientAuth::parse("RequireClientCert"), Some(ClientAuth::RequireAnyClientCert));
        for name in ClientAuth::NAMES.split(", ") {
            assert!(ClientAuth::parse(name).is_some(), "{name}");
        }
        assert_eq!(ClientAuth::parse("requireandverifyclientcert"), None);
        assert!(ClientAuth::RequireAndVerifyClientCert.verifies_chain());
        assert!(!ClientAuth::RequireAnyClientCert.verifies_chain());
        assert!(ClientAuth::RequireAnyClientCert.requires_cert());
        assert!(!ClientAuth::VerifyClientCertIfGiven.requires_cert());
    }

    #[test]
    fn parses_tls_versions() {
        assert_eq!(TlsVersion::parse("TLS13"), Ok(TlsVersion::Tls13));
        assert_eq!(TlsVersion::parse("TLS12"), Ok(TlsVersion::Tls12));
        assert!(TlsVersion::parse("TLS10").unwrap_err().contains("rustls"));
        assert!(TlsVersion::parse("TLS1.3").unwrap_err().contains("unknown"));
        assert!(TlsVersion::Tls12 < TlsVersion::Tls13);
        assert_eq!(TlsVersion::Tls13.rustls().version, rustls::ProtocolVersion::TLSv1_3);
    }

    #[test]
    fn maps_go_cipher_suite_names() {
        let suite = cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").unwrap();
        assert_eq!(suite.suite(), rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256);
        let suite = cipher_suite("TLS_AES_256_GCM_SHA384").unwrap();
        assert_eq!(suite.suite(), rustls::CipherSuite::TLS13_AES_256_GCM_SHA384);
        let err = cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA").unwrap_err();
        assert!(err.contains("not supported") && err.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"), "{err}");
        assert!(cipher_suite("TLS_RSA_WITH_RC4_128_SHA").unwrap_err().contains("unknown"));
    }

    #[test]
    fn tls12_only_list_keeps_all_tls13_suites_like_go() {
        let listed = [cipher_suite("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384").unwrap()];
        let out = effective_suites(&listed);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].suite(), rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384);
        let with13 = [cipher_suite("TLS_AES_128_GCM_SHA256").unwrap()];
        assert_eq!(effective_suites(&with13).len(), 1);
    }

    #[test]
    fn maps_curves() {
        assert_eq!(curve("X25519").unwrap().name(), rustls::NamedGroup::X25519);
        assert_eq!(curve("CurveP384").unwrap().name(), rustls::NamedGroup::secp384r1);
        assert!(curve("CurveP521").unwrap_err().contains("P-521"));
        assert!(curve("P256").unwrap_err().contains("unknown"));
    }

    fn settings_without_files() -> TlsSettings {
        TlsSettings {
            cert: PemSource::Inline(String::new()),
            key: PemSource::Inline(String::new()),
            client_ca: None,
            client_auth: ClientAuth::NoClientCert,
            allowed_sans: None,
            min_version: TlsVersion::Tls12,
            max_version: TlsVersion::Tls13,
            cipher_suites: None,
            curves: None,
            prefer_server_cipher_suites: true,
            http2: true,
        }
    }

    #[test]
    fn static_checks_catch_impossible_combinations() {
        let mut s = settings_without_files();
        s.min_version = TlsVersion::Tls13;
        s.max_version = TlsVersion::Tls12;
        assert_eq!(s.check_static().unwrap_err().field(), "tls_server_config.min_version");

        let mut s = settings_without_files();
        s.min_version = TlsVersion::Tls13;
        s.cipher_suites = Some(vec![cipher_suite("TLS_AES_128_GCM_SHA256").unwrap()]);
        assert!(s.check_static().is_ok());
        s.min_version = TlsVersion::Tls12;
        s.max_version = TlsVersion::Tls12;
        let err = s.check_static().unwrap_err();
        assert_eq!(err.field(), "tls_server_config.cipher_suites");
        assert!(err.to_string().contains("TLSv1_2"), "{err}");
    }

    #[test]
    fn client_auth_types_map_to_the_edge_request() {
        let mut s = settings_without_files();
        assert_eq!(s.edge().client_certs, ClientCerts::Off);
        s.client_auth = ClientAuth::RequireAndVerifyClientCert;
        s.client_ca = Some(PemSource::Inline("ca".into()));
        s.allowed_sans = Some(vec!["prometheus".into()]);
        let ClientCerts::Request(request) = s.edge().client_certs else { panic!("client certificates are asked for") };
        assert!(request.verify_chain);
        assert_eq!(request.allowed_sans, s.allowed_sans);
        s.client_auth = ClientAuth::RequireAnyClientCert;
        let ClientCerts::Request(request) = s.edge().client_certs else { panic!("client certificates are asked for") };
        assert!(!request.verify_chain, "any certificate is taken without chain checks");
    }

    #[test]
    fn empty_inline_material_is_named_in_the_error() {
        let err = settings_without_files().serve().unwrap_err();
        assert_eq!(err.field(), "tls_server_config.cert");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
    }
}
