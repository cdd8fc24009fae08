//! Series names: which a rule keeps (`seriesFilters`, and `name.matches` as an implicit
//! `is` filter) and the name the API shows for each (`name.as`, with `$1`-style captures
//! of `name.matches`). When `as` is absent it is `$0` if `matches` has no capture group
//! and `$1` if it has one; with more it must be given, as prometheus-adapter requires.
//! Regular expressions are RE2 syntax (Go's `regexp`), which the `regex` crate reads
//! the same way, unanchored as Go matches them.

use regex::Regex;

use super::schema::{NameMapping, RegexFilter};

/// A filter on series names.
#[derive(Debug, Clone)]
pub struct Filter {
    regex: Regex,
    keep_matches: bool,
}

impl Filter {
    /// Compiles one `seriesFilters` entry; the error names what is wrong.
    pub fn new(f: &RegexFilter) -> Result<Self, String> {
        let (raw, keep_matches) = match (f.is.is_empty(), f.is_not.is_empty()) {
            (false, true) => (&f.is, true),
            (true, false) => (&f.is_not, false),
            (false, false) => {
                return Err(format!("has both is ({:?}) and isNot ({:?}); give one per filter", f.is, f.is_not));
            }
            (true, true) => return Err("needs is or isNot".into()),
        };
        let regex =
            Regex::new(raw).map_err(|e| format!("{raw:?} is not a valid regular expression: {}", one_line(&e)))?;
        Ok(Self { regex, keep_matches })
    }

    /// Whether a series of this name is kept.
    pub fn keeps(&self, name: &str) -> bool {
        self.regex.is_match(name) == self.keep_matches
    }
}

/// Names series for the API.
#[derive(Debug, Clone)]
pub struct Namer {
    matches: Regex,
    as_: String,
    /// `matches` was given, so it filters series too.
    filters: bool,
}

/// Which part of `name` is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    /// `matches` or `as`.
    pub field: &'static str,
    /// Why.
    pub reason: String,
}

impl Namer {
    /// Compiles a rule's `name`.
    pub fn new(n: &NameMapping) -> Result<Self, NameError> {
        let filters = !n.matches.is_empty();
        let raw = if filters { n.matches.as_str() } else { ".*" };
        let matches = Regex::new(raw).map_err(|e| NameError {
            field: "matches",
            reason: format!("{raw:?} is not a valid regular expression: {}", one_line(&e)),
        })?;
        let as_ = if n.as_.is_empty() {
            match matches.captures_len() {
                1 => "$0".to_owned(),
                2 => "$1".to_owned(),
                groups => {
                    return Err(NameError {
                        field: "as",
                        reason: format!(
                            "is required: matches {raw:?} has {} capture groups, so which one names the metric is not obvious (write for example as: \"$1\")",
                            groups - 1
                        ),
                    });
                }
            }
        } else {
            n.as_.clone()
        };
        Ok(Self { matches, as_, filters })
    }

    /// Whether `matches` keeps a series of this name (always, when `matches` is absent).
    pub fn keeps(&self, name: &str) -> bool {
        !self.filters || self.matches.is_match(name)
    }

    /// The API name of a series, `None` when `matches` does not match it.
    pub fn name(&self, series: &str) -> Option<String> {
        let caps = self.matches.captures(series)?;
        let mut out = String::new();
        caps.expand(&self.as_, &mut out);
        Some(out)
    }
}

/// A regex error on one line (the crate's messages draw the pattern over several).
fn one_line(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_owned();
    last.strip_prefix("error: ").unwrap_or(&last).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namer(matches: &str, as_: &str) -> Result<Namer, NameError> {
        Namer::new(&NameMapping { matches: matches.into(), as_: as_.into() })
    }

    #[test]
    fn names_follow_prometheus_adapter_defaults() {
        let n = namer("^(.*)_total", "${1}_per_second").unwrap();
        assert_eq!(n.name("http_requests_total").as_deref(), Some("http_requests_per_second"));
        assert_eq!(n.name("up"), None);
        assert!(!n.keeps("up") && n.keeps("http_requests_total"));
        // one capture group: $1
        assert_eq!(
            namer("^container_(.*)_seconds_total$", "").unwrap().name("container_cpu_usage_seconds_total").as_deref(),
            Some("cpu_usage")
        );
        // no capture group: $0, the whole match
        assert_eq!(namer("queue_length", "").unwrap().name("app_queue_length").as_deref(), Some("queue_length"));
        // no matches at all: every series, named as is
        let all = namer("", "").unwrap();
        assert!(all.keeps("anything"));
        assert_eq!(all.name("anything").as_deref(), Some("anything"));
        // a constant name
        assert_eq!(namer("", "cheesy_goodness").unwrap().name("cheddar").as_deref(), Some("cheesy_goodness"));
        // Go's Expand: $1_x names a group "1_x", which does not exist
        assert_eq!(namer("^(.*)_total$", "$1_x").unwrap().name("a_total").as_deref(), Some(""));
    }

    #[test]
    fn bad_names_are_refused_with_the_field() {
        let e = namer("^(.*)_(total|count)$", "").unwrap_err();
        assert_eq!(e.field, "as");
        assert!(e.reason.contains("2 capture groups"), "{}", e.reason);
        let e = namer("^(.*_total", "").unwrap_err();
        assert_eq!(e.field, "matches");
        assert!(
            e.reason.contains("not a valid regular expression") && e.reason.contains("unclosed group"),
            "{}",
            e.reason
        );
        assert!(!e.reason.contains('\n'));
    }

    #[test]
    fn filters() {
        let is_not =
            Filter::new(&RegexFilter { is: String::new(), is_not: "^container_.*_seconds_total$".into() }).unwrap();
        assert!(is_not.keeps("container_network_receive_bytes_total"));
        assert!(!is_not.keeps("container_cpu_usage_seconds_total"));
        let is = Filter::new(&RegexFilter { is: "_total$".into(), is_not: String::new() }).unwrap();
        assert!(is.keeps("a_total") && !is.keeps("a_sum"));
        assert!(Filter::new(&RegexFilter { is: "a".into(), is_not: "b".into() }).unwrap_err().contains("both"));
        assert!(Filter::new(&RegexFilter::default()).unwrap_err().contains("needs is or isNot"));
        assert!(
            Filter::new(&RegexFilter { is: "(".into(), is_not: String::new() }).unwrap_err().contains("not a valid")
        );
    }
}
