//! Helpers the workspace's integration tests share, so that no crate's tests carry a
//! copy of another's: a test certificate authority ([`pki`]), a TLS client
//! configuration ([`tls`]), every rendering of the `deploy/` manifests ([`deploy`]), the
//! in-test Kubernetes API server ([`apiserver`]: one state behind one router, for the
//! plugin, the adapter, the exporter and the health loop alike), typed Kubernetes
//! objects for it ([`cluster`]), simulated GPU nodes and the metrics adapter as
//! processes behind it ([`simulated`]), a real Prometheus and promtool of either major
//! version ([`prometheus`]), and loopback connection attacks on a serving edge
//! ([`attack`]). A dev-dependency only; nothing here ships.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod apiserver;
pub mod attack;
pub mod cluster;
pub mod deploy;
pub mod pki;
pub mod prometheus;
pub mod simulated;
pub mod tls;
