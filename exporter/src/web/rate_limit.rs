//! The web config's `rate_limit: {burst, interval}`: a server-wide token bucket.
//!
//! The exporter-toolkit builds a Go `rate.NewLimiter(rate.Every(interval), burst)` and
//! answers `429 Too Many Requests` to any request it does not allow, before
//! authentication. This module is the same bucket: it holds at most `burst` tokens, starts
//! full, gains one token per `interval`, and each request takes one.
//!
//! `interval` is a Go duration as the toolkit's YAML library reads it: a string such as
//! `"500ms"`, `"1s"` or `"1m30s"`, or an integer number of nanoseconds. A limit that
//! would refuse everything (`burst: 0` with an interval) and negative durations are
//! refused at start instead of being applied.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Why a rate-limit setting was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RateLimitError {
    /// Not a Go duration.
    #[error("invalid duration {0:?} (expected a Go duration such as \"500ms\", \"1s\" or \"1m30s\")")]
    BadDuration(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, RateLimitError>;

/// A token bucket shared by all connections of one server.
#[derive(Debug)]
pub struct TokenBucket {
    burst: u32,
    interval: Duration,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at one token per `interval`.
    pub fn new(burst: u32, interval: Duration) -> TokenBucket {
        TokenBucket {
            burst,
            interval,
            state: Mutex::new(BucketState { tokens: f64::from(burst), last: Instant::now() }),
        }
    }

    /// Takes a token if one is available now.
    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(state.last);
        state.last = state.last.max(now);
        let gained =
            if self.interval.is_zero() { f64::INFINITY } else { elapsed.as_secs_f64() / self.interval.as_secs_f64() };
        state.tokens = (state.tokens + gained).min(f64::from(self.burst));
        if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Parses a Go duration string (`time.ParseDuration`): a sequence of decimal numbers,
/// each with a unit among `ns`, `us` (`µs`), `ms`, `s`, `m`, `h`; `"0"` alone is zero.
/// Negative durations are refused.
pub fn parse_go_duration(text: &str) -> Result<Duration> {
    let bad = || RateLimitError::BadDuration(text.to_owned());
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total_nanos += value * scale;
        rest = next;
    }
    // Go's limit: the result must fit an int64 of nanoseconds.
    if !total_nanos.is_finite() || total_nanos > i64::MAX as f64 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(total_nanos.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("0", Duration::ZERO),
            ("1s", Duration::from_secs(1)),
            ("500ms", Duration::from_millis(500)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5h", Duration::from_secs(5400)),
            ("250us", Duration::from_micros(250)),
            ("3µs", Duration::from_micros(3)),
            ("+2s", Duration::from_secs(2)),
            ("10ns", Duration::from_nanos(10)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_what_go_refuses_and_negatives() {
        for text in ["", "1", "s", "1d", "-1s", "1.s5", ".s", "1s 2s", "99999999999h"] {
            assert!(parse_go_duration(text).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn bucket_allows_a_burst_then_refills_one_per_interval() {
        let bucket = TokenBucket::new(2, Duration::from_secs(1));
        let t0 = Instant::now();
        assert!(bucket.allow_at(t0));
        assert!(bucket.allow_at(t0));
        assert!(!bucket.allow_at(t0));
        assert!(!bucket.allow_at(t0 + Duration::from_millis(900)));
        assert!(bucket.allow_at(t0 + Duration::from_millis(1000)));
        assert!(!bucket.allow_at(t0 + Duration::from_millis(1100)));
        // A long pause refills only up to the burst.
        let later = t0 + Duration::from_secs(60);
        assert!(bucket.allow_at(later));
        assert!(bucket.allow_at(later));
        assert!(!bucket.allow_at(later));
    }
}
