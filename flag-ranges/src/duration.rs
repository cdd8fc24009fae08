//! The one duration syntax of the project: every duration flag of every binary, and the
//! exporter's web config (`rate_limit.interval`), read durations with [`parse_duration`].
//!
//! The syntax is jiff's "friendly" duration format, which reads both the Go form
//! (`time.ParseDuration`, the exporter-toolkit's YAML) and the Prometheus form the docs
//! and manifests use (`250ms`, `5s`, `1m30s`, `1h30m`, `43800h`). Three hand-written
//! parsers used to disagree on decimals and overflow; jiff is a maintained parser that
//! the binaries already link (Kubernetes timestamps go through it), so it replaced them.
//! Its duration parser costs about 12 KB of code on top of the jiff already linked
//! (release, thin LTO: a binary parsing a jiff `Timestamp` has 562,114 bytes of `.text`,
//! 574,197 when it also parses a duration), against the exporter's 11.7 MB.
//! The other candidates would each be a new dependency: `humantime` (2.4) also reads
//! months and years as fixed lengths (`1M` is 30.44 days); `go-parse-duration` (0.1.1)
//! is a port of Go's parser that returns signed nanoseconds.
//!
//! jiff's format is wider than Go's (`2 hours`, `1h, 30m`, `10:30:00`); this module
//! keeps to the compact form both Go and Prometheus write, so a web config or a flag
//! that Go would refuse is refused here too: only digits, `.`, a leading `+` and the
//! units `h`, `m`, `s`, `ms`, `us` (`µs`, `μs`), `ns` pass to jiff, which then checks
//! order, fractions and size. On top of that: `0` alone is zero (Go and Prometheus
//! accept it); a number without a unit is refused (does `60` mean seconds or minutes?),
//! except through [`parse_duration_or_seconds`] for the flags whose deployments always
//! wrote bare seconds; days are refused (Prometheus' `d` and `w`), as a day is not
//! always 24 hours; and Go's limit holds: at most 2562047h47m16.854775807s (`i64::MAX`
//! nanoseconds, about 292 years).

use std::time::Duration;

use jiff::fmt::friendly::SpanParser;

/// The longest duration accepted: Go's and Prometheus' limit, `i64::MAX` nanoseconds.
pub const LONGEST: Duration = Duration::new(9_223_372_036, 854_775_807);

/// What a refusal shows as the accepted form.
const EXAMPLES: &str = "250ms, 5s, 1m30s or 43800h";

/// Reads a duration.
///
/// Accepted: one or more `<number><unit>` with the largest unit first and each unit at
/// most once, such as `250ms`, `5s`, `1m30s`, `1h30m`, `43800h`; units `h`, `m`, `s`,
/// `ms`, `us` (or `µs`, `μs`), `ns`; a decimal fraction on the last number (`1.5h`,
/// `0.25s`), to the nanosecond; `0` alone; a leading `+`; surrounding spaces.
///
/// Refused, with a message naming the text: an empty text, a number without a unit
/// (`60`), a negative duration, any other unit (`1d`: write `24h`; `5 secs`), spaces or
/// other signs between the parts, units out of order or repeated (`1s1m`), and anything
/// longer than [`LONGEST`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    static PARSER: SpanParser = SpanParser::new();
    let trimmed = text.trim();
    let refuse = |reason: &dyn std::fmt::Display| format!("{text:?} is not a duration like {EXAMPLES}: {reason}");
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.is_empty() {
        return Err(refuse(&"it is empty"));
    }
    if trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(refuse(&format!("the number has no unit (for example {trimmed}s or {trimmed}ms)")));
    }
    if let Some(unit) = unknown_unit(trimmed) {
        return Err(refuse(&format!(
            "unknown unit {unit:?}; the units are h, m, s, ms, us, ns (a day is not always 24 hours: write 24h)"
        )));
    }
    let stray = trimmed
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (c == '+' && i == 0) || c.is_alphabetic()));
    if let Some((_, c)) = stray {
        let why = if c == '-' { "negative durations are not accepted".to_owned() } else { format!("unexpected {c:?}") };
        return Err(refuse(&why));
    }
    // Go writes micro as U+00B5 or U+03BC; jiff reads the first.
    let normalized = trimmed.replace('\u{3bc}', "\u{b5}");
    let duration = PARSER.parse_unsigned_duration(&normalized).map_err(|e| refuse(&e))?;
    if duration > LONGEST {
        return Err(format!(
            "{text:?} is too long: the longest duration is {} (about 292 years)",
            show_duration(LONGEST)
        ));
    }
    Ok(duration)
}

/// [`parse_duration`], and a bare whole number as seconds (`60`): the form of the
/// environment variables the health loop's first deployments set (`CHECK_INTERVAL=60`).
pub fn parse_duration_or_seconds(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(seconds) => parse_duration(&format!("{seconds}s")),
        Err(_) => parse_duration(text),
    }
}

/// The units of Go's `time.ParseDuration`, the ones passed on to jiff.
const UNITS: &[&str] = &["h", "m", "s", "ms", "us", "\u{b5}s", "\u{3bc}s", "ns"];

/// The first run of letters in `text` that is not one of [`UNITS`].
fn unknown_unit(text: &str) -> Option<&str> {
    text.split(|c: char| !c.is_alphabetic()).find(|label| !label.is_empty() && !UNITS.contains(label))
}

/// A duration the way the flags are written: `0s`, `250ms`, `5s`, `1m30s`, `43800h`;
/// [`parse_duration`] reads it back.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let parts = [(ms / 3_600_000, "h"), (ms / 60_000 % 60, "m"), (ms / 1000 % 60, "s"), (ms % 1000, "ms")];
    let text: String = parts.iter().filter(|(n, _)| *n > 0).map(|(n, unit)| format!("{n}{unit}")).collect();
    match (text.is_empty(), d.is_zero()) {
        (false, _) => text,
        (true, true) => "0s".into(),
        // Below a millisecond: no flag is that fine-grained, but say something true.
        (true, false) => format!("{}ns", d.as_nanos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_forms_the_docs_and_manifests_use() {
        for (text, want) in [
            ("250ms", ms(250)),
            ("500ms", ms(500)),
            ("1500ms", ms(1500)),
            ("5s", secs(5)),
            ("10s", secs(10)),
            ("90s", secs(90)),
            ("1m", secs(60)),
            ("1m30s", secs(90)),
            ("2m", secs(120)),
            ("1h30m", secs(5400)),
            ("2h", secs(7200)),
            ("8760h", secs(8760 * 3600)),
            ("43800h", secs(43800 * 3600)),
            ("87600h", secs(87600 * 3600)),
            ("0s", Duration::ZERO),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn go_forms_the_web_config_takes() {
        for (text, want) in [
            ("10ns", Duration::from_nanos(10)),
            ("250us", Duration::from_micros(250)),
            ("3\u{b5}s", Duration::from_micros(3)),
            ("3\u{3bc}s", Duration::from_micros(3)),
            ("+2s", secs(2)),
            ("1h2m3s4ms", Duration::new(3723, 4_000_000)),
            (" 5s ", secs(5)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn decimals_on_the_last_unit_to_the_nanosecond() {
        assert_eq!(parse_duration("1.5h"), Ok(secs(5400)));
        assert_eq!(parse_duration("0.25s"), Ok(ms(250)));
        assert_eq!(parse_duration("1m0.5s"), Ok(ms(60_500)));
        assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
        for text in ["1.5h30m", ".5s", "1.s", "0.0000000001s"] {
            assert!(parse_duration(text).is_err(), "{text} must be refused");
        }
    }

    #[test]
    fn refusals_name_the_text_and_say_why() {
        for (text, why) in [
            ("", "it is empty"),
            ("   ", "it is empty"),
            ("60", "the number has no unit (for example 60s or 60ms)"),
            ("1.5", "has no unit"),
            ("1d", "unknown unit \"d\"; the units are h, m, s, ms, us, ns (a day is not always 24 hours: write 24h)"),
            ("2w", "unknown unit \"w\""),
            ("1y", "unknown unit \"y\""),
            ("5 secs", "unknown unit \"secs\""),
            ("2hours", "unknown unit \"hours\""),
            ("5S", "unknown unit \"S\""),
            ("1e3s", "unknown unit \"e\""),
            ("fast", "unknown unit \"fast\""),
            ("5s ago", "unknown unit \"ago\""),
            ("-1s", "negative durations are not accepted"),
            ("1h 30m", "unexpected ' '"),
            ("1h, 30m", "unexpected ','"),
            ("10:30:00", "unexpected ':'"),
            ("1s+2s", "unexpected '+'"),
            ("s", ""),
            ("1s2s", "largest to smallest"),
            ("2s1m", "largest to smallest"),
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.starts_with(&format!("{text:?} is not a duration like 250ms")), "{err}");
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn overflow_is_refused_naming_the_text() {
        assert_eq!(parse_duration("2562047h47m16.854775807s"), Ok(LONGEST));
        for text in ["2562048h", "99999999999h", "2562047h47m16.854775808s"] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.starts_with(&format!("{text:?} is too long")), "{err}");
            assert!(err.contains("2562047h47m16s854ms"), "{err}");
        }
        let err = parse_duration("99999999999999999999s").unwrap_err();
        assert!(err.starts_with("\"99999999999999999999s\" is not a duration"), "{err}");
    }

    #[test]
    fn bare_seconds_only_where_asked_for() {
        assert_eq!(parse_duration_or_seconds("60"), Ok(secs(60)));
        assert_eq!(parse_duration_or_seconds(" 45 "), Ok(secs(45)));
        assert_eq!(parse_duration_or_seconds("1m30s"), Ok(secs(90)));
        assert_eq!(parse_duration_or_seconds("0"), Ok(Duration::ZERO));
        assert!(parse_duration_or_seconds("soon").unwrap_err().contains("\"soon\""));
        assert!(parse_duration_or_seconds("1.5").is_err(), "bare seconds are whole");
        assert!(parse_duration_or_seconds("99999999999999").unwrap_err().contains("too long"));
        assert!(parse_duration("60").is_err());
    }

    #[test]
    fn durations_show_as_flags_are_written_and_read_back() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (ms(50), "50ms"),
            (ms(250), "250ms"),
            (ms(1500), "1s500ms"),
            (secs(90), "1m30s"),
            (secs(300), "5m"),
            (secs(3600), "1h"),
            (secs(43800 * 3600), "43800h"),
            (Duration::from_nanos(5), "5ns"),
            (Duration::from_micros(5), "5000ns"),
        ] {
            assert_eq!(show_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d), "{text} reads back");
        }
    }
}
