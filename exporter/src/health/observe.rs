//! A snapshot as the health core's [`Observation`]: the readings its signals are
//! computed from, copied out of the exporter's own types. No policy here: thresholds
//! and what a reading means live in `gpu-health`.

use gpu_health::observation::{
    DraDevice, Ecc, GpuReadings, GpuState, NvLink, Nvml, Observation, Recovery, RemappedRows, RetiredPages,
};
use gpu_health_kube::Source;

use crate::snapshot::{self, GpuSnapshot, NvmlDownReason, NvmlStatus, RecoveryAction, Snapshot};

impl Source for Snapshot {
    fn observe(&self) -> Observation {
        observe(self)
    }
}

/// The health core's view of one snapshot.
pub fn observe(snapshot: &Snapshot) -> Observation {
    let nvml = match &snapshot.nvml {
        NvmlStatus::Up(info) => {
            Nvml::Up { driver_version: info.driver_version.clone(), read: snapshot.stats.cycles_total > 0 }
        }
        NvmlStatus::Starting => Nvml::Starting,
        // Only these say the GPUs or the driver are broken; a missing library or a
        // permission does not.
        NvmlStatus::Down { error: error @ (NvmlDownReason::InitHung | NvmlDownReason::DriverNotLoaded), message } => {
            Nvml::Failed(format!("NVML is down ({}): {message}", error.as_str()))
        }
        NvmlStatus::Down { .. } => Nvml::Unusable,
    };
    let gpus = snapshot.gpus.iter().map(|g| gpu(g, dra_devices(snapshot, &g.identity.uuid))).collect();
    Observation { generation: snapshot.generation, nvml, gpus }
}

/// The DRA devices published for the GPU `uuid`, from attribution's ResourceSlice watch.
fn dra_devices(snapshot: &Snapshot, uuid: &str) -> Vec<DraDevice> {
    let published = snapshot.attribution.as_ref().and_then(|a| a.dra_devices.get(uuid));
    published
        .into_iter()
        .flatten()
        .map(|d| DraDevice { driver: d.driver.clone(), pool: d.pool.clone(), device: d.device.clone() })
        .collect()
}

fn gpu(gpu: &GpuSnapshot, dra_devices: Vec<DraDevice>) -> GpuReadings {
    let state = match &gpu.state {
        snapshot::GpuState::Ok => GpuState::Ok,
        snapshot::GpuState::Unknown => GpuState::Unknown,
        snapshot::GpuState::Lost { .. } => GpuState::Lost,
        snapshot::GpuState::Failed { error } => GpuState::Failed { error: error.clone() },
        snapshot::GpuState::Stale { call, .. } => GpuState::Stale { call: (*call).to_string() },
    };
    let r = gpu.readings.as_ref();
    GpuReadings {
        index: gpu.index,
        uuid: gpu.identity.uuid.clone(),
        model: gpu.identity.model.clone(),
        state,
        ecc: r
            .and_then(|r| r.ecc)
            .map(|e| Ecc { corrected: e.corrected_volatile, uncorrected: e.uncorrected_volatile }),
        remapped_rows: r.and_then(|r| r.remapped_rows).map(|m| RemappedRows { failed: m.failed, pending: m.pending }),
        retired_pages: r
            .and_then(|r| r.retired_pages)
            .map(|p| RetiredPages { retired: p.single_bit_ecc.saturating_add(p.double_bit_ecc), pending: p.pending }),
        recovery: r.and_then(|r| match r.recovery_action {
            Some(RecoveryAction::GpuReset | RecoveryAction::DrainAndReset) => Some(Recovery::Reset),
            Some(RecoveryAction::NodeReboot) => Some(Recovery::Reboot),
            _ => None,
        }),
        temperature_celsius: r.and_then(|r| r.temperature_celsius),
        temperature_slowdown_celsius: r.and_then(|r| r.temperature_slowdown_celsius),
        clock_events_active: r.and_then(|r| r.clock_events).map(|c| c.active),
        xid_counts: gpu.xids.iter().map(|(code, x)| (*code, x.count)).collect(),
        nvlinks: r
            .map(|r| &r.nvlinks[..])
            .unwrap_or_default()
            .iter()
            .map(|l| NvLink { link: l.link, active: l.active, errors: l.errors.total() })
            .collect(),
        dra_devices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{ClockEvents, DriverInfo, EccCounts, GpuIdentity, XidRecord};
    use std::time::SystemTime;

    fn up(gpu: GpuSnapshot) -> Snapshot {
        let mut s = Snapshot { nvml: NvmlStatus::Up(DriverInfo::default()), gpus: vec![gpu], ..Snapshot::default() };
        s.stats.cycles_total = 1;
        s
    }

    #[test]
    fn readings_are_copied_and_recovery_actions_mapped() {
        let readings = snapshot::GpuReadings {
            temperature_celsius: Some(82),
            ecc: Some(EccCounts { corrected_volatile: 10, uncorrected_volatile: 1, ..EccCounts::default() }),
            retired_pages: Some(snapshot::RetiredPages { single_bit_ecc: 50, double_bit_ecc: 10, pending: true }),
            clock_events: Some(ClockEvents { supported: 0x1ff, active: 0x48 }),
            recovery_action: Some(RecoveryAction::DrainAndReset),
            ..snapshot::GpuReadings::default()
        };
        let g = GpuSnapshot {
            identity: GpuIdentity { uuid: "GPU-a".into(), model: "H100".into(), ..GpuIdentity::default() },
            state: snapshot::GpuState::Ok,
            readings: Some(readings),
            ..GpuSnapshot::default()
        };
        let o = observe(&up(g));
        assert!(matches!(o.nvml, Nvml::Up { read: true, .. }));
        let g = &o.gpus[0];
        assert_eq!((g.uuid.as_str(), g.model.as_str(), &g.state), ("GPU-a", "H100", &GpuState::Ok));
        assert_eq!(g.ecc, Some(Ecc { corrected: 10, uncorrected: 1 }));
        assert_eq!(g.retired_pages, Some(RetiredPages { retired: 60, pending: true }));
        assert_eq!(
            (g.recovery, g.clock_events_active, g.temperature_celsius),
            (Some(Recovery::Reset), Some(0x48), Some(82))
        );
        for (action, want) in [
            (RecoveryAction::None, None),
            (RecoveryAction::DrainP2p, None),
            (RecoveryAction::GpuReset, Some(Recovery::Reset)),
            (RecoveryAction::NodeReboot, Some(Recovery::Reboot)),
        ] {
            let readings = snapshot::GpuReadings { recovery_action: Some(action), ..snapshot::GpuReadings::default() };
            let o = observe(&up(GpuSnapshot { readings: Some(readings), ..GpuSnapshot::default() }));
            assert_eq!(o.gpus[0].recovery, want, "{action:?}");
        }
    }

    #[test]
    fn nvlinks_are_copied_with_their_errors_summed() {
        let links = vec![
            snapshot::NvLinkReading {
                link: 0,
                active: Some(true),
                tx_bytes: Some(1 << 30),
                rx_bytes: Some(1 << 29),
                errors: snapshot::NvLinkErrors {
                    crc_flit: Some(3),
                    crc_data: Some(1),
                    replay: Some(10),
                    recovery: Some(2),
                },
            },
            // Down, and a driver that reports only the replay counter.
            snapshot::NvLinkReading {
                link: 1,
                active: Some(false),
                errors: snapshot::NvLinkErrors { replay: Some(4), ..snapshot::NvLinkErrors::default() },
                ..snapshot::NvLinkReading::default()
            },
            // Nothing answered.
            snapshot::NvLinkReading { link: 2, ..snapshot::NvLinkReading::default() },
        ];
        let readings = snapshot::GpuReadings { nvlinks: links, ..snapshot::GpuReadings::default() };
        let o = observe(&up(GpuSnapshot { readings: Some(readings), ..GpuSnapshot::default() }));
        assert_eq!(
            o.gpus[0].nvlinks,
            [
                NvLink { link: 0, active: Some(true), errors: Some(16) },
                NvLink { link: 1, active: Some(false), errors: Some(4) },
                NvLink { link: 2, active: None, errors: None },
            ]
        );
        let stale =
            GpuSnapshot { state: snapshot::GpuState::Lost { since: SystemTime::now() }, ..GpuSnapshot::default() };
        assert!(observe(&up(stale)).gpus[0].nvlinks.is_empty(), "no readings, no links");
    }

    #[test]
    fn states_and_xids() {
        let now = SystemTime::now();
        let mut lost = GpuSnapshot { state: snapshot::GpuState::Lost { since: now }, ..GpuSnapshot::default() };
        lost.xids.insert(79, XidRecord { count: 2, last_seen: now });
        let o = observe(&up(lost));
        assert_eq!((&o.gpus[0].state, o.gpus[0].xid_counts[&79]), (&GpuState::Lost, 2));
        let hung = GpuSnapshot {
            state: snapshot::GpuState::Stale { call: "nvmlDeviceGetPowerUsage", since: now },
            ..GpuSnapshot::default()
        };
        assert_eq!(observe(&up(hung)).gpus[0].state, GpuState::Stale { call: "nvmlDeviceGetPowerUsage".into() });
    }

    #[test]
    fn nvml_down_is_a_failure_only_when_the_driver_is_at_fault() {
        let missing = Snapshot {
            nvml: NvmlStatus::Down { error: NvmlDownReason::LibraryNotLoaded, message: "no file".into() },
            ..Snapshot::default()
        };
        assert_eq!(observe(&missing).nvml, Nvml::Unusable);
        let hung = Snapshot {
            nvml: NvmlStatus::Down { error: NvmlDownReason::InitHung, message: "nvmlInit hung".into() },
            ..Snapshot::default()
        };
        assert!(matches!(observe(&hung).nvml, Nvml::Failed(why) if why.contains("init_hung")));
        assert_eq!(observe(&Snapshot::default()).nvml, Nvml::Starting);
        let never_read = Snapshot { nvml: NvmlStatus::Up(DriverInfo::default()), ..Snapshot::default() };
        assert!(matches!(observe(&never_read).nvml, Nvml::Up { read: false, .. }));
    }

    #[test]
    fn dra_devices_are_those_attribution_published_for_each_gpu() {
        use crate::snapshot::attribution::{AttributionResult, DraDeviceName};
        let gpu = |index: u32, uuid: &str| GpuSnapshot {
            index,
            identity: GpuIdentity { uuid: uuid.into(), ..GpuIdentity::default() },
            state: snapshot::GpuState::Ok,
            ..GpuSnapshot::default()
        };
        let mut s = up(gpu(0, "GPU-a"));
        s.gpus.push(gpu(1, "GPU-b"));
        assert!(observe(&s).gpus.iter().all(|g| g.dra_devices.is_empty()), "no attribution, no DRA devices");
        let name =
            |device: &str| DraDeviceName { driver: "gpu.nvidia.com".into(), pool: "n1".into(), device: device.into() };
        let mut attribution = AttributionResult::default();
        attribution.dra_devices.insert("GPU-a".into(), vec![name("gpu-0"), name("gpu-0-mig-1")]);
        s.attribution = Some(attribution);
        let o = observe(&s);
        let want =
            |device: &str| DraDevice { driver: "gpu.nvidia.com".into(), pool: "n1".into(), device: device.into() };
        assert_eq!(o.gpus[0].dra_devices, [want("gpu-0"), want("gpu-0-mig-1")]);
        assert!(o.gpus[1].dra_devices.is_empty(), "a GPU no slice names is handed out by a device plugin");
    }

    #[test]
    fn remapped_rows_slowdown_and_the_other_states_are_copied() {
        let readings = snapshot::GpuReadings {
            remapped_rows: Some(snapshot::RemappedRows {
                correctable: 3,
                uncorrectable: 1,
                pending: false,
                failed: true,
            }),
            temperature_slowdown_celsius: Some(87),
            ..snapshot::GpuReadings::default()
        };
        let g = GpuSnapshot { state: snapshot::GpuState::Ok, readings: Some(readings), ..GpuSnapshot::default() };
        let mut s = up(g);
        s.generation = 42;
        let o = observe(&s);
        assert_eq!(o.generation, 42);
        assert_eq!(o.gpus[0].remapped_rows, Some(RemappedRows { failed: true, pending: false }));
        assert_eq!(o.gpus[0].temperature_slowdown_celsius, Some(87));
        assert_eq!(
            (o.gpus[0].ecc, o.gpus[0].retired_pages, o.gpus[0].recovery),
            (None, None, None),
            "absent, not zero"
        );
        assert_eq!(Source::observe(&s), o, "the loop's source is this mapping");

        let failed =
            GpuSnapshot { state: snapshot::GpuState::Failed { error: "Unknown".into() }, ..GpuSnapshot::default() };
        assert_eq!(observe(&up(failed)).gpus[0].state, GpuState::Failed { error: "Unknown".into() });
        assert_eq!(observe(&up(GpuSnapshot::default())).gpus[0].state, GpuState::Unknown);
    }

    #[test]
    fn a_driver_that_is_not_loaded_is_a_failure() {
        let s = Snapshot {
            nvml: NvmlStatus::Down { error: NvmlDownReason::DriverNotLoaded, message: "no driver".into() },
            ..Snapshot::default()
        };
        assert!(
            matches!(observe(&s).nvml, Nvml::Failed(why) if why.contains("driver_not_loaded") && why.contains("no driver"))
        );
    }
}
