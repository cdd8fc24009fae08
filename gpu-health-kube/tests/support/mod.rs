//! The health loop in the test's own process, fed observations the test publishes and
//! talking to the workspace's in-test API server (`test_support::apiserver`): shared by
//! this crate's loop tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use gpu_health::observation::{DraDevice, Ecc, GpuReadings, GpuState, Nvml, Observation};
use gpu_health::view::HealthView;
use gpu_health_kube::config::{HealthArgs, HealthSettings};
use gpu_health_kube::{HealthHandle, Source, start_with_config};
use tokio::sync::watch;

pub const NS: &str = "gpu-telemetry";

/// One collection cycle as the loop sees it.
#[derive(Debug, Clone)]
pub struct Cycle(pub Observation);

impl Source for Cycle {
    fn observe(&self) -> Observation {
        self.0.clone()
    }
}

/// The loop's flags, as the exporter flattens them into its own.
#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    health: HealthArgs,
}

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
    let mut s = Flags::try_parse_from(argv).unwrap().health.settings().unwrap();
    s.check_interval = Duration::from_millis(300);
    s
}

pub fn config(url: &str) -> kube::Config {
    kube::Config::new(url.parse().unwrap())
}

/// A GPU that answered: 50 °C, no ECC errors.
fn healthy_gpu(index: u32, uuid: String) -> GpuReadings {
    GpuReadings {
        index,
        uuid,
        model: "NVIDIA H100 80GB HBM3".into(),
        state: GpuState::Ok,
        temperature_celsius: Some(50),
        ecc: Some(Ecc::default()),
        ..GpuReadings::default()
    }
}

/// A GPU that did not answer keeps no readings, as the exporter observes it.
fn settle(g: &mut GpuReadings) {
    if g.state != GpuState::Ok {
        let keep = GpuReadings {
            index: g.index,
            uuid: std::mem::take(&mut g.uuid),
            model: std::mem::take(&mut g.model),
            state: g.state.clone(),
            xid_counts: std::mem::take(&mut g.xid_counts),
            dra_devices: std::mem::take(&mut g.dra_devices),
            ..GpuReadings::default()
        };
        *g = keep;
    }
}

/// A cycle of NVML driver 550.90.07 that read the GPUs (`generation` > 0).
fn cycle(generation: u64, gpus: Vec<GpuReadings>) -> Arc<Cycle> {
    let nvml = Nvml::Up { driver_version: "550.90.07".into(), read: generation > 0 };
    Arc::new(Cycle(Observation { generation, nvml, gpus }))
}

/// One GPU (`GPU-0000`); `f` shapes it.
pub fn snapshot(generation: u64, f: impl FnOnce(&mut GpuReadings)) -> Arc<Cycle> {
    let mut gpu = healthy_gpu(0, "GPU-0000".into());
    f(&mut gpu);
    settle(&mut gpu);
    cycle(generation, vec![gpu])
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
pub fn node_snapshot(node: &str, generation: u64, n: u32, dra: bool, f: impl Fn(u32, &mut GpuReadings)) -> Arc<Cycle> {
    let gpus = (0..n)
        .map(|i| {
            let mut g = healthy_gpu(i, uuid(node, i));
            if dra {
                g.dra_devices = vec![DraDevice { driver: DRIVER.into(), pool: node.into(), device: device(i) }];
            }
            f(i, &mut g);
            settle(&mut g);
            g
        })
        .collect();
    cycle(generation, gpus)
}

/// XID 79 (fallen off the bus), seen once.
pub fn xid79(g: &mut GpuReadings) {
    g.xid_counts.insert(79, 1);
}

/// XID `code`, seen once.
pub fn xid(code: u64) -> impl Fn(&mut GpuReadings) {
    move |g| {
        g.xid_counts.insert(code, 1);
    }
}

pub fn lost(g: &mut GpuReadings) {
    g.state = GpuState::Lost;
}

/// `n` uncorrected ECC errors.
pub fn uncorrected(n: u64) -> impl Fn(&mut GpuReadings) {
    move |g| {
        if g.ecc.is_some() {
            g.ecc = Some(Ecc { uncorrected: n, ..Ecc::default() });
        }
    }
}

/// A running loop on its own runtime.
pub struct Loop {
    _rt: tokio::runtime::Runtime,
    handle: Option<HealthHandle>,
    publish: watch::Sender<Arc<Cycle>>,
}

impl Loop {
    pub fn start(node: &str, settings: HealthSettings, url: &str, first: Arc<Cycle>) -> Loop {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (publish, snapshots) = watch::channel(first);
        let handle = rt.block_on(start_with_config(settings, node.into(), snapshots, Some(config(url))));
        Loop { _rt: rt, handle: Some(handle), publish }
    }

    pub fn publish(&self, s: Arc<Cycle>) {
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
