//! The NVML edge: loading the library, per-GPU reading threads with deadlines, and XID
//! events. Nothing outside this module touches `nvml-wrapper`. Every `unsafe` block here
//! says why it is sound (`SAFETY:`), which clippy enforces for this module.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod calls;
pub mod errors;
pub mod events;
pub mod gpm;
pub mod mig;
pub mod nvlink;
pub mod processes;
pub mod read;
pub mod tracker;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use crate::snapshot::{DriverInfo, NvmlDownReason};

/// Why opening NVML failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct OpenError {
    pub reason: NvmlDownReason,
    pub message: String,
}

/// A loaded and initialised NVML.
#[derive(Debug)]
pub struct Session {
    pub nvml: Arc<Nvml>,
    pub driver: DriverInfo,
    pub gpu_count: u32,
}

/// Loads `library`, initialises NVML and reads the driver facts and GPU count, all
/// within `deadline` (a hung `nvmlInit` must not hang the exporter).
pub fn open(library: &Path, deadline: Duration) -> Result<Session, OpenError> {
    let (tx, rx) = mpsc::channel();
    let path: PathBuf = library.to_path_buf();
    std::thread::Builder::new()
        .name("nvml-init".into())
        .spawn(move || {
            let _ = tx.send(open_blocking(&path));
        })
        .map_err(|e| OpenError { reason: NvmlDownReason::Other, message: format!("cannot start a thread: {e}") })?;
    match rx.recv_timeout(deadline) {
        Ok(result) => result,
        Err(_) => Err(OpenError {
            reason: NvmlDownReason::InitHung,
            message: format!("nvmlInit on {} did not return within {deadline:?}", library.display()),
        }),
    }
}

fn open_blocking(library: &Path) -> Result<Session, OpenError> {
    let nvml = Nvml::builder().lib_path(library.as_os_str()).init().map_err(|e| init_error(library, e))?;
    if nvml.lib().nvmlShutdown.is_err() {
        // Dropping `Nvml` calls nvmlShutdown and would panic without it.
        std::mem::forget(nvml);
        return Err(OpenError {
            reason: NvmlDownReason::LibraryNotLoaded,
            message: format!("{} has no nvmlShutdown: not an NVML library", library.display()),
        });
    }
    let gpu_count = nvml.device_count().map_err(|e| OpenError {
        reason: NvmlDownReason::Other,
        message: format!("nvmlDeviceGetCount_v2 failed: {e}"),
    })?;
    let driver_version = nvml.sys_driver_version().unwrap_or_default();
    let cuda_version = nvml
        .sys_cuda_driver_version()
        .map(|v| {
            format!("{}.{}", nvml_wrapper::cuda_driver_version_major(v), nvml_wrapper::cuda_driver_version_minor(v))
        })
        .unwrap_or_default();
    Ok(Session { nvml: Arc::new(nvml), driver: DriverInfo { driver_version, cuda_version }, gpu_count })
}

fn init_error(library: &Path, e: NvmlError) -> OpenError {
    let reason = match &e {
        NvmlError::LibloadingError(_) | NvmlError::FailedToLoadSymbol(_) | NvmlError::LibraryNotFound => {
            NvmlDownReason::LibraryNotLoaded
        }
        NvmlError::DriverNotLoaded => NvmlDownReason::DriverNotLoaded,
        NvmlError::NoPermission => NvmlDownReason::NoPermission,
        _ => NvmlDownReason::Other,
    };
    let detail = match &e {
        NvmlError::LibloadingError(inner) => inner.to_string(),
        other => other.to_string(),
    };
    OpenError { reason, message: format!("cannot initialise NVML from {}: {detail}", library.display()) }
}
