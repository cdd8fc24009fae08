//! fake-kubelet: the kubelet as the GPU exporter sees it, simulated from a fake-nvml
//! scenario, for tests and the demo.
//!
//! - [`server`]: the pod-resources v1 gRPC API (`List`, `GetAllocatableResources`, `Get`) on a
//!   unix socket, which can be dropped and restored like a restarting kubelet's.
//! - [`client`]: a blocking pod-resources client, for tests that ask fake-kubelet and a
//!   real kubelet the same questions.
//! - [`listing`]: the scenario's pods, containers and device ids as `List` answers them.
//! - [`procfs`]: a fake `/proc/<pid>/{cgroup,stat}` for the scenario's GPU processes, in
//!   the scenario's cgroup flavour.
//! - [`pod_logs`]: a `/var/log/pods`-style tree naming the scenario's pods.
//! - [`slices`]: the ResourceSlice the node's DRA driver would publish, for in-test API
//!   servers.
//! - [`join`]: simulated nodes that join a real API server (`fake-kubelet join`): the
//!   Node registered and kept Ready, bound pods run with devices, processes and load.
//!
//! The scenario is the same file the simulated NVML library reads, so PIDs, device ids
//! and pods agree between the two.

#![forbid(unsafe_code)]

pub mod client;
pub mod join;
pub mod listing;
pub mod pod_logs;
pub mod procfs;
pub mod proto;
pub mod server;
pub mod slices;

use std::path::Path;

use fake_nvml::scenario::Scenario;

pub use server::{KubeletServer, Lister};

/// A lister answering for `scenario` on node `node` (the DRA driver's pool is named after
/// it).
pub fn lister(scenario: &Scenario, node: &str) -> Lister {
    Lister::new(listing::pod_resources(scenario, node), listing::allocatable(scenario))
}

/// Everything the exporter reads besides NVML, for one scenario on node `node`: the
/// socket served, and the procfs and pod log trees written, under `dir` (`kubelet.sock`,
/// `proc/`, `pods/`).
pub fn start_in(scenario: &Scenario, node: &str, dir: &Path) -> anyhow::Result<KubeletServer> {
    procfs::write_tree(scenario, &dir.join("proc"))?;
    pod_logs::write_tree(scenario, &dir.join("pods"))?;
    Ok(KubeletServer::start(dir.join("kubelet.sock"), lister(scenario, node))?)
}
