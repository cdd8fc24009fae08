//! Attribution benchmark on the busy MIG node: 8 H100, each cut into 7x
//! `1g.10gb` (56 instances), 100 pods and 400 GPU processes. Prints figures; asserts
//! nothing.
//!
//! Run: `cargo bench -p gpu-exporter --bench attribution` (release build).
//! Measures:
//! - the attribution stage per collection cycle ([`Attributor::attach`]: `/proc` reads
//!   of 400 PIDs against a procfs tree written in the cgroup v2 / systemd / containerd
//!   flavour, and the join), cold (empty PID cache) and warm;
//! - a cold render of the exposition with and without the attribution families, and the
//!   series attribution adds.
//! - the cold render of the attributed snapshot by each encoding (ours,
//!   prometheus-client), both formats, side by side, and the snapshot copy the
//!   prometheus-client collector owns (docs/design.md).
//!
//! Layout: instance `i % 56` of pod `i`, as replica `i / 56` (MIG time-slicing), so 44
//! instances are shared by two pods and 12 are held by one; 4 processes per pod.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_exporter::attribution::Attributor;
use gpu_exporter::attribution::directory::{ContainerMeta, PodDirectory, PodMeta, PodPhase};
use gpu_exporter::attribution::kubelet::KubeletCache;
use gpu_exporter::attribution::pod_resources::Allocation;
use gpu_exporter::exposition::Format;
use gpu_exporter::render::{RenderContext, render};
use gpu_exporter::snapshot::{
    GpuIdentity, GpuReadings, GpuSnapshot, GpuState, MemoryReading, MigInstance, MigState, ProcessUsage, Snapshot,
};

const GPUS: u32 = 8;
const INSTANCES_PER_GPU: u32 = 7;
const PODS: u32 = 100;
const PROCESSES_PER_POD: u32 = 4;
const MIB: u64 = 1 << 20;

fn uid(pod: u32) -> String {
    format!("{pod:08x}-0000-4000-8000-{pod:012x}")
}

fn container_id(pod: u32) -> String {
    format!("{pod:064x}")
}

fn instance_uuid(n: u32) -> String {
    format!("MIG-{n:08x}-0000-4000-8000-000000000000")
}

fn pid(pod: u32, k: u32) -> u32 {
    100_000 + pod * 10 + k
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn timings(runs: usize, mut f: impl FnMut()) -> Vec<Duration> {
    let mut out: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    out.sort();
    out
}

fn main() {
    let instances = GPUS * INSTANCES_PER_GPU;
    let procfs = tempfile::tempdir().unwrap();
    let mut processes: BTreeMap<u32, Vec<ProcessUsage>> = BTreeMap::new();
    let mut allocations = Vec::new();
    let mut pods = Vec::new();
    for pod in 0..PODS {
        let instance = pod % instances;
        let replica = format!("{}::{}", instance_uuid(instance), pod / instances);
        allocations.push(Allocation::plugin(
            "inference",
            &format!("pool-{pod}"),
            "server",
            "nvidia.com/mig-1g.10gb",
            &replica,
        ));
        pods.push(PodMeta {
            uid: uid(pod),
            namespace: "inference".into(),
            name: format!("pool-{pod}"),
            phase: Some(PodPhase::Running),
            containers: vec![ContainerMeta { name: "server".into(), id: Some(container_id(pod)) }],
            labels: [("app".to_string(), "pool".to_string())].into_iter().collect(),
        });
        for k in 0..PROCESSES_PER_POD {
            let p = pid(pod, k);
            let dir = procfs.path().join(p.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let cgroup = format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{}.scope\n",
                uid(pod).replace('-', "_"),
                container_id(pod)
            );
            std::fs::write(dir.join("cgroup"), cgroup).unwrap();
            std::fs::write(
                dir.join("stat"),
                format!("{p} (python3) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {p} 0 0\n"),
            )
            .unwrap();
            processes.entry(instance).or_default().push(ProcessUsage {
                pid: p,
                used_memory_bytes: Some(500 * MIB),
                sm_utilization_percent: None,
            });
        }
    }
    let gpus: Vec<GpuSnapshot> = (0..GPUS)
        .map(|g| GpuSnapshot {
            index: g,
            identity: GpuIdentity {
                uuid: format!("GPU-{g:08x}"),
                model: "NVIDIA H100 80GB HBM3".into(),
                ..Default::default()
            },
            state: GpuState::Ok,
            readings: Some(GpuReadings {
                memory: Some(MemoryReading {
                    total_bytes: 80 * 1024 * MIB,
                    used_bytes: 40 * 1024 * MIB,
                    reserved_bytes: 0,
                }),
                ..GpuReadings::default()
            }),
            mig: Some(MigState {
                instances: (0..INSTANCES_PER_GPU)
                    .map(|i| {
                        let n = g * INSTANCES_PER_GPU + i;
                        MigInstance {
                            uuid: instance_uuid(n),
                            profile: "1g.10gb".into(),
                            gpu_instance_id: 7 + i,
                            compute_instance_id: 0,
                            compute_slices: 1,
                            memory: Some(MemoryReading {
                                total_bytes: 10 * 1024 * MIB,
                                used_bytes: 4 * 1024 * MIB,
                                reserved_bytes: 0,
                            }),
                            sm_activity_percent: Some(40.0),
                            processes: processes.remove(&n).unwrap_or_default(),
                            ..MigInstance::default()
                        }
                    })
                    .collect(),
                total_compute_slices: 7,
                ..MigState::default()
            }),
            ..GpuSnapshot::default()
        })
        .collect();

    let kubelet = Arc::new(KubeletCache::new(Duration::from_secs(10)));
    kubelet.record_success(allocations);
    let directory = Arc::new(Mutex::new(PodDirectory::new(pods, false)));
    let attributor = Attributor::new(procfs.path(), Some(regex::Regex::new("app").unwrap()))
        .with_kubelet(kubelet)
        .with_pod_logs(directory);

    let cold_start = Instant::now();
    let result = attributor.attach(&gpus);
    let cold = cold_start.elapsed();
    assert_eq!(result.usage.len(), PODS as usize, "every pod has its figures");
    let warm = timings(2000, || {
        std::hint::black_box(attributor.attach(&gpus));
    });

    let ctx = RenderContext {
        node: "gpu-node-1".into(),
        version: "0".into(),
        revision: "bench".into(),
        ..Default::default()
    };
    let plain = Snapshot { gpus: gpus.clone(), ..Snapshot::default() };
    let attributed = Snapshot { gpus, attribution: Some(result), ..Snapshot::default() };
    let series = |s: &Snapshot| render(s, &ctx, Format::PrometheusText).lines().filter(|l| !l.starts_with('#')).count();
    let render_plain = timings(2000, || {
        std::hint::black_box(render(&plain, &ctx, Format::OpenMetrics));
    });
    let render_attributed = timings(2000, || {
        std::hint::black_box(render(&attributed, &ctx, Format::OpenMetrics));
    });

    println!(
        "attribution on {GPUS} GPUs x {INSTANCES_PER_GPU} MIG instances, {PODS} pods, {} processes",
        PODS * PROCESSES_PER_POD
    );
    println!("| figure | value |");
    println!("|---|---|");
    println!("| attribution per cycle, cold (empty PID cache) | {} |", micros(cold));
    println!(
        "| attribution per cycle, warm (p50 / p99) | {} / {} |",
        micros(percentile(&warm, 0.5)),
        micros(percentile(&warm, 0.99))
    );
    println!(
        "| cold render without attribution (p50 / p99) | {} / {} |",
        micros(percentile(&render_plain, 0.5)),
        micros(percentile(&render_plain, 0.99))
    );
    println!(
        "| cold render with attribution (p50 / p99) | {} / {} |",
        micros(percentile(&render_attributed, 0.5)),
        micros(percentile(&render_attributed, 0.99))
    );
    println!("| series added by attribution | {} |", series(&attributed) - series(&plain));
    support::encodings::compare("busy node (attribution, MIG)", &attributed, &ctx);
}
