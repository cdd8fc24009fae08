//! Verdicts for tests: the one fixture every crate's health tests build on, so that a
//! field added to [`Verdict`] is filled in one place. Compiled for this crate's own
//! tests and, with the `test-fixtures` feature, for other crates' tests; never in a
//! release build.

use std::time::SystemTime;

use crate::verdict::{Health, Needs, Reason, Verdict};

/// XID 79 on GPU 0 (`GPU-a`): a fault that needs a reset.
pub fn xid79_reason() -> Reason {
    Reason {
        gpu: Some(0),
        uuid: "GPU-a".into(),
        code: "Xid79".into(),
        detail: "XID 79: GPU has fallen off the bus".into(),
        needs: Needs::Reset,
        first_seen: None,
    }
}

/// A node found unhealthy at `since` for [`xid79_reason`], held as a whole (no GPU
/// held alone), just changed.
pub fn unhealthy(since: SystemTime) -> Verdict {
    Verdict {
        health: Health::Unhealthy,
        since: Some(since),
        reasons: vec![xid79_reason()],
        latches: vec![],
        pending: vec![],
        notes: vec![],
        changed: true,
        gpus: vec![],
        node_scope: None,
    }
}

/// A healthy node, just changed.
pub fn healthy() -> Verdict {
    Verdict { health: Health::Healthy, since: None, reasons: vec![], ..unhealthy(SystemTime::UNIX_EPOCH) }
}
