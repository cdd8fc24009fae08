//! The pod-resources refresh loop and its cache: `List` on its own schedule
//! (`--kubelet.refresh-interval`), never from a scrape or a collection cycle.
//!
//! The collector reads the cache each cycle. When a refresh fails, the last good list
//! is kept for up to [`GRACE_REFRESHES`] intervals, so a kubelet restart does not make
//! every owner label flap; past that the list is dropped, since pods may have come and
//! gone meanwhile. Ended pods are removed by the join from the pod directory in any
//! case, so keeping a list never revives a pod the API says is gone.
//!
//! State changes (down, up again) are logged once each, the first failure with its
//! reason; the error counter (by reason) and the last success time are metrics.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::pod_resources::{Allocation, PodResourcesClient, PodResourcesError};
use crate::snapshot::attribution::PodResourcesHealth;

/// Refresh intervals for which the last good list outlives failed refreshes.
pub const GRACE_REFRESHES: u32 = 3;

#[derive(Debug, Default)]
struct State {
    allocations: Arc<Vec<Allocation>>,
    fetched: Option<Instant>,
    health: PodResourcesHealth,
    /// The reason of the current failure streak; `None` while up.
    failing: Option<&'static str>,
    refreshes: u64,
}

/// Shared between the refresh task and the collector.
#[derive(Debug)]
pub struct KubeletCache {
    state: Mutex<State>,
    grace: Duration,
}

impl KubeletCache {
    pub fn new(interval: Duration) -> Self {
        KubeletCache { state: Mutex::new(State::default()), grace: interval * GRACE_REFRESHES }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The allocations to use now: the last good list, unless it is older than the grace.
    pub fn allocations(&self) -> Arc<Vec<Allocation>> {
        let state = self.lock();
        match state.fetched {
            Some(at) if at.elapsed() <= self.grace || state.health.up => state.allocations.clone(),
            _ => Arc::new(Vec::new()),
        }
    }

    pub fn health(&self) -> PodResourcesHealth {
        self.lock().health.clone()
    }

    /// Refreshes attempted so far.
    pub fn refreshes(&self) -> u64 {
        self.lock().refreshes
    }

    pub fn record_success(&self, allocations: Vec<Allocation>) {
        let mut state = self.lock();
        if state.failing.is_some() || !state.health.up {
            tracing::info!(allocations = allocations.len(), "kubelet pod-resources answers; devices are attributed");
        }
        state.failing = None;
        state.allocations = Arc::new(allocations);
        state.fetched = Some(Instant::now());
        state.health.up = true;
        state.health.last_success = Some(SystemTime::now());
        state.refreshes += 1;
    }

    pub fn record_failure(&self, error: &PodResourcesError) {
        let mut state = self.lock();
        let reason = error.reason();
        if state.failing.is_none() {
            tracing::warn!(
                reason,
                %error,
                "kubelet pod-resources unavailable; keeping the last list for {} refreshes, retrying",
                GRACE_REFRESHES
            );
        } else if state.failing != Some(reason) {
            tracing::debug!(reason, %error, "kubelet pod-resources still unavailable, for another reason");
        }
        state.failing = Some(reason);
        state.health.up = false;
        *state.health.errors.entry(reason).or_default() += 1;
        state.refreshes += 1;
    }
}

/// One refresh.
pub async fn refresh(client: &mut PodResourcesClient, cache: &KubeletCache) {
    match client.list().await {
        Ok(allocations) => cache.record_success(allocations),
        Err(error) => cache.record_failure(&error),
    }
}

/// Refreshes every `interval`, the first one an interval from now (the caller does the
/// first itself, before the first collection cycle); the task is dropped with the
/// runtime at shutdown.
pub async fn run(mut client: PodResourcesClient, cache: Arc<KubeletCache>, interval: Duration) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        refresh(&mut client, &cache).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn allocation() -> Allocation {
        Allocation::plugin("ns", "p", "c", "nvidia.com/gpu", "GPU-0")
    }

    #[test]
    fn the_last_list_outlives_failures_for_the_grace_only() {
        let cache = KubeletCache::new(Duration::from_millis(20));
        cache.record_success(vec![allocation()]);
        assert!(cache.health().up);
        cache.record_failure(&PodResourcesError::SocketMissing(PathBuf::from("/x")));
        cache.record_failure(&PodResourcesError::SocketMissing(PathBuf::from("/x")));
        let health = cache.health();
        assert!(!health.up);
        assert_eq!(health.errors["socket_missing"], 2);
        assert!(health.last_success.is_some());
        assert_eq!(cache.allocations().len(), 1, "within the grace the list is kept");
        std::thread::sleep(Duration::from_millis(80));
        assert!(cache.allocations().is_empty(), "past the grace it is dropped");
        cache.record_success(vec![allocation(), allocation()]);
        assert_eq!(cache.allocations().len(), 2);
        assert_eq!(cache.refreshes(), 4);
    }

    #[test]
    fn nothing_before_the_first_success() {
        let cache = KubeletCache::new(Duration::from_secs(10));
        assert!(cache.allocations().is_empty());
        assert_eq!(cache.health(), PodResourcesHealth::default());
    }
}
