//! Per-pod aggregates from the custom metrics API the adapter serves:
//! `GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{metric}` for
//! `gpu_utilization` (mean over the pod's devices) and `gpu_memory_used_bytes` (sum).
//! Two requests for a namespace, however many nodes its pods run on; values are
//! Kubernetes quantities. No `labelSelector` is sent: the pods were already listed with
//! the user's selector, and the lists are joined by pod name.

use std::collections::BTreeMap;

use kube::Client;
use serde::Deserialize;

use super::{ApiError, Result, body};
use crate::quantity;
use crate::views::pods::PodMetrics;

#[derive(Deserialize)]
struct MetricValueList {
    #[serde(default)]
    items: Vec<MetricValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetricValue {
    described_object: DescribedObject,
    value: String,
}

#[derive(Deserialize)]
struct DescribedObject {
    name: String,
}

/// The path of one metric for every pod of `namespace`.
pub fn path(namespace: &str, metric: &str) -> String {
    format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/%2A/{metric}")
}

async fn one(client: &Client, namespace: &str, metric: &str) -> Result<BTreeMap<String, f64>> {
    let what = || format!("reading {metric} of pods in {namespace} from the custom metrics API");
    let request = http::Request::get(path(namespace, metric))
        .body(Vec::new())
        .map_err(|e| ApiError::Request { what: what(), message: e.to_string() })?;
    let list: MetricValueList = body::json(client, request, body::MAX_LIST_PAGE_BYTES)
        .await
        .map_err(|e| ApiError::Request { what: what(), message: body::describe(&e) })?;
    let mut out = BTreeMap::new();
    for item in list.items {
        let v = quantity::parse(&item.value).map_err(|e| ApiError::Request { what: what(), message: e.to_string() })?;
        out.insert(item.described_object.name, v);
    }
    Ok(out)
}

/// Utilization and memory of `namespace`'s pods, by pod name.
pub async fn pod_metrics(client: &Client, namespace: &str) -> Result<BTreeMap<String, PodMetrics>> {
    let (util, memory) =
        futures::join!(one(client, namespace, "gpu_utilization"), one(client, namespace, "gpu_memory_used_bytes"));
    let (util, memory) = (util?, memory?);
    let mut out: BTreeMap<String, PodMetrics> = BTreeMap::new();
    for (pod, v) in util {
        out.entry(pod).or_default().utilization = Some(v);
    }
    for (pod, v) in memory {
        out.entry(pod).or_default().memory_used_bytes = Some(v);
    }
    Ok(out)
}
