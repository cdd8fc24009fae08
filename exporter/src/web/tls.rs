//! TLS for the serving edge: the web config's `tls_server_config` turned into a rustls
//! `ServerConfig`, rebuilt when the certificate, key or client CA files change.
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
//!   (webpki chain check against `client_ca_file`, client-auth EKU). `RequireClientCert`
//!   is accepted as the toolkit's old alias of `RequireAnyClientCert`. Where Go fails the
//!   handshake of a client without a certificate under the two `Require...` policies,
//!   this module lets it finish and the serving loop answers `403` to every request on
//!   that connection except the probe paths (why: [`super`]); a certificate that is
//!   presented is checked in the handshake as in Go, and a bad one still fails it.
//! - `client_allowed_sans`: after the above, the client certificate must carry one of the
//!   listed SAN values (exact string match, as Go does; see [`super::san`]).
//!
//! Reloading: the toolkit re-reads certificate and key on every handshake. Here each new
//! connection stats the files (size, mtime, inode) and only rebuilds the `ServerConfig`
//! when one changed, so rotating a Kubernetes secret or a cert-manager certificate takes
//! effect on the next handshake without a restart and without reading files per
//! connection. A rebuild that fails (for example a new certificate written before its
//! key) keeps serving the previous pair, logs a warning once per change, and is retried
//! when the files change again. Limit: mtime moves with the kernel's clock tick, so a file
//! rewritten in place twice within one tick at the same size is only noticed at its next
//! change; writers that replace files by rename (Kubernetes secret volumes, cert-manager,
//! most tools) change the inode and are always noticed. The stat and the rare rebuild
//! run on the connection's task; they touch two or three small files.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error as RustlsError, InconsistentKeys, RootCertStore,
    ServerConfig, SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use super::san;

/// A TLS setting that cannot be used, with the web-config field it comes from.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The content or combination of settings is not usable.
    #[error("{reason}")]
    Invalid { field: &'static str, reason: String },
}

impl TlsError {
    /// The web-config field (dotted path) the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            TlsError::Read { field, .. } | TlsError::Invalid { field, .. } => field,
        }
    }
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, TlsError>;

/// Where PEM material comes from: a file (re-read on change) or inline in the web config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    Inline(String),
}

/// The three kinds of PEM material, for field names in messages.
#[derive(Debug, Clone, Copy)]
enum Material {
    Cert,
    Key,
    ClientCa,
}

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

impl PemSource {
    fn read(&self, material: Material) -> Result<Vec<u8>> {
        match self {
            PemSource::File(path) => std::fs::read(path).map_err(|source| TlsError::Read {
                field: field_of(material, self),
                path: path.clone(),
                source,
            }),
            PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
        }
    }

    fn describe(&self) -> String {
        match self {
            PemSource::File(path) => path.display().to_string(),
            PemSource::Inline(_) => "the inline value".to_owned(),
        }
    }

    fn path(&self) -> Option<&Path> {
        match self {
            PemSource::File(path) => Some(path),
            PemSource::Inline(_) => None,
        }
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

/// Validated `tls_server_config`, ready to build rustls configurations from.
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
    /// ALPN protocols offered, most preferred first.
    pub alpn: Vec<Vec<u8>>,
}

impl TlsSettings {
    fn versions(&self) -> Vec<&'static SupportedProtocolVersion> {
        [TlsVersion::Tls13, TlsVersion::Tls12]
            .into_iter()
            .filter(|v| (self.min_version..=self.max_version).contains(v))
            .map(TlsVersion::rustls)
            .collect()
    }

    fn provider(&self) -> CryptoProvider {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(listed) = &self.cipher_suites {
            provider.cipher_suites = effective_suites(listed);
        }
        if let Some(curves) = &self.curves {
            provider.kx_groups.clone_from(curves);
        }
        provider
    }

    /// Checks what can be checked without files: version range and suite coverage.
    pub fn check_static(&self) -> Result<()> {
        if self.min_version > self.max_version {
            return Err(TlsError::Invalid {
                field: "tls_server_config.min_version",
                reason: "min_version is above max_version".to_owned(),
            });
        }
        let provider = self.provider();
        let versions = self.versions();
        let usable = provider.cipher_suites.iter().any(|s| versions.iter().any(|v| v.version == s.version().version));
        if !usable {
            let range: Vec<String> = versions.iter().map(|v| format!("{:?}", v.version)).collect();
            return Err(TlsError::Invalid {
                field: "tls_server_config.cipher_suites",
                reason: format!("none of the listed suites can be used with {}", range.join(" or ")),
            });
        }
        Ok(())
    }

    /// Reads the files and builds a rustls server configuration.
    pub fn build(&self) -> Result<ServerConfig> {
        self.check_static()?;
        let provider = Arc::new(self.provider());
        let certified = self.certified_key(&provider)?;
        let verifier = self.client_verifier(&provider)?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&self.versions())
            .map_err(|e| TlsError::Invalid { field: "tls_server_config", reason: e.to_string() })?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
        config.ignore_client_order = self.prefer_server_cipher_suites;
        config.alpn_protocols.clone_from(&self.alpn);
        Ok(config)
    }

    fn certified_key(&self, provider: &CryptoProvider) -> Result<CertifiedKey> {
        let cert_field = field_of(Material::Cert, &self.cert);
        let key_field = field_of(Material::Key, &self.key);
        let cert_pem = self.cert.read(Material::Cert)?;
        let chain =
            CertificateDer::pem_slice_iter(&cert_pem).collect::<std::result::Result<Vec<_>, _>>().map_err(|e| {
                TlsError::Invalid {
                    field: cert_field,
                    reason: format!("{}: unreadable PEM certificate: {e}", self.cert.describe()),
                }
            })?;
        if chain.is_empty() {
            return Err(TlsError::Invalid {
                field: cert_field,
                reason: format!("{}: no PEM certificate found", self.cert.describe()),
            });
        }
        let key_pem = self.key.read(Material::Key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Invalid {
            field: key_field,
            reason: format!("{}: no usable PEM private key: {e}", self.key.describe()),
        })?;
        let signing_key = provider.key_provider.load_private_key(key).map_err(|e| TlsError::Invalid {
            field: key_field,
            reason: format!("{}: private key not usable: {e}", self.key.describe()),
        })?;
        let certified = CertifiedKey::new(chain, signing_key);
        match certified.keys_match() {
            Ok(()) | Err(RustlsError::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
            Err(RustlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(TlsError::Invalid {
                field: key_field,
                reason: format!(
                    "{}: the private key does not match the certificate in {}",
                    self.key.describe(),
                    self.cert.describe()
                ),
            }),
            Err(e) => Err(TlsError::Invalid {
                field: cert_field,
                reason: format!("{}: certificate not usable: {e}", self.cert.describe()),
            }),
        }
    }

    fn client_roots(&self) -> Result<Option<RootCertStore>> {
        let Some(source) = &self.client_ca else { return Ok(None) };
        let field = field_of(Material::ClientCa, source);
        let pem = source.read(Material::ClientCa)?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| TlsError::Invalid {
                field,
                reason: format!("{}: unreadable PEM certificate: {e}", source.describe()),
            })?;
            roots.add(cert).map_err(|e| TlsError::Invalid {
                field,
                reason: format!("{}: not a usable CA certificate: {e}", source.describe()),
            })?;
        }
        if roots.is_empty() {
            return Err(TlsError::Invalid {
                field,
                reason: format!("{}: no PEM certificate found", source.describe()),
            });
        }
        Ok(Some(roots))
    }

    fn client_verifier(&self, provider: &Arc<CryptoProvider>) -> Result<Arc<dyn ClientCertVerifier>> {
        let roots = self.client_roots()?;
        let algorithms = provider.signature_verification_algorithms;
        let hints = roots.as_ref().map(RootCertStore::subjects).unwrap_or_default();
        let verify_with = |roots: Option<RootCertStore>| -> Result<Arc<dyn ClientCertVerifier>> {
            let roots = roots.ok_or_else(|| TlsError::Invalid {
                field: "tls_server_config.client_ca_file",
                reason: "required when client_auth_type verifies client certificates".to_owned(),
            })?;
            let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            builder.allow_unauthenticated().build().map_err(|e| TlsError::Invalid {
                field: "tls_server_config.client_ca_file",
                reason: format!("cannot verify client certificates with it: {e}"),
            })
        };
        // The two `Require...` policies let a handshake without a certificate finish, so
        // that the kubelet's probes (which never present one) reach the probe paths; the
        // serving loop refuses every other request on such a connection with 403. A
        // certificate that is presented is checked here exactly as the policy says.
        let base: Arc<dyn ClientCertVerifier> = match self.client_auth {
            ClientAuth::NoClientCert => return Ok(WebPkiClientVerifier::no_client_auth()),
            ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => {
                Arc::new(AnyClientCert { hints, algorithms })
            }
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => verify_with(roots)?,
        };
        Ok(match &self.allowed_sans {
            Some(allowed) => Arc::new(SanAllowList { inner: base, allowed: allowed.clone() }),
            None => base,
        })
    }

    fn files(&self) -> Vec<&Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(PemSource::path)
            .collect()
    }
}

/// `RequestClientCert` / `RequireAnyClientCert`: take any certificate without chain
/// validation, as Go does; the handshake signature still proves the client holds its key.
/// Never mandatory in the handshake (`RequireAnyClientCert` is enforced per request).
#[derive(Debug)]
struct AnyClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, RustlsError> {
        ParsedCertificate::try_from(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, RustlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, RustlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: the inner verifier's checks, then a SAN allow-list.
#[derive(Debug)]
struct SanAllowList {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for SanAllowList {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, RustlsError> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        let names = san::subject_alt_names(end_entity.as_ref())
            .map_err(|_| RustlsError::InvalidCertificate(CertificateError::BadEncoding))?;
        if names.iter().any(|name| self.allowed.contains(name)) {
            Ok(verified)
        } else {
            tracing::debug!(presented = ?names, "client certificate has none of client_allowed_sans");
            Err(RustlsError::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, RustlsError> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, RustlsError> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What identifies one version of a file cheaply: size, mtime and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(FileStamp { len: meta.len(), modified: meta.modified().ok(), inode })
}

/// The current rustls configuration, rebuilt when the files behind it change.
pub struct TlsReloader {
    settings: TlsSettings,
    state: Mutex<Loaded>,
}

struct Loaded {
    /// Stamps of the files the current configuration was built from.
    stamps: Vec<Option<FileStamp>>,
    config: Arc<ServerConfig>,
    /// Stamps of the last failed rebuild, so it is neither retried nor logged again
    /// until the files change once more.
    failed: Option<Vec<Option<FileStamp>>>,
}

impl fmt::Debug for TlsReloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsReloader").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl TlsReloader {
    /// Builds the first configuration; an error here means the web config is refused.
    pub fn new(settings: TlsSettings) -> Result<TlsReloader> {
        let stamps = settings.files().into_iter().map(stamp).collect();
        let config = Arc::new(settings.build()?);
        Ok(TlsReloader { settings, state: Mutex::new(Loaded { stamps, config, failed: None }) })
    }

    /// The settings this reloader builds from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// The configuration for a new handshake: the cached one unless a file changed.
    pub fn current(&self) -> Arc<ServerConfig> {
        let stamps: Vec<Option<FileStamp>> = self.settings.files().into_iter().map(stamp).collect();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if stamps == state.stamps || state.failed.as_ref() == Some(&stamps) {
            return state.config.clone();
        }
        match self.settings.build() {
            Ok(config) => {
                tracing::info!(files = ?self.settings.files(), "TLS certificate material changed; reloaded");
                state.config = Arc::new(config);
                state.stamps = stamps;
                state.failed = None;
            }
            Err(e) => {
                tracing::warn!(
                    field = e.field(),
                    error = %e,
                    "TLS certificate material changed but cannot be used; still serving the previous one"
                );
                state.failed = Some(stamps);
            }
        }
        state.config.clone()
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
            alpn: Vec::new(),
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
    fn empty_inline_material_is_named_in_the_error() {
        let err = settings_without_files().build().unwrap_err();
        assert_eq!(err.field(), "tls_server_config.cert");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
    }
}
