//! The exported NVML C API: global library state, handle encoding and the guard every
//! exported function runs its body in.
//!
//! Each exported function has the exact signature of the symbol `nvml-wrapper-sys`
//! loads (checked at compile time in [`abi_check`]), validates its pointers, answers
//! `NVML_ERROR_UNINITIALIZED` before `nvmlInit`, `NVML_ERROR_GPU_IS_LOST` on a lost
//! GPU, blocks inside a scheduled hang, answers a scheduled `error` fault's code, and
//! never lets a panic cross the C boundary. On a MIG device handle only the calls in
//! [`crate::calls::MIG_HANDLE_CALLS`] answer; the rest say `NVML_ERROR_NOT_SUPPORTED`.
//! Calls NVIDIA's consumers make that the simulator does not model are exported by
//! [`stubs`] and answer `NVML_ERROR_NOT_SUPPORTED` (see `docs/nvml-consumers.md`).

mod abi_check;
mod device;
mod events;
mod fields;
mod gpm;
mod instances;
mod live;
mod mig;
mod nvlink;
mod processes;
mod stubs;
mod system;
mod topology;

use std::ffi::c_char;
use std::os::raw::c_uint;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, RwLock};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use crate::clock::Clock;
use crate::node::{Node, SimGpu};

/// NVML return codes used here.
pub mod ret {
    use nvml_wrapper_sys::bindings::nvmlReturn_t;
    pub const SUCCESS: nvmlReturn_t = 0;
    pub const UNINITIALIZED: nvmlReturn_t = 1;
    pub const INVALID_ARGUMENT: nvmlReturn_t = 2;
    pub const NOT_SUPPORTED: nvmlReturn_t = 3;
    pub const NO_PERMISSION: nvmlReturn_t = 4;
    pub const NOT_FOUND: nvmlReturn_t = 6;
    pub const INSUFFICIENT_SIZE: nvmlReturn_t = 7;
    pub const DRIVER_NOT_LOADED: nvmlReturn_t = 9;
    pub const TIMEOUT: nvmlReturn_t = 10;
    pub const GPU_IS_LOST: nvmlReturn_t = 15;
    pub const ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
    pub const UNKNOWN: nvmlReturn_t = 999;
}

type CallResult = Result<(), nvmlReturn_t>;

/// What `nvmlInit` set up; dropped by the last `nvmlShutdown`.
#[derive(Debug)]
struct Loaded {
    node: Node,
    clock: Clock,
    /// The scenario file followed for changes (`FAKE_NVML_LIVE=1`), see [`live`].
    live: Option<Arc<live::Live>>,
}

static STATE: RwLock<Option<Arc<Loaded>>> = RwLock::new(None);
static INIT_COUNT: Mutex<u32> = Mutex::new(0);

/// Handles are addresses inside these arrays: GPU `i` is `&DEVICE_SLOTS[i]`, MIG
/// device `j` of GPU `i` is `&MIG_SLOTS[i * MAX_MIG + j]`, GPU instance `j` of GPU `i`
/// is `&GPU_INSTANCE_SLOTS[i * MAX_MIG + j]`, and the compute instance of that GPU
/// instance (one per GPU instance here) is `&COMPUTE_INSTANCE_SLOTS[i * MAX_MIG + j]`.
const MAX_GPUS: usize = 64;
const MAX_MIG: usize = 8;
static DEVICE_SLOTS: [u8; MAX_GPUS] = [0; MAX_GPUS];
static MIG_SLOTS: [u8; MAX_GPUS * MAX_MIG] = [0; MAX_GPUS * MAX_MIG];
static GPU_INSTANCE_SLOTS: [u8; MAX_GPUS * MAX_MIG] = [0; MAX_GPUS * MAX_MIG];
static COMPUTE_INSTANCE_SLOTS: [u8; MAX_GPUS * MAX_MIG] = [0; MAX_GPUS * MAX_MIG];

fn device_handle(index: usize) -> nvmlDevice_t {
    DEVICE_SLOTS[index.min(MAX_GPUS - 1)..].as_ptr() as nvmlDevice_t
}

fn mig_handle(gpu: usize, instance: usize) -> nvmlDevice_t {
    MIG_SLOTS[(gpu * MAX_MIG + instance).min(MIG_SLOTS.len() - 1)..].as_ptr() as nvmlDevice_t
}

/// The handle of MIG position `instance` of GPU `gpu` in `slots` (GPU or compute
/// instance handles).
fn instance_handle<T>(slots: &'static [u8], gpu: usize, instance: usize) -> *mut T {
    slots[(gpu * MAX_MIG + instance).min(slots.len() - 1)..].as_ptr() as *mut T
}

fn slot_offset(handle: usize, slots: &[u8]) -> Option<usize> {
    let offset = handle.wrapping_sub(slots.as_ptr() as usize);
    (offset < slots.len()).then_some(offset)
}

/// What a device handle designates.
#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    Gpu(&'a SimGpu),
    Mig(&'a SimGpu, &'a fake_mig::MigInstance),
}

use crate::scenario as fake_mig;

fn loaded() -> Result<Arc<Loaded>, nvmlReturn_t> {
    let current = STATE.read().map_err(|_| ret::UNKNOWN)?.clone().ok_or(ret::UNINITIALIZED)?;
    let Some(next) = current.live.as_ref().and_then(|live| live.reload(&current)) else {
        return Ok(current);
    };
    let next = Arc::new(next);
    let mut state = STATE.write().map_err(|_| ret::UNKNOWN)?;
    // A shutdown in between leaves the library uninitialised; a reload must not revive it.
    if state.is_none() {
        return Err(ret::UNINITIALIZED);
    }
    *state = Some(Arc::clone(&next));
    Ok(next)
}

impl Loaded {
    fn target(&self, handle: nvmlDevice_t) -> Result<Target<'_>, nvmlReturn_t> {
        if let Some(i) = slot_offset(handle as usize, &DEVICE_SLOTS) {
            return self.node.gpus.get(i).map(Target::Gpu).ok_or(ret::INVALID_ARGUMENT);
        }
        let i = slot_offset(handle as usize, &MIG_SLOTS).ok_or(ret::INVALID_ARGUMENT)?;
        let gpu = self.node.gpus.get(i / MAX_MIG).ok_or(ret::INVALID_ARGUMENT)?;
        let instance = gpu.spec.mig.as_ref().and_then(|m| m.get(i % MAX_MIG)).ok_or(ret::INVALID_ARGUMENT)?;
        Ok(Target::Mig(gpu, instance))
    }

    /// The GPU and MIG instance a GPU or compute instance handle (an address in
    /// `slots`) designates.
    fn instance_at(&self, handle: usize, slots: &[u8]) -> Result<(&SimGpu, &fake_mig::MigInstance), nvmlReturn_t> {
        let slot = slot_offset(handle, slots).ok_or(ret::INVALID_ARGUMENT)?;
        let gpu = self.node.gpus.get(slot / MAX_MIG).ok_or(ret::INVALID_ARGUMENT)?;
        let instance = gpu.spec.mig.as_ref().and_then(|m| m.get(slot % MAX_MIG)).ok_or(ret::INVALID_ARGUMENT)?;
        Ok((gpu, instance))
    }
}

/// Runs `body`, turning its result into an NVML code and a panic into `UNKNOWN`.
fn guard(body: impl FnOnce() -> CallResult) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ret::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => ret::UNKNOWN,
    }
}

/// The common prologue of a GPU-wide call named `call`: state, handle, hang, lost,
/// injected error. A MIG device handle answers `NOT_SUPPORTED`, as the driver does for
/// GPU-wide queries.
fn device_call(call: &str, device: nvmlDevice_t, body: impl FnOnce(&SimGpu, f64) -> CallResult) -> nvmlReturn_t {
    target_call(call, device, |target, t| match target {
        Target::Gpu(gpu) => body(gpu, t),
        Target::Mig(..) => Err(ret::NOT_SUPPORTED),
    })
}

/// As [`device_call`], for calls a MIG device handle may answer too: those listed in
/// [`crate::calls::MIG_HANDLE_CALLS`]; every other call answers `NOT_SUPPORTED` there.
/// A GPU in MIG mode also refuses [`crate::calls::MIG_MODE_UNSUPPORTED`] on its own
/// handle.
fn target_call(call: &str, device: nvmlDevice_t, body: impl FnOnce(Target<'_>, f64) -> CallResult) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        let target = state.target(device)?;
        let (gpu, mig) = match target {
            Target::Gpu(g) => (g, None),
            Target::Mig(g, m) => (g, Some(m.index)),
        };
        let t = hang_then_now(&state, gpu, call);
        if gpu.is_lost(t) {
            return Err(ret::GPU_IS_LOST);
        }
        if mig.is_some() && !crate::calls::mig_handle_answers(call) {
            return Err(ret::NOT_SUPPORTED);
        }
        if gpu.spec.mig.is_some() && !crate::calls::mig_mode_answers(call) {
            return Err(ret::NOT_SUPPORTED);
        }
        // Field values report an injected error per field; the call itself succeeds.
        if call != "nvmlDeviceGetFieldValues"
            && let Some(code) = gpu.injected_error(call, mig, t)
        {
            return Err(code);
        }
        body(target, t)
    })
}

/// Blocks for the rest of a scheduled hang on `call`, then returns the time.
fn hang_then_now(state: &Loaded, gpu: &SimGpu, call: &str) -> f64 {
    let t = state.clock.now();
    match gpu.hang_remaining(call, t) {
        Some(left) => {
            std::thread::sleep(state.clock.real_duration(left));
            state.clock.now()
        }
        None => t,
    }
}

/// Writes `value` through an out-pointer, refusing null.
///
/// # Safety
/// `ptr` is null or valid for a write of `T`.
unsafe fn put<T>(ptr: *mut T, value: T) -> CallResult {
    if ptr.is_null() {
        return Err(ret::INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller guarantees validity.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Copies `text` and its NUL into a caller buffer of `len` bytes.
///
/// # Safety
/// `buf` is null or valid for `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, text: &str) -> CallResult {
    if buf.is_null() {
        return Err(ret::INVALID_ARGUMENT);
    }
    if (len as usize) < text.len() + 1 {
        return Err(ret::INSUFFICIENT_SIZE);
    }
    // SAFETY: the buffer holds at least text.len() + 1 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}
