//! The pod-resources v1 gRPC server (`List`, `GetAllocatableResources`, `Get`) on a
//! unix socket, and a handle that can take the
//! socket away and bring it back, as a kubelet restart does.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::proto::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use crate::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, GetPodResourcesRequest, GetPodResourcesResponse,
    ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};

/// Why the socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{path}: cannot listen: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

pub type Result<T, E = ServeError> = std::result::Result<T, E>;

/// What the server answers; tests may change it while it runs.
#[derive(Debug, Clone, Default)]
pub struct Lister {
    listing: Arc<RwLock<Vec<PodResources>>>,
    allocatable: Arc<RwLock<AllocatableResourcesResponse>>,
    calls: Arc<AtomicU64>,
}

impl Lister {
    pub fn new(listing: Vec<PodResources>, allocatable: AllocatableResourcesResponse) -> Self {
        Lister {
            listing: Arc::new(RwLock::new(listing)),
            allocatable: Arc::new(RwLock::new(allocatable)),
            calls: Arc::default(),
        }
    }

    /// Replaces the `List` answer.
    pub fn set_listing(&self, listing: Vec<PodResources>) {
        *self.listing.write().unwrap_or_else(PoisonError::into_inner) = listing;
    }

    /// `List` calls answered so far.
    pub fn list_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _request: Request<ListPodResourcesRequest>,
    ) -> std::result::Result<Response<ListPodResourcesResponse>, Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let pod_resources = self.listing.read().unwrap_or_else(PoisonError::into_inner).clone();
        Ok(Response::new(ListPodResourcesResponse { pod_resources }))
    }

    async fn get_allocatable_resources(
        &self,
        _request: Request<AllocatableResourcesRequest>,
    ) -> std::result::Result<Response<AllocatableResourcesResponse>, Status> {
        Ok(Response::new(self.allocatable.read().unwrap_or_else(PoisonError::into_inner).clone()))
    }

    /// One pod, as `List` names it; an unknown pod is the kubelet's own error, which
    /// gRPC carries as `Unknown` (pkg/kubelet/apis/podresources/server_v1.go `Get`).
    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> std::result::Result<Response<GetPodResourcesResponse>, Status> {
        let GetPodResourcesRequest { pod_name, pod_namespace } = request.into_inner();
        let listing = self.listing.read().unwrap_or_else(PoisonError::into_inner);
        match listing.iter().find(|p| p.name == pod_name && p.namespace == pod_namespace) {
            Some(pod) => Ok(Response::new(GetPodResourcesResponse { pod_resources: Some(pod.clone()) })),
            None => Err(Status::unknown(format!("pod {pod_name} in namespace {pod_namespace} not found"))),
        }
    }
}

/// Binds `path` (replacing a stale socket file) and serves until the task is aborted.
/// Must be called inside a tokio runtime.
pub fn serve(path: &Path, lister: Lister) -> Result<JoinHandle<()>> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|source| ServeError::Bind { path: path.into(), source })?;
    Ok(tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(lister))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            tracing::error!("pod-resources server stopped: {e}");
        }
    }))
}

/// A fake kubelet serving on a runtime of its own, for synchronous tests and the binary.
/// Each serving session has its own runtime, so dropping the socket drops every open
/// connection with it, as when a kubelet dies. The socket goes away with the handle.
/// Not for use inside an async context.
#[derive(Debug)]
pub struct KubeletServer {
    socket: PathBuf,
    lister: Lister,
    runtime: Option<tokio::runtime::Runtime>,
}

impl KubeletServer {
    /// Starts serving `lister` on `socket`.
    pub fn start(socket: impl Into<PathBuf>, lister: Lister) -> Result<Self> {
        let mut server = KubeletServer { socket: socket.into(), lister, runtime: None };
        server.restore_socket()?;
        Ok(server)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn lister(&self) -> &Lister {
        &self.lister
    }

    /// Stops serving at once (open connections are cut) and removes the socket file.
    pub fn drop_socket(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Serves again on a new socket file (as a restarted kubelet does).
    pub fn restore_socket(&mut self) -> Result<()> {
        self.drop_socket();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fake-kubelet")
            .enable_all()
            .build()
            .map_err(ServeError::Runtime)?;
        {
            let _guard = runtime.enter();
            serve(&self.socket, self.lister.clone())?;
        }
        self.runtime = Some(runtime);
        Ok(())
    }

    /// Whether the socket is being served.
    pub fn serving(&self) -> bool {
        self.runtime.is_some()
    }
}

impl Drop for KubeletServer {
    fn drop(&mut self) {
        self.drop_socket();
    }
}
