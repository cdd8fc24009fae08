//! Metric sources: the direct exporter scraper and the Prometheus query source.
pub mod direct;
