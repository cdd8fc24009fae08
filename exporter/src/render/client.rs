//! prometheus-client as the encoder of the exporter's own families.
//!
//! Nothing is registered ahead of time and nothing is updated per cycle: each render
//! registers one [`Collector`] that shares the snapshot and the sections (the health
//! loop's families) and encodes every family from them on demand through
//! prometheus-client's `DescriptorEncoder`. The crate writes
//! both formats a scraper can ask for (OpenMetrics 1.0 through `encoding::text`, text
//! 0.0.4 through `encoding::prometheus_text`), so it serves both here.
//!
//! Values: integral values are handed over as integers, so `3` stays `3` rather than
//! `3.0`; others as `f64`, which the crate writes with `dtoa`.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet, prometheus_text, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::labels::{LabelSet, Series};
use super::sink::{Exposition, Samples};
use super::{RenderContext, Section, Sections, write_all};
use crate::exposition::{Family, Format, Kind};
use crate::snapshot::Snapshot;

/// Appends the families of `snapshot` and `sections` to `out`, without OpenMetrics'
/// `# EOF` (the caller closes the exposition).
pub(super) fn encode(
    snapshot: &Arc<Snapshot>,
    ctx: &RenderContext,
    sections: &Sections,
    format: Format,
    out: &mut String,
) -> fmt::Result {
    let mut registry = Registry::default();
    // The registry wants a 'static collector: it shares the snapshot rather than copy it.
    let families = SnapshotFamilies { snapshot: snapshot.clone(), ctx: ctx.clone(), sections: sections.to_vec() };
    registry.register_collector(Box::new(families));
    match format {
        Format::OpenMetrics => text::encode_registry(out, &registry),
        Format::PrometheusText => prometheus_text::encode(out, &registry),
    }
}

/// Encodes every family of one snapshot, then the sections', when the registry is encoded.
#[derive(Debug)]
struct SnapshotFamilies {
    snapshot: Arc<Snapshot>,
    ctx: RenderContext,
    sections: Vec<Arc<dyn Section>>,
}

impl Collector for SnapshotFamilies {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut exposition = ClientExposition { descriptors: &mut encoder, result: Ok(()) };
        write_all(&mut exposition, &self.snapshot, &self.ctx, &self.sections);
        exposition.result
    }
}

/// [`Exposition`] over prometheus-client; keeps the first encoding error.
struct ClientExposition<'e, 'a> {
    descriptors: &'e mut DescriptorEncoder<'a>,
    result: fmt::Result,
}

impl Exposition for ClientExposition<'_, '_> {
    fn emit(&mut self, family: &Family, samples: &mut dyn FnMut(&mut dyn Samples)) {
        if self.result.is_err() {
            return;
        }
        let (name, unit) = split_unit(family);
        let mut sink = FamilySamples {
            descriptors: Some(&mut *self.descriptors),
            metric: None,
            family,
            name,
            unit: unit.as_ref(),
            result: Ok(()),
        };
        samples(&mut sink);
        self.result = sink.result;
    }
}

/// The samples of one family. The descriptor (`# HELP`, `# TYPE`, `# UNIT`) is written
/// with the first sample, so a family without samples leaves no trace.
struct FamilySamples<'s, 'a> {
    descriptors: Option<&'s mut DescriptorEncoder<'a>>,
    metric: Option<MetricEncoder<'s>>,
    family: &'s Family,
    name: &'s str,
    unit: Option<&'s Unit>,
    result: fmt::Result,
}

impl FamilySamples<'_, '_> {
    fn write(&mut self, labels: &LabelSet, extra: &[(&str, &str)], value: f64) -> fmt::Result {
        if let Some(descriptors) = self.descriptors.take() {
            let kind = metric_type(self.family.kind);
            self.metric = Some(descriptors.encode_descriptor(self.name, self.family.help, self.unit, kind)?);
        }
        let metric = self.metric.as_mut().ok_or(fmt::Error)?;
        let series = Series { set: labels, extra };
        match (self.family.kind, integral(value)) {
            // Info samples are always 1; the crate writes the value itself.
            (Kind::Info, _) => metric.encode_info(&series),
            (Kind::Counter, Some(n)) if n >= 0 => {
                metric.encode_family(&series)?.encode_counter::<NoLabelSet, _, u64>(&n.unsigned_abs(), None)
            }
            (Kind::Counter, _) => metric.encode_family(&series)?.encode_counter::<NoLabelSet, _, u64>(&value, None),
            // Typed `unknown` (see `Kind::BareCounter`); dcgm-exporter's families, the
            // only ones, are written by our encoder, so this serves only completeness.
            (Kind::BareCounter, _) => metric.encode_family(&series)?.encode_gauge(&value),
            (Kind::Gauge, Some(n)) => metric.encode_family(&series)?.encode_gauge(&n),
            (Kind::Gauge, None) => metric.encode_family(&series)?.encode_gauge(&value),
        }
    }
}

impl Samples for FamilySamples<'_, '_> {
    fn sample(&mut self, labels: &LabelSet, extra: &[(&str, &str)], value: f64) {
        if self.result.is_ok() {
            self.result = self.write(labels, extra, value);
        }
    }
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Gauge => MetricType::Gauge,
        Kind::Counter => MetricType::Counter,
        Kind::Info => MetricType::Info,
        Kind::BareCounter => MetricType::Unknown,
    }
}

/// The value as an integer where it is one and exactly representable, as our encoder
/// writes it.
fn integral(value: f64) -> Option<i64> {
    (value.fract() == 0.0 && value.abs() < 1e15).then_some(value as i64)
}

/// prometheus-client appends `_<unit>` to the name itself; our family names carry it.
fn split_unit(family: &Family) -> (&'static str, Option<Unit>) {
    let stem = family.unit.and_then(|unit| family.name.strip_suffix(unit)?.strip_suffix('_'));
    match (stem, family.unit) {
        (Some(stem), Some(unit)) => (stem, Some(unit_of(unit))),
        _ => (family.name, None),
    }
}

fn unit_of(unit: &str) -> Unit {
    match unit {
        "bytes" => Unit::Bytes,
        "celsius" => Unit::Celsius,
        "joules" => Unit::Joules,
        "seconds" => Unit::Seconds,
        other => Unit::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::families::ALL;

    #[test]
    fn every_unit_is_a_suffix_of_its_family_name() {
        for family in ALL.iter().filter(|f| f.unit.is_some()) {
            let (stem, unit) = split_unit(family);
            let unit = unit.expect(family.name);
            assert_eq!(format!("{stem}_{}", unit.as_str()), family.name);
        }
    }

    #[test]
    fn integral_values_are_written_as_integers() {
        assert_eq!(integral(3.0), Some(3));
        assert_eq!(integral(0.25), None);
        assert_eq!(integral(1e20), None);
        assert_eq!(integral(f64::NAN), None);
    }
}
