//! `resource.Quantity` in its canonical string form, as Go's apimachinery writes it for
//! the `DecimalSI` format: a mantissa with no trailing zeros (or with exactly enough to make
//! the exponent a multiple of three) and an SI suffix (`850m`, `70`, `12k`, `40G`).
//!
//! Metric values are carried at milli precision, like the Go adapters
//! (`resource.NewMilliQuantity`), but rounded to the nearest milli instead of truncated, so
//! `70.85` is `70850m` and not `70849m`. Values too large for milli precision in an `i64`
//! are written at unit precision. Non-finite values have no Quantity: they are never served.

use std::fmt;

use serde::{Serialize, Serializer};

/// A decimal quantity `mantissa * 10^exponent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
}

/// Largest magnitude (in units) kept at milli precision; Go's milli quantities are `i64`.
const MILLI_LIMIT: f64 = 9.0e15;

impl Quantity {
    /// A quantity from a float, rounded to milli units; `None` for NaN, infinities and
    /// magnitudes beyond `i128` units.
    pub fn from_f64(value: f64) -> Option<Self> {
        if !value.is_finite() {
            return None;
        }
        if value.abs() < MILLI_LIMIT {
            let milli = (value * 1000.0).round();
            // In range by the check above: |milli| < 9e18 < i64::MAX.
            return Some(Self { mantissa: milli as i128, exponent: -3 });
        }
        if value.abs() >= 1.0e38 {
            return None;
        }
        Some(Self { mantissa: value.round() as i128, exponent: 0 })
    }

    /// A quantity of whole units.
    pub fn from_i64(value: i64) -> Self {
        Self { mantissa: i128::from(value), exponent: 0 }
    }

    /// The value in milli units, saturating.
    pub fn milli_value(&self) -> i128 {
        let shift = self.exponent + 3;
        if shift >= 0 {
            self.mantissa.saturating_mul(10i128.saturating_pow(shift.unsigned_abs()))
        } else {
            self.mantissa / 10i128.pow(shift.unsigned_abs().min(38))
        }
    }

    /// The value as a float (for tests and comparisons).
    pub fn as_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }
}

/// Canonical (mantissa, exponent): no trailing zeros beyond what makes the exponent a
/// multiple of three. The `i64` path avoids 128-bit division for every realistic value.
fn canonical(mantissa: i128, exponent: i32) -> (i128, i32) {
    let (mut m, mut e) = match i64::try_from(mantissa) {
        Ok(mut small) => {
            let mut e = exponent;
            while small % 10 == 0 {
                small /= 10;
                e += 1;
            }
            (i128::from(small), e)
        }
        Err(_) => {
            let (mut m, mut e) = (mantissa, exponent);
            while m % 10 == 0 {
                m /= 10;
                e += 1;
            }
            (m, e)
        }
    };
    match e.rem_euclid(3) {
        1 => {
            m *= 10;
            e -= 1;
        }
        2 => {
            m *= 100;
            e -= 2;
        }
        _ => {}
    }
    (m, e)
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mantissa == 0 {
            return f.write_str("0");
        }
        let (mantissa, exponent) = canonical(self.mantissa, self.exponent);
        let suffix = match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => return write!(f, "{mantissa}e{exponent}"),
        };
        match i64::try_from(mantissa) {
            Ok(m) => {
                let mut buf = [0u8; 24];
                let mut i = buf.len();
                let mut n = m.unsigned_abs();
                loop {
                    i -= 1;
                    buf[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                if m < 0 {
                    i -= 1;
                    buf[i] = b'-';
                }
                // Only ASCII digits and '-' were written.
                f.write_str(std::str::from_utf8(&buf[i..]).unwrap_or_default())?;
                f.write_str(suffix)
            }
            Err(_) => write!(f, "{mantissa}{suffix}"),
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(v: f64) -> String {
        match Quantity::from_f64(v) {
            Some(q) => q.to_string(),
            None => panic!("{v} has no quantity"),
        }
    }

    #[test]
    fn canonical_forms_match_go() {
        // Expected strings are what resource.NewMilliQuantity(v*1000, DecimalSI).String() gives.
        assert_eq!(q(0.85), "850m");
        assert_eq!(q(70.0), "70");
        assert_eq!(q(70.5), "70500m");
        assert_eq!(q(0.0), "0");
        assert_eq!(q(-0.0), "0");
        assert_eq!(q(1.5), "1500m");
        assert_eq!(q(100.0), "100");
        assert_eq!(q(1000.0), "1k");
        assert_eq!(q(12000.0), "12k");
        assert_eq!(q(12345.0), "12345");
        assert_eq!(q(40_000_000_000.0), "40G");
        assert_eq!(q(85_899_345_920.0), "85899345920");
        assert_eq!(q(1_500_000_000.0), "1500M");
        assert_eq!(q(0.001), "1m");
        assert_eq!(q(-2.5), "-2500m");
        assert_eq!(q(-3000.0), "-3k");
        assert_eq!(q(250.25), "250250m");
        assert_eq!(q(-0.001), "-1m");
        assert_eq!(q(9.2e15), "9200T");
    }

    #[test]
    fn rounds_to_nearest_milli() {
        assert_eq!(q(70.85), "70850m");
        assert_eq!(q(0.0004), "0");
        assert_eq!(q(0.0005), "1m");
        assert_eq!(q(33.333333), "33333m");
    }

    #[test]
    fn large_values_use_unit_precision_and_exponents() {
        assert_eq!(q(1.0e16), "10P");
        assert_eq!(q(1.0e21), "1e21");
        assert_eq!(q(2.0e18), "2E");
        assert!(Quantity::from_f64(1.0e39).is_none());
    }

    #[test]
    fn non_finite_values_have_no_quantity() {
        assert!(Quantity::from_f64(f64::NAN).is_none());
        assert!(Quantity::from_f64(f64::INFINITY).is_none());
        assert!(Quantity::from_f64(f64::NEG_INFINITY).is_none());
    }

    #[test]
    fn serializes_as_json_string_and_reports_milli() {
        let v = Quantity::from_f64(0.85).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"850m\"");
        assert_eq!(v.milli_value(), 850);
        assert_eq!(Quantity::from_i64(7).milli_value(), 7000);
        assert!((v.as_f64() - 0.85).abs() < 1e-12);
    }
}
