//! RBAC as the API server evaluates it, for the in-test server's users: ClusterRoles
//! bound by ClusterRoleBindings grant everywhere, ClusterRoles or Roles bound by a
//! RoleBinding grant in that binding's namespace only. A rule matches a request by verb,
//! API group, resource (`pods`, `pods/proxy`, `*`, `*/proxy`) and, when the rule names
//! some, resource name (never for a list). Built from the manifests under `deploy/`, so
//! a test proves the shipped roles suffice.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use serde_json::Value;

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributes {
    pub verb: &'static str,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Attributes {
    /// kube-apiserver's wording of a refusal.
    pub fn forbidden_message(&self, user: &str) -> String {
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let subject = match &self.name {
            Some(n) => format!("{} {n:?}", self.resource),
            None => self.resource.clone(),
        };
        let scope = match &self.namespace {
            Some(ns) => format!(" in the namespace {ns:?}"),
            None => " at the cluster scope".into(),
        };
        format!(
            "{subject} is forbidden: User {user:?} cannot {} resource {resource:?} in API group {:?}{scope}",
            self.verb, self.api_group
        )
    }
}

/// Rules granted to a subject, each with the namespace it is limited to.
#[derive(Debug, Clone, Default)]
pub struct Grants(Vec<(Option<String>, PolicyRule)>);

fn contains(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

fn rule_matches(rule: &PolicyRule, a: &Attributes) -> bool {
    let resources = rule.resources.clone().unwrap_or_default();
    let combined =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let resource_ok = resources
        .iter()
        .any(|r| r == "*" || *r == combined || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource)));
    let names = rule.resource_names.clone().unwrap_or_default();
    let name_ok = names.is_empty() || a.name.as_ref().is_some_and(|n| names.contains(n));
    contains(&rule.verbs, a.verb)
        && contains(&rule.api_groups.clone().unwrap_or_default(), &a.api_group)
        && resource_ok
        && name_ok
}

impl Grants {
    /// Whether the grants allow the request.
    pub fn allows(&self, a: &Attributes) -> bool {
        self.0.iter().any(|(ns, rule)| match ns {
            None => rule_matches(rule, a),
            Some(ns) => a.namespace.as_deref() == Some(ns.as_str()) && rule_matches(rule, a),
        })
    }

    /// Grants of roles already resolved: each the namespace it is limited to (`None`
    /// for a ClusterRole bound cluster-wide) and that role's `rules`.
    pub fn from_rules(roles: &[(Option<String>, Value)]) -> Grants {
        let rules = roles.iter().flat_map(|(ns, rules)| {
            let rules: Vec<PolicyRule> = serde_json::from_value(rules.clone()).unwrap();
            rules.into_iter().map(move |r| (ns.clone(), r))
        });
        Grants(rules.collect())
    }

    /// Grants from RBAC manifests (as JSON values, e.g. a rendered kustomization) for
    /// the user `user` in `groups`.
    pub fn from_manifests(docs: &[Value], user: &str, groups: &[&str]) -> Grants {
        let of_kind = |kind: &'static str| docs.iter().filter(move |d| d["kind"] == kind).cloned();
        let cluster_roles: Vec<ClusterRole> =
            of_kind("ClusterRole").map(|d| serde_json::from_value(d).unwrap()).collect();
        let roles: Vec<Role> = of_kind("Role").map(|d| serde_json::from_value(d).unwrap()).collect();
        let bound = |subjects: &Option<Vec<Subject>>| {
            subjects.iter().flatten().any(|s| match s.kind.as_str() {
                "User" => s.name == user,
                "Group" => groups.contains(&s.name.as_str()),
                _ => false,
            })
        };
        let cluster_role = |name: &str| cluster_roles.iter().find(|r| r.metadata.name.as_deref() == Some(name));
        let mut out = Vec::new();
        for b in of_kind("ClusterRoleBinding").map(|d| serde_json::from_value::<ClusterRoleBinding>(d).unwrap()) {
            if let Some(role) = cluster_role(&b.role_ref.name).filter(|_| bound(&b.subjects)) {
                out.extend(role.rules.iter().flatten().map(|r| (None, r.clone())));
            }
        }
        for b in of_kind("RoleBinding").map(|d| serde_json::from_value::<RoleBinding>(d).unwrap()) {
            let ns = b.metadata.namespace.clone();
            if !bound(&b.subjects) {
                continue;
            }
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => cluster_role(&b.role_ref.name).and_then(|r| r.rules.clone()),
                _ => roles
                    .iter()
                    .find(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name) && r.metadata.namespace == ns)
                    .and_then(|r| r.rules.clone()),
            };
            out.extend(rules.into_iter().flatten().map(|r| (ns.clone(), r)));
        }
        Grants(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &'static str, resource: &str, sub: &str, ns: Option<&str>, name: Option<&str>) -> Attributes {
        Attributes {
            verb,
            api_group: String::new(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
        }
    }

    #[test]
    fn bindings_grant_where_they_should() {
        let docs = vec![
            json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": "read"},
                   "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]}]}),
            json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": "proxy"},
                   "rules": [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
                             {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["gpu-prices"], "verbs": ["get"]}]}),
            json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": "read"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "read"},
                   "subjects": [{"kind": "Group", "name": "viewers"}]}),
            json!({"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": "proxy", "namespace": "gpu-telemetry"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "proxy"},
                   "subjects": [{"kind": "Group", "name": "viewers"}]}),
        ];
        let g = Grants::from_manifests(&docs, "alice", &["viewers"]);
        assert!(g.allows(&attrs("list", "nodes", "", None, None)));
        assert!(g.allows(&attrs("get", "pods", "proxy", Some("gpu-telemetry"), Some("x"))));
        assert!(!g.allows(&attrs("get", "pods", "proxy", Some("default"), Some("x"))), "only where bound");
        assert!(g.allows(&attrs("get", "configmaps", "", Some("gpu-telemetry"), Some("gpu-prices"))));
        assert!(!g.allows(&attrs("get", "configmaps", "", Some("gpu-telemetry"), Some("other"))));
        assert!(!g.allows(&attrs("list", "configmaps", "", Some("gpu-telemetry"), None)));
        assert!(!g.allows(&attrs("patch", "nodes", "", None, Some("n"))));
        assert!(!Grants::from_manifests(&docs, "bob", &["others"]).allows(&attrs("list", "nodes", "", None, None)));
        let a = attrs("get", "pods", "proxy", Some("default"), Some("x"));
        assert_eq!(
            a.forbidden_message("bob"),
            "pods \"x\" is forbidden: User \"bob\" cannot get resource \"pods/proxy\" in API group \"\" in the namespace \"default\""
        );
    }
}
