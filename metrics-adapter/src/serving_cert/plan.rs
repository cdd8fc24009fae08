//! What the stored serving material should become, decided from the clock alone: a pure
//! function over [`Material`], unit-tested without a cluster.
//!
//! Lifetimes, with the defaults of the flags (`--tls-ca-validity` 5 years,
//! `--tls-cert-validity` 1 year):
//! - The serving certificate is renewed when a third of its lifetime is left, when the
//!   host names change, or when the signing CA did not sign it. It never outlives its CA.
//! - A CA rotates in two steps so the aggregator never meets a certificate it does not
//!   trust. When a third of the CA's lifetime is left, a next CA is made and added to the
//!   bundle (nothing is signed by it yet). The first round that sees every APIService's
//!   `caBundle` holding it records that time in the Secret; once `promote_after` has passed
//!   since (time for the aggregator's watch and every replica to catch up), it becomes
//!   the signing CA and a new serving certificate is issued. The old CA stays in the
//!   bundle until it expires. Measuring from the CA's creation instead is not enough: a
//!   second replica could promote it a moment after the first one published it (the
//!   rotation test in `tests/serving_cert.rs` caught exactly that).
//! - Material that cannot be read, or whose CA has expired, is replaced by a new CA and
//!   serving pair: there is nothing left to rotate gracefully from.
//!
//! New certificates start [`BACKDATE`] in the past, so a peer whose clock runs a little
//! behind still accepts them.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::certs::{self, Validity};

use super::material::{self, Authority, Leaf, Material};

/// How far before "now" a new certificate's validity starts (clock skew between nodes).
pub const BACKDATE: i64 = 3600;

/// The rules the material must follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// DNS names and IP addresses of the serving certificate.
    pub hosts: BTreeSet<String>,
    /// Lifetime of a new CA.
    pub ca_validity: Duration,
    /// Lifetime of a new serving certificate (never past its CA's end).
    pub cert_validity: Duration,
    /// How long the next CA must be trusted by every APIService before it signs.
    pub promote_after: Duration,
}

impl Policy {
    /// Checks that the lifetimes fit together: a serving certificate must be renewable at
    /// least twice within a CA's lifetime, so that a CA rotation has room to happen.
    pub fn check(&self) -> Result<(), String> {
        if self.hosts.is_empty() {
            return Err("the serving certificate needs at least one host name".into());
        }
        if self.cert_validity < Duration::from_secs(3) {
            return Err(format!("--tls-cert-validity {:?} is too short (at least 3s)", self.cert_validity));
        }
        if self.cert_validity.saturating_mul(3) > self.ca_validity {
            return Err(format!(
                "--tls-cert-validity ({:?}) must be at most a third of --tls-ca-validity ({:?})",
                self.cert_validity, self.ca_validity
            ));
        }
        Ok(())
    }
}

/// Why the material changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// There was no material: a new CA and serving pair.
    Created,
    /// The stored material was unusable (the reason): replaced.
    Replaced(String),
    /// The signing CA had expired: replaced.
    CaExpired,
    /// A next CA was made and added to the bundle.
    NextCaPrepared,
    /// Every APIService was first seen trusting the next CA.
    NextCaTrusted,
    /// An APIService no longer trusts the next CA: its clock starts again.
    NextCaDistrusted,
    /// The next CA became the signing CA.
    NextCaPromoted,
    /// The serving certificate was renewed (the reason).
    CertRenewed(&'static str),
    /// A CA that signs or will sign was missing from the bundle: added.
    BundleMended,
    /// CAs past their end were dropped from the bundle.
    ExpiredDropped(usize),
}

/// The outcome: the material to store and serve, and what changed (empty: store nothing).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The material after the changes.
    pub material: Material,
    /// What changed, in order.
    pub changes: Vec<Change>,
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Which CAs the managed APIServices trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// No APIService is managed: nothing to wait for.
    Unmanaged,
    /// The DER of every CA that each managed APIService's `caBundle` holds (empty when one
    /// could not be read).
    HeldByAll(Vec<Vec<u8>>),
}

impl Trust {
    fn holds(&self, ca: &Authority) -> bool {
        match self {
            Trust::Unmanaged => true,
            Trust::HeldByAll(ders) => ders.iter().any(|d| d.as_slice() == ca.der()),
        }
    }
}

fn new_authority(now: i64, policy: &Policy) -> certs::Result<Authority> {
    let validity = Validity { not_before: now - BACKDATE, not_after: now.saturating_add(secs(policy.ca_validity)) };
    // A CA's name carries its birth time, as kube's self-signed CAs do, so two CAs in one
    // bundle are told apart by name as well as by key.
    let ca = certs::Ca::with_validity(&format!("gpu-metrics-adapter-ca@{now}"), validity)?;
    Authority::new(ca.cert_pem().to_owned(), ca.key_pem()).map_err(certs::Error::Unusable)
}

fn leaf_not_after(now: i64, ca: &Authority, policy: &Policy) -> i64 {
    now.saturating_add(secs(policy.cert_validity)).min(ca.not_after)
}

fn issue_leaf(now: i64, ca: &Authority, policy: &Policy) -> certs::Result<Leaf> {
    let hosts: Vec<&str> = policy.hosts.iter().map(String::as_str).collect();
    let validity = Validity { not_before: now - BACKDATE, not_after: leaf_not_after(now, ca, policy) };
    let pair = ca.signer()?.server_with_validity(&hosts, validity)?;
    Leaf::new(pair.cert_pem, pair.key_pem).map_err(certs::Error::Unusable)
}

fn fresh(now: i64, policy: &Policy) -> certs::Result<Material> {
    let ca = new_authority(now, policy)?;
    let leaf = issue_leaf(now, &ca, policy)?;
    Ok(Material { bundle: vec![ca.trusted()], ca, next: None, next_trusted_since: None, leaf })
}

/// Why the serving certificate must be renewed now, if it must.
fn renewal_reason(now: i64, m: &Material, policy: &Policy) -> Option<&'static str> {
    if m.leaf.hosts != policy.hosts {
        return Some("host names changed");
    }
    if !m.leaf.signed_by(&m.ca) {
        return Some("not signed by the signing CA");
    }
    let left = m.leaf.not_after - now;
    // Renew in the last third; but only when a new certificate would outlive this one
    // (near the CA's end it could not, until the next CA signs).
    (left < secs(policy.cert_validity) / 3 && leaf_not_after(now, &m.ca, policy) > m.leaf.not_after)
        .then_some("a third of its lifetime is left")
}

/// Decides the next state of the material.
///
/// `stored`: the Secret's material as read (`None` when there is no Secret).
/// `trust`: what the managed APIServices trust now.
pub fn plan(
    now: i64,
    stored: Option<material::Result<Material>>,
    policy: &Policy,
    trust: &Trust,
) -> certs::Result<Plan> {
    let mut changes = Vec::new();
    let mut m = match stored {
        None => {
            changes.push(Change::Created);
            fresh(now, policy)?
        }
        Some(Err(e)) => {
            changes.push(Change::Replaced(e.to_string()));
            fresh(now, policy)?
        }
        Some(Ok(m)) if m.ca.not_after <= now => {
            changes.push(Change::CaExpired);
            fresh(now, policy)?
        }
        Some(Ok(m)) => m,
    };

    if m.next.is_none() && m.ca.not_after - now < secs(policy.ca_validity) / 3 {
        let next = new_authority(now, policy)?;
        m.bundle.push(next.trusted());
        m.next = Some(next);
        changes.push(Change::NextCaPrepared);
    }
    // Every CA that signs or will sign must be trusted; a bundle edited by hand is mended.
    for ca in std::iter::once(&m.ca).chain(m.next.as_ref()) {
        if !m.bundle.iter().any(|t| t.der() == ca.der()) {
            m.bundle.push(ca.trusted());
            changes.push(Change::BundleMended);
        }
    }
    if let Some(next) = m.next.clone() {
        // Seconds are whole: a strict "more than the rounded-up wait" guarantees the
        // wait really passed.
        let wait = secs(policy.promote_after) + i64::from(policy.promote_after.subsec_nanos() > 0);
        match (trust.holds(&next), m.next_trusted_since) {
            (true, None) => {
                m.next_trusted_since = Some(now);
                changes.push(Change::NextCaTrusted);
            }
            (true, Some(since)) if now - since > wait => {
                m.ca = next;
                m.next = None;
                m.next_trusted_since = None;
                changes.push(Change::NextCaPromoted);
            }
            (false, Some(_)) => {
                m.next_trusted_since = None;
                changes.push(Change::NextCaDistrusted);
            }
            _ => {}
        }
    }
    if let Some(reason) = renewal_reason(now, &m, policy) {
        m.leaf = issue_leaf(now, &m.ca, policy)?;
        changes.push(Change::CertRenewed(reason));
    }
    let before = m.bundle.len();
    m.bundle.retain(|t| t.not_after > now);
    if m.bundle.len() < before {
        changes.push(Change::ExpiredDropped(before - m.bundle.len()));
    }
    Ok(Plan { material: m, changes })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    fn policy() -> Policy {
        Policy {
            hosts: ["gpu-metrics-adapter.gpu-telemetry.svc".to_owned()].into(),
            ca_validity: Duration::from_secs(900 * DAY as u64),
            cert_validity: Duration::from_secs(300 * DAY as u64),
            promote_after: Duration::from_secs(600),
        }
    }

    /// A round at `now`; `published`: the APIServices hold the whole bundle of `m`
    /// (otherwise only its signing CA).
    fn step(now: i64, m: &Material, published: bool) -> Plan {
        let held =
            if published { m.bundle.iter().map(|t| t.der().to_vec()).collect() } else { vec![m.ca.der().to_vec()] };
        plan(now, Some(Ok(m.clone())), &policy(), &Trust::HeldByAll(held)).unwrap()
    }

    #[test]
    fn lifetimes_must_leave_room_for_rotation() {
        assert!(policy().check().is_ok());
        let p = Policy { cert_validity: Duration::from_secs(301 * DAY as u64), ..policy() };
        assert!(p.check().unwrap_err().contains("a third"));
        let p = Policy { hosts: BTreeSet::new(), ..policy() };
        assert!(p.check().is_err());
    }

    #[test]
    fn nothing_stored_creates_a_ca_and_a_serving_pair() {
        let now = 1_800_000_000;
        let p = plan(now, None, &policy(), &Trust::Unmanaged).unwrap();
        assert_eq!(p.changes, vec![Change::Created]);
        let m = p.material;
        assert!(m.leaf.signed_by(&m.ca));
        assert_eq!(m.leaf.hosts, policy().hosts);
        assert_eq!(m.leaf.not_after, now + 300 * DAY);
        assert_eq!(m.ca.not_after, now + 900 * DAY);
        assert_eq!(m.leaf.not_before, now - BACKDATE);
        assert_eq!(m.bundle.len(), 1);
        // Read back, nothing to do.
        assert!(step(now + DAY, &m, true).changes.is_empty());
    }

    #[test]
    fn unreadable_or_expired_material_is_replaced() {
        let now = 1_800_000_000;
        let bad = material::Error { key: "tls.crt", reason: "missing".into() };
        let p = plan(now, Some(Err(bad)), &policy(), &Trust::Unmanaged).unwrap();
        assert_eq!(p.changes, vec![Change::Replaced("tls.crt: missing".into())]);
        let old = p.material;
        let p = step(now + 901 * DAY, &old, true);
        assert_eq!(p.changes, vec![Change::CaExpired]);
        assert_ne!(p.material.ca, old.ca);
    }

    #[test]
    fn the_serving_certificate_is_renewed_in_its_last_third() {
        let now = 1_800_000_000;
        let m = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material;
        assert!(step(now + 199 * DAY, &m, true).changes.is_empty());
        let p = step(now + 201 * DAY, &m, true);
        assert_eq!(p.changes, vec![Change::CertRenewed("a third of its lifetime is left")]);
        assert_eq!(p.material.ca, m.ca, "same CA");
        assert_eq!(p.material.leaf.not_after, now + 501 * DAY);
    }

    #[test]
    fn new_host_names_or_a_foreign_signer_renew_the_serving_certificate() {
        let now = 1_800_000_000;
        let m = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material;
        let more = Policy { hosts: ["a.svc".to_owned(), "b.svc".to_owned()].into(), ..policy() };
        let p = plan(now, Some(Ok(m.clone())), &more, &Trust::Unmanaged).unwrap();
        assert_eq!(p.changes, vec![Change::CertRenewed("host names changed")]);
        assert_eq!(p.material.leaf.hosts, more.hosts);

        let other = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material;
        let mixed = Material { leaf: other.leaf, ..m };
        assert_eq!(step(now, &mixed, true).changes, vec![Change::CertRenewed("not signed by the signing CA")]);
    }

    #[test]
    fn a_ca_rotates_in_two_steps_and_the_old_one_stays_trusted() {
        let now = 1_800_000_000;
        let m = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material;
        // Two thirds of the CA's life: the next CA is made and trusted, but signs nothing.
        let t1 = now + 601 * DAY;
        let p = step(t1, &m, false);
        assert!(p.changes.contains(&Change::NextCaPrepared), "{:?}", p.changes);
        let prepared = p.material;
        let next = prepared.next.clone().unwrap();
        assert_eq!(prepared.ca, m.ca);
        assert!(prepared.trusts(&next) && prepared.trusts(&m.ca));
        assert_eq!(prepared.bundle_pem(), format!("{}{}", m.ca.cert_pem, next.cert_pem));
        // Not yet in every APIService: no promotion, however long it waits.
        assert!(step(t1 + 30 * DAY, &prepared, false).changes.is_empty());
        // First seen in every APIService: the time is recorded, nothing signs yet.
        let p = step(t1 + 60, &prepared, true);
        assert_eq!(p.changes, vec![Change::NextCaTrusted]);
        let trusted = p.material;
        assert_eq!(trusted.next_trusted_since, Some(t1 + 60));
        // An APIService loses it again (reinstalled): the wait starts over.
        let p = step(t1 + 100, &trusted, false);
        assert_eq!(p.changes, vec![Change::NextCaDistrusted]);
        assert_eq!(p.material.next_trusted_since, None);
        // Trusted, but not for longer than promote_after.
        assert!(step(t1 + 660, &trusted, true).changes.is_empty());
        // Trusted long enough: the next CA signs a new serving certificate.
        let t2 = t1 + 661;
        let p = step(t2, &trusted, true);
        assert_eq!(p.changes[0], Change::NextCaPromoted);
        assert_eq!(p.changes[1], Change::CertRenewed("not signed by the signing CA"));
        let rotated = p.material;
        assert_eq!(rotated.ca, next);
        assert!(rotated.next.is_none());
        assert!(rotated.leaf.signed_by(&next));
        assert!(rotated.trusts(&m.ca), "the old CA stays trusted until it expires");
        assert_eq!(rotated.leaf.not_after, t2 + 300 * DAY);
        // The old CA leaves the bundle when it expires.
        let p = step(now + 900 * DAY + 1, &rotated, true);
        assert_eq!(p.changes.last(), Some(&Change::ExpiredDropped(1)), "{:?}", p.changes);
        assert_eq!(p.material.bundle.len(), 1);
        assert!(p.material.trusts(&next));
    }

    #[test]
    fn near_the_cas_end_a_certificate_is_not_reissued_in_a_loop() {
        let now = 1_800_000_000;
        let m = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material;
        // The next CA cannot be published (APIServices unreachable): the serving
        // certificate is renewed up to the CA's end once, then left alone.
        let late = now + 800 * DAY;
        let p = step(late, &m, false);
        assert!(p.changes.contains(&Change::CertRenewed("a third of its lifetime is left")));
        assert_eq!(p.material.leaf.not_after, m.ca.not_after);
        let again = step(late + DAY, &p.material, false);
        assert!(again.changes.is_empty(), "{:?}", again.changes);
    }

    #[test]
    fn a_bundle_missing_the_signing_ca_is_mended() {
        let now = 1_800_000_000;
        let mut m = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material;
        let stranger = plan(now, None, &policy(), &Trust::Unmanaged).unwrap().material.ca;
        m.bundle = vec![stranger.trusted()];
        let p = step(now, &m, true);
        assert_eq!(p.changes, vec![Change::BundleMended]);
        assert!(p.material.trusts(&m.ca));
        assert!(p.material.trusts(&stranger));
    }
}
