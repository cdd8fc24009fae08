//! The node-scoped pod watch against an in-test Kubernetes API server that speaks the
//! real wire protocol on loopback: list with `fieldSelector` and `resourceVersion`, watch
//! streams of JSON lines, bookmarks, and `410 Gone` for an expired resourceVersion (after
//! which kube-runtime relists). No API server can run here; this one checks every
//! request's path and query as it comes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpu_exporter::attribution::kubelet::KubeletCache;
use gpu_exporter::attribution::pod_resources::Allocation;
use gpu_exporter::attribution::pod_watch::{self, PodWatch};
use gpu_exporter::attribution::{Attributor, ContainerRef};
use gpu_exporter::snapshot::{GpuIdentity, GpuReadings, GpuSnapshot, GpuState, MemoryReading};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const NODE: &str = "gpu-node-1";

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    query: BTreeMap<String, String>,
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
    seen: Vec<Seen>,
}

#[derive(Clone, Default)]
struct ApiServer(Arc<Mutex<State>>);

fn pod(name: &str, phase: &str) -> Value {
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
    fn put(&self, name: &str, phase: &str) {
        let mut s = self.state();
        s.resource_version += 1;
        let rv = s.resource_version;
        let mut object = pod(name, phase);
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let kind = if s.pods.contains_key(name) { "MODIFIED" } else { "ADDED" };
        s.pods.insert(name.into(), object.clone());
        let event = json!({"type": kind, "object": object});
        s.history.push((rv, event.clone()));
        s.streams.retain(|tx| tx.send(event.clone()).is_ok());
    }

    fn delete(&self, name: &str) {
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
    fn compact_and_add_silently(&self, name: &str, phase: &str) {
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

    fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    fn respond(&self, request: &Request<hyper::body::Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let path = request.uri().path().to_string();
        let query = parse_query(request.uri().query().unwrap_or(""));
        self.state().seen.push(Seen { path: path.clone(), query: query.clone() });
        if path != "/api/v1/pods"
            || query.get("fieldSelector").map(String::as_str) != Some(&format!("spec.nodeName={NODE}"))
        {
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
async fn serve(server: ApiServer) -> String {
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

fn client(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn gpu(index: u32) -> GpuSnapshot {
    GpuSnapshot {
        index,
        identity: GpuIdentity { uuid: format!("GPU-{index}"), ..GpuIdentity::default() },
        state: GpuState::Ok,
        readings: Some(GpuReadings {
            utilization_percent: Some(50),
            memory: Some(MemoryReading { total_bytes: 100, used_bytes: 10, reserved_bytes: 0 }),
            ..GpuReadings::default()
        }),
        ..GpuSnapshot::default()
    }
}

fn allocation(pod: &str, device: &str) -> Allocation {
    Allocation {
        namespace: "ai".into(),
        pod: pod.into(),
        container: "main".into(),
        resource: "nvidia.com/gpu".into(),
        device_id: device.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_follows_the_node_s_pods_and_ended_pods_leave_at_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = ApiServer::default();
    api.put("train-a", "Running");
    api.put("train-b", "Running");
    let url = serve(api.clone()).await;
    let watch = Arc::new(PodWatch::default());
    tokio::spawn(pod_watch::run(client(&url), NODE.into(), watch.clone()));
    eventually("the first list is in", || watch.health().up && watch.directory().len() == 2).await;

    // The kubelet keeps listing both pods throughout.
    let kubelet = Arc::new(KubeletCache::new(Duration::from_secs(10)));
    kubelet.record_success(vec![allocation("train-a", "GPU-0"), allocation("train-b", "GPU-1")]);
    let attributor = Attributor::new("/nonexistent-procfs", None).with_kubelet(kubelet).with_watch(watch.clone());
    let gpus = [gpu(0), gpu(1)];
    let owner = |pod: &str| ContainerRef { namespace: "ai".into(), pod: pod.into(), container: "main".into() };
    let result = attributor.attach(&gpus);
    assert_eq!(result.owners.get("GPU-0"), Some(&owner("train-a")));
    assert_eq!(result.owners.get("GPU-1"), Some(&owner("train-b")));
    assert_eq!(result.pod_watch.as_ref().map(|w| (w.up, w.pods)), Some((true, 2)));

    // Succeeded: gone from the next cycle although the kubelet still lists it.
    api.put("train-a", "Succeeded");
    eventually("train-a has ended", || watch.directory().ended("ai", "train-a")).await;
    let result = attributor.attach(&gpus);
    assert!(!result.owners.contains_key("GPU-0"), "{:?}", result.owners);
    assert!(result.usage.iter().all(|u| u.owner.pod != "train-a"));

    // Deleted: the same.
    api.delete("train-b");
    eventually("train-b is gone", || watch.directory().by_uid("uid-train-b").is_none()).await;
    assert!(attributor.attach(&gpus).owners.is_empty());

    // History compacted while a pod came: 410 on the next watch, then a relist finds it.
    api.compact_and_add_silently("train-c", "Running");
    eventually("the relist found train-c", || watch.directory().by_uid("uid-train-c").is_some()).await;
    assert!(watch.health().up);
    let d = watch.directory();
    assert!(d.authoritative);
    assert!(d.ended("ai", "train-a") && d.ended("ai", "train-b") && !d.ended("ai", "train-c"));
    assert_eq!(d.by_uid("uid-train-c").and_then(|p| p.container_by_id(&format!("{:0>64}", 7))), Some("main"));

    // Every request was node-scoped; watches resumed from what the list or a bookmark said.
    let seen = api.seen();
    let lists: Vec<&Seen> = seen.iter().filter(|s| !s.query.contains_key("watch")).collect();
    let watches: Vec<&Seen> = seen.iter().filter(|s| s.query.contains_key("watch")).collect();
    assert!(lists.len() >= 2, "initial list and the relist after 410: {seen:?}");
    assert!(!watches.is_empty());
    for s in &seen {
        assert_eq!(s.path, "/api/v1/pods");
        assert_eq!(s.query.get("fieldSelector").map(String::as_str), Some("spec.nodeName=gpu-node-1"), "{s:?}");
    }
    assert_eq!(watches[0].query.get("resourceVersion").map(String::as_str), Some("2"), "from the first list");
    assert!(watches.iter().all(|w| w.query.get("allowWatchBookmarks").map(String::as_str) == Some("true")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_degrades_without_a_crash() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let watch = Arc::new(PodWatch::default());
    let task = tokio::spawn(pod_watch::run(client(&format!("http://127.0.0.1:{port}")), NODE.into(), watch.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!task.is_finished(), "the watch keeps retrying");
    assert!(!watch.health().up);
    assert!(!watch.directory().authoritative, "an unsynced watch says nothing about ended pods");
    // Exclusive attribution still works from the kubelet alone.
    let kubelet = Arc::new(KubeletCache::new(Duration::from_secs(10)));
    kubelet.record_success(vec![allocation("train-a", "GPU-0")]);
    let attributor = Attributor::new("/nonexistent-procfs", None).with_kubelet(kubelet).with_watch(watch);
    let result = attributor.attach(&[gpu(0)]);
    assert_eq!(result.owners.get("GPU-0").map(|o| o.pod.as_str()), Some("train-a"));
    assert_eq!(result.pod_watch.map(|w| w.up), Some(false));
    task.abort();
}
