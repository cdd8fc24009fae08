//! The simulated kubelet serves the seed scenario over a real unix socket, and its
//! socket can be dropped and restored.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use fake_kubelet::client::PodResourcesClient;
use fake_kubelet::proto::pod_resources_lister_client::PodResourcesListerClient;
use fake_kubelet::proto::{AllocatableResourcesRequest, ListPodResourcesRequest};
use fake_kubelet::{KubeletServer, lister};
use fake_nvml::scenario::Scenario;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

fn seed() -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fake-nvml/scenarios/seed-mixed-node.yaml");
    Scenario::load(&path).unwrap()
}

async fn client(socket: PathBuf) -> Result<PodResourcesListerClient<Channel>, tonic::transport::Error> {
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { tokio::net::UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await?;
    Ok(PodResourcesListerClient::new(channel))
}

#[test]
fn list_answers_the_seed_pods_with_device_plugin_ids() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = seed();
    let server = KubeletServer::start(dir.path().join("kubelet.sock"), lister(&scenario, "sim-node")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (list, allocatable) = rt.block_on(async {
        let mut c = client(server.socket().to_path_buf()).await.unwrap();
        let list = c.list(ListPodResourcesRequest {}).await.unwrap().into_inner();
        let allocatable = c.get_allocatable_resources(AllocatableResourcesRequest {}).await.unwrap().into_inner();
        (list, allocatable)
    });
    assert_eq!(list.pod_resources.len(), scenario.pods.len());
    let llm = list.pod_resources.iter().find(|p| p.name == "llm-inference-70b").unwrap();
    assert_eq!(llm.namespace, "ai-inference");
    let devices = &llm.containers[0].devices[0];
    assert_eq!(devices.resource_name, "nvidia.com/mig-3g.40gb");
    assert_eq!(devices.device_ids, ["MIG-a0000000-0000-4000-8000-000000000001"]);
    let replica = list.pod_resources.iter().find(|p| p.name == "inference-pool-7d9f8b6c5-bw7rx").unwrap();
    assert_eq!(replica.containers[0].devices[0].device_ids, ["GPU-a0000000-0000-4000-8000-000000000200::3"]);
    // Allocatable: 2 + 7 MIG instances, and 4 replicas on each time-sliced GPU.
    let count = |resource: &str| {
        allocatable.devices.iter().filter(|d| d.resource_name == resource).map(|d| d.device_ids.len()).sum::<usize>()
    };
    assert_eq!(count("nvidia.com/mig-3g.40gb"), 2);
    assert_eq!(count("nvidia.com/mig-1g.10gb"), 7);
    assert_eq!(count("nvidia.com/gpu"), 8);
    assert_eq!(server.lister().list_calls(), 1);
    // As the kubelet lists them for NVIDIA's plugin: one device per entry, with the NUMA
    // node of its GPU (the seed's four GPUs: 0 and 1 on node 0, 2 and 3 on node 1).
    let entries = list.pod_resources.iter().flat_map(|p| &p.containers).flat_map(|c| &c.devices);
    for entry in entries.chain(&allocatable.devices) {
        assert_eq!(entry.device_ids.len(), 1, "{entry:?}");
        let numa: Vec<i64> = entry.topology.iter().flat_map(|t| &t.nodes).map(|n| n.id).collect();
        let on_second = ["GPU-a0000000-0000-4000-8000-000000000200", "GPU-a0000000-0000-4000-8000-000000000300"]
            .iter()
            .any(|gpu| entry.device_ids[0].starts_with(gpu));
        assert_eq!(numa, [i64::from(on_second)], "{entry:?}");
    }
}

#[test]
fn get_answers_one_pod_as_list_does_and_an_unknown_pod_as_the_kubelet_does() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = seed();
    let server = KubeletServer::start(dir.path().join("kubelet.sock"), lister(&scenario, "sim-node")).unwrap();
    let mut c = PodResourcesClient::connect(server.socket()).unwrap();
    let list = c.list().unwrap();
    assert_eq!(list.len(), scenario.pods.len());
    for pod in &list {
        assert_eq!(c.get(&pod.namespace, &pod.name).unwrap().as_ref(), Some(pod));
    }
    let refused = c.get("ai-inference", "gone").unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unknown);
    assert_eq!(refused.message(), "pod gone in namespace ai-inference not found");
    let missing = PodResourcesClient::connect(&dir.path().join("nothing.sock")).unwrap_err().to_string();
    assert!(missing.contains("nothing.sock: cannot connect"), "{missing}");
}

#[test]
fn the_socket_can_be_dropped_and_restored() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = KubeletServer::start(dir.path().join("kubelet.sock"), lister(&seed(), "sim-node")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let socket = server.socket().to_path_buf();
    let mut held = rt.block_on(client(socket.clone())).unwrap();
    assert!(rt.block_on(held.list(ListPodResourcesRequest {})).is_ok());
    server.drop_socket();
    assert!(!socket.exists());
    assert!(!server.serving());
    assert!(rt.block_on(held.list(ListPodResourcesRequest {})).is_err(), "the open connection is cut");
    assert!(rt.block_on(client(socket.clone())).is_err(), "nothing to connect to");
    server.restore_socket().unwrap();
    assert!(server.serving());
    let mut fresh = rt.block_on(client(socket)).unwrap();
    let list = rt.block_on(fresh.list(ListPodResourcesRequest {})).unwrap().into_inner();
    assert_eq!(list.pod_resources.len(), 12);
}

#[test]
fn the_listing_can_change_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = KubeletServer::start(dir.path().join("kubelet.sock"), lister(&seed(), "sim-node")).unwrap();
    server.lister().set_listing(Vec::new());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let list = rt.block_on(async {
        client(server.socket().to_path_buf())
            .await
            .unwrap()
            .list(ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner()
    });
    assert!(list.pod_resources.is_empty());
}
