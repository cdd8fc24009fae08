//! `kubectl gpu`: the `nvidia-smi` of a cluster. Every GPU node, GPU, MIG instance and
//! GPU pod with its readings, health and cost, read through the API server only: nodes
//! and pods from the core API, each node's exporter page through the pods `proxy`
//! subresource, per-pod aggregates from the custom metrics API.
//!
//! ```text
//! api (edge)  ──nodes, pods, ConfigMap──┐
//!             ──pods/proxy /metrics ──> readings ──> fleet ──> share, cost ──> views ──> table / json / yaml
//!             ──custom.metrics.k8s.io ──────────────────────────────────────────┘          (output, terminal)
//! ```
//! Everything from `readings` to `output` is pure and unit-tested without I/O; `api`,
//! `terminal` and `app` are the thin edge. Pages are parsed as they arrive and cut at
//! the adapter's limits (`page`); outside text reaches the terminal only through
//! `sanitize`, in table cells and warnings. Design notes: `docs/kubectl-gpu.md`.

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod cli;
pub mod cluster;
pub mod cost;
pub mod fleet;
pub mod output;
pub mod page;
pub mod prices;
pub mod quantity;
pub mod readings;
pub mod rightsize;
pub mod rules;
pub mod sanitize;
pub mod share;
pub mod table;
pub mod terminal;
pub mod units;
pub mod views;
