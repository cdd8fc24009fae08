//! Event sets: XID errors scheduled in the scenario, delivered through
//! `nvmlEventSetWait_v2` exactly as the driver delivers them.
//!
//! Semantics, as `nvmlEventSetWait` has them: an event set receives the XID faults of
//! its registered GPUs that happen from the moment the GPU was registered in that set
//! onward, each once, in time order. An XID that happened before registration is never
//! delivered: a restarted consumer does not see its predecessor's events again. (With
//! a frozen clock no XID happens after registration, so none is delivered.)

use std::collections::HashMap;
use std::ffi::{c_uint, c_ulonglong};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlEventData_t, nvmlEventSet_t, nvmlReturn_t};

use super::{Loaded, device_call, device_handle, guard, loaded, put, ret};

const EVENT_SINGLE_BIT_ECC: u64 = 0x1;
const EVENT_DOUBLE_BIT_ECC: u64 = 0x2;
const EVENT_PSTATE: u64 = 0x4;
const EVENT_XID: u64 = 0x8;
const EVENT_CLOCK: u64 = 0x10;
/// MIG ids of an event that concerns the whole GPU.
const WHOLE_GPU: c_uint = 0xFFFF_FFFF;

#[derive(Debug, Default)]
struct EventSet {
    /// GPU index to registered event mask.
    registered: HashMap<usize, u64>,
    /// GPU index to the number of its XID events already delivered (or skipped because
    /// they happened before registration).
    delivered: HashMap<usize, usize>,
}

/// Live event sets, keyed by the address handed out as the handle.
static SETS: Mutex<Vec<(usize, EventSet)>> = Mutex::new(Vec::new());

fn with_set<R>(handle: nvmlEventSet_t, body: impl FnOnce(&mut EventSet) -> R) -> Result<R, nvmlReturn_t> {
    let mut sets = SETS.lock().map_err(|_| ret::UNKNOWN)?;
    let (_, set) = sets.iter_mut().find(|(h, _)| *h == handle as usize).ok_or(ret::INVALID_ARGUMENT)?;
    Ok(body(set))
}

fn supported_events(gpu: &crate::node::SimGpu) -> u64 {
    let ecc = if gpu.spec.ecc_enabled { EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC } else { 0 };
    ecc | EVENT_PSTATE | EVENT_XID | EVENT_CLOCK
}

/// # Safety
/// `set` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    guard(|| {
        loaded()?;
        let handle = Box::into_raw(Box::new(0u8)) as nvmlEventSet_t;
        SETS.lock().map_err(|_| ret::UNKNOWN)?.push((handle as usize, EventSet::default()));
        // SAFETY: caller contract.
        unsafe { put(set, handle) }
    })
}

/// # Safety
/// `set` is a handle from `nvmlEventSetCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    guard(|| {
        let mut sets = SETS.lock().map_err(|_| ret::UNKNOWN)?;
        let position = sets.iter().position(|(h, _)| *h == set as usize).ok_or(ret::INVALID_ARGUMENT)?;
        sets.remove(position);
        // SAFETY: the handle was made by Box::into_raw in nvmlEventSetCreate and is freed once.
        drop(unsafe { Box::from_raw(set as *mut u8) });
        Ok(())
    })
}

/// # Safety
/// `event_types` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    event_types: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetSupportedEventTypes", device, |gpu, _| {
        // SAFETY: caller contract.
        unsafe { put(event_types, supported_events(gpu)) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    event_types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceRegisterEvents", device, |gpu, t| {
        if event_types & !supported_events(gpu) != 0 {
            return Err(ret::NOT_SUPPORTED);
        }
        let index = gpu.spec.index as usize;
        // XIDs that happened before the first registration are skipped for good.
        let before = gpu.xid_events().take_while(|(at, _)| *at < t).count();
        with_set(set, |s| {
            *s.registered.entry(index).or_default() |= event_types;
            let delivered = s.delivered.entry(index).or_insert(0);
            *delivered = (*delivered).max(before);
        })
    })
}

/// The earliest XID due by `t` that this set has not delivered: (gpu, xid, nth).
fn next_due(state: &Loaded, set: &EventSet, t: f64) -> Option<(usize, u64, usize)> {
    let mut best: Option<(f64, usize, u64, usize)> = None;
    for (&gpu_index, &mask) in &set.registered {
        if mask & EVENT_XID == 0 {
            continue;
        }
        let Some(gpu) = state.node.gpus.get(gpu_index) else { continue };
        let nth = set.delivered.get(&gpu_index).copied().unwrap_or(0);
        if let Some((at, xid)) = gpu.xid_events().nth(nth)
            && at <= t
            && best.is_none_or(|(b, ..)| at < b)
        {
            best = Some((at, gpu_index, xid, nth));
        }
    }
    best.map(|(_, g, x, n)| (g, x, n))
}

/// # Safety
/// `data` is null or valid for a write; `set` is a handle from `nvmlEventSetCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeoutms: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        if data.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeoutms));
        loop {
            let t = state.clock.now();
            let due = with_set(set, |s| {
                let due = next_due(&state, s, t);
                if let Some((gpu, _, nth)) = due {
                    s.delivered.insert(gpu, nth + 1);
                }
                due
            })?;
            if let Some((gpu, xid, _)) = due {
                let event = nvmlEventData_t {
                    device: device_handle(gpu),
                    eventType: EVENT_XID,
                    eventData: xid,
                    gpuInstanceId: WHOLE_GPU,
                    computeInstanceId: WHOLE_GPU,
                };
                // SAFETY: checked non-null above; caller contract.
                return unsafe { put(data, event) };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ret::TIMEOUT);
            }
            // Poll: the clock may be a file a test rewrites, so the next due time is not known.
            std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
        }
    })
}
