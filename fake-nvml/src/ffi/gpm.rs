//! GPM (GPU performance monitoring, Hopper and newer): samples of a GPU or of one MIG
//! GPU instance, and metrics computed between two samples — SM, tensor-pipe, DRAM and
//! graphics engine activity, averaged over the scenario time between the two samples.
//! Metric ids as `nvml.h`'s `nvmlGpmMetricId_t` (NVIDIA/go-nvml `gen/nvml/nvml.h`):
//! `NVML_GPM_METRIC_GRAPHICS_UTIL` 1, `_SM_UTIL` 2, `_SM_OCCUPANCY` 3,
//! `_ANY_TENSOR_UTIL` 5, `_DRAM_BW_UTIL` 10.

use std::ffi::{CStr, c_char, c_uint};
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlGpmMetricsGet_t, nvmlGpmSample_t, nvmlReturn_t};

use super::{Target, device_call, guard, loaded, ret, target_call};
use crate::node::{SimGpu, instance_activity};
use crate::scenario::Signal;

const METRICS_GET_VERSION: c_uint = 1;
const METRIC_GRAPHICS_UTIL: c_uint = 1;
const METRIC_SM_UTIL: c_uint = 2;
const METRIC_SM_OCCUPANCY: c_uint = 3;
const METRIC_ANY_TENSOR_UTIL: c_uint = 5;
const METRIC_DRAM_BW_UTIL: c_uint = 10;

/// What a filled sample records.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SampleData {
    gpu: u32,
    /// Position of the MIG instance, for a MIG sample.
    instance: Option<usize>,
    t: f64,
}

/// Live samples by handle address; `None` until filled.
static SAMPLES: Mutex<Vec<(usize, Option<SampleData>)>> = Mutex::new(Vec::new());

fn with_sample<R>(handle: nvmlGpmSample_t, f: impl FnOnce(&mut Option<SampleData>) -> R) -> Result<R, nvmlReturn_t> {
    let mut samples = SAMPLES.lock().map_err(|_| ret::UNKNOWN)?;
    let (_, data) = samples.iter_mut().find(|(h, _)| *h == handle as usize).ok_or(ret::INVALID_ARGUMENT)?;
    Ok(f(data))
}

/// # Safety
/// `sample` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    guard(|| {
        loaded()?;
        if sample.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        let handle = Box::into_raw(Box::new(0u8)) as nvmlGpmSample_t;
        SAMPLES.lock().map_err(|_| ret::UNKNOWN)?.push((handle as usize, None));
        // SAFETY: non-null, caller contract.
        unsafe { sample.write(handle) };
        Ok(())
    })
}

/// # Safety
/// `sample` is a handle from `nvmlGpmSampleAlloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: nvmlGpmSample_t) -> nvmlReturn_t {
    guard(|| {
        let mut samples = SAMPLES.lock().map_err(|_| ret::UNKNOWN)?;
        let position = samples.iter().position(|(h, _)| *h == sample as usize).ok_or(ret::INVALID_ARGUMENT)?;
        samples.remove(position);
        // SAFETY: made by Box::into_raw in nvmlGpmSampleAlloc, freed once.
        drop(unsafe { Box::from_raw(sample as *mut u8) });
        Ok(())
    })
}

fn gpm_supported(gpu: &SimGpu) -> Result<(), nvmlReturn_t> {
    if gpu.spec.model.gpm { Ok(()) } else { Err(ret::NOT_SUPPORTED) }
}

/// On a MIG device handle, a sample of that MIG device's GPU instance.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmSampleGet(device: nvmlDevice_t, sample: nvmlGpmSample_t) -> nvmlReturn_t {
    target_call("nvmlGpmSampleGet", device, |target, t| {
        let (gpu, instance) = match target {
            Target::Gpu(g) => (g, None),
            Target::Mig(g, m) => (g, Some(m.index as usize)),
        };
        gpm_supported(gpu)?;
        with_sample(sample, |data| *data = Some(SampleData { gpu: gpu.spec.index, instance, t }))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance_id: c_uint,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    device_call("nvmlGpmMigSampleGet", device, |gpu, t| {
        gpm_supported(gpu)?;
        let instances = gpu.spec.mig.as_ref().ok_or(ret::INVALID_ARGUMENT)?;
        let position = instances.iter().position(|i| i.gpu_instance_id == gpu_instance_id).ok_or(ret::NOT_FOUND)?;
        with_sample(sample, |data| *data = Some(SampleData { gpu: gpu.spec.index, instance: Some(position), t }))
    })
}

/// Mean of a signal over [t1, t2], or its value at t2 when no time passed.
fn mean_over(signal: &Option<Signal>, default: &Option<Signal>, t1: f64, t2: f64) -> f64 {
    let chosen = if signal.is_some() { signal } else { default };
    if t2 <= t1 {
        return instance_activity(chosen, t2);
    }
    const STEPS: usize = 16;
    (0..=STEPS).map(|i| instance_activity(chosen, t1 + (t2 - t1) * i as f64 / STEPS as f64)).sum::<f64>()
        / (STEPS + 1) as f64
}

static SM_NAME: &CStr = c"SM_UTIL";
static TENSOR_NAME: &CStr = c"ANY_TENSOR_UTIL";
static DRAM_NAME: &CStr = c"DRAM_BW_UTIL";
static OCCUPANCY_NAME: &CStr = c"SM_OCCUPANCY";
static GRAPHICS_NAME: &CStr = c"GRAPHICS_UTIL";
static PERCENT: &CStr = c"%";

/// # Safety
/// `metrics_get` is null or valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(metrics_get: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    guard(|| {
        let state = loaded()?;
        if metrics_get.is_null() {
            return Err(ret::INVALID_ARGUMENT);
        }
        // SAFETY: non-null, caller contract.
        let request = unsafe { &mut *metrics_get };
        if request.version != METRICS_GET_VERSION {
            return Err(ret::ARGUMENT_VERSION_MISMATCH);
        }
        let first = with_sample(request.sample1, |d| *d)?.ok_or(ret::INVALID_ARGUMENT)?;
        let second = with_sample(request.sample2, |d| *d)?.ok_or(ret::INVALID_ARGUMENT)?;
        if (first.gpu, first.instance) != (second.gpu, second.instance) {
            return Err(ret::INVALID_ARGUMENT);
        }
        let count = request.numMetrics as usize;
        if count > request.metrics.len() {
            return Err(ret::INVALID_ARGUMENT);
        }
        let gpu = state.node.gpus.get(first.gpu as usize).ok_or(ret::INVALID_ARGUMENT)?;
        let (t1, t2) = (first.t.min(second.t), first.t.max(second.t));
        let values = &gpu.spec.values;
        let (sm, tensor, dram, graphics) = match first.instance {
            Some(i) => {
                let instance = gpu.spec.mig.as_ref().and_then(|m| m.get(i)).ok_or(ret::INVALID_ARGUMENT)?;
                let v = &instance.values;
                (
                    mean_over(&v.sm_activity, &None, t1, t2),
                    mean_over(&v.tensor_activity, &None, t1, t2),
                    mean_over(&v.dram_activity, &None, t1, t2),
                    mean_over(&v.graphics_activity, &v.sm_activity, t1, t2),
                )
            }
            None => (
                mean_over(&values.sm_activity, &values.utilization, t1, t2),
                mean_over(&values.tensor_activity, &None, t1, t2),
                mean_over(&values.dram_activity, &values.memory_activity, t1, t2),
                mean_over(&values.graphics_activity, &values.utilization, t1, t2),
            ),
        };
        for metric in request.metrics.iter_mut().take(count) {
            let (value, name) = match metric.metricId {
                METRIC_GRAPHICS_UTIL => (graphics, GRAPHICS_NAME),
                METRIC_SM_UTIL => (sm, SM_NAME),
                // Occupancy tracks activity closely enough for a simulation.
                METRIC_SM_OCCUPANCY => (sm * 0.8, OCCUPANCY_NAME),
                METRIC_ANY_TENSOR_UTIL => (tensor, TENSOR_NAME),
                METRIC_DRAM_BW_UTIL => (dram, DRAM_NAME),
                _ => {
                    metric.nvmlReturn = ret::NOT_SUPPORTED;
                    continue;
                }
            };
            metric.nvmlReturn = ret::SUCCESS;
            metric.value = value;
            metric.metricInfo.shortName = name.as_ptr() as *mut c_char;
            metric.metricInfo.longName = name.as_ptr() as *mut c_char;
            metric.metricInfo.unit = PERCENT.as_ptr() as *mut c_char;
        }
        Ok(())
    })
}
