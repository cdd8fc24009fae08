//! Reads of the core API: nodes and pods (paged, 500 a page, with the user's label
//! selector sent to the server as kubectl does), the exporter pods, and the prices
//! ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, ObjectList};
use serde::de::DeserializeOwned;

use super::{ApiError, Result, describe, status_code};
use crate::cluster::PodInfo;
use crate::prices::PriceTable;

const PAGE: u32 = 500;

/// The key of the prices ConfigMap that holds the table.
pub const PRICES_KEY: &str = "prices.yaml";

async fn list_all<K>(api: &Api<K>, what: &str, labels: Option<&str>, fields: Option<&str>) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
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
        let page: ObjectList<K> = api
            .list(&lp)
            .await
            .map_err(|e| ApiError::Request { what: format!("listing {what}"), message: describe(&e) })?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => token = Some(next),
            None => return Ok(out),
        }
    }
}

/// Nodes matching `labels` (every node without one).
pub async fn nodes(client: &Client, labels: Option<&str>) -> Result<Vec<Node>> {
    list_all(&Api::<Node>::all(client.clone()), "nodes", labels, None).await
}

/// One node, `None` if there is none of that name.
pub async fn node(client: &Client, name: &str) -> Result<Option<Node>> {
    Api::<Node>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(|e| ApiError::Request { what: format!("reading node {name}"), message: describe(&e) })
}

/// Pods that are not finished, in `namespace` (all when `None`), matching `labels`.
pub async fn pods(client: &Client, namespace: Option<&str>, labels: Option<&str>) -> Result<Vec<Pod>> {
    let api = match namespace {
        Some(ns) => Api::<Pod>::namespaced(client.clone(), ns),
        None => Api::<Pod>::all(client.clone()),
    };
    let what = namespace.map_or_else(|| "pods in all namespaces".to_string(), |ns| format!("pods in namespace {ns}"));
    list_all(&api, &what, labels, Some("status.phase!=Succeeded,status.phase!=Failed")).await
}

/// The exporter pods by node: the running one if several (a rollout), else the newest.
pub async fn exporter_pods(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<BTreeMap<String, (Pod, PodInfo)>> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let pods =
        list_all(&api, &format!("exporter pods in namespace {namespace} ({selector})"), Some(selector), None).await?;
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
    let from = match Api::<ConfigMap>::namespaced(client.clone(), namespace).get_opt(name).await {
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
        Err(e) if status_code(&e) == Some(403) => PricesFrom::Forbidden(describe(&e)),
        Err(e) => return Err(refuse(describe(&e))),
    };
    for flag in flags {
        table
            .apply_flag(flag)
            .map_err(|e| ApiError::Request { what: "reading prices".into(), message: e.to_string() })?;
    }
    Ok((table, from))
}
