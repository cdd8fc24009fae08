//! A series' label set, kept in the two forms the two encoders read, and the label
//! groups several families share: a MIG instance's, and a device holder's.
//!
//! The pairs stay unescaped for prometheus-client, which escapes values itself; the
//! escaped `a="x",b="y"` text is built once per set for our own encoder, so neither
//! escapes a GPU's labels again for every family it appears in.

use std::borrow::Cow;

use prometheus_client::encoding::{EncodeLabel as _, EncodeLabelSet, LabelSetEncoder};

use crate::exposition::push_label;
use crate::snapshot::attribution::{AttributionResult, ContainerRef};
use crate::snapshot::{MigInstance, Snapshot};

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

/// Appends `mig_profile`, `gpu_instance_id`, `compute_instance_id` and `mig_uuid` to a
/// GPU's label set.
pub fn push_mig_labels(labels: &mut LabelSet, instance: &MigInstance) {
    labels.push("mig_profile", instance.profile.as_str());
    labels.push("gpu_instance_id", instance.gpu_instance_id.to_string());
    labels.push("compute_instance_id", instance.compute_instance_id.to_string());
    labels.push("mig_uuid", instance.uuid.as_str());
}

/// Appends the owner labels of the device `uuid` (a GPU or MIG UUID) if one container
/// holds it alone. MIG instance label sets call this with the MIG UUID.
pub fn push_owner_labels(labels: &mut LabelSet, snapshot: &Snapshot, uuid: &str) {
    if let Some(result) = &snapshot.attribution {
        push_owner(labels, result, uuid);
    }
}

/// The owner labels of `uuid` from one result, `claim` last where DRA allocated it.
pub fn push_owner(labels: &mut LabelSet, result: &AttributionResult, uuid: &str) -> bool {
    let Some(owner) = result.owners.get(uuid) else { return false };
    push_container(labels, owner, result.owner_claims.get(uuid).map(String::as_str));
    true
}

pub fn push_container(labels: &mut LabelSet, owner: &ContainerRef, claim: Option<&str>) {
    labels.push("namespace", owner.namespace.as_str());
    labels.push("pod", owner.pod.as_str());
    labels.push("container", owner.container.as_str());
    if let Some(claim) = claim {
        labels.push("claim", claim);
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
