//! What the loop owns on its Node, and the Node as the loop reads it.
//!
//! The loop keeps one JSON annotation, `<domain>/gpu-health` (in dry-run
//! `<domain>/gpu-health-dry-run`), holding its [`Claim`]: why the node is unhealthy
//! and since when, the latched reasons, what the loop applied (cordon, taint), what
//! was already there when it started (someone else's cordon), and what someone else
//! lifted since. After a restart the loop reads the claim back, so it neither lifts a
//! quarantine early nor applies one twice, and it never takes credit for a cordon it
//! did not make.
//!
//! A GPU held on its own (a device taint, see [`crate::device_rules`]) is recorded in the
//! claim too ([`GpuClaim`]: since when, its DRA devices, the DeviceTaintRules the loop
//! created for it), so that a restart keeps each GPU's own minimum quarantine and tells
//! a rule an admin deleted (named in the claim, gone from the API) from one it never
//! made. The node's claim is in state `gpus-quarantined` then: nothing is applied to the
//! Node itself, so the breaker's count of quarantined nodes leaves it out.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Taint};
use serde::{Deserialize, Serialize};

use crate::names::Names;
use crate::observation::DraDevice;
use crate::policy::{Restored, RestoredGpu};
use crate::verdict::{Latch, Reason};

/// Why a claim could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NodeStateError {
    #[error("annotation {key}: {source}")]
    Claim {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = NodeStateError> = std::result::Result<T, E>;

/// What the loop applied to the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The loop set `spec.unschedulable`.
    #[serde(default)]
    pub cordon: bool,
    /// The loop added its taint, with this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<String>,
}

impl Applied {
    pub fn anything(&self) -> bool {
        self.cordon || self.taint.is_some()
    }
}

/// What was on the node before the loop changed anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Found {
    /// Someone else had cordoned the node: the loop does not own that cordon.
    #[serde(default)]
    pub unschedulable: bool,
}

/// What someone else undid; the loop does not apply it again in this quarantine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overridden {
    #[serde(default)]
    pub cordon: bool,
    #[serde(default)]
    pub taint: bool,
}

/// What the claim says of the node. The wire names are those every earlier version
/// wrote (`quarantined`, `unhealthy`, `dry-run`), so their claims still parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuarantineState {
    /// The loop applied a cordon or a taint.
    Quarantined,
    /// Only GPUs are held, by device taints; nothing applied to the Node.
    GpusQuarantined,
    /// Unhealthy, nothing applied: auto-cordon off, or the breaker is open.
    Unhealthy,
    /// Dry-run: what the loop would have done.
    DryRun,
}

impl QuarantineState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quarantined => "quarantined",
            Self::GpusQuarantined => "gpus-quarantined",
            Self::Unhealthy => "unhealthy",
            Self::DryRun => "dry-run",
        }
    }
}

impl std::fmt::Display for QuarantineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Only the state of a claim, for the breaker's count of quarantined nodes: the rest
/// of a claim another version wrote need not parse for it to count.
pub fn claim_state(text: &str) -> Option<QuarantineState> {
    #[derive(Deserialize)]
    struct StateOnly {
        state: QuarantineState,
    }
    serde_json::from_str::<StateOnly>(text).ok().map(|s| s.state)
}

/// The GPUs a claim holds by DeviceTaintRules the loop created (by UUID), for the
/// breaker's count of quarantined GPUs; like [`claim_state`], nothing else of the claim
/// need parse.
pub fn claim_held_gpus(text: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct GpusOnly {
        #[serde(default)]
        gpus: Vec<GpuOnly>,
    }
    #[derive(Deserialize)]
    struct GpuOnly {
        uuid: String,
        #[serde(default)]
        rules: Vec<String>,
    }
    serde_json::from_str::<GpusOnly>(text)
        .map(|c| c.gpus.into_iter().filter(|g| !g.rules.is_empty()).map(|g| g.uuid).collect())
        .unwrap_or_default()
}

/// One GPU held on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuClaim {
    pub index: u32,
    pub uuid: String,
    /// When the policy held it.
    #[serde(with = "crate::time::rfc3339")]
    pub since: SystemTime,
    /// Its DRA devices when held: what its rules select.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DraDevice>,
    /// The DeviceTaintRules the loop created for it, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// Someone else deleted one of its rules: the loop does not taint it again in this
    /// quarantine.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overridden: bool,
    /// The breaker refused its place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocked: bool,
}

/// The loop's record on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    pub state: QuarantineState,
    #[serde(with = "crate::time::rfc3339")]
    pub since: SystemTime,
    pub reasons: Vec<Reason>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latches: Vec<Latch>,
    #[serde(default)]
    pub applied: Applied,
    #[serde(default)]
    pub found: Found,
    #[serde(default)]
    pub overridden: Overridden,
    /// The circuit breaker refused the quarantine.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocked: bool,
    /// Dry-run: what the loop would have done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intended: Vec<String>,
    /// The node's boot id when the claim was made; another one means it rebooted.
    #[serde(default)]
    pub boot_id: String,
    /// The GPUs held, each on its own, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuClaim>,
    /// Why the whole node is held rather than only its GPUs (the condition says it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_scope: Option<String>,
}

impl Claim {
    /// A claim in `state` since `since` on a node booted as `boot_id`, with nothing
    /// recorded yet: no reason, nothing applied, found or overridden, no GPU held.
    pub fn new(state: QuarantineState, since: SystemTime, boot_id: &str) -> Claim {
        Claim {
            state,
            since,
            reasons: Vec::new(),
            latches: Vec::new(),
            applied: Applied::default(),
            found: Found::default(),
            overridden: Overridden::default(),
            blocked: false,
            intended: Vec::new(),
            boot_id: boot_id.to_string(),
            gpus: Vec::new(),
            node_scope: None,
        }
    }

    pub fn parse(key: &str, text: &str) -> Result<Claim> {
        serde_json::from_str(text).map_err(|source| NodeStateError::Claim { key: key.to_string(), source })
    }

    pub fn to_json(&self) -> String {
        // A struct of strings, bools and lists cannot fail to serialise.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The policy state to take back from this claim on a node with `boot_id` now. A
    /// claim that names no GPU held on its own and no scope was written before GPUs
    /// could be (or while only the node could be) held: the node was held as a whole.
    pub fn restored(&self, boot_id: &str) -> Restored {
        let node_scope = self.node_scope.clone().or_else(|| {
            (self.gpus.is_empty() && !self.reasons.is_empty() && self.state != QuarantineState::GpusQuarantined)
                .then(|| "the node was held as a whole when its claim was written".to_string())
        });
        Restored {
            since: self.since,
            reasons: self.reasons.clone(),
            latches: self.latches.clone(),
            rebooted: !self.boot_id.is_empty() && !boot_id.is_empty() && self.boot_id != boot_id,
            gpus: self
                .gpus
                .iter()
                .map(|g| RestoredGpu { index: g.index, since: g.since, devices: g.devices.clone() })
                .collect(),
            node_scope,
        }
    }

    /// The GPU `uuid`'s entry.
    pub fn gpu(&self, uuid: &str) -> Option<&GpuClaim> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }
}

/// The loop's own Node condition as found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConditionView {
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Option<String>,
}

/// The parts of the Node the loop reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub unschedulable: bool,
    /// All taints, the loop's and everyone else's: a rewrite sends the whole list.
    pub taints: Vec<Taint>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub condition: Option<ConditionView>,
    pub boot_id: String,
    /// Field managers that own `spec.unschedulable`, per `metadata.managedFields`.
    pub unschedulable_managers: Vec<String>,
}

impl NodeView {
    pub fn from_node(node: &Node, names: &Names) -> NodeView {
        let meta = &node.metadata;
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let condition = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == names.condition_type))
            .map(|c| ConditionView {
                status: c.status.clone(),
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
                last_transition_time: c.last_transition_time.as_ref().map(|t| t.0.to_string()),
            });
        let mut unschedulable_managers: Vec<String> = meta
            .managed_fields
            .iter()
            .flatten()
            .filter(|entry| {
                entry.subresource.as_deref().unwrap_or("").is_empty()
                    && entry
                        .fields_v1
                        .as_ref()
                        .and_then(|f| f.0.get("f:spec"))
                        .and_then(|spec| spec.get("f:unschedulable"))
                        .is_some()
            })
            .filter_map(|entry| entry.manager.clone())
            .collect();
        unschedulable_managers.sort();
        unschedulable_managers.dedup();
        NodeView {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            taints: spec.taints.unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            condition,
            boot_id: status.and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone()).unwrap_or_default(),
            unschedulable_managers,
        }
    }

    /// The loop's taint, if present.
    pub fn taint(&self, key: &str) -> Option<&Taint> {
        self.taints.iter().find(|t| t.key == key)
    }

    /// Whether `spec.unschedulable` is still the loop's: nobody else has written it
    /// since (per managed fields; a server that keeps none is taken at its word).
    pub fn cordon_is_ours(&self, field_manager: &str) -> bool {
        self.unschedulable
            && (self.unschedulable_managers.is_empty()
                || self.unschedulable_managers.iter().all(|m| m == field_manager))
    }

    /// The claim under `key`; an unreadable one is reported and ignored.
    pub fn claim(&self, key: &str) -> Option<Result<Claim>> {
        self.annotations.get(key).map(|text| Claim::parse(key, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::Needs;
    use std::time::{Duration, UNIX_EPOCH};

    fn names() -> Names {
        Names::new("gpu-telemetry.io")
    }

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn quarantine_states_keep_their_wire_names() {
        for (state, name) in [
            (QuarantineState::Quarantined, "quarantined"),
            (QuarantineState::GpusQuarantined, "gpus-quarantined"),
            (QuarantineState::Unhealthy, "unhealthy"),
            (QuarantineState::DryRun, "dry-run"),
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), name);
            // A claim as earlier versions wrote it.
            let text = format!(r#"{{"state":"{name}","since":"2024-05-01T12:00:00Z","reasons":[]}}"#);
            assert_eq!(Claim::parse("k", &text).unwrap().state, state);
            assert_eq!(claim_state(&text), Some(state));
        }
        assert!(Claim::parse("k", r#"{"state":"frozen","since":"2024-05-01T12:00:00Z","reasons":[]}"#).is_err());
        assert_eq!(claim_state(r#"{"state":"quarantined"}"#), Some(QuarantineState::Quarantined), "state alone counts");
    }

    #[test]
    fn a_node_is_read_with_the_fields_the_loop_needs() {
        let n = node(serde_json::json!({
            "metadata": {
                "name": "gpu-1", "uid": "u-1", "resourceVersion": "42",
                "labels": {"gpu-telemetry.io/gpu-health-opt-out": "true"},
                "managedFields": [
                    {"manager": "kubectl-cordon", "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:unschedulable": {}}}},
                    {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}}
                ]
            },
            "spec": {"unschedulable": true, "taints": [{"key": "a", "effect": "NoSchedule", "value": "b"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "GPUHealthy", "status": "False", "reason": "Xid79", "message": "m",
                     "lastTransitionTime": "2024-05-01T12:00:00Z"}
                ],
                "nodeInfo": {"architecture": "amd64", "bootID": "boot-1", "containerRuntimeVersion": "",
                  "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "",
                  "operatingSystem": "linux", "osImage": "", "systemUUID": ""}
            }
        }));
        let v = NodeView::from_node(&n, &names());
        assert_eq!(v.resource_version, "42");
        assert!(v.unschedulable);
        assert_eq!(v.boot_id, "boot-1");
        assert_eq!(v.unschedulable_managers, vec!["kubectl-cordon".to_string()]);
        assert!(!v.cordon_is_ours("gpu-exporter-health"));
        assert_eq!(v.condition.as_ref().unwrap().reason, "Xid79");
        assert_eq!(v.condition.clone().unwrap().last_transition_time.as_deref(), Some("2024-05-01T12:00:00Z"));
        assert!(v.taint("a").is_some());
        assert_eq!(v.labels["gpu-telemetry.io/gpu-health-opt-out"], "true");
    }

    #[test]
    fn a_claim_round_trips_and_a_reboot_is_seen() {
        let reason = Reason {
            gpu: Some(0),
            uuid: "GPU-a".into(),
            code: "Xid79".into(),
            detail: "d".into(),
            needs: Needs::Reset,
            first_seen: None,
        };
        let claim = Claim {
            reasons: vec![reason],
            applied: Applied { cordon: true, taint: Some("Xid79".into()) },
            ..Claim::new(QuarantineState::Quarantined, UNIX_EPOCH + Duration::from_secs(1_714_564_800), "boot-1")
        };
        let text = claim.to_json();
        assert!(text.contains("\"since\":\"2024-05-01T12:00:00Z\""), "{text}");
        assert!(text.contains("\"applied\":{\"cordon\":true,\"taint\":\"Xid79\"}"), "{text}");
        assert_eq!(Claim::parse("k", &text).unwrap(), claim);
        assert!(!claim.restored("boot-1").rebooted);
        assert!(claim.restored("boot-2").rebooted);
        let err = Claim::parse("gpu-telemetry.io/gpu-health", "{nope").unwrap_err();
        assert!(err.to_string().starts_with("annotation gpu-telemetry.io/gpu-health:"), "{err}");
    }

    #[test]
    fn without_managed_fields_the_claim_is_trusted() {
        let v = NodeView { unschedulable: true, ..NodeView::default() };
        assert!(v.cordon_is_ours("gpu-exporter-health"));
        let shared = NodeView {
            unschedulable: true,
            unschedulable_managers: vec!["gpu-exporter-health".into(), "admin".into()],
            ..NodeView::default()
        };
        assert!(!shared.cordon_is_ours("gpu-exporter-health"), "an admin's apply shares the field");
    }

    #[test]
    fn a_claim_holding_gpus_round_trips_and_names_its_gpus_for_the_breaker() {
        let since = UNIX_EPOCH + Duration::from_secs(1_714_564_800);
        let gpu = GpuClaim {
            index: 3,
            uuid: "GPU-3".into(),
            since,
            devices: vec![DraDevice { driver: "gpu.nvidia.com".into(), pool: "gpu-1".into(), device: "gpu-3".into() }],
            rules: vec!["gpu-health.gpu-1.gpu-3-0a1b2c3d".into()],
            overridden: false,
            blocked: false,
        };
        let claim = Claim {
            gpus: vec![gpu.clone(), GpuClaim { index: 5, uuid: "GPU-5".into(), rules: vec![], ..gpu }],
            ..Claim::new(QuarantineState::GpusQuarantined, since, "boot-1")
        };
        let text = claim.to_json();
        assert!(text.contains("\"state\":\"gpus-quarantined\""), "{text}");
        assert_eq!(Claim::parse("k", &text).unwrap(), claim);
        assert_eq!(claim_held_gpus(&text), vec!["GPU-3".to_string()], "a GPU without a rule holds no place");
        assert_eq!(claim_state(&text), Some(QuarantineState::GpusQuarantined));
        let restored = claim.restored("boot-1");
        assert_eq!(restored.gpus[0], RestoredGpu { index: 3, since, devices: claim.gpus[0].devices.clone() });
        assert_eq!(restored.node_scope, None);
        assert!(claim_held_gpus("{not json").is_empty());
    }

    #[test]
    fn a_claim_of_an_earlier_version_restores_a_node_quarantine() {
        let text = r#"{"state":"quarantined","since":"2024-05-01T12:00:00Z","reasons":[{"gpu":0,"code":"Xid79","detail":"d","needs":"reset"}],"applied":{"cordon":true,"taint":"Xid79"}}"#;
        let claim = Claim::parse("k", text).unwrap();
        assert!(claim.gpus.is_empty());
        assert!(claim.restored("b").node_scope.is_some(), "held as a whole, as it was");
    }
}
