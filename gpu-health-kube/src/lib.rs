//! The health loop's Kubernetes edge and its driver: reads and writes the Node
//! ([`actions`]), the circuit breaker's ConfigMap ([`breaker`]), DeviceTaintRules
//! ([`device_rules`]), retries ([`retry`]), the flags ([`config`]), why a reconcile
//! failed ([`error`]), and the loop ([`driver`]) that feeds the pure core
//! (`gpu-health`) and acts on its plan. It depends on the core, never the reverse;
//! the exporter hands it a watch of anything that yields an
//! [`Observation`](gpu_health::observation::Observation) (a [`Source`]).
//!
//! The health loop: takes the exporter's own node out of scheduling when its GPUs
//! are broken, and puts it back when they have recovered, without flapping, without
//! fighting admins and without cordoning half the cluster.
//!
//! ```text
//! Observation ──assess──> Assessment ──policy──> Verdict ──plan(Node)──> patches, Events ──> API server
//!  (exporter)            (signals.rs)           (policy.rs)  (plan.rs)          (actions.rs, breaker.rs)
//! ```
//! - Checks run every `--health.check-interval` (`CHECK_INTERVAL`), and at once when
//!   a snapshot brings a new XID or a newly lost GPU.
//! - Each check ends in a reconcile: read the Node, plan the writes that make it
//!   match the verdict (nothing when it already does), ask the circuit breaker before
//!   a new quarantine, write, and on a 409 read and plan again. A failed reconcile is
//!   retried with backoff until it succeeds; it never runs twice for one change
//!   because the plan is computed from the Node as it is.
//! - Before the first check the loop reads its claim back from the Node, so a
//!   restart neither lifts nor re-applies anything.
//! - `--kubernetes.api` means the same here as for the pod watch: `off` and the
//!   process never builds a Kubernetes client, so the loop runs **report-only** (it
//!   evaluates, logs and exports its verdict, and writes nothing anywhere); `auto`
//!   and it uses `--kubernetes.kubeconfig`, else the in-cluster service account,
//!   `KUBECONFIG` or `~/.kube/config`. Without any of those the loop is report-only
//!   too. `gpu_health_mode_info{api}` says which (`off`, `report_only`).
//! - A reconcile that fails says why: the node (or the breaker's ConfigMap) changed
//!   under every attempt (409s), the API server refused the request (403, 422, ...),
//!   or it could not be reached (no answer, 429, 5xx): only the last is "Kubernetes
//!   API unavailable".
//! - API load: a settled node reads only its own Node per check; a node the breaker
//!   holds back also reads the breaker's ConfigMap, and lists the GPU nodes only
//!   when its last listing is older than ten checks or a place looks free (see
//!   [`breaker`]).
//! - GPUs held one by one get DeviceTaintRules ([`device_rules`]; the loop's steps for
//!   them are in `gpus.rs`): the first reconcile asks which `resource.k8s.io` version
//!   serves them and takes back the GPUs its rules hold; a node with a GPU held alone
//!   lists its rules (from the cache) at each check; creates and value changes go
//!   before the node patch, deletes after it; a rule the API server refuses (403, 422,
//!   a foreign rule under the loop's name) makes the policy hold the node instead,
//!   until the exporter restarts, and the condition says why.

#![forbid(unsafe_code)]

pub mod actions;
pub mod breaker;
pub mod config;
pub mod device_rules;
mod driver;
pub mod error;
mod gpus;
mod parts;
pub mod retry;

pub use driver::{HealthHandle, Source, start_offline, start_with_config};
pub use error::{Cause, HealthError, Result};
