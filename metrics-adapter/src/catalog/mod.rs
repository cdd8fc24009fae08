//! The resources the cluster serves, as the API server's discovery documents list them,
//! and the name resolution prometheus-adapter's configuration relies on (a RESTMapper's):
//!
//! * a resource is named by its plural (`pods`) or its singular (`pod`), in any case, with
//!   a group (`deployment` in `apps`) or without one, when the first group in discovery
//!   order that serves the name wins (the core group first, as Kubernetes' priority
//!   mapper resolves it);
//! * its path name in the metrics APIs is `plural` for the core group and
//!   `plural.group` otherwise (`pods`, `deployments.apps`), and its described objects
//!   carry `kind` and `apiVersion` (`/v1` for the core group, as Go adapters write it).
//!
//! [`Catalog::builtin`] is the catalog without an API server (`--standalone`): the common
//! built-in resources. [`fetch`] reads the live one. Pure: no I/O here.

pub mod fetch;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;

/// How the metrics APIs describe the objects of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// Kind (`Pod`).
    pub kind: String,
    /// `apiVersion` as Go adapters write it: `group/version`, so `/v1` for the core group.
    pub api_version: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

/// One served resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// API group (`""` for the core group).
    pub group: String,
    /// Preferred version.
    pub version: String,
    /// Plural name (`deployments`).
    pub plural: String,
    /// Singular name (`deployment`): discovery's `singularName`, else the kind in lower case.
    pub singular: String,
    /// Kind (`Deployment`).
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl Entry {
    /// The name in metrics API paths: `pods`, `deployments.apps`.
    pub fn path_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// How described objects are written.
    pub fn info(&self) -> ResourceInfo {
        ResourceInfo {
            kind: self.kind.clone(),
            api_version: format!("{}/{}", self.group, self.version),
            namespaced: self.namespaced,
        }
    }

    fn named(&self, name: &str) -> bool {
        self.plural.eq_ignore_ascii_case(name) || self.singular.eq_ignore_ascii_case(name)
    }
}

/// The resources of a cluster, core group first, then the groups in discovery order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    entries: Vec<Entry>,
}

/// (group, version, plural, singular, kind, namespaced) of the built-in catalog.
const BUILTIN: &[(&str, &str, &str, &str, &str, bool)] = &[
    ("", "v1", "pods", "pod", "Pod", true),
    ("", "v1", "nodes", "node", "Node", false),
    ("", "v1", "namespaces", "namespace", "Namespace", false),
    ("", "v1", "services", "service", "Service", true),
    ("", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", false),
    ("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true),
    ("", "v1", "replicationcontrollers", "replicationcontroller", "ReplicationController", true),
    ("apps", "v1", "deployments", "deployment", "Deployment", true),
    ("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true),
    ("apps", "v1", "replicasets", "replicaset", "ReplicaSet", true),
    ("apps", "v1", "daemonsets", "daemonset", "DaemonSet", true),
    ("batch", "v1", "jobs", "job", "Job", true),
    ("batch", "v1", "cronjobs", "cronjob", "CronJob", true),
    ("networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", true),
];

impl Catalog {
    /// The common built-in resources, for running without an API server.
    pub fn builtin() -> Self {
        let entries = BUILTIN
            .iter()
            .map(|&(group, version, plural, singular, kind, namespaced)| Entry {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: singular.into(),
                kind: kind.into(),
                namespaced,
            })
            .collect();
        Self { entries }
    }

    /// A catalog from discovery documents, core group first. Subresources
    /// (`pods/log`) are left out.
    pub fn from_lists(lists: &[APIResourceList]) -> Self {
        let mut entries = Vec::new();
        for list in lists {
            let (group, version) = match list.group_version.split_once('/') {
                Some((g, v)) => (g, v),
                None => ("", list.group_version.as_str()),
            };
            for r in &list.resources {
                if r.name.contains('/') || entries.iter().any(|e: &Entry| e.group == group && e.plural == r.name) {
                    continue;
                }
                let singular =
                    if r.singular_name.is_empty() { r.kind.to_ascii_lowercase() } else { r.singular_name.clone() };
                entries.push(Entry {
                    group: group.into(),
                    version: version.into(),
                    plural: r.name.clone(),
                    singular,
                    kind: r.kind.clone(),
                    namespaced: r.namespaced,
                });
            }
        }
        Self { entries }
    }

    /// Every entry, in priority order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Resolves `resource` (plural or singular, any case) in `group`; an empty group
    /// means the first group in priority order that serves the name.
    pub fn resolve(&self, group: &str, resource: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| (group.is_empty() || e.group == group) && e.named(resource))
    }

    /// The entry of a metrics API path name (`pods`, `deployments.apps`).
    pub fn by_path_name(&self, path_name: &str) -> Option<&Entry> {
        let (plural, group) = path_name.split_once('.').unwrap_or((path_name, ""));
        self.entries.iter().find(|e| e.plural == plural && e.group == group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn resource(name: &str, singular: &str, kind: &str, namespaced: bool) -> APIResource {
        APIResource {
            name: name.into(),
            singular_name: singular.into(),
            kind: kind.into(),
            namespaced,
            verbs: vec!["get".into()],
            ..APIResource::default()
        }
    }

    fn list(gv: &str, resources: Vec<APIResource>) -> APIResourceList {
        APIResourceList { group_version: gv.into(), resources }
    }

    #[test]
    fn resolves_plural_singular_and_group_like_a_rest_mapper() {
        let c = Catalog::from_lists(&[
            list(
                "v1",
                vec![
                    resource("pods", "pod", "Pod", true),
                    resource("pods/log", "", "Pod", true),
                    resource("events", "event", "Event", true),
                ],
            ),
            list("apps/v1", vec![resource("deployments", "deployment", "Deployment", true)]),
            list("events.k8s.io/v1", vec![resource("events", "event", "Event", true)]),
            list("cheese.io/v1alpha1", vec![resource("brands", "", "Brand", false)]),
        ]);
        assert_eq!(c.resolve("", "pod").map(Entry::path_name).as_deref(), Some("pods"));
        assert_eq!(c.resolve("", "Pods").map(Entry::path_name).as_deref(), Some("pods"));
        assert_eq!(c.resolve("apps", "deployment").map(Entry::path_name).as_deref(), Some("deployments.apps"));
        assert_eq!(c.resolve("", "deployment").map(Entry::path_name).as_deref(), Some("deployments.apps"));
        // the core group wins a name two groups serve, unless the group is named
        assert_eq!(c.resolve("", "events").map(Entry::path_name).as_deref(), Some("events"));
        assert_eq!(c.resolve("events.k8s.io", "event").map(Entry::path_name).as_deref(), Some("events.events.k8s.io"));
        // no singularName: the kind in lower case
        assert_eq!(c.resolve("cheese.io", "brand").map(|e| e.namespaced), Some(false));
        assert!(c.resolve("", "log").is_none() && c.resolve("apps", "pods").is_none());
        assert!(c.resolve("", "widget").is_none());
        let d = c.by_path_name("deployments.apps").unwrap().info();
        assert_eq!((d.kind.as_str(), d.api_version.as_str(), d.namespaced), ("Deployment", "apps/v1", true));
        assert_eq!(c.by_path_name("pods").unwrap().info().api_version, "/v1");
        assert!(c.by_path_name("deployments").is_none());
    }

    #[test]
    fn the_builtin_catalog_knows_the_common_resources() {
        let c = Catalog::builtin();
        for (name, path) in [
            ("pod", "pods"),
            ("namespace", "namespaces"),
            ("job", "jobs.batch"),
            ("ingress", "ingresses.networking.k8s.io"),
        ] {
            assert_eq!(c.resolve("", name).map(Entry::path_name).as_deref(), Some(path), "{name}");
        }
        assert!(!c.by_path_name("nodes").unwrap().namespaced);
    }
}
