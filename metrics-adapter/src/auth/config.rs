//! The authentication settings: the client CA and the request-header (front-proxy) CA,
//! allowed names and header names.
//!
//! Sources, as in Kubernetes' delegated authentication: the
//! `kube-system/extension-apiserver-authentication` ConfigMap that kube-apiserver
//! publishes (keys `client-ca-file`, `requestheader-client-ca-file`,
//! `requestheader-allowed-names`, `requestheader-username-headers`,
//! `requestheader-uid-headers`, `requestheader-group-headers`,
//! `requestheader-extra-headers-prefix`; list values are JSON arrays), and files given on
//! the command line. A file setting wins over the ConfigMap for its part (client CA, or
//! the whole request-header block), so tests and development can run without a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::x509::{self, CaBundle};

/// The ConfigMap kube-apiserver publishes for aggregated API servers.
pub const CONFIGMAP_NAMESPACE: &str = "kube-system";
/// Its name.
pub const CONFIGMAP_NAME: &str = "extension-apiserver-authentication";

/// Why settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A CA bundle is unusable.
    #[error(transparent)]
    Ca(#[from] x509::Error),
    /// A ConfigMap list value is not a JSON array of strings.
    #[error("ConfigMap key {key}: expected a JSON array of strings: {reason}")]
    BadList {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Front-proxy settings: who may assert identities through headers, and which headers.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHeader {
    /// CA the front-proxy client certificate must chain to.
    pub ca: CaBundle,
    /// Common names allowed for the front-proxy certificate; empty allows any.
    pub allowed_names: Vec<String>,
    /// Headers carrying the user name (first non-empty wins).
    pub username_headers: Vec<String>,
    /// Headers carrying the user's UID.
    pub uid_headers: Vec<String>,
    /// Headers carrying groups (all values).
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes.
    pub extra_prefixes: Vec<String>,
}

/// Default header names, as kube-apiserver configures them.
pub fn default_username_headers() -> Vec<String> {
    vec!["X-Remote-User".into()]
}
/// Default group header.
pub fn default_group_headers() -> Vec<String> {
    vec!["X-Remote-Group".into()]
}
/// Default extra prefix.
pub fn default_extra_prefixes() -> Vec<String> {
    vec!["X-Remote-Extra-".into()]
}
/// Default UID header.
pub fn default_uid_headers() -> Vec<String> {
    vec!["X-Remote-Uid".into()]
}

/// The authentication settings in force.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthnConfig {
    /// CA for plain client certificates (user = CN, groups = O).
    pub client_ca: Option<CaBundle>,
    /// Front-proxy settings.
    pub request_header: Option<RequestHeader>,
}

impl AuthnConfig {
    /// Reads the settings from the ConfigMap's data.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> Result<Self> {
        let client_ca = match data.get("client-ca-file") {
            Some(pem) if !pem.trim().is_empty() => Some(CaBundle::from_pem(pem, "ConfigMap key client-ca-file")?),
            _ => None,
        };
        let request_header = match data.get("requestheader-client-ca-file") {
            Some(pem) if !pem.trim().is_empty() => {
                let list = |key: &str, default: fn() -> Vec<String>| -> Result<Vec<String>> {
                    match data.get(key) {
                        None => Ok(default()),
                        Some(v) if v.trim().is_empty() => Ok(Vec::new()),
                        Some(v) => serde_json::from_str::<Vec<String>>(v)
                            .map_err(|e| Error::BadList { key: key.to_owned(), reason: e.to_string() }),
                    }
                };
                Some(RequestHeader {
                    ca: CaBundle::from_pem(pem, "ConfigMap key requestheader-client-ca-file")?,
                    allowed_names: list("requestheader-allowed-names", Vec::new)?,
                    username_headers: list("requestheader-username-headers", default_username_headers)?,
                    uid_headers: list("requestheader-uid-headers", default_uid_headers)?,
                    group_headers: list("requestheader-group-headers", default_group_headers)?,
                    extra_prefixes: list("requestheader-extra-headers-prefix", default_extra_prefixes)?,
                })
            }
            _ => None,
        };
        Ok(Self { client_ca, request_header })
    }

    /// This config, with parts it lacks taken from `fallback`.
    pub fn or(self, fallback: AuthnConfig) -> AuthnConfig {
        AuthnConfig {
            client_ca: self.client_ca.or(fallback.client_ca),
            request_header: self.request_header.or(fallback.request_header),
        }
    }
}

/// File-based settings (command-line flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSettings {
    /// `--client-ca-file`
    pub client_ca_file: Option<PathBuf>,
    /// `--requestheader-client-ca-file`
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// `--requestheader-allowed-names`
    pub requestheader_allowed_names: Vec<String>,
    /// `--requestheader-username-headers`
    pub requestheader_username_headers: Vec<String>,
    /// `--requestheader-uid-headers`
    pub requestheader_uid_headers: Vec<String>,
    /// `--requestheader-group-headers`
    pub requestheader_group_headers: Vec<String>,
    /// `--requestheader-extra-headers-prefix`
    pub requestheader_extra_headers_prefix: Vec<String>,
}

fn read_ca(path: &Path) -> Result<CaBundle> {
    let pem = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
    Ok(CaBundle::from_pem(&pem, &path.display().to_string())?)
}

impl FileSettings {
    /// Reads the files named by these settings.
    pub fn load(&self) -> Result<AuthnConfig> {
        let client_ca = self.client_ca_file.as_deref().map(read_ca).transpose()?;
        let request_header = match &self.requestheader_client_ca_file {
            None => None,
            Some(path) => Some(RequestHeader {
                ca: read_ca(path)?,
                allowed_names: self.requestheader_allowed_names.clone(),
                username_headers: self.requestheader_username_headers.clone(),
                uid_headers: self.requestheader_uid_headers.clone(),
                group_headers: self.requestheader_group_headers.clone(),
                extra_prefixes: self.requestheader_extra_headers_prefix.clone(),
            }),
        };
        Ok(AuthnConfig { client_ca, request_header })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Ca;

    #[test]
    fn reads_the_configmap_as_kube_apiserver_writes_it() {
        let front = Ca::new("front-proxy-ca").unwrap();
        let client = Ca::new("kubernetes").unwrap();
        let data: BTreeMap<String, String> = [
            ("client-ca-file", client.cert_pem()),
            ("requestheader-client-ca-file", front.cert_pem()),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            ("requestheader-extra-headers-prefix", r#"["X-Remote-Extra-"]"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let cfg = AuthnConfig::from_configmap(&data).unwrap();
        assert_eq!(cfg.client_ca.as_ref().unwrap().pem(), client.cert_pem());
        let rh = cfg.request_header.unwrap();
        assert_eq!(rh.allowed_names, vec!["front-proxy-client".to_owned()]);
        assert_eq!(rh.username_headers, vec!["X-Remote-User".to_owned()]);
        assert_eq!(rh.uid_headers, default_uid_headers());
        assert_eq!(rh.extra_prefixes, vec!["X-Remote-Extra-".to_owned()]);
    }

    #[test]
    fn bad_configmap_values_are_refused_with_the_key() {
        let front = Ca::new("front-proxy-ca").unwrap();
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file".to_owned(), front.cert_pem().to_owned()),
            ("requestheader-allowed-names".to_owned(), "front-proxy-client".to_owned()),
        ]
        .into();
        let err = AuthnConfig::from_configmap(&data).unwrap_err().to_string();
        assert!(err.contains("requestheader-allowed-names"), "{err}");
        let data: BTreeMap<String, String> = [("client-ca-file".to_owned(), "garbage".to_owned())].into();
        let err = AuthnConfig::from_configmap(&data).unwrap_err().to_string();
        assert!(err.contains("client-ca-file"), "{err}");
        assert_eq!(AuthnConfig::from_configmap(&BTreeMap::new()).unwrap(), AuthnConfig::default());
    }

    #[test]
    fn files_win_over_the_configmap_per_part() {
        let dir = tempfile::tempdir().unwrap();
        let a = Ca::new("a").unwrap();
        let b = Ca::new("b").unwrap();
        let path = dir.path().join("client-ca.pem");
        std::fs::write(&path, a.cert_pem()).unwrap();
        let files = FileSettings { client_ca_file: Some(path), ..Default::default() }.load().unwrap();
        let cm: BTreeMap<String, String> = [
            ("client-ca-file".to_owned(), b.cert_pem().to_owned()),
            ("requestheader-client-ca-file".to_owned(), b.cert_pem().to_owned()),
        ]
        .into();
        let merged = files.or(AuthnConfig::from_configmap(&cm).unwrap());
        assert_eq!(merged.client_ca.unwrap().pem(), a.cert_pem());
        assert_eq!(merged.request_header.unwrap().ca.pem(), b.cert_pem());
        let missing = FileSettings { client_ca_file: Some(dir.path().join("nope")), ..Default::default() };
        assert!(missing.load().unwrap_err().to_string().contains("nope"));
    }
}
