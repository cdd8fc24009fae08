//! Secrets and APIServices (the adapter's serving-certificate Secret and the caBundle
//! it writes), with the real server's write semantics: POST of an existing name answers
//! 409 AlreadyExists, PUT carrying a stale `metadata.resourceVersion` answers 409
//! Conflict, every write bumps the version. Tests can inject answers (500, 409), hold
//! the first reads of an object until several clients have asked (to start them at the
//! same moment). Whether the adapter's roles of `deploy/` allow its writes is checked
//! on a real API server (`real-cluster/tests/aggregator.rs`).
//!
//! Kept as JSON values, not typed: the tests read back exactly what a client wrote
//! (base64 `data`, `caBundle`) and send bodies the client's types would refuse.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A request the store answered, with its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub method: String,
    pub path: String,
    pub status: u16,
}

/// (method, path) → answers to give instead of the real one, in order
type Injected = BTreeMap<(String, String), VecDeque<u16>>;

/// The object store.
#[derive(Clone, Default)]
pub struct Store {
    objects: Arc<Mutex<BTreeMap<String, Value>>>,
    version: Arc<Mutex<u64>>,
    injected: Arc<Mutex<Injected>>,
    /// path → (reads still to hold, reads waiting)
    held: Arc<Mutex<BTreeMap<String, (usize, usize)>>>,
    released: Arc<Notify>,
    answered: Arc<Mutex<Vec<Answered>>>,
}

pub const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

pub fn secret_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/secrets/{name}")
}

pub fn apiservice_path(name: &str) -> String {
    format!("{APISERVICES}/{name}")
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    super::reply::status(StatusCode::from_u16(code).unwrap(), reason, message)
}

fn reason_of(code: u16) -> &'static str {
    super::reply::reason_of(StatusCode::from_u16(code).unwrap())
}

impl Store {
    /// Stores `object` at `path` as if created (for objects the test starts with).
    pub fn put(&self, path: &str, mut object: Value) {
        let rv = self.bump();
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects.lock().unwrap().insert(path.to_owned(), object);
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.objects.lock().unwrap().get(path).cloned()
    }

    pub fn remove(&self, path: &str) {
        self.objects.lock().unwrap().remove(path);
    }

    /// The next requests `method path` are answered with these codes instead.
    pub fn inject(&self, method: &str, path: &str, codes: &[u16]) {
        self.injected.lock().unwrap().entry((method.into(), path.into())).or_default().extend(codes);
    }

    /// The first `n` GETs of `path` wait until all `n` have arrived.
    pub fn hold_reads(&self, path: &str, n: usize) {
        self.held.lock().unwrap().insert(path.to_owned(), (n, 0));
    }

    /// Every answer so far.
    pub fn answered(&self) -> Vec<Answered> {
        self.answered.lock().unwrap().clone()
    }

    /// Answers to `method path`, in order.
    pub fn statuses(&self, method: &str, path: &str) -> Vec<u16> {
        self.answered().into_iter().filter(|a| a.method == method && a.path == path).map(|a| a.status).collect()
    }

    fn bump(&self) -> u64 {
        let mut v = self.version.lock().unwrap();
        *v += 1;
        *v
    }

    fn answer(&self, method: &str, path: &str, response: Response) -> Response {
        let status = response.status().as_u16();
        self.answered.lock().unwrap().push(Answered { method: method.into(), path: path.into(), status });
        response
    }

    fn injected(&self, method: &str, path: &str) -> Option<u16> {
        self.injected.lock().unwrap().get_mut(&(method.to_owned(), path.to_owned())).and_then(VecDeque::pop_front)
    }

    async fn gate(&self, path: &str) {
        let wait = {
            let mut held = self.held.lock().unwrap();
            match held.get_mut(path) {
                Some((n, arrived)) if *n > 0 => {
                    *arrived += 1;
                    if *arrived >= *n {
                        *n = 0;
                        self.released.notify_waiters();
                        false
                    } else {
                        true
                    }
                }
                _ => false,
            }
        };
        if wait {
            loop {
                let notified = self.released.notified();
                if self.held.lock().unwrap().get(path).is_none_or(|(n, _)| *n == 0) {
                    return;
                }
                notified.await;
            }
        }
    }

    async fn read(&self, path: String) -> Response {
        self.gate(&path).await;
        if let Some(code) = self.injected("GET", &path) {
            return self.answer("GET", &path, status(code, reason_of(code), "injected"));
        }
        let response = match self.get(&path) {
            Some(o) => (StatusCode::OK, [("content-type", "application/json")], o.to_string()).into_response(),
            None => status(404, "NotFound", &format!("{path} not found")),
        };
        self.answer("GET", &path, response)
    }

    async fn create(&self, collection: String, body: Bytes) -> Response {
        let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
            return self.answer("POST", &collection, status(400, "BadRequest", "not JSON"));
        };
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            return self.answer("POST", &collection, status(422, "Invalid", "metadata.name: Required value"));
        };
        let path = format!("{collection}/{name}");
        if let Some(code) = self.injected("POST", &path) {
            return self.answer("POST", &path, status(code, reason_of(code), "injected"));
        }
        let response = {
            let mut objects = self.objects.lock().unwrap();
            if objects.contains_key(&path) {
                status(409, "AlreadyExists", &format!("{name} already exists"))
            } else {
                object["metadata"]["resourceVersion"] = json!(self.bump().to_string());
                object["metadata"]["uid"] = json!(format!("uid-{name}"));
                objects.insert(path.clone(), object.clone());
                (StatusCode::CREATED, [("content-type", "application/json")], object.to_string()).into_response()
            }
        };
        self.answer("POST", &path, response)
    }

    async fn replace(&self, path: String, body: Bytes) -> Response {
        if let Some(code) = self.injected("PUT", &path) {
            return self.answer("PUT", &path, status(code, reason_of(code), "injected"));
        }
        let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
            return self.answer("PUT", &path, status(400, "BadRequest", "not JSON"));
        };
        let response = {
            let mut objects = self.objects.lock().unwrap();
            match objects.get(&path) {
                None => status(404, "NotFound", &format!("{path} not found")),
                Some(current) => {
                    let sent = object["metadata"]["resourceVersion"].as_str().unwrap_or_default();
                    if !sent.is_empty() && sent != current["metadata"]["resourceVersion"] {
                        status(
                            409,
                            "Conflict",
                            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
                        )
                    } else {
                        object["metadata"]["resourceVersion"] = json!(self.bump().to_string());
                        objects.insert(path.clone(), object.clone());
                        (StatusCode::OK, [("content-type", "application/json")], object.to_string()).into_response()
                    }
                }
            }
        };
        self.answer("PUT", &path, response)
    }

    pub(super) fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route(
                "/api/v1/namespaces/{ns}/secrets",
                post(|State(s): State<Store>, Path(ns): Path<String>, body: Bytes| async move {
                    s.create(format!("/api/v1/namespaces/{ns}/secrets"), body).await
                }),
            )
            .route(
                "/api/v1/namespaces/{ns}/secrets/{name}",
                get(|State(s): State<Store>, Path((ns, name)): Path<(String, String)>| async move {
                    s.read(secret_path(&ns, &name)).await
                })
                .put(|State(s): State<Store>, Path((ns, name)): Path<(String, String)>, body: Bytes| async move {
                    s.replace(secret_path(&ns, &name), body).await
                }),
            )
            .route(
                "/apis/apiregistration.k8s.io/v1/apiservices/{name}",
                get(|State(s): State<Store>, Path(name): Path<String>| async move {
                    s.read(apiservice_path(&name)).await
                })
                .put(|State(s): State<Store>, Path(name): Path<String>, body: Bytes| async move {
                    s.replace(apiservice_path(&name), body).await
                }),
            )
            .with_state(self.clone())
    }
}
