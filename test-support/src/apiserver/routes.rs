//! The in-test API server's routes: authentication (bearer token) and recording as a
//! layer, then one handler per path, each authorizing its request as kube-apiserver
//! would derive its attributes.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, patch, post};
use k8s_openapi::List;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;

use super::listing::{Ask, Params, list, selectors, watching};
use super::reply::{json, status};
use super::selectors::Selector;
use super::watch::Fields;
use super::{ApiServer, Recorded, discovery, objects, reviews, taint_rules, watch, writes};

pub(super) fn router(server: ApiServer) -> Router {
    Router::new()
        .route("/api/v1/nodes", get(list_nodes))
        .route("/api/v1/nodes/{name}", get(get_node).patch(writes::patch_node))
        .route("/api/v1/nodes/{name}/status", patch(writes::patch_node))
        .route("/api/v1/pods", get(list_all_pods))
        .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
        .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod))
        .route("/api/v1/namespaces/{ns}/pods/{name}/proxy/{*rest}", get(proxy))
        .route("/api/v1/namespaces/{ns}/services/{name}/proxy/{*rest}", get(service_proxy))
        .route("/api/v1/namespaces/{ns}/configmaps", post(writes::create_config_map))
        .route("/api/v1/namespaces/{ns}/configmaps/{name}", get(get_config_map).put(writes::replace_config_map))
        .route("/api/v1/namespaces/{ns}/events", post(writes::create_event))
        .route("/apis/{group}/{version}/namespaces/{ns}/{resource}/{name}/{subresource}", get(aggregated))
        .route("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", get(endpoint_slices))
        .route("/apis/resource.k8s.io", get(taint_rules::group))
        .route("/apis/resource.k8s.io/{version}", get(taint_rules::version))
        .route("/apis/resource.k8s.io/{version}/{resource}", any(taint_rules::collection))
        .route("/apis/resource.k8s.io/{version}/{resource}/{name}", any(taint_rules::rule))
        .route("/apis/authentication.k8s.io/v1/tokenreviews", post(reviews::token_review))
        .route("/apis/authorization.k8s.io/v1/subjectaccessreviews", post(reviews::access_review))
        .route("/api", get(objects::core_versions))
        .route("/api/v1", get(discovery::core))
        .route("/api/v1/{resource}", get(objects::core_cluster))
        .route("/api/v1/namespaces/{ns}/{resource}", get(objects::core_namespaced))
        .route("/apis/{group}/{version}/{resource}", get(objects::group_cluster))
        .route("/apis/{group}/{version}/namespaces/{ns}/{resource}", get(objects::group_namespaced))
        .route("/apis", get(discovery::groups))
        .route("/apis/{group}/{version}", get(discovery::group))
        .merge(server.objects().router())
        .fallback(|State(s): State<ApiServer>, req: Request| async move {
            s.state().script.unrouted(req.method().as_str(), req.uri().path());
            status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("the server could not find the requested resource ({})", req.uri().path()),
            )
        })
        .layer(from_fn_with_state(server.clone(), authenticate))
        .with_state(server)
}

/// Authenticates the request by its bearer token, lets the test's script answer it
/// if it chose to, and records it with its answer.
async fn authenticate(State(server): State<ApiServer>, req: Request, next: Next) -> Response {
    let arrived = Instant::now();
    // The body is recorded too (TokenReview, SubjectAccessReview), so it is read first.
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let mut recorded = Recorded::arrived(&parts, &body, arrived);
    let mut req = Request::from_parts(parts, body.into());
    let token =
        req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let user = {
        let state = server.state();
        match token {
            Some(t) => state.users.get(t).cloned(),
            None => state.anonymous.clone(),
        }
    };
    recorded.user = user.as_ref().map_or_else(|| "system:anonymous".to_string(), |u| u.name.clone());
    let response = match user {
        None => status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"),
        Some(user) => {
            let scripted = server.state().script.intercept(&recorded);
            match scripted {
                Some(answer) => answer,
                None => {
                    req.extensions_mut().insert(user);
                    next.run(req).await
                }
            }
        }
    };
    recorded.answered(&response);
    server.state().requests.push(recorded);
    response
}

async fn list_nodes(State(s): State<ApiServer>, headers: HeaderMap, Query(q): Params) -> Response {
    let ask = Ask::of(&s, &headers);
    if let Some(r) = ask.refused() {
        return r;
    }
    if watching(&q) {
        return watch::quiet();
    }
    let state = s.state();
    let nodes = state
        .nodes
        .values()
        .map(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            let fields = Fields::from([
                ("metadata.name".into(), n.metadata.name.clone().unwrap_or_default()),
                ("spec.unschedulable".into(), unschedulable.to_string()),
            ]);
            (n.clone(), labels, fields)
        })
        .collect();
    list(nodes, &q, &["metadata.name", "spec.unschedulable"], state.resource_version, ask)
}

async fn get_node(State(s): State<ApiServer>, Path(name): Path<String>) -> Response {
    match s.state().nodes.get(&name) {
        Some(n) => json(n),
        None => status(StatusCode::NOT_FOUND, "NotFound", format!("nodes {name:?} not found")),
    }
}

fn pods(s: &ApiServer, namespace: Option<&str>, q: &BTreeMap<String, String>, headers: &HeaderMap) -> Response {
    let ask = Ask::of(s, headers);
    if let Some(r) = ask.refused() {
        return r;
    }
    let indexed = ["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "status.podIP"];
    if watching(q) {
        let (labels, mut fields) = match selectors(q, &indexed) {
            Ok(s) => s,
            Err(response) => return *response,
        };
        if let Some(ns) = namespace {
            fields = fields.and(Selector::parse(&format!("metadata.namespace={ns}")).unwrap_or_default());
        }
        let from = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        return watch::pods(&mut s.state(), from, (labels, fields), ask.metadata);
    }
    let state = s.state();
    let pods = state
        .pods
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
        .map(|(_, p)| (p.clone(), p.metadata.labels.clone().unwrap_or_default(), watch::pod_fields(p)))
        .collect();
    list(pods, q, &indexed, state.resource_version, ask)
}

async fn list_all_pods(State(s): State<ApiServer>, headers: HeaderMap, Query(q): Params) -> Response {
    pods(&s, None, &q, &headers)
}

async fn list_pods(
    State(s): State<ApiServer>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    Query(q): Params,
) -> Response {
    pods(&s, Some(&ns), &q, &headers)
}

async fn get_pod(State(s): State<ApiServer>, Path((ns, name)): Path<(String, String)>) -> Response {
    match s.state().pods.get(&(ns, name.clone())) {
        Some(p) => json(p),
        None => status(StatusCode::NOT_FOUND, "NotFound", format!("pods {name:?} not found")),
    }
}

/// `[scheme:]name[:port]`, as kube-apiserver splits a proxy target.
fn split_target(target: &str) -> (Option<&str>, &str, Option<&str>) {
    let parts: Vec<&str> = target.split(':').collect();
    match parts.as_slice() {
        [scheme @ ("http" | "https"), name, port] => (Some(scheme), name, Some(port)),
        [name, port] => (None, name, Some(port)),
        _ => (None, target, None),
    }
}

async fn proxy(
    State(s): State<ApiServer>,
    Path((ns, target, rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let (_, name, port) = split_target(&target);
    let (pod, backend) = {
        let state = s.state();
        (
            state.pods.get(&(ns.clone(), name.to_string())).cloned(),
            state.proxies.get(&(ns.clone(), name.to_string())).cloned(),
        )
    };
    let Some(pod) = pod else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("pods {name:?} not found"));
    };
    let declared: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| p.container_port.to_string())
        .collect();
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
    let unreachable = |port: &str| {
        let body = format!("error trying to reach service: dial tcp {ip}:{port}: connect: connection refused");
        (StatusCode::SERVICE_UNAVAILABLE, [("content-type", "text/plain; charset=utf-8")], body).into_response()
    };
    let port = port.map(str::to_string).or_else(|| declared.first().cloned()).unwrap_or_else(|| "80".into());
    let (true, Some(backend)) = (declared.contains(&port), backend) else { return unreachable(&port) };
    if matches!(backend, super::Backend::Refused) {
        return unreachable(&port);
    }
    if let Some(stream) = backend.stream() {
        let content_type = [("content-type", "text/plain; version=0.0.4; charset=utf-8")];
        return (StatusCode::OK, content_type, axum::body::Body::from_stream(stream)).into_response();
    }
    let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let answer = backend.get(&format!("/{rest}{query}")).await;
    let code = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, [("content-type", answer.content_type)], answer.body).into_response()
}

async fn service_proxy(
    State(s): State<ApiServer>,
    Path((ns, target, rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let (_, name, _) = split_target(&target);
    let Some(backend) = s.state().services.get(&(ns.clone(), name.to_string())).cloned() else {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("no endpoints available for service {name:?}"),
        );
    };
    let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let answer = backend.get(&format!("/{rest}{query}")).await;
    let code = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, [("content-type", answer.content_type)], answer.body).into_response()
}

async fn get_config_map(State(s): State<ApiServer>, Path((ns, name)): Path<(String, String)>) -> Response {
    match s.state().config_maps.get(&(ns, name.clone())) {
        Some(cm) => json(cm),
        None => status(StatusCode::NOT_FOUND, "NotFound", format!("configmaps {name:?} not found")),
    }
}

async fn aggregated(
    State(s): State<ApiServer>,
    Path((group, _, _, _, _, _)): Path<(String, String, String, String, String, String)>,
    req: Request,
) -> Response {
    let Some(backend) = s.state().aggregated.get(&group).cloned() else {
        return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource");
    };
    let path = req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), |p| p.to_string());
    let answer = backend.get(&path).await;
    if answer.status == 503 && answer.body.starts_with(b"error trying to reach service") {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        );
    }
    let code = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, [("content-type", answer.content_type)], answer.body).into_response()
}

/// EndpointSlices of a namespace, by the Service they belong to (the only selector a
/// client asks them by).
async fn endpoint_slices(State(s): State<ApiServer>, Path(ns): Path<String>, Query(q): Params) -> Response {
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    let items: Vec<_> = s
        .state()
        .endpoint_slices
        .iter()
        .filter(|e| e.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|e| {
            let service = e.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name"));
            service.is_some_and(|svc| selector == format!("kubernetes.io/service-name={svc}"))
        })
        .cloned()
        .collect();
    let list = List { items, metadata: ListMeta { resource_version: Some("55".into()), ..ListMeta::default() } };
    let mut value = serde_json::to_value(&list).unwrap();
    value["kind"] = "EndpointSliceList".into();
    value["apiVersion"] = "discovery.k8s.io/v1".into();
    json(&value)
}
