//! The cluster-wide circuit breaker: no new quarantine while too many GPU nodes are
//! already quarantined by the health loop.
//!
//! The exporters coordinate through one ConfigMap (`--health.breaker.config-map` in
//! the exporter's namespace) whose `data` maps each quarantined node to when it took
//! its place. A node takes a place with a `PUT` that carries the `resourceVersion` it
//! read, so of two nodes deciding at the same moment one wins and the other gets 409,
//! reads again, and counts the winner: the limit holds however many decide at once.
//!
//! The count is checked against the cluster: entries of nodes that no longer exist or
//! no longer match the GPU node selector are dropped, and so are entries of nodes
//! that carry no claim of the loop once the entry is older than a grace period (a
//! node that took its place but crashed before cordoning). Leaving is always allowed.
//!
//! API load. Listing the GPU nodes is the expensive request (one object per GPU
//! node), and a node the breaker holds back asks again at every check; in a
//! fleet-wide false alarm that is most of the fleet. So the listing is kept:
//! - a **refusal** may be decided on a listing younger than
//!   [`FLEET_TTL_CHECKS`] check intervals (jittered, so that nodes blocked at the
//!   same moment do not all list again at the same moment). A stale listing can
//!   only count too many (nodes since deleted, a limit from a smaller fleet), which
//!   delays a quarantine by at most that age and never lets one through;
//! - a **place is only ever taken on a fresh listing**: when the kept listing says a
//!   place is free, the nodes are listed again before the `PUT`.
//!
//! The listing is metadata only, by label selector, at `resourceVersion=0` (served
//! from the API server's watch cache, not from etcd); the ConfigMap is first read
//! from that cache too: its `PUT` carries the `resourceVersion` read, so a read that
//! was behind costs a 409 and a fresh read, never a second place. A blocked node thus
//! costs a read of its Node and of the ConfigMap per check, both from the cache,
//! plus one listing per 5 to 10 checks.
//!
//! GPUs held by device taints take places of their own, one per GPU, in a second
//! ConfigMap (`<config-map>-gpus`, [`BreakerSettings::gpu_config_map`]), by the same
//! `PUT` with the `resourceVersion` read, against their own limit (a share of the
//! fleet's GPUs, from the same listing: each node's GPU count label and the GPUs its
//! claim holds). A node that holds GPU places and a node place at once (it widened
//! from GPUs to the whole node) counts in both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, GetParams, ListParams, ObjectMeta, PostParams};

use crate::actions::OnRetry;
use crate::retry::{Backoff, Failure, classify, retry};
use gpu_health::breaker::{Decision, FleetNode, decide, decide_gpus, gpu_key};
use gpu_health::names::{BreakerSettings, Names};
use gpu_health::node_state::{QuarantineState, claim_held_gpus, claim_state};

/// Why the breaker could not answer.
#[derive(Debug, thiserror::Error)]
pub enum BreakerError {
    #[error("circuit breaker {op}: {source}")]
    Api {
        op: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error(
        "circuit breaker: ConfigMap {0} changed under us {1} times (409 Conflict on each update); giving up this check"
    )]
    Contended(String, u32),
}

pub type Result<T, E = BreakerError> = std::result::Result<T, E>;

/// Check intervals a listing of the GPU nodes may serve a refusal (see the module docs).
pub const FLEET_TTL_CHECKS: u32 = 10;

/// A listing of the GPU nodes, kept to decide refusals.
#[derive(Debug, Clone)]
struct Listing {
    fleet: Vec<FleetNode>,
    /// When it may no longer be used.
    expires: Instant,
}

/// The breaker as seen from one node.
#[derive(Clone)]
pub struct Breaker {
    maps: Api<ConfigMap>,
    nodes: Api<Node>,
    settings: BreakerSettings,
    names: Names,
    node: String,
    grace: Duration,
    backoff: Backoff,
    on_failure: OnRetry,
    fleet_ttl: Duration,
    listing: Arc<Mutex<Option<Listing>>>,
}

impl std::fmt::Debug for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker").field("config_map", &self.settings.config_map).finish_non_exhaustive()
    }
}

const ROUNDS: u32 = 8;

impl Breaker {
    /// `fleet_ttl`: how long a listing of the GPU nodes may decide a refusal (at
    /// most; each listing is kept for a random 50 to 100 % of it).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        namespace: &str,
        settings: BreakerSettings,
        names: Names,
        node: &str,
        backoff: Backoff,
        on_failure: OnRetry,
        fleet_ttl: Duration,
    ) -> Self {
        let grace = settings.grace;
        Breaker {
            maps: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client),
            settings,
            names,
            node: node.to_string(),
            grace,
            backoff,
            on_failure,
            fleet_ttl,
            listing: Arc::new(Mutex::new(None)),
        }
    }

    /// The kept listing, while it may still decide a refusal.
    fn kept_fleet(&self) -> Option<Vec<FleetNode>> {
        let kept = self.listing.lock().unwrap_or_else(PoisonError::into_inner);
        kept.as_ref().filter(|l| Instant::now() < l.expires).map(|l| l.fleet.clone())
    }

    fn count(&self, op: &'static str) -> impl FnMut(&kube::Error, u32) + '_ {
        move |e, _| (self.on_failure)(op, e)
    }

    fn api(op: &'static str) -> impl Fn(kube::Error) -> BreakerError {
        move |source| BreakerError::Api { op, source }
    }

    /// The ConfigMap, created empty if missing: the latest version when `fresh`, else
    /// from the API server's cache (`resourceVersion=0`; a `PUT` based on a read that
    /// is behind answers 409, and the next round reads fresh).
    async fn read(&self, name: &str, fresh: bool) -> Result<ConfigMap> {
        let mut fresh = fresh;
        for _ in 0..ROUNDS {
            let params = if fresh { GetParams::default() } else { GetParams::any() };
            let get = || async {
                match self.maps.get_with(name, &params).await {
                    Ok(map) => Ok(Some(map)),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
                    Err(e) => Err(e),
                }
            };
            let found = retry(&self.backoff, get, self.count("get_config_map")).await.map_err(Self::api("get"))?;
            if let Some(map) = found {
                return Ok(map);
            }
            let empty = ConfigMap {
                metadata: ObjectMeta { name: Some(name.to_string()), ..ObjectMeta::default() },
                data: Some(BTreeMap::new()),
                ..ConfigMap::default()
            };
            let params = PostParams::default();
            match retry(&self.backoff, || self.maps.create(&params, &empty), self.count("create_config_map")).await {
                Ok(map) => return Ok(map),
                // Made by another node meanwhile (a cached read may not show it yet).
                Err(e) if classify(&e) == Failure::Conflict => fresh = true,
                Err(e) => return Err(Self::api("create")(e)),
            }
        }
        Err(BreakerError::Contended(name.to_string(), ROUNDS))
    }

    /// Lists the GPU nodes (metadata only, from the API server's cache) and keeps the listing.
    async fn fleet(&self) -> Result<Vec<FleetNode>> {
        let params = ListParams::default().labels(&self.settings.node_selector).match_any();
        let list = retry(&self.backoff, || self.nodes.list_metadata(&params), self.count("list_nodes"))
            .await
            .map_err(Self::api("list_nodes"))?;
        let fleet: Vec<FleetNode> = list
            .items
            .into_iter()
            .map(|n| {
                let claim = n.metadata.annotations.as_ref().and_then(|a| a.get(&self.names.state_annotation));
                let quarantined =
                    claim.and_then(|text| claim_state(text)).is_some_and(|state| state == QuarantineState::Quarantined);
                let gpus = n
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(&self.settings.gpu_count_label))
                    .and_then(|v| v.trim().parse().ok());
                FleetNode {
                    name: n.metadata.name.unwrap_or_default(),
                    quarantined,
                    gpus,
                    held_gpus: claim.map(|text| claim_held_gpus(text)).unwrap_or_default(),
                }
            })
            .collect();
        let expires = Instant::now() + self.fleet_ttl.mul_f64(0.5 + 0.5 * fastrand::f64());
        *self.listing.lock().unwrap_or_else(PoisonError::into_inner) = Some(Listing { fleet: fleet.clone(), expires });
        Ok(fleet)
    }

    async fn write(&self, name: &str, mut map: ConfigMap, data: BTreeMap<String, String>) -> Result<bool> {
        map.data = Some(data);
        let params = PostParams::default();
        match retry(&self.backoff, || self.maps.replace(name, &params, &map), self.count("replace_config_map")).await {
            Ok(_) => Ok(true),
            Err(e) if classify(&e) == Failure::Conflict => Ok(false),
            Err(e) => Err(Self::api("replace")(e)),
        }
    }

    /// Asks for a place for this node. Granted when it holds one already. A refusal
    /// may come from the kept listing of the GPU nodes; a new place is only taken on a
    /// fresh one.
    pub async fn acquire(&self, now: SystemTime) -> Result<Decision> {
        for round in 0..ROUNDS {
            let map = self.read(&self.settings.config_map, round > 0).await?;
            let entries = map.data.clone().unwrap_or_default();
            if let Some(kept) = self.kept_fleet() {
                let decision = decide(&entries, &kept, &self.node, now, self.grace, &self.settings);
                if decision.holds || !decision.granted {
                    return Ok(decision);
                }
            }
            let fleet = self.fleet().await?;
            let mut decision = decide(&entries, &fleet, &self.node, now, self.grace, &self.settings);
            if decision.holds || !decision.granted {
                return Ok(decision);
            }
            let mut data = decision.entries.clone();
            data.insert(self.node.clone(), gpu_health::time::format(now));
            if self.write(&self.settings.config_map, map, data.clone()).await? {
                decision.entries = data;
                decision.holds = true;
                decision.quarantined += 1;
                return Ok(decision);
            }
            tracing::debug!(config_map = %self.settings.config_map, "another node changed the breaker first; reading again");
        }
        Err(BreakerError::Contended(self.settings.config_map.clone(), ROUNDS))
    }

    /// Gives this node's place back.
    pub async fn release(&self) -> Result<()> {
        let name = self.settings.config_map.clone();
        self.release_where(&name, |key| key == self.node).await
    }

    /// Gives back this node's entries in `name` that `drop` picks.
    async fn release_where(&self, name: &str, drop: impl Fn(&str) -> bool) -> Result<()> {
        for _ in 0..ROUNDS {
            let found = retry(&self.backoff, || self.maps.get_opt(name), self.count("get_config_map"))
                .await
                .map_err(Self::api("get"))?;
            let Some(map) = found else { return Ok(()) };
            let mut data = map.data.clone().unwrap_or_default();
            let before = data.len();
            data.retain(|key, _| !drop(key));
            if data.len() == before {
                return Ok(());
            }
            if self.write(name, map, data).await? {
                return Ok(());
            }
        }
        Err(BreakerError::Contended(name.to_string(), ROUNDS))
    }

    /// Asks for places for this node's GPUs `wanted` (UUIDs), all or none; `my_gpus`
    /// counts for a GPU node without the count label. Granted when it holds them all.
    /// As for nodes, a refusal may come from the kept listing, places only from a fresh one.
    pub async fn acquire_gpus(&self, wanted: &[String], my_gpus: u32, now: SystemTime) -> Result<Decision> {
        let name = self.settings.gpu_config_map();
        let decide_on = |entries: &BTreeMap<String, String>, fleet: &[FleetNode]| {
            decide_gpus(entries, fleet, &self.node, wanted, my_gpus, now, self.grace, &self.settings)
        };
        for round in 0..ROUNDS {
            let map = self.read(&name, round > 0).await?;
            let entries = map.data.clone().unwrap_or_default();
            if let Some(kept) = self.kept_fleet() {
                let decision = decide_on(&entries, &kept);
                if decision.holds || !decision.granted {
                    return Ok(decision);
                }
            }
            let fleet = self.fleet().await?;
            let mut decision = decide_on(&entries, &fleet);
            if decision.holds || !decision.granted {
                return Ok(decision);
            }
            let mut data = decision.entries.clone();
            for uuid in wanted {
                data.entry(gpu_key(&self.node, uuid)).or_insert_with(|| gpu_health::time::format(now));
            }
            if self.write(&name, map, data.clone()).await? {
                decision.quarantined = data.len();
                decision.entries = data;
                decision.holds = true;
                return Ok(decision);
            }
            tracing::debug!(config_map = %name, "another node changed the GPU breaker first; reading again");
        }
        Err(BreakerError::Contended(name, ROUNDS))
    }

    /// Gives back this node's GPU places except those of `keep` (UUIDs).
    pub async fn release_gpus(&self, keep: &[String]) -> Result<()> {
        let name = self.settings.gpu_config_map();
        let prefix = format!("{}_", self.node);
        self.release_where(&name, |key| key.strip_prefix(&prefix).is_some_and(|uuid| !keep.iter().any(|k| k == uuid)))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::apiserver::{ApiServer, Running};
    use test_support::cluster::registered_node;

    const NS: &str = "gpu-telemetry";
    const MAP: &str = "gpu-health-breaker";

    /// 20 GPU nodes: the breaker's default 10 % lets 2 be quarantined at once.
    fn cluster() -> Running {
        let api = ApiServer::open().run();
        for i in 1..=20 {
            api.add_node(registered_node(&format!("gpu-{i:02}")));
        }
        api
    }

    fn breaker(api: &Running, node: &str) -> Breaker {
        let mut config = kube::Config::new(api.url().parse().unwrap());
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
        let settings = crate::config::tests::settings(&[]);
        let backoff = Backoff { attempts: 2, base: Duration::from_millis(1), max: Duration::from_millis(2) };
        let ten_checks = Duration::from_secs(600);
        Breaker::new(client, NS, settings.breaker, settings.names, node, backoff, Arc::new(|_, _| {}), ten_checks)
    }

    fn listings(api: &Running) -> usize {
        api.requests().iter().filter(|r| r.method == "GET" && r.path == "/api/v1/nodes").count()
    }

    fn places(api: &Running, map: &str) -> Vec<String> {
        let data = api.config_map(NS, map).map(|m| m["data"].clone()).unwrap_or_default();
        data.as_object().map(|d| d.keys().cloned().collect()).unwrap_or_default()
    }

    #[tokio::test]
    async fn a_place_is_taken_on_a_fresh_listing_and_given_back() {
        let api = cluster();
        let b = breaker(&api, "gpu-01");
        let d = b.acquire(SystemTime::now()).await.unwrap();
        assert!(d.granted && d.holds, "{d:?}");
        assert_eq!((d.quarantined, d.limit, d.fleet), (1, 2, 20));
        assert_eq!(places(&api, MAP), ["gpu-01"]);
        let put = api.writes().into_iter().find(|w| w.method == "PUT").unwrap();
        assert!(put.json()["metadata"]["resourceVersion"].is_string(), "the PUT carries the version read");
        assert!(b.acquire(SystemTime::now()).await.unwrap().holds, "a node that holds a place is granted again");
        b.release().await.unwrap();
        assert!(places(&api, MAP).is_empty());
        let writes = api.writes().len();
        b.release().await.unwrap();
        assert_eq!(api.writes().len(), writes, "nothing to give back, nothing written");
    }

    #[tokio::test]
    async fn a_full_breaker_refuses_from_the_kept_listing_and_lists_again_before_a_place() {
        let api = cluster();
        let now = SystemTime::now();
        let stamp = serde_json::json!(gpu_health::time::format(now));
        api.put_config_map(NS, MAP, serde_json::json!({"gpu-02": stamp, "gpu-03": stamp}));
        let b = breaker(&api, "gpu-01");
        let d = b.acquire(now).await.unwrap();
        assert!(!d.granted && !d.holds, "{d:?}");
        assert_eq!((d.quarantined, d.limit), (2, 2));
        assert_eq!(listings(&api), 1);
        assert!(!b.acquire(now).await.unwrap().granted);
        assert_eq!(listings(&api), 1, "a refusal may come from the kept listing");

        api.put_config_map(NS, MAP, serde_json::json!({"gpu-02": stamp}));
        let d = b.acquire(now).await.unwrap();
        assert!(d.granted, "{d:?}");
        assert_eq!(listings(&api), 2, "a place is only taken on a fresh listing");
        assert_eq!(places(&api, MAP), ["gpu-01", "gpu-02"]);
    }

    #[tokio::test]
    async fn a_conflict_on_the_put_reads_the_latest_version_and_tries_again() {
        let api = cluster();
        api.put_config_map(NS, MAP, serde_json::json!({}));
        api.fail_next("PUT", &format!("/api/v1/namespaces/{NS}/configmaps/{MAP}"), 409, 1);
        let b = breaker(&api, "gpu-01");
        assert!(b.acquire(SystemTime::now()).await.unwrap().granted);
        let reads: Vec<String> = api
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with(MAP))
            .map(|r| r.query.clone())
            .collect();
        assert_eq!(reads.len(), 2, "{reads:?}");
        assert!(reads[0].contains("resourceVersion=0"), "first from the cache: {reads:?}");
        assert!(!reads[1].contains("resourceVersion=0"), "then the latest: {reads:?}");
        assert_eq!(places(&api, MAP), ["gpu-01"]);
    }

    #[tokio::test]
    async fn gpu_places_are_taken_together_and_given_back_but_those_kept() {
        let api = cluster();
        let b = breaker(&api, "gpu-01");
        let wanted = ["GPU-1".to_string(), "GPU-2".to_string()];
        let d = b.acquire_gpus(&wanted, 8, SystemTime::now()).await.unwrap();
        assert!(d.granted && d.holds, "{d:?}");
        let gpus = format!("{MAP}-gpus");
        assert_eq!(places(&api, &gpus), ["gpu-01_GPU-1", "gpu-01_GPU-2"]);
        assert!(places(&api, MAP).is_empty(), "GPU places are not node places");
        b.release_gpus(&["GPU-2".to_string()]).await.unwrap();
        assert_eq!(places(&api, &gpus), ["gpu-01_GPU-2"]);
    }
}
