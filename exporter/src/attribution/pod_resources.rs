//! The kubelet pod-resources v1 client: `List` over gRPC on the kubelet's unix socket.
//!
//! One call returns every container's device allocations. Only GPUs are kept:
//! - from device plugins, the resources `nvidia.com/gpu`, every `nvidia.com/mig-<profile>`
//!   (the device plugin's mixed MIG strategy) and any extra names given with
//!   `--kubelet.resource-names` (renamed or shared resources such as
//!   `nvidia.com/gpu.shared`), with device ids as the plugin reported them: a GPU UUID, a
//!   MIG UUID or a replica `<uuid>::<n>`;
//! - from Dynamic Resource Allocation (`dynamic_resources`, GA in Kubernetes 1.36), the
//!   devices of the GPU drivers named by `--kubelet.dra-drivers` (`gpu.nvidia.com`), by
//!   claim and by the driver, pool and device names; which GPU such a device is, only
//!   the node's ResourceSlices say (see `resource_slices`). Other drivers' devices (NICs,
//!   compute domains) are not GPUs and are skipped.
//!
//! The connection is made on first use and dropped after a failure, so a kubelet that
//! restarts (and recreates its socket) is reconnected on the next refresh.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use super::proto::pod_resources_lister_client::PodResourcesListerClient;
use super::proto::{ListPodResourcesRequest, ListPodResourcesResponse};
use crate::snapshot::attribution::DraDeviceName;

/// The kubelet's limit on pod-resources messages (`podresources.DefaultMaxMsgSize`).
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Why a refresh failed.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("{0}: no socket (is the kubelet running, and its pod-resources directory mounted?)")]
    SocketMissing(PathBuf),
    #[error("{path}: cannot connect: {message}")]
    Connect { path: PathBuf, message: String },
    #[error("List did not answer within {0:?}")]
    Timeout(Duration),
    #[error("List failed: {0}")]
    Rpc(#[from] tonic::Status),
}

impl PodResourcesError {
    /// A few stable words for the error counter's `reason` label.
    pub fn reason(&self) -> &'static str {
        match self {
            PodResourcesError::SocketMissing(_) => "socket_missing",
            PodResourcesError::Connect { .. } => "connect",
            PodResourcesError::Timeout(_) => "timeout",
            PodResourcesError::Rpc(_) => "rpc",
        }
    }
}

pub type Result<T, E = PodResourcesError> = std::result::Result<T, E>;

/// One device allocated to one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub device: AllocatedDevice,
}

/// How the kubelet names an allocated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocatedDevice {
    /// A device plugin's: the resource and the id the plugin reported, `GPU-...`,
    /// `MIG-...`, or `<uuid>::<n>`.
    Plugin { resource: String, device_id: String },
    /// A DRA driver's, held through the ResourceClaim `claim` of the pod's namespace.
    Claim { claim: String, device: DraDeviceName },
}

impl Allocation {
    /// A device plugin allocation.
    pub fn plugin(namespace: &str, pod: &str, container: &str, resource: &str, device_id: &str) -> Self {
        Allocation {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            device: AllocatedDevice::Plugin { resource: resource.to_string(), device_id: device_id.to_string() },
        }
    }

    /// The device plugin's id, for a device plugin allocation.
    pub fn device_id(&self) -> Option<&str> {
        match &self.device {
            AllocatedDevice::Plugin { device_id, .. } => Some(device_id),
            AllocatedDevice::Claim { .. } => None,
        }
    }
}

/// Which allocations are GPUs.
#[derive(Debug, Clone)]
pub struct ResourceFilter {
    /// Device plugin resource names besides `nvidia.com/gpu` and `nvidia.com/mig-*`.
    pub extra: Vec<String>,
    /// DRA drivers whose devices are GPUs.
    pub dra_drivers: Vec<String>,
}

impl Default for ResourceFilter {
    fn default() -> Self {
        ResourceFilter { extra: Vec::new(), dra_drivers: vec![DEFAULT_DRA_DRIVER.to_string()] }
    }
}

/// NVIDIA's DRA driver for GPUs and MIG devices.
pub const DEFAULT_DRA_DRIVER: &str = "gpu.nvidia.com";

impl ResourceFilter {
    pub fn wants(&self, resource: &str) -> bool {
        resource == "nvidia.com/gpu"
            || resource.starts_with("nvidia.com/mig-")
            || self.extra.iter().any(|r| r == resource)
    }

    pub fn wants_driver(&self, driver: &str) -> bool {
        self.dra_drivers.iter().any(|d| d == driver)
    }
}

/// A client of one socket.
#[derive(Debug)]
pub struct PodResourcesClient {
    socket: PathBuf,
    timeout: Duration,
    filter: ResourceFilter,
    client: Option<PodResourcesListerClient<Channel>>,
}

impl PodResourcesClient {
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration, filter: ResourceFilter) -> Self {
        PodResourcesClient { socket: socket.into(), timeout, filter, client: None }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Calls `List` and keeps the GPU allocations.
    pub async fn list(&mut self) -> Result<Vec<Allocation>> {
        let outcome = tokio::time::timeout(self.timeout, self.list_inner()).await;
        let result = match outcome {
            Ok(r) => r,
            Err(_) => Err(PodResourcesError::Timeout(self.timeout)),
        };
        if result.is_err() {
            // Reconnect next time: the kubelet may have restarted behind the socket.
            self.client = None;
        }
        result
    }

    async fn list_inner(&mut self) -> Result<Vec<Allocation>> {
        let client = match &mut self.client {
            Some(c) => c,
            None => self.client.insert(connect(&self.socket).await?),
        };
        let response = client.list(ListPodResourcesRequest {}).await?.into_inner();
        Ok(gpu_allocations(response, &self.filter))
    }
}

/// The GPU allocations of a `List` answer.
pub fn gpu_allocations(response: ListPodResourcesResponse, filter: &ResourceFilter) -> Vec<Allocation> {
    let mut out = Vec::new();
    for pod in response.pod_resources {
        for container in pod.containers {
            let at = |device: AllocatedDevice| Allocation {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: container.name.clone(),
                device,
            };
            for devices in container.devices.iter().filter(|d| filter.wants(&d.resource_name)) {
                for device_id in &devices.device_ids {
                    let resource = devices.resource_name.clone();
                    out.push(at(AllocatedDevice::Plugin { resource, device_id: device_id.clone() }));
                }
            }
            for claim in &container.dynamic_resources {
                for resource in claim.claim_resources.iter().filter(|r| filter.wants_driver(&r.driver_name)) {
                    let device = DraDeviceName {
                        driver: resource.driver_name.clone(),
                        pool: resource.pool_name.clone(),
                        device: resource.device_name.clone(),
                    };
                    out.push(at(AllocatedDevice::Claim { claim: claim.claim_name.clone(), device }));
                }
            }
        }
    }
    out
}

async fn connect(socket: &Path) -> Result<PodResourcesListerClient<Channel>> {
    if !socket.exists() {
        return Err(PodResourcesError::SocketMissing(socket.to_path_buf()));
    }
    let path = socket.to_path_buf();
    // The URI is required by the API but unused: the connector dials the socket.
    let endpoint = Endpoint::from_static("http://localhost");
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| PodResourcesError::Connect { path: socket.to_path_buf(), message: error_chain(&e) })?;
    Ok(PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_resources_are_recognised() {
        let filter = ResourceFilter { extra: vec!["nvidia.com/gpu.shared".into()], ..ResourceFilter::default() };
        for name in ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"] {
            assert!(filter.wants(name), "{name}");
        }
        for name in ["cpu", "nvidia.com/gpux", "amd.com/gpu", "example.com/mig-1g"] {
            assert!(!filter.wants(name), "{name}");
        }
    }

    #[test]
    fn dra_claims_of_gpu_drivers_are_kept_by_claim_and_name() {
        use super::super::proto::{CdiDevice, ClaimResource, ContainerResources, DynamicResource, PodResources};
        let resource = |driver: &str, device: &str| ClaimResource {
            cdi_devices: vec![CdiDevice { name: format!("k8s.{driver}/claim={device}") }],
            driver_name: driver.into(),
            pool_name: "node-a".into(),
            device_name: device.into(),
            share_id: None,
        };
        let response = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "p".into(),
                namespace: "ns".into(),
                containers: vec![ContainerResources {
                    name: "c".into(),
                    dynamic_resources: vec![DynamicResource {
                        claim_name: "gpus".into(),
                        claim_namespace: "ns".into(),
                        claim_resources: vec![resource("gpu.nvidia.com", "gpu-3"), resource("nic.example.com", "eth1")],
                    }],
                    ..ContainerResources::default()
                }],
            }],
        };
        let kept = gpu_allocations(response.clone(), &ResourceFilter::default());
        assert_eq!(kept.len(), 1, "the NIC driver's device is not a GPU");
        let device = DraDeviceName { driver: "gpu.nvidia.com".into(), pool: "node-a".into(), device: "gpu-3".into() };
        assert_eq!(kept[0].device, AllocatedDevice::Claim { claim: "gpus".into(), device });
        assert_eq!(kept[0].device_id(), None);
        let off = ResourceFilter { dra_drivers: Vec::new(), ..ResourceFilter::default() };
        assert!(gpu_allocations(response, &off).is_empty(), "--kubelet.dra-drivers= turns DRA off");
    }

    #[tokio::test]
    async fn a_missing_socket_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut client =
            PodResourcesClient::new(dir.path().join("kubelet.sock"), Duration::from_secs(1), ResourceFilter::default());
        let err = client.list().await.unwrap_err();
        assert_eq!(err.reason(), "socket_missing");
        assert!(err.to_string().contains("kubelet.sock"), "{err}");
    }

    #[tokio::test]
    async fn a_socket_nobody_listens_on_fails_to_connect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.sock");
        // Bound, then closed: the file stays but nothing accepts.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let mut client = PodResourcesClient::new(&path, Duration::from_secs(1), ResourceFilter::default());
        assert_eq!(client.list().await.unwrap_err().reason(), "connect");
    }
}
