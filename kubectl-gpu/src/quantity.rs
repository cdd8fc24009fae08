//! Kubernetes resource quantities (`8`, `850m`, `36Gi`, `1.5e3`) as numbers: the
//! GPU counts in node capacity and pod limits, and the values of the custom metrics API.

/// Why a quantity was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity")]
    Invalid(String),
}

pub type Result<T, E = QuantityError> = std::result::Result<T, E>;

const SUFFIXES: &[(&str, f64)] = &[
    ("Ki", 1024.0),
    ("Mi", 1_048_576.0),
    ("Gi", 1_073_741_824.0),
    ("Ti", 1_099_511_627_776.0),
    ("Pi", 1_125_899_906_842_624.0),
    ("Ei", 1_152_921_504_606_846_976.0),
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
];

/// Parses a quantity into its value.
pub fn parse(text: &str) -> Result<f64> {
    let invalid = || QuantityError::Invalid(text.to_string());
    let t = text.trim();
    let (number, factor) =
        SUFFIXES.iter().find_map(|(suffix, factor)| t.strip_suffix(suffix).map(|n| (n, *factor))).unwrap_or((t, 1.0));
    let digits_ok = !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E'))
        && number.chars().any(|c| c.is_ascii_digit());
    if !digits_ok {
        return Err(invalid());
    }
    let value: f64 = number.parse().map_err(|_| invalid())?;
    Some(value * factor).filter(|v| v.is_finite()).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_with_every_suffix() {
        for (text, value) in [
            ("8", 8.0),
            ("850m", 0.85),
            ("36Gi", 36.0 * 1_073_741_824.0),
            ("37748736k", 37_748_736_000.0),
            ("1.5e3", 1500.0),
            ("2M", 2e6),
            ("0", 0.0),
            (" 4 ", 4.0),
        ] {
            assert_eq!(parse(text), Ok(value), "{text}");
        }
    }

    #[test]
    fn other_text_is_refused() {
        for text in ["", "m", "abc", "1x", "Gi", "1.2.3", "inf", "NaN", "1e999"] {
            assert_eq!(parse(text), Err(QuantityError::Invalid(text.into())), "{text}");
        }
    }
}
