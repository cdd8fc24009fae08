//! A test PKI made with rcgen: a CA that issues serving and client certificates, PEM.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use time::{Duration, OffsetDateTime};

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pair {
    pub fn cert_der(&self) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()
    }
}

/// A test certificate authority.
pub struct Ca {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert_pem = params.self_signed(&key).unwrap().pem();
        Ca { cert_pem, issuer: Issuer::new(params, key) }
    }

    fn issue(&self, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    /// A serving certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Pair {
        self.server_for(&["localhost", "127.0.0.1"])
    }

    /// A serving certificate for `names` (DNS names or IP addresses), named after the first.
    pub fn server_for(&self, names: &[&str]) -> Pair {
        let mut params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("localhost"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate for user `cn` with `sans`, valid from a day ago for a year.
    pub fn client(&self, cn: &str, sans: &[&str]) -> Pair {
        let now = OffsetDateTime::now_utc();
        self.client_valid(cn, sans, now - Duration::days(1), now + Duration::days(365))
    }

    /// A client certificate named by its first SAN (`test` without one).
    pub fn client_for(&self, sans: &[&str]) -> Pair {
        self.client(sans.first().copied().unwrap_or("test"), sans)
    }

    /// A client certificate that expired an hour ago.
    pub fn expired_client(&self, cn: &str) -> Pair {
        let now = OffsetDateTime::now_utc();
        self.client_valid(cn, &[], now - Duration::days(30), now - Duration::hours(1))
    }

    fn client_valid(&self, cn: &str, sans: &[&str], from: OffsetDateTime, until: OffsetDateTime) -> Pair {
        let mut params = CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = from;
        params.not_after = until;
        self.issue(params)
    }
}
