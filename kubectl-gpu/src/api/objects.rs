//! Reads of the core API: nodes and pods (paged, 500 a page, with the user's label
//! selector sent to the server as kubectl does), the exporter pods, and the prices
//! ConfigMap. Every answer is read within a bound ([`body`]): 64 MiB a page of a list,
//! 250,000 objects a list, 8 MiB an object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::api::{GetParams, ListParams, ObjectList};
use serde::de::DeserializeOwned;

use super::{ApiError, Result, body};
use crate::cluster::PodInfo;
use crate::prices::PriceTable;

const PAGE: u32 = 500;

/// The key of the prices ConfigMap that holds the table.
pub const PRICES_KEY: &str = "prices.yaml";

/// The most objects one list may gather (Kubernetes supports 5,000 nodes and 150,000
/// pods): a server that hands out `continue` tokens forever is refused, not followed.
pub const MAX_LISTED: usize = 250_000;

async fn list_all<K>(
    client: &Client,
    namespace: Option<&str>,
    what: &str,
    labels: Option<&str>,
    fields: Option<&str>,
) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let url = K::url_path(&K::DynamicType::default(), namespace);
    let refuse = |message: String| ApiError::Request { what: format!("listing {what}"), message };
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(PAGE);
        if let Some(l) = labels {
            lp = lp.labels(l);
        }
        if let Some(f) = fields {
            lp = lp.fields(f);
        }
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        // Each page is read within a bound (kube's `list` reads any size).
        let request = kube::core::Request::new(&url).list(&lp).map_err(|e| refuse(e.to_string()))?;
        let page: ObjectList<K> =
            body::json(client, request, body::MAX_LIST_PAGE_BYTES).await.map_err(|e| refuse(body::describe(&e)))?;
        out.extend(page.items);
        if out.len() > MAX_LISTED {
            return Err(refuse(format!("more than {MAX_LISTED} objects; refusing to read further")));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => token = Some(next),
            None => return Ok(out),
        }
    }
}

/// One object, `None` if there is none of that name, read within [`body::MAX_OBJECT_BYTES`].
async fn get_opt<K>(client: &Client, namespace: Option<&str>, name: &str) -> Result<Option<K>, body::BodyError>
where
    K: kube::Resource + DeserializeOwned,
    K::DynamicType: Default,
{
    let url = K::url_path(&K::DynamicType::default(), namespace);
    let request = kube::core::Request::new(&url)
        .get(name, &GetParams::default())
        .map_err(|e| body::BodyError::Kube(kube::Error::BuildRequest(e)))?;
    match body::json(client, request, body::MAX_OBJECT_BYTES).await {
        Ok(object) => Ok(Some(object)),
        Err(e) if body::status_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Nodes matching `labels` (every node without one).
pub async fn nodes(client: &Client, labels: Option<&str>) -> Result<Vec<Node>> {
    list_all::<Node>(client, None, "nodes", labels, None).await
}

/// One node, `None` if there is none of that name.
pub async fn node(client: &Client, name: &str) -> Result<Option<Node>> {
    get_opt::<Node>(client, None, name)
        .await
        .map_err(|e| ApiError::Request { what: format!("reading node {name}"), message: body::describe(&e) })
}

/// Pods that are not finished, in `namespace` (all when `None`), matching `labels`.
pub async fn pods(client: &Client, namespace: Option<&str>, labels: Option<&str>) -> Result<Vec<Pod>> {
    let what = namespace.map_or_else(|| "pods in all namespaces".to_string(), |ns| format!("pods in namespace {ns}"));
    list_all::<Pod>(client, namespace, &what, labels, Some("status.phase!=Succeeded,status.phase!=Failed")).await
}

/// The exporter pods by node: the running one if several (a rollout), else the newest.
pub async fn exporter_pods(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<BTreeMap<String, (Pod, PodInfo)>> {
    let what = format!("exporter pods in namespace {namespace} ({selector})");
    let pods = list_all::<Pod>(client, Some(namespace), &what, Some(selector), None).await?;
    let mut by_node: BTreeMap<String, (Pod, PodInfo)> = BTreeMap::new();
    for pod in pods {
        let info = crate::cluster::pod_info(&pod);
        let Some(node) = info.node.clone() else { continue };
        let better = match by_node.get(&node) {
            None => true,
            Some((old, old_info)) => {
                let running = |i: &PodInfo| i.phase == "Running";
                (running(&info) && !running(old_info))
                    || (running(&info) == running(old_info)
                        && pod.metadata.creation_timestamp > old.metadata.creation_timestamp)
            }
        };
        if better {
            by_node.insert(node, (pod, info));
        }
    }
    Ok(by_node)
}

/// Where the run's prices came from, besides the defaults.
#[derive(Debug, Clone, PartialEq)]
pub enum PricesFrom {
    ConfigMap,
    /// No ConfigMap of that name.
    Missing,
    /// The user may not read it: the defaults apply, with a warning.
    Forbidden(String),
}

/// The price table: defaults, then the ConfigMap if it exists, then `--price` flags.
pub async fn prices(
    client: &Client,
    namespace: &str,
    name: &str,
    flags: &[String],
) -> Result<(PriceTable, PricesFrom)> {
    let refuse = |message: String| ApiError::Prices { namespace: namespace.into(), name: name.into(), message };
    let mut table = PriceTable::defaults().map_err(|e| refuse(e.to_string()))?;
    let from = match get_opt::<ConfigMap>(client, Some(namespace), name).await {
        Ok(Some(cm)) => {
            let text = cm.data.as_ref().and_then(|d| d.get(PRICES_KEY)).ok_or_else(|| {
                refuse(format!("has no key {PRICES_KEY} (the price table, in the format of alerts/gpu-prices.yaml)"))
            })?;
            table
                .overlay(&format!("ConfigMap {namespace}/{name}, key {PRICES_KEY}"), text)
                .map_err(|e| ApiError::Request { what: "reading prices".into(), message: e.to_string() })?;
            PricesFrom::ConfigMap
        }
        Ok(None) => PricesFrom::Missing,
        Err(e) if body::status_code(&e) == Some(403) => PricesFrom::Forbidden(body::describe(&e)),
        Err(e) => return Err(refuse(body::describe(&e))),
    };
    for flag in flags {
        table
            .apply_flag(flag)
            .map_err(|e| ApiError::Request { what: "reading prices".into(), message: e.to_string() })?;
    }
    Ok((table, from))
}
