//! The circuit breaker's decision: may this node take a place among the quarantined
//! GPU nodes? Pure; the ConfigMap the exporters coordinate through, and the listing
//! of the fleet, live in the Kubernetes edge (`gpu-health-kube`'s `breaker`).
//!
//! A place counts while its node still exists and matches the GPU node selector, and
//! either carries the loop's claim or took the place less than a grace period ago (a
//! node that took its place but crashed before cordoning). A node that holds a place
//! keeps it.
//!
//! GPUs held by device taints are counted apart from nodes, each against its own limit
//! ([`decide_gpus`]): a place per GPU, keyed `<node>_<GPU UUID>` (`_` cannot appear in
//! a node name), in a ConfigMap of their own. The limit is a share of the fleet's
//! GPUs, counted from the GPU nodes' `nvidia.com/gpu.count` label (GPU feature
//! discovery's; a node without it counts as many GPUs as the asking node has).
//! A node asks for all the places its newly held GPUs need at once, and gets all or
//! none: a partial answer would leave the policy's choice half applied.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::names::BreakerSettings;
use crate::plan::Permit;
use crate::view::BreakerView;

/// One GPU node as listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetNode {
    pub name: String,
    /// It carries the loop's claim annotation in state `quarantined`.
    pub quarantined: bool,
    /// Its GPUs, per its GPU count label; `None` without one.
    pub gpus: Option<u32>,
    /// The GPUs (UUIDs) its claim holds by device taints.
    pub held_gpus: Vec<String>,
}

/// The key of a GPU's place: `<node>_<uuid>`.
pub fn gpu_key(node: &str, uuid: &str) -> String {
    format!("{node}_{uuid}")
}

/// The breaker's reading of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The entries that still count.
    pub entries: BTreeMap<String, String>,
    pub granted: bool,
    /// Already holds a place.
    pub holds: bool,
    pub quarantined: usize,
    pub limit: usize,
    pub fleet: usize,
}

impl Decision {
    /// What the metrics show of it.
    pub fn view(&self) -> BreakerView {
        BreakerView { open: !self.granted, quarantined: self.quarantined, limit: self.limit, fleet: self.fleet }
    }

    pub fn permit(&self) -> Permit {
        if self.granted {
            Permit::Granted
        } else {
            Permit::Denied { quarantined: self.quarantined, limit: self.limit, fleet: self.fleet }
        }
    }
}

/// Decides whether `me` may take a place. Pure.
pub fn decide(
    entries: &BTreeMap<String, String>,
    fleet: &[FleetNode],
    me: &str,
    now: SystemTime,
    grace: Duration,
    settings: &BreakerSettings,
) -> Decision {
    let counted = still_counting(entries, now, grace, |node, young| {
        fleet.iter().find(|f| f.name == node).is_some_and(|member| member.quarantined || young || node == me)
    });
    let limit = settings.limit(fleet.len());
    let holds = counted.contains_key(me);
    let quarantined = counted.len();
    let granted = holds || quarantined < limit;
    Decision { entries: counted, granted, holds, quarantined, limit, fleet: fleet.len() }
}

/// Decides whether `me` may take places for its GPUs `wanted` (UUIDs). Pure. Places of
/// GPUs a node's claim holds count; so do places younger than the grace period (taken,
/// not yet recorded), and this node's own. `my_gpus` stands in for a node without a
/// GPU count label.
#[allow(clippy::too_many_arguments)]
pub fn decide_gpus(
    entries: &BTreeMap<String, String>,
    fleet: &[FleetNode],
    me: &str,
    wanted: &[String],
    my_gpus: u32,
    now: SystemTime,
    grace: Duration,
    settings: &BreakerSettings,
) -> Decision {
    let counted = still_counting(entries, now, grace, |key, young| {
        let Some((node, uuid)) = key.split_once('_') else { return false };
        let Some(member) = fleet.iter().find(|f| f.name == node) else { return false };
        member.held_gpus.iter().any(|g| g == uuid) || young || node == me
    });
    let fleet_gpus: usize = fleet.iter().map(|f| f.gpus.unwrap_or(my_gpus) as usize).sum();
    let limit = settings.gpu_limit(fleet_gpus);
    let keys: Vec<String> = wanted.iter().map(|u| gpu_key(me, u)).collect();
    let holds = keys.iter().all(|k| counted.contains_key(k));
    let new = keys.iter().filter(|k| !counted.contains_key(*k)).count();
    let quarantined = counted.len();
    let granted = holds || quarantined + new <= limit;
    Decision { entries: counted, granted, holds, quarantined, limit, fleet: fleet_gpus }
}

/// The entries `counts(key, young)` keeps, where `young` says the place was taken less
/// than `grace` ago (or at a time that does not parse, which is not trusted to be old).
fn still_counting(
    entries: &BTreeMap<String, String>,
    now: SystemTime,
    grace: Duration,
    counts: impl Fn(&str, bool) -> bool,
) -> BTreeMap<String, String> {
    entries
        .iter()
        .filter(|(key, since)| {
            let young =
                crate::time::parse(since).and_then(|t| now.duration_since(t).ok()).is_none_or(|age| age < grace);
            counts(key, young)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn settings() -> BreakerSettings {
        BreakerSettings {
            max_fraction: 0.1,
            max_nodes: None,
            node_selector: "nvidia.com/gpu.present=true".into(),
            config_map: "gpu-health-breaker".into(),
            grace: GRACE,
            max_gpu_fraction: 0.1,
            max_gpus: None,
            gpu_count_label: "nvidia.com/gpu.count".into(),
        }
    }

    fn fleet(n: usize, quarantined: &[usize]) -> Vec<FleetNode> {
        (1..=n)
            .map(|i| FleetNode {
                name: format!("gpu-{i:02}"),
                quarantined: quarantined.contains(&i),
                gpus: Some(8),
                held_gpus: vec![],
            })
            .collect()
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_714_564_800)
    }

    fn entries(names: &[(&str, u64)]) -> BTreeMap<String, String> {
        names.iter().map(|(n, age)| (n.to_string(), crate::time::format(now() - Duration::from_secs(*age)))).collect()
    }

    const GRACE: Duration = Duration::from_secs(300);

    #[test]
    fn the_third_of_twenty_is_refused_at_ten_percent() {
        let e = entries(&[("gpu-01", 600), ("gpu-02", 600)]);
        let d = decide(&e, &fleet(20, &[1, 2]), "gpu-03", now(), GRACE, &settings());
        assert!(!d.granted);
        assert_eq!((d.quarantined, d.limit, d.fleet), (2, 2, 20));
        assert_eq!(d.permit(), Permit::Denied { quarantined: 2, limit: 2, fleet: 20 });
        let d = decide(&entries(&[("gpu-01", 600)]), &fleet(20, &[1]), "gpu-03", now(), GRACE, &settings());
        assert!(d.granted && !d.holds);
    }

    #[test]
    fn a_node_that_holds_a_place_keeps_it() {
        let e = entries(&[("gpu-01", 600), ("gpu-02", 600)]);
        let d = decide(&e, &fleet(20, &[1, 2]), "gpu-02", now(), GRACE, &settings());
        assert!(d.granted && d.holds);
    }

    #[test]
    fn stale_entries_do_not_count() {
        // gpu-01 holds a place but no longer carries a claim; gpu-99 left the cluster.
        let e = entries(&[("gpu-01", 600), ("gpu-99", 10), ("gpu-02", 10)]);
        let d = decide(&e, &fleet(20, &[]), "gpu-03", now(), GRACE, &settings());
        assert_eq!(d.entries.keys().collect::<Vec<_>>(), vec!["gpu-02"], "young reservation counts");
        assert!(d.granted);
    }

    #[test]
    fn gpus_are_counted_apart_from_nodes_against_their_own_limit() {
        // 5 nodes of 8 GPUs: 40 GPUs, 10 % is 4 places.
        let mut f = fleet(5, &[]);
        for (node, uuid) in [(0, "a"), (0, "b"), (1, "c")] {
            f[node].held_gpus.push(uuid.into());
        }
        let e = entries(&[("gpu-01_a", 600), ("gpu-01_b", 600), ("gpu-02_c", 600)]);
        let d = decide_gpus(&e, &f, "gpu-03", &["x".into()], 8, now(), GRACE, &settings());
        assert!(d.granted);
        assert_eq!((d.quarantined, d.limit, d.fleet), (3, 4, 40));
        let d = decide_gpus(&e, &f, "gpu-03", &["x".into(), "y".into()], 8, now(), GRACE, &settings());
        assert!(!d.granted, "all or none: two places do not fit");
        // Node places do not count against GPUs, nor the reverse.
        let nodes = entries(&[("gpu-04", 600)]);
        let mut with_node = fleet(5, &[4]);
        with_node[0].held_gpus = f[0].held_gpus.clone();
        assert!(decide(&nodes, &with_node, "gpu-05", now(), GRACE, &settings()).holds.eq(&false));
        assert_eq!(
            decide_gpus(&nodes, &with_node, "gpu-05", &["z".into()], 8, now(), GRACE, &settings()).quarantined,
            0
        );
    }

    #[test]
    fn gpu_places_that_no_claim_holds_expire_and_a_node_keeps_its_own() {
        let f = fleet(5, &[]);
        // gpu-01's place is old and its claim holds no GPU; gpu-09 is gone; gpu-02's is young.
        let e = entries(&[("gpu-01_a", 600), ("gpu-09_b", 10), ("gpu-02_c", 10), ("garbage", 10)]);
        let d = decide_gpus(&e, &f, "gpu-03", &["x".into()], 8, now(), GRACE, &settings());
        assert_eq!(d.entries.keys().collect::<Vec<_>>(), vec!["gpu-02_c"]);
        let mine = entries(&[("gpu-03_x", 600)]);
        let d = decide_gpus(&mine, &f, "gpu-03", &["x".into()], 8, now(), GRACE, &settings());
        assert!(d.granted && d.holds);
        // Without the count label a node counts as many GPUs as the asking one.
        let unlabelled: Vec<FleetNode> = f.iter().map(|n| FleetNode { gpus: None, ..n.clone() }).collect();
        assert_eq!(decide_gpus(&e, &unlabelled, "gpu-03", &[], 4, now(), GRACE, &settings()).fleet, 20);
    }
}
