//! The HTTP API: discovery, metrics reads, errors as metav1.Status.
pub mod path;
pub mod types;
