//! Certificate generation with rcgen: the self-signed serving pair used when no
//! `--tls-cert-file` is given, a small CA that issues server and client certificates
//! for the `dev-certs` command (demo kubeconfig, front-proxy client) and for tests, and
//! the CAs and serving certificates with explicit validity windows that
//! [`crate::serving_cert`] keeps in its Secret.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

/// Why certificate generation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen refused the parameters.
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// More organizations than one subject can carry here.
    #[error("at most two organizations per client certificate, got {0}")]
    TooManyOrganizations(usize),
    /// A generated certificate failed its own inspection (a bug, not an input error).
    #[error("generated certificate unusable: {0}")]
    Unusable(String),
    /// A validity bound outside what a certificate can carry.
    #[error("validity bound {0} (unix seconds) is out of range")]
    Validity(i64),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// Certificate chain, PEM.
    pub cert_pem: String,
    /// PKCS#8 private key, PEM.
    pub key_pem: String,
}

fn sans(hosts: &[&str]) -> Result<Vec<SanType>> {
    hosts
        .iter()
        .map(|h| match h.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName((*h).try_into()?)),
        })
        .collect()
}

fn server_params(hosts: &[&str]) -> Result<CertificateParams> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans(hosts)?;
    params.distinguished_name.push(DnType::CommonName, hosts.first().copied().unwrap_or("gpu-metrics-adapter"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

/// A validity window in unix seconds, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// First second the certificate is valid.
    pub not_before: i64,
    /// Last second the certificate is valid.
    pub not_after: i64,
}

impl Validity {
    fn apply(self, params: &mut CertificateParams) -> Result<()> {
        let at = |t: i64| time::OffsetDateTime::from_unix_timestamp(t).map_err(|_| Error::Validity(t));
        params.not_before = at(self.not_before)?;
        params.not_after = at(self.not_after)?;
        Ok(())
    }
}

/// A self-signed serving certificate for the given host names and IP addresses.
pub fn self_signed(hosts: &[&str]) -> Result<Pair> {
    let key = KeyPair::generate()?;
    let cert = server_params(hosts)?.self_signed(&key)?;
    Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// A certificate authority that can issue server and client certificates.
pub struct Ca {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA with the given common name.
    pub fn new(common_name: &str) -> Result<Self> {
        Self::generate(common_name, None)
    }

    /// A new self-signed CA valid for exactly `validity`.
    pub fn with_validity(common_name: &str, validity: Validity) -> Result<Self> {
        Self::generate(common_name, Some(validity))
    }

    fn generate(common_name: &str, validity: Option<Validity>) -> Result<Self> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        if let Some(v) = validity {
            v.apply(&mut params)?;
        }
        let cert = params.self_signed(&key)?;
        Ok(Self { cert_pem: cert.pem(), issuer: Issuer::new(params, key) })
    }

    /// A CA from its stored certificate and private key (both PEM).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(Self { cert_pem: cert_pem.to_owned(), issuer })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM (PKCS#8), for storing it.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A serving certificate for hosts (DNS names or IP addresses).
    pub fn server(&self, hosts: &[&str]) -> Result<Pair> {
        self.issue_server(hosts, None)
    }

    /// A serving certificate for hosts, valid for exactly `validity`.
    pub fn server_with_validity(&self, hosts: &[&str], validity: Validity) -> Result<Pair> {
        self.issue_server(hosts, Some(validity))
    }

    fn issue_server(&self, hosts: &[&str], validity: Option<Validity>) -> Result<Pair> {
        let key = KeyPair::generate()?;
        let mut params = server_params(hosts)?;
        if let Some(v) = validity {
            v.apply(&mut params)?;
        }
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A client certificate: `common_name` is the user, `organizations` (at most two) the
    /// groups. rcgen keeps one value per attribute type, so a second organization is written
    /// under the same OID through a custom attribute type.
    pub fn client(&self, common_name: &str, organizations: &[&str]) -> Result<Pair> {
        if organizations.len() > 2 {
            return Err(Error::TooManyOrganizations(organizations.len()));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, common_name);
        if let Some(o) = organizations.first() {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        if let Some(o) = organizations.get(1) {
            params.distinguished_name.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *o);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// Files written by [`write_dev_bundle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevBundle {
    /// CA certificate (trust it for serving and client certificates).
    pub ca: std::path::PathBuf,
    /// Serving certificate.
    pub serving_cert: std::path::PathBuf,
    /// Serving key.
    pub serving_key: std::path::PathBuf,
    /// Client certificate (CN `dev-admin`, O `system:masters`).
    pub client_cert: std::path::PathBuf,
    /// Client key.
    pub client_key: std::path::PathBuf,
    /// kubeconfig using the client pair against `server`.
    pub kubeconfig: std::path::PathBuf,
}

/// Why the development bundle could not be written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// Generation failed.
    #[error(transparent)]
    Generate(#[from] Error),
    /// Writing failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Writes a CA, a serving pair for `hosts`, a `system:masters` client pair and a kubeconfig
/// pointing at `server` into `dir`, for running the adapter and `kubectl get --raw` locally.
pub fn write_dev_bundle(
    dir: &std::path::Path,
    server: &str,
    hosts: &[&str],
) -> std::result::Result<DevBundle, BundleError> {
    let io = |path: &std::path::Path, source| BundleError::Write { path: path.to_owned(), source };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let dir = std::fs::canonicalize(dir).map_err(|e| io(dir, e))?;
    let ca = Ca::new("gpu-metrics-adapter-dev-ca")?;
    let serving = ca.server(hosts)?;
    let client = ca.client("dev-admin", &["system:masters"])?;
    let b = DevBundle {
        ca: dir.join("ca.pem"),
        serving_cert: dir.join("serving.pem"),
        serving_key: dir.join("serving-key.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client-key.pem"),
        kubeconfig: dir.join("kubeconfig"),
    };
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: adapter\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: dev-admin\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: adapter\n  context:\n    cluster: adapter\n    user: dev-admin\ncurrent-context: adapter\n",
        b.ca.display(),
        b.client_cert.display(),
        b.client_key.display()
    );
    for (path, text) in [
        (&b.ca, ca.cert_pem()),
        (&b.serving_cert, serving.cert_pem.as_str()),
        (&b.serving_key, serving.key_pem.as_str()),
        (&b.client_cert, client.cert_pem.as_str()),
        (&b.client_key, client.key_pem.as_str()),
        (&b.kubeconfig, kubeconfig.as_str()),
    ] {
        std::fs::write(path, text).map_err(|e| io(path, e))?;
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_pem_pairs() {
        let ss = self_signed(&["localhost", "127.0.0.1"]).unwrap();
        assert!(ss.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(ss.key_pem.contains("PRIVATE KEY"));
        let ca = Ca::new("test-ca").unwrap();
        assert!(ca.cert_pem().contains("BEGIN CERTIFICATE"));
        assert!(ca.server(&["adapter.example"]).is_ok());
        assert!(ca.client("jane", &["team"]).is_ok());
        assert!(self_signed(&["ünïcode"]).is_err());
        assert!(matches!(ca.client("x", &["a", "b", "c"]), Err(Error::TooManyOrganizations(3))));
    }

    #[test]
    fn a_stored_ca_signs_again_and_validity_is_exact() {
        let window = Validity { not_before: 1_700_000_000, not_after: 1_800_000_000 };
        let ca = Ca::with_validity("stored-ca", window).unwrap();
        let again = Ca::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
        let leaf = again.server_with_validity(&["adapter.svc"], window).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(leaf.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        assert_eq!(cert.validity().not_before.timestamp(), window.not_before);
        assert_eq!(cert.validity().not_after.timestamp(), window.not_after);
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.cert_pem().as_bytes()).unwrap();
        let ca_cert = ca_pem.parse_x509().unwrap();
        cert.verify_signature(Some(ca_cert.public_key())).unwrap();
        assert!(Ca::from_pem(ca.cert_pem(), "not a key").is_err());
        assert!(matches!(
            Ca::with_validity("x", Validity { not_before: 0, not_after: i64::MAX }),
            Err(Error::Validity(i64::MAX))
        ));
    }

    #[test]
    fn dev_bundle_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let b = write_dev_bundle(&dir.path().join("certs"), "https://127.0.0.1:6443", &["localhost"]).unwrap();
        let kc = std::fs::read_to_string(&b.kubeconfig).unwrap();
        assert!(kc.contains("server: https://127.0.0.1:6443"));
        assert!(kc.contains(&b.client_key.display().to_string()));
        assert!(std::fs::read_to_string(&b.serving_key).unwrap().contains("PRIVATE KEY"));
    }
}
