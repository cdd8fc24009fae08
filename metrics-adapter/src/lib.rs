//! gpu-metrics-adapter: a Kubernetes aggregated API server for `custom.metrics.k8s.io`
//! (v1beta1 and v1beta2) and `external.metrics.k8s.io` (v1beta1) that feeds the
//! HorizontalPodAutoscaler with GPU metrics, and with application and external metrics
//! from Prometheus through this project's rules or prometheus-adapter's configuration.
//!
//! Data flows one way:
//!
//! ```text
//! exporters ──scrape──> exposition-parser ──> source::direct::model (Report → Snapshot) ─┐
//! Prometheus <──PromQL── source::prometheus (rules; series relist) ────────────┤
//! API discovery ──> catalog (resources prometheus-adapter rules name) ─────────┤
//! pod/node metadata watch ──> labels ──┬─> objects (what exists) ──────────────┤
//! other kinds: discovery, paged list ──┘
//!                                                                             v
//! client ──TLS──> server ──> api (auth::authn → path → auth::authz → read) ──> MetricValueList
//!                                                   (api::external) ──> ExternalMetricValueList
//! ```
//!
//! Pure cores (selector, quantity, the direct-source model, API types and paths,
//! rules rendering) do no I/O and are unit-tested; HTTP, TLS and the Kubernetes API live
//! at the edges (`server`, `http_client`, `labels`, `objects`, `auth::authn`/`authz`, `app`).

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod certs;
pub mod check;
pub mod config;
pub mod http_client;
pub mod labels;
pub mod objects;
pub mod quantity;
pub mod selector;
pub mod server;
pub mod serving_cert;
pub mod source;
