//! A blocking pod-resources v1 client on a unix socket, for tests that put the same
//! questions to fake-kubelet and to a real kubelet and compare the answers.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::proto::pod_resources_lister_client::PodResourcesListerClient;
use crate::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, GetPodResourcesRequest, ListPodResourcesRequest,
    PodResources,
};

/// A connection to one kubelet's pod-resources socket, on a runtime of its own.
#[derive(Debug)]
pub struct PodResourcesClient {
    runtime: tokio::runtime::Runtime,
    client: PodResourcesListerClient<Channel>,
}

impl PodResourcesClient {
    /// Connects to `socket`; the error names it.
    pub fn connect(socket: &Path) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let path: PathBuf = socket.into();
        let channel = runtime
            .block_on(Endpoint::from_static("http://localhost").connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
            })))
            .map_err(|e| anyhow::anyhow!("{}: cannot connect: {e}", socket.display()))?;
        Ok(PodResourcesClient { runtime, client: PodResourcesListerClient::new(channel) })
    }

    /// `List`: every pod the kubelet knows.
    pub fn list(&mut self) -> Result<Vec<PodResources>, tonic::Status> {
        let answer = self.runtime.block_on(self.client.list(ListPodResourcesRequest {}))?;
        Ok(answer.into_inner().pod_resources)
    }

    /// `GetAllocatableResources`.
    pub fn allocatable(&mut self) -> Result<AllocatableResourcesResponse, tonic::Status> {
        Ok(self.runtime.block_on(self.client.get_allocatable_resources(AllocatableResourcesRequest {}))?.into_inner())
    }

    /// `Get`: one pod.
    pub fn get(&mut self, namespace: &str, name: &str) -> Result<Option<PodResources>, tonic::Status> {
        let ask = GetPodResourcesRequest { pod_name: name.into(), pod_namespace: namespace.into() };
        Ok(self.runtime.block_on(self.client.get(ask))?.into_inner().pod_resources)
    }
}
