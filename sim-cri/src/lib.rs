//! sim-cri: a container runtime for simulated nodes. It serves the Container Runtime
//! Interface (CRI runtime.v1, Kubernetes v1.37.2's) on a unix socket so that the real
//! kubelet can run a simulated GPU node: the kubelet creates pod sandboxes and
//! containers, and sim-cri keeps them as records and starts no process. A container is
//! running from `StartContainer` until it is stopped. Each sandbox gets an address of
//! the node's pod CIDR (data only: nothing listens there).
//!
//! Layers, one-directional: [`state`] (the records and their rules, pure) <- `runtime`
//! and `images` (the two gRPC services) <- [`serve`].

#![forbid(unsafe_code)]

pub mod images;
pub mod proto;
pub mod runtime;
pub mod state;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use crate::proto::image_service_server::ImageServiceServer;
use crate::proto::runtime_service_server::RuntimeServiceServer;

/// Why the runtime could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot bind the CRI socket {path}: {source}")]
    Bind { path: PathBuf, source: std::io::Error },
    #[error("serving the CRI socket failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Binds `socket` (replacing a stale socket file) and serves both CRI services over
/// `state` until `shutdown` resolves.
pub async fn serve(
    socket: &Path,
    state: state::State,
    root: PathBuf,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    for dir in socket.parent().into_iter().chain([root.as_path()]) {
        std::fs::create_dir_all(dir).map_err(|source| ServeError::Bind { path: dir.into(), source })?;
    }
    if socket.exists() {
        std::fs::remove_file(socket).map_err(|source| ServeError::Bind { path: socket.into(), source })?;
    }
    let listener = UnixListener::bind(socket).map_err(|source| ServeError::Bind { path: socket.into(), source })?;
    let shared = Arc::new(Mutex::new(state));
    let runtime = runtime::Runtime { state: Arc::clone(&shared) };
    let images = images::Images { state: shared, root };
    tracing::info!(socket = %socket.display(), "serving CRI runtime.v1");
    tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(runtime))
        .add_service(ImageServiceServer::new(images))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await?;
    let _ = std::fs::remove_file(socket);
    Ok(())
}
