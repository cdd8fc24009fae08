//! The kubelet pod-resources v1 client: `List` over gRPC on the kubelet's unix socket.
//!
//! One call returns every container's device allocations. Only GPU resources are kept:
//! `nvidia.com/gpu`, every `nvidia.com/mig-<profile>` (the device plugin's mixed MIG
//! strategy) and any extra names given with `--kubelet.resource-names` (renamed or
//! shared resources such as `nvidia.com/gpu.shared`). Device ids are kept as the
//! device plugin reported them: a GPU UUID, a MIG UUID or a replica `<uuid>::<n>`.
//!
//! The connection is made on first use and dropped after a failure, so a kubelet that
//! restarts (and recreates its socket) is reconnected on the next refresh.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use super::proto::ListPodResourcesRequest;
use super::proto::pod_resources_lister_client::PodResourcesListerClient;

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
    pub resource: String,
    /// As the device plugin reported it: `GPU-...`, `MIG-...`, or `<uuid>::<n>`.
    pub device_id: String,
}

/// Which resource names are GPUs.
#[derive(Debug, Clone, Default)]
pub struct ResourceFilter {
    pub extra: Vec<String>,
}

impl ResourceFilter {
    pub fn wants(&self, resource: &str) -> bool {
        resource == "nvidia.com/gpu"
            || resource.starts_with("nvidia.com/mig-")
            || self.extra.iter().any(|r| r == resource)
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
        let mut out = Vec::new();
        for pod in response.pod_resources {
            for container in pod.containers {
                for devices in container.devices.into_iter().filter(|d| self.filter.wants(&d.resource_name)) {
                    for device_id in devices.device_ids {
                        out.push(Allocation {
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            container: container.name.clone(),
                            resource: devices.resource_name.clone(),
                            device_id,
                        });
                    }
                }
            }
        }
        Ok(out)
    }
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
        let filter = ResourceFilter { extra: vec!["nvidia.com/gpu.shared".into()] };
        for name in ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"] {
            assert!(filter.wants(name), "{name}");
        }
        for name in ["cpu", "nvidia.com/gpux", "amd.com/gpu", "example.com/mig-1g"] {
            assert!(!filter.wants(name), "{name}");
        }
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
