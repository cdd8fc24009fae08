//! The project's contract tests against a real Kubernetes control plane
//! (`scripts/cluster`, built from the Go modules `cluster/` pins). The tests are in
//! `tests/`:
//! - `node_joins.rs`: simulated GPU nodes register, their pods are scheduled, run and
//!   attributed by the exporters that run with `deploy/`'s identity;
//! - `aggregator.rs`: the adapter as a real aggregated API;
//! - `hpa.rs`: the seed's `inference-hpa` scaling `inference-pool` up and down;
//! - `deploy_apply.rs`: `deploy/` applied server-side, admission policies type-checked;
//! - `health.rs`: the health loop on real Nodes with `deploy/`'s identity, roles and
//!   admission policies (dry run, the policy's refusals, enforce, an admin's cordon,
//!   recovery, three nodes racing for the breaker);
//! - `dra.rs`: a ResourceSlice and an allocated ResourceClaim attributed by the exporter,
//!   XID 79 on the claimed GPU as a DeviceTaintRule at `v1`, and at `v1beta2` where `v1`
//!   does not serve them;
//! - `kubectl_gpu.rs`: every `kubectl gpu` view with the viewer roles of `deploy/`,
//!   through the real pods and services proxies, and the refusals of users without them.
//!
//! `benches/hpa_reaction.rs` times the HPA's reaction to a load step through both of the
//! adapter's sources. The same stack runs in `scripts/demo` (test-support's
//! `cluster-demo`).
#![forbid(unsafe_code)]
