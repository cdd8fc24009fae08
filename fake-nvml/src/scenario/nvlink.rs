//! A GPU's NVLink links in a scenario: how many, the data they carry over time, and
//! whether the driver reports their error counters.
//!
//! ```yaml
//! nvlink:
//!   links: 18                      # default: the model's (H100/H200 SXM: 18)
//!   tx_bytes_per_second: 20e9      # per active link; default 0
//!   rx_bytes_per_second: {periodic: {min: 0, max: 40e9, period_s: 60}}
//!   error_counters: true           # false: nvmlDeviceGetNvLinkErrorCounter answers NOT_SUPPORTED
//! ```
//!
//! Without the section a GPU has the model's links, idle. A model without NVLink (the
//! PCIe boards) refuses the section: its NVLink queries answer `NOT_SUPPORTED`. Links
//! going down and error counts are scheduled as faults (`nvlink_down`, `nvlink_errors`).

use serde::Deserialize;

use super::Signal;
use crate::models::Model;

/// The section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLinkSpec {
    pub links: Option<u32>,
    pub tx_bytes_per_second: Option<Signal>,
    pub rx_bytes_per_second: Option<Signal>,
    #[serde(default = "yes")]
    pub error_counters: bool,
}

fn yes() -> bool {
    true
}

/// A GPU's links, resolved.
#[derive(Debug, Clone, Default)]
pub struct NvLink {
    /// 0 on a GPU without NVLink.
    pub links: u32,
    pub tx_bytes_per_second: Option<Signal>,
    pub rx_bytes_per_second: Option<Signal>,
    pub error_counters: bool,
}

/// Resolves the section against the model; the error is (field, reason).
pub fn resolve(spec: Option<NvLinkSpec>, model: &Model) -> Result<NvLink, (String, String)> {
    let Some(spec) = spec else {
        return Ok(NvLink { links: model.nvlink_links, error_counters: true, ..NvLink::default() });
    };
    if model.nvlink_links == 0 {
        return Err(("nvlink".into(), format!("{} has no NVLink", model.key)));
    }
    let links = spec.links.unwrap_or(model.nvlink_links);
    if links == 0 || links > model.nvlink_links {
        return Err((
            "nvlink.links".into(),
            format!("{links} is outside 1 to {}, the links of a {}", model.nvlink_links, model.key),
        ));
    }
    for (name, signal) in
        [("tx_bytes_per_second", &spec.tx_bytes_per_second), ("rx_bytes_per_second", &spec.rx_bytes_per_second)]
    {
        if let Some(signal) = signal {
            signal.validate().map_err(|r| (format!("nvlink.{name}"), r))?;
        }
    }
    Ok(NvLink {
        links,
        tx_bytes_per_second: spec.tx_bytes_per_second,
        rx_bytes_per_second: spec.rx_bytes_per_second,
        error_counters: spec.error_counters,
    })
}

/// The integral of `signal` (clamped at 0) over `[a, b]`, in trapezoids of at most one
/// second (at most 20000 of them: a long window takes longer steps). A constant is exact.
pub fn integrate(signal: &Option<Signal>, a: f64, b: f64) -> f64 {
    if b <= a {
        return 0.0;
    }
    let Some(signal) = signal else { return 0.0 };
    if let Signal::Constant(v) = signal {
        return v.max(0.0) * (b - a);
    }
    let steps = ((b - a).ceil() as usize).clamp(1, 20_000);
    let h = (b - a) / steps as f64;
    let at = |i: usize| signal.at(a + h * i as f64).max(0.0);
    (0..steps).map(|i| (at(i) + at(i + 1)) / 2.0 * h).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

    #[test]
    fn pcie_boards_refuse_nvlink_and_sxm_boards_default_to_their_links() {
        let l40s = models::find("L40S-48GB").unwrap();
        assert_eq!(resolve(None, l40s).unwrap().links, 0);
        let spec =
            NvLinkSpec { links: None, tx_bytes_per_second: None, rx_bytes_per_second: None, error_counters: true };
        let (field, reason) = resolve(Some(spec.clone()), l40s).unwrap_err();
        assert_eq!((field.as_str(), reason.as_str()), ("nvlink", "L40S-48GB has no NVLink"));
        let h100 = models::find("H100-SXM5-80GB").unwrap();
        assert_eq!(resolve(None, h100).unwrap().links, 18);
        let too_many = NvLinkSpec { links: Some(19), ..spec };
        assert_eq!(resolve(Some(too_many), h100).unwrap_err().0, "nvlink.links");
    }

    #[test]
    fn integrals_are_exact_for_constants_and_close_for_shapes() {
        assert_eq!(integrate(&Some(Signal::Constant(10.0)), 2.0, 5.0), 30.0);
        assert_eq!(integrate(&Some(Signal::Constant(-1.0)), 0.0, 5.0), 0.0, "clamped at 0");
        assert_eq!(integrate(&None, 0.0, 5.0), 0.0);
        let ramp: Signal = serde_yaml_ng::from_str("{ramp: {from: 0, to: 10, over_s: 10}}").unwrap();
        assert!((integrate(&Some(ramp), 0.0, 10.0) - 50.0).abs() < 1e-9);
    }
}
