//! The adapter's own serving certificate, provisioned without cert-manager: a CA and a
//! serving pair kept in one Secret that every replica shares, rotated before they expire,
//! with the CA bundle written into the APIServices' `caBundle` so the aggregator verifies
//! the adapter instead of skipping verification.
//!
//! - [`material`]: what the Secret holds, read and checked with `x509-parser`.
//! - [`plan`]: the pure rotation policy (when to renew, when to rotate the CA).
//! - [`sync`]: the API edge (create-once, resourceVersion-guarded updates, publishing).
//!
//! `docs/deploy.md` explains why this is the default and when cert-manager is the better
//! choice.

pub mod material;
pub mod plan;
pub mod sync;

pub use plan::Policy;
pub use sync::{Config, Manager};
