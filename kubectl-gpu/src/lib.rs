//! `kubectl gpu`: the `nvidia-smi` of a cluster. Every GPU node, GPU, MIG instance and
//! GPU pod with its readings, health and cost (`nodes`, `gpus`, `pods`, `cost`), and the
//! device each workload should have (`rightsize`), read through the API server: nodes,
//! pods and the prices ConfigMap from the core API, each node's exporter page through the
//! pods `proxy` subresource, per-pod aggregates from the custom metrics API, and a
//! Prometheus' history through the services `proxy` subresource. The one read that
//! bypasses the API server is a Prometheus the user names with `--prometheus-url`.
//!
//! ```text
//! api (edge)  ──nodes, pods, ConfigMap──┐
//!             ──pods/proxy /metrics ──> readings ──> fleet ──> share, cost ──> views ──> table / json / yaml
//!             ──custom.metrics.k8s.io ──────────────────────────────────────────┘          (output, terminal)
//!             ──services/proxy (Prometheus) ──> rightsize ──────────────────────┘
//! ```
//! Everything from `readings` to `output`, and `rightsize`, is pure and unit-tested
//! without I/O; `api`, `terminal` and `app` are the thin edge. Pages are parsed as they
//! arrive and cut at the adapter's limits (`page`); outside text reaches the terminal
//! only through `sanitize`, in table cells and warnings. Prices come from one table
//! (`prices`, `alerts/gpu-prices.yaml` compiled in), from which the `gpu-cost` recording
//! rules are generated too (`rules`), so that Prometheus and `cost` price alike. Design
//! notes: `docs/kubectl-gpu.md`.

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
