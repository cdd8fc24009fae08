//! The workspace's in-test Kubernetes API server: it speaks the real wire protocol on
//! loopback HTTP to every client the tests run (kube-rs clients in process, kubectl,
//! the exporter, the adapter and the plugin as processes), from one state behind one
//! router:
//!
//! - nodes and pods: get, and list with `labelSelector`, `fieldSelector` (the fields the
//!   real server indexes) and paging (`limit`, `continue`), as full objects or metadata
//!   only (`as=PartialObjectMetadataList`, which [`ApiServer::metadata_only`] makes the
//!   only answer); the pod watch with history, selectors, delete events and `410 Gone`
//!   ([`watch`]); ConfigMaps: get; EndpointSlices: list by Service; objects of any other
//!   resource discovery lists, kept as metadata and listed the same way ([`objects`]);
//! - the writes of a controller on a node ([`writes`]): Node patches (strategic and JSON
//!   merge, of the object and of `/status`, `resourceVersion` preconditions), ConfigMaps
//!   created and replaced, Events; and DRA device taints ([`taint_rules`]):
//!   `resource.k8s.io` discovery and DeviceTaintRules in the versions a test serves;
//! - what an exporter on one node asks ([`node`]): its pods by `spec.nodeName`, with
//!   the container IDs the kubelet reports, and its DRA driver's ResourceSlices (list
//!   and watch, [`slices`]);
//! - TokenReview and SubjectAccessReview for a delegating authenticator ([`reviews`]),
//!   API discovery ([`discovery`]), Secrets and APIServices with write semantics,
//!   injected answers ([`store`]);
//! - the pods `proxy` subresource (`/api/v1/namespaces/{ns}/pods/[https:]{pod}[:port]/proxy/...`)
//!   forwarded to a [`Backend`]: a real exporter process on a simulated node, its captured
//!   page, or a fault; answered 503 as kube-apiserver does when the pod cannot be reached;
//! - the services `proxy` subresource (`/api/v1/namespaces/{ns}/services/[https:]{name}[:port]/proxy/...`)
//!   forwarded to a [`Backend`] registered for the Service (a Prometheus, say); 503 when
//!   none is;
//! - aggregated APIs (`/apis/custom.metrics.k8s.io/...`) forwarded to a backend, e.g. the
//!   real metrics adapter with a client certificate, as the aggregator forwards;
//! - bearer-token users (an unknown token answers the real 401 `Status`), each allowed
//!   everything: what RBAC allows and refuses is checked on a real API server
//!   (`real-cluster`: `deploy/`'s roles for the exporter, the adapter and `kubectl gpu`'s
//!   viewers); an [`open`](ApiServer::open) server lets anonymous clients in too;
//! - scripted writes and injected failures ([`script`]): the writes that must come, in
//!   order, and the answers a test chooses instead of the real ones;
//! - every request recorded ([`Recorded`]: method, path, query, content type, body,
//!   user, status, bytes, objects listed) for assertions;
//! - served from the test's runtime ([`ApiServer::serve`]), from a thread of its own
//!   for the test process's life ([`ApiServer::start`]), or as a handle that stops,
//!   goes down and comes back on its port ([`ApiServer::run`], [`running`]).
//!
//! Objects are k8s-openapi types, served as the API serves them; Secrets, APIServices,
//! Events and DeviceTaintRules are kept as the JSON a client wrote (each module says
//! why).

pub mod backend;
mod discovery;
mod listing;
pub mod node;
mod objects;
pub mod patch;
mod record;
mod reply;
mod reviews;
mod routes;
pub mod running;
pub mod script;
pub mod selectors;
mod slices;
pub mod store;
pub mod taint_rules;
mod watch;
pub mod writes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::Value;

pub use backend::Backend;
pub use node::{NODE, node_pod, scenario_pod};
pub use patch::apply_node_patch;
pub use record::Recorded;
pub use running::{Down, Running, TEST_TOKEN};
pub use script::{Expect, JSON, MERGE, STRATEGIC};
pub use store::Store;

/// The token of the user allowed everything.
pub const ADMIN_TOKEN: &str = "admin-token";

/// A user the server knows by token; every user may do everything (what RBAC allows is
/// the real server's to say).
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
}

/// A SubjectAccessReview policy: (user, spec) -> (allowed, reason).
pub type Policy = Arc<dyn Fn(&str, &Value) -> (bool, String) + Send + Sync>;

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
    /// Lists and watches of pods and nodes answer only a metadata-only request.
    pub metadata_only: bool,
    /// Pod watch events by resource version, for watches that start behind.
    pub pod_history: Vec<watch::Event>,
    /// Watches from a version below this answer 410 Gone.
    pub compacted: u64,
    pub pod_watches: Vec<watch::Watcher>,
    pub endpoint_slices: Vec<EndpointSlice>,
    /// `None`: the ResourceSlice API is not served (a cluster without DRA).
    pub resource_slices: Option<Vec<ResourceSlice>>,
    /// TokenReview: token → (user, groups).
    pub tokens: BTreeMap<String, (String, Vec<String>)>,
    /// SubjectAccessReview; `None` denies everything.
    pub policy: Option<Policy>,
    /// TokenReview and SubjectAccessReview answer 500.
    pub fail_reviews: bool,
    pub store: Store,
    /// Objects only listed (Services, Deployments, Namespaces...), by collection.
    pub objects: BTreeMap<objects::Collection, objects::Objects>,
    /// Discovery: groups served beyond the built-in ones.
    pub api_groups: Vec<discovery::Group>,
    /// Who a request without credentials is; `None`: it answers 401.
    pub anonymous: Option<User>,
    /// Events created, as sent.
    pub events: Vec<Value>,
    /// Versions of `resource.k8s.io` served (none: the group is not).
    pub resource_versions: Vec<String>,
    /// Of those, the ones that serve DeviceTaintRules.
    pub rule_versions: Vec<String>,
    /// DeviceTaintRules by name, as stored (`apiVersion` as last written).
    pub device_taint_rules: BTreeMap<String, Value>,
    /// Expected writes, injected failures and what went wrong.
    pub script: script::Script,
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
        server.user(ADMIN_TOKEN, "admin");
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

    pub fn user(&self, token: &str, name: &str) {
        self.state().users.insert(token.into(), User { name: name.into() });
    }

    /// Adds or replaces a node: a [`Node`], or JSON a test shaped as one.
    pub fn add_node(&self, node: impl serde::Serialize) {
        let mut node = writes::as_node(node);
        node.metadata.resource_version = Some(self.bump());
        let name = node.metadata.name.clone().unwrap_or_default();
        self.state().nodes.insert(name, node);
    }

    /// Adds or replaces a pod, telling open watches.
    pub fn add_pod(&self, mut pod: Pod) {
        let mut s = self.state();
        s.resource_version += 1;
        pod.metadata.resource_version = Some(s.resource_version.to_string());
        let k = key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref());
        let kind = if s.pods.contains_key(&k) { "MODIFIED" } else { "ADDED" };
        s.pod_event(kind, &pod);
        s.pods.insert(k, pod);
    }

    /// Deletes pod `namespace/name`, telling open watches; nothing if there is none.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        let mut s = self.state();
        let Some(mut pod) = s.pods.remove(&(namespace.into(), name.into())) else { return };
        s.resource_version += 1;
        pod.metadata.resource_version = Some(s.resource_version.to_string());
        s.pod_event("DELETED", &pod);
    }

    /// Compacts the history (watches from before now answer 410 Gone), adds or replaces
    /// a pod that no watch hears of, and closes the open pod watches: a watcher finds the
    /// pod only by relisting after the 410, as after an etcd compaction on a real cluster.
    pub fn compact_and_add_silently(&self, mut pod: Pod) {
        let mut s = self.state();
        s.resource_version += 1;
        pod.metadata.resource_version = Some(s.resource_version.to_string());
        let k = key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref());
        s.pods.insert(k, pod);
        s.compacted = s.resource_version;
        s.pod_history.clear();
        s.pod_watches.clear();
    }

    /// Serves these ResourceSlices from now on (before, their API answers 404).
    pub fn serve_slices(&self, slices: Vec<ResourceSlice>) {
        self.state().resource_slices = Some(slices);
    }

    /// Adds pod `namespace/name` with these labels and nothing else that matters.
    pub fn add_labelled_pod(&self, namespace: &str, name: &str, labels: &[(&str, &str)]) {
        self.add_pod(crate::cluster::labelled_pod(namespace, name, labels));
    }

    /// Forgets the pod history: watches from before now answer 410 Gone.
    pub fn compact(&self) {
        let mut s = self.state();
        s.compacted = s.resource_version;
        s.pod_history.clear();
    }

    /// Lists and watches of pods and nodes are answered only when they ask for metadata
    /// (406 otherwise), as a test of a client that must never hold whole objects.
    pub fn metadata_only(&self) {
        self.state().metadata_only = true;
    }

    pub fn add_endpoint_slice(&self, slice: EndpointSlice) {
        self.state().endpoint_slices.push(slice);
    }

    /// Serves `extension-apiserver-authentication` in `kube-system` with this data.
    pub fn authentication_config_map(&self, data: BTreeMap<String, String>) {
        let mut cm = ConfigMap { data: Some(data), ..ConfigMap::default() };
        cm.metadata.name = Some("extension-apiserver-authentication".into());
        cm.metadata.namespace = Some("kube-system".into());
        self.add_config_map(cm);
    }

    /// TokenReview authenticates `token` as `user` in `groups`.
    pub fn token(&self, token: &str, user: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        self.state().tokens.insert(token.into(), (user.into(), groups));
    }

    /// SubjectAccessReview answers with `policy(user, spec)`.
    pub fn set_policy(&self, policy: impl Fn(&str, &Value) -> (bool, String) + Send + Sync + 'static) {
        self.state().policy = Some(Arc::new(policy));
    }

    /// TokenReview and SubjectAccessReview answer 500 while set.
    pub fn fail_reviews(&self, fail: bool) {
        self.state().fail_reviews = fail;
    }

    /// Discovery lists group version `gv` (`cheese.io/v1`) with these resources, as
    /// (plural, singular, kind, namespaced).
    pub fn add_api_group(&self, gv: &str, resources: &[(&str, &str, &str, bool)]) {
        let resources = resources.iter().map(|(p, s, k, n)| (p.to_string(), s.to_string(), k.to_string(), *n));
        self.state().api_groups.push((gv.into(), resources.collect()));
    }

    /// The Secrets and APIServices.
    pub fn objects(&self) -> Store {
        self.state().store.clone()
    }

    /// How many requests `method path` came.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.state().requests.iter().filter(|r| r.method == method && r.path == path).count()
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
