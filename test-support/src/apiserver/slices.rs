//! ResourceSlices (`/apis/resource.k8s.io/v1/resourceslices`), as a node's DRA driver
//! publishes them: a list with selectors (the real server indexes `spec.nodeName` and
//! `spec.driver`, which is how an exporter asks for its own node's slices), and a watch
//! that sends a bookmark and then stays open (the tests publish slices before the
//! exporter starts). Until [`ApiServer::serve_slices`] gave some, the path answers 404,
//! as a cluster without DRA does.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use k8s_openapi::api::resource::v1::ResourceSlice;

use super::ApiServer;
use super::listing::{Ask, Params, list, selectors, watching};
use super::reply::status;
use super::watch::{self, Fields};

const INDEXED: [&str; 3] = ["metadata.name", "spec.nodeName", "spec.driver"];

fn fields(slice: &ResourceSlice) -> Fields {
    Fields::from([
        ("metadata.name".into(), slice.metadata.name.clone().unwrap_or_default()),
        ("spec.nodeName".into(), slice.spec.node_name.clone().unwrap_or_default()),
        ("spec.driver".into(), slice.spec.driver.clone()),
    ])
}

pub(super) async fn list_or_watch(
    State(s): State<ApiServer>,
    headers: HeaderMap,
    axum::extract::Query(q): Params,
) -> Response {
    let state = s.state();
    let Some(slices) = state.resource_slices.clone() else {
        return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource");
    };
    if watching(&q) {
        if let Err(response) = selectors(&q, &INDEXED) {
            return *response;
        }
        return watch::bookmark_then_quiet("ResourceSlice", "resource.k8s.io/v1", state.resource_version);
    }
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let ask = Ask { metadata: accept.contains("as=PartialObjectMetadata"), metadata_only: false };
    let objects = slices.into_iter().map(|sl| {
        let labels = sl.metadata.labels.clone().unwrap_or_default();
        let fields = fields(&sl);
        (sl, labels, fields)
    });
    list(objects.collect(), &q, &INDEXED, state.resource_version, ask)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::extract::{Query, State};
    use k8s_openapi::api::resource::v1::ResourceSlice;
    use serde_json::{Value, json};

    use super::super::ApiServer;

    fn slice(name: &str, node: &str) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
        }))
        .unwrap()
    }

    /// The answer to a list with this query: (status, names listed).
    async fn ask(server: &ApiServer, query: &[(&str, &str)]) -> (u16, Vec<String>) {
        let q: BTreeMap<String, String> = query.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let response = super::list_or_watch(State(server.clone()), Default::default(), Query(q)).await;
        let code = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        let names = value["items"].as_array().into_iter().flatten();
        (code, names.map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect())
    }

    #[tokio::test]
    async fn slices_are_listed_by_node_and_absent_until_served() {
        let server = ApiServer::new();
        let own = [("fieldSelector", "spec.nodeName=test-node")];
        assert_eq!(ask(&server, &own).await, (404, vec![]), "a cluster without DRA");
        server.serve_slices(vec![slice("here", "test-node"), slice("there", "other-node")]);
        assert_eq!(ask(&server, &own).await, (200, vec!["here".to_string()]));
        assert_eq!(ask(&server, &[]).await.1.len(), 2);
        assert_eq!(ask(&server, &[("fieldSelector", "spec.devices=x")]).await.0, 400, "not an indexed field");
    }
}
