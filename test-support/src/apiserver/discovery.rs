//! API discovery as a v1.33 API server serves it for the groups the tests use:
//! `/api/v1`, `/apis` and `/apis/{group}/{version}` (subresources listed, as the real
//! documents have them), with one aggregated API that is down (`flaky.example.com/v1`
//! answers 503) and the metrics adapter's own group, which a client must never read;
//! a test adds groups a cluster serves beyond those ([`ApiServer::add_api_group`]).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::ApiServer;
use super::reply::{json, status};

/// (plural, singular, kind, namespaced)
type Resource = (&'static str, &'static str, &'static str, bool);
/// A group version a test adds and its resources, as (plural, singular, kind, namespaced).
pub type Group = (String, Vec<(String, String, String, bool)>);

const CORE_V1: &[Resource] = &[
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

const GROUPS: &[(&str, &[Resource])] = &[
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
    // The metrics adapter's group: never read (it lists metrics, not resources).
    ("custom.metrics.k8s.io/v1beta2", &[]),
];

fn all_groups(s: &ApiServer) -> Vec<Group> {
    let owned =
        |r: &[Resource]| r.iter().map(|(p, s, k, n)| (p.to_string(), s.to_string(), k.to_string(), *n)).collect();
    let mut all: Vec<Group> = GROUPS.iter().map(|(gv, r)| (gv.to_string(), owned(r))).collect();
    all.extend(s.state().api_groups.iter().cloned());
    all
}

fn resource_list(gv: &str, resources: &[(String, String, String, bool)]) -> Response {
    let resources: Vec<Value> = resources
        .iter()
        .map(|(name, singular, kind, namespaced)| {
            json!({"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind,
                   "verbs": ["get", "list", "watch"]})
        })
        .collect();
    json(&json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

pub(super) async fn core() -> Response {
    let resources: Vec<_> =
        CORE_V1.iter().map(|(p, s, k, n)| (p.to_string(), s.to_string(), k.to_string(), *n)).collect();
    resource_list("v1", &resources)
}

pub(super) async fn groups(State(s): State<ApiServer>) -> Response {
    let groups: Vec<Value> = all_groups(&s)
        .iter()
        .map(|(gv, _)| {
            let (group, version) = gv.split_once('/').unwrap();
            let v = json!({"groupVersion": gv, "version": version});
            json!({"name": group, "versions": [v.clone()], "preferredVersion": v})
        })
        .collect();
    json(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

pub(super) async fn group(State(s): State<ApiServer>, Path((group, version)): Path<(String, String)>) -> Response {
    let gv = format!("{group}/{version}");
    if gv == "flaky.example.com/v1" {
        return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "the aggregated API is down");
    }
    match all_groups(&s).into_iter().find(|(g, _)| *g == gv) {
        Some((_, resources)) => resource_list(&gv, &resources),
        None => status(StatusCode::NOT_FOUND, "NotFound", format!("no group version {gv}")),
    }
}

/// The kind of `plural` in group version `gv` (`v1` for the core group) and whether it is
/// namespaced, if discovery lists it.
pub(super) fn served(s: &ApiServer, gv: &str, plural: &str) -> Option<(String, bool)> {
    let find = |resources: &[(String, String, String, bool)]| {
        resources.iter().find(|(p, ..)| p == plural).map(|(_, _, kind, namespaced)| (kind.clone(), *namespaced))
    };
    if gv == "v1" {
        let core: Vec<_> =
            CORE_V1.iter().map(|(p, s, k, n)| (p.to_string(), s.to_string(), k.to_string(), *n)).collect();
        return find(&core);
    }
    all_groups(s).iter().find(|(g, _)| g == gv).and_then(|(_, resources)| find(resources))
}
