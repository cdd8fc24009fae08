//! The circuit breaker's decision: may this node take a place among the quarantined
//! GPU nodes? Pure; the ConfigMap the exporters coordinate through, and the listing
//! of the fleet, live in the Kubernetes edge (`gpu-health-kube`'s `breaker`).
//!
//! A place counts while its node still exists and matches the GPU node selector, and
//! either carries the loop's claim or took the place less than a grace period ago (a
//! node that took its place but crashed before cordoning). A node that holds a place
//! keeps it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::names::BreakerSettings;
use crate::plan::Permit;

/// One GPU node as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetNode {
    pub name: String,
    /// It carries the loop's claim annotation in state `quarantined`.
    pub quarantined: bool,
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
    let counted: BTreeMap<String, String> = entries
        .iter()
        .filter(|(node, since)| {
            let Some(member) = fleet.iter().find(|f| &f.name == *node) else { return false };
            let young =
                crate::time::parse(since).and_then(|t| now.duration_since(t).ok()).is_none_or(|age| age < grace);
            member.quarantined || young || node.as_str() == me
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let limit = settings.limit(fleet.len());
    let holds = counted.contains_key(me);
    let quarantined = counted.len();
    let granted = holds || quarantined < limit;
    Decision { entries: counted, granted, holds, quarantined, limit, fleet: fleet.len() }
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
        }
    }

    fn fleet(n: usize, quarantined: &[usize]) -> Vec<FleetNode> {
        (1..=n).map(|i| FleetNode { name: format!("gpu-{i:02}"), quarantined: quarantined.contains(&i) }).collect()
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
}
