//! Label and field selectors as the API server reads them: `a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-joined (all must hold). A selector that
//! does not parse is answered 400, as the real server does.

use std::collections::BTreeMap;

/// One requirement.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn terms(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

fn set(values: &str) -> Result<Vec<String>, String> {
    let inner = values
        .trim()
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| format!("{values:?}: expected (a,b)"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

impl Selector {
    /// Parses a selector; the error says what was wrong.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for term in terms(text) {
            let requirement = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set(v)?)
            } else if let Some((k, v)) = term.split_once(" in ") {
                Requirement::In(k.trim().into(), set(v)?)
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else {
                Requirement::Exists(term.into())
            };
            let key = match &requirement {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(format!("unable to parse requirement: {term:?}: invalid key {key:?}"));
            }
            out.push(requirement);
        }
        Ok(Selector(out))
    }

    /// Whether `fields` (labels, or field paths such as `spec.nodeName`) satisfy it.
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => fields.get(k) == Some(v),
            Requirement::NotEquals(k, v) => fields.get(k) != Some(v),
            Requirement::In(k, vs) => fields.get(k).is_some_and(|x| vs.contains(x)),
            Requirement::NotIn(k, vs) => fields.get(k).is_none_or(|x| !vs.contains(x)),
            Requirement::Exists(k) => fields.contains_key(k),
            Requirement::NotExists(k) => !fields.contains_key(k),
        })
    }

    /// This selector and `other`: both must hold.
    pub fn and(mut self, other: Selector) -> Selector {
        self.0.extend(other.0);
        self
    }

    /// The keys it names (a field selector may only name fields the resource indexes).
    pub fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k.as_str(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn every_form_matches_as_the_api_server_does() {
        let l = labels(&[("app", "inference"), ("tier", "gpu")]);
        for (text, ok) in [
            ("app=inference", true),
            ("app==inference", true),
            ("app!=inference", false),
            ("app in (a,inference)", true),
            ("app notin (inference)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=inference,tier=gpu", true),
            ("app=inference,tier=cpu", false),
            ("", true),
        ] {
            assert_eq!(Selector::parse(text).unwrap().matches(&l), ok, "{text}");
        }
        assert!(Selector::parse("a b=c").is_err());
        assert!(Selector::parse("app in inference").is_err());
    }
}
