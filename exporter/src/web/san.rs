//! Subject Alternative Names of an X.509 certificate, for `client_allowed_sans`.
//!
//! The exporter-toolkit lets a web config restrict client certificates to those carrying
//! one of a list of SAN values, compared as exact strings against the certificate's DNS
//! names, e-mail addresses, IP addresses and URIs (Go's `x509.Certificate` fields, IPs
//! printed the way Go prints them). rustls and webpki do not expose a certificate's SAN
//! list, so this module walks the DER structure just far enough to read the
//! `subjectAltName` extension (RFC 5280 4.2.1.6).
//!
//! Decisions:
//! - A minimal, bounds-checked DER reader instead of a full X.509 crate: only the path
//!   `Certificate > tbsCertificate > extensions > subjectAltName > GeneralNames` is read,
//!   every length is checked against the remaining input, and anything unexpected is an
//!   error (the caller then refuses the certificate). Nothing here panics on bad input.
//! - Only the four name forms Go compares are returned; other forms (otherName,
//!   directoryName, ...) are skipped, as Go skips them.
//! - Two `subjectAltName` extensions in one certificate are refused (RFC 5280 forbids it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a certificate's SANs could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SanError {
    /// The DER structure is cut short or not what X.509 prescribes at this point.
    #[error("malformed certificate: {0}")]
    Malformed(&'static str),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, SanError>;

const TAG_SEQUENCE: u8 = 0x30;
const TAG_INTEGER: u8 = 0x02;
const TAG_OID: u8 = 0x06;
const TAG_BOOLEAN: u8 = 0x01;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_VERSION: u8 = 0xA0; // [0] EXPLICIT
const TAG_ISSUER_UID: u8 = 0x81; // [1] IMPLICIT
const TAG_SUBJECT_UID: u8 = 0x82; // [2] IMPLICIT
const TAG_EXTENSIONS: u8 = 0xA3; // [3] EXPLICIT
const GN_RFC822: u8 = 0x81;
const GN_DNS: u8 = 0x82;
const GN_URI: u8 = 0x86;
const GN_IP: u8 = 0x87;
/// OID 2.5.29.17 (id-ce-subjectAltName), content octets.
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1D, 0x11];

/// One DER element: its tag, its content, and what follows it.
struct Tlv<'a> {
    tag: u8,
    value: &'a [u8],
    rest: &'a [u8],
}

fn read_tlv(input: &[u8]) -> Result<Tlv<'_>> {
    let (&tag, after_tag) = input.split_first().ok_or(SanError::Malformed("unexpected end of data"))?;
    if tag & 0x1F == 0x1F {
        return Err(SanError::Malformed("multi-byte tags are not used in certificates"));
    }
    let (&first, after_len) = after_tag.split_first().ok_or(SanError::Malformed("missing length"))?;
    let (len, body) = if first < 0x80 {
        (usize::from(first), after_len)
    } else {
        let count = usize::from(first & 0x7F);
        if count == 0 || count > 4 {
            return Err(SanError::Malformed("unsupported length encoding"));
        }
        let bytes = after_len.get(..count).ok_or(SanError::Malformed("length cut short"))?;
        let len = bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, after_len.get(count..).ok_or(SanError::Malformed("length cut short"))?)
    };
    let value = body.get(..len).ok_or(SanError::Malformed("element longer than its container"))?;
    let rest = body.get(len..).ok_or(SanError::Malformed("element longer than its container"))?;
    Ok(Tlv { tag, value, rest })
}

fn element<'a>(input: &'a [u8], tag: u8, what: &'static str) -> Result<Tlv<'a>> {
    let tlv = read_tlv(input)?;
    if tlv.tag == tag { Ok(tlv) } else { Err(SanError::Malformed(what)) }
}

/// The SAN values of a DER certificate that Go's `client_allowed_sans` check compares:
/// DNS names, e-mail addresses, IP addresses (Go's textual form) and URIs.
pub fn subject_alt_names(cert_der: &[u8]) -> Result<Vec<String>> {
    let cert = element(cert_der, TAG_SEQUENCE, "certificate is not a SEQUENCE")?;
    let tbs = element(cert.value, TAG_SEQUENCE, "tbsCertificate is not a SEQUENCE")?;
    let mut fields = tbs.value;
    let first = read_tlv(fields)?;
    if first.tag == TAG_VERSION {
        fields = first.rest;
    }
    for (tag, what) in [
        (TAG_INTEGER, "serialNumber is not an INTEGER"),
        (TAG_SEQUENCE, "signature algorithm is not a SEQUENCE"),
        (TAG_SEQUENCE, "issuer is not a SEQUENCE"),
        (TAG_SEQUENCE, "validity is not a SEQUENCE"),
        (TAG_SEQUENCE, "subject is not a SEQUENCE"),
        (TAG_SEQUENCE, "subjectPublicKeyInfo is not a SEQUENCE"),
    ] {
        fields = element(fields, tag, what)?.rest;
    }
    let mut names = Vec::new();
    let mut seen_san = false;
    while !fields.is_empty() {
        let field = read_tlv(fields)?;
        fields = field.rest;
        match field.tag {
            TAG_ISSUER_UID | TAG_SUBJECT_UID => {}
            TAG_EXTENSIONS => {
                let list = element(field.value, TAG_SEQUENCE, "extensions are not a SEQUENCE")?;
                let mut exts = list.value;
                while !exts.is_empty() {
                    let ext = element(exts, TAG_SEQUENCE, "extension is not a SEQUENCE")?;
                    exts = ext.rest;
                    let oid = element(ext.value, TAG_OID, "extension id is not an OID")?;
                    let mut after_oid = oid.rest;
                    let next = read_tlv(after_oid)?;
                    if next.tag == TAG_BOOLEAN {
                        after_oid = next.rest;
                    }
                    let value = element(after_oid, TAG_OCTET_STRING, "extension value is not an OCTET STRING")?;
                    if oid.value == OID_SUBJECT_ALT_NAME {
                        if seen_san {
                            return Err(SanError::Malformed("two subjectAltName extensions"));
                        }
                        seen_san = true;
                        general_names(value.value, &mut names)?;
                    }
                }
            }
            _ => return Err(SanError::Malformed("unexpected field in tbsCertificate")),
        }
    }
    Ok(names)
}

fn general_names(der: &[u8], out: &mut Vec<String>) -> Result<()> {
    let seq = element(der, TAG_SEQUENCE, "subjectAltName is not a SEQUENCE")?;
    let mut items = seq.value;
    while !items.is_empty() {
        let name = read_tlv(items)?;
        items = name.rest;
        match name.tag {
            GN_RFC822 | GN_DNS | GN_URI => {
                let text = std::str::from_utf8(name.value)
                    .ok()
                    .filter(|s| s.is_ascii())
                    .ok_or(SanError::Malformed("SAN text is not IA5 (ASCII)"))?;
                out.push(text.to_owned());
            }
            GN_IP => out.push(ip_text(name.value)?),
            _ => {}
        }
    }
    Ok(())
}

/// An IP SAN as Go's `net.IP.String()` prints it (IPv4-mapped IPv6 in dotted form).
fn ip_text(octets: &[u8]) -> Result<String> {
    let ip = if let Ok(v4) = <[u8; 4]>::try_from(octets) {
        IpAddr::V4(Ipv4Addr::from(v4))
    } else if let Ok(v6) = <[u8; 16]>::try_from(octets) {
        let v6 = Ipv6Addr::from(v6);
        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
    } else {
        return Err(SanError::Malformed("IP SAN is neither 4 nor 16 octets"));
    };
    Ok(ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair, SanType};

    fn cert_with(sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn reads_every_name_form_go_compares() {
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
    }

    #[test]
    fn certificate_without_san_extension_has_no_names() {
        let der = cert_with(Vec::new());
        assert_eq!(subject_alt_names(&der).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn ipv4_mapped_ipv6_prints_like_go() {
        let mapped = Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped().octets();
        assert_eq!(ip_text(&mapped).unwrap(), "192.0.2.7");
        assert!(ip_text(&[1, 2, 3]).is_err());
    }

    #[test]
    fn truncated_or_garbage_input_is_an_error_not_a_panic() {
        let der = cert_with(vec![SanType::DnsName("a.example".try_into().unwrap())]);
        for cut in [0, 1, 2, 10, der.len() / 2, der.len() - 1] {
            assert!(subject_alt_names(&der[..cut]).is_err(), "cut at {cut}");
        }
        assert!(subject_alt_names(b"not a certificate").is_err());
        assert!(subject_alt_names(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]).is_err());
    }
}
