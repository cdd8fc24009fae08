//! An in-test Kubernetes API server speaking the real wire protocol on loopback, for
//! the exporter's node-scoped watches (the exporter's and the adapter's end-to-end tests
//! run it beside the simulated node). For the pod watch: `GET /api/v1/pods` list and watch with `fieldSelector` (only
//! `spec.nodeName=<NODE>` is answered), `resourceVersion`, JSON-line watch streams,
//! bookmarks, and `410 Gone` for a resourceVersion older than its history (after which
//! kube-runtime relists). Every request is recorded for the test to check.
//!
//! ResourceSlices (`/apis/resource.k8s.io/v1/resourceslices`, same field selector) are
//! served once [`ApiServer::serve_slices`] gave some: a list, then a watch that sends a
//! bookmark and stays open. Before that the path answers 404, as on a cluster without
//! DRA.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fake_nvml::scenario::Scenario;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The node the exporter under test is named (`--node-name` in the tests' launchers).
pub const NODE: &str = "test-node";

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub query: BTreeMap<String, String>,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Value>,
    resource_version: u64,
    /// Watch events by resource version, for watches that start behind.
    history: Vec<(u64, Value)>,
    /// Open watch streams.
    streams: Vec<mpsc::UnboundedSender<Value>>,
    /// Answer the next watch with 410 Gone.
    expire_next_watch: bool,
    /// `None`: the ResourceSlice API is not served.
    slices: Option<Vec<Value>>,
    slice_streams: Vec<mpsc::UnboundedSender<Value>>,
    seen: Vec<Seen>,
}

#[derive(Clone, Default)]
pub struct ApiServer(Arc<Mutex<State>>);

/// A pod on `NODE` in namespace `ai` with UID `uid-<name>` and one container `main`.
pub fn pod(name: &str, phase: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ai", "uid": format!("uid-{name}"), "labels": {"app": name}},
        "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        "status": {"phase": phase, "containerStatuses": [{
            "name": "main", "containerID": format!("containerd://{:0>64}", name.len()), "image": "i", "imageID": "",
            "ready": true, "restartCount": 0
        }]}
    })
}

impl ApiServer {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// Adds or changes a pod, telling open watches.
    pub fn put(&self, name: &str, phase: &str) {
        self.put_object(name, pod(name, phase));
    }

    /// Adds or changes a pod given as its JSON object.
    pub fn put_object(&self, name: &str, mut object: Value) {
        let mut s = self.state();
        s.resource_version += 1;
        let rv = s.resource_version;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let kind = if s.pods.contains_key(name) { "MODIFIED" } else { "ADDED" };
        s.pods.insert(name.into(), object.clone());
        let event = json!({"type": kind, "object": object});
        s.history.push((rv, event.clone()));
        s.streams.retain(|tx| tx.send(event.clone()).is_ok());
    }

    pub fn delete(&self, name: &str) {
        let mut s = self.state();
        s.resource_version += 1;
        let rv = s.resource_version;
        let Some(mut object) = s.pods.remove(name) else { return };
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let event = json!({"type": "DELETED", "object": object});
        s.history.push((rv, event.clone()));
        s.streams.retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// Compacts history (older versions now answer 410), adds a pod no watch hears of,
    /// and closes the open watches, so the watcher must relist to find it.
    pub fn compact_and_add_silently(&self, name: &str, phase: &str) {
        let mut s = self.state();
        s.resource_version += 1;
        let rv = s.resource_version;
        let mut object = pod(name, phase);
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        s.pods.insert(name.into(), object);
        s.history.clear();
        s.expire_next_watch = true;
        s.streams.clear();
    }

    /// Serves these ResourceSlices from now on.
    pub fn serve_slices(&self, slices: Vec<Value>) {
        self.state().slices = Some(slices);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    fn respond(&self, request: &Request<hyper::body::Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let path = request.uri().path().to_string();
        let query = parse_query(request.uri().query().unwrap_or(""));
        self.state().seen.push(Seen { path: path.clone(), query: query.clone() });
        let on_node = query.get("fieldSelector").map(String::as_str) == Some(&format!("spec.nodeName={NODE}"));
        if path == "/apis/resource.k8s.io/v1/resourceslices" && on_node {
            if let Some(response) = self.slices(&query) {
                return response;
            }
        }
        if path != "/api/v1/pods" || !on_node {
            return json_response(
                404,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}),
            );
        }
        if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
            return self.watch(&query);
        }
        let s = self.state();
        let items: Vec<Value> = s.pods.values().cloned().collect();
        json_response(
            200,
            &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": s.resource_version.to_string()}, "items": items}),
        )
    }

    /// The slice list or watch; `None` while the API is not served.
    fn slices(&self, query: &BTreeMap<String, String>) -> Option<Response<BoxBody<Bytes, Infallible>>> {
        let mut s = self.state();
        let items = s.slices.clone()?;
        let version = s.resource_version.to_string();
        if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
            let (tx, rx) = mpsc::unbounded_channel();
            let bookmark = json!({"type": "BOOKMARK", "object": {
                "kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1", "metadata": {"resourceVersion": version}
            }});
            let _ = tx.send(bookmark);
            s.slice_streams.push(tx);
            return Some(event_stream(rx));
        }
        let list = json!({"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                          "metadata": {"resourceVersion": version}, "items": items});
        Some(json_response(200, &list))
    }

    fn watch(&self, query: &BTreeMap<String, String>) -> Response<BoxBody<Bytes, Infallible>> {
        let from: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.state();
        let expired = std::mem::take(&mut s.expire_next_watch)
            || s.history.first().is_none_or(|(rv, _)| *rv > from + 1) && from < s.resource_version;
        if expired {
            let gone = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410
            }});
            let _ = tx.send(gone);
            drop(tx);
        } else {
            for (_, event) in s.history.iter().filter(|(rv, _)| *rv > from) {
                let _ = tx.send(event.clone());
            }
            let bookmark = json!({"type": "BOOKMARK", "object": {
                "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": s.resource_version.to_string()}
            }});
            let _ = tx.send(bookmark);
            s.streams.push(tx);
        }
        drop(s);
        event_stream(rx)
    }
}

/// A watch response: one JSON event per line, as events arrive.
fn event_stream(rx: mpsc::UnboundedReceiver<Value>) -> Response<BoxBody<Bytes, Infallible>> {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(line))), rx))
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(BoxBody::new(StreamBody::new(stream)))
        .unwrap()
}

fn json_response(status: u16, body: &Value) -> Response<BoxBody<Bytes, Infallible>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())).boxed())
        .unwrap()
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Serves on 127.0.0.1 until the runtime ends; returns the base URL.
pub async fn serve(server: ApiServer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let server = server.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let response = server.respond(&request);
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    format!("http://{address}")
}

/// A kubeconfig under `dir` for the server at `url`, without credentials.
pub fn kubeconfig(dir: &Path, url: &str) -> String {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\nusers:\n- name: test\n  user: {{}}\n"
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Pod `index` of the scenario as the API server has it, on [`NODE`].
pub fn scenario_pod(scenario: &Scenario, index: usize, phase: &str) -> serde_json::Value {
    let pod = &scenario.pods[index];
    let containers: Vec<_> = pod.containers.iter().map(|c| json!({"name": c.name})).collect();
    let statuses: Vec<_> = pod
        .containers
        .iter()
        .map(|c| {
            json!({"name": c.name, "containerID": format!("containerd://{}", c.id), "image": "i", "imageID": "",
                   "ready": true, "restartCount": 0})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "labels": pod.labels},
        "spec": {"nodeName": NODE, "containers": containers},
        "status": {"phase": phase, "containerStatuses": statuses}
    })
}
