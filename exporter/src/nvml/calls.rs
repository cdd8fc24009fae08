//! One NVML call as the reader makes it: tracked for the deadline, skipped for good
//! once the GPU says `NOT_SUPPORTED`, `GPU_IS_LOST` turned into [`Lost`], and any other
//! error recorded for the error counter.

use std::collections::HashSet;

use nvml_wrapper::error::{NvmlError, nvml_try};

use super::errors::error_label;
use super::tracker::CallTracker;

/// A failed call: (call, error label).
pub type CallFailure = (&'static str, &'static str);

/// The GPU answered `GPU_IS_LOST`; the read stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost;

/// Call context of one read.
pub struct Calls<'a> {
    pub tracker: &'a CallTracker,
    pub unsupported: &'a mut HashSet<&'static str>,
    pub failures: Vec<CallFailure>,
}

impl Calls<'_> {
    /// Makes one call unless known unsupported.
    pub fn get<T>(
        &mut self,
        name: &'static str,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Option<T>, Lost> {
        if self.unsupported.contains(name) {
            return Ok(None);
        }
        match self.tracker.run(name, call) {
            Ok(v) => Ok(Some(v)),
            Err(NvmlError::NotSupported) => {
                self.unsupported.insert(name);
                Ok(None)
            }
            Err(NvmlError::GpuLost) => Err(Lost),
            Err(e) => {
                self.failures.push((name, error_label(&e)));
                Ok(None)
            }
        }
    }

    /// As [`Calls::get`], but `NOT_FOUND` means "nothing" rather than an error, and
    /// `NOT_SUPPORTED` is not remembered (for calls whose support depends on the mode).
    pub fn get_optional<T>(
        &mut self,
        name: &'static str,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Option<T>, Lost> {
        match self.tracker.run(name, call) {
            Ok(v) => Ok(Some(v)),
            Err(NvmlError::NotFound | NvmlError::NotSupported) => Ok(None),
            Err(NvmlError::GpuLost) => Err(Lost),
            Err(e) => {
                self.failures.push((name, error_label(&e)));
                Ok(None)
            }
        }
    }
}

/// Turns a raw NVML return code into a `Result`, for calls `nvml-wrapper` lacks.
pub fn raw(code: u32) -> Result<(), NvmlError> {
    nvml_try(code)
}
