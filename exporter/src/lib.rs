//! gpu-exporter: GPU telemetry for Kubernetes nodes.
//!
//! The library holds everything the `gpu-exporter` binary runs; `main.rs` only parses
//! configuration, sets up logging and maps errors to exit codes.
//!
//! - [`web`]: the HTTP serving edge (exporter-toolkit `--web.config.file`: TLS, client
//!   certificates, basic auth, response headers) and the accept loop with graceful shutdown.

pub mod web;
