//! GPM activity over the collection interval: each cycle takes a new GPM sample per
//! GPU (or per MIG GPU instance) and computes SM, tensor, DRAM and graphics engine
//! activity between it and the previous cycle's sample, in one `nvmlGpmMetricsGet`.
//! Metric ids as `nvml.h` defines `nvmlGpmMetricId_t` (NVIDIA/go-nvml
//! `gen/nvml/nvml.h`: `NVML_GPM_METRIC_GRAPHICS_UTIL = 1`, "Percentage of time any
//! compute/graphics app was active on the GPU", the reading dcgm-exporter serves as
//! `DCGM_FI_PROF_GR_ENGINE_ACTIVE`). The first cycle has no previous sample, so its
//! activity is absent rather than a made-up number.

use std::collections::HashMap;

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::nvmlGpmSample_t;

use super::calls::{CallKey, Calls, Lost};

/// Activity between two samples, percent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    pub sm: Option<f64>,
    pub tensor: Option<f64>,
    pub dram: Option<f64>,
    pub graphics: Option<f64>,
}

/// Where a sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Gpu,
    /// A MIG GPU instance, by GPU instance id.
    Instance(u32),
}

/// Previous samples of one GPU, held as raw handles because a `GpmSample` borrows the
/// `Nvml` it came from; they are freed through that same library.
#[derive(Debug, Default)]
pub struct GpmTracker {
    previous: HashMap<Scope, nvmlGpmSample_t>,
}

impl GpmTracker {
    /// Takes a sample for `scope` and returns the activity since the previous one.
    pub fn sample(
        &mut self,
        nvml: &Nvml,
        calls: &mut Calls<'_>,
        device: &Device<'_>,
        scope: Scope,
    ) -> Result<Activity, Lost> {
        let taken = match scope {
            Scope::Gpu => calls.get(CallKey::on("nvmlGpmSampleGet", device), || device.gpm_sample())?,
            Scope::Instance(gi) => calls.get_optional("nvmlGpmMigSampleGet", || device.gpm_mig_sample(gi))?,
        };
        let Some(current) = taken else {
            self.forget(nvml, scope);
            return Ok(Activity::default());
        };
        let activity = match self.previous.remove(&scope) {
            Some(handle) => {
                // SAFETY: the handle came from `into_handle` on a sample of this `nvml`.
                let previous = unsafe { GpmSample::from_handle(nvml, handle) };
                let ids = [
                    GpmMetricId::SmUtil,
                    GpmMetricId::AnyTensorUtil,
                    GpmMetricId::DramBwUtil,
                    GpmMetricId::GraphicsUtil,
                ];
                let key = CallKey::on("nvmlGpmMetricsGet", device);
                let metrics = calls.get(key, || gpm_metrics_get(nvml, &previous, &current, &ids))?;
                let value = |i: usize| -> Option<f64> {
                    metrics.as_ref()?.get(i)?.as_ref().ok().map(|m| m.value).filter(|v| v.is_finite())
                };
                Activity { sm: value(0), tensor: value(1), dram: value(2), graphics: value(3) }
            }
            None => Activity::default(),
        };
        self.previous.insert(scope, current.into_handle());
        Ok(activity)
    }

    /// Drops the previous samples of scopes not seen this cycle (instances destroyed).
    pub fn retain(&mut self, nvml: &Nvml, keep: impl Fn(&Scope) -> bool) {
        let gone: Vec<Scope> = self.previous.keys().filter(|s| !keep(s)).copied().collect();
        for scope in gone {
            self.forget(nvml, scope);
        }
    }

    fn forget(&mut self, nvml: &Nvml, scope: Scope) {
        if let Some(handle) = self.previous.remove(&scope) {
            // SAFETY: as in `sample`; dropping frees it through nvmlGpmSampleFree.
            drop(unsafe { GpmSample::from_handle(nvml, handle) });
        }
    }

    /// Frees every held sample.
    pub fn clear(&mut self, nvml: &Nvml) {
        self.retain(nvml, |_| false);
    }
}

/// Whether the error means "this GPU has no GPM".
pub fn unsupported(error: &NvmlError) -> bool {
    matches!(error, NvmlError::NotSupported)
}
