//! Finding the exporters: the ready endpoints of the exporter Service's EndpointSlices
//! (label `kubernetes.io/service-name`), or a fixed list of URLs for development.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

/// Why the exporter list could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("listing EndpointSlices of service {namespace}/{service}: {reason}")]
pub struct Error {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// Why.
    pub reason: String,
}

/// One exporter to scrape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// Full URL of its metrics endpoint.
    pub url: String,
    /// The node it runs on, if known.
    pub node: Option<String>,
}

/// Where exporters come from.
#[derive(Clone)]
pub enum Targets {
    /// A fixed list (`--exporter-url`).
    Static(Vec<Target>),
    /// The EndpointSlices of a Service.
    EndpointSlices {
        /// API client.
        client: kube::Client,
        /// Service namespace.
        namespace: String,
        /// Service name.
        service: String,
        /// Port name (empty: the first port).
        port_name: String,
        /// `http` or `https`.
        scheme: String,
        /// Metrics path.
        path: String,
    },
}

impl std::fmt::Debug for Targets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Targets::Static(t) => f.debug_tuple("Static").field(t).finish(),
            Targets::EndpointSlices { namespace, service, .. } => {
                f.debug_struct("EndpointSlices").field("namespace", namespace).field("service", service).finish()
            }
        }
    }
}

impl Targets {
    /// Where the exporters come from, for messages: the Service's EndpointSlices, or
    /// `--exporter-url`.
    pub fn describe(&self) -> String {
        match self {
            Targets::Static(_) => "--exporter-url".to_owned(),
            Targets::EndpointSlices { namespace, service, .. } => {
                format!("the ready endpoints of Service {namespace}/{service}")
            }
        }
    }

    /// The exporters to scrape now.
    pub async fn resolve(&self) -> Result<Vec<Target>, Error> {
        match self {
            Targets::Static(t) => Ok(t.clone()),
            Targets::EndpointSlices { client, namespace, service, port_name, scheme, path } => {
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
                let params = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
                let list = api.list(&params).await.map_err(|e| Error {
                    namespace: namespace.clone(),
                    service: service.clone(),
                    reason: e.to_string(),
                })?;
                let mut out: Vec<Target> =
                    list.items.iter().flat_map(|s| targets_of(s, port_name, scheme, path)).collect();
                out.sort();
                out.dedup();
                Ok(out)
            }
        }
    }
}

/// The scrape targets of one EndpointSlice: ready endpoints × addresses, on the named port.
pub fn targets_of(slice: &EndpointSlice, port_name: &str, scheme: &str, path: &str) -> Vec<Target> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let port = ports
        .iter()
        .find(|p| if port_name.is_empty() { true } else { p.name.as_deref() == Some(port_name) })
        .and_then(|p| p.port);
    let Some(port) = port else { return Vec::new() };
    let ipv6 = slice.address_type == "IPv6";
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| {
            e.addresses.iter().map(move |a| Target {
                url: if ipv6 {
                    format!("{scheme}://[{a}]:{port}{path}")
                } else {
                    format!("{scheme}://{a}:{port}{path}")
                },
                node: e.node_name.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(json: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn ready_endpoints_on_the_named_port() {
        let s = slice(serde_json::json!({
            "metadata": {"name": "gpu-exporter-abc", "namespace": "gpu-telemetry"},
            "addressType": "IPv4",
            "ports": [{"name": "health", "port": 8080}, {"name": "metrics", "port": 9400}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "nodeName": "gpu-node-1", "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "nodeName": "gpu-node-2", "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"], "nodeName": "gpu-node-3"}
            ]
        }));
        let t = targets_of(&s, "metrics", "http", "/metrics");
        assert_eq!(
            t,
            vec![
                Target { url: "http://10.0.0.1:9400/metrics".into(), node: Some("gpu-node-1".into()) },
                Target { url: "http://10.0.0.3:9400/metrics".into(), node: Some("gpu-node-3".into()) },
            ]
        );
        assert!(targets_of(&s, "nope", "http", "/metrics").is_empty());
        assert_eq!(targets_of(&s, "", "https", "/m")[0].url, "https://10.0.0.1:8080/m");
    }

    #[test]
    fn ipv6_addresses_are_bracketed() {
        let s = slice(serde_json::json!({
            "metadata": {"name": "x"},
            "addressType": "IPv6",
            "ports": [{"name": "metrics", "port": 9400}],
            "endpoints": [{"addresses": ["fd00::1"]}]
        }));
        assert_eq!(targets_of(&s, "metrics", "http", "/metrics")[0].url, "http://[fd00::1]:9400/metrics");
    }
}
