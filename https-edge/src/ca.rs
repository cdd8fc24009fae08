//! A CA bundle that client certificate chains are verified against: webpki chain
//! building to one of its certificates, validity at the given time, and the client-auth
//! extended key usage.
//!
//! The same bundle serves both places a chain is checked: in the handshake (when the
//! trust is fixed configuration, see [`crate::ClientCertRequest::verify_chain`]) and in a
//! request handler (deferred verification, when the trust changes while serving; see the
//! crate documentation).

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::{DistinguishedName, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::cert::{CertError, Result};

/// A CA bundle ready to verify client certificate chains.
#[derive(Clone)]
pub struct ClientCa {
    pem: String,
    verifier: Arc<dyn ClientCertVerifier>,
    subjects: Vec<DistinguishedName>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa").field("certificates", &self.subjects.len()).finish()
    }
}

/// Two bundles are the same when their PEM text is.
impl PartialEq for ClientCa {
    fn eq(&self, other: &Self) -> bool {
        self.pem == other.pem
    }
}

impl ClientCa {
    /// Parses a PEM bundle; `source_name` names it in errors (a file path, a ConfigMap key).
    pub fn from_pem(pem: &str, source_name: &str) -> Result<Self> {
        let bad = |reason: String| CertError::BadBundle { source_name: source_name.to_owned(), reason };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| bad(format!("unreadable PEM certificate: {e}")))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(CertError::EmptyBundle(source_name.to_owned()));
        }
        let subjects = roots.subjects();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // Allowing unauthenticated clients only matters in a handshake: a client without a
        // certificate is left to the request handler (see the crate documentation).
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self { pem: pem.to_owned(), verifier, subjects })
    }

    /// The PEM text this bundle was built from.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The subjects of the bundle's certificates (sent as hints in a handshake).
    pub fn subjects(&self) -> &[DistinguishedName] {
        &self.subjects
    }

    /// Verifies a presented chain (leaf first) for client authentication, now.
    pub fn verify(&self, chain: &[CertificateDer<'_>]) -> Result<()> {
        self.verify_at(chain, UnixTime::now())
    }

    /// Verifies a presented chain (leaf first) for client authentication at `now`.
    pub fn verify_at(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> Result<()> {
        let (leaf, intermediates) = chain.split_first().ok_or_else(|| CertError::Untrusted("no certificate".into()))?;
        self.verifier
            .verify_client_cert(leaf, intermediates, now)
            .map(|_| ())
            .map_err(|e| CertError::Untrusted(e.to_string()))
    }

    /// The webpki verifier, for a handshake that checks chains itself.
    pub(crate) fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.verifier.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        (pem, Issuer::new(params, key))
    }

    fn client(issuer: &Issuer<'static, KeyPair>, usage: ExtendedKeyUsagePurpose) -> CertificateDer<'static> {
        let mut params = CertificateParams::new(vec!["client".to_owned()]).unwrap();
        params.extended_key_usages = vec![usage];
        params.signed_by(&KeyPair::generate().unwrap(), issuer).unwrap().der().clone()
    }

    #[test]
    fn verifies_chains_against_the_right_ca_and_usage() {
        let (trusted_pem, trusted) = ca("client CA");
        let (_, other) = ca("another CA");
        let bundle = ClientCa::from_pem(&trusted_pem, "client-ca.crt").unwrap();
        assert_eq!(bundle.subjects().len(), 1);
        assert!(bundle.verify(&[client(&trusted, ExtendedKeyUsagePurpose::ClientAuth)]).is_ok());
        let err = bundle.verify(&[client(&other, ExtendedKeyUsagePurpose::ClientAuth)]).unwrap_err();
        assert!(matches!(&err, CertError::Untrusted(why) if why.contains("UnknownIssuer")), "{err}");
        let err = bundle.verify(&[client(&trusted, ExtendedKeyUsagePurpose::ServerAuth)]).unwrap_err();
        assert!(matches!(err, CertError::Untrusted(_)), "{err}");
        assert_eq!(bundle.verify(&[]), Err(CertError::Untrusted("no certificate".into())));
    }

    #[test]
    fn unusable_bundles_are_refused_with_their_source() {
        assert_eq!(
            ClientCa::from_pem("not pem", "ca.crt").unwrap_err().to_string(),
            "ca.crt: no PEM certificate found"
        );
        let garbled = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let err = ClientCa::from_pem(garbled, "ca.crt").unwrap_err();
        assert!(matches!(&err, CertError::BadBundle { source_name, .. } if source_name == "ca.crt"), "{err}");
    }
}
