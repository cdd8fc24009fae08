//! Answers turned into what the API serves: for custom metrics one point per requested
//! object (the sample whose resource label names it; others are dropped, which is also
//! how a namespace-wide query is narrowed to the selection), for external metrics one
//! value per sample with its labels. Two samples for one object are refused: the rule
//! must aggregate `by (<<.GroupBy>>)` (prometheus-adapter keeps one of them silently).

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
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

/// The points of `objects` in `samples`, by `label`, sorted by name. For a selection
/// (sorted names) the samples are hashed by name and the selection walked in order, so no
/// string is compared more than once: at 10,000 pods the sort and binary searches this
/// replaces were a quarter of the adapter's time (NOTES.md, "Prometheus path").
pub fn points(
    samples: &[Sample<'_>],
    label: &str,
    objects: &Objects,
    window_seconds: Option<i64>,
    what: &str,
) -> Result<Vec<Point>> {
    let several = |name: &str| {
        Error::Internal(format!(
            "{what} returned several series for {label}={name:?}; aggregate them with by (<<.GroupBy>>)"
        ))
    };
    let point = |name: Arc<str>, (value, timestamp_ms): (f64, i64)| Point { name, value, timestamp_ms, window_seconds };
    if let Objects::Names(names) = objects {
        let mut by_name: HashMap<&str, (f64, i64), BuildHasherDefault<Fnv>> =
            HashMap::with_capacity_and_hasher(samples.len().min(names.len() * 2), BuildHasherDefault::default());
        for s in samples {
            if let Some(name) = s.label(label)
                && by_name.insert(name, (s.value, s.timestamp_ms)).is_some()
            {
                return Err(several(name));
            }
        }
        let mut out = Vec::with_capacity(names.len().min(by_name.len()));
        out.extend(names.iter().filter_map(|n| by_name.get(&**n).map(|v| point(n.clone(), *v))));
        return Ok(out);
    }
    let mut picked: Vec<(&str, f64, i64)> = samples
        .iter()
        .filter_map(|s| {
            let name = s.label(label)?;
            objects.contains(name).then_some((name, s.value, s.timestamp_ms))
        })
        .collect();
    picked.sort_unstable_by(|a, b| a.0.cmp(b.0));
    if let Some(w) = picked.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(several(w[0].0));
    }
    Ok(picked.into_iter().map(|(name, value, ts)| point(Arc::from(name), (value, ts))).collect())
}

/// FNV-1a: object names are short and come from the adapter's own store and Prometheus'
/// answer to its query, so a fast hash beats SipHash's protection here (SipHash was 4 % of
/// the adapter's time at 10,000 pods).
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// The values of an external metric.
pub fn external(samples: &[Sample<'_>]) -> Vec<ExternalValue> {
    samples
        .iter()
        .map(|s| ExternalValue {
            labels: s.labels.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
            value: s.value,
            timestamp_ms: s.timestamp_ms,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::answer::Labels;
    use super::*;
    use std::borrow::Cow;

    fn sample<'a>(labels: &[(&'a str, &'a str)], value: f64) -> Sample<'a> {
        Sample {
            labels: Labels::All(labels.iter().map(|(k, v)| (Cow::Borrowed(*k), Cow::Borrowed(*v))).collect()),
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
        let e = points(&dup, "pod", &objects, None, "rules[0]").unwrap_err();
        assert!(matches!(e, Error::Internal(m) if m.contains("several series")));
        let one = points(&samples, "pod", &Objects::One("c".into()), None, "r").unwrap();
        assert_eq!(one.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["c"]);
    }

    #[test]
    fn external_values_keep_every_label() {
        let v = external(&[sample(&[("queue", "inference"), ("namespace", "ai")], 42.0)]);
        assert_eq!(v[0].labels.len(), 2);
        assert_eq!(v[0].labels["queue"], "inference");
        assert_eq!(v[0].value, 42.0);
    }
}
