//! An in-test Kubernetes API server for the health loop's tests: real HTTP on a
//! loopback port, the paths, verbs and patch content types of the real API, and the
//! semantics the loop depends on (strategic merge of node conditions by type, a JSON
//! merge patch replacing lists, `resourceVersion` preconditions answering 409,
//! `AlreadyExists`, label selectors, metadata-only lists, managed fields of
//! `spec.unschedulable`), and DRA device taints: discovery of `resource.k8s.io`
//! (`/apis/resource.k8s.io`, `/apis/resource.k8s.io/<version>`) and cluster-scoped
//! DeviceTaintRules in the versions a test serves (list by label selector, get,
//! create with 409 AlreadyExists, JSON merge patch and delete with `resourceVersion`
//! and UID preconditions answering 409). It also answers the exporter's pod watch (an empty pod list,
//! and a watch that stays open without events) so that the exporter binary can run
//! with `--kubernetes.api=auto` against it.
//!
//! Two ways to assert:
//! - **Scripted**: [`FakeApi::expect`] queues the writes (POST, PUT, PATCH, DELETE)
//!   that must come, in order, each checked for method, path, content type and
//!   body, optionally answered with an error status (409, 429, 5xx) instead of being
//!   applied. A write that does not match the head of the queue is a failure, and
//!   [`FakeApi::finish`] fails on an expected write that never came.
//! - **Stateful**: the request log and the objects as they end up.
//!
//! Reads (GET) are always served from the state and are not scripted, since the
//! loop reads its node on every check.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod in_process;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const MERGE: &str = "application/merge-patch+json";
pub const JSON: &str = "application/json";

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
    pub at: Instant,
    /// Bytes of the answer's body.
    pub response_bytes: u64,
    /// Objects in the answer, for a list.
    pub listed: usize,
}

impl Request {
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }

    pub fn describe(&self) -> String {
        format!("{} {}?{} [{}] {}", self.method, self.path, self.query, self.content_type, self.body)
    }
}

type Check = Box<dyn Fn(&Value) -> Result<(), String> + Send>;

/// A write that must come.
pub struct Expect {
    method: String,
    path: String,
    content_type: Option<String>,
    checks: Vec<Check>,
    reply: Option<u16>,
}

impl Expect {
    pub fn new(method: &str, path: &str) -> Self {
        Expect { method: method.into(), path: path.into(), content_type: None, checks: Vec::new(), reply: None }
    }

    pub fn patch(path: &str) -> Self {
        Self::new("PATCH", path).content_type(STRATEGIC)
    }

    pub fn post(path: &str) -> Self {
        Self::new("POST", path).content_type(JSON)
    }

    pub fn put(path: &str) -> Self {
        Self::new("PUT", path).content_type(JSON)
    }

    pub fn content_type(mut self, ct: &str) -> Self {
        self.content_type = Some(ct.into());
        self
    }

    /// The body's value at JSON `pointer` equals `value`.
    pub fn has(mut self, pointer: &str, value: Value) -> Self {
        let p = pointer.to_string();
        self.checks.push(Box::new(move |body| match body.pointer(&p) {
            Some(v) if *v == value => Ok(()),
            other => Err(format!("{p}: expected {value}, found {other:?}")),
        }));
        self
    }

    /// The body has nothing at `pointer`.
    pub fn lacks(mut self, pointer: &str) -> Self {
        let p = pointer.to_string();
        self.checks.push(Box::new(move |body| match body.pointer(&p) {
            None => Ok(()),
            Some(v) => Err(format!("{p}: expected nothing, found {v}")),
        }));
        self
    }

    /// Any check on the body.
    pub fn body(mut self, what: &str, f: impl Fn(&Value) -> bool + Send + 'static) -> Self {
        let what = what.to_string();
        self.checks.push(Box::new(move |body| if f(body) { Ok(()) } else { Err(format!("body: {what}")) }));
        self
    }

    /// Answer with this status instead of applying the request.
    pub fn reply(mut self, status: u16) -> Self {
        self.reply = Some(status);
        self
    }

    fn check(&self, r: &Request) -> Result<(), String> {
        if r.method != self.method || r.path != self.path {
            return Err(format!("expected {} {}", self.method, self.path));
        }
        if let Some(ct) = &self.content_type
            && &r.content_type != ct
        {
            return Err(format!("content type: expected {ct}"));
        }
        for c in &self.checks {
            c(&r.body)?;
        }
        Ok(())
    }
}

struct Fault {
    method: String,
    path_prefix: String,
    status: u16,
    remaining: u32,
}

#[derive(Default)]
struct Cluster {
    nodes: BTreeMap<String, Value>,
    config_maps: BTreeMap<(String, String), Value>,
    events: Vec<Value>,
    resource_version: u64,
    log: Vec<Request>,
    expected: VecDeque<Expect>,
    scripted: bool,
    failures: Vec<String>,
    faults: Vec<Fault>,
    /// Turns true when the server stops: open watches end.
    closing: Option<tokio::sync::watch::Receiver<bool>>,
    /// Versions of `resource.k8s.io` served (none: the group is not).
    resource_versions: Vec<String>,
    /// Of those, the ones that serve `devicetaintrules`.
    rule_versions: Vec<String>,
    /// DeviceTaintRules by name, as stored (apiVersion as last written).
    rules: BTreeMap<String, Value>,
    /// ResourceSlices served to attribution's watch; `None`: the API answers 404.
    slices: Option<Vec<Value>>,
}

impl Cluster {
    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }
}

/// The server; stops when dropped.
pub struct FakeApi {
    cluster: Arc<Mutex<Cluster>>,
    pub address: SocketAddr,
    close: tokio::sync::watch::Sender<bool>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeApi {
    pub fn start() -> Self {
        Self::start_on(0)
    }

    /// On a given port (to bring an API server up where the exporter already looks).
    pub fn start_on(port: u16) -> Self {
        Self::start_with(port, Arc::new(Mutex::new(Cluster::default())))
    }

    fn start_with(port: u16, cluster: Arc<Mutex<Cluster>>) -> Self {
        let (close, closing) = tokio::sync::watch::channel(false);
        cluster.lock().unwrap().closing = Some(closing);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, address) = std::sync::mpsc::channel();
        let state = cluster.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
                ready.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new().fallback(handle).with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let address = address.recv_timeout(Duration::from_secs(10)).unwrap();
        FakeApi { cluster, address, close, stop: Some(stop), thread: Some(thread) }
    }

    /// Stops serving (connections are refused from now on) and returns a handle to
    /// bring the same cluster back on the same port.
    pub fn go_down(mut self) -> DownApi {
        self.shutdown();
        DownApi { cluster: self.cluster.clone(), port: self.address.port() }
    }

    fn shutdown(&mut self) {
        let _ = self.close.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A kubeconfig naming this server, with namespace `gpu-telemetry`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        kubeconfig_for(dir, &self.url())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap()
    }

    pub fn add_node(&self, mut node: Value) {
        let mut c = self.lock();
        let rv = c.next_rv();
        node["metadata"]["resourceVersion"] = json!(rv);
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        c.nodes.insert(name, node);
    }

    pub fn node(&self, name: &str) -> Value {
        self.lock().nodes[name].clone()
    }

    /// Changes a node as another client would (an admin's `kubectl cordon`): a
    /// strategic merge patch under `manager`.
    pub fn patch_node_as(&self, name: &str, manager: &str, patch: Value) {
        let mut c = self.lock();
        let rv = c.next_rv();
        let node = c.nodes.get_mut(name).unwrap();
        apply_node_patch(node, &patch, false, true, manager);
        node["metadata"]["resourceVersion"] = json!(rv);
    }

    /// Creates or replaces a ConfigMap as another client would.
    pub fn put_config_map(&self, namespace: &str, name: &str, data: Value) {
        let mut c = self.lock();
        let rv = c.next_rv();
        let map = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "data": data,
        });
        c.config_maps.insert((namespace.to_string(), name.to_string()), map);
    }

    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock().config_maps.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Serves `resource.k8s.io` in `group` versions, DeviceTaintRules in `rules` of them.
    pub fn serve_resource_api(&self, group: &[&str], rules: &[&str]) {
        let mut c = self.lock();
        c.resource_versions = group.iter().map(|v| v.to_string()).collect();
        c.rule_versions = rules.iter().map(|v| v.to_string()).collect();
    }

    /// Serves these ResourceSlices (`resource.k8s.io/v1`) to the exporter's slice watch.
    pub fn serve_slices(&self, slices: Vec<Value>) {
        self.lock().slices = Some(slices);
    }

    /// Creates a DeviceTaintRule as another client (an admin) would.
    pub fn add_device_taint_rule(&self, mut rule: Value) {
        let mut c = self.lock();
        let rv = c.next_rv();
        let name = rule["metadata"]["name"].as_str().unwrap().to_string();
        rule["metadata"]["resourceVersion"] = json!(rv);
        rule["metadata"]["uid"] = json!(format!("uid-{name}"));
        c.rules.insert(name, rule);
    }

    /// Deletes a DeviceTaintRule as another client would.
    pub fn delete_device_taint_rule(&self, name: &str) {
        self.lock().rules.remove(name);
    }

    pub fn device_taint_rules(&self) -> BTreeMap<String, Value> {
        self.lock().rules.clone()
    }

    pub fn events(&self) -> Vec<Value> {
        self.lock().events.clone()
    }

    pub fn events_with_reason(&self, reason: &str) -> Vec<Value> {
        self.events().into_iter().filter(|e| e["reason"] == reason).collect()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.lock().log.clone()
    }

    pub fn writes(&self) -> Vec<Request> {
        self.requests().into_iter().filter(Request::is_write).collect()
    }

    /// The next `times` requests of `method` to a path starting with `prefix` get `status`.
    pub fn fail_next(&self, method: &str, prefix: &str, status: u16, times: u32) {
        self.lock().faults.push(Fault { method: method.into(), path_prefix: prefix.into(), status, remaining: times });
    }

    /// Queues a write that must come next; from the first call on, every write must
    /// match the head of the queue.
    pub fn expect(&self, e: Expect) {
        let mut c = self.lock();
        c.scripted = true;
        c.expected.push_back(e);
    }

    /// Waits until every expected write came, then fails on any mismatch or on an
    /// expected write that never came.
    pub fn finish(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !self.lock().expected.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let c = self.lock();
        let log: Vec<String> = c.log.iter().filter(|r| r.is_write()).map(Request::describe).collect();
        assert!(
            c.failures.is_empty(),
            "unexpected requests:\n{}\nwrites seen:\n{}",
            c.failures.join("\n"),
            log.join("\n")
        );
        let missing: Vec<String> = c.expected.iter().map(|e| format!("{} {}", e.method, e.path)).collect();
        assert!(
            missing.is_empty(),
            "expected requests that never came:\n{}\nwrites seen:\n{}",
            missing.join("\n"),
            log.join("\n")
        );
    }

    /// Fails if any request was refused as unexpected so far.
    pub fn assert_no_failures(&self) {
        let c = self.lock();
        assert!(c.failures.is_empty(), "{}", c.failures.join("\n"));
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A stopped server whose cluster can come back.
pub struct DownApi {
    cluster: Arc<Mutex<Cluster>>,
    pub port: u16,
}

impl DownApi {
    pub fn come_back(self) -> FakeApi {
        FakeApi::start_with(self.port, self.cluster)
    }
}

/// A kubeconfig naming `url`.
pub fn kubeconfig_for(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n\
             users:\n- name: test\n  user:\n    token: test-token\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n    namespace: gpu-telemetry\n\
             current-context: test\n"
        ),
    )
    .unwrap();
    path
}

/// A GPU node as the kubelet registers it.
pub fn gpu_node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}
        },
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "ok"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ],
            "nodeInfo": {
                "architecture": "amd64", "bootID": format!("boot-{name}"), "containerRuntimeVersion": "containerd://1.7",
                "kernelVersion": "6.1", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0", "machineID": "m",
                "operatingSystem": "linux", "osImage": "Debian", "systemUUID": "s"
            }
        }
    })
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code
    });
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn ok(body: &Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn reason_for(code: u16) -> &'static str {
    match code {
        409 => "Conflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

async fn handle(
    State(cluster): State<Arc<Mutex<Cluster>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let body_value = if body.is_empty() { Value::Null } else { serde_json::from_slice(&body).unwrap_or(Value::Null) };
    let request = Request {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        content_type,
        body: body_value,
        at: Instant::now(),
        response_bytes: 0,
        listed: 0,
    };
    let mut c = cluster.lock().unwrap();
    c.log.push(request.clone());
    if request.is_write() && c.scripted {
        match c.expected.front().map(|e| e.check(&request)) {
            Some(Ok(())) => {
                let e = c.expected.pop_front().unwrap();
                if let Some(code) = e.reply {
                    return status(code, reason_for(code), "scripted by the test");
                }
            }
            Some(Err(why)) => {
                let line = format!("{}: {why}", request.describe());
                c.failures.push(line);
                return status(400, "BadRequest", "not the request the test expected");
            }
            None => {
                let line = format!("{}: no more writes expected", request.describe());
                c.failures.push(line);
                return status(400, "BadRequest", "not the request the test expected");
            }
        }
    }
    if let Some(f) = c
        .faults
        .iter_mut()
        .find(|f| f.remaining > 0 && f.method == request.method && request.path.starts_with(&f.path_prefix))
    {
        f.remaining -= 1;
        let code = f.status;
        return status(code, reason_for(code), "injected by the test");
    }
    let index = c.log.len() - 1;
    let response = serve(&mut c, &request, &accept);
    let bytes = axum::body::HttpBody::size_hint(response.body()).exact().unwrap_or(0);
    c.log[index].response_bytes = bytes;
    response
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| decode(v))
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

fn selector_matches(selector: &str, labels: &Value) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| match term.split_once('=') {
        Some((k, v)) => labels.get(k.trim()).and_then(Value::as_str) == Some(v.trim()),
        None => labels.get(term.trim()).is_some(),
    })
}

fn serve(c: &mut Cluster, r: &Request, accept: &str) -> Response {
    let parts: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
    match (r.method.as_str(), parts.as_slice()) {
        ("GET", ["api", "v1", "nodes"]) => {
            let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
            let items: Vec<Value> =
                c.nodes.values().filter(|n| selector_matches(&selector, &n["metadata"]["labels"])).cloned().collect();
            let rv = c.resource_version.to_string();
            let listed = items.len();
            if let Some(last) = c.log.last_mut() {
                last.listed = listed;
            }
            if accept.contains("as=PartialObjectMetadataList") {
                let items: Vec<Value> = items
                    .iter()
                    .map(|n| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": n["metadata"]}))
                    .collect();
                ok(
                    &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": rv}, "items": items}),
                )
            } else {
                ok(
                    &json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": rv}, "items": items}),
                )
            }
        }
        // Attribution's ResourceSlice watch: 404 (no DRA, as on a 1.33 cluster) unless
        // the test serves slices.
        ("GET", ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let Some(items) = c.slices.clone() else {
                return status(404, "NotFound", "the server could not find the requested resource");
            };
            let kind = "ResourceSliceList";
            list_or_quiet_watch(c, &r.query, &json!({"apiVersion": "resource.k8s.io/v1", "kind": kind}), items)
        }
        ("GET", ["api", "v1", "pods"]) => {
            list_or_quiet_watch(c, &r.query, &json!({"apiVersion": "v1", "kind": "PodList"}), Vec::new())
        }
        ("GET", ["api", "v1", "nodes", name]) => match c.nodes.get(*name) {
            Some(n) => ok(n),
            None => status(404, "NotFound", &format!("nodes \"{name}\" not found")),
        },
        ("PATCH", ["api", "v1", "nodes", name, rest @ ..]) => {
            let subresource = match rest {
                [] => false,
                ["status"] => true,
                _ => return status(404, "NotFound", "no such subresource"),
            };
            let merge = match r.content_type.as_str() {
                STRATEGIC => false,
                MERGE => true,
                other => return status(415, "UnsupportedMediaType", &format!("{other} is not supported here")),
            };
            let manager = query_param(&r.query, "fieldManager").unwrap_or_else(|| "unknown".into());
            let rv = c.next_rv();
            let Some(node) = c.nodes.get_mut(*name) else {
                return status(404, "NotFound", &format!("nodes \"{name}\" not found"));
            };
            let mut patch = r.body.clone();
            if let Some(want) = patch.pointer("/metadata/resourceVersion").cloned() {
                if want != node["metadata"]["resourceVersion"] {
                    return status(
                        409,
                        "Conflict",
                        "Operation cannot be fulfilled on nodes: the object has been modified; please apply your changes to the latest version and try again",
                    );
                }
                patch["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            }
            if subresource {
                patch = json!({"status": patch.get("status").cloned().unwrap_or(Value::Null)});
            } else if let Some(o) = patch.as_object_mut() {
                o.remove("status");
            }
            apply_node_patch(node, &patch, merge, !subresource, &manager);
            node["metadata"]["resourceVersion"] = json!(rv);
            ok(node)
        }
        ("GET", ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            match c.config_maps.get(&(ns.to_string(), name.to_string())) {
                Some(m) => ok(m),
                None => status(404, "NotFound", &format!("configmaps \"{name}\" not found")),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "configmaps"]) => {
            let name = r.body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let key = (ns.to_string(), name.clone());
            if c.config_maps.contains_key(&key) {
                return status(409, "AlreadyExists", &format!("configmaps \"{name}\" already exists"));
            }
            let rv = c.next_rv();
            let mut m = r.body.clone();
            m["metadata"]["resourceVersion"] = json!(rv);
            m["metadata"]["namespace"] = json!(ns);
            c.config_maps.insert(key, m.clone());
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], m.to_string()).into_response()
        }
        ("PUT", ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            let key = (ns.to_string(), name.to_string());
            let Some(current) = c.config_maps.get(&key) else {
                return status(404, "NotFound", &format!("configmaps \"{name}\" not found"));
            };
            if r.body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return status(
                    409,
                    "Conflict",
                    "Operation cannot be fulfilled on configmaps: the object has been modified; please apply your changes to the latest version and try again",
                );
            }
            let rv = c.next_rv();
            let mut m = r.body.clone();
            m["metadata"]["resourceVersion"] = json!(rv);
            c.config_maps.insert(key, m.clone());
            ok(&m)
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            let name = r.body["metadata"]["name"].as_str().unwrap_or("").to_string();
            if c.events.iter().any(|e| e["metadata"]["name"] == name.as_str()) {
                return status(409, "AlreadyExists", &format!("events \"{name}\" already exists"));
            }
            let rv = c.next_rv();
            let mut e = r.body.clone();
            e["metadata"]["resourceVersion"] = json!(rv);
            e["metadata"]["namespace"] = json!(ns);
            c.events.push(e.clone());
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], e.to_string()).into_response()
        }
        (_, ["apis", "resource.k8s.io", rest @ ..]) => serve_resource(c, r, rest),
        _ => {
            let line = format!("{}: no such route in the test API server", r.describe());
            c.failures.push(line);
            status(404, "NotFound", "no such route")
        }
    }
}

/// `resource.k8s.io`: discovery and DeviceTaintRules, in the versions served.
fn serve_resource(c: &mut Cluster, r: &Request, rest: &[&str]) -> Response {
    match (r.method.as_str(), rest) {
        ("GET", []) => {
            if c.resource_versions.is_empty() {
                return status(404, "NotFound", "the server could not find the requested resource");
            }
            let versions: Vec<Value> = c
                .resource_versions
                .iter()
                .map(|v| json!({"groupVersion": format!("resource.k8s.io/{v}"), "version": v}))
                .collect();
            ok(&json!({"kind": "APIGroup", "apiVersion": "v1", "name": "resource.k8s.io",
                "versions": versions, "preferredVersion": versions[0]}))
        }
        ("GET", [version]) if c.resource_versions.iter().any(|v| v == version) => {
            let mut resources = vec![json!({"name": "resourceslices", "singularName": "resourceslice",
                "namespaced": false, "kind": "ResourceSlice", "verbs": ["get", "list", "watch"]})];
            if c.rule_versions.iter().any(|v| v == version) {
                resources.push(json!({"name": "devicetaintrules", "singularName": "devicetaintrule",
                    "namespaced": false, "kind": "DeviceTaintRule",
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}));
            }
            ok(&json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": format!("resource.k8s.io/{version}"), "resources": resources}))
        }
        (_, [version, "devicetaintrules", tail @ ..]) if c.rule_versions.iter().any(|v| v == version) => {
            let version = version.to_string();
            match tail {
                [] => serve_rules(c, r, &version),
                [name] => serve_rule(c, r, &version, name),
                _ => status(404, "NotFound", "no such subresource"),
            }
        }
        _ => status(404, "NotFound", "the server could not find the requested resource"),
    }
}

fn as_version(rule: &Value, version: &str) -> Value {
    let mut rule = rule.clone();
    rule["apiVersion"] = json!(format!("resource.k8s.io/{version}"));
    rule
}

fn conflict(what: &str) -> Response {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on devicetaintrules.resource.k8s.io \"{what}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
    )
}

/// `.../devicetaintrules`: list (label selector) and create.
fn serve_rules(c: &mut Cluster, r: &Request, version: &str) -> Response {
    match r.method.as_str() {
        "GET" => {
            let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
            let items: Vec<Value> = c
                .rules
                .values()
                .filter(|rule| selector_matches(&selector, &rule["metadata"]["labels"]))
                .map(|rule| as_version(rule, version))
                .collect();
            if let Some(last) = c.log.last_mut() {
                last.listed = items.len();
            }
            let rv = c.resource_version.to_string();
            ok(&json!({"apiVersion": format!("resource.k8s.io/{version}"), "kind": "DeviceTaintRuleList",
                "metadata": {"resourceVersion": rv}, "items": items}))
        }
        "POST" => {
            if r.body["apiVersion"] != json!(format!("resource.k8s.io/{version}")) {
                return status(400, "BadRequest", "the body's apiVersion is not the path's");
            }
            let name = r.body["metadata"]["name"].as_str().unwrap_or("").to_string();
            if c.rules.contains_key(&name) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("devicetaintrules.resource.k8s.io \"{name}\" already exists"),
                );
            }
            let rv = c.next_rv();
            let mut rule = r.body.clone();
            rule["metadata"]["resourceVersion"] = json!(rv);
            rule["metadata"]["uid"] = json!(format!("uid-{name}-{rv}"));
            c.rules.insert(name, rule.clone());
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], rule.to_string()).into_response()
        }
        _ => status(405, "MethodNotAllowed", "not on a collection"),
    }
}

/// `.../devicetaintrules/<name>`: get, JSON merge patch, delete.
fn serve_rule(c: &mut Cluster, r: &Request, version: &str, name: &str) -> Response {
    let Some(current) = c.rules.get(name).cloned() else {
        return status(404, "NotFound", &format!("devicetaintrules.resource.k8s.io \"{name}\" not found"));
    };
    match r.method.as_str() {
        "GET" => ok(&as_version(&current, version)),
        "PATCH" => {
            if r.content_type != MERGE {
                return status(415, "UnsupportedMediaType", "only merge patches here");
            }
            let mut patch = r.body.clone();
            if let Some(want) = patch.pointer("/metadata/resourceVersion").cloned() {
                if want != current["metadata"]["resourceVersion"] {
                    return conflict(name);
                }
                patch["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            }
            let rv = c.next_rv();
            let mut rule = current;
            merge(&mut rule, &patch, "", true);
            rule["metadata"]["resourceVersion"] = json!(rv);
            c.rules.insert(name.to_string(), rule.clone());
            ok(&as_version(&rule, version))
        }
        "DELETE" => {
            let pre = &r.body["preconditions"];
            let uid_ok = pre.get("uid").is_none_or(|u| *u == current["metadata"]["uid"]);
            let rv_ok = pre.get("resourceVersion").is_none_or(|v| *v == current["metadata"]["resourceVersion"]);
            if !uid_ok || !rv_ok {
                return conflict(name);
            }
            c.rules.remove(name);
            ok(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "resource.k8s.io", "kind": "devicetaintrules"}}))
        }
        _ => status(405, "MethodNotAllowed", "not on a rule"),
    }
}

/// A list of `items`, or a watch on which nothing ever changes: it stays open until its
/// timeout or the server stops.
fn list_or_quiet_watch(c: &Cluster, query: &str, list: &Value, items: Vec<Value>) -> Response {
    let watch = query_param(query, "watch").is_some_and(|w| w == "true" || w == "1");
    if !watch {
        let mut list = list.clone();
        list["metadata"] = json!({"resourceVersion": c.resource_version.to_string()});
        list["items"] = json!(items);
        return ok(&list);
    }
    let seconds = query_param(query, "timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(290);
    let mut closing = c.closing.clone().unwrap();
    let end = async move {
        tokio::select! {
            _ = closing.wait_for(|c| *c) => {}
            () = tokio::time::sleep(Duration::from_secs(seconds)) => {}
        }
        Ok::<_, std::convert::Infallible>(Bytes::new())
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from_stream(futures::stream::once(end)))
        .unwrap()
}

/// Applies a node patch: strategic merge (conditions merged by type, other lists
/// replaced, `null` deletes) or JSON merge (every list replaced).
pub fn apply_node_patch(node: &mut Value, patch: &Value, json_merge: bool, main: bool, manager: &str) {
    merge(node, patch, "", json_merge);
    if main && patch.pointer("/spec").and_then(|s| s.get("unschedulable")).is_some() {
        let entries = node["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
        let mut kept: Vec<Value> = entries
            .into_iter()
            .filter(|e| e["manager"] != manager && e.pointer("/fieldsV1/f:spec/f:unschedulable").is_none())
            .collect();
        kept.push(json!({
            "manager": manager, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:unschedulable": {}}}
        }));
        node["metadata"]["managedFields"] = Value::Array(kept);
    }
}

fn merge(target: &mut Value, patch: &Value, path: &str, json_merge: bool) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        let sub = format!("{path}/{k}");
        if v.is_null() {
            t.remove(k);
        } else if !json_merge && sub == "/status/conditions" && v.is_array() {
            let list = t.entry(k.clone()).or_insert_with(|| json!([]));
            for item in v.as_array().unwrap() {
                let arr = list.as_array_mut().unwrap();
                match arr.iter_mut().find(|c| c["type"] == item["type"]) {
                    Some(existing) => merge(existing, item, &format!("{sub}/item"), false),
                    None => arr.push(item.clone()),
                }
            }
        } else if v.is_object() && t.get(k).is_some_and(Value::is_object) {
            merge(t.get_mut(k).unwrap(), v, &sub, json_merge);
        } else {
            t.insert(k.clone(), v.clone());
        }
    }
}

/// Self-checks of the server's own semantics.
pub fn self_check() {
    let mut node = gpu_node("n");
    merge(&mut node, &json!({"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}), "", false);
    assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 3, "strategic merge keeps the others");
    merge(&mut node, &json!({"status": {"conditions": [{"type": "GPUHealthy", "status": "True"}]}}), "", true);
    assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 1, "JSON merge replaces the list");
    assert!(selector_matches("nvidia.com/gpu.present=true", &gpu_node("x")["metadata"]["labels"]));
    assert_eq!(decode("nvidia.com%2Fgpu.present%3Dtrue"), "nvidia.com/gpu.present=true");
}
