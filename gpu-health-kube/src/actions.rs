//! The Kubernetes API edge of the health loop: read the Node, patch it and its
//! status, write Events. Every request is retried on 429, 5xx and no answer with
//! backoff and jitter ([`crate::retry`]); a 409 goes back to the caller, which reads
//! the Node again and plans anew.
//!
//! Patches are strategic-merge patches (`application/strategic-merge-patch+json`):
//! on `nodes/status` that merges the `GPUHealthy` condition by its type and leaves the
//! kubelet's and other controllers' conditions alone (a JSON merge patch would
//! replace the whole list). Event names are fixed before the first attempt, so a
//! retried create that had in fact landed answers 409 AlreadyExists and is not
//! written twice.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, GetParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::Value;

use crate::retry::{Backoff, Failure, classify, retry};
use gpu_health::node_state::NodeView;
use gpu_health::plan::EventSpec;

/// A request that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The object changed since it was read (409).
    #[error("{op}: conflict: {source}")]
    Conflict {
        op: &'static str,
        #[source]
        source: kube::Error,
    },
    /// Retries ran out, or the answer said trying again will not help.
    #[error("{op}: {source}")]
    Failed {
        op: &'static str,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = ActionError> = std::result::Result<T, E>;

impl ActionError {
    pub fn op(&self) -> &'static str {
        match self {
            Self::Conflict { op, .. } | Self::Failed { op, .. } => op,
        }
    }

    pub fn source_error(&self) -> &kube::Error {
        match self {
            Self::Conflict { source, .. } | Self::Failed { source, .. } => source,
        }
    }
}

fn wrap(op: &'static str, source: kube::Error) -> ActionError {
    if classify(&source) == Failure::Conflict {
        ActionError::Conflict { op, source }
    } else {
        ActionError::Failed { op, source }
    }
}

/// Called with the operation and the error of every failed request.
pub type OnRetry = std::sync::Arc<dyn Fn(&'static str, &kube::Error) + Send + Sync>;

/// The loop's handle on its own Node.
#[derive(Clone)]
pub struct NodeApi {
    nodes: Api<Node>,
    events: Api<Event>,
    node: String,
    field_manager: String,
    backoff: Backoff,
    on_retry: OnRetry,
}

impl std::fmt::Debug for NodeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeApi").field("node", &self.node).finish_non_exhaustive()
    }
}

impl NodeApi {
    pub fn new(
        client: kube::Client,
        node: &str,
        event_namespace: &str,
        field_manager: &str,
        backoff: Backoff,
        on_retry: OnRetry,
    ) -> Self {
        NodeApi {
            nodes: Api::all(client.clone()),
            events: Api::namespaced(client, event_namespace),
            node: node.to_string(),
            field_manager: field_manager.to_string(),
            backoff,
            on_retry,
        }
    }

    async fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, kube::Error>>,
    {
        let on_retry = self.on_retry.clone();
        retry(&self.backoff, f, |e, attempt| {
            tracing::debug!(op, attempt, error = %e, "API request failed");
            on_retry(op, e);
        })
        .await
        .map_err(|e| wrap(op, e))
    }

    /// `GET /api/v1/nodes/{node}`: the latest version (a quorum read) when `fresh`,
    /// else `resourceVersion=0`, served from the API server's watch cache. A plan made
    /// from a cached read that is behind carries that read's `resourceVersion`, so its
    /// patch answers 409 and the loop reads again, fresh.
    pub async fn get(&self, fresh: bool) -> Result<Node> {
        let params = if fresh { GetParams::default() } else { GetParams::any() };
        self.run("get_node", || self.nodes.get_with(&self.node, &params)).await
    }

    fn params(&self) -> PatchParams {
        PatchParams { field_manager: Some(self.field_manager.clone()), ..PatchParams::default() }
    }

    /// `GET /api/v1/nodes/{node}`, one attempt: for reads that must not hold up a check.
    pub async fn get_once(&self) -> Result<Node> {
        self.nodes.get(&self.node).await.map_err(|e| {
            (self.on_retry)("get_node", &e);
            wrap("get_node", e)
        })
    }

    /// `PATCH /api/v1/nodes/{node}`, strategic merge; the patch carries the
    /// `resourceVersion` it was planned from, so a concurrent change answers 409.
    pub async fn patch(&self, patch: &Value) -> Result<Node> {
        let params = self.params();
        let patch = Patch::Strategic(patch);
        self.run("patch_node", || self.nodes.patch(&self.node, &params, &patch)).await
    }

    /// `PATCH /api/v1/nodes/{node}/status`, strategic merge.
    pub async fn patch_status(&self, patch: &Value) -> Result<Node> {
        let params = self.params();
        let patch = Patch::Strategic(patch);
        self.run("patch_node_status", || self.nodes.patch_status(&self.node, &params, &patch)).await
    }

    /// `POST /api/v1/namespaces/{ns}/events` about the Node. Already there is fine.
    pub async fn event(&self, node: &NodeView, spec: &EventSpec, now: SystemTime) -> Result<(), EventError> {
        let event = event_object(&self.node, &node.uid, self.events_namespace(), spec, now)?;
        let params = PostParams::default();
        match self.run("create_event", || self.events.create(&params, &event)).await {
            Ok(_) => Ok(()),
            Err(ActionError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn events_namespace(&self) -> &str {
        self.events.namespace().unwrap_or("default")
    }
}

/// The Event object: a core/v1 Event naming the Node, as the kubelet writes them.
/// Fails only for a clock outside what a Kubernetes timestamp can hold.
pub fn event_object(
    node: &str,
    uid: &str,
    namespace: &str,
    spec: &EventSpec,
    now: SystemTime,
) -> std::result::Result<Event, EventTimeError> {
    let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH).map_err(|_| EventTimeError(now))?;
    let nanos = since_epoch.as_nanos();
    // Whole seconds, as the API server keeps `firstTimestamp`/`lastTimestamp`.
    let seconds = i64::try_from(since_epoch.as_secs()).map_err(|_| EventTimeError(now))?;
    let stamp = Time(Timestamp::from_second(seconds).map_err(|_| EventTimeError(now))?);
    Ok(Event {
        metadata: ObjectMeta {
            name: Some(format!("{node}.gpu-health.{nanos:x}")),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            uid: Some(uid.to_string()),
            ..ObjectReference::default()
        },
        reason: Some(spec.reason.to_string()),
        message: Some(truncate(&spec.message, 1024)),
        type_: Some(spec.kind.as_str().to_string()),
        source: Some(EventSource { component: Some(COMPONENT.into()), host: Some(node.to_string()) }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.to_string()),
        first_timestamp: Some(stamp.clone()),
        last_timestamp: Some(stamp),
        count: Some(1),
        ..Event::default()
    })
}

/// The component every Event of the loop names.
const COMPONENT: &str = "gpu-exporter-health";

/// The clock reads a time no Event can carry (before 1970, or past year 9999).
#[derive(Debug, thiserror::Error)]
#[error("cannot write an Event: the clock reads {0:?}, outside what a Kubernetes timestamp holds")]
pub struct EventTimeError(SystemTime);

/// Why an Event was not written.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error(transparent)]
    Time(#[from] EventTimeError),
    #[error(transparent)]
    Api(#[from] ActionError),
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_health::plan::EventType;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn events_name_the_node_and_carry_the_reason() {
        let spec = EventSpec { kind: EventType::Warning, reason: "GPUQuarantined", message: "é".repeat(600) };
        let e =
            event_object("gpu-1", "u-1", "default", &spec, UNIX_EPOCH + Duration::from_secs(1_714_564_800)).unwrap();
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(e.metadata.name.as_deref().unwrap().starts_with("gpu-1.gpu-health."));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
        assert_eq!(e.involved_object.name.as_deref(), Some("gpu-1"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("GPUQuarantined"));
        assert!(e.message.as_ref().unwrap().len() <= 1024 + "…".len());
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["firstTimestamp"], "2024-05-01T12:00:00Z");
        assert_eq!(json["lastTimestamp"], "2024-05-01T12:00:00Z");
        assert_eq!(json["count"], 1);
        assert_eq!(json["source"]["component"], "gpu-exporter-health");
        assert_eq!(json["reportingInstance"], "gpu-1");
    }

    #[test]
    fn an_event_before_1970_is_refused_not_defaulted() {
        let spec = EventSpec { kind: EventType::Normal, reason: "GPUHealthy", message: String::new() };
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert!(event_object("gpu-1", "u-1", "default", &spec, before).is_err());
    }
}
