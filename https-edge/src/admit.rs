//! Admission: how many connections are open, from whom, and which of them is idle, so
//! that a full server makes room instead of refusing.
//!
//! Every accepted connection gets a [`Lease`] for its lifetime. A connection is *idle*
//! while no request of it is being served: from accept through the TLS handshake and the
//! reading of a request head, and between keep-alive requests. It is *busy* from the
//! moment its request head has been read until the response body has been written
//! ([`Tracker::begin`] returns a guard that the response body holds).
//!
//! The limits, and why they shed instead of pausing:
//! - at most `max_per_peer` connections from one address (IPv4-mapped IPv6 counts as the
//!   IPv4 address). A new connection from a peer at its limit replaces that peer's
//!   oldest idle connection; when all of them are busy, the new one is closed at once.
//!   One address cannot take the whole server.
//! - at most `max_total` connections. A new connection at the limit replaces the oldest
//!   idle connection of the peer holding the most connections (of any peer, oldest
//!   first, when all hold as many), so a flood from a few addresses sheds itself before
//!   it sheds a client that holds one. Only when every open connection is busy does
//!   accepting pause (clients then wait in the kernel backlog): that is load, not an
//!   attack by idle sockets.
//!
//! Pausing at the limit (what the edge did before) let about 600 idle sockets lock every
//! scrape and the kubelet's probes out. With shedding, a new client is always accepted
//! while some connection is idle, and it lives at least until `max_total` newer
//! connections have arrived (the oldest idle goes first), which on any network is far
//! longer than sending one request head. An idle keep-alive connection that is shed is
//! simply closed, as its idle timeout would have done; HTTP clients reconnect.
//!
//! A shed connection is removed from the counts at once (its task is told to close, and
//! does so at its next poll), so the counts never exceed the limits, although for a
//! moment a few more sockets than `max_total` may still be open.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// The open connections and their limits; shared by the accept loop and every lease.
#[derive(Debug)]
pub(crate) struct Registry {
    max_total: usize,
    max_per_peer: usize,
    state: Mutex<State>,
    /// Woken when a connection ends or turns idle: the accept loop may proceed.
    room: Notify,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// Orders idle connections: a connection takes the next number each time it turns
    /// idle, so the smallest is the one idle the longest.
    next_seq: u64,
    conns: HashMap<u64, Entry>,
    /// Idle connections, oldest first: sequence number -> connection id.
    idle: BTreeMap<u64, u64>,
    peers: HashMap<IpAddr, Peer>,
}

#[derive(Debug, Default)]
struct Peer {
    open: usize,
    idle: BTreeMap<u64, u64>,
}

#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    busy: usize,
    /// `Some(seq)` while idle.
    idle_seq: Option<u64>,
    shed: Arc<Notify>,
}

/// What [`Registry::admit`] decided for a new connection.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Served; it holds its place until the lease is dropped or it is shed.
    Admitted(Lease),
    /// Closed at once: its peer is at its limit with every connection busy (or, in a
    /// race with other accepts, the whole server is).
    Refused,
}

impl Registry {
    /// A registry allowing `max_total` connections, `max_per_peer` of them from one
    /// address (both at least 1; the per-peer limit is at most the total).
    pub(crate) fn new(max_total: usize, max_per_peer: usize) -> Arc<Self> {
        let max_total = max_total.max(1);
        Arc::new(Registry {
            max_total,
            max_per_peer: max_per_peer.clamp(1, max_total),
            state: Mutex::default(),
            room: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once a new connection can be admitted: below the limit, or with some
    /// connection idle that can make room.
    pub(crate) async fn room(&self) {
        loop {
            let notified = self.room.notified();
            {
                let state = self.lock();
                if state.conns.len() < self.max_total || !state.idle.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Admits a connection from `peer`, shedding the oldest idle connection of that peer
    /// or of the server where a limit is reached.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Admission {
        let peer = peer.to_canonical();
        let mut state = self.lock();
        let from_peer = state.peers.get(&peer).map_or(0, |p| p.open);
        if from_peer >= self.max_per_peer {
            let Some(victim) = state.peers.get(&peer).and_then(|p| p.idle.values().next().copied()) else {
                return Admission::Refused;
            };
            state.shed(victim);
        }
        if state.conns.len() >= self.max_total {
            let Some(victim) = state.global_victim() else {
                return Admission::Refused;
            };
            state.shed(victim);
        }
        let id = state.next_id;
        state.next_id += 1;
        let seq = state.take_seq();
        let shed = Arc::new(Notify::new());
        state.conns.insert(id, Entry { peer, busy: 0, idle_seq: Some(seq), shed: shed.clone() });
        state.idle.insert(seq, id);
        let entry = state.peers.entry(peer).or_default();
        entry.open += 1;
        entry.idle.insert(seq, id);
        Admission::Admitted(Lease { tracker: Tracker { registry: self.clone(), id }, shed })
    }

    /// Connections counted now (open and not shed).
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().conns.len()
    }
}

impl State {
    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Forgets connection `id` and returns its entry.
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.conns.remove(&id)?;
        if let Some(seq) = entry.idle_seq {
            self.idle.remove(&seq);
        }
        if let Some(peer) = self.peers.get_mut(&entry.peer) {
            peer.open = peer.open.saturating_sub(1);
            if let Some(seq) = entry.idle_seq {
                peer.idle.remove(&seq);
            }
            if peer.open == 0 {
                self.peers.remove(&entry.peer);
            }
        }
        Some(entry)
    }

    /// The connection that makes room at the global limit: the oldest idle one of the
    /// peer that holds the most connections. Shedding the oldest idle connection of any
    /// peer let a flood from 20 addresses (7,500 accepts a second) close a legitimate
    /// client 0.14 s after its accept, in the middle of its TLS handshake; a peer with
    /// one connection now gives it up only when every peer holds one.
    fn global_victim(&self) -> Option<u64> {
        self.peers
            .values()
            .filter_map(|p| p.idle.iter().next().map(|(seq, id)| (p.open, std::cmp::Reverse(*seq), *id)))
            .max()
            .map(|(_, _, id)| id)
    }

    fn shed(&mut self, id: u64) {
        if let Some(entry) = self.remove(id) {
            tracing::debug!(peer = %entry.peer, "connection limit reached: closing the oldest idle connection");
            // notify_one keeps the wakeup even when the task is not waiting yet.
            entry.shed.notify_one();
        }
    }
}

/// A connection's place in the registry, held by its task; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Lease {
    tracker: Tracker,
    shed: Arc<Notify>,
}

impl Lease {
    /// Resolves when the registry chose this connection to make room: close it.
    pub(crate) async fn shed(&self) {
        self.shed.notified().await;
    }

    /// A handle that marks this connection's requests busy.
    pub(crate) fn tracker(&self) -> Tracker {
        self.tracker.clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let registry = &self.tracker.registry;
        registry.lock().remove(self.tracker.id);
        registry.room.notify_one();
    }
}

/// Marks a connection's requests busy (cheap to clone; the connection's service holds one).
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    registry: Arc<Registry>,
    id: u64,
}

impl Tracker {
    /// The connection serves a request until the returned guard is dropped; it cannot be
    /// shed meanwhile.
    pub(crate) fn begin(&self) -> Busy {
        let mut state = self.registry.lock();
        let state = &mut *state;
        if let Some(entry) = state.conns.get_mut(&self.id) {
            entry.busy += 1;
            if let Some(seq) = entry.idle_seq.take() {
                state.idle.remove(&seq);
                if let Some(peer) = state.peers.get_mut(&entry.peer) {
                    peer.idle.remove(&seq);
                }
            }
        }
        Busy { tracker: self.clone() }
    }
}

/// A request being served (see [`Tracker::begin`]).
#[derive(Debug)]
pub(crate) struct Busy {
    tracker: Tracker,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let registry = &self.tracker.registry;
        let mut guard = registry.lock();
        let state = &mut *guard;
        let Some(entry) = state.conns.get_mut(&self.tracker.id) else {
            return;
        };
        entry.busy = entry.busy.saturating_sub(1);
        if entry.busy > 0 || entry.idle_seq.is_some() {
            return;
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        entry.idle_seq = Some(seq);
        state.idle.insert(seq, self.tracker.id);
        if let Some(peer) = state.peers.get_mut(&entry.peer) {
            peer.idle.insert(seq, self.tracker.id);
        }
        drop(guard);
        registry.room.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    fn admitted(registry: &Arc<Registry>, peer: IpAddr) -> Lease {
        match registry.admit(peer) {
            Admission::Admitted(lease) => lease,
            Admission::Refused => panic!("refused {peer}"),
        }
    }

    async fn is_shed(lease: &Lease) -> bool {
        tokio::time::timeout(Duration::from_millis(20), lease.shed()).await.is_ok()
    }

    #[tokio::test]
    async fn a_full_server_sheds_the_oldest_idle_connection() {
        let registry = Registry::new(3, 3);
        let a = admitted(&registry, ip(1));
        let b = admitted(&registry, ip(2));
        let c = admitted(&registry, ip(3));
        let _busy_a = a.tracker().begin();
        let d = admitted(&registry, ip(4));
        assert!(!is_shed(&a).await, "a busy connection is never shed");
        assert!(is_shed(&b).await, "b was the oldest idle one");
        assert!(!is_shed(&c).await && !is_shed(&d).await);
        assert_eq!(registry.open(), 3);
        // c turned busy and idle again: now d is the oldest idle.
        drop(c.tracker().begin());
        let _e = admitted(&registry, ip(5));
        assert!(is_shed(&d).await, "d had been idle longer than c");
        assert!(!is_shed(&c).await);
    }

    #[tokio::test]
    async fn at_the_global_limit_the_peer_holding_most_gives_way() {
        let registry = Registry::new(4, 4);
        let lone = admitted(&registry, ip(1));
        let flood: Vec<Lease> = (0..3).map(|_| admitted(&registry, ip(2))).collect();
        let _newcomer = admitted(&registry, ip(3));
        assert!(!is_shed(&lone).await, "the lone client's connection is the oldest idle, but its peer holds one");
        assert!(is_shed(&flood[0]).await, "the flood's oldest idle connection made room");
        assert!(!is_shed(&flood[1]).await && !is_shed(&flood[2]).await);
        assert_eq!(registry.open(), 4);
    }

    #[tokio::test]
    async fn one_peer_is_held_to_its_own_limit() {
        let registry = Registry::new(10, 2);
        let a = admitted(&registry, ip(1));
        let b = admitted(&registry, ip(1));
        let other = admitted(&registry, ip(2));
        let _c = admitted(&registry, ip(1));
        assert!(is_shed(&a).await, "the peer's oldest idle connection made room");
        assert!(!is_shed(&b).await && !is_shed(&other).await);
        let _busy_b = b.tracker().begin();
        let _busy_c = _c.tracker().begin();
        assert!(matches!(registry.admit(ip(1)), Admission::Refused), "all of the peer's connections are busy");
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(matches!(registry.admit(mapped), Admission::Refused), "an IPv4-mapped address is the same peer");
        assert!(matches!(registry.admit(ip(3)), Admission::Admitted(_)), "other peers are still admitted");
    }

    #[tokio::test]
    async fn accepting_pauses_only_when_every_connection_is_busy() {
        let registry = Registry::new(1, 1);
        let a = admitted(&registry, ip(1));
        tokio::time::timeout(Duration::from_millis(50), registry.room()).await.expect("an idle connection makes room");
        let busy = a.tracker().begin();
        assert!(tokio::time::timeout(Duration::from_millis(50), registry.room()).await.is_err(), "all busy: wait");
        assert!(matches!(registry.admit(ip(2)), Admission::Refused));
        let waiter = tokio::spawn({
            let registry = registry.clone();
            async move { registry.room().await }
        });
        drop(busy);
        tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken when the request ended").unwrap();
        drop(a);
        assert_eq!(registry.open(), 0);
    }
}
