//! An in-test Kubernetes API server that speaks the real wire protocol on loopback HTTP,
//! for clients such as `kubectl gpu` (a kube-rs client, or kubectl itself):
//!
//! - nodes and pods: get, and list with `labelSelector`, `fieldSelector` (the fields the
//!   real server indexes) and paging (`limit`, `continue`); ConfigMaps: get;
//! - the pods `proxy` subresource (`/api/v1/namespaces/{ns}/pods/[https:]{pod}[:port]/proxy/...`)
//!   forwarded to a [`Backend`]: a real exporter process on a simulated node, its captured
//!   page, or a fault; answered 503 as kube-apiserver does when the pod cannot be reached;
//! - the services `proxy` subresource (`/api/v1/namespaces/{ns}/services/[https:]{name}[:port]/proxy/...`)
//!   forwarded to a [`Backend`] registered for the Service (a Prometheus, say); 503 when
//!   none is;
//! - aggregated APIs (`/apis/custom.metrics.k8s.io/...`) forwarded to a backend, e.g. the
//!   real metrics adapter with a client certificate, as the aggregator forwards;
//! - bearer-token users, each allowed everything or what RBAC manifests grant
//!   ([`rbac::Grants`]), refused with the real 401/403 `Status` bodies;
//! - every request recorded (method, path, query, user, status) for assertions.
//!
//! Objects are k8s-openapi types, served as the API serves them.

pub mod backend;
pub mod rbac;
mod routes;
pub mod selectors;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};

pub use backend::Backend;
pub use rbac::Grants;

/// The token of the user allowed everything.
pub const ADMIN_TOKEN: &str = "admin-token";

/// What a user may do.
#[derive(Debug, Clone)]
pub enum Access {
    All,
    Rbac(Grants),
}

/// A user the server knows by token.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub access: Access,
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub user: String,
    pub status: u16,
}

#[derive(Default)]
pub(crate) struct State {
    pub nodes: BTreeMap<String, Node>,
    pub pods: BTreeMap<(String, String), Pod>,
    pub config_maps: BTreeMap<(String, String), ConfigMap>,
    pub proxies: BTreeMap<(String, String), Backend>,
    pub services: BTreeMap<(String, String), Backend>,
    pub aggregated: BTreeMap<String, Backend>,
    pub users: BTreeMap<String, User>,
    pub requests: Vec<Recorded>,
    pub resource_version: u64,
}

/// The server's state; cheap to clone, shared with the serving task.
#[derive(Clone)]
pub struct ApiServer(pub(crate) Arc<Mutex<State>>);

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

fn key(namespace: Option<&String>, name: Option<&String>) -> (String, String) {
    (namespace.cloned().unwrap_or_else(|| "default".into()), name.cloned().unwrap_or_default())
}

impl ApiServer {
    /// A server with one user, `admin` ([`ADMIN_TOKEN`]), allowed everything.
    pub fn new() -> ApiServer {
        let server = ApiServer(Arc::default());
        server.user(ADMIN_TOKEN, "admin", Access::All);
        server
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) -> String {
        let mut s = self.state();
        s.resource_version += 1;
        s.resource_version.to_string()
    }

    pub fn user(&self, token: &str, name: &str, access: Access) {
        self.state().users.insert(token.into(), User { name: name.into(), access });
    }

    pub fn add_node(&self, mut node: Node) {
        node.metadata.resource_version = Some(self.bump());
        let name = node.metadata.name.clone().unwrap_or_default();
        self.state().nodes.insert(name, node);
    }

    pub fn add_pod(&self, mut pod: Pod) {
        pod.metadata.resource_version = Some(self.bump());
        let k = key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref());
        self.state().pods.insert(k, pod);
    }

    pub fn add_config_map(&self, mut cm: ConfigMap) {
        cm.metadata.resource_version = Some(self.bump());
        let k = key(cm.metadata.namespace.as_ref(), cm.metadata.name.as_ref());
        self.state().config_maps.insert(k, cm);
    }

    /// What answers `pods/proxy` of pod `namespace/name`.
    pub fn proxy(&self, namespace: &str, name: &str, backend: Backend) {
        self.state().proxies.insert((namespace.into(), name.into()), backend);
    }

    /// What answers `services/proxy` of Service `namespace/name` (any port).
    pub fn service_proxy(&self, namespace: &str, name: &str, backend: Backend) {
        self.state().services.insert((namespace.into(), name.into()), backend);
    }

    /// What answers the aggregated API `group` (`custom.metrics.k8s.io`).
    pub fn aggregate(&self, group: &str, backend: Backend) {
        self.state().aggregated.insert(group.into(), backend);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    /// Forgets the requests so far.
    pub fn clear_requests(&self) {
        self.state().requests.clear();
    }

    /// Serves on 127.0.0.1 from a runtime of its own (so that blocking tests can use it);
    /// returns the address. The server lives as long as the test process.
    pub fn start(&self) -> SocketAddr {
        let (tx, rx) = std::sync::mpsc::channel();
        let server = self.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, routes::router(server)).await.unwrap();
            });
        });
        rx.recv().unwrap()
    }

    /// Serves on 127.0.0.1 from the caller's runtime; returns the address.
    pub async fn serve(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = routes::router(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }
}

/// Writes a kubeconfig for `addr` with one context per `(context, token, namespace)`;
/// the first is current.
pub fn kubeconfig(dir: &Path, addr: SocketAddr, contexts: &[(&str, &str, &str)]) -> PathBuf {
    let mut text =
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: http://{addr}\n");
    text.push_str("users:\n");
    for (context, token, _) in contexts {
        text.push_str(&format!("- name: {context}\n  user:\n    token: {token}\n"));
    }
    text.push_str("contexts:\n");
    for (context, _, namespace) in contexts {
        text.push_str(&format!(
            "- name: {context}\n  context:\n    cluster: test\n    user: {context}\n    namespace: {namespace}\n"
        ));
    }
    text.push_str(&format!("current-context: {}\n", contexts.first().map_or("", |c| c.0)));
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}
