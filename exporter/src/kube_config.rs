//! Where the exporter's Kubernetes client configuration comes from, one rule for every
//! part that talks to the API (the pod watch, the health loop): `--kubernetes.kubeconfig`
//! when given, else the environment (in-cluster service account, then `KUBECONFIG` /
//! `~/.kube/config`).

use std::path::{Path, PathBuf};

/// Why no configuration was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeConfigError {
    #[error("{path}: cannot read the kubeconfig: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("no Kubernetes API configuration (not in a cluster, no kubeconfig): {0}")]
    NoConfig(String),
}

/// The client configuration `kubeconfig` names, or the environment's.
pub async fn find(kubeconfig: Option<&Path>) -> Result<kube::Config, KubeConfigError> {
    match kubeconfig {
        Some(path) => {
            let bad = |message: String| KubeConfigError::Kubeconfig { path: path.to_path_buf(), message };
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| bad(e.to_string()))
        }
        None => kube::Config::infer().await.map_err(|e| KubeConfigError::NoConfig(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreadable_kubeconfig_names_its_path() {
        let e = find(Some(Path::new("/nonexistent/kubeconfig"))).await.unwrap_err();
        assert!(matches!(&e, KubeConfigError::Kubeconfig { path, .. } if path == Path::new("/nonexistent/kubeconfig")));
        assert!(e.to_string().starts_with("/nonexistent/kubeconfig: cannot read the kubeconfig"), "{e}");
    }
}
