//! `kubectl gpu rightsize`: from what each workload used over a window to the device it
//! should have, the dollars that frees, and the MIG layout that applies it.
//!
//! ```text
//! pods ──> workload (owners) ─┐
//! Prometheus answers ──> history ──> Observed (per workload) ──> recommend ──> Recommendation ──> price (Saving, Totals)
//!                               │ catalog (models, MIG profiles, placements)
//!                               └──> plan (per node: MIG layouts, GPUs freed) ──> mig_parted (config)
//! ```
//! All of it is pure: the window's figures come in as plain data; `history` writes the
//! PromQL and reads the answers, `crate::api::prometheus` sends them. The rules are written down in
//! docs/kubectl-gpu.md, "rightsize: the rules".

pub mod catalog;
pub mod history;
pub mod mig_parted;
pub mod plan;
pub mod price;
pub mod recommend;
pub mod workload;
