//! The simulated GPU node and the standalone adapter of `test_support::simulated`, with
//! what the adapter's end-to-end tests ask of them: a MetricValueList's pods and values.

// Each test binary uses some of these; the rest would warn as unused.
#[allow(unused_imports)]
pub use test_support::simulated::{Clock, MetricsAdapter, NodeOptions, SimulatedNode, workspace as repo};

/// The scenario clock every adapter end-to-end test freezes its node at.
pub const FROZEN_AT: Clock = Clock::Frozen(60.0);

/// Polls `attempt` every 100 ms until it is `Ok`; fails after 60 s with the last error.
pub fn wait_until_ok<T>(what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) => {
                assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}; last seen: {last}")
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The `(pod, value)` pairs of the MetricValueList at `path` once it names `pods` pods.
pub fn wait_pods(adapter: &MetricsAdapter, path: &str, pods: usize) -> Vec<(String, String)> {
    wait_until_ok(&format!("{path} for {pods} pods"), || match adapter.get(path) {
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
