//! What a certificate says, read with `x509-parser`: subject alternative names (for SAN
//! allow-lists), the subject's common name and organizations (which Kubernetes maps to
//! a user and groups), and the validity window.
//!
//! Decisions:
//! - SANs are the four forms Go's `crypto/x509` compares (DNS names, e-mail addresses,
//!   IP addresses, URIs), IP addresses printed as Go's `net.IP.String()` prints them
//!   (an IPv4-mapped IPv6 address in dotted form); other forms are skipped as Go skips
//!   them. A SAN of those forms that does not decode, or two `subjectAltName`
//!   extensions (RFC 5280 forbids it), make the certificate malformed: the caller then
//!   refuses it rather than guess.
//! - The common name is the last one in the subject, as Go's `pkix.Name` keeps it;
//!   organizations are in order. Besides the string types `x509-parser` decodes, BMP
//!   strings (UTF-16) and Teletex strings (read as Latin-1, as Go does) are accepted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use x509_parser::asn1_rs::Tag;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// Why a certificate, a chain or a CA bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// A CA bundle holds no certificate.
    #[error("{0}: no PEM certificate found")]
    EmptyBundle(String),
    /// A CA bundle does not parse or holds a certificate that cannot be a trust anchor.
    #[error("{source_name}: not a usable CA bundle: {reason}")]
    BadBundle {
        /// Where the bundle came from (a file path, a ConfigMap key).
        source_name: String,
        /// Why.
        reason: String,
    },
    /// A presented chain does not verify against the CA bundle for client use.
    #[error("certificate not trusted: {0}")]
    Untrusted(String),
    /// The certificate's DER does not parse, or a field read here does not decode.
    #[error("malformed certificate: {0}")]
    Malformed(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, CertError>;

/// The subject fields Kubernetes reads from a client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    /// The common name (the last one, as Go keeps it); empty when there is none.
    pub common_name: String,
    /// The organizations, in order.
    pub organizations: Vec<String>,
}

/// What this crate reads from a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Subject common name and organizations.
    pub subject: Subject,
    /// DNS, e-mail, IP and URI subject alternative names, in certificate order.
    pub sans: Vec<String>,
    /// First second of validity (unix seconds).
    pub not_before: i64,
    /// Last second of validity (unix seconds).
    pub not_after: i64,
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>> {
    X509Certificate::from_der(der).map(|(_, cert)| cert).map_err(|e| CertError::Malformed(e.to_string()))
}

/// Reads subject, SANs and validity of a DER certificate.
pub fn inspect(der: &[u8]) -> Result<CertInfo> {
    let cert = parse(der)?;
    let validity = cert.validity();
    Ok(CertInfo {
        subject: subject_of(cert.subject())?,
        sans: sans_of(&cert)?,
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

/// The subject of a DER certificate.
pub fn subject(der: &[u8]) -> Result<Subject> {
    subject_of(parse(der)?.subject())
}

/// The SANs of a DER certificate that Go's SAN checks compare.
pub fn subject_alt_names(der: &[u8]) -> Result<Vec<String>> {
    sans_of(&parse(der)?)
}

fn subject_of(name: &X509Name<'_>) -> Result<Subject> {
    let common_name = name.iter_common_name().last().map(text).transpose()?.unwrap_or_default();
    let organizations = name.iter_organization().map(text).collect::<Result<_>>()?;
    Ok(Subject { common_name, organizations })
}

/// A subject attribute's value as text.
fn text(attribute: &AttributeTypeAndValue<'_>) -> Result<String> {
    let value = attribute.attr_value();
    let bad = || CertError::Malformed(format!("subject attribute of type {} does not decode", value.tag()));
    match value.tag() {
        Tag::BmpString => value.as_bmpstring().map(|s| s.string()).map_err(|_| bad()),
        Tag::TeletexString => Ok(latin1(value.data)),
        _ => attribute.as_str().map(str::to_owned).map_err(|_| bad()),
    }
}

/// Teletex (T.61) bytes read as Latin-1, as Go and most software read them.
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().copied().map(char::from).collect()
}

fn sans_of(cert: &X509Certificate<'_>) -> Result<Vec<String>> {
    let Some(extension) = cert.subject_alternative_name().map_err(|e| CertError::Malformed(e.to_string()))? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for name in &extension.value.general_names {
        match name {
            GeneralName::DNSName(text) | GeneralName::RFC822Name(text) | GeneralName::URI(text) => {
                if !text.is_ascii() {
                    return Err(CertError::Malformed("SAN text is not IA5 (ASCII)".to_owned()));
                }
                names.push((*text).to_owned());
            }
            GeneralName::IPAddress(octets) => names.push(ip_text(octets)?),
            // [1] rfc822Name, [2] dNSName, [6] URI, [7] iPAddress that did not decode.
            GeneralName::Invalid(tag, _) if matches!(tag.0, 1 | 2 | 6 | 7) => {
                return Err(CertError::Malformed(format!("SAN [{}] does not decode", tag.0)));
            }
            _ => {}
        }
    }
    Ok(names)
}

/// An IP SAN as Go's `net.IP.String()` prints it.
fn ip_text(octets: &[u8]) -> Result<String> {
    let ip = if let Ok(v4) = <[u8; 4]>::try_from(octets) {
        IpAddr::V4(Ipv4Addr::from(v4))
    } else if let Ok(v6) = <[u8; 16]>::try_from(octets) {
        let v6 = Ipv6Addr::from(v6);
        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
    } else {
        return Err(CertError::Malformed("IP SAN is neither 4 nor 16 octets".to_owned()));
    };
    Ok(ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, DnValue, KeyPair, SanType};

    fn der_of(params: CertificateParams) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn cert_with(sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        der_of(params)
    }

    #[test]
    fn reads_every_san_form_go_compares() {
        let der = cert_with(vec![
            SanType::DnsName("scraper.monitoring.svc".try_into().unwrap()),
            SanType::Rfc822Name("ops@example.org".try_into().unwrap()),
            SanType::IpAddress("10.1.2.3".parse().unwrap()),
            SanType::IpAddress("fd00::1".parse().unwrap()),
            SanType::URI("spiffe://cluster.local/ns/monitoring/sa/prometheus".try_into().unwrap()),
        ]);
        let mut names = subject_alt_names(&der).unwrap();
        names.sort();
        assert_eq!(
            names,
            [
                "10.1.2.3",
                "fd00::1",
                "ops@example.org",
                "scraper.monitoring.svc",
                "spiffe://cluster.local/ns/monitoring/sa/prometheus"
            ]
        );
        assert_eq!(subject_alt_names(&cert_with(Vec::new())).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn ipv4_mapped_ipv6_prints_like_go() {
        let mapped = Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped().octets();
        assert_eq!(ip_text(&mapped).unwrap(), "192.0.2.7");
        assert!(ip_text(&[1, 2, 3]).is_err());
    }

    #[test]
    fn reads_common_name_organizations_and_validity() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "jane");
        params.distinguished_name.push(DnType::OrganizationName, "system:masters");
        // rcgen keeps one value per type; a second organization goes in under the same OID.
        params.distinguished_name.push(DnType::CustomDnType(vec![2, 5, 4, 10]), "team-a");
        params.not_before = time::OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let info = inspect(&der_of(params)).unwrap();
        assert_eq!(info.subject.common_name, "jane");
        assert_eq!(info.subject.organizations, ["system:masters", "team-a"]);
        assert_eq!((info.not_before, info.not_after), (1_700_000_000, 1_800_000_000));
    }

    #[test]
    fn bmp_and_teletex_subjects_decode() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, DnValue::BmpString("hi".try_into().unwrap()));
        params.distinguished_name.push(DnType::OrganizationName, DnValue::TeletexString("ops".try_into().unwrap()));
        let s = subject(&der_of(params)).unwrap();
        assert_eq!((s.common_name.as_str(), s.organizations.as_slice()), ("hi", &["ops".to_owned()][..]));
        assert_eq!(latin1(&[0xe9]), "é");
    }

    #[test]
    fn truncated_or_garbage_input_is_an_error_not_a_panic() {
        let der = cert_with(vec![SanType::DnsName("a.example".try_into().unwrap())]);
        for cut in 0..der.len() {
            assert!(inspect(&der[..cut]).is_err(), "cut at {cut}");
        }
        assert!(matches!(subject(b"not a certificate"), Err(CertError::Malformed(_))));
        assert!(subject_alt_names(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]).is_err());
    }
}
