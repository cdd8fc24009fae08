//! XID errors, delivered by NVML's event set rather than polled.
//!
//! A dedicated thread registers every GPU for critical XID events and waits on the set.
//! Each event is recorded in the shared [`XidLog`] and announced through a callback, so
//! the snapshot (and the health loop) see it within milliseconds, not at the next
//! collection cycle. Registration uses the raw call because `nvml-wrapper`'s
//! `register_events` frees the whole set when one GPU refuses.
//!
//! `nvmlEventSetWait` delivers only events that happen after registration: XIDs from
//! before the exporter (re)started are not counted, so `gpu_xid_errors_total` counts
//! from process start, as a counter's reset says.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;

use crate::snapshot::XidRecord;

/// XIDs seen since start, by GPU index and code.
#[derive(Debug, Default)]
pub struct XidLog {
    records: Mutex<BTreeMap<u32, BTreeMap<u64, XidRecord>>>,
}

impl XidLog {
    pub fn record(&self, gpu: u32, code: u64, at: SystemTime) {
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = records.entry(gpu).or_default().entry(code).or_insert(XidRecord { count: 0, last_seen: at });
        entry.count += 1;
        entry.last_seen = at;
    }

    /// The XIDs of one GPU.
    pub fn for_gpu(&self, gpu: u32) -> BTreeMap<u64, XidRecord> {
        let records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        records.get(&gpu).cloned().unwrap_or_default()
    }
}

/// How long one wait blocks, which bounds how late the thread notices a stop request.
const WAIT_MS: u32 = 500;

/// Starts the listener thread for `gpu_count` GPUs.
pub fn spawn_listener(
    nvml: Arc<Nvml>,
    gpu_count: u32,
    log: Arc<XidLog>,
    on_event: impl Fn(u32, u64) + Send + 'static,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("nvml-events".into()).stack_size(1 << 20).spawn(move || {
        if let Err(e) = listen(&nvml, gpu_count, &log, &on_event, &stop) {
            tracing::warn!(error = %e, "XID events are unavailable; XID counters will stay empty");
        }
    })
}

fn listen(
    nvml: &Nvml,
    gpu_count: u32,
    log: &XidLog,
    on_event: &dyn Fn(u32, u64),
    stop: &AtomicBool,
) -> Result<(), NvmlError> {
    let set = nvml.create_event_set()?;
    let register =
        nvml.lib().nvmlDeviceRegisterEvents.as_ref().map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // Raw handle -> GPU index, to attribute events without another NVML call.
    let mut handles = Vec::new();
    for index in 0..gpu_count {
        let registered = nvml.device_by_index(index).and_then(|device| {
            let supported = device.supported_event_types()?;
            if !supported.contains(EventTypes::CRITICAL_XID_ERROR) {
                return Err(NvmlError::NotSupported);
            }
            // SAFETY: `register` is the library's own symbol; the device and set handles
            // come from this NVML instance and outlive the call.
            let code = unsafe { register(device.handle(), EventTypes::CRITICAL_XID_ERROR.bits(), set.handle()) };
            match code {
                // SAFETY: only the handle's value is read, to match events to this GPU;
                // nothing is called through it.
                0 => Ok(unsafe { device.handle() } as usize),
                other => Err(other_error(other)),
            }
        });
        match registered {
            Ok(handle) => handles.push((handle, index)),
            Err(e) => tracing::warn!(gpu = index, error = %e, "GPU not registered for XID events"),
        }
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(WAIT_MS) {
            Ok(event) => {
                // SAFETY: only the handle's value is read, to find the GPU it names;
                // nothing is called through it.
                let handle = unsafe { event.device.handle() } as usize;
                let Some(&(_, index)) = handles.iter().find(|(h, _)| *h == handle) else { continue };
                if let Some(XidError::Value(code)) = event.event_data {
                    tracing::warn!(gpu = index, xid = code, "XID error");
                    log.record(index, code, SystemTime::now());
                    on_event(index, code);
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                tracing::debug!(error = %e, "event wait failed");
                std::thread::sleep(Duration::from_millis(u64::from(WAIT_MS)));
            }
        }
    }
    Ok(())
}

/// Maps a raw NVML return code to the wrapper's error.
fn other_error(code: u32) -> NvmlError {
    match nvml_wrapper::error::nvml_try(code) {
        Ok(()) => NvmlError::Unknown,
        Err(e) => e,
    }
}
