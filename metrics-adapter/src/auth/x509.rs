//! Client certificates: chain verification against a CA bundle (webpki, client-auth usage)
//! and the subject fields Kubernetes maps to a user (`CN` → user name, `O` → groups).
//!
//! The subject is read with a small DER walker over the certificate's `tbsCertificate`.
//! It only runs on certificates webpki has already verified, and refuses anything that
//! does not parse instead of guessing.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::{DistinguishedName, RootCertStore};

/// Why a certificate or bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A PEM bundle has no usable certificate.
    #[error("no CA certificate in {0}")]
    EmptyBundle(String),
    /// A PEM bundle does not parse or holds an unusable certificate.
    #[error("invalid CA bundle {source_name}: {reason}")]
    BadBundle {
        /// Where the bundle came from.
        source_name: String,
        /// Why.
        reason: String,
    },
    /// The certificate does not chain to the CA bundle.
    #[error("certificate not trusted: {0}")]
    Untrusted(String),
    /// The certificate's subject could not be read.
    #[error("malformed certificate subject")]
    MalformedSubject,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// A CA bundle ready to verify client certificate chains.
#[derive(Clone)]
pub struct CaBundle {
    pem: String,
    verifier: Arc<dyn ClientCertVerifier>,
    subjects: Vec<DistinguishedName>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle").field("certificates", &self.subjects.len()).finish()
    }
}

impl PartialEq for CaBundle {
    fn eq(&self, other: &Self) -> bool {
        self.pem == other.pem
    }
}

impl CaBundle {
    /// Parses a PEM bundle. `source_name` names it in errors (a file path or ConfigMap key).
    pub fn from_pem(pem: &str, source_name: &str) -> Result<Self> {
        use rustls::pki_types::pem::PemObject;
        let bad = |reason: String| Error::BadBundle { source_name: source_name.to_owned(), reason };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| bad(e.to_string()))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(Error::EmptyBundle(source_name.to_owned()));
        }
        let subjects = roots.subjects();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self { pem: pem.to_owned(), verifier, subjects })
    }

    /// The PEM text this bundle was built from.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Verifies a presented chain (leaf first) for client authentication, now.
    pub fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<()> {
        let (leaf, intermediates) = chain.split_first().ok_or_else(|| Error::Untrusted("no certificate".into()))?;
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| Error::Untrusted(e.to_string()))
    }
}

/// The subject fields Kubernetes uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    /// Common name (the last one, as Go's `pkix.Name` keeps it).
    pub common_name: String,
    /// Organizations, in order.
    pub organizations: Vec<String>,
}

struct Der<'a> {
    buf: &'a [u8],
}

impl<'a> Der<'a> {
    /// Reads one TLV; returns (tag, contents).
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.buf.split_first()?;
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let mut len = 0usize;
            for &b in &rest[..n] {
                len = (len << 8) | usize::from(b);
            }
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return None;
        }
        let (contents, after) = rest.split_at(len);
        self.buf = after;
        Some((tag, contents))
    }

    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.next()? {
            (t, c) if t == tag => Some(c),
            _ => None,
        }
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

fn decode_string(tag: u8, bytes: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String, NumericString
        0x0c | 0x13 | 0x16 | 0x12 => String::from_utf8(bytes.to_vec()).ok(),
        // TeletexString / T61String: treated as Latin-1, as Go does
        0x14 => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16BE
        0x1e => {
            if bytes.len() % 2 != 0 {
                return None;
            }
            let units: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// Reads the subject of a DER certificate.
pub fn subject(cert: &[u8]) -> Result<Subject> {
    subject_inner(cert).ok_or(Error::MalformedSubject)
}

fn subject_inner(cert: &[u8]) -> Option<Subject> {
    let certificate = Der { buf: cert }.expect(SEQUENCE)?;
    let mut tbs = Der { buf: Der { buf: certificate }.expect(SEQUENCE)? };
    let (mut tag, _) = tbs.next()?;
    if tag == 0xa0 {
        // explicit [0] version, then the serial number
        (tag, _) = tbs.next()?;
    }
    if tag != 0x02 {
        return None;
    }
    tbs.expect(SEQUENCE)?; // signature algorithm
    tbs.expect(SEQUENCE)?; // issuer
    tbs.expect(SEQUENCE)?; // validity
    let mut name = Der { buf: tbs.expect(SEQUENCE)? };
    let mut out = Subject::default();
    while !name.buf.is_empty() {
        let mut rdn = Der { buf: name.expect(SET)? };
        while !rdn.buf.is_empty() {
            let mut atv = Der { buf: rdn.expect(SEQUENCE)? };
            let oid = atv.expect(OID)?;
            let (tag, value) = atv.next()?;
            if oid == OID_CN {
                out.common_name = decode_string(tag, value)?;
            } else if oid == OID_O {
                out.organizations.push(decode_string(tag, value)?);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Ca;
    use rustls::pki_types::pem::PemObject;

    fn client(ca: &Ca, cn: &str, orgs: &[&str]) -> CertificateDer<'static> {
        let pair = ca.client(cn, orgs).unwrap();
        CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap()
    }

    #[test]
    fn verifies_chains_against_the_right_ca() {
        let front = Ca::new("front-proxy-ca").unwrap();
        let clients = Ca::new("kubernetes-ca").unwrap();
        let bundle = CaBundle::from_pem(front.cert_pem(), "requestheader-client-ca-file").unwrap();
        let good = client(&front, "front-proxy-client", &[]);
        let other = client(&clients, "front-proxy-client", &[]);
        assert!(bundle.verify(&[good]).is_ok());
        assert!(matches!(bundle.verify(&[other]), Err(Error::Untrusted(_))));
        assert!(bundle.verify(&[]).is_err());
    }

    #[test]
    fn reads_common_name_and_organizations() {
        let c = Ca::new("ca").unwrap();
        let der = client(&c, "jane", &["system:masters", "team-a"]);
        let s = subject(&der).unwrap();
        assert_eq!(s.common_name, "jane");
        assert_eq!(s.organizations, vec!["system:masters".to_owned(), "team-a".to_owned()]);
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(subject(&[]), Err(Error::MalformedSubject));
        assert_eq!(subject(&[0x30, 0x82, 0xff]), Err(Error::MalformedSubject));
        assert!(matches!(CaBundle::from_pem("not pem", "x"), Err(Error::EmptyBundle(_))));
        assert!(CaBundle::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "x").is_err());
        // Truncations of a real certificate never panic and never yield a subject by accident.
        let c = Ca::new("ca").unwrap();
        let der = client(&c, "jane", &[]);
        for n in 0..der.len() {
            assert!(subject(&der[..n]).is_err(), "prefix of {n} bytes");
        }
    }

    #[test]
    fn bmp_and_teletex_strings_decode() {
        assert_eq!(decode_string(0x1e, &[0, b'h', 0, b'i']), Some("hi".into()));
        assert_eq!(decode_string(0x14, &[0xe9]), Some("é".into()));
        assert_eq!(decode_string(0x1e, &[0]), None);
        assert_eq!(decode_string(0x05, &[]), None);
    }
}
