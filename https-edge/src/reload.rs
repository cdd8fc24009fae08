//! The rustls configuration in use, rebuilt when the files behind it change.
//!
//! How a change is detected: a new handshake stats the certificate, key and client CA
//! files (size, mtime, inode) and rebuilds the configuration only when one of them
//! differs from the files the current one was built from, so rotating a Kubernetes
//! Secret or a cert-manager certificate takes effect on the next connection without a
//! restart and without reading files per connection. With a check interval, the files
//! are stat'ed at most once per interval (a server with many short connections then does
//! not stat per handshake); zero checks on every handshake.
//!
//! A rebuild that fails (say a new certificate written before its key) keeps serving the
//! previous configuration, logs a warning once, and is tried again when the files change
//! again. Limit: mtime moves with the kernel's clock tick, so a file rewritten in place
//! twice within one tick at the same size is only noticed at its next change; writers
//! that replace files by rename (Secret volumes, cert-manager, most tools) change the
//! inode and are always noticed.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;

use crate::tls::{Built, Result, TlsSettings};

/// What identifies one version of a file cheaply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(FileStamp { len: meta.len(), modified: meta.modified().ok(), inode })
}

type Stamps = Vec<Option<FileStamp>>;

/// A TLS server configuration that follows its files.
pub struct ServerTls {
    settings: TlsSettings,
    check_every: Duration,
    state: Mutex<State>,
}

struct State {
    /// Stamps of the files the current configuration was built from.
    stamps: Stamps,
    checked: Instant,
    built: Built,
    /// Stamps of the last failed rebuild: neither retried nor logged again until the
    /// files change once more.
    failed: Option<Stamps>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .field("check_every", &self.check_every)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Builds the first configuration (an error here means the settings are refused);
    /// later ones are rebuilt when the files change, checked at most every `check_every`.
    pub fn new(settings: TlsSettings, check_every: Duration) -> Result<ServerTls> {
        let stamps = stamps(&settings);
        let built = settings.build()?;
        let state = State { stamps, checked: Instant::now(), built, failed: None };
        Ok(ServerTls { settings, check_every, state: Mutex::new(state) })
    }

    /// The settings this configuration is built from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// The certificate chain served now (leaf first).
    pub fn serving_chain(&self) -> Vec<CertificateDer<'static>> {
        self.lock().built.chain(&self.settings.identity)
    }

    /// Whether the handshake verifies client chains against the client CA.
    pub(crate) fn verifies_chain(&self) -> bool {
        self.settings.verifies_chain()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The configuration for a new handshake: the current one unless a file changed.
    pub fn current(&self) -> Arc<ServerConfig> {
        let mut state = self.lock();
        if !self.check_every.is_zero() && state.checked.elapsed() < self.check_every {
            return state.built.config.clone();
        }
        state.checked = Instant::now();
        let stamps = stamps(&self.settings);
        if stamps == state.stamps || state.failed.as_ref() == Some(&stamps) {
            return state.built.config.clone();
        }
        match self.settings.build() {
            Ok(built) => {
                tracing::info!(files = ?self.settings.files(), "TLS certificate material changed; reloaded");
                state.built = built;
                state.stamps = stamps;
                state.failed = None;
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "TLS certificate material changed but cannot be used; still serving the previous one"
                );
                state.failed = Some(stamps);
            }
        }
        state.built.config.clone()
    }
}

fn stamps(settings: &TlsSettings) -> Stamps {
    settings.files().into_iter().map(stamp).collect()
}
