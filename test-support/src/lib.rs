//! Helpers the workspace's integration tests share, so that no crate's tests carry a
//! copy of another's: a test certificate authority ([`pki`]), a TLS client
//! configuration ([`tls`]), every rendering of the `deploy/` manifests ([`deploy`]), an
//! in-test Kubernetes API server ([`apiserver`]), typed Kubernetes objects for it
//! ([`cluster`]), the health loop's scripted API server ([`fake_api`]), simulated GPU
//! nodes and the metrics adapter as processes behind it ([`simulated`]), and loopback
//! connection attacks on a serving edge ([`attack`]). A dev-dependency only; nothing
//! here ships.
//!
//! Two Kubernetes fakes live here (the adapter's copy and the exporter's node-scoped
//! one were folded into [`apiserver`]). They are to become one; until then:
//! [`apiserver`] serves typed objects with RBAC from the manifests, the pod watch with
//! selectors, history, delete events and `410 Gone`, a node's ResourceSlices, the
//! proxies and aggregated APIs, TokenReview, SubjectAccessReview and the adapter's
//! Secrets and APIServices; [`fake_api`] checks scripted writes (expected requests in
//! order, injected failures, strategic and JSON merge patches, `resourceVersion` and UID
//! preconditions, DeviceTaintRules). [`fake_api`] is not merged yet because
//! [`apiserver`] serves no writes to nodes, pods or DeviceTaintRules: it has no patch
//! semantics and no queue of expected writes, and the health loop's tests assert on
//! both. None of those properties needs its own server; what is missing is one state
//! behind one router.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod apiserver;
pub mod attack;
pub mod cluster;
pub mod deploy;
pub mod fake_api;
pub mod pki;
pub mod simulated;
pub mod tls;
