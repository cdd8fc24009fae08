//! The serving material kept in the Secret, read and written: the signing CA, an optional
//! next CA (published before it signs anything), the serving pair, and the bundle of CAs
//! the aggregator is told to trust. Reading inspects every certificate with `x509-parser`
//! (validity, names, which CA signed the serving certificate); a Secret that is missing a
//! key or holds something unusable is refused with the key and the reason.

use std::collections::{BTreeMap, BTreeSet};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

/// Secret keys. `tls.crt`/`tls.key`/`ca.crt` follow the `kubernetes.io/tls` convention,
/// so the Secret can also be mounted by tools that expect it.
pub mod keys {
    /// The CA that signs the serving certificate.
    pub const CA_CERT: &str = "ca.crt";
    /// Its private key.
    pub const CA_KEY: &str = "ca.key";
    /// The next CA, trusted before it signs (only during a CA rotation).
    pub const NEXT_CA_CERT: &str = "next-ca.crt";
    /// Its private key.
    pub const NEXT_CA_KEY: &str = "next-ca.key";
    /// The serving certificate.
    pub const TLS_CERT: &str = "tls.crt";
    /// Its private key.
    pub const TLS_KEY: &str = "tls.key";
    /// Every CA to trust: the signing CA, the next one, and retired ones until they expire.
    pub const CA_BUNDLE: &str = "ca-bundle.crt";
    /// When every APIService was first seen trusting the next CA (unix seconds).
    pub const NEXT_CA_TRUSTED_SINCE: &str = "next-ca-trusted-since";
}

/// Why stored material cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct Error {
    /// The Secret key at fault.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// A CA: certificate, key and validity.
#[derive(Clone, PartialEq, Eq)]
pub struct Authority {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM.
    pub key_pem: String,
    /// Validity start, unix seconds.
    pub not_before: i64,
    /// Validity end, unix seconds.
    pub not_after: i64,
    der: Vec<u8>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// The serving pair.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM.
    pub key_pem: String,
    /// Validity start, unix seconds.
    pub not_before: i64,
    /// Validity end, unix seconds.
    pub not_after: i64,
    /// DNS names and IP addresses it is valid for.
    pub hosts: BTreeSet<String>,
    der: Vec<u8>,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// A CA certificate in the trust bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Validity end, unix seconds.
    pub not_after: i64,
    der: Vec<u8>,
}

/// Everything the Secret holds, inspected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// The CA that signs the serving certificate.
    pub ca: Authority,
    /// The CA that takes over at the next rotation, already in the bundle.
    pub next: Option<Authority>,
    /// When every APIService was first seen trusting `next` (unix seconds).
    pub next_trusted_since: Option<i64>,
    /// The serving pair.
    pub leaf: Leaf,
    /// The CAs to trust, in order: signing, next, retired.
    pub bundle: Vec<Trusted>,
}

fn text<'a>(data: &'a BTreeMap<String, Vec<u8>>, key: &'static str) -> Result<&'a str> {
    let bytes = data.get(key).ok_or_else(|| Error { key, reason: "missing".into() })?;
    std::str::from_utf8(bytes).map_err(|_| Error { key, reason: "not UTF-8 PEM".into() })
}

/// The DER of every certificate in a PEM text.
pub fn pem_certificates(pem: &str) -> std::result::Result<Vec<Vec<u8>>, String> {
    let ders = CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("PEM: {e}"))?;
    if ders.is_empty() {
        return Err("no certificate".into());
    }
    Ok(ders)
}

fn parse(der: &[u8]) -> std::result::Result<X509Certificate<'_>, String> {
    x509_parser::parse_x509_certificate(der).map(|(_, c)| c).map_err(|e| format!("certificate: {e}"))
}

fn one_certificate(pem: &str) -> std::result::Result<Vec<u8>, String> {
    let mut ders = pem_certificates(pem)?;
    match ders.len() {
        1 => Ok(ders.remove(0)),
        n => Err(format!("{n} certificates where one was expected")),
    }
}

fn hosts_of(cert: &X509Certificate<'_>) -> BTreeSet<String> {
    let Ok(Some(san)) = cert.subject_alternative_name() else { return BTreeSet::new() };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some((*d).to_owned()),
            GeneralName::IPAddress(b) => match b.len() {
                4 => <[u8; 4]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_string()),
                16 => <[u8; 16]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn key_matches(cert_pem: &str, key_pem: &str) -> std::result::Result<(), String> {
    crate::server::load_pair(cert_pem.as_bytes(), key_pem.as_bytes(), "stored pair").map(|_| ()).map_err(|e| match e {
        crate::server::Error::BadPair { reason, .. } => reason,
        other => other.to_string(),
    })
}

impl Authority {
    /// Inspects a CA certificate and checks that the key belongs to it.
    pub fn new(cert_pem: String, key_pem: String) -> std::result::Result<Self, String> {
        let der = one_certificate(&cert_pem)?;
        let cert = parse(&der)?;
        if !cert.is_ca() {
            return Err("not a CA certificate".into());
        }
        crate::certs::Ca::from_pem(&cert_pem, &key_pem).map_err(|e| format!("key: {e}"))?;
        let (not_before, not_after) = (cert.validity().not_before.timestamp(), cert.validity().not_after.timestamp());
        key_matches(&cert_pem, &key_pem)?;
        Ok(Self { cert_pem, key_pem, not_before, not_after, der })
    }

    /// The CA as a signer.
    pub fn signer(&self) -> crate::certs::Result<crate::certs::Ca> {
        crate::certs::Ca::from_pem(&self.cert_pem, &self.key_pem)
    }

    /// The CA as a bundle entry.
    pub fn trusted(&self) -> Trusted {
        Trusted { cert_pem: self.cert_pem.clone(), not_after: self.not_after, der: self.der.clone() }
    }

    /// The certificate's DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }
}

impl Leaf {
    /// Inspects a serving pair and checks that the key belongs to the certificate.
    pub fn new(cert_pem: String, key_pem: String) -> std::result::Result<Self, String> {
        let der = one_certificate(&cert_pem)?;
        let cert = parse(&der)?;
        let (not_before, not_after) = (cert.validity().not_before.timestamp(), cert.validity().not_after.timestamp());
        let hosts = hosts_of(&cert);
        key_matches(&cert_pem, &key_pem)?;
        Ok(Self { cert_pem, key_pem, not_before, not_after, hosts, der })
    }

    /// Whether `ca` signed this certificate.
    pub fn signed_by(&self, ca: &Authority) -> bool {
        let (Ok(leaf), Ok(ca)) = (parse(&self.der), parse(&ca.der)) else { return false };
        leaf.verify_signature(Some(ca.public_key())).is_ok()
    }
}

impl Trusted {
    fn from_der(der: Vec<u8>) -> std::result::Result<Self, String> {
        let not_after = parse(&der)?.validity().not_after.timestamp();
        let cert_pem = pem_encode(&der);
        Ok(Self { cert_pem, not_after, der })
    }

    /// The certificate's DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }
}

fn pem_encode(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

impl Material {
    /// Reads the Secret's data.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self> {
        let ca = Authority::new(text(data, keys::CA_CERT)?.to_owned(), text(data, keys::CA_KEY)?.to_owned())
            .map_err(|reason| Error { key: keys::CA_CERT, reason })?;
        let next = match (data.contains_key(keys::NEXT_CA_CERT), data.contains_key(keys::NEXT_CA_KEY)) {
            (false, false) => None,
            _ => Some(
                Authority::new(text(data, keys::NEXT_CA_CERT)?.to_owned(), text(data, keys::NEXT_CA_KEY)?.to_owned())
                    .map_err(|reason| Error { key: keys::NEXT_CA_CERT, reason })?,
            ),
        };
        let next_trusted_since =
            match data.get(keys::NEXT_CA_TRUSTED_SINCE) {
                None => None,
                Some(_) => Some(text(data, keys::NEXT_CA_TRUSTED_SINCE)?.trim().parse::<i64>().map_err(|e| Error {
                    key: keys::NEXT_CA_TRUSTED_SINCE,
                    reason: format!("not unix seconds: {e}"),
                })?),
            };
        let leaf = Leaf::new(text(data, keys::TLS_CERT)?.to_owned(), text(data, keys::TLS_KEY)?.to_owned())
            .map_err(|reason| Error { key: keys::TLS_CERT, reason })?;
        let bundle = pem_certificates(text(data, keys::CA_BUNDLE)?)
            .and_then(|ders| ders.into_iter().map(Trusted::from_der).collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|reason| Error { key: keys::CA_BUNDLE, reason })?;
        Ok(Self { ca, next, next_trusted_since, leaf, bundle })
    }

    /// The Secret's data.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut data = BTreeMap::new();
        let mut put = |k: &str, v: &str| data.insert(k.to_owned(), v.as_bytes().to_vec());
        put(keys::CA_CERT, &self.ca.cert_pem);
        put(keys::CA_KEY, &self.ca.key_pem);
        if let Some(next) = &self.next {
            put(keys::NEXT_CA_CERT, &next.cert_pem);
            put(keys::NEXT_CA_KEY, &next.key_pem);
            if let Some(since) = self.next_trusted_since {
                put(keys::NEXT_CA_TRUSTED_SINCE, &since.to_string());
            }
        }
        put(keys::TLS_CERT, &self.leaf.cert_pem);
        put(keys::TLS_KEY, &self.leaf.key_pem);
        put(keys::CA_BUNDLE, &self.bundle_pem());
        data
    }

    /// The trust bundle, PEM, as the APIServices' `caBundle` carries it.
    pub fn bundle_pem(&self) -> String {
        self.bundle.iter().map(|t| t.cert_pem.as_str()).collect()
    }

    /// Whether the bundle holds this CA.
    pub fn trusts(&self, ca: &Authority) -> bool {
        self.bundle.iter().any(|t| t.der == ca.der)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{Ca, Validity};

    pub(crate) fn authority(cn: &str, not_before: i64, not_after: i64) -> Authority {
        let ca = Ca::with_validity(cn, Validity { not_before, not_after }).unwrap();
        Authority::new(ca.cert_pem().to_owned(), ca.key_pem()).unwrap()
    }

    fn material() -> Material {
        let ca = authority("ca-1", 0, 10_000_000_000);
        let pair = ca
            .signer()
            .unwrap()
            .server_with_validity(&["adapter.svc", "10.0.0.1"], Validity { not_before: 0, not_after: 5_000_000_000 })
            .unwrap();
        let leaf = Leaf::new(pair.cert_pem, pair.key_pem).unwrap();
        Material { bundle: vec![ca.trusted()], ca, next: None, next_trusted_since: None, leaf }
    }

    #[test]
    fn round_trips_through_secret_data() {
        let m = material();
        let back = Material::from_data(&m.to_data()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.leaf.hosts, ["10.0.0.1", "adapter.svc"].map(String::from).into());
        assert_eq!(back.leaf.not_after, 5_000_000_000);
        assert!(back.leaf.signed_by(&back.ca));
        assert!(back.trusts(&back.ca));
        assert!(!back.leaf.signed_by(&authority("other", 0, 10_000_000_000)));
    }

    #[test]
    fn broken_data_names_the_key() {
        let m = material();
        let mut data = m.to_data();
        data.remove(keys::TLS_KEY);
        assert_eq!(Material::from_data(&data).unwrap_err(), Error { key: keys::TLS_KEY, reason: "missing".into() });

        let mut data = m.to_data();
        data.insert(keys::CA_BUNDLE.into(), b"garbage".to_vec());
        assert_eq!(Material::from_data(&data).unwrap_err().key, keys::CA_BUNDLE);

        // A key that belongs to another certificate.
        let mut data = m.to_data();
        let other = material();
        data.insert(keys::TLS_KEY.into(), other.leaf.key_pem.into_bytes());
        let e = Material::from_data(&data).unwrap_err();
        assert_eq!(e.key, keys::TLS_CERT, "{e}");

        // The serving certificate where the CA should be.
        let mut data = m.to_data();
        data.insert(keys::CA_CERT.into(), m.leaf.cert_pem.clone().into_bytes());
        data.insert(keys::CA_KEY.into(), m.leaf.key_pem.clone().into_bytes());
        assert_eq!(Material::from_data(&data).unwrap_err().reason, "not a CA certificate");

        let mut data = m.to_data();
        data.insert(keys::NEXT_CA_TRUSTED_SINCE.into(), b"yesterday".to_vec());
        assert_eq!(Material::from_data(&data).unwrap_err().key, keys::NEXT_CA_TRUSTED_SINCE);

        // Half a next CA.
        let mut data = m.to_data();
        data.insert(keys::NEXT_CA_CERT.into(), m.ca.cert_pem.clone().into_bytes());
        assert_eq!(Material::from_data(&data).unwrap_err(), Error { key: keys::NEXT_CA_KEY, reason: "missing".into() });
    }

    #[test]
    fn pem_encoding_is_what_the_parser_reads() {
        let m = material();
        let t = Trusted::from_der(m.ca.der().to_vec()).unwrap();
        assert_eq!(pem_certificates(&t.cert_pem).unwrap(), vec![m.ca.der().to_vec()]);
    }
}
