//! The Kubernetes edge of the self-provisioned serving certificate: read the Secret and
//! the APIServices, let [`plan`] decide, write back with optimistic concurrency, publish
//! the CA bundle, and swap the served certificate.
//!
//! Replicas coordinate only through the API server:
//! - The Secret is created with POST; a replica that loses the race gets 409
//!   AlreadyExists, reads the winner's Secret and serves it.
//! - Every change is a PUT carrying the `resourceVersion` that was read; a 409 Conflict
//!   means another replica changed it first, so the Secret is read and planned again.
//! - Each APIService is replaced the same way, and only when its `caBundle` differs from
//!   the bundle just read, so replicas never write an older bundle over a newer one.
//!
//! Every call has a deadline (`--kube-api-timeout`); failures are retried on the next
//! round with a backoff, while the last good certificate keeps being served.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

use super::material::{self, Leaf, Material};
use super::plan::{Change, Policy, Trust, plan};
use crate::server::{self, CertSlot};

/// Where the material lives and how it is kept.
#[derive(Debug, Clone)]
pub struct Config {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret: String,
    /// APIServices whose `caBundle` is kept equal to the bundle.
    pub apiservices: Vec<String>,
    /// Lifetimes and host names.
    pub policy: Policy,
    /// Time between checks.
    pub interval: Duration,
    /// Deadline of one API call.
    pub api_timeout: Duration,
}

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a call.
    #[error("{op} {object}: {source}")]
    Api {
        /// What was attempted.
        op: &'static str,
        /// The object.
        object: String,
        /// The error.
        source: kube::Error,
    },
    /// A call got no answer in time.
    #[error("{op} {object}: no answer within {timeout:?}")]
    Timeout {
        /// What was attempted.
        op: &'static str,
        /// The object.
        object: String,
        /// The deadline.
        timeout: Duration,
    },
    /// Other writers kept changing the Secret.
    #[error("{0}: changed by another writer on every one of {ATTEMPTS} attempts")]
    Contended(String),
    /// Certificates could not be generated.
    #[error(transparent)]
    Generate(#[from] crate::certs::Error),
    /// The stored serving pair cannot be served.
    #[error(transparent)]
    Serve(#[from] server::Error),
    /// The certificate is served, but some APIServices could not be given the bundle.
    #[error("publishing the CA bundle: {}", .0.join("; "))]
    Publish(Vec<String>),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

const ATTEMPTS: usize = 3;

fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Api { source: kube::Error::Api(s), .. } if s.code == 409)
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Keeps the serving certificate in a Secret and the APIServices' trust in step with it.
pub struct Manager {
    client: kube::Client,
    config: Config,
    slot: Arc<CertSlot>,
    ready: AtomicBool,
    served: Mutex<Option<String>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager that serves through `slot`.
    pub fn new(client: kube::Client, config: Config, slot: Arc<CertSlot>) -> Self {
        Self { client, config, slot, ready: AtomicBool::new(false), served: Mutex::new(None) }
    }

    /// Whether the served certificate comes from the Secret.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn secret_object(&self) -> String {
        format!("secret {}/{}", self.config.namespace, self.config.secret)
    }

    async fn call<T>(
        &self,
        op: &'static str,
        object: impl Fn() -> String,
        fut: impl Future<Output = kube::Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.config.api_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(Error::Api { op, object: object(), source }),
            Err(_) => Err(Error::Timeout { op, object: object(), timeout: self.config.api_timeout }),
        }
    }

    /// One round: read, plan, write, publish, serve. Returns what changed.
    pub async fn reconcile(&self) -> Result<Vec<Change>> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.config.namespace);
        for _ in 0..ATTEMPTS {
            let secret = self.call("get", || self.secret_object(), secrets.get_opt(&self.config.secret)).await?;
            let services = self.read_apiservices().await;
            let stored = secret.as_ref().map(|s| Material::from_data(&data_of(s)));
            let plan = plan(unix_now(), stored, &self.config.policy, &trust(&services))?;
            if !plan.changes.is_empty() {
                match self.store(secret, &plan.material).await {
                    Ok(()) => {
                        tracing::info!(secret = %self.secret_object(), changes = ?plan.changes, "serving material updated")
                    }
                    Err(e) if is_conflict(&e) => {
                        tracing::debug!(error = %e, "another replica wrote first; reading again");
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            self.serve(&plan.material.leaf)?;
            self.publish(services, &plan.material).await?;
            return Ok(plan.changes);
        }
        Err(Error::Contended(self.secret_object()))
    }

    async fn read_apiservices(&self) -> Vec<(String, std::result::Result<APIService, String>)> {
        let api: Api<APIService> = Api::all(self.client.clone());
        let mut out = Vec::with_capacity(self.config.apiservices.len());
        for name in &self.config.apiservices {
            let object = || format!("apiservice {name}");
            let read = match self.call("get", object, api.get_opt(name)).await {
                Ok(Some(s)) => Ok(s),
                Ok(None) => Err(format!("apiservice {name} does not exist (is the adapter's APIService installed?)")),
                Err(e) => Err(e.to_string()),
            };
            out.push((name.clone(), read));
        }
        out
    }

    async fn store(&self, current: Option<Secret>, m: &Material) -> Result<()> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let data: BTreeMap<String, ByteString> = m.to_data().into_iter().map(|(k, v)| (k, ByteString(v))).collect();
        match current {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.config.secret.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some(
                            [
                                ("app.kubernetes.io/name", "gpu-metrics-adapter"),
                                ("app.kubernetes.io/component", "serving-certificate"),
                                ("app.kubernetes.io/managed-by", "gpu-metrics-adapter"),
                            ]
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v.to_owned()))
                            .collect(),
                        ),
                        ..ObjectMeta::default()
                    },
                    type_: Some("Opaque".into()),
                    data: Some(data),
                    ..Secret::default()
                };
                self.call("create", || self.secret_object(), api.create(&PostParams::default(), &secret)).await?;
            }
            Some(mut secret) => {
                // The resourceVersion read is sent back: the write fails with 409 if the
                // Secret changed since.
                secret.data = Some(data);
                secret.string_data = None;
                self.call(
                    "update",
                    || self.secret_object(),
                    api.replace(&self.config.secret, &PostParams::default(), &secret),
                )
                .await?;
            }
        }
        Ok(())
    }

    fn serve(&self, leaf: &Leaf) -> Result<()> {
        let mut served = self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if served.as_deref() != Some(leaf.cert_pem.as_str()) {
            let key = server::load_pair(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes(), &self.secret_object())?;
            self.slot.set(key);
            *served = Some(leaf.cert_pem.clone());
            tracing::info!(secret = %self.secret_object(), not_after = leaf.not_after, "serving the certificate from the Secret");
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    async fn publish(
        &self,
        services: Vec<(String, std::result::Result<APIService, String>)>,
        m: &Material,
    ) -> Result<()> {
        let api: Api<APIService> = Api::all(self.client.clone());
        let bundle = m.bundle_pem().into_bytes();
        let mut failures = Vec::new();
        for (name, read) in services {
            let mut service = match read {
                Ok(s) => s,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            let spec = service.spec.get_or_insert_with(Default::default);
            let current = spec.ca_bundle.as_ref().map(|b| b.0.as_slice());
            if current == Some(bundle.as_slice()) && spec.insecure_skip_tls_verify != Some(true) {
                continue;
            }
            if spec.insecure_skip_tls_verify == Some(true) {
                tracing::warn!(apiservice = %name, "insecureSkipTLSVerify was set: replaced by the adapter's CA bundle");
            }
            spec.ca_bundle = Some(ByteString(bundle.clone()));
            spec.insecure_skip_tls_verify = None;
            let object = || format!("apiservice {name}");
            match self.call("update", object, api.replace(&name, &PostParams::default(), &service)).await {
                Ok(_) => tracing::info!(apiservice = %name, "caBundle updated"),
                Err(e) => failures.push(e.to_string()),
            }
        }
        if failures.is_empty() { Ok(()) } else { Err(Error::Publish(failures)) }
    }

    /// Checks every `interval` (sooner after a failure, with backoff) until shutdown.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut failures: u32 = 0;
        loop {
            let wait = if failures == 0 {
                self.config.interval
            } else {
                Duration::from_millis(250u64 << failures.min(8)).min(self.config.interval)
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
            match self.reconcile().await {
                Ok(_) => failures = 0,
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, "serving certificate round failed; the current certificate stays in use");
                }
            }
        }
    }
}

fn data_of(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

/// What every managed APIService trusts: the CAs all of their `caBundle`s hold.
fn trust(services: &[(String, std::result::Result<APIService, String>)]) -> Trust {
    if services.is_empty() {
        return Trust::Unmanaged;
    }
    let mut held: Option<Vec<Vec<u8>>> = None;
    for (_, read) in services {
        let ders = read
            .as_ref()
            .ok()
            .and_then(|s| s.spec.as_ref()?.ca_bundle.as_ref())
            .and_then(|b| std::str::from_utf8(&b.0).ok())
            .and_then(|text| material::pem_certificates(text).ok())
            .unwrap_or_default();
        held = Some(match held {
            None => ders,
            Some(h) => h.into_iter().filter(|d| ders.contains(d)).collect(),
        });
    }
    Trust::HeldByAll(held.unwrap_or_default())
}
