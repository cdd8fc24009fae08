//! A request turned into a rule's template arguments, as prometheus-adapter builds them:
//!
//! * `.LabelMatchers`: the `metricLabelSelector` (or, for external metrics, the
//!   `labelSelector`) requirements in key order, then the namespace
//!   (`<namespace label>="ns"`), then, for custom metrics, the objects (`pod="a"` for
//!   one, `pod=~"a|b"` for several), each value quoted as Go's `%q` quotes it and the
//!   names joined unescaped, as prometheus-adapter joins them;
//! * `.GroupBy` / `.GroupBySlice`: the resource's label (empty for external metrics);
//! * `.LabelValuesByName`: each matcher's label with its values joined by `|`;
//! * `.Series`: the discovered series name.
//!
//! Selector requirements map to matchers by prometheus-adapter's table: `=`/`==` one value
//! `=`, `!=` one value `!=`, `in`/`notin` `=~`/`!~` with the values joined by `|`,
//! existence `!=""`, non-existence `=""`; `>` and `<` have no PromQL label matcher and are
//! refused (400).

use std::collections::BTreeMap;

use super::template::{Data, go_quote};
use crate::selector::{Operator, Selector};
use exposition_parser::is_label_name;

/// Which objects a custom-metric query matches.
#[derive(Debug, Clone, Copy)]
pub enum Objects<'a> {
    /// These names (at least one).
    Names(&'a [&'a str]),
    /// Every object with the label (`label!=""`): no label selector, or a selection the
    /// adapter narrows itself after the answer (the source's `widen` decision).
    Any,
}

/// A request that cannot be written as label matchers (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

struct Parts {
    matchers: Vec<String>,
    values: BTreeMap<String, String>,
}

impl Parts {
    fn push(&mut self, label: &str, op: &str, value: &str, joined: String) {
        self.matchers.push(format!("{label}{op}{}", go_quote(value)));
        self.values.insert(label.to_owned(), joined);
    }
}

fn selector_parts(selector: &Selector, param: &str) -> Result<Parts, QueryError> {
    let mut parts = Parts { matchers: Vec::new(), values: BTreeMap::new() };
    for req in selector.requirements() {
        let key = req.key();
        if !is_label_name(key) {
            return Err(QueryError(format!("{param} key {key:?} is not a Prometheus label name")));
        }
        let values = req.values();
        let joined = values.join("|");
        let op = match (req.operator(), values.len()) {
            (Operator::Exists, 0) => "!=",
            (Operator::DoesNotExist, 0) => "=",
            (Operator::Equals | Operator::DoubleEquals, 1) => "=",
            (Operator::NotEquals, 1) => "!=",
            (Operator::In, _) | (Operator::Equals | Operator::DoubleEquals, _) => "=~",
            (Operator::NotIn, _) | (Operator::NotEquals, _) => "!~",
            (Operator::GreaterThan | Operator::LessThan, _) => {
                return Err(QueryError(format!(
                    "{param} on {key:?}: > and < have no PromQL label matcher (use =, !=, in or notin)"
                )));
            }
            (Operator::Exists | Operator::DoesNotExist, _) => {
                return Err(QueryError(format!("{param} on {key:?}: existence takes no values")));
            }
        };
        parts.push(key, op, &joined, joined.clone());
    }
    Ok(parts)
}

fn data(series: &str, parts: Parts, group_by: Vec<String>) -> Data {
    let mut d = Data::default();
    d.strings.insert("Series", series.to_owned());
    d.strings.insert("LabelMatchers", parts.matchers.join(","));
    d.strings.insert("GroupBy", group_by.join(","));
    d.lists.insert("GroupBySlice", group_by);
    d.maps.insert("LabelValuesByName", parts.values);
    d
}

/// Arguments for a custom-metric read of `objects` (their `label`), in `namespace` (with
/// its label) for namespaced resources.
pub fn custom(
    series: &str,
    namespace: Option<(&str, &str)>,
    label: &str,
    objects: Objects<'_>,
    metric_selector: &Selector,
) -> Result<Data, QueryError> {
    let mut parts = selector_parts(metric_selector, "metricLabelSelector")?;
    if let Some((ns_label, ns)) = namespace {
        parts.push(ns_label, "=", ns, ns.to_owned());
    }
    match objects {
        Objects::Names([one]) => parts.push(label, "=", one, (*one).to_owned()),
        Objects::Names(many) => {
            let joined = many.join("|");
            parts.push(label, "=~", &joined, joined.clone());
        }
        Objects::Any => parts.push(label, "!=", "", String::new()),
    }
    Ok(data(series, parts, vec![label.to_owned()]))
}

/// Arguments for an external-metric read: the selector, then the namespace when the rule
/// is namespaced.
pub fn external(series: &str, namespace: Option<(&str, &str)>, selector: &Selector) -> Result<Data, QueryError> {
    let mut parts = selector_parts(selector, "labelSelector")?;
    if let Some((ns_label, ns)) = namespace {
        parts.push(ns_label, "=", ns, ns.to_owned());
    }
    Ok(data(series, parts, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &str) -> Selector {
        Selector::parse(s).unwrap()
    }

    #[test]
    fn custom_arguments_match_prometheus_adapter() {
        let d = custom(
            "http_requests_total",
            Some(("namespace", "somens")),
            "pod",
            Objects::Names(&["pod1", "pod2"]),
            &Selector::everything(),
        )
        .unwrap();
        assert_eq!(d.strings["LabelMatchers"], r#"namespace="somens",pod=~"pod1|pod2""#);
        assert_eq!(d.strings["GroupBy"], "pod");
        assert_eq!(d.lists["GroupBySlice"], ["pod"]);
        assert_eq!(d.maps["LabelValuesByName"]["pod"], "pod1|pod2");
        assert_eq!(d.maps["LabelValuesByName"]["namespace"], "somens");
        let one = custom("x", None, "node", Objects::Names(&["n-1"]), &Selector::everything()).unwrap();
        assert_eq!(one.strings["LabelMatchers"], r#"node="n-1""#);
        let any = custom("x", Some(("ns", "a")), "pod", Objects::Any, &Selector::everything()).unwrap();
        assert_eq!(any.strings["LabelMatchers"], r#"ns="a",pod!="""#);
        let with = custom(
            "x",
            Some(("namespace", "a")),
            "pod",
            Objects::Names(&["p"]),
            &sel("verb in (GET,POST),code!=500,!canary,tier"),
        )
        .unwrap();
        assert_eq!(
            with.strings["LabelMatchers"],
            r#"canary="",code!="500",tier!="",verb=~"GET|POST",namespace="a",pod="p""#
        );
    }

    #[test]
    fn external_arguments_match_prometheus_adapter() {
        let d = external("queue_length", Some(("namespace", "ai")), &sel("queue=inference")).unwrap();
        assert_eq!(d.strings["LabelMatchers"], r#"queue="inference",namespace="ai""#);
        assert_eq!(d.strings["GroupBy"], "");
        assert!(d.lists["GroupBySlice"].is_empty());
        let d = external("q", None, &sel("queue notin (a)")).unwrap();
        assert_eq!(d.strings["LabelMatchers"], r#"queue!~"a""#);
        assert_eq!(external("q", None, &Selector::everything()).unwrap().strings["LabelMatchers"], "");
    }

    #[test]
    fn selectors_without_a_matcher_are_refused() {
        let e = external("q", None, &sel("depth>3")).unwrap_err();
        assert!(e.0.contains("no PromQL label matcher"), "{e}");
        let e = custom("q", None, "pod", Objects::Any, &sel("app.kubernetes.io/name=x")).unwrap_err();
        assert!(e.0.contains("not a Prometheus label name"), "{e}");
    }
}
