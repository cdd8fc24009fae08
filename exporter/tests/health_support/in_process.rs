//! The health loop in the test's own process, fed snapshots the test publishes and
//! talking to the in-test API server: shared by `health_api.rs` and `health_load.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser as _;
use gpu_exporter::config::Args;
use gpu_exporter::health::config::HealthSettings;
use gpu_exporter::health::metrics::HealthView;
use gpu_exporter::health::{HealthHandle, start_with_config};
use gpu_exporter::snapshot::attribution::{AttributionResult, DraDeviceName};
use gpu_exporter::snapshot::{
    DriverInfo, EccCounts, GpuIdentity, GpuReadings, GpuSnapshot, GpuState, NvmlStatus, Snapshot, XidRecord,
};
use tokio::sync::watch;

pub const NS: &str = "gpu-telemetry";

/// Settings for fast tests: 2 checks to debounce and to recover, no minimum
/// quarantine, 4 attempts per request, the breaker in `gpu-telemetry`, a check every
/// 300 ms; `extra` flags on top.
pub fn settings(extra: &[&str]) -> HealthSettings {
    let mut argv = vec![
        "gpu-exporter",
        "--health.debounce-checks",
        "2",
        "--health.recovery-checks",
        "2",
        "--health.min-quarantine",
        "0",
        "--health.api-attempts",
        "4",
        "--health.namespace",
        NS,
    ];
    argv.extend_from_slice(extra);
    let mut s = Args::try_parse_from(argv).unwrap().health.settings().unwrap();
    s.check_interval = Duration::from_millis(300);
    s
}

pub fn config(url: &str) -> kube::Config {
    kube::Config::new(url.parse().unwrap())
}

/// One GPU; `f` shapes it.
pub fn snapshot(generation: u64, f: impl FnOnce(&mut GpuSnapshot)) -> Arc<Snapshot> {
    let mut gpu = GpuSnapshot {
        index: 0,
        identity: GpuIdentity {
            uuid: "GPU-0000".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            ..GpuIdentity::default()
        },
        state: GpuState::Ok,
        readings: Some(GpuReadings {
            temperature_celsius: Some(50),
            ecc: Some(EccCounts::default()),
            ..GpuReadings::default()
        }),
        ..GpuSnapshot::default()
    };
    f(&mut gpu);
    if gpu.state != GpuState::Ok {
        gpu.readings = None;
    }
    let mut s = Snapshot {
        generation,
        nvml: NvmlStatus::Up(DriverInfo { driver_version: "550.90.07".into(), cuda_version: "12.4".into() }),
        gpus: vec![gpu],
        ..Snapshot::default()
    };
    s.stats.cycles_total = generation;
    Arc::new(s)
}

/// The DRA driver of the tests' DRA nodes (its pool is the node's name).
pub const DRIVER: &str = "gpu.nvidia.com";

/// GPU `i`'s UUID on `node`.
pub fn uuid(node: &str, i: u32) -> String {
    format!("GPU-{node}-{i}")
}

/// GPU `i`'s DRA device name.
pub fn device(i: u32) -> String {
    format!("gpu-{i}")
}

/// `n` GPUs of `node`; on a DRA node each is published as device `gpu-<i>` in the
/// node's pool (the whole GPU; no MIG); `f` shapes GPU `i`.
pub fn node_snapshot(
    node: &str,
    generation: u64,
    n: u32,
    dra: bool,
    f: impl Fn(u32, &mut GpuSnapshot),
) -> Arc<Snapshot> {
    let one = snapshot(generation, |_| {});
    let template = one.gpus[0].clone();
    let mut s = (*one).clone();
    s.gpus = (0..n)
        .map(|i| {
            let mut g = template.clone();
            g.index = i;
            g.identity.uuid = uuid(node, i);
            f(i, &mut g);
            if g.state != GpuState::Ok {
                g.readings = None;
            }
            g
        })
        .collect();
    if dra {
        let mut attribution = AttributionResult::default();
        for g in &s.gpus {
            let name = DraDeviceName { driver: DRIVER.into(), pool: node.into(), device: device(g.index) };
            attribution.dra_devices.insert(g.identity.uuid.clone(), vec![name]);
        }
        s.attribution = Some(attribution);
    }
    Arc::new(s)
}

pub fn xid79(g: &mut GpuSnapshot) {
    g.xids.insert(79, XidRecord { count: 1, last_seen: SystemTime::now() });
}

pub fn lost(g: &mut GpuSnapshot) {
    g.state = GpuState::Lost { since: SystemTime::now() };
}

/// A running loop on its own runtime.
pub struct Loop {
    _rt: tokio::runtime::Runtime,
    handle: Option<HealthHandle>,
    publish: watch::Sender<Arc<Snapshot>>,
}

impl Loop {
    pub fn start(node: &str, settings: HealthSettings, url: &str, first: Arc<Snapshot>) -> Loop {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (publish, snapshots) = watch::channel(first);
        let handle = rt.block_on(start_with_config(settings, node.into(), snapshots, Some(config(url))));
        Loop { _rt: rt, handle: Some(handle), publish }
    }

    pub fn publish(&self, s: Arc<Snapshot>) {
        self.publish.send_replace(s);
    }

    pub fn view(&self) -> HealthView {
        self.handle.as_ref().unwrap().metrics.view()
    }

    pub fn wait(&self, what: &str, timeout: Duration, check: impl Fn(&HealthView) -> bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if check(&self.view()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("timed out waiting for {what}; metrics: {:?}", self.view());
    }

    pub fn checks(&self) -> u64 {
        self.view().checks.values().sum()
    }

    /// Waits for `n` more checks.
    pub fn wait_checks(&self, n: u64) {
        let start = self.checks();
        self.wait("more checks", Duration::from_secs(10 + n), |v| v.checks.values().sum::<u64>() >= start + n);
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}
