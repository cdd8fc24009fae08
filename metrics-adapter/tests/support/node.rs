//! The simulated GPU node and the standalone adapter of `test_support::simulated`, with
//! what the adapter's end-to-end tests ask of them: a MetricValueList's pods and values.

// Each test binary uses some of these; the rest would warn as unused.
#[allow(unused_imports)]
pub use test_support::simulated::{Clock, MetricsAdapter, NodeOptions, SimulatedNode, workspace as repo};

/// How long an adapter end-to-end test waits for an answer to converge.
pub const CONVERGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The scenario clock every adapter end-to-end test freezes its node at.
pub const FROZEN_AT: Clock = Clock::Frozen(60.0);

/// The `(pod, value)` pairs of the MetricValueList at `path` once it names `pods` pods.
pub fn wait_pods(adapter: &MetricsAdapter, path: &str, pods: usize) -> Vec<(String, String)> {
    test_support::simulated::wait_until_ok(&format!("{path} for {pods} pods"), CONVERGE, || match adapter.get(path) {
        Some(list) if list["items"].as_array().is_some_and(|i| i.len() == pods) => Ok(pod_values(&list)),
        other => Err(format!("{other:?}")),
    })
}

/// `(described pod, value)` of each item of a MetricValueList, sorted.
pub fn pod_values(list: &serde_json::Value) -> Vec<(String, String)> {
    let mut values: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["describedObject"]["name"].as_str().unwrap().into(), i["value"].as_str().unwrap().into()))
        .collect();
    values.sort();
    values
}
