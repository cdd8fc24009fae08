//! Client certificates, as the authenticator uses them: chains verified against a CA
//! bundle for client use, and the subject Kubernetes maps to a user (`CN` → user name,
//! `O` → groups). Both come from the shared edge's certificate code (`https-edge`,
//! webpki and `x509-parser`), under the names the adapter's authentication uses.

pub use https_edge::cert::subject;
pub use https_edge::{CertError as Error, ClientCa as CaBundle, Subject};

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Ca;
    use rustls::pki_types::CertificateDer;
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
    fn reads_common_name_and_organizations_of_the_certificates_it_issues() {
        let c = Ca::new("ca").unwrap();
        let der = client(&c, "jane", &["system:masters", "team-a"]);
        let s = subject(&der).unwrap();
        assert_eq!(s.common_name, "jane");
        assert_eq!(s.organizations, vec!["system:masters".to_owned(), "team-a".to_owned()]);
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(subject(&[]), Err(Error::Malformed(_))));
        assert!(matches!(subject(&[0x30, 0x82, 0xff]), Err(Error::Malformed(_))));
        assert!(matches!(CaBundle::from_pem("not pem", "x"), Err(Error::EmptyBundle(_))));
        assert!(CaBundle::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "x").is_err());
        // Truncations of a real certificate never panic and never yield a subject by accident.
        let c = Ca::new("ca").unwrap();
        let der = client(&c, "jane", &[]);
        for n in 0..der.len() {
            assert!(subject(&der[..n]).is_err(), "prefix of {n} bytes");
        }
    }
}
