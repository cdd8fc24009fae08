//! The direct source: scrapes the GPU exporters and serves their values.
pub mod model;
