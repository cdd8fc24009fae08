//! Answers of the Prometheus HTTP API (`/api/v1/query`, `/api/v1/series`), parsed in one
//! pass straight from the body: label names and values borrow from it (a copy only where
//! JSON escapes force one), values are read as numbers once, and nothing is built that
//! the read does not keep. At 10,000 series this is what keeps the adapter's cost above
//! the query itself small (NOTES.md, "Prometheus path").
//!
//! A sample whose value is not a finite number (`NaN`, `+Inf`) is left out: missing,
//! never zero. An error answer is classified: `bad_data` means Prometheus refused the
//! query text or its parameters (a configuration error of the rule that made it); other
//! error types, and bodies that are not the API's JSON, are failures of the read.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One sample of an instant vector (or the value of a scalar, without labels).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Its labels, or the one label the parse was asked to keep.
    pub labels: Labels<'a>,
    /// A finite value.
    pub value: f64,
    /// Evaluation time, ms since the epoch.
    pub timestamp_ms: i64,
}

/// A sample's labels.
#[derive(Debug, Clone, PartialEq)]
pub enum Labels<'a> {
    /// Every pair, in the order Prometheus wrote them ([`Keep::All`]).
    All(Vec<(Cow<'a, str>, Cow<'a, str>)>),
    /// The one pair kept ([`Keep::Only`]), if the sample has it.
    Kept(Option<(Cow<'a, str>, Cow<'a, str>)>),
}

impl Labels<'_> {
    /// The pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let pairs: &[(Cow<'_, str>, Cow<'_, str>)] = match self {
            Labels::All(v) => v,
            Labels::Kept(one) => one.as_slice(),
        };
        pairs.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl Sample<'_> {
    /// The value of a label.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// Which labels a parse keeps of each sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep<'w> {
    /// All of them (external metrics serve them as `metricLabels`).
    All,
    /// Only this one (a custom metric's resource label): no per-sample allocation.
    Only(&'w str),
}

/// An instant query's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<'a> {
    /// The samples with finite values.
    pub samples: Vec<Sample<'a>>,
    /// The query returned a scalar (one sample without labels, or none if it was not finite).
    pub scalar: bool,
}

/// Why an answer is not a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// `bad_data`: Prometheus refused the query text or its parameters.
    Rejected {
        /// HTTP status.
        status: u16,
        /// Prometheus' message.
        message: String,
    },
    /// Another error answer (`execution`, `timeout`, `internal`, ...).
    Failed {
        /// HTTP status.
        status: u16,
        /// `errorType`.
        error_type: String,
        /// Prometheus' message.
        message: String,
    },
    /// A success that is not an instant vector or scalar (a range query's matrix).
    WrongType(String),
    /// Not the API's JSON.
    Unusable(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Rejected { status, message } => {
                write!(f, "Prometheus rejected the query (HTTP {status}, bad_data): {message}")
            }
            Failure::Failed { status, error_type, message } => {
                write!(f, "Prometheus query failed (HTTP {status}, {error_type}): {message}")
            }
            Failure::WrongType(t) => write!(f, "the query returned a {t}, not an instant vector or a scalar"),
            Failure::Unusable(m) => write!(f, "{m}"),
        }
    }
}

/// The API envelope (`status`, `data`, `errorType`, `error`), `data` read by `seed`.
struct EnvelopeSeed<S>(S);

type EnvelopeParts<'de, T> = (Option<Cow<'de, str>>, Option<T>, Option<Cow<'de, str>>, Option<Cow<'de, str>>);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for EnvelopeSeed<S> {
    type Value = EnvelopeParts<'de, S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for EnvelopeSeed<S> {
    type Value = EnvelopeParts<'de, S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the Prometheus API envelope")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seed = Some(self.0);
        let (mut status, mut data, mut error_type, mut error) = (None, None, None, None);
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match &*key {
                "status" => status = Some(map.next_value::<Text<'de>>()?.0),
                "errorType" => error_type = Some(map.next_value::<Text<'de>>()?.0),
                "error" => error = Some(map.next_value::<Text<'de>>()?.0),
                "data" => match seed.take() {
                    Some(s) => data = Some(map.next_value_seed(s)?),
                    None => return Err(de::Error::duplicate_field("data")),
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((status, data, error_type, error))
    }
}

fn envelope<'a, S: DeserializeSeed<'a>>(status: u16, body: &'a [u8], seed: S) -> Result<S::Value, Failure> {
    let unusable = |e: serde_json::Error| {
        Failure::Unusable(format!("Prometheus answered HTTP {status} with a body that is not its API JSON: {e}"))
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let (state, data, error_type, error) = EnvelopeSeed(seed).deserialize(&mut de).map_err(unusable)?;
    de.end().map_err(unusable)?;
    if state.as_deref() != Some("success") {
        let error_type = error_type.unwrap_or_default().into_owned();
        let message = error.unwrap_or_default().into_owned();
        return Err(if error_type == "bad_data" {
            Failure::Rejected { status, message }
        } else {
            Failure::Failed { status, error_type, message }
        });
    }
    data.ok_or_else(|| Failure::Unusable(format!("Prometheus answered HTTP {status} with success but no data")))
}

/// Parses an `/api/v1/query` answer, keeping every label.
pub fn query(status: u16, body: &[u8]) -> Result<Answer<'_>, Failure> {
    query_keeping(status, body, Keep::All)
}

/// Parses an `/api/v1/query` answer, keeping the labels `keep` says.
pub fn query_keeping<'a>(status: u16, body: &'a [u8], keep: Keep<'_>) -> Result<Answer<'a>, Failure> {
    // About 60 bytes a sample in the smallest answers: room without regrowing.
    let hint = (body.len() / 48).min(1 << 20);
    let (result_type, result) = envelope(status, body, DataSeed { keep, hint })?;
    match (&*result_type, result) {
        ("vector", QueryResult::Samples(samples)) => Ok(Answer { samples, scalar: false }),
        ("scalar", QueryResult::Scalar(s)) => Ok(Answer { samples: s.into_iter().collect(), scalar: true }),
        ("vector" | "scalar", _) => Err(Failure::Unusable("malformed result in Prometheus answer".into())),
        (other, _) => Err(Failure::WrongType(other.to_owned())),
    }
}

/// `data` of a query answer: `resultType` and `result`.
#[derive(Clone, Copy)]
struct DataSeed<'w> {
    keep: Keep<'w>,
    hint: usize,
}

impl<'de, 'w> DeserializeSeed<'de> for DataSeed<'w> {
    type Value = (Cow<'de, str>, QueryResult<'de>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'w> Visitor<'de> for DataSeed<'w> {
    type Value = (Cow<'de, str>, QueryResult<'de>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("query data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut result_type, mut result) = (None, None);
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match &*key {
                "resultType" => result_type = Some(map.next_value::<Text<'de>>()?.0),
                "result" => result = Some(map.next_value_seed(ResultSeed(self))?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let result_type = result_type.ok_or_else(|| de::Error::missing_field("resultType"))?;
        Ok((result_type, result.ok_or_else(|| de::Error::missing_field("result"))?))
    }
}

/// `result`: samples (`[{metric, value}, ...]`), or a scalar (`[time, "value"]`).
enum QueryResult<'a> {
    Samples(Vec<Sample<'a>>),
    Scalar(Option<Sample<'a>>),
    /// A matrix or anything else with entries this parser does not read.
    Other,
}

struct ResultSeed<'w>(DataSeed<'w>);

impl<'de, 'w> DeserializeSeed<'de> for ResultSeed<'w> {
    type Value = QueryResult<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, 'w> Visitor<'de> for ResultSeed<'w> {
    type Value = QueryResult<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of samples or a scalar")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let entry = EntrySeed(self.0.keep);
        let mut samples = Vec::with_capacity(self.0.hint);
        let mut other = false;
        match seq.next_element_seed(entry)? {
            None => return Ok(QueryResult::Samples(samples)),
            Some(Entry::Time(t)) => {
                let Text(value) = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(QueryResult::Scalar(finite(&value).map(|v| Sample {
                    labels: Labels::All(Vec::new()),
                    value: v,
                    timestamp_ms: millis(t),
                })));
            }
            Some(Entry::Sample(s)) => samples.extend(s),
            Some(Entry::Other) => other = true,
        }
        while let Some(e) = seq.next_element_seed(entry)? {
            match e {
                Entry::Sample(s) => samples.extend(s),
                Entry::Other => other = true,
                Entry::Time(_) => return Err(de::Error::custom("a number among samples")),
            }
        }
        Ok(if other { QueryResult::Other } else { QueryResult::Samples(samples) })
    }
}

/// An element of `result`: a sample object (kept when finite), or a scalar's time.
enum Entry<'a> {
    Sample(Option<Sample<'a>>),
    Time(f64),
    Other,
}

#[derive(Clone, Copy)]
struct EntrySeed<'w>(Keep<'w>);

impl<'de, 'w> DeserializeSeed<'de> for EntrySeed<'w> {
    type Value = Entry<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'w> Visitor<'de> for EntrySeed<'w> {
    type Value = Entry<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sample or a time")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Entry::Time(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Entry::Time(v as f64))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Entry::Time(v as f64))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut labels = None;
        let mut value: Option<(f64, Text<'de>)> = None;
        let mut other = false;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match &*key {
                "metric" => labels = Some(map.next_value_seed(LabelsSeed(self.0))?),
                "value" => value = Some(map.next_value()?),
                "values" | "histograms" => {
                    other = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if other {
            return Ok(Entry::Other);
        }
        // A native histogram sample (`histogram`, no `value`) has no number to serve.
        let Some((t, Text(v))) = value else { return Ok(Entry::Sample(None)) };
        let labels = labels.unwrap_or(match self.0 {
            Keep::All => Labels::All(Vec::new()),
            Keep::Only(_) => Labels::Kept(None),
        });
        Ok(Entry::Sample(finite(&v).map(|value| Sample { labels, value, timestamp_ms: millis(t) })))
    }
}

/// A label object: every pair, or the one kept.
struct LabelsSeed<'w>(Keep<'w>);

impl<'de, 'w> DeserializeSeed<'de> for LabelsSeed<'w> {
    type Value = Labels<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'w> Visitor<'de> for LabelsSeed<'w> {
    type Value = Labels<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a label object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        match self.0 {
            Keep::All => {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((Text(k), Text(v))) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    out.push((k, v));
                }
                Ok(Labels::All(out))
            }
            Keep::Only(wanted) => {
                let mut kept = None;
                while let Some(Text(k)) = map.next_key::<Text<'de>>()? {
                    if k == wanted {
                        kept = Some((k, map.next_value::<Text<'de>>()?.0));
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Labels::Kept(kept))
            }
        }
    }
}

/// A JSON string, borrowed from the body unless escapes force a copy (serde's own
/// `Cow<str>` always copies).
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A label object, as pairs.
struct Pairs<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a label object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((Text(k), Text(v))) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    out.push((k, v));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn finite(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn millis(seconds: f64) -> i64 {
    let ms = (seconds * 1000.0).round();
    if ms.is_finite() { ms as i64 } else { 0 }
}

/// A discovered series with its values dropped: its name and label names (sorted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// `__name__`.
    pub name: String,
    /// The other label names, sorted.
    pub labels: Vec<String>,
}

/// Parses an `/api/v1/series` answer into the distinct shapes of its series.
pub fn series(status: u16, body: &[u8]) -> Result<Vec<Shape>, Failure> {
    let list: ShapeList = envelope(status, body, std::marker::PhantomData)?;
    let mut shapes: Vec<Shape> = list.0.into_iter().collect();
    shapes.sort_unstable();
    Ok(shapes)
}

struct ShapeList(HashSet<Shape>);

impl<'de> Deserialize<'de> for ShapeList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ShapeList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of series")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = HashSet::new();
                while let Some(Pairs(pairs)) = seq.next_element::<Pairs<'de>>()? {
                    let mut name = None;
                    let mut labels = Vec::with_capacity(pairs.len());
                    for (k, v) in pairs {
                        if k == "__name__" {
                            name = Some(v);
                        } else {
                            labels.push(k.into_owned());
                        }
                    }
                    let Some(name) = name else { continue };
                    labels.sort_unstable();
                    out.insert(Shape { name: name.into_owned(), labels });
                }
                Ok(ShapeList(out))
            }
        }
        d.deserialize_seq(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_keep_finite_samples_with_their_labels() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a","namespace":"ai"},"value":[1700000000.5,"180.25"]},
            {"metric":{"pod":"b"},"value":[1700000000.5,"NaN"]},
            {"metric":{"pod":"c\u00e9"},"value":[1700000000.5,"+Inf"]},
            {"metric":{"pod":"d\"q"},"value":[1700000000,"-3e2"]}]}}"#;
        let a = query(200, body).unwrap();
        assert!(!a.scalar);
        assert_eq!(a.samples.len(), 2);
        assert_eq!((a.samples[0].value, a.samples[0].timestamp_ms), (180.25, 1_700_000_000_500));
        assert_eq!(a.samples[0].label("namespace"), Some("ai"));
        assert_eq!(a.samples[1].label("pod"), Some("d\"q"));
        // Labels borrow from the body; only an escaped one is copied.
        let Labels::All(first) = &a.samples[0].labels else { panic!("all labels") };
        assert!(matches!(first[0].1, Cow::Borrowed("a")));
        let Labels::All(second) = &a.samples[1].labels else { panic!("all labels") };
        assert!(matches!(second[0].1, Cow::Owned(_)));
        // Keeping one label keeps only it.
        let kept = query_keeping(200, body, Keep::Only("namespace")).unwrap();
        assert_eq!(kept.samples[0].labels, Labels::Kept(Some((Cow::Borrowed("namespace"), Cow::Borrowed("ai")))));
        assert_eq!(kept.samples[1].labels, Labels::Kept(None));
        assert_eq!(kept.samples[0].label("pod"), None);
        assert_eq!(a.samples[1].value, -300.0);
        let empty = query(200, br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).unwrap();
        assert!(empty.samples.is_empty());
    }

    /// Prometheus 3 adds `infos` (PromQL annotations such as this one, which a
    /// `rate()` over a gauge-named series draws) beside `data`: the samples are read as
    /// before. The body is a 3.16 answer, as it came.
    #[test]
    fn prometheus_3_annotations_beside_the_answer_are_ignored() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"127.0.0.1:19511","job":"x"},"value":[1796509144.785,"0"]}]},"infos":["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"x\" (1:6)"]}"#;
        let a = query(200, body).unwrap();
        assert_eq!(a.samples.len(), 1);
        assert_eq!((a.samples[0].label("job"), a.samples[0].value), (Some("x"), 0.0));
    }

    #[test]
    fn scalars_are_one_sample_without_labels() {
        let a =
            query(200, br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.25,"7"]}}"#).unwrap();
        assert!(a.scalar);
        assert_eq!(a.samples, [Sample { labels: Labels::All(vec![]), value: 7.0, timestamp_ms: 1_700_000_000_250 }]);
        let nan = query(200, br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#).unwrap();
        assert!(nan.scalar && nan.samples.is_empty());
    }

    #[test]
    fn errors_are_classified() {
        let bad = br#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected \"}\""}"#;
        assert_eq!(
            query(400, bad).unwrap_err(),
            Failure::Rejected { status: 400, message: "1:5: parse error: unexpected \"}\"".into() }
        );
        let exec = br#"{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}"#;
        assert!(
            matches!(query(422, exec).unwrap_err(), Failure::Failed { status: 422, ref error_type, .. } if error_type == "execution")
        );
        assert!(
            matches!(query(502, b"<html>bad gateway</html>").unwrap_err(), Failure::Unusable(m) if m.contains("HTTP 502"))
        );
        let matrix =
            br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]]}]}}"#;
        assert_eq!(query(200, matrix).unwrap_err(), Failure::WrongType("matrix".into()));
        let string = br#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#;
        assert_eq!(query(200, string).unwrap_err(), Failure::WrongType("string".into()));
        let broken = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":"x"}]}}"#;
        assert!(matches!(query(200, broken).unwrap_err(), Failure::Unusable(_)));
        assert!(query(400, bad).unwrap_err().to_string().contains("rejected the query (HTTP 400, bad_data)"));
    }

    #[test]
    fn series_are_reduced_to_distinct_shapes() {
        let body = br#"{"status":"success","data":[
            {"__name__":"http_requests_total","namespace":"ai","pod":"a","method":"GET"},
            {"__name__":"http_requests_total","pod":"b","namespace":"ai","method":"POST"},
            {"__name__":"http_requests_total","namespace":"ai","pod":"c"},
            {"namespace":"no-name"}]}"#;
        let shapes = series(200, body).unwrap();
        assert_eq!(
            shapes,
            [
                Shape {
                    name: "http_requests_total".into(),
                    labels: vec!["method".into(), "namespace".into(), "pod".into()]
                },
                Shape { name: "http_requests_total".into(), labels: vec!["namespace".into(), "pod".into()] },
            ]
        );
        let bad = br#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"match[]\""}"#;
        assert!(matches!(series(400, bad).unwrap_err(), Failure::Rejected { .. }));
    }
}
