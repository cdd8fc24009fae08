//! HTTP basic authentication against the web config's bcrypt `basic_auth_users`.
//!
//! What: parse the `Authorization: Basic ...` header, check the user and password against
//! the configured bcrypt hashes, and remember the verdict so that a scraper presenting
//! the same credentials every few seconds does not pay for bcrypt (tens of milliseconds
//! of CPU at the usual cost 10-12) on every scrape.
//!
//! Decisions:
//! - The cache is keyed by HMAC-SHA-256 (random per-process key) over the user name and
//!   the presented password. A different password is a different key, so a right
//!   password cached earlier never lets a wrong one through, and no plain or unsalted
//!   password digest sits in memory.
//! - Successes and failures are cached in two separate bounded sets (oldest entry evicted
//!   first). A client spraying wrong passwords fills only the failure set and cannot push
//!   the legitimate scraper's entry out; caching failures stops the same wrong password
//!   from costing a bcrypt run each time.
//! - bcrypt runs on tokio's blocking pool, at most a few verifications at once, so a flood
//!   of distinct bad passwords costs bounded CPU and never stalls the async workers.
//! - An unknown user is checked against a configured hash anyway (and then refused), so
//!   response time does not tell which user names exist.
//! - Passwords longer than 72 bytes are refused rather than truncated, as Go's bcrypt does.
//! - Hashes are validated when the config is loaded; a bad one stops the exporter at start.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use http::HeaderValue;
use ring::hmac;
use tokio::sync::Semaphore;

/// `WWW-Authenticate` value sent with every 401.
pub const CHALLENGE: &str = "Basic realm=\"gpu-exporter\", charset=\"UTF-8\"";

const OK_CACHE_CAPACITY: usize = 256;
const FAILED_CACHE_CAPACITY: usize = 1024;
/// bcrypt reads at most 72 bytes of a password.
const MAX_PASSWORD_BYTES: usize = 72;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum BasicAuthError {
    /// A configured password hash is not a bcrypt hash.
    #[error("user {user:?}: not a valid bcrypt hash: {reason}")]
    InvalidHash { user: String, reason: String },
    /// The user name cannot appear in a basic-auth header.
    #[error("user {0:?}: a basic-auth user name can not contain ':'")]
    InvalidUser(String),
    /// The system random source failed while creating the cache key.
    #[error("cannot create the credential cache key: system random source failed")]
    Random,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, BasicAuthError>;

/// The validated `basic_auth_users` table: user name to bcrypt hash.
#[derive(Clone)]
pub struct Users {
    hashes: BTreeMap<String, String>,
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hashes are secrets too (offline guessing); print the user names only.
        f.debug_struct("Users").field("names", &self.hashes.keys().collect::<Vec<_>>()).finish()
    }
}

impl Users {
    /// Validates every hash. An empty table is allowed and means "no authentication".
    pub fn new(hashes: BTreeMap<String, String>) -> Result<Users> {
        for (user, hash) in &hashes {
            if user.contains(':') {
                return Err(BasicAuthError::InvalidUser(user.clone()));
            }
            bcrypt::HashParts::from_str(hash)
                .map_err(|e| BasicAuthError::InvalidHash { user: user.clone(), reason: e.to_string() })?;
        }
        Ok(Users { hashes })
    }

    /// Number of configured users.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }
}

/// User name and password from an `Authorization: Basic` header.
#[derive(PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: Vec<u8>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("password", &"<redacted>").finish()
    }
}

/// Parses an `Authorization` header value of the `Basic` scheme (RFC 7617). The scheme
/// name is case-insensitive; the credentials are standard base64 of `user:password`.
/// Returns `None` for any other scheme or a malformed value.
pub fn parse_authorization(value: &HeaderValue) -> Option<Credentials> {
    let text = value.to_str().ok()?;
    let (scheme, token) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(token.trim()).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded.get(..colon)?.to_vec()).ok()?;
    let password = decoded.get(colon + 1..)?.to_vec();
    Some(Credentials { user, password })
}

/// The outcome of checking one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Credentials match a configured user.
    Allowed,
    /// No `Authorization` header.
    Missing,
    /// An `Authorization` header that is not well-formed basic auth.
    Malformed,
    /// Well-formed credentials that do not match.
    Refused,
}

/// Checks requests against [`Users`], caching verdicts. One per server.
pub struct Authenticator {
    users: Arc<Users>,
    /// Hash checked for unknown users so they cost the same time as known ones.
    decoy: String,
    key: hmac::Key,
    cache: Mutex<VerdictCache>,
    bcrypt_slots: Semaphore,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator").field("users", &self.users).finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Builds an authenticator with an empty cache and a fresh random cache key.
    pub fn new(users: Users) -> Result<Authenticator> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).map_err(|_| BasicAuthError::Random)?;
        // The most expensive configured hash, so an unknown user never answers faster.
        let decoy = users
            .hashes
            .values()
            .max_by_key(|h| bcrypt::HashParts::from_str(h).map(|p| p.get_cost()).unwrap_or(0))
            .cloned()
            .unwrap_or_default();
        let slots = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4));
        Ok(Authenticator {
            users: Arc::new(users),
            decoy,
            key,
            cache: Mutex::new(VerdictCache::default()),
            bcrypt_slots: Semaphore::new(slots),
        })
    }

    /// Checks the request's `Authorization` header.
    pub async fn check(&self, header: Option<&HeaderValue>) -> Verdict {
        let Some(header) = header else { return Verdict::Missing };
        let Some(credentials) = parse_authorization(header) else { return Verdict::Malformed };
        let key = self.cache_key(&credentials);
        if let Some(verdict) = self.cached(&key) {
            return verdict;
        }
        let Ok(_slot) = self.bcrypt_slots.acquire().await else { return Verdict::Refused };
        // Another request with the same credentials may have finished while we waited.
        if let Some(verdict) = self.cached(&key) {
            return verdict;
        }
        let known = self.users.hashes.get(&credentials.user).cloned();
        let hash = known.clone().unwrap_or_else(|| self.decoy.clone());
        let user = credentials.user.clone();
        let outcome = tokio::task::spawn_blocking(move || password_matches(&credentials.password, &hash)).await;
        let verdict = match outcome {
            Ok(true) if known.is_some() => Verdict::Allowed,
            Ok(_) => {
                tracing::debug!(user, known = known.is_some(), "basic auth: credentials refused");
                Verdict::Refused
            }
            Err(e) => {
                tracing::error!(error = %e, "basic auth: bcrypt task failed");
                return Verdict::Refused;
            }
        };
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(key, verdict == Verdict::Allowed);
        verdict
    }

    fn cached(&self, key: &CacheKey) -> Option<Verdict> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(key).map(|ok| if ok { Verdict::Allowed } else { Verdict::Refused })
    }

    fn cache_key(&self, credentials: &Credentials) -> CacheKey {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&(credentials.user.len() as u64).to_be_bytes());
        ctx.update(credentials.user.as_bytes());
        ctx.update(&credentials.password);
        let mut key = [0u8; 32];
        key.copy_from_slice(ctx.sign().as_ref());
        key
    }
}

/// bcrypt check as Go's `CompareHashAndPassword` does it: passwords over 72 bytes are
/// refused instead of being truncated to their first 72 bytes.
fn password_matches(password: &[u8], hash: &str) -> bool {
    password.len() <= MAX_PASSWORD_BYTES && bcrypt::verify(password, hash).unwrap_or(false)
}

type CacheKey = [u8; 32];

#[derive(Default)]
struct VerdictCache {
    ok: BoundedSet,
    failed: BoundedSet,
}

impl VerdictCache {
    fn get(&self, key: &CacheKey) -> Option<bool> {
        if self.ok.contains(key) {
            Some(true)
        } else if self.failed.contains(key) {
            Some(false)
        } else {
            None
        }
    }

    fn insert(&mut self, key: CacheKey, ok: bool) {
        if ok {
            self.ok.insert(key, OK_CACHE_CAPACITY);
        } else {
            self.failed.insert(key, FAILED_CACHE_CAPACITY);
        }
    }
}

/// A set that forgets its oldest entry once full.
#[derive(Default)]
struct BoundedSet {
    members: HashSet<CacheKey>,
    order: VecDeque<CacheKey>,
}

impl BoundedSet {
    fn contains(&self, key: &CacheKey) -> bool {
        self.members.contains(key)
    }

    fn insert(&mut self, key: CacheKey, capacity: usize) {
        if !self.members.insert(key) {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > capacity {
            if let Some(old) = self.order.pop_front() {
                self.members.remove(&old);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(raw: &str) -> HeaderValue {
        HeaderValue::from_str(raw).unwrap()
    }

    fn basic(user_pass: &str) -> HeaderValue {
        header(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_pass)))
    }

    fn users(pairs: &[(&str, &str)]) -> Users {
        // Cost 4 keeps the tests fast; the code path is the same at any cost.
        let hashes = pairs.iter().map(|(u, p)| ((*u).to_owned(), bcrypt::hash(p, 4).unwrap())).collect();
        Users::new(hashes).unwrap()
    }

    #[test]
    fn parses_basic_credentials() {
        let c = parse_authorization(&basic("prometheus:s3cr:et")).unwrap();
        assert_eq!(c.user, "prometheus");
        assert_eq!(c.password, b"s3cr:et");
        let c = parse_authorization(&header("basic cHJvbTo=")).unwrap();
        assert_eq!((c.user.as_str(), c.password.as_slice()), ("prom", &b""[..]));
    }

    #[test]
    fn refuses_malformed_authorization_values() {
        for raw in ["Bearer abc", "Basic", "Basic !!!notbase64", "Basic cHJvbWV0aGV1cw==", "Basicx dTpw"] {
            assert_eq!(parse_authorization(&header(raw)), None, "{raw}");
        }
        // user part that is not UTF-8
        let bad_user = base64::engine::general_purpose::STANDARD.encode([0xFF, b':', b'p']);
        assert_eq!(parse_authorization(&header(&format!("Basic {bad_user}"))), None);
    }

    #[test]
    fn validates_hashes_and_user_names() {
        let err = Users::new(BTreeMap::from([("alice".to_owned(), "plaintext".to_owned())])).unwrap_err();
        assert!(matches!(&err, BasicAuthError::InvalidHash { user, .. } if user == "alice"), "{err}");
        let hash = bcrypt::hash("pw", 4).unwrap();
        let err = Users::new(BTreeMap::from([("a:b".to_owned(), hash)])).unwrap_err();
        assert!(matches!(err, BasicAuthError::InvalidUser(_)));
        let debug = format!("{:?}", users(&[("alice", "pw")]));
        assert!(debug.contains("alice") && !debug.contains("$2"), "{debug}");
    }

    #[tokio::test]
    async fn checks_and_caches_verdicts() {
        let auth = Authenticator::new(users(&[("alice", "right"), ("bob", "other")])).unwrap();
        assert_eq!(auth.check(None).await, Verdict::Missing);
        assert_eq!(auth.check(Some(&header("Basic %%%"))).await, Verdict::Malformed);
        assert_eq!(auth.check(Some(&basic("alice:right"))).await, Verdict::Allowed);
        assert_eq!(auth.cache.lock().unwrap().ok.len(), 1);
        // Served from the cache now; a wrong password must still be refused.
        assert_eq!(auth.check(Some(&basic("alice:right"))).await, Verdict::Allowed);
        assert_eq!(auth.check(Some(&basic("alice:wrong"))).await, Verdict::Refused);
        assert_eq!(auth.check(Some(&basic("alice:wrong"))).await, Verdict::Refused);
        // bob's password does not open alice, and an unknown user is refused.
        assert_eq!(auth.check(Some(&basic("alice:other"))).await, Verdict::Refused);
        assert_eq!(auth.check(Some(&basic("mallory:right"))).await, Verdict::Refused);
        let cache = auth.cache.lock().unwrap();
        assert_eq!((cache.ok.len(), cache.failed.len()), (1, 3));
    }

    #[tokio::test]
    async fn refuses_passwords_bcrypt_would_truncate() {
        let limit = "x".repeat(72);
        let hashes = BTreeMap::from([("alice".to_owned(), bcrypt::hash(&limit, 4).unwrap())]);
        let auth = Authenticator::new(Users::new(hashes).unwrap()).unwrap();
        assert_eq!(auth.check(Some(&basic(&format!("alice:{limit}")))).await, Verdict::Allowed);
        // Same first 72 bytes: a truncating check would let this in.
        assert_eq!(auth.check(Some(&basic(&format!("alice:{limit}tail")))).await, Verdict::Refused);
    }

    #[test]
    fn bounded_set_forgets_the_oldest() {
        let mut set = BoundedSet::default();
        for i in 0..5u8 {
            set.insert([i; 32], 3);
        }
        set.insert([4; 32], 3);
        assert_eq!(set.len(), 3);
        assert!(!set.contains(&[0; 32]) && !set.contains(&[1; 32]));
        assert!(set.contains(&[2; 32]) && set.contains(&[4; 32]));
    }

    #[test]
    fn failures_never_evict_successes() {
        let mut cache = VerdictCache::default();
        cache.insert([7; 32], true);
        for i in 0..(FAILED_CACHE_CAPACITY + 10) {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64).to_be_bytes());
            cache.insert(key, false);
        }
        assert_eq!(cache.get(&[7; 32]), Some(true));
        assert_eq!(cache.failed.len(), FAILED_CACHE_CAPACITY);
    }
}
