//! One run's view of the cluster: the GPU nodes, their exporters' readings, and the GPU
//! pods in scope, as a [`Fleet`].
//!
//! A GPU node is a node with GPU labels or NVIDIA resources ([`NodeInfo::is_gpu_node`]),
//! or one an exporter pod runs on. Which exporters are read: all GPU nodes', or, for a
//! command narrowed to one namespace, only those of the nodes its GPU pods run on (so
//! `kubectl gpu cost -n team-a` reads a handful of exporters, not the fleet). An exporter
//! pod list the user may not read makes every node's readings unknown (`forbidden`),
//! not the command fail: the core API's view of the nodes is still shown.

use std::collections::{BTreeMap, BTreeSet};

use gpu_health::names::Names;
use kube::Client;

use super::scrape::{self, ScrapeOptions};
use super::{ApiError, Result, objects};
use crate::cluster::{NodeInfo, PodInfo, node_info, pod_info};
use crate::fleet::{Exporter, Fleet, NodeEntry, UnknownReason};
use crate::table::natural;

/// Which pods to list.
#[derive(Debug, Clone, PartialEq)]
pub enum PodScope {
    None,
    Namespace(String),
    All,
}

/// What to gather.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `-l` for nodes.
    pub node_selector: Option<String>,
    /// `gpus NODE`.
    pub only_node: Option<String>,
    pub pods: PodScope,
    /// `-l` for pods.
    pub pod_selector: Option<String>,
    /// Read only the exporters of nodes that run a listed GPU pod.
    pub only_nodes_with_pods: bool,
}

/// Where the exporters are.
#[derive(Debug, Clone)]
pub struct Exporters {
    pub selector: String,
    pub scrape: ScrapeOptions,
}

async fn node_infos(client: &Client, plan: &Plan, names: &Names) -> Result<Vec<NodeInfo>> {
    match &plan.only_node {
        Some(name) => match objects::node(client, name).await? {
            Some(node) => Ok(vec![node_info(&node, names)]),
            None => Err(ApiError::NodeNotFound(name.clone())),
        },
        None => {
            let nodes = objects::nodes(client, plan.node_selector.as_deref()).await?;
            Ok(nodes.iter().map(|n| node_info(n, names)).collect())
        }
    }
}

async fn pods(client: &Client, plan: &Plan) -> Result<Vec<PodInfo>> {
    let namespace = match &plan.pods {
        PodScope::None => return Ok(Vec::new()),
        PodScope::Namespace(ns) => Some(ns.as_str()),
        PodScope::All => None,
    };
    let pods = objects::pods(client, namespace, plan.pod_selector.as_deref()).await?;
    Ok(pods.iter().map(pod_info).filter(PodInfo::wants_gpus).collect())
}

/// Gathers the fleet; `now` is the Unix time of the run.
pub async fn fleet(client: &Client, plan: &Plan, exporters: &Exporters, names: &Names, now: f64) -> Result<Fleet> {
    let (infos, pods, exporter_pods) = futures::join!(
        node_infos(client, plan, names),
        pods(client, plan),
        objects::exporter_pods(client, &exporters.scrape.namespace, &exporters.selector)
    );
    let (infos, pods) = (infos?, pods?);
    let (exporter_pods, listing_error) = match exporter_pods {
        Ok(p) => (p, None),
        Err(e) if plan.only_node.is_some() || !infos.is_empty() => (BTreeMap::new(), Some(e.to_string())),
        Err(e) => return Err(e),
    };
    let hosting: BTreeSet<&str> = pods.iter().filter_map(|p| p.node.as_deref()).collect();
    let mut infos: Vec<NodeInfo> = infos
        .into_iter()
        .filter(|n| n.is_gpu_node() || exporter_pods.contains_key(&n.name) || plan.only_node.is_some())
        .filter(|n| !plan.only_nodes_with_pods || hosting.contains(n.name.as_str()))
        .collect();
    if let (Some(name), Some(info)) = (&plan.only_node, infos.first())
        && !info.is_gpu_node()
        && !exporter_pods.contains_key(name)
        && listing_error.is_none()
    {
        return Err(ApiError::NotGpuNode(name.clone()));
    }
    infos.sort_by(|a, b| natural(&a.name, &b.name));
    let mut to_read = Vec::new();
    let mut entries: Vec<(NodeInfo, Option<Exporter>)> = Vec::new();
    for info in infos {
        let exporter = if let Some(e) = &listing_error {
            let reason = if e.contains("(Forbidden)") { UnknownReason::Forbidden } else { UnknownReason::Unreachable };
            Some(Exporter::Unknown { reason, detail: e.clone() })
        } else if let Some((_, pod)) = exporter_pods.get(&info.name) {
            to_read.push((info.name.clone(), pod.clone()));
            None
        } else {
            Some(Exporter::Unknown {
                reason: UnknownReason::NoExporter,
                detail: format!(
                    "no pod {} in namespace {} on this node",
                    exporters.selector, exporters.scrape.namespace
                ),
            })
        };
        entries.push((info, exporter));
    }
    let mut read: BTreeMap<String, Exporter> =
        scrape::read_all(client, to_read, &exporters.scrape).await.into_iter().collect();
    let nodes = entries
        .into_iter()
        .map(|(info, exporter)| {
            let exporter = exporter
                .or_else(|| read.remove(&info.name))
                .unwrap_or(Exporter::Unknown { reason: UnknownReason::Unreachable, detail: String::new() });
            NodeEntry { info, exporter }
        })
        .collect();
    Ok(Fleet { nodes, pods, now })
}
