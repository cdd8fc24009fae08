//! Authentication and authorization, as an aggregated API server does them.
pub mod x509;
