//! gpu-exporter: GPU telemetry for Kubernetes nodes.
//!
//! Data flows one way: NVML ([`nvml`]) -> one collection cycle ([`collect`]) ->
//! [`snapshot::Snapshot`] -> [`render`] -> `/metrics` ([`server`]). Collection runs on
//! its own schedule; a scrape renders the latest snapshot and never waits on NVML.

pub mod collect;
pub mod config;
pub mod health;
pub mod nvml;
pub mod render;
pub mod server;
pub mod snapshot;
