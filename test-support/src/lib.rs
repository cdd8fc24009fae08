//! Helpers the workspace's integration tests share, so that no crate's tests carry a
//! copy of another's: a test certificate authority ([`pki`]), a TLS client
//! configuration ([`tls`]), every rendering of the `deploy/` manifests ([`deploy`]), the
//! API server the exporter's node-scoped watches talk to ([`kube_api`]), an in-test
//! Kubernetes API server ([`apiserver`]), typed Kubernetes objects for it ([`cluster`]),
//! the health loop's scripted API server ([`fake_api`]), and simulated GPU nodes and
//! the metrics adapter as processes behind it ([`simulated`]), and loopback connection
//! attacks on a serving edge ([`attack`]). A dev-dependency only; nothing here ships.
//!
//! Three Kubernetes fakes live here (the adapter's tests use [`apiserver`] since their
//! own copy was folded into it). They are to become one; until then: [`kube_api`]
//! replays watch history with `410 Gone` (as [`apiserver`]'s pod watch now does too),
//! [`apiserver`] serves typed objects with RBAC from the manifests, the proxies and
//! aggregated APIs, TokenReview, SubjectAccessReview and the adapter's Secrets and
//! APIServices, and [`fake_api`] checks scripted writes (expected requests, injected
//! failures, patch types, `resourceVersion` conflicts). None of those properties needs
//! its own server; what is missing is one state behind one router.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod apiserver;
pub mod attack;
pub mod cluster;
pub mod deploy;
pub mod fake_api;
pub mod kube_api;
pub mod pki;
pub mod simulated;
pub mod tls;
