//! Numbers as Prometheus reads them: sample values and OpenMetrics timestamps with Go's
//! `strconv.ParseFloat` less the forms both of Prometheus's parsers refuse (`p`/`P`
//! hexadecimal exponents and `_` digit separators: `parseFloat` in
//! prometheus/prometheus `model/textparse/promparse.go` and prometheus/common
//! `expfmt/text_parse.go`), and text-format timestamps with Go's `strconv.ParseInt`.

/// A value: a decimal float (`1`, `-1.5e3`, `.5`, `5.`), `Inf`/`Infinity` with an
/// optional sign, or unsigned `NaN` (any letter case). A decimal that overflows is
/// refused, as Go reports a range error for it.
pub(crate) fn parse_float(token: &str) -> Option<f64> {
    let unsigned = token.strip_prefix(['+', '-']).unwrap_or(token);
    if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
        return Some(if token.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    if token.eq_ignore_ascii_case("nan") {
        return Some(f64::NAN);
    }
    // Only the characters of a decimal float; Rust's parser then checks the shape.
    if unsigned.is_empty()
        || !unsigned.bytes().all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    token.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// A text-format timestamp: a base-10 integer of milliseconds, optionally signed.
pub(crate) fn parse_int(token: &str) -> Option<i64> {
    token.parse::<i64>().ok()
}

/// An OpenMetrics timestamp (seconds, a float) in milliseconds. NaN and infinities are
/// refused; a finite value past the range of `i64` milliseconds saturates.
pub(crate) fn seconds_to_ms(token: &str) -> Option<i64> {
    let secs = parse_float(token)?;
    if !secs.is_finite() {
        return None;
    }
    // `as` saturates at the bounds of i64.
    Some((secs * 1000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_follow_go_less_hex_and_underscores() {
        for (token, want) in [
            ("1", 1.0),
            ("-1.5e3", -1500.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("+2E-2", 0.02),
            ("08", 8.0),
            ("+Inf", f64::INFINITY),
            ("-infinity", f64::NEG_INFINITY),
            ("INF", f64::INFINITY),
        ] {
            assert_eq!(parse_float(token), Some(want), "{token}");
        }
        assert!(parse_float("NaN").is_some_and(f64::is_nan));
        assert!(parse_float("nan").is_some_and(f64::is_nan));
        for token in [
            "", "+", ".", "e5", "1e", "1_2", "0x1p-3", "0x1", "0b1", "0o1", "-nan", "+NaN", "infinit", "1e400", "true",
            "1\t2",
        ] {
            assert_eq!(parse_float(token), None, "{token:?} must be refused");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_int("-2"), Some(-2));
        assert_eq!(parse_int("+15"), Some(15));
        assert_eq!(parse_int("2.72"), None);
        assert_eq!(parse_int("99999999999999999999"), None);
        assert_eq!(seconds_to_ms("1700000000.5"), Some(1_700_000_000_500));
        assert_eq!(seconds_to_ms("12345678901234567890.1234567890"), Some(i64::MAX));
        assert_eq!(seconds_to_ms("NaN"), None);
        assert_eq!(seconds_to_ms("-Inf"), None);
    }
}
