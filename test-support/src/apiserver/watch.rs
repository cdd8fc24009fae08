//! Pod watches as the API server streams them: one JSON event per line, the events
//! after the `resourceVersion` asked for replayed from history, then a bookmark, then
//! events as they happen, each only if its pod matches the watch's label and field
//! selectors (a node-scoped watch, `spec.nodeName=<node>`, hears of its node's pods
//! only). A `resourceVersion` older than the history (after
//! [`ApiServer::compact`](super::ApiServer::compact)) answers an `ERROR` event with a
//! `410 Gone` Status (`Expired`), after which a kube-runtime watcher relists. A client
//! that asked for metadata only gets `PartialObjectMetadata` objects.

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::State;
use super::selectors::Selector;

/// An object's labels, or the fields a field selector may name.
pub(super) type Fields = std::collections::BTreeMap<String, String>;

/// A pod event as history keeps it: what a selector is matched against beside it.
pub(crate) struct Event {
    version: u64,
    event: Value,
    labels: Fields,
    fields: Fields,
}

/// An open watch: what it sends its client, and which pods it asked for.
pub(crate) struct Watcher {
    tx: mpsc::UnboundedSender<Value>,
    labels: Selector,
    fields: Selector,
}

impl Watcher {
    fn wants(&self, event: &Event) -> bool {
        self.labels.matches(&event.labels) && self.fields.matches(&event.fields)
    }
}

/// The object as a metadata-only client receives it.
pub(super) fn metadata_of(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]})
}

impl State {
    /// Records a pod event and tells the open watches that asked for such a pod.
    pub(super) fn pod_event(&mut self, kind: &str, pod: &k8s_openapi::api::core::v1::Pod) {
        let event = Event {
            version: self.resource_version,
            event: json!({"type": kind, "object": pod}),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            fields: pod_fields(pod),
        };
        self.pod_watches.retain(|w| !w.wants(&event) || w.tx.send(event.event.clone()).is_ok());
        self.pod_history.push(event);
    }
}

/// The fields of a pod the real server indexes for field selectors.
pub(super) fn pod_fields(pod: &k8s_openapi::api::core::v1::Pod) -> Fields {
    let (spec, st) = (pod.spec.as_ref(), pod.status.as_ref());
    Fields::from([
        ("metadata.name".into(), pod.metadata.name.clone().unwrap_or_default()),
        ("metadata.namespace".into(), pod.metadata.namespace.clone().unwrap_or_else(|| "default".into())),
        ("spec.nodeName".into(), spec.and_then(|s| s.node_name.clone()).unwrap_or_default()),
        ("status.phase".into(), st.and_then(|s| s.phase.clone()).unwrap_or_default()),
        ("status.podIP".into(), st.and_then(|s| s.pod_ip.clone()).unwrap_or_default()),
    ])
}

/// A pod watch from `from`, of the pods these selectors match.
pub(super) fn pods(state: &mut State, from: u64, (labels, fields): (Selector, Selector), metadata: bool) -> Response {
    let (tx, rx) = mpsc::unbounded_channel();
    let watcher = Watcher { tx, labels, fields };
    let tx = &watcher.tx;
    if from < state.compacted {
        let gone = json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410
        }});
        let _ = tx.send(gone);
    } else {
        for event in state.pod_history.iter().filter(|e| e.version > from && watcher.wants(e)) {
            let _ = tx.send(event.event.clone());
        }
        let bookmark = json!({"type": "BOOKMARK", "object": {
            "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": state.resource_version.to_string()}
        }});
        let _ = tx.send(bookmark);
        state.pod_watches.push(watcher);
    }
    stream(rx, metadata)
}

/// A watch on which nothing ever happens: it stays open until the client leaves.
pub(super) fn quiet() -> Response {
    let stream = futures::stream::pending::<Result<Bytes, std::io::Error>>();
    (axum::http::StatusCode::OK, [("content-type", "application/json")], Body::from_stream(stream)).into_response()
}

/// A watch that sends a bookmark at `version` for objects of `kind` (`apiVersion`
/// `api_version`), then stays open with nothing more to say.
pub(super) fn bookmark_then_quiet(kind: &str, api_version: &str, version: u64) -> Response {
    let bookmark = json!({"type": "BOOKMARK", "object": {
        "kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": version.to_string()}
    }});
    let first = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(format!("{bookmark}\n"))) });
    let events = futures::StreamExt::chain(first, futures::stream::pending());
    (axum::http::StatusCode::OK, [("content-type", "application/json")], Body::from_stream(events)).into_response()
}

fn stream(rx: mpsc::UnboundedReceiver<Value>, metadata: bool) -> Response {
    let events = futures::stream::unfold(rx, move |mut rx| async move {
        let mut event = rx.recv().await?;
        if metadata && event["type"] != "ERROR" && event["type"] != "BOOKMARK" {
            event["object"] = metadata_of(&event["object"]);
        }
        Some((Ok::<_, std::io::Error>(Bytes::from(format!("{event}\n"))), rx))
    });
    (axum::http::StatusCode::OK, [("content-type", "application/json")], Body::from_stream(events)).into_response()
}

#[cfg(test)]
mod tests {
    use super::super::ApiServer;
    use super::Selector;
    use crate::cluster::labelled_pod;

    /// The events a watch from `from` sends first, up to its bookmark or error.
    async fn first_events(server: &ApiServer, from: u64) -> Vec<String> {
        first_events_of(server, from, "").await.into_iter().map(|(kind, _)| kind).collect()
    }

    /// The (type, pod name) of the events a watch from `from` with this field selector
    /// sends first, up to its bookmark or error.
    async fn first_events_of(server: &ApiServer, from: u64, fields: &str) -> Vec<(String, String)> {
        use futures::StreamExt as _;
        let selectors = (Selector::default(), Selector::parse(fields).unwrap());
        let response = super::pods(&mut server.state(), from, selectors, true);
        let mut body = response.into_body().into_data_stream();
        let mut events = Vec::new();
        while let Some(Ok(line)) = body.next().await {
            let event: serde_json::Value = serde_json::from_slice(&line).unwrap();
            let kind = event["type"].as_str().unwrap().to_string();
            let name = event["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string();
            events.push((kind.clone(), name));
            if kind == "BOOKMARK" || kind == "ERROR" {
                break;
            }
        }
        events
    }

    fn owned(events: &[(&str, &str)]) -> Vec<(String, String)> {
        events.iter().map(|(k, n)| (k.to_string(), n.to_string())).collect()
    }

    #[tokio::test]
    async fn a_node_scoped_watch_hears_of_its_node_s_pods_only_deletes_included() {
        use crate::apiserver::node_pod;
        let server = ApiServer::new();
        server.add_pod(node_pod("here", "Running"));
        let mut there = node_pod("there", "Running");
        there.spec.as_mut().unwrap().node_name = Some("other-node".into());
        server.add_pod(there);
        server.delete_pod("ai", "there");
        server.delete_pod("ai", "here");
        server.delete_pod("ai", "never-was");
        let own = format!("spec.nodeName={}", crate::apiserver::NODE);
        let expected = owned(&[("ADDED", "here"), ("DELETED", "here"), ("BOOKMARK", "")]);
        assert_eq!(first_events_of(&server, 0, &own).await, expected);
        let everything = first_events_of(&server, 0, "").await;
        assert_eq!(everything.len(), 5, "two adds, two deletes, the bookmark: {everything:?}");
    }

    #[tokio::test]
    async fn a_silent_add_after_compaction_is_found_only_by_relisting() {
        use crate::apiserver::node_pod;
        let server = ApiServer::new();
        server.add_pod(node_pod("a", "Running"));
        let (tx, mut open) = tokio::sync::mpsc::unbounded_channel();
        server.state().pod_watches.push(super::Watcher {
            tx,
            labels: Selector::default(),
            fields: Selector::default(),
        });
        server.compact_and_add_silently(node_pod("b", "Running"));
        assert!(open.recv().await.is_none(), "the open watch was closed without a word of b");
        assert_eq!(first_events(&server, 1).await, ["ERROR"], "410 Gone for the version the watcher had");
        assert!(server.state().pods.contains_key(&("ai".into(), "b".into())), "a relist finds b");
        assert_eq!(first_events(&server, 2).await, ["BOOKMARK"]);
    }

    #[tokio::test]
    async fn a_watch_replays_what_it_missed_until_history_is_compacted() {
        let server = ApiServer::new();
        server.add_pod(labelled_pod("ai", "a", &[]));
        server.add_pod(labelled_pod("ai", "b", &[]));
        server.add_pod(labelled_pod("ai", "a", &[("app", "x")]));
        assert_eq!(first_events(&server, 1).await, ["ADDED", "MODIFIED", "BOOKMARK"]);
        server.compact();
        assert_eq!(first_events(&server, 1).await, ["ERROR"], "410 Gone once compacted");
        assert_eq!(first_events(&server, 3).await, ["BOOKMARK"], "from now on: nothing missed");
    }
}
