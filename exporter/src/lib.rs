//! gpu-exporter: GPU telemetry for Kubernetes nodes.
//!
//! Data flows one way: NVML ([`nvml`]) -> one collection cycle ([`collect`]) ->
//! [`snapshot::Snapshot`] -> [`render`] -> `/metrics` ([`server`], served by [`web`]).
//! Collection runs on its own schedule; a scrape renders the latest snapshot and never
//! waits on NVML. `main.rs` only parses configuration, sets up logging, runs, and maps
//! errors to exit codes.
//!
//! - [`attribution`]: which pod and container owns each GPU and MIG instance, and per-pod
//!   usage of shared GPUs, joined onto each snapshot from the kubelet, `/proc` and the API.
//! - [`web`]: the HTTP serving edge (exporter-toolkit `--web.config.file`: TLS, client
//!   certificates, basic auth, response headers) and the accept loop with graceful shutdown.
//!
//! Modules import downwards only, and `tests/module_cycles.rs` fails on any circle:
//! [`snapshot`] (plain data, attribution's result included) and [`exposition`] (the family
//! descriptions and our own text encoder) name no other module;
//! durations are read by the workspace's `flag-ranges` crate, so the flags of each part
//! ([`attribution`], [`health`]) need nothing from [`config`], which gathers them.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod attribution;
pub mod collect;
pub mod config;
pub mod exposition;
pub mod health;
pub mod kube_config;
pub mod nvml;
pub mod process_memory;
pub mod render;
pub mod server;
pub mod snapshot;
pub mod web;
