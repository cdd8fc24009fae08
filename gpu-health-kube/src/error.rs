//! Why a reconcile did not finish ([`HealthError`]) and what kind of failure that was
//! ([`Cause`]): the loop logs and exports the cause (`gpu_health_mode_info{api}`), and
//! only a request that got no answer, a 429 or a 5xx counts as the API being
//! unavailable.

use crate::actions::ActionError;
use crate::breaker::BreakerError;
use crate::device_rules::RuleApiError;
use crate::retry;

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error(transparent)]
    Action(#[from] ActionError),
    #[error(transparent)]
    Breaker(#[from] BreakerError),
    #[error("node {0} changed under us {1} times (409 Conflict on each update); giving up this check")]
    Contended(String, u32),
    #[error(transparent)]
    Rules(#[from] RuleApiError),
}

pub type Result<T, E = HealthError> = std::result::Result<T, E>;

/// What kind of failure ended a reconcile, for the log and `gpu_health_mode_info{api}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The object changed under every attempt (409s): the API server is fine, others
    /// are writing the same object.
    Contended,
    /// The API server answered that the request will not succeed (403, 404, 422, ...).
    Refused,
    /// No answer, 429 or 5xx, after the request's retries.
    Unreachable,
}

impl HealthError {
    pub fn cause(&self) -> Cause {
        let of = |e: &kube::Error| match retry::classify(e) {
            retry::Failure::Conflict => Cause::Contended,
            retry::Failure::Transient => Cause::Unreachable,
            retry::Failure::Permanent => Cause::Refused,
        };
        match self {
            Self::Contended(..) | Self::Breaker(BreakerError::Contended(..)) => Cause::Contended,
            Self::Action(a) => of(a.source_error()),
            Self::Breaker(BreakerError::Api { source, .. }) => of(source),
            Self::Rules(r) => r.source_error().map_or(Cause::Refused, of),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status { code, ..Status::default() }))
    }

    #[test]
    fn only_no_answer_a_429_or_a_5xx_is_an_unreachable_api() {
        let action = |code| HealthError::Action(ActionError::Failed { op: "patch_node", source: api_error(code) });
        assert_eq!(action(409).cause(), Cause::Contended);
        assert_eq!(action(403).cause(), Cause::Refused);
        assert_eq!(action(422).cause(), Cause::Refused);
        assert_eq!(action(429).cause(), Cause::Unreachable);
        assert_eq!(action(503).cause(), Cause::Unreachable);
        assert_eq!(HealthError::Contended("gpu-01".into(), 5).cause(), Cause::Contended);
        let breaker = |code| HealthError::Breaker(BreakerError::Api { op: "get", source: api_error(code) });
        assert_eq!(breaker(403).cause(), Cause::Refused);
        assert_eq!(breaker(504).cause(), Cause::Unreachable);
        assert_eq!(HealthError::Breaker(BreakerError::Contended("cm".into(), 8)).cause(), Cause::Contended);
        let foreign = RuleApiError::Foreign { name: "r".into(), why: "another manager".into() };
        assert_eq!(HealthError::Rules(foreign).cause(), Cause::Refused, "a refusal without an answer underneath");
        let rules = HealthError::Rules(RuleApiError::Api { op: "list_rules", source: api_error(500) });
        assert_eq!(rules.cause(), Cause::Unreachable);
    }

    #[test]
    fn a_conflict_that_never_ends_says_so() {
        let e = HealthError::Contended("gpu-01".into(), 5);
        assert_eq!(
            e.to_string(),
            "node gpu-01 changed under us 5 times (409 Conflict on each update); giving up this check"
        );
    }
}
