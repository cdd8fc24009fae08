//! The DeviceTaintRules that hold one GPU away from the scheduler: their names, how the
//! loop recognises its own, and the rule it writes. Pure; the API calls are in
//! `gpu-health-kube`'s `device_rules`.
//!
//! Why a DeviceTaintRule, not a taint in the ResourceSlice: a ResourceSlice belongs to
//! the DRA driver's kubelet plugin, which rewrites its slices whenever it republishes
//! its devices; a taint written there by anyone else is overwritten (or fought over),
//! and writing slices needs the driver's own permissions. A DeviceTaintRule is an
//! object of its own that the scheduler and the eviction controller apply to every
//! matching device as if the driver had written the taint (KEP-5055), so the loop can
//! own it outright: create it, find it after a restart, and delete it on recovery,
//! without touching the driver's objects.
//!
//! - **One rule per DRA device** of a held GPU (the whole GPU and each of its MIG
//!   instances: a rule's selector names one device), named deterministically from the
//!   node and the device: `gpu-health.<node>.<device>-<hash>`, the hash (FNV-1a, 32
//!   bits) of driver, pool and device telling apart two drivers' devices of one name.
//!   A retried create of a rule that landed answers 409 AlreadyExists, never a second
//!   rule.
//! - **Ownership**: the label `app.kubernetes.io/managed-by=gpu-exporter-health`, the
//!   label `<domain>/gpu-health-node=<node>` (a hash when the node's name is no valid
//!   label value) to list a node's rules by selector, and the annotation
//!   `<domain>/gpu-health-node=<node>` with the full name. Only a rule with all three,
//!   and whose name is the one its device gives, is the loop's; any other rule (an
//!   admin's, on the same device or another) is never changed or deleted.
//! - The selector sets driver, pool and device, each exactly; the taint is
//!   `<domain>/gpu-unhealthy=<the GPU's primary reason>` with effect `NoSchedule`
//!   (`NoExecute`, which also evicts the pods using the device, by flag).
//! - The rule also carries the GPU (`<domain>/gpu-health-gpu: <index>/<uuid>`) and
//!   when it was held (`<domain>/gpu-health-since`), so that a rule whose node claim was
//!   never written (the exporter stopped between the two writes) is taken back on
//!   restart ([`restored_from_rules`]) instead of being lost or left behind.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::Names;
use crate::observation::DraDevice;
use crate::policy::{Restored, RestoredGpu};
use crate::signals::SignalKind;
use crate::verdict::{Latch, Needs, Reason};
use crate::xid::{XidClass, XidTable};

/// Why a listed rule is not taken as the loop's.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    /// Not labelled and annotated for this node: someone else's.
    #[error("DeviceTaintRule {0} is not the health loop's on this node")]
    NotOurs(String),
    /// Labelled as the loop's but not as the loop writes it.
    #[error("DeviceTaintRule {name} carries the health loop's labels but {why}; leaving it alone")]
    Malformed { name: String, why: String },
}

pub type Result<T, E = RuleError> = std::result::Result<T, E>;

/// `app.kubernetes.io/managed-by`.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The effect of the loop's device taints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Effect {
    /// No new claim gets the device; pods using it keep running.
    #[default]
    NoSchedule,
    /// Also evicts the pods using the device.
    NoExecute,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// FNV-1a, 64 bits: a stable hash with no dependency (names must not change between
/// versions or builds).
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Lower-case letters, digits and `-`, as a DNS label allows; anything else becomes `-`.
fn dns_part(text: &str, max: usize) -> String {
    let mut out: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(max).collect();
    while out.ends_with('-') {
        out.pop();
    }
    while out.starts_with('-') {
        out.remove(0);
    }
    if out.is_empty() { "x".into() } else { out }
}

/// The rule holding `device` of `node`: `gpu-health.<node>.<device>-<hash>`, at most 253
/// characters (a DNS subdomain), the same for every run and version.
pub fn rule_name(node: &str, device: &DraDevice) -> String {
    let hash = fnv1a(&[&device.driver, &device.pool, &device.device]) as u32;
    let node_part: String =
        node.split('.').map(|label| dns_part(label, 63)).collect::<Vec<_>>().join(".").chars().take(160).collect();
    let node_part = node_part.trim_end_matches(['.', '-']).to_string();
    format!("gpu-health.{node_part}.{}-{hash:08x}", dns_part(&device.device, 63 - 9))
}

/// The node's label value: its name when that is a valid label value, else `h-` and a
/// hash of it (the annotation keeps the full name).
pub fn node_label_value(node: &str) -> String {
    let valid = !node.is_empty()
        && node.len() <= 63
        && node.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && node.starts_with(|c: char| c.is_ascii_alphanumeric())
        && node.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid { node.to_string() } else { format!("h-{:016x}", fnv1a(&[node])) }
}

/// The label selector of the node's own rules.
pub fn owned_selector(names: &Names, node: &str) -> String {
    format!("{MANAGED_BY_LABEL}={},{}={}", names.managed_by, names.rule_node_key, node_label_value(node))
}

/// One of the loop's rules as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleView {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub device: DraDevice,
    /// The taint's value: the GPU's primary reason when written.
    pub value: String,
    pub effect: String,
    pub since: Option<SystemTime>,
}

/// Reads a listed rule: the loop's own for `node`, or why not.
pub fn read_rule(rule: &DeviceTaintRule, names: &Names, node: &str) -> Result<RuleView> {
    let meta = &rule.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let ours = labels.get(MANAGED_BY_LABEL) == Some(&names.managed_by)
        && labels.get(&names.rule_node_key) == Some(&node_label_value(node))
        && annotations.get(&names.rule_node_key).map(String::as_str) == Some(node);
    if !ours {
        return Err(RuleError::NotOurs(name));
    }
    let malformed = |why: &str| RuleError::Malformed { name: name.clone(), why: why.to_string() };
    let selector = rule.spec.device_selector.as_ref().ok_or_else(|| malformed("selects no device"))?;
    let (Some(driver), Some(pool), Some(device)) = (&selector.driver, &selector.pool, &selector.device) else {
        return Err(malformed("does not select one device by driver, pool and device"));
    };
    let device = DraDevice { driver: driver.clone(), pool: pool.clone(), device: device.clone() };
    if rule.spec.taint.key != names.taint_key {
        return Err(malformed(&format!("its taint key is {:?}", rule.spec.taint.key)));
    }
    if name != rule_name(node, &device) {
        return Err(malformed("its name is not the one its device gives"));
    }
    let gpu = annotations.get(&names.rule_gpu_key).ok_or_else(|| malformed("names no GPU"))?;
    let (index, uuid) = gpu
        .split_once('/')
        .and_then(|(i, u)| i.parse::<u32>().ok().map(|i| (i, u.to_string())))
        .ok_or_else(|| malformed(&format!("its GPU {gpu:?} is not <index>/<uuid>")))?;
    Ok(RuleView {
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        gpu_index: index,
        gpu_uuid: uuid,
        device,
        value: rule.spec.taint.value.clone().unwrap_or_default(),
        effect: rule.spec.taint.effect.clone(),
        since: annotations.get(&names.rule_since_key).and_then(|t| crate::time::parse(t)),
        name,
    })
}

/// What a rule holds: the GPU, the device, the taint's value and effect, since when.
#[derive(Debug, Clone, Copy)]
pub struct Hold<'a> {
    pub index: u32,
    pub uuid: &'a str,
    pub device: &'a DraDevice,
    pub value: &'a str,
    pub effect: Effect,
    pub since: SystemTime,
}

/// The rule the loop creates to hold `hold.device` of `node`.
pub fn desired_rule(names: &Names, node: &str, hold: Hold) -> DeviceTaintRule {
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), names.managed_by.clone()),
        (names.rule_node_key.clone(), node_label_value(node)),
    ]);
    let annotations = BTreeMap::from([
        (names.rule_node_key.clone(), node.to_string()),
        (names.rule_gpu_key.clone(), format!("{}/{}", hold.index, hold.uuid)),
        (names.rule_since_key.clone(), crate::time::format(hold.since)),
    ]);
    DeviceTaintRule {
        metadata: ObjectMeta {
            name: Some(rule_name(node, hold.device)),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                driver: Some(hold.device.driver.clone()),
                pool: Some(hold.device.pool.clone()),
                device: Some(hold.device.device.clone()),
            }),
            taint: DeviceTaint {
                key: names.taint_key.clone(),
                value: Some(hold.value.to_string()),
                effect: hold.effect.as_str().to_string(),
                time_added: None,
            },
        },
        status: None,
    }
}

/// The GPUs held by rules whose GPU the node's claim does not hold (`held`: the UUIDs
/// it does), as a state to restore: the reason is the taint's value (an XID of class
/// reset or reboot is latched again, without evidence baselines), held since the
/// rule says. `None` when every rule's GPU is known.
pub fn restored_from_rules(rules: &[RuleView], held: &[String], table: &XidTable) -> Option<Restored> {
    let mut gpus: BTreeMap<u32, (Reason, RestoredGpu)> = BTreeMap::new();
    for rule in rules.iter().filter(|r| !held.contains(&r.gpu_uuid)) {
        let since = rule.since.unwrap_or(SystemTime::UNIX_EPOCH);
        let needs = match SignalKind::from_code(&rule.value) {
            Some(SignalKind::Xid(code)) => match table.class(code) {
                XidClass::Reset => Needs::Reset,
                XidClass::Reboot => Needs::Reboot,
                XidClass::Event | XidClass::Quarantine => Needs::Nothing,
            },
            _ => Needs::Nothing,
        };
        let entry = gpus.entry(rule.gpu_index).or_insert_with(|| {
            let reason = Reason {
                gpu: Some(rule.gpu_index),
                uuid: rule.gpu_uuid.clone(),
                code: rule.value.clone(),
                detail: format!("taken back from DeviceTaintRule {}", rule.name),
                needs,
                first_seen: rule.since,
            };
            (reason, RestoredGpu { index: rule.gpu_index, since, devices: Vec::new() })
        });
        entry.1.since = entry.1.since.min(since);
        entry.1.devices.push(rule.device.clone());
    }
    let since = gpus.values().map(|(_, g)| g.since).min()?;
    let latches = gpus
        .values()
        .filter(|(r, _)| r.needs != Needs::Nothing)
        .map(|(r, g)| Latch { reason: r.clone(), since: g.since, ecc_baseline: None, driver: None, seen_gone: false })
        .collect();
    Some(Restored {
        since,
        reasons: gpus.values().map(|(r, _)| r.clone()).collect(),
        latches,
        rebooted: false,
        gpus: gpus.into_values().map(|(_, g)| g).collect(),
        node_scope: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn names() -> Names {
        Names::new("gpu-telemetry.io")
    }

    fn device(d: &str) -> DraDevice {
        DraDevice { driver: "gpu.nvidia.com".into(), pool: "gpu-1".into(), device: d.into() }
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_714_564_800)
    }

    fn hold(d: &DraDevice) -> Hold<'_> {
        Hold { index: 3, uuid: "GPU-3", device: d, value: "Xid79", effect: Effect::NoSchedule, since: now() }
    }

    #[test]
    fn names_are_stable_valid_and_tell_drivers_apart() {
        // Pinned: a rule made by one version must be found by the next (docs/health.md shows it).
        let documented = DraDevice { driver: "gpu.nvidia.com".into(), pool: "gpu-01".into(), device: "gpu-3".into() };
        assert_eq!(rule_name("gpu-01", &documented), "gpu-health.gpu-01.gpu-3-f418e425");
        let a = rule_name("gpu-1", &device("gpu-3"));
        assert!(a.starts_with("gpu-health.gpu-1.gpu-3-"), "{a}");
        assert_eq!(a, rule_name("gpu-1", &device("gpu-3")), "deterministic");
        let other = DraDevice { driver: "other.example.com".into(), ..device("gpu-3") };
        assert_ne!(a, rule_name("gpu-1", &other));
        let odd = rule_name("Node_With.Weird--.Name", &device("MIG 1g.10gb/0"));
        assert!(odd.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'), "{odd}");
        assert!(
            odd.split('.').all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-')),
            "{odd}"
        );
        let long = rule_name(&"n".repeat(253), &device(&"d".repeat(200)));
        assert!(long.len() <= 253, "{}", long.len());
        assert_eq!(node_label_value("gpu-1"), "gpu-1");
        let long_node = "a".repeat(64);
        assert!(node_label_value(&long_node).starts_with("h-"));
        assert_eq!(
            owned_selector(&names(), "gpu-1"),
            "app.kubernetes.io/managed-by=gpu-exporter-health,gpu-telemetry.io/gpu-health-node=gpu-1"
        );
    }

    #[test]
    fn the_desired_rule_reads_back_as_the_loops() {
        let d = device("gpu-3");
        let rule = desired_rule(&names(), "gpu-1", hold(&d));
        let json = serde_json::to_value(&rule).unwrap();
        assert_eq!(json["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(
            json["spec"]["deviceSelector"],
            serde_json::json!({"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-3"})
        );
        assert_eq!(
            json["spec"]["taint"],
            serde_json::json!({"key": "gpu-telemetry.io/gpu-unhealthy", "value": "Xid79", "effect": "NoSchedule"})
        );
        assert_eq!(json["metadata"]["annotations"]["gpu-telemetry.io/gpu-health-gpu"], "3/GPU-3");
        let view = read_rule(&rule, &names(), "gpu-1").unwrap();
        assert_eq!((view.gpu_index, view.gpu_uuid.as_str(), view.value.as_str()), (3, "GPU-3", "Xid79"));
        assert_eq!(view.device, d);
        assert_eq!(view.since, Some(now()));
        assert_eq!(read_rule(&rule, &names(), "gpu-2"), Err(RuleError::NotOurs(view.name.clone())), "another node's");
    }

    #[test]
    fn an_admins_rule_is_not_ours_and_a_damaged_one_is_named() {
        let d = device("gpu-3");
        let mut admin = desired_rule(&names(), "gpu-1", hold(&d));
        admin.metadata.labels = None;
        assert!(matches!(read_rule(&admin, &names(), "gpu-1"), Err(RuleError::NotOurs(_))));
        let mut broad = desired_rule(&names(), "gpu-1", hold(&d));
        broad.spec.device_selector =
            Some(DeviceTaintSelector { driver: Some("gpu.nvidia.com".into()), ..Default::default() });
        let err = read_rule(&broad, &names(), "gpu-1").unwrap_err();
        assert!(err.to_string().contains("does not select one device"), "{err}");
        let mut key = desired_rule(&names(), "gpu-1", hold(&d));
        key.spec.taint.key = "example.com/other".into();
        assert!(read_rule(&key, &names(), "gpu-1").unwrap_err().to_string().contains("taint key"));
        let mut renamed = desired_rule(&names(), "gpu-1", hold(&d));
        renamed.metadata.name = Some("gpu-health.gpu-1.something".into());
        assert!(read_rule(&renamed, &names(), "gpu-1").unwrap_err().to_string().contains("name"));
        let mut gpu = desired_rule(&names(), "gpu-1", hold(&d));
        gpu.metadata.annotations.as_mut().unwrap().insert("gpu-telemetry.io/gpu-health-gpu".into(), "three".into());
        assert!(read_rule(&gpu, &names(), "gpu-1").unwrap_err().to_string().contains("<index>/<uuid>"));
    }

    #[test]
    fn rules_without_a_claim_are_taken_back_with_their_latch() {
        let (a, b) = (device("gpu-3"), device("gpu-3-mig-0"));
        let views: Vec<RuleView> = [&a, &b]
            .iter()
            .map(|d| read_rule(&desired_rule(&names(), "gpu-1", hold(d)), &names(), "gpu-1").unwrap())
            .collect();
        let r = restored_from_rules(&views, &[], &XidTable::default()).unwrap();
        assert_eq!(r.reasons.len(), 1, "one GPU, two devices");
        assert_eq!((r.reasons[0].code.as_str(), r.reasons[0].needs), ("Xid79", Needs::Reset));
        assert_eq!(r.latches.len(), 1);
        assert_eq!(r.gpus[0].devices, vec![a, b]);
        assert_eq!(r.since, now());
        assert_eq!(restored_from_rules(&views, &["GPU-3".into()], &XidTable::default()), None, "known to the claim");
    }
}
