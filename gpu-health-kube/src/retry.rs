//! Retries of Kubernetes API requests: which failures are worth another try, and how
//! long to wait (exponential backoff with jitter, so that the exporters of a whole
//! fleet that lost the API server at once do not come back in lockstep).

use std::future::Future;
use std::time::Duration;

/// How a failed request is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 429, 5xx, no answer, timeout: try again after a backoff.
    Transient,
    /// 409: the object changed (or already exists); the caller decides.
    Conflict,
    /// Anything else (403, 404, 422, a malformed answer): trying again will not help.
    Permanent,
}

/// Sorts a kube error.
pub fn classify(error: &kube::Error) -> Failure {
    match error {
        kube::Error::Api(status) => match status.code {
            409 => Failure::Conflict,
            429 | 500..=599 => Failure::Transient,
            _ => Failure::Permanent,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => Failure::Transient,
        _ => Failure::Permanent,
    }
}

/// A few stable words for the metric label of an error.
pub fn error_label(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.code.to_string(),
        kube::Error::HyperError(_) | kube::Error::Service(_) => "unreachable".into(),
        _ => "other".into(),
    }
}

/// Backoff between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { attempts: 5, base: Duration::from_millis(200), max: Duration::from_secs(10) }
    }
}

impl Backoff {
    /// The wait before attempt `n + 1` after `n` failures: half the exponential step
    /// plus a random share of the other half ("equal jitter").
    pub fn delay(&self, failures: u32) -> Duration {
        let step = self.base.saturating_mul(1u32 << failures.min(16)).min(self.max);
        let half = step / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// Runs `op` until it succeeds, fails for good, conflicts, or runs out of attempts.
/// `on_failure` sees every failed attempt, with its number (for logs and metrics).
pub async fn retry<T, F, Fut>(
    backoff: &Backoff,
    mut op: F,
    mut on_failure: impl FnMut(&kube::Error, u32),
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut failures = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                failures += 1;
                on_failure(&e, failures);
                if classify(&e) != Failure::Transient || failures >= backoff.attempts.max(1) {
                    return Err(e);
                }
                tokio::time::sleep(backoff.delay(failures - 1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status { code, ..Status::default() }))
    }

    #[test]
    fn errors_are_sorted() {
        assert_eq!(classify(&api_error(409)), Failure::Conflict);
        assert_eq!(classify(&api_error(429)), Failure::Transient);
        assert_eq!(classify(&api_error(503)), Failure::Transient);
        assert_eq!(classify(&api_error(403)), Failure::Permanent);
        assert_eq!(error_label(&api_error(503)), "503");
    }

    #[test]
    fn delays_grow_stay_capped_and_jitter() {
        let b = Backoff { attempts: 5, base: Duration::from_millis(100), max: Duration::from_secs(1) };
        for _ in 0..50 {
            let d0 = b.delay(0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100), "{d0:?}");
            let d9 = b.delay(9);
            assert!(d9 >= Duration::from_millis(500) && d9 <= Duration::from_secs(1), "{d9:?}");
        }
        let distinct: std::collections::BTreeSet<Duration> = (0..20).map(|_| b.delay(3)).collect();
        assert!(distinct.len() > 1, "jittered");
    }

    #[tokio::test]
    async fn transient_failures_are_retried_and_conflicts_are_not() {
        let b = Backoff { attempts: 4, base: Duration::from_millis(1), max: Duration::from_millis(2) };
        let calls = AtomicU32::new(0);
        let mut seen = 0;
        let out = retry(
            &b,
            || async {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if n < 2 { Err(api_error(503)) } else { Ok(n) }
            },
            |_, _| seen += 1,
        )
        .await;
        assert_eq!(out.unwrap(), 2);
        assert_eq!(seen, 2, "every failed attempt is seen");
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retry(
            &b,
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(api_error(409))
            },
            |_, _| {},
        )
        .await;
        assert_eq!(classify(&out.unwrap_err()), Failure::Conflict);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retry(
            &b,
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(api_error(429))
            },
            |_, _| {},
        )
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 4, "gives up after the attempts");
    }
}
