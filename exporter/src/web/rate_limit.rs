//! The web config's `rate_limit: {burst, interval}`: a server-wide token bucket.
//!
//! The exporter-toolkit builds a Go `rate.NewLimiter(rate.Every(interval), burst)` and
//! answers `429 Too Many Requests` to any request it does not allow, before
//! authentication. This module is the same bucket: it holds at most `burst` tokens, starts
//! full, gains one token per `interval`, and each request takes one.
//!
//! `interval` is a Go duration as the toolkit's YAML library reads it: a string such as
//! `"500ms"`, `"1s"` or `"1m30s"`, or an integer number of nanoseconds. Strings are read
//! by the workspace's one duration parser ([`flag_ranges::parse_duration`], which reads
//! Go's syntax and states the rest). A limit that would refuse everything (`burst: 0`
//! with an interval) and negative durations are refused at start instead of being
//! applied.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Why a rate-limit setting was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RateLimitError {
    /// Not a duration; the text says which text and why.
    #[error("{0} (the web config takes a Go duration)")]
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

/// Reads the `interval` string: a Go duration (`time.ParseDuration`: decimal numbers,
/// each with a unit among `ns`, `us` (`µs`), `ms`, `s`, `m`, `h`; `"0"` alone is zero),
/// through the one duration parser. Negative durations are refused.
pub fn parse_go_duration(text: &str) -> Result<Duration> {
    flag_ranges::parse_duration(text).map_err(RateLimitError::BadDuration)
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
            let err = parse_go_duration(text).expect_err(text).to_string();
            assert!(err.contains(&format!("{text:?}")), "the refusal names {text:?}: {err}");
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
