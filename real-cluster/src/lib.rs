//! The project's contract tests against a real Kubernetes control plane
//! (`scripts/cluster`, built from the Go modules `cluster/` pins). The tests are in
//! `tests/`:
//! - `node_joins.rs`: simulated GPU nodes register, their pods are scheduled, run and
//!   attributed by the exporters that run with `deploy/`'s identity;
//! - `aggregator.rs`: the adapter as a real aggregated API;
//! - `hpa.rs`: the seed's `inference-hpa` scaling `inference-pool` up and down;
//! - `deploy_apply.rs`: `deploy/` applied server-side, admission policies type-checked;
//! - `kubectl_gpu.rs`: every `kubectl gpu` view with the viewer roles of `deploy/`,
//!   through the real pods and services proxies, and the refusals of users without them.
//!
//! `benches/hpa_reaction.rs` times the HPA's reaction to a load step through both of the
//! adapter's sources. The same stack runs in `scripts/demo` (test-support's
//! `cluster-demo`).
#![forbid(unsafe_code)]
