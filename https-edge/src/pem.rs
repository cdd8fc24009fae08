//! PEM material: where it comes from (a file, re-read when it changes, or text given
//! inline), and turning it into what rustls serves with.
//!
//! Every error names the material (certificate, key, client CA) and where it came from,
//! so a caller can map it to its own setting name (a flag, a web-config field) and the
//! operator learns which file is wrong and why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::{Error as RustlsError, InconsistentKeys};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The kinds of PEM material a TLS server reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Material {
    /// The serving certificate chain.
    Cert,
    /// The serving private key.
    Key,
    /// The CA bundle client certificates are checked against.
    ClientCa,
}

/// Why PEM material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// What the file holds.
        material: Material,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The content is not usable; `reason` starts with where it came from.
    #[error("{reason}")]
    Invalid {
        /// What the content should have been.
        material: Material,
        /// Where it came from and what is wrong.
        reason: String,
    },
}

impl PemError {
    /// The material the error is about.
    pub fn material(&self) -> Material {
        match self {
            PemError::Read { material, .. } | PemError::Invalid { material, .. } => *material,
        }
    }
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, PemError>;

/// Where PEM material comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file, re-read when it changes (see [`crate::ServerTls`]).
    File(PathBuf),
    /// Text given directly (fixed for the life of the server).
    Inline(String),
}

impl PemSource {
    /// The bytes, read now.
    pub fn read(&self, material: Material) -> Result<Vec<u8>> {
        match self {
            PemSource::File(path) => {
                std::fs::read(path).map_err(|source| PemError::Read { material, path: path.clone(), source })
            }
            PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
        }
    }

    /// Where the material comes from, for messages.
    pub fn describe(&self) -> String {
        match self {
            PemSource::File(path) => path.display().to_string(),
            PemSource::Inline(_) => "the inline value".to_owned(),
        }
    }

    /// The file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            PemSource::File(path) => Some(path),
            PemSource::Inline(_) => None,
        }
    }
}

/// Every certificate of a PEM text, in order; at least one. `name` says where the text
/// came from.
pub fn certificates(pem: &[u8], material: Material, name: &str) -> Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| PemError::Invalid { material, reason: format!("{name}: unreadable PEM certificate: {e}") })?;
    if chain.is_empty() {
        return Err(PemError::Invalid { material, reason: format!("{name}: no PEM certificate found") });
    }
    Ok(chain)
}

/// A certificate chain and its private key as rustls serves them (ring provider),
/// refused when the key does not belong to the leaf certificate.
pub fn key_pair(cert_pem: &[u8], key_pem: &[u8], cert_name: &str, key_name: &str) -> Result<CertifiedKey> {
    let chain = certificates(cert_pem, Material::Cert, cert_name)?;
    let invalid_key = |reason: String| PemError::Invalid { material: Material::Key, reason };
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| invalid_key(format!("{key_name}: no usable PEM private key: {e}")))?;
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| invalid_key(format!("{key_name}: private key not usable: {e}")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // Unknown: the key type cannot tell (rustls then checks at the first handshake).
        Ok(()) | Err(RustlsError::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(RustlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(invalid_key(format!("{key_name}: the private key does not match the certificate in {cert_name}")))
        }
        Err(e) => Err(PemError::Invalid {
            material: Material::Cert,
            reason: format!("{cert_name}: certificate not usable: {e}"),
        }),
    }
}

/// [`key_pair`] from two sources (files read now).
pub fn key_pair_from(cert: &PemSource, key: &PemSource) -> Result<CertifiedKey> {
    let cert_pem = cert.read(Material::Cert)?;
    let key_pem = key.read(Material::Key)?;
    key_pair(&cert_pem, &key_pem, &cert.describe(), &key.describe())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_matching_pair_loads_and_a_mismatched_one_names_both_sources() {
        let (cert, key) = pair();
        let (_, other_key) = pair();
        assert!(key_pair(cert.as_bytes(), key.as_bytes(), "c.pem", "k.pem").is_ok());
        let err = key_pair(cert.as_bytes(), other_key.as_bytes(), "c.pem", "k.pem").unwrap_err();
        assert_eq!(err.material(), Material::Key);
        assert_eq!(err.to_string(), "k.pem: the private key does not match the certificate in c.pem");
    }

    #[test]
    fn bad_pem_is_refused_with_its_material() {
        let (cert, key) = pair();
        let err = key_pair(b"", key.as_bytes(), "c.pem", "k.pem").unwrap_err();
        assert_eq!((err.material(), err.to_string()), (Material::Cert, "c.pem: no PEM certificate found".to_owned()));
        let garbled = b"-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n";
        let err = key_pair(garbled, key.as_bytes(), "c.pem", "k.pem").unwrap_err();
        assert!(err.to_string().starts_with("c.pem: unreadable PEM certificate"), "{err}");
        let err = key_pair(cert.as_bytes(), cert.as_bytes(), "c.pem", "k.pem").unwrap_err();
        assert_eq!(err.material(), Material::Key);
        assert!(err.to_string().contains("no usable PEM private key"), "{err}");
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_the_path() {
        let source = PemSource::File(PathBuf::from("/nonexistent/tls.crt"));
        let err = source.read(Material::Cert).unwrap_err();
        assert!(matches!(err, PemError::Read { material: Material::Cert, .. }), "{err}");
        assert!(err.to_string().starts_with("cannot read /nonexistent/tls.crt"), "{err}");
        assert_eq!(PemSource::Inline("x".into()).describe(), "the inline value");
    }
}
