//! Low-level writer for the two exposition formats a scraper can ask for.
//!
//! A leaf: it names no other module of the crate, so both the exporter's own families
//! ([`crate::render`]) and the health loop's (`health::metrics`) describe themselves with
//! its [`Family`] without either reaching into the other. Every family is written by
//! prometheus-client by default (`render::Encoding`, docs/design.md); this encoder is
//! `Encoding::Ours` and the reference the render tests compare against.
//!
//! Prometheus text 0.0.4 and OpenMetrics 1.0 differ only in a few places, all handled
//! here: a counter's `# TYPE` names the family without `_total` in OpenMetrics but with
//! it in 0.0.4; `info` is a type of its own in OpenMetrics and a gauge in 0.0.4;
//! `# UNIT` exists only in OpenMetrics; OpenMetrics ends with `# EOF`.

use std::fmt::Write as _;

/// The wire format of a scrape response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    PrometheusText,
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// Picks the format from an `Accept` header: OpenMetrics when the scraper lists it
    /// (Prometheus does, with a higher q-value, when it supports it), text otherwise.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|part| {
                let mut params = part.split(';').map(str::trim);
                let media = params.next().unwrap_or_default();
                let q_zero = params.any(|p| p.replace(' ', "") == "q=0");
                media.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
            })
        });
        if wants_openmetrics { Format::OpenMetrics } else { Format::PrometheusText }
    }
}

/// The metric type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Samples carry the `_total` suffix; the family name given here does not.
    Counter,
    /// Samples carry the `_info` suffix and the value 1; the family name does not.
    Info,
    /// A counter whose samples keep the family name, without `_total`: names fixed by
    /// another exporter's contract (dcgm-exporter's `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`).
    /// Text 0.0.4 types it `counter`, as that exporter does. OpenMetrics requires
    /// `_total` on every counter sample, so there it is typed `unknown`, which keeps the
    /// sample name the same in both formats (queries do not see the type).
    BareCounter,
}

/// Static description of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// Without `_total` / `_info`.
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// OpenMetrics unit; only given when `name` ends with `_<unit>`.
    pub unit: Option<&'static str>,
}

impl Family {
    pub const fn gauge(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
        Family { name, kind: Kind::Gauge, help, unit }
    }

    pub const fn counter(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
        Family { name, kind: Kind::Counter, help, unit }
    }

    pub const fn info(name: &'static str, help: &'static str) -> Family {
        Family { name, kind: Kind::Info, help, unit: None }
    }

    pub const fn bare_counter(name: &'static str, help: &'static str) -> Family {
        Family { name, kind: Kind::BareCounter, help, unit: None }
    }

    /// The name samples are written with.
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Gauge | Kind::BareCounter => self.name.to_string(),
            Kind::Counter => format!("{}_total", self.name),
            Kind::Info => format!("{}_info", self.name),
        }
    }
}

/// Appends families and samples to a string buffer. A family's header is written with
/// its first sample, so families without samples leave no trace.
#[derive(Debug)]
pub struct Encoder<'a> {
    out: &'a mut String,
    format: Format,
    /// The family being written, and whether its header is out yet.
    family: Option<(Family, bool)>,
    /// The sample name of the family being written.
    current: String,
}

impl<'a> Encoder<'a> {
    pub fn new(out: &'a mut String, format: Format) -> Self {
        Encoder { out, format, family: None, current: String::new() }
    }

    /// Makes `family` current; its header is written with its first sample.
    pub fn family(&mut self, family: &Family) {
        self.current = family.sample_name();
        self.family = Some((*family, false));
    }

    fn header(&mut self, family: &Family) {
        let (type_name, type_word) = match (self.format, family.kind) {
            (Format::OpenMetrics, Kind::Gauge) => (family.name.to_string(), "gauge"),
            (Format::OpenMetrics, Kind::Counter) => (family.name.to_string(), "counter"),
            (Format::OpenMetrics, Kind::Info) => (family.name.to_string(), "info"),
            (Format::OpenMetrics, Kind::BareCounter) => (family.name.to_string(), "unknown"),
            (Format::PrometheusText, Kind::BareCounter) => (family.name.to_string(), "counter"),
            (Format::PrometheusText, Kind::Gauge) => (family.name.to_string(), "gauge"),
            (Format::PrometheusText, Kind::Counter) => (self.current.clone(), "counter"),
            (Format::PrometheusText, Kind::Info) => (self.current.clone(), "gauge"),
        };
        let _ = writeln!(self.out, "# HELP {type_name} {}", escape_help(family.help));
        let _ = writeln!(self.out, "# TYPE {type_name} {type_word}");
        if let (Format::OpenMetrics, Some(unit)) = (self.format, family.unit) {
            let _ = writeln!(self.out, "# UNIT {type_name} {unit}");
        }
    }

    /// Writes one sample of the current family. `labels` is an already escaped
    /// `a="x",b="y"` list (may be empty); `extra` are more pairs, escaped here.
    pub fn sample(&mut self, labels: &str, extra: &[(&str, &str)], value: f64) {
        if let Some((family, false)) = self.family {
            self.header(&family);
            self.family = Some((family, true));
        }
        self.out.push_str(&self.current);
        if !labels.is_empty() || !extra.is_empty() {
            self.out.push('{');
            self.out.push_str(labels);
            let mut first = labels.is_empty();
            for (name, value) in extra {
                if !first {
                    self.out.push(',');
                }
                first = false;
                push_label(self.out, name, value);
            }
            self.out.push('}');
        }
        self.out.push(' ');
        push_value(self.out, value);
        self.out.push('\n');
    }

    /// Closes the exposition (OpenMetrics needs `# EOF`).
    pub fn finish(self) {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
    }
}

/// Appends `name="escaped value"`.
pub fn push_label(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

fn push_value(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENERGY: Family =
        Family { name: "gpu_energy_consumption_joules", kind: Kind::Counter, help: "Energy.", unit: Some("joules") };

    fn render(format: Format, family: &Family, value: f64) -> String {
        let mut out = String::new();
        let mut enc = Encoder::new(&mut out, format);
        enc.family(family);
        let mut gpu = String::new();
        push_label(&mut gpu, "gpu", "0");
        enc.sample(&gpu, &[("pod", "a\"b\\c\nd")], value);
        enc.finish();
        out
    }

    #[test]
    fn counter_type_line_differs_by_format() {
        let text = render(Format::PrometheusText, &ENERGY, 12.5);
        assert!(text.contains("# TYPE gpu_energy_consumption_joules_total counter\n"), "{text}");
        assert!(!text.contains("# UNIT"));
        assert!(!text.contains("# EOF"));
        let om = render(Format::OpenMetrics, &ENERGY, 12.5);
        assert!(om.contains("# TYPE gpu_energy_consumption_joules counter\n"), "{om}");
        assert!(om.contains("# UNIT gpu_energy_consumption_joules joules\n"), "{om}");
        assert!(om.ends_with("# EOF\n"));
        assert!(om.contains("gpu_energy_consumption_joules_total{gpu=\"0\",pod=\"a\\\"b\\\\c\\nd\"} 12.5\n"), "{om}");
    }

    #[test]
    fn info_is_a_gauge_in_text_format() {
        let info = Family { name: "gpu", kind: Kind::Info, help: "h", unit: None };
        assert!(render(Format::PrometheusText, &info, 1.0).contains("# TYPE gpu_info gauge\n"));
        assert!(render(Format::OpenMetrics, &info, 1.0).contains("# TYPE gpu info\n"));
    }

    #[test]
    fn a_bare_counter_keeps_its_name_in_both_formats() {
        let replays = Family::bare_counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.");
        let text = render(Format::PrometheusText, &replays, 3.0);
        assert!(text.contains("# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n"), "{text}");
        assert!(text.contains("\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\""), "{text}");
        let om = render(Format::OpenMetrics, &replays, 3.0);
        assert!(om.contains("# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER unknown\n"), "{om}");
        assert!(om.contains("\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\""), "{om}");
        assert!(!om.contains("_total"), "{om}");
    }

    #[test]
    fn values_are_written_compactly() {
        let mut out = String::new();
        for v in [3.0, 0.25, 85899345920.0, f64::NAN, f64::INFINITY, 1e20] {
            push_value(&mut out, v);
            out.push(' ');
        }
        assert_eq!(out, "3 0.25 85899345920 NaN +Inf 100000000000000000000 ");
    }

    #[test]
    fn negotiation_prefers_openmetrics_when_listed() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        // Prometheus 3 (3.16's header, as it came): UTF-8 escaping parameters and text
        // 1.0.0 besides; our names are all legacy ones, so OpenMetrics 1.0.0 as before.
        let prometheus_3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3";
        assert_eq!(Format::negotiate(Some(prometheus_3)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::PrometheusText);
        assert_eq!(Format::negotiate(None), Format::PrometheusText);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text; q=0")), Format::PrometheusText);
    }
}
