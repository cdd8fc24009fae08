//! gpu-metrics-adapter: a Kubernetes aggregated API server for `custom.metrics.k8s.io`.
pub mod api;
pub mod app;
pub mod auth;
pub mod certs;
pub mod config;
pub mod expfmt;
pub mod http_client;
pub mod labels;
pub mod quantity;
pub mod selector;
pub mod server;
pub mod source;
