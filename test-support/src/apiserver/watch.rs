//! Pod watches as the API server streams them: one JSON event per line, the events
//! after the `resourceVersion` asked for replayed from history, then a bookmark, then
//! events as they happen. A `resourceVersion` older than the history (after
//! [`ApiServer::compact`](super::ApiServer::compact)) answers an `ERROR` event with a
//! `410 Gone` Status (`Expired`), after which a kube-runtime watcher relists. A client
//! that asked for metadata only gets `PartialObjectMetadata` objects.

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::State;

/// What a watch sends its client.
pub(super) type Watcher = mpsc::UnboundedSender<Value>;

/// The object as a metadata-only client receives it.
pub(super) fn metadata_of(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]})
}

impl State {
    /// Records a pod event and tells the open watches.
    pub(super) fn pod_event(&mut self, kind: &str, object: Value) {
        let rv = self.resource_version;
        let event = json!({"type": kind, "object": object});
        self.pod_history.push((rv, event.clone()));
        self.pod_watches.retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// A pod watch from `from`.
pub(super) fn pods(state: &mut State, from: u64, metadata: bool) -> Response {
    let (tx, rx) = mpsc::unbounded_channel();
    if from < state.compacted {
        let gone = json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410
        }});
        let _ = tx.send(gone);
        drop(tx);
    } else {
        for (_, event) in state.pod_history.iter().filter(|(rv, _)| *rv > from) {
            let _ = tx.send(event.clone());
        }
        let bookmark = json!({"type": "BOOKMARK", "object": {
            "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": state.resource_version.to_string()}
        }});
        let _ = tx.send(bookmark);
        state.pod_watches.push(tx);
    }
    stream(rx, metadata)
}

/// A watch on which nothing ever happens: it stays open until the client leaves.
pub(super) fn quiet() -> Response {
    let stream = futures::stream::pending::<Result<Bytes, std::io::Error>>();
    (axum::http::StatusCode::OK, [("content-type", "application/json")], Body::from_stream(stream)).into_response()
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
    use crate::cluster::labelled_pod;

    /// The events a watch from `from` sends first, up to its bookmark or error.
    async fn first_events(server: &ApiServer, from: u64) -> Vec<String> {
        use futures::StreamExt as _;
        let response = super::pods(&mut server.state(), from, true);
        let mut body = response.into_body().into_data_stream();
        let mut types = Vec::new();
        while let Some(Ok(line)) = body.next().await {
            let event: serde_json::Value = serde_json::from_slice(&line).unwrap();
            let kind = event["type"].as_str().unwrap().to_string();
            types.push(kind.clone());
            if kind == "BOOKMARK" || kind == "ERROR" {
                break;
            }
        }
        types
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
