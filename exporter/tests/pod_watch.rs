//! The node-scoped pod watch against an in-test Kubernetes API server that speaks the
//! real wire protocol on loopback: list with `fieldSelector` and `resourceVersion`, watch
//! streams of JSON lines, bookmarks, and `410 Gone` for an expired resourceVersion (after
//! which kube-runtime relists). No API server can run here; this one checks every
//! request's path and query as it comes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_exporter::attribution::kubelet::KubeletCache;
use gpu_exporter::attribution::pod_resources::Allocation;
use gpu_exporter::attribution::pod_watch::{self, PodWatch};
use gpu_exporter::attribution::{Attributor, ContainerRef};
use gpu_exporter::snapshot::{GpuIdentity, GpuReadings, GpuSnapshot, GpuState, MemoryReading};
use test_support::apiserver::{ADMIN_TOKEN, ApiServer, NODE, Recorded, node_pod};

/// A client of the server at `url`, with the token of the user allowed everything.
fn client(url: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.auth_info.token = Some(ADMIN_TOKEN.to_string().into());
    kube::Client::try_from(config).unwrap()
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn gpu(index: u32) -> GpuSnapshot {
    GpuSnapshot {
        index,
        identity: GpuIdentity { uuid: format!("GPU-{index}"), ..GpuIdentity::default() },
        state: GpuState::Ok,
        readings: Some(GpuReadings {
            utilization_percent: Some(50),
            memory: Some(MemoryReading { total_bytes: 100, used_bytes: 10, reserved_bytes: 0 }),
            ..GpuReadings::default()
        }),
        ..GpuSnapshot::default()
    }
}

fn allocation(pod: &str, device: &str) -> Allocation {
    Allocation::plugin("ai", pod, "main", "nvidia.com/gpu", device)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_follows_the_node_s_pods_and_ended_pods_leave_at_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = ApiServer::new();
    api.add_pod(node_pod("train-a", "Running"));
    api.add_pod(node_pod("train-b", "Running"));
    // A pod of another node: the node-scoped list and watch never show it.
    let mut elsewhere = node_pod("elsewhere", "Running");
    elsewhere.spec.as_mut().unwrap().node_name = Some("other-node".into());
    api.add_pod(elsewhere);
    let url = format!("http://{}", api.serve().await);
    let watch = Arc::new(PodWatch::default());
    tokio::spawn(pod_watch::run(client(&url), NODE.into(), watch.clone()));
    eventually("the first list is in", || watch.health().up && watch.directory().len() == 2).await;

    // The kubelet keeps listing both pods throughout.
    let kubelet = Arc::new(KubeletCache::new(Duration::from_secs(10)));
    kubelet.record_success(vec![allocation("train-a", "GPU-0"), allocation("train-b", "GPU-1")]);
    let attributor = Attributor::new("/nonexistent-procfs", None).with_kubelet(kubelet).with_watch(watch.clone());
    let gpus = [gpu(0), gpu(1)];
    let owner = |pod: &str| ContainerRef { namespace: "ai".into(), pod: pod.into(), container: "main".into() };
    let result = attributor.attach(&gpus);
    assert_eq!(result.owners.get("GPU-0"), Some(&owner("train-a")));
    assert_eq!(result.owners.get("GPU-1"), Some(&owner("train-b")));
    assert_eq!(result.pod_watch.as_ref().map(|w| (w.up, w.pods)), Some((true, 2)));

    // Succeeded: gone from the next cycle although the kubelet still lists it.
    api.add_pod(node_pod("train-a", "Succeeded"));
    eventually("train-a has ended", || watch.directory().ended("ai", "train-a")).await;
    let result = attributor.attach(&gpus);
    assert!(!result.owners.contains_key("GPU-0"), "{:?}", result.owners);
    assert!(result.usage.iter().all(|u| u.owner.pod != "train-a"));

    // Deleted: the same.
    api.delete_pod("ai", "train-b");
    eventually("train-b is gone", || watch.directory().by_uid("uid-train-b").is_none()).await;
    assert!(attributor.attach(&gpus).owners.is_empty());

    // History compacted while a pod came: 410 on the next watch, then a relist finds it.
    api.compact_and_add_silently(node_pod("train-c", "Running"));
    eventually("the relist found train-c", || watch.directory().by_uid("uid-train-c").is_some()).await;
    assert!(watch.health().up);
    let d = watch.directory();
    assert!(d.authoritative);
    assert!(d.ended("ai", "train-a") && d.ended("ai", "train-b") && !d.ended("ai", "train-c"));
    assert!(d.by_uid("uid-elsewhere").is_none(), "another node's pod");
    assert_eq!(watch.health().pods, 2, "train-a (ended) and train-c; never the other node's pod");
    assert_eq!(d.by_uid("uid-train-c").and_then(|p| p.container_by_id(&format!("{:0>64}", 7))), Some("main"));

    // Every request was node-scoped; watches resumed from what the list or a bookmark said.
    let seen = api.requests();
    let lists: Vec<&Recorded> = seen.iter().filter(|s| s.param("watch").is_none()).collect();
    let watches: Vec<&Recorded> = seen.iter().filter(|s| s.param("watch").is_some()).collect();
    assert!(lists.len() >= 2, "initial list and the relist after 410: {seen:?}");
    assert!(!watches.is_empty());
    for s in &seen {
        assert_eq!((s.method.as_str(), s.path.as_str(), s.status), ("GET", "/api/v1/pods", 200), "{s:?}");
        assert_eq!(s.param("fieldSelector"), Some(format!("spec.nodeName={NODE}")), "{s:?}");
    }
    assert_eq!(watches[0].param("resourceVersion").as_deref(), Some("3"), "from the first list");
    assert!(watches.iter().all(|w| w.param("allowWatchBookmarks").as_deref() == Some("true")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_degrades_without_a_crash() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A port that was just free: nothing listens there.
    let port = test_support::free_port();
    let watch = Arc::new(PodWatch::default());
    let task = tokio::spawn(pod_watch::run(client(&format!("http://127.0.0.1:{port}")), NODE.into(), watch.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!task.is_finished(), "the watch keeps retrying");
    assert!(!watch.health().up);
    assert!(!watch.directory().authoritative, "an unsynced watch says nothing about ended pods");
    // Exclusive attribution still works from the kubelet alone.
    let kubelet = Arc::new(KubeletCache::new(Duration::from_secs(10)));
    kubelet.record_success(vec![allocation("train-a", "GPU-0")]);
    let attributor = Attributor::new("/nonexistent-procfs", None).with_kubelet(kubelet).with_watch(watch);
    let result = attributor.attach(&[gpu(0)]);
    assert_eq!(result.owners.get("GPU-0").map(|o| o.pod.as_str()), Some("train-a"));
    assert_eq!(result.pod_watch.map(|w| w.up), Some(false));
    task.abort();
}
