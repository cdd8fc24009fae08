//! A series' label set, kept in the two forms the two encoders read.
//!
//! The pairs stay unescaped for prometheus-client, which escapes values itself; the
//! escaped `a="x",b="y"` text is built once per set for our own encoder, so neither
//! escapes a GPU's labels again for every family it appears in.

use std::borrow::Cow;

use prometheus_client::encoding::{EncodeLabel as _, EncodeLabelSet, LabelSetEncoder};

use crate::exposition::push_label;

/// Ordered `name=value` pairs of one series (or of the device part of one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSet {
    pairs: Vec<(Cow<'static, str>, String)>,
    escaped: String,
}

impl LabelSet {
    /// Appends a label. Names are static everywhere except the `--label` flags.
    pub fn push(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) {
        let (name, value) = (name.into(), value.into());
        if !self.escaped.is_empty() {
            self.escaped.push(',');
        }
        push_label(&mut self.escaped, &name, &value);
        self.pairs.push((name, value));
    }

    /// Builds a set from pairs, in order.
    pub fn of(pairs: &[(&'static str, &str)]) -> Self {
        let mut set = LabelSet::default();
        for (name, value) in pairs {
            set.push(*name, *value);
        }
        set
    }

    /// The `a="x",b="y"` text our encoder writes between the braces.
    pub fn escaped(&self) -> &str {
        &self.escaped
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_ref(), v.as_str()))
    }
}

/// A sample's full label set for prometheus-client: a shared set, then the sample's
/// own pairs, without building a new list per sample.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    pub set: &'a LabelSet,
    pub extra: &'a [(&'a str, &'a str)],
}

impl EncodeLabelSet for Series<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        for pair in self.set.pairs().chain(self.extra.iter().copied()) {
            pair.encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_keep_order_and_the_text_is_escaped() {
        let mut set = LabelSet::of(&[("node", "n1")]);
        set.push(String::from("cluster"), "a\"b\\c\nd");
        assert_eq!(set.escaped(), "node=\"n1\",cluster=\"a\\\"b\\\\c\\nd\"");
        assert_eq!(set.pairs().collect::<Vec<_>>(), [("node", "n1"), ("cluster", "a\"b\\c\nd")]);
    }
}
