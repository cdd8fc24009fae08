//! Answers turned into what the API serves: for custom metrics one point per requested
//! object (the sample whose resource label names it; others are dropped, which is also
//! how a namespace-wide query is narrowed to the selection), for external metrics one
//! value per sample with its labels. Two samples for one object are refused: the rule
//! must aggregate `by (<<.GroupBy>>)` (prometheus-adapter keeps one of them silently).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::answer::Sample;
use crate::source::{Error, Objects, Point, Result};

/// One value of an external metric.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalValue {
    /// The sample's labels (`metricLabels`).
    pub labels: BTreeMap<String, String>,
    /// The value.
    pub value: f64,
    /// Evaluation time, ms since the epoch.
    pub timestamp_ms: i64,
}

/// The points of `objects` in `samples`, by `label`, sorted by name.
pub fn points(
    samples: &[Sample<'_>],
    label: &str,
    objects: &Objects,
    window_seconds: Option<i64>,
    what: &str,
) -> Result<Vec<Point>> {
    let mut picked: Vec<(&str, f64, i64)> = samples
        .iter()
        .filter_map(|s| {
            let name = s.label(label)?;
            objects.contains(name).then_some((name, s.value, s.timestamp_ms))
        })
        .collect();
    picked.sort_unstable_by(|a, b| a.0.cmp(b.0));
    if let Some(w) = picked.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::Internal(format!(
            "{what} returned several series for {label}={:?}; aggregate them with by (<<.GroupBy>>)",
            w[0].0
        )));
    }
    Ok(picked
        .into_iter()
        .map(|(name, value, timestamp_ms)| Point { name: objects.shared(name), value, timestamp_ms, window_seconds })
        .collect())
}

/// The values of an external metric.
pub fn external(samples: &[Sample<'_>]) -> Vec<ExternalValue> {
    samples
        .iter()
        .map(|s| ExternalValue {
            labels: s.labels.iter().map(|(k, v)| ((**k).to_owned(), (**v).to_owned())).collect(),
            value: s.value,
            timestamp_ms: s.timestamp_ms,
        })
        .collect()
}

impl Objects {
    /// The name as an `Arc`, shared with the selection when it holds it.
    pub fn shared(&self, name: &str) -> Arc<str> {
        match self {
            Objects::Names(names) => match names.binary_search_by(|n| (**n).cmp(name)) {
                Ok(i) => names[i].clone(),
                Err(_) => Arc::from(name),
            },
            Objects::All | Objects::One(_) => Arc::from(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn sample<'a>(labels: &[(&'a str, &'a str)], value: f64) -> Sample<'a> {
        Sample {
            labels: labels.iter().map(|(k, v)| (Cow::Borrowed(*k), Cow::Borrowed(*v))).collect(),
            value,
            timestamp_ms: 1000,
        }
    }

    #[test]
    fn points_are_the_selection_sorted() {
        let samples = [
            sample(&[("pod", "c")], 3.0),
            sample(&[("pod", "a")], 1.0),
            sample(&[("pod", "x")], 9.0),
            sample(&[], 5.0),
        ];
        let objects = Objects::names(vec![Arc::from("a"), Arc::from("b"), Arc::from("c")]);
        let p = points(&samples, "pod", &objects, Some(60), "rule r").unwrap();
        assert_eq!(p.iter().map(|p| (&*p.name, p.value)).collect::<Vec<_>>(), [("a", 1.0), ("c", 3.0)]);
        assert_eq!(p[0].window_seconds, Some(60));
        let all = points(&samples, "pod", &Objects::All, None, "rule r").unwrap();
        assert_eq!(all.len(), 3);
        let dup = [sample(&[("pod", "a")], 1.0), sample(&[("pod", "a")], 2.0)];
        let e = points(&dup, "pod", &Objects::All, None, "rules[0]").unwrap_err();
        assert!(matches!(e, Error::Internal(m) if m.contains("rules[0] returned several series for pod=\"a\"")));
    }

    #[test]
    fn external_values_keep_every_label() {
        let v = external(&[sample(&[("queue", "inference"), ("namespace", "ai")], 42.0)]);
        assert_eq!(v[0].labels.len(), 2);
        assert_eq!(v[0].labels["queue"], "inference");
        assert_eq!(v[0].value, 42.0);
    }
}
