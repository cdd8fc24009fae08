//! The NVLink families: link state, data counters and error counters, one series per
//! link (the `link` label, after the GPU's labels).
//!
//! A GPU without NVLink has no link readings and so no series; a counter the driver
//! answers `NOT_SUPPORTED` for is absent, never 0. The state is a gauge and carries the
//! holder's labels like the GPU's other gauges; the counters carry the device's labels
//! alone, so that a change of holder does not start new series (see [`super`]).

use super::families as f;
use super::labels::LabelSet;
use super::sink::Exposition;
use crate::snapshot::{NvLinkReading, Snapshot};

/// Every link of the answering GPUs with its GPU's label set and its number as text.
fn links<'a>(snapshot: &'a Snapshot, sets: &'a [LabelSet]) -> Vec<(&'a LabelSet, &'a NvLinkReading, String)> {
    snapshot
        .gpus
        .iter()
        .zip(sets)
        .filter_map(|(g, l)| g.readings.as_ref().map(|r| (r, l)))
        .flat_map(|(r, l)| r.nvlinks.iter().map(move |link| (l, link, link.link.to_string())))
        .collect()
}

/// Renders the NVLink families. `held` are the GPUs' gauge labels, `device` their
/// counter labels, both in snapshot order.
pub fn render(enc: &mut dyn Exposition, snapshot: &Snapshot, held: &[LabelSet], device: &[LabelSet]) {
    let gauges = links(snapshot, held);
    let counters = links(snapshot, device);
    enc.emit(&f::NVLINK_UP, &mut |s| {
        for (l, link, n) in &gauges {
            if let Some(active) = link.active {
                s.sample(l, &[("link", n)], if active { 1.0 } else { 0.0 });
            }
        }
    });
    type Count = fn(&NvLinkReading) -> Option<u64>;
    let data: [(&crate::exposition::Family, Count); 2] =
        [(&f::NVLINK_TX, |l| l.tx_bytes), (&f::NVLINK_RX, |l| l.rx_bytes)];
    for (family, count) in data {
        enc.emit(family, &mut |s| {
            for (l, link, n) in &counters {
                if let Some(v) = count(link) {
                    s.sample(l, &[("link", n)], v as f64);
                }
            }
        });
    }
    enc.emit(&f::NVLINK_ERRORS, &mut |s| {
        for (l, link, n) in &counters {
            for (error_type, value) in link.errors.by_type() {
                if let Some(v) = value {
                    s.sample(l, &[("link", n), ("error_type", error_type)], v as f64);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use crate::exposition::Format;
    use crate::render::{RenderContext, render};
    use crate::snapshot::{GpuReadings, GpuSnapshot, GpuState, NvLinkErrors, NvLinkReading, Snapshot};

    fn gpu(index: u32, nvlinks: Vec<NvLinkReading>) -> GpuSnapshot {
        GpuSnapshot {
            index,
            state: GpuState::Ok,
            readings: Some(GpuReadings { nvlinks, ..GpuReadings::default() }),
            ..GpuSnapshot::default()
        }
    }

    #[test]
    fn one_series_per_link_and_absent_counters_stay_absent() {
        let up = NvLinkReading {
            link: 0,
            active: Some(true),
            tx_bytes: Some(2048),
            rx_bytes: Some(1024),
            errors: NvLinkErrors { crc_flit: Some(3), crc_data: Some(0), replay: Some(1), recovery: Some(0) },
        };
        // Link 1 is down and its driver reports no error counters.
        let down = NvLinkReading {
            link: 1,
            active: Some(false),
            tx_bytes: Some(0),
            rx_bytes: None,
            ..NvLinkReading::default()
        };
        let snapshot = Snapshot { gpus: vec![gpu(0, vec![up, down]), gpu(1, vec![])], ..Snapshot::default() };
        let ctx = RenderContext { node: "n".into(), ..RenderContext::default() };
        let text = render(&snapshot, &ctx, Format::PrometheusText);
        let lines =
            |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            lines("gpu_nvlink_up{"),
            [
                "gpu_nvlink_up{node=\"n\",gpu=\"0\",uuid=\"\",model=\"\",link=\"0\"} 1",
                "gpu_nvlink_up{node=\"n\",gpu=\"0\",uuid=\"\",model=\"\",link=\"1\"} 0"
            ]
        );
        assert_eq!(lines("gpu_nvlink_tx_bytes_total{").len(), 2);
        assert_eq!(
            lines("gpu_nvlink_rx_bytes_total{"),
            ["gpu_nvlink_rx_bytes_total{node=\"n\",gpu=\"0\",uuid=\"\",model=\"\",link=\"0\"} 1024"]
        );
        let errors = lines("gpu_nvlink_errors_total{");
        assert_eq!(errors.len(), 4, "link 1 reports no counters: {errors:?}");
        assert!(errors[0].ends_with("link=\"0\",error_type=\"crc_flit\"} 3"), "{errors:?}");
        assert!(!text.contains("gpu=\"1\",uuid=\"\",model=\"\",link="), "a GPU without NVLink has no link series");
    }
}
