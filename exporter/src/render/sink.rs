//! The interface the family renderers write through, so each family is described once
//! and either encoder (ours in [`crate::exposition`], or prometheus-client in
//! `render::client`) can serve it.
//!
//! A family hands its samples over in one closure rather than one call per sample:
//! prometheus-client's `MetricEncoder` borrows the descriptor encoder for as long as the
//! family is being written, so the family must be open and closed around its samples.
//! The renderers take `&mut dyn Exposition` so they are compiled once, not once per
//! encoder (code size is most of the exporter's resident memory).

use super::labels::LabelSet;
use crate::exposition::{Encoder, Family};

/// Something that writes families.
pub trait Exposition {
    /// Writes `family` with the samples `samples` produces; a family that produces none
    /// leaves no trace (no `# HELP` / `# TYPE` either).
    fn emit(&mut self, family: &Family, samples: &mut dyn FnMut(&mut dyn Samples));
}

/// Receives the samples of the family being written.
pub trait Samples {
    /// One sample: the shared label set, then the sample's own pairs.
    fn sample(&mut self, labels: &LabelSet, extra: &[(&str, &str)], value: f64);
}

impl Exposition for Encoder<'_> {
    fn emit(&mut self, family: &Family, samples: &mut dyn FnMut(&mut dyn Samples)) {
        self.family(family);
        samples(self);
    }
}

impl Samples for Encoder<'_> {
    fn sample(&mut self, labels: &LabelSet, extra: &[(&str, &str)], value: f64) {
        Encoder::sample(self, labels.escaped(), extra, value);
    }
}
