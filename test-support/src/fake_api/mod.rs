//! An in-test Kubernetes API server for the health loop's tests (`gpu-health-kube`'s
//! loop tests, the exporter's end-to-end health tests and CLI tests): real HTTP on a
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

pub mod patch;
mod routes;
mod script;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};

pub use patch::apply_node_patch;
use routes::{reason_for, serve, status};
pub use script::Expect;

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
