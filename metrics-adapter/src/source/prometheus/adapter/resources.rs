//! Which series labels name which Kubernetes resources (a rule's `resources`), both ways:
//!
//! * **label → resource**, at discovery: an `overrides` entry names the resource of one
//!   label; otherwise a label whose name fits `template` (`kube_<<.Group>>_<<.Resource>>`)
//!   names the resource the catalog resolves from the parts (a label that fits but names
//!   no served resource, such as `container`, is skipped, as prometheus-adapter skips
//!   it);
//! * **resource → label**, at query time: the override's label, else the template with
//!   `.Group` (dots and dashes as `_`) and `.Resource` (singular) filled in.
//!
//! Overrides are resolved against the catalog when the configuration is read: one that
//! names a resource the cluster does not serve is refused then.

use regex::Regex;

use super::schema::ResourceMapping;
use super::template::{Data, Schema, Template};
use crate::catalog::{Catalog, Entry};
use exposition_parser::is_label_name;

/// A rule's label ↔ resource mapping.
#[derive(Debug, Clone)]
pub struct ResourceMapper {
    overrides: Vec<(String, Entry)>,
    template: Option<(Template, Regex)>,
}

/// Which part of `resources` is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingError {
    /// `template` or `overrides.<label>`.
    pub field: String,
    /// Why.
    pub reason: String,
}

impl ResourceMapper {
    /// Compiles a rule's `resources` against the cluster's catalog.
    pub fn new(m: &ResourceMapping, catalog: &Catalog) -> Result<Self, MappingError> {
        let mut overrides = Vec::new();
        for (label, gr) in &m.overrides {
            let field = format!("overrides.{label}");
            if !is_label_name(label) {
                return Err(MappingError { field, reason: format!("{label:?} is not a Prometheus label name") });
            }
            let entry = catalog.resolve(&gr.group, &gr.resource).ok_or_else(|| MappingError {
                field: field.clone(),
                reason: match gr.group.as_str() {
                    "" => format!("resource {:?} is not served by this cluster (kubectl api-resources lists what is)", gr.resource),
                    g => format!(
                        "resource {:?} in group {g:?} is not served by this cluster (kubectl api-resources lists what is)",
                        gr.resource
                    ),
                },
            })?;
            overrides.push((label.clone(), entry.clone()));
        }
        let template = if m.template.is_empty() { None } else { Some(compile_template(&m.template)?) };
        Ok(Self { overrides, template })
    }

    /// Whether anything maps (a rule without overrides or a template maps no label).
    pub fn maps_anything(&self) -> bool {
        !self.overrides.is_empty() || self.template.is_some()
    }

    /// The resources the labels of a series name, with the label naming each.
    pub fn resources_for<'a>(
        &self,
        labels: impl IntoIterator<Item = &'a str>,
        catalog: &Catalog,
    ) -> Vec<(String, Entry)> {
        let mut out: Vec<(String, Entry)> = Vec::new();
        for label in labels {
            let found = match self.overrides.iter().find(|(l, _)| l == label) {
                Some((_, e)) => Some(e.clone()),
                None => self.templated(label, catalog),
            };
            if let Some(entry) = found
                && !out.iter().any(|(_, e)| e == &entry)
            {
                out.push((label.to_owned(), entry));
            }
        }
        out
    }

    fn templated(&self, label: &str, catalog: &Catalog) -> Option<Entry> {
        let (_, regex) = self.template.as_ref()?;
        let caps = regex.captures(label)?;
        let group = caps.name("group").map_or("", |m| m.as_str());
        let resource = caps.name("resource")?.as_str();
        catalog.resolve(group, resource).cloned()
    }

    /// The label naming objects of `entry`, if this rule maps it.
    pub fn label_for(&self, entry: &Entry) -> Option<String> {
        if let Some((label, _)) =
            self.overrides.iter().find(|(_, e)| e.group == entry.group && e.plural == entry.plural)
        {
            return Some(label.clone());
        }
        let (template, _) = self.template.as_ref()?;
        let label = template.render(&resource_data(&entry.group.replace(['.', '-'], "_"), &entry.singular));
        (!label.is_empty()).then_some(label)
    }

    /// Whether the rule can name a label for namespaces (needed by namespaced queries).
    pub fn maps_namespaces(&self) -> bool {
        self.template.is_some() || self.overrides.iter().any(|(_, e)| e.group.is_empty() && e.plural == "namespaces")
    }
}

fn resource_data(group: &str, resource: &str) -> Data {
    let mut d = Data::default();
    d.strings.insert("Group", group.to_owned());
    d.strings.insert("Resource", resource.to_owned());
    d
}

/// The template, and the regex that recognises the labels it makes (the template filled
/// with named groups, anchored, as prometheus-adapter builds it).
fn compile_template(text: &str) -> Result<(Template, Regex), MappingError> {
    let fail = |reason: String| MappingError { field: "template".into(), reason };
    let template = Template::parse(text, Schema::Resource).map_err(|e| fail(e.reason))?;
    if !template.uses("Resource") {
        return Err(fail(format!("{text:?} must contain <<.Resource>>")));
    }
    let pattern = template.render(&resource_data("(?P<group>.+?)", "(?P<resource>.+?)"));
    let regex = Regex::new(&format!("^{pattern}$"))
        .map_err(|e| fail(format!("{text:?} does not make a label pattern: {e}")))?;
    Ok((template, regex))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::prometheus::adapter::schema::GroupResource;

    fn mapping(template: &str, overrides: &[(&str, &str, &str)]) -> ResourceMapping {
        ResourceMapping {
            template: template.into(),
            overrides: overrides
                .iter()
                .map(|(l, g, r)| ((*l).to_owned(), GroupResource { group: (*g).into(), resource: (*r).into() }))
                .collect(),
            namespaced: None,
        }
    }

    fn names(found: Vec<(String, Entry)>) -> Vec<(String, String)> {
        found.into_iter().map(|(l, e)| (l, e.path_name())).collect()
    }

    #[test]
    fn overrides_map_labels_both_ways() {
        let c = Catalog::builtin();
        let m = ResourceMapper::new(
            &mapping(
                "",
                &[
                    ("kubernetes_namespace", "", "namespace"),
                    ("kubernetes_pod_name", "", "pods"),
                    ("app", "apps", "deployment"),
                ],
            ),
            &c,
        )
        .unwrap();
        let found = m.resources_for(["kubernetes_pod_name", "method", "kubernetes_namespace"], &c);
        assert_eq!(
            names(found),
            [("kubernetes_pod_name".into(), "pods".into()), ("kubernetes_namespace".into(), "namespaces".into())]
        );
        let deploy = c.resolve("apps", "deployments").unwrap();
        assert_eq!(m.label_for(deploy).as_deref(), Some("app"));
        assert_eq!(m.label_for(c.resolve("", "nodes").unwrap()), None);
        assert!(m.maps_namespaces());
    }

    #[test]
    fn templates_map_labels_through_the_catalog() {
        let c = Catalog::builtin();
        let m = ResourceMapper::new(&mapping("<<.Resource>>", &[]), &c).unwrap();
        let found = m.resources_for(["pod", "namespace", "container", "job", "__name__"], &c);
        // `job` names jobs.batch, as it does with prometheus-adapter's RESTMapper
        assert_eq!(
            names(found),
            [
                ("pod".into(), "pods".into()),
                ("namespace".into(), "namespaces".into()),
                ("job".into(), "jobs.batch".into())
            ]
        );
        assert_eq!(m.label_for(c.resolve("", "pods").unwrap()).as_deref(), Some("pod"));
        let g = ResourceMapper::new(&mapping("kube_<<.Group>>_<<.Resource>>", &[]), &c).unwrap();
        // `.+?` needs a group, so core resources never fit this template (as with Go's regex)
        assert_eq!(
            names(g.resources_for(["kube_apps_deployment", "kube__pod", "kube_x_y"], &c)),
            [("kube_apps_deployment".into(), "deployments.apps".into())]
        );
        let ing = c.resolve("networking.k8s.io", "ingresses").unwrap();
        assert_eq!(g.label_for(ing).as_deref(), Some("kube_networking_k8s_io_ingress"));
    }

    #[test]
    fn bad_mappings_name_the_field() {
        let c = Catalog::builtin();
        let e = ResourceMapper::new(&mapping("", &[("brand", "cheese.io", "brand")]), &c).unwrap_err();
        assert_eq!(e.field, "overrides.brand");
        assert!(e.reason.contains("\"brand\" in group \"cheese.io\" is not served by this cluster"), "{}", e.reason);
        let e = ResourceMapper::new(&mapping("", &[("pod-name", "", "pod")]), &c).unwrap_err();
        assert!(e.reason.contains("not a Prometheus label name"));
        let e = ResourceMapper::new(&mapping("kube_<<.Group>>", &[]), &c).unwrap_err();
        assert!(e.field == "template" && e.reason.contains("must contain <<.Resource>>"), "{e:?}");
        let e = ResourceMapper::new(&mapping("<<.Resourc>>", &[]), &c).unwrap_err();
        assert!(e.reason.contains("unknown field .Resourc"), "{e:?}");
        assert!(!ResourceMapper::new(&mapping("", &[]), &c).unwrap().maps_anything());
    }
}
