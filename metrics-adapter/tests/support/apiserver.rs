//! An in-test Kubernetes API server speaking the real wire protocol on loopback HTTP:
//! the authentication ConfigMap, TokenReview, SubjectAccessReview, EndpointSlices,
//! metadata list/watch of pods and nodes, and API discovery (`/api/v1`, `/apis`,
//! `/apis/{group}/{version}`: the built-in groups a cluster serves, plus `groups`). It checks the bearer token the adapter presents
//! and records every request for assertions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// The token the adapter's kubeconfig carries.
pub const ADAPTER_TOKEN: &str = "adapter-service-account-token";

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: String,
}

/// A SubjectAccessReview policy: (user, spec) -> (allowed, reason).
pub type Policy = Arc<dyn Fn(&str, &Value) -> (bool, String) + Send + Sync>;

type Labels = BTreeMap<String, String>;
/// A discovered resource: (plural, singular, kind, namespaced).
pub type Resource = (String, String, String, bool);
/// A group version and its resources.
pub type GroupVersion = (String, Vec<Resource>);
type Shared<T> = Arc<Mutex<T>>;

#[derive(Clone)]
pub struct Fake {
    pub configmap: Arc<Mutex<BTreeMap<String, String>>>,
    /// token -> (user, groups)
    pub tokens: Shared<BTreeMap<String, (String, Vec<String>)>>,
    pub policy: Arc<Mutex<Policy>>,
    pub endpoint_slices: Arc<Mutex<Vec<Value>>>,
    /// (namespace, name, labels)
    pub pods: Shared<Vec<(String, String, Labels)>>,
    pub nodes: Shared<Vec<(String, Labels)>>,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    pub pod_events: broadcast::Sender<Value>,
    pub resource_version: Arc<Mutex<u64>>,
    /// When set, TokenReview and SubjectAccessReview answer 500.
    pub fail_reviews: Arc<std::sync::atomic::AtomicBool>,
    /// Secrets and APIServices (the serving-certificate Secret and caBundle).
    pub objects: super::objects::Store,
    /// Discovery: API groups beyond the built-in ones, as (group/version, resources as
    /// (plural, singular, kind, namespaced)).
    pub groups: Shared<Vec<GroupVersion>>,
}

impl Default for Fake {
    fn default() -> Self {
        let (pod_events, _) = broadcast::channel(1024);
        let deny_all: Policy = Arc::new(|_, _| (false, String::new()));
        Self {
            configmap: Arc::default(),
            tokens: Arc::default(),
            policy: Arc::new(Mutex::new(deny_all)),
            endpoint_slices: Arc::default(),
            pods: Arc::default(),
            nodes: Arc::default(),
            requests: Arc::default(),
            pod_events,
            resource_version: Arc::new(Mutex::new(100)),
            fail_reviews: Arc::default(),
            objects: super::objects::Store::default(),
            groups: Arc::default(),
        }
    }
}

type DiscoveryResource = (&'static str, &'static str, &'static str, bool);

/// What a v1.33 API server lists for the groups the tests use (subresources included, as
/// the real documents have them).
const CORE_V1: &[DiscoveryResource] = &[
    ("pods", "pod", "Pod", true),
    ("pods/log", "", "Pod", true),
    ("pods/status", "", "Pod", true),
    ("nodes", "node", "Node", false),
    ("namespaces", "namespace", "Namespace", false),
    ("services", "service", "Service", true),
    ("configmaps", "configmap", "ConfigMap", true),
    ("events", "event", "Event", true),
    ("persistentvolumes", "persistentvolume", "PersistentVolume", false),
    ("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true),
];
const BUILTIN_GROUPS: &[(&str, &[DiscoveryResource])] = &[
    (
        "apps/v1",
        &[
            ("deployments", "deployment", "Deployment", true),
            ("deployments/scale", "", "Scale", true),
            ("statefulsets", "statefulset", "StatefulSet", true),
            ("replicasets", "replicaset", "ReplicaSet", true),
            ("daemonsets", "daemonset", "DaemonSet", true),
        ],
    ),
    ("batch/v1", &[("jobs", "job", "Job", true), ("cronjobs", "cronjob", "CronJob", true)]),
    ("events.k8s.io/v1", &[("events", "event", "Event", true)]),
    // An aggregated API that is down: its document answers 503.
    ("flaky.example.com/v1", &[]),
    // This adapter's group: never read (it lists metrics, not resources).
    ("custom.metrics.k8s.io/v1beta2", &[]),
];

fn resource_list(gv: &str, resources: impl Iterator<Item = Resource>) -> Value {
    let resources: Vec<Value> = resources
        .map(|(name, singular, kind, namespaced)| {
            json!({"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": ["get", "list", "watch"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn owned(r: &[DiscoveryResource]) -> impl Iterator<Item = Resource> + '_ {
    r.iter().map(|(n, s, k, ns)| ((*n).to_owned(), (*s).to_owned(), (*k).to_owned(), *ns))
}

impl Fake {
    fn all_groups(&self) -> Vec<GroupVersion> {
        let mut all: Vec<GroupVersion> =
            BUILTIN_GROUPS.iter().map(|(gv, r)| ((*gv).to_owned(), owned(r).collect())).collect();
        all.extend(self.groups.lock().unwrap().iter().cloned());
        all
    }
}

async fn core_resources(State(fake): State<Fake>) -> Response {
    fake.record("GET", "/api/v1", "", "");
    json_response(resource_list("v1", owned(CORE_V1)))
}

async fn api_groups(State(fake): State<Fake>) -> Response {
    fake.record("GET", "/apis", "", "");
    let groups: Vec<Value> = fake
        .all_groups()
        .iter()
        .map(|(gv, _)| {
            let (group, version) = gv.split_once('/').unwrap();
            let v = json!({"groupVersion": gv, "version": version});
            json!({"name": group, "versions": [v.clone()], "preferredVersion": v})
        })
        .collect();
    json_response(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

async fn group_resources(
    State(fake): State<Fake>,
    axum::extract::Path((group, version)): axum::extract::Path<(String, String)>,
) -> Response {
    let gv = format!("{group}/{version}");
    fake.record("GET", &format!("/apis/{gv}"), "", "");
    if gv == "flaky.example.com/v1" {
        return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "the aggregated API is down");
    }
    match fake.all_groups().into_iter().find(|(g, _)| *g == gv) {
        Some((_, resources)) => json_response(resource_list(&gv, resources.into_iter())),
        None => status(StatusCode::NOT_FOUND, "NotFound", &format!("no group version {gv}")),
    }
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code.as_u16()});
    (code, [("content-type", "application/json")], body.to_string()).into_response()
}

fn json_response(v: Value) -> Response {
    (StatusCode::OK, [("content-type", "application/json")], v.to_string()).into_response()
}

fn pod_meta(ns: &str, name: &str, labels: &BTreeMap<String, String>, rv: u64) -> Value {
    json!({"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{
        "name": name, "namespace": ns, "labels": labels, "resourceVersion": rv.to_string(),
        "uid": format!("uid-{ns}-{name}"),
        "managedFields": [{"manager":"kubelet","operation":"Update","apiVersion":"v1"}]
    }})
}

impl Fake {
    pub fn record(&self, method: &str, path: &str, query: &str, body: &str) {
        self.requests.lock().unwrap().push(Recorded {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            body: body.into(),
        });
    }

    pub fn count(&self, method: &str, path: &str) -> usize {
        self.requests.lock().unwrap().iter().filter(|r| r.method == method && r.path == path).count()
    }

    pub fn add_pod(&self, ns: &str, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        self.pods.lock().unwrap().push((ns.into(), name.into(), labels.clone()));
        let rv = {
            let mut rv = self.resource_version.lock().unwrap();
            *rv += 1;
            *rv
        };
        let _ = self.pod_events.send(json!({"type":"ADDED","object": pod_meta(ns, name, &labels, rv)}));
    }

    pub fn set_policy(&self, p: impl Fn(&str, &Value) -> (bool, String) + Send + Sync + 'static) {
        *self.policy.lock().unwrap() = Arc::new(p);
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/v1/namespaces/{ns}/configmaps/{name}", get(configmap))
            .route("/apis/authentication.k8s.io/v1/tokenreviews", post(token_review))
            .route("/apis/authorization.k8s.io/v1/subjectaccessreviews", post(access_review))
            .route("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", get(endpoint_slices))
            .route("/api/v1/pods", get(pods))
            .route("/api/v1/nodes", get(nodes))
            .route("/api/v1", get(core_resources))
            .route("/apis", get(api_groups))
            .route("/apis/{group}/{version}", get(group_resources))
            .merge(self.objects.router())
            .fallback(|req: axum::extract::Request| async move {
                status(StatusCode::NOT_FOUND, "NotFound", &format!("no route for {}", req.uri()))
            })
            .layer(axum::middleware::from_fn_with_state(self.clone(), check_token))
            .with_state(self.clone())
    }

    /// Serves on loopback; returns the address.
    pub async fn serve(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = self.router();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    /// A kubeconfig for the adapter pointing at `addr`.
    pub fn kubeconfig(addr: SocketAddr, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("adapter-kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\nusers:\n- name: adapter\n  user:\n    token: {ADAPTER_TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: adapter\n    namespace: gpu-telemetry\ncurrent-context: fake\n"
            ),
        )
        .unwrap();
        path
    }
}

async fn check_token(State(fake): State<Fake>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let ok = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {ADAPTER_TOKEN}"));
    if !ok {
        fake.record(req.method().as_str(), req.uri().path(), req.uri().query().unwrap_or(""), "UNAUTHORIZED");
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    }
    next.run(req).await
}

async fn configmap(
    State(fake): State<Fake>,
    axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>,
) -> Response {
    fake.record("GET", &format!("/api/v1/namespaces/{ns}/configmaps/{name}"), "", "");
    if ns != "kube-system" || name != "extension-apiserver-authentication" {
        return status(StatusCode::NOT_FOUND, "NotFound", &format!("configmaps \"{name}\" not found"));
    }
    let data = fake.configmap.lock().unwrap().clone();
    json_response(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"namespace":ns,"resourceVersion":"7"},"data":data}),
    )
}

async fn token_review(State(fake): State<Fake>, headers: HeaderMap, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).to_string();
    fake.record("POST", "/apis/authentication.k8s.io/v1/tokenreviews", "", &text);
    if fake.fail_reviews.load(std::sync::atomic::Ordering::SeqCst) {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "etcd is having a bad day");
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/json") {
        return status(StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType", "want application/json");
    }
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    if review["apiVersion"] != "authentication.k8s.io/v1" || review["kind"] != "TokenReview" {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not a TokenReview");
    }
    let token = review["spec"]["token"].as_str().unwrap_or_default().to_owned();
    let found = fake.tokens.lock().unwrap().get(&token).cloned();
    let st = match found {
        Some((user, groups)) => {
            json!({"authenticated": true, "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}})
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    (StatusCode::CREATED, [("content-type", "application/json")], json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","metadata":{"creationTimestamp":null},"spec":review["spec"],"status":st}).to_string()).into_response()
}

async fn access_review(State(fake): State<Fake>, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).to_string();
    fake.record("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "", &text);
    if fake.fail_reviews.load(std::sync::atomic::Ordering::SeqCst) {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "etcd is having a bad day");
    }
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    if review["kind"] != "SubjectAccessReview" {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "not a SubjectAccessReview");
    }
    let user = review["spec"]["user"].as_str().unwrap_or_default().to_owned();
    let policy = fake.policy.lock().unwrap().clone();
    let (allowed, reason) = policy(&user, &review["spec"]);
    (StatusCode::CREATED, [("content-type", "application/json")], json!({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","metadata":{"creationTimestamp":null},"spec":review["spec"],"status":{"allowed":allowed,"reason":reason}}).to_string()).into_response()
}

async fn endpoint_slices(
    State(fake): State<Fake>,
    axum::extract::Path(ns): axum::extract::Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    fake.record("GET", &format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"), &selector, "");
    let items: Vec<Value> = fake
        .endpoint_slices
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s["metadata"]["namespace"] == ns.as_str())
        .filter(|s| {
            let svc = s["metadata"]["labels"]["kubernetes.io/service-name"].as_str().unwrap_or_default();
            selector == format!("kubernetes.io/service-name={svc}")
        })
        .cloned()
        .collect();
    json_response(
        json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSliceList","metadata":{"resourceVersion":"55"},"items":items}),
    )
}

fn wants_metadata(headers: &HeaderMap) -> bool {
    headers.get("accept").and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

async fn pods(State(fake): State<Fake>, headers: HeaderMap, Query(q): Query<BTreeMap<String, String>>) -> Response {
    let query = q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    fake.record("GET", "/api/v1/pods", &query, "");
    if !wants_metadata(&headers) {
        return status(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", "this fake serves metadata only");
    }
    let rv = *fake.resource_version.lock().unwrap();
    if q.get("watch").map(String::as_str) == Some("true") || q.get("watch").map(String::as_str) == Some("1") {
        let rx = fake.pod_events.subscribe();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(v) => Some((Ok::<_, std::io::Error>(Bytes::from(format!("{v}\n"))), rx)),
                Err(_) => None,
            }
        });
        return (StatusCode::OK, [("content-type", "application/json")], Body::from_stream(stream)).into_response();
    }
    // Paged like the real API server: `limit` items per page, `continue` to resume.
    let pods = fake.pods.lock().unwrap().clone();
    let start: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let end = start.saturating_add(limit).min(pods.len());
    let items: Vec<Value> =
        pods[start.min(end)..end].iter().map(|(ns, name, labels)| pod_meta(ns, name, labels, rv)).collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if end < pods.len() {
        metadata["continue"] = json!(end.to_string());
    }
    json_response(
        json!({"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":metadata,"items":items}),
    )
}

async fn nodes(State(fake): State<Fake>, headers: HeaderMap, Query(q): Query<BTreeMap<String, String>>) -> Response {
    let query = q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    fake.record("GET", "/api/v1/nodes", &query, "");
    if !wants_metadata(&headers) {
        return status(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", "this fake serves metadata only");
    }
    if q.contains_key("watch") {
        let stream = futures::stream::pending::<Result<Bytes, std::io::Error>>();
        return (StatusCode::OK, [("content-type", "application/json")], Body::from_stream(stream)).into_response();
    }
    let items: Vec<Value> = fake
        .nodes
        .lock()
        .unwrap()
        .iter()
        .map(|(name, labels)| json!({"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":name,"labels":labels,"resourceVersion":"3"}}))
        .collect();
    json_response(
        json!({"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"items":items}),
    )
}
