//! Client certificates in the handshake: requested, never required.
//!
//! One rustls verifier covers every policy either binary has:
//! - it always offers client authentication and never makes it mandatory, so a client
//!   without a certificate (the kubelet's probes, a bearer-token client) completes the
//!   handshake and the request handler decides (crate documentation: why);
//! - a presented certificate always has to parse and its handshake signature has to
//!   verify (proof that the client holds the key), as Go's TLS server demands;
//! - with [`ClientCertRequest::verify_chain`], the chain must also verify against the
//!   client CA for client use, and fails the handshake with the standard alert otherwise;
//!   without it, the chain is left to the handler ([`crate::PeerCertificates`]);
//! - with [`ClientCertRequest::allowed_sans`], the leaf must also carry one of the listed
//!   SAN values (exact string match, as Go's exporter-toolkit does).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error as RustlsError, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::ca::ClientCa;
use crate::cert;
use crate::pem::PemSource;

/// Whether and how client certificates are asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCerts {
    /// Not asked for.
    Off,
    /// Asked for, never required; see [`ClientCertRequest`].
    Request(ClientCertRequest),
}

/// How a requested client certificate is checked in the handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientCertRequest {
    /// The client CA: its subjects are sent as hints, and with `verify_chain` a presented
    /// chain must verify against it. A file is re-read when it changes.
    pub ca: Option<PemSource>,
    /// Verify a presented chain in the handshake (needs `ca`). Off: deferred to the
    /// request handler.
    pub verify_chain: bool,
    /// A presented leaf must carry one of these SAN values.
    pub allowed_sans: Option<Vec<String>>,
}

/// The verifier for [`ClientCerts::Request`].
#[derive(Debug)]
pub(crate) struct RequestedClientCert {
    /// webpki against the client CA, when the chain is verified in the handshake.
    chain: Option<Arc<dyn ClientCertVerifier>>,
    hints: Vec<DistinguishedName>,
    allowed_sans: Option<Vec<String>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl RequestedClientCert {
    /// `ca` is the loaded bundle of `request.ca`; `verify_chain` without one is refused
    /// by the caller before this point.
    pub(crate) fn new(request: &ClientCertRequest, ca: Option<&ClientCa>) -> Self {
        RequestedClientCert {
            chain: ca.filter(|_| request.verify_chain).map(ClientCa::verifier),
            hints: ca.map(|ca| ca.subjects().to_vec()).unwrap_or_default(),
            allowed_sans: request.allowed_sans.clone(),
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        }
    }

    fn check_sans(&self, end_entity: &CertificateDer<'_>) -> Result<(), RustlsError> {
        let Some(allowed) = &self.allowed_sans else { return Ok(()) };
        let names = cert::subject_alt_names(end_entity.as_ref())
            .map_err(|_| RustlsError::InvalidCertificate(CertificateError::BadEncoding))?;
        if names.iter().any(|name| allowed.contains(name)) {
            Ok(())
        } else {
            tracing::debug!(presented = ?names, "client certificate has none of the allowed SANs");
            Err(RustlsError::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
        }
    }
}

impl ClientCertVerifier for RequestedClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, RustlsError> {
        match &self.chain {
            Some(webpki) => {
                webpki.verify_client_cert(end_entity, intermediates, now)?;
            }
            None => {
                ParsedCertificate::try_from(end_entity)?;
            }
        }
        self.check_sans(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
