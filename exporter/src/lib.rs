//! gpu-exporter: GPU telemetry for Kubernetes nodes, and the node's GPU health loop.
//!
//! Data flows one way: NVML ([`nvml`]) -> one collection cycle ([`collect`]) ->
//! [`snapshot::Snapshot`] -> [`render`] -> `/metrics` ([`server`]'s routes, served by
//! [`web`]). Collection runs on its own schedule; a scrape renders the latest snapshot and
//! never waits on NVML. `main.rs` only parses configuration, sets up logging, runs, and
//! maps errors to exit codes.
//!
//! - [`attribution`]: which pod and container owns each GPU and MIG instance, and per-pod
//!   usage of shared GPUs, joined onto each snapshot from the kubelet's pod-resources API
//!   (device plugin and DRA), ResourceSlices, the pod watch and `/proc`.
//! - [`render`]: the families in our naming, dcgm-exporter's or both
//!   (`--metrics.naming`); prometheus-client writes ours and the health loop's, our own
//!   encoder ([`exposition`]) dcgm-exporter's (docs/design.md says why).
//! - [`health`]: the exporter's side of the health loop, whose core and Kubernetes edge
//!   are the `gpu-health` and `gpu-health-kube` crates: the snapshot as the loop's
//!   observation, the loop's metric families, and starting it.
//! - [`web`]: the exporter-toolkit `--web.config.file` (TLS, client certificates, basic
//!   auth, response headers, rate limit) around the routes; the accept loop, TLS serving
//!   and graceful shutdown are the shared edge's (`https-edge`).
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
