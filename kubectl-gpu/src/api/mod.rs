//! The API-server edge: the client (kubeconfig, `--context`, in-cluster), the reads of
//! nodes, pods and the prices ConfigMap ([`objects`]), the exporters' pages through the
//! pods `proxy` subresource with bounded concurrency and deadlines ([`scrape`]), the
//! custom metrics API ([`metrics`]), a Prometheus through the services `proxy`
//! subresource or at a URL ([`prometheus`]), and [`gather`], which puts one run's view of the
//! cluster together. Nothing is read any other way (but a Prometheus the user names by
//! `--prometheus-url`): RBAC applies to every read and no port-forward is needed.
//!
//! kube's own retry of 429/503/504 is off: a `pods/proxy` read of an exporter that is
//! down answers 503, and retrying it would only spend the deadline; a list that fails
//! fails the command with the API server's message.

pub mod body;
pub mod gather;
pub mod metrics;
pub mod objects;
pub mod prometheus;
pub mod scrape;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::Global;

/// Why the API server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no cluster to talk to: {0} (set KUBECONFIG, pass --kubeconfig, or run in a pod)")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("{what}: {message}")]
    Request { what: String, message: String },
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    #[error(
        "node {0:?} has no GPUs (no nvidia.com/gpu.present or nvidia.com/gpu.product label, no NVIDIA resources, no exporter pod)"
    )]
    NotGpuNode(String),
    #[error("ConfigMap {namespace}/{name}: {message}")]
    Prices { namespace: String, name: String, message: String },
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// How kubectl words an API error: `Error from server (Forbidden): nodes is forbidden: ...`.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.reason.is_empty() && s.reason != "Failed to parse error data" => {
            format!("Error from server ({}): {}", s.reason, s.message)
        }
        kube::Error::Api(s) => format!("Error from server ({}): {}", s.code, s.message),
        other => other.to_string(),
    }
}

/// The HTTP status of an API error, if the server answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The client for `global`'s kubeconfig, context, cluster and user.
pub async fn client(global: &Global) -> Result<Client> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        cluster: global.cluster.clone(),
        user: global.user.clone(),
    };
    let chosen = options.context.is_some() || options.cluster.is_some() || options.user.is_some();
    let mut config = match &global.kubeconfig {
        Some(path) => {
            let kubeconfig_error = |source| ApiError::Kubeconfig { path: path.display().to_string(), source };
            let kubeconfig = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(kubeconfig_error)?
        }
        None if chosen => Config::from_kubeconfig(&options).await.map_err(|source| ApiError::Kubeconfig {
            path: std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into()),
            source,
        })?,
        None => Config::infer().await.map_err(ApiError::Infer)?,
    };
    config.default_retry = false;
    Client::try_from(config).map_err(ApiError::Client)
}
