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
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One sample of an instant vector (or the value of a scalar, without labels).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Label pairs in the order Prometheus wrote them.
    pub labels: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// A finite value.
    pub value: f64,
    /// Evaluation time, ms since the epoch.
    pub timestamp_ms: i64,
}

impl Sample<'_> {
    /// The value of a label.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| &**v)
    }
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

#[derive(Deserialize)]
#[serde(bound(deserialize = "D: Deserialize<'de>"))]
struct Envelope<'a, D> {
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(default = "none")]
    data: Option<D>,
    #[serde(default, rename = "errorType", borrow)]
    error_type: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    error: Option<Cow<'a, str>>,
}

fn none<D>() -> Option<D> {
    None
}

fn envelope<'a, D: Deserialize<'a>>(status: u16, body: &'a [u8]) -> Result<D, Failure> {
    let env: Envelope<'a, D> = serde_json::from_slice(body).map_err(|e| {
        Failure::Unusable(format!("Prometheus answered HTTP {status} with a body that is not its API JSON: {e}"))
    })?;
    if env.status != "success" {
        let error_type = env.error_type.unwrap_or_default().into_owned();
        let message = env.error.unwrap_or_default().into_owned();
        return Err(if error_type == "bad_data" {
            Failure::Rejected { status, message }
        } else {
            Failure::Failed { status, error_type, message }
        });
    }
    env.data.ok_or_else(|| Failure::Unusable(format!("Prometheus answered HTTP {status} with success but no data")))
}

/// Parses an `/api/v1/query` answer.
pub fn query(status: u16, body: &[u8]) -> Result<Answer<'_>, Failure> {
    let data: QueryData<'_> = envelope(status, body)?;
    match (&*data.result_type, data.result) {
        ("vector", QueryResult::Samples(samples)) => Ok(Answer { samples, scalar: false }),
        ("scalar", QueryResult::Scalar(s)) => Ok(Answer { samples: s.into_iter().collect(), scalar: true }),
        ("vector" | "scalar", _) => Err(Failure::Unusable("malformed result in Prometheus answer".into())),
        (other, _) => Err(Failure::WrongType(other.to_owned())),
    }
}

#[derive(Deserialize)]
struct QueryData<'a> {
    #[serde(rename = "resultType", borrow)]
    result_type: Cow<'a, str>,
    #[serde(borrow)]
    result: QueryResult<'a>,
}

/// `result`: samples (`[{metric, value}, ...]`), or a scalar (`[time, "value"]`).
enum QueryResult<'a> {
    Samples(Vec<Sample<'a>>),
    Scalar(Option<Sample<'a>>),
    /// A matrix or anything else with entries this parser does not read.
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for QueryResult<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ResultVisitor)
    }
}

struct ResultVisitor;

impl<'de> Visitor<'de> for ResultVisitor {
    type Value = QueryResult<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of samples or a scalar")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut samples = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut other = false;
        match seq.next_element::<Entry<'de>>()? {
            None => return Ok(QueryResult::Samples(samples)),
            Some(Entry::Time(t)) => {
                let value: Cow<'de, str> = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(QueryResult::Scalar(finite(&value).map(|v| Sample {
                    labels: Vec::new(),
                    value: v,
                    timestamp_ms: millis(t),
                })));
            }
            Some(Entry::Sample(s)) => samples.extend(s),
            Some(Entry::Other) => other = true,
        }
        while let Some(entry) = seq.next_element::<Entry<'de>>()? {
            match entry {
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

impl<'de: 'a, 'a> Deserialize<'de> for Entry<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(EntryVisitor)
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
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
        let mut value: Option<(f64, Cow<'de, str>)> = None;
        let mut other = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "metric" => labels = Some(map.next_value::<Labels<'de>>()?.0),
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
        let Some((t, v)) = value else { return Ok(Entry::Sample(None)) };
        Ok(Entry::Sample(finite(&v).map(|value| Sample {
            labels: labels.unwrap_or_default(),
            value,
            timestamp_ms: millis(t),
        })))
    }
}

/// A label object, as pairs.
struct Labels<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a label object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((k, v)) = map.next_entry::<Cow<'de, str>, Cow<'de, str>>()? {
                    out.push((k, v));
                }
                Ok(Labels(out))
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
    let list: ShapeList = envelope(status, body)?;
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
                while let Some(Labels(pairs)) = seq.next_element::<Labels<'de>>()? {
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
        assert_eq!(a.samples[1].value, -300.0);
        let empty = query(200, br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).unwrap();
        assert!(empty.samples.is_empty());
    }

    #[test]
    fn scalars_are_one_sample_without_labels() {
        let a =
            query(200, br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.25,"7"]}}"#).unwrap();
        assert!(a.scalar);
        assert_eq!(a.samples, [Sample { labels: vec![], value: 7.0, timestamp_ms: 1_700_000_000_250 }]);
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
