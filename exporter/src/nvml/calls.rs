//! One NVML call as the reader makes it: tracked for the deadline, skipped for good
//! once the driver says `NOT_SUPPORTED`, `GPU_IS_LOST` turned into [`Lost`], and any
//! other error recorded for the error counter.
//!
//! `NOT_SUPPORTED` is remembered per [`CallKey`]: the call, the handle it was made on
//! and its argument. The slowdown and the shutdown threshold are two facts, and so are
//! the SM and the memory clock or the PCIe tx and rx counters; and a MIG device handle
//! that lacks a query says nothing about its parent GPU or its sibling MIG devices.

use std::collections::HashSet;

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_try};

use super::errors::error_label;
use super::tracker::CallTracker;

/// A failed call: (call, error label).
pub type CallFailure = (&'static str, &'static str);

/// The GPU answered `GPU_IS_LOST`; the read stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost;

/// What a remembered `NOT_SUPPORTED` applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub call: &'static str,
    /// The device handle's value (a GPU's or a MIG device's).
    pub handle: usize,
    /// The call's argument where it has one (sensor, threshold, clock, counter...).
    pub arg: u32,
}

impl CallKey {
    /// `call` on `device`, without an argument.
    pub fn on(call: &'static str, device: &Device<'_>) -> Self {
        // SAFETY: only the handle's value is read, to tell handles apart; nothing is
        // called through it here.
        let handle = unsafe { device.handle() } as usize;
        CallKey { call, handle, arg: 0 }
    }

    /// The same call with argument `arg`.
    pub fn arg(self, arg: u32) -> Self {
        CallKey { arg, ..self }
    }
}

/// How a call answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<T> {
    Value(T),
    /// Now, or remembered from an earlier cycle.
    NotSupported,
    /// Any other error; recorded in [`Calls::failures`].
    Failed,
}

impl<T> Answer<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Answer::Value(v) => Some(v),
            Answer::NotSupported | Answer::Failed => None,
        }
    }
}

/// A fact read until it is settled: once the driver answered or said
/// `NOT_SUPPORTED`. A call that failed otherwise is made again next cycle, so one
/// transient error does not leave the fact unknown until the exporter restarts.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Settled<T> {
    #[default]
    Unread,
    Known(Option<T>),
}

impl<T: Clone> Settled<T> {
    /// The settled value, or a new attempt at it.
    pub fn read(
        &mut self,
        calls: &mut Calls<'_>,
        key: CallKey,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Option<T>, Lost> {
        if let Settled::Known(v) = self {
            return Ok(v.clone());
        }
        Ok(match calls.answer(key, call)? {
            Answer::Value(v) => {
                *self = Settled::Known(Some(v.clone()));
                Some(v)
            }
            Answer::NotSupported => {
                *self = Settled::Known(None);
                None
            }
            Answer::Failed => None,
        })
    }

    /// The value if settled and present.
    pub fn get(&self) -> Option<T> {
        match self {
            Settled::Known(v) => v.clone(),
            Settled::Unread => None,
        }
    }

    pub fn is_settled(&self) -> bool {
        matches!(self, Settled::Known(_))
    }
}

/// Call context of one read.
pub struct Calls<'a> {
    pub tracker: &'a CallTracker,
    pub unsupported: &'a mut HashSet<CallKey>,
    pub failures: Vec<CallFailure>,
}

impl Calls<'_> {
    /// Makes one call unless known unsupported; `None` when it gave no value.
    pub fn get<T>(&mut self, key: CallKey, call: impl FnOnce() -> Result<T, NvmlError>) -> Result<Option<T>, Lost> {
        Ok(self.answer(key, call)?.value())
    }

    /// As [`Calls::get`], saying why there is no value.
    pub fn answer<T>(&mut self, key: CallKey, call: impl FnOnce() -> Result<T, NvmlError>) -> Result<Answer<T>, Lost> {
        if self.unsupported.contains(&key) {
            return Ok(Answer::NotSupported);
        }
        match self.tracker.run(key.call, call) {
            Ok(v) => Ok(Answer::Value(v)),
            Err(NvmlError::NotSupported) => {
                self.unsupported.insert(key);
                Ok(Answer::NotSupported)
            }
            Err(NvmlError::GpuLost) => Err(Lost),
            Err(e) => {
                self.fail(key.call, &e);
                Ok(Answer::Failed)
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
                self.fail(name, &e);
                Ok(None)
            }
        }
    }

    /// Makes a call and hands back its error unclassified, except `GPU_IS_LOST`, for
    /// callers that read a particular code (an enumeration's end, say). The caller
    /// records what it counts as a failure with [`Calls::fail`].
    pub fn raw<T>(
        &mut self,
        name: &'static str,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Result<T, NvmlError>, Lost> {
        match self.tracker.run(name, call) {
            Err(NvmlError::GpuLost) => Err(Lost),
            other => Ok(other),
        }
    }

    /// Records a failed call for the error counter.
    pub fn fail(&mut self, name: &'static str, error: &NvmlError) {
        self.failures.push((name, error_label(error)));
    }
}

/// Turns a raw NVML return code into a `Result`, for calls `nvml-wrapper` lacks.
pub fn raw(code: u32) -> Result<(), NvmlError> {
    nvml_try(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(call: &'static str, handle: usize, arg: u32) -> CallKey {
        CallKey { call, handle, arg }
    }

    #[test]
    fn not_supported_is_remembered_per_call_handle_and_argument() {
        let tracker = CallTracker::default();
        let mut unsupported = HashSet::new();
        let mut calls = Calls { tracker: &tracker, unsupported: &mut unsupported, failures: Vec::new() };
        const THRESHOLD: &str = "nvmlDeviceGetTemperatureThreshold";
        let (gpu, mig) = (0x1000, 0x2000);
        // The slowdown threshold is not supported; the shutdown one is.
        assert_eq!(calls.get(key(THRESHOLD, gpu, 1), || Err::<u32, _>(NvmlError::NotSupported)), Ok(None));
        assert_eq!(calls.get(key(THRESHOLD, gpu, 0), || Ok(92)), Ok(Some(92)), "another argument is asked");
        // A MIG device handle lacks memory info; its parent does not.
        const MEMORY: &str = "nvmlDeviceGetMemoryInfo_v2";
        assert_eq!(calls.get(key(MEMORY, mig, 0), || Err::<u64, _>(NvmlError::NotSupported)), Ok(None));
        assert_eq!(calls.get(key(MEMORY, gpu, 0), || Ok(80)), Ok(Some(80)), "the parent is asked");
        // Remembered: the call is not made again on that handle with that argument.
        let made = std::cell::Cell::new(false);
        let again = calls.answer(key(MEMORY, mig, 0), || {
            made.set(true);
            Ok(1u64)
        });
        assert_eq!(again, Ok(Answer::NotSupported));
        assert!(!made.get());
        assert!(calls.failures.is_empty(), "NOT_SUPPORTED is not an error");
    }

    #[test]
    fn a_settled_fact_waits_for_an_answer_or_not_supported() {
        let tracker = CallTracker::default();
        let mut unsupported = HashSet::new();
        let mut calls = Calls { tracker: &tracker, unsupported: &mut unsupported, failures: Vec::new() };
        const ECC: &str = "nvmlDeviceGetEccMode";
        let mut ecc = Settled::<bool>::default();
        assert_eq!(ecc.read(&mut calls, key(ECC, 1, 0), || Err(NvmlError::Unknown)), Ok(None));
        assert!(!ecc.is_settled(), "a transient error settles nothing");
        assert_eq!(calls.failures, [(ECC, "unknown")], "and is counted");
        assert_eq!(ecc.read(&mut calls, key(ECC, 1, 0), || Ok(true)), Ok(Some(true)), "asked again");
        assert_eq!(ecc.read(&mut calls, key(ECC, 1, 0), || Ok(false)), Ok(Some(true)), "then kept");
        let mut unsupported_fact = Settled::<bool>::default();
        assert_eq!(unsupported_fact.read(&mut calls, key(ECC, 2, 0), || Err(NvmlError::NotSupported)), Ok(None));
        assert_eq!(unsupported_fact, Settled::Known(None));
        assert_eq!(ecc.read(&mut calls, key(ECC, 3, 0), || Err(NvmlError::GpuLost)), Ok(Some(true)));
        let mut lost = Settled::<bool>::default();
        assert_eq!(lost.read(&mut calls, key(ECC, 3, 0), || Err(NvmlError::GpuLost)), Err(Lost));
    }
}
