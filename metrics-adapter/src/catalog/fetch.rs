//! Reads the cluster's catalog from the API server's discovery documents: `/api/v1`, then
//! `/apis` and each group's preferred version, in the order the API server lists them (the
//! order the catalog resolves names in). A group whose document cannot be read within
//! half the deadline (an aggregated API that is down answers 503, which the client
//! retries) is left out with a warning, as client-go's discovery does; the metrics groups
//! are not read at all (they list metrics, not resources, and one of them is this
//! adapter).

use std::time::Duration;

use super::Catalog;

/// Why the catalog could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server did not answer in time.
    #[error("reading API discovery: no answer within {0:?}")]
    Timeout(Duration),
    /// A request failed.
    #[error("reading API discovery ({what}): {reason}")]
    Request {
        /// Which document.
        what: String,
        /// Why.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Groups that list metrics rather than resources.
const SKIPPED_GROUPS: [&str; 3] = ["metrics.k8s.io", "custom.metrics.k8s.io", "external.metrics.k8s.io"];

async fn within<T>(timeout: Duration, what: &str, f: impl Future<Output = kube::Result<T>>) -> Result<T> {
    match tokio::time::timeout(timeout, f).await {
        Err(_) => Err(Error::Timeout(timeout)),
        Ok(Err(e)) => Err(Error::Request { what: what.to_owned(), reason: e.to_string() }),
        Ok(Ok(v)) => Ok(v),
    }
}

/// Reads the catalog: the core group and the group list within `timeout` each, every
/// group's document within half of it.
pub async fn fetch(client: &kube::Client, timeout: Duration) -> Result<Catalog> {
    let core = within(timeout, "/api/v1", client.list_core_api_resources("v1")).await?;
    let groups = within(timeout, "/apis", client.list_api_groups()).await?;
    let versions: Vec<String> = groups
        .groups
        .iter()
        .filter(|g| !SKIPPED_GROUPS.contains(&g.name.as_str()))
        .filter_map(|g| g.preferred_version.as_ref().or(g.versions.first()).map(|v| v.group_version.clone()))
        .collect();
    let answers = futures::future::join_all(versions.iter().map(|gv| client.list_api_group_resources(gv))).await;
    let mut lists = vec![core];
    for (gv, answer) in versions.iter().zip(answers) {
        match answer {
            Ok(list) => lists.push(list),
            Err(e) => {
                tracing::warn!(group_version = %gv, error = %e, "API discovery of a group failed; its resources are unknown until the next read")
            }
        }
    }
    Ok(Catalog::from_lists(&lists))
}
