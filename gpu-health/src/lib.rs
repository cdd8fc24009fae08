//! The health loop's pure core: from an [`observation::Observation`] (one collection
//! cycle as plain data) to signals, a verdict, and the writes that make the Node
//! match it.
//!
//! ```text
//! Observation ──signals──> Assessment ──policy──> Verdict ──plan(NodeView, rules)──> patches, rules, Events
//! ```
//! The verdict ([`verdict`]: its reasons, latches and held GPUs) holds GPUs one by one
//! where it can ([`policy`]): the plan then writes a DeviceTaintRule per DRA device of
//! each held GPU ([`device_rules`]) instead of cordoning the node, and the node only
//! where a single GPU cannot be kept from the scheduler (a device plugin, no device
//! taints served) or the fault is node-wide.
//! Nothing here does I/O or reads a clock: the Kubernetes edge (`gpu-health-kube`)
//! reads the Node, asks the breaker's ConfigMap, writes, and drives the loop; the
//! exporter fills the observation from its snapshot. The Node is read through
//! k8s-openapi's types only (plain data, no client), so the plan and the node state
//! it reads stay here and are unit-tested without an API server.

#![forbid(unsafe_code)]

pub mod breaker;
pub mod device_rules;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod fixtures;
pub mod names;
pub mod node_state;
pub mod observation;
pub mod plan;
pub mod policy;
pub mod signals;
pub mod time;
pub mod verdict;
pub mod view;
pub mod xid;
