//! The health loop's load on the API server: requests per node per check, counted by
//! the in-test API server, for a healthy node, a quarantined node and a node the
//! circuit breaker holds back, with 1,000 GPU nodes in the cluster. Prints the figures
//! `docs/health.md` quotes:
//!
//! ```sh
//! cargo test -p gpu-health-kube --test load -- --nocapture
//! ```
//!
//! Recorded counts are asserted; times are not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use gpu_health::node_state::{Applied, Claim, QuarantineState};
use gpu_health::policy::{Health, Needs, Reason};
use serde_json::{Value, json};
use support::{Loop, NS, node_snapshot, settings, snapshot, xid79};
use test_support::apiserver::{ApiServer, Recorded, Running};
use test_support::cluster::registered_node;

/// GPU nodes in the cluster.
const FLEET: usize = 1000;
/// Checks each figure is taken over.
const CHECKS: u64 = 30;

fn name(i: usize) -> String {
    format!("gpu-{i:04}")
}

/// A claim as a quarantined node carries it.
fn quarantined_claim(node: &str) -> String {
    let reason = Reason {
        gpu: Some(0),
        uuid: format!("GPU-{node}"),
        code: "Xid79".into(),
        detail: "XID 79: GPU has fallen off the bus: it answers nothing until it is reset".into(),
        needs: Needs::Reset,
        first_seen: None,
    };
    Claim {
        reasons: vec![reason],
        applied: Applied { cordon: true, taint: Some("Xid79".into()) },
        ..Claim::new(
            QuarantineState::Quarantined,
            SystemTime::now() - Duration::from_secs(3600),
            &format!("boot-{node}"),
        )
    }
    .to_json()
}

/// `FLEET` GPU nodes; the last `quarantined` of them quarantined by the loop and
/// holding their places in the breaker.
fn cluster(quarantined: usize) -> Running {
    let api = ApiServer::open().run();
    let mut places = serde_json::Map::new();
    for i in 1..=FLEET {
        let mut node = registered_node(&name(i));
        if i > FLEET - quarantined {
            node["metadata"]["annotations"]["gpu-telemetry.io/gpu-health"] = json!(quarantined_claim(&name(i)));
            node["spec"]["unschedulable"] = json!(true);
            places.insert(name(i), json!("2024-05-01T12:00:00Z"));
        }
        api.add_node(node);
    }
    if quarantined > 0 {
        api.put_config_map(NS, "gpu-health-breaker", Value::Object(places));
    }
    api
}

#[derive(Debug, Default)]
struct Figures {
    checks: u64,
    by_kind: BTreeMap<&'static str, usize>,
    listed: usize,
    bytes: u64,
    /// Reads at `resourceVersion=0`, served from the API server's watch cache.
    cached: usize,
}

impl Figures {
    fn requests(&self) -> usize {
        self.by_kind.values().sum()
    }

    fn per_check(&self, n: usize) -> f64 {
        n as f64 / self.checks as f64
    }

    fn kind(&self, k: &str) -> usize {
        self.by_kind.get(k).copied().unwrap_or(0)
    }

    fn line(&self, what: &str) -> String {
        let kinds: Vec<String> = self.by_kind.iter().map(|(k, n)| format!("{k} {:.2}", self.per_check(*n))).collect();
        format!(
            "{what:<12} {:>6.2} requests/check ({}; {} of {} from the cache); {:>7.1} listed objects/check; {:>9.0} \
             response bytes/check",
            self.per_check(self.requests()),
            kinds.join(", "),
            self.cached,
            self.requests(),
            self.per_check(self.listed),
            self.bytes as f64 / self.checks as f64,
        )
    }
}

fn kind(r: &Recorded) -> &'static str {
    let parts: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
    match (r.method.as_str(), parts.as_slice()) {
        ("GET", ["api", "v1", "nodes"]) => "list nodes",
        ("GET", ["api", "v1", "nodes", _]) => "get node",
        ("GET", [.., "configmaps", _]) => "get configmap",
        ("GET", ["apis", "resource.k8s.io", _, "devicetaintrules"]) => "list rules",
        ("GET", _) => "other read",
        _ => "write",
    }
}

/// Counts the requests of `CHECKS` checks, from one check's start to another's.
fn measure(api: &Running, l: &Loop) -> Figures {
    l.wait_checks(1);
    let from = api.requests().len();
    let start = l.checks();
    l.wait_checks(CHECKS);
    let checks = l.checks() - start;
    let requests = api.requests()[from..].to_vec();
    let mut f = Figures { checks, ..Figures::default() };
    for r in &requests {
        *f.by_kind.entry(kind(r)).or_default() += 1;
        f.listed += r.listed;
        f.bytes += r.response_bytes;
        f.cached += usize::from(r.query.split('&').any(|p| p == "resourceVersion=0"));
    }
    f
}

#[test]
fn api_requests_per_node_per_check() {
    // Settled states only: the requests that made them are not counted.
    let api = cluster(0);
    let healthy = Loop::start(&name(1), settings(&[]), &api.url(), snapshot(1, |_| {}));
    healthy.wait("healthy", Duration::from_secs(10), |v| v.health == Health::Healthy && v.api == "connected");
    healthy.wait_checks(2);
    let h = measure(&api, &healthy);
    drop(healthy);

    let api = cluster(0);
    let quarantined = Loop::start(&name(1), settings(&[]), &api.url(), snapshot(1, xid79));
    quarantined.wait("quarantined", Duration::from_secs(10), |v| v.quarantined);
    quarantined.wait_checks(2);
    let q = measure(&api, &quarantined);
    drop(quarantined);

    // 100 of 1,000 quarantined: the breaker (10 %) is full.
    let api = cluster(FLEET / 10);
    let blocked = Loop::start(&name(1), settings(&[]), &api.url(), snapshot(1, xid79));
    blocked.wait("blocked", Duration::from_secs(10), |v| v.breaker.is_some_and(|b| b.open));
    blocked.wait_checks(2);
    let b = measure(&api, &blocked);
    assert!(!blocked.view().quarantined);
    assert_eq!(api.events_with_reason("GPUQuarantineBlocked").len(), 1);
    drop(blocked);

    // One GPU of eight held alone by a device taint.
    let api = cluster(0);
    api.serve_resource_api(&["v1"], &["v1"]);
    let eight = |g| {
        node_snapshot(&name(1), g, 8, true, |i, gpu| {
            if i == 3 {
                xid79(gpu)
            }
        })
    };
    let gpu = Loop::start(&name(1), settings(&[]), &api.url(), eight(1));
    gpu.wait("GPU 3 held", Duration::from_secs(10), |v| v.gpus.iter().any(|g| g.quarantined));
    gpu.wait_checks(2);
    let g = measure(&api, &gpu);
    assert!(!gpu.view().quarantined, "the node is not");
    drop(gpu);

    println!("API load of one node's health loop, {FLEET} GPU nodes, over {CHECKS} checks each:");
    println!("{}", h.line("healthy"));
    println!("{}", q.line("quarantined"));
    println!("{}", b.line("blocked"));
    println!("{}", g.line("GPU held"));

    for (what, f) in [("healthy", &h), ("quarantined", &q), ("blocked", &b), ("GPU held", &g)] {
        assert_eq!(f.kind("write"), 0, "{what}: a settled node writes nothing");
        assert_eq!(f.kind("other read"), 0, "{what}: {f:?}");
        assert_eq!(f.cached, f.requests(), "{what}: every read from the API server's cache: {f:?}");
    }
    // One read of its own node per check, nothing else.
    for (what, f) in [("healthy", &h), ("quarantined", &q)] {
        assert!(f.kind("get node") as u64 <= f.checks + 1, "{what}: {f:?}");
        assert_eq!(f.requests(), f.kind("get node"), "{what}: {f:?}");
    }
    // A GPU held alone: its node and its rules each check, both from the cache.
    assert!(g.kind("get node") as u64 <= g.checks + 1, "{g:?}");
    assert!(g.kind("list rules") as u64 <= g.checks + 1, "{g:?}");
    assert_eq!(g.requests(), g.kind("get node") + g.kind("list rules"), "{g:?}");
    assert!(g.listed as u64 <= g.checks + 1, "one rule listed per check: {g:?}");
    // Blocked: its node and the breaker's ConfigMap each check; the GPU nodes are
    // listed again only when the listing is older than its time to live, a random 50 to
    // 100 % of ten checks (breaker::FLEET_TTL_CHECKS), so at most every fifth check.
    assert!(b.kind("get node") as u64 <= b.checks + 1, "{b:?}");
    assert!(b.kind("get configmap") as u64 <= b.checks + 1, "{b:?}");
    assert!(b.kind("list nodes") as u64 <= b.checks / 5 + 1, "the fleet is not listed every check: {b:?}");
}
