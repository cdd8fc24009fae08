//! The health loop's Kubernetes edge and its driver: reads and writes the Node
//! ([`actions`]), the circuit breaker's ConfigMap ([`breaker`]), retries ([`retry`]),
//! the flags ([`config`]), and the loop below that feeds the pure core
//! (`gpu-health`) and acts on its plan. It depends on the core, never the reverse;
//! the exporter hands it a watch of anything that yields an [`Observation`].
//!
//! The health loop: takes the exporter's own node out of scheduling when its GPUs
//! are broken, and puts it back when they have recovered, without flapping, without
//! fighting admins and without cordoning half the cluster.
//!
//! ```text
//! Observation ──assess──> Assessment ──policy──> Verdict ──plan(Node)──> patches, Events ──> API server
//!  (exporter)            (signals.rs)           (policy.rs)  (plan.rs)          (actions.rs, breaker.rs)
//! ```
//! - Checks run every `--health.check-interval` (`CHECK_INTERVAL`), and at once when
//!   a snapshot brings a new XID or a newly lost GPU.
//! - Each check ends in a reconcile: read the Node, plan the writes that make it
//!   match the verdict (nothing when it already does), ask the circuit breaker before
//!   a new quarantine, write, and on a 409 read and plan again. A failed reconcile is
//!   retried with backoff until it succeeds; it never runs twice for one change
//!   because the plan is computed from the Node as it is.
//! - Before the first check the loop reads its claim back from the Node, so a
//!   restart neither lifts nor re-applies anything.
//! - `--kubernetes.api` means the same here as for the pod watch: `off` and the
//!   process never builds a Kubernetes client, so the loop runs **report-only** (it
//!   evaluates, logs and exports its verdict, and writes nothing anywhere); `auto`
//!   and it uses `--kubernetes.kubeconfig`, else the in-cluster service account,
//!   `KUBECONFIG` or `~/.kube/config`. Without any of those the loop is report-only
//!   too. `gpu_health_mode_info{api}` says which (`off`, `report_only`).
//! - A reconcile that fails says why: the node (or the breaker's ConfigMap) changed
//!   under every attempt (409s), the API server refused the request (403, 422, ...),
//!   or it could not be reached (no answer, 429, 5xx): only the last is "Kubernetes
//!   API unavailable".
//! - API load: a settled node reads only its own Node per check; a node the breaker
//!   holds back also reads the breaker's ConfigMap, and lists the GPU nodes only
//!   when its last listing is older than ten checks or a place looks free (see
//!   [`breaker`]).
//! - GPUs held one by one get DeviceTaintRules ([`device_rules`]; the loop's steps for
//!   them are in `gpus.rs`): the first reconcile asks which `resource.k8s.io` version
//!   serves them and takes back the GPUs its rules hold; a node with a GPU held alone
//!   lists its rules (from the cache) at each check; creates and value changes go
//!   before the node patch, deletes after it; a rule the API server refuses (403, 422,
//!   a foreign rule under the loop's name) makes the policy hold the node instead,
//!   until the exporter restarts, and the condition says why.

pub mod actions;
pub mod breaker;
pub mod config;
pub mod device_rules;
mod gpus;
pub mod retry;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use actions::{ActionError, NodeApi};
use breaker::{Breaker, BreakerError};
use config::HealthSettings;
use device_rules::{DeviceRules, RuleApiError};
use gpu_health::device_rules::RuleView;
use gpu_health::node_state::NodeView;
use gpu_health::observation::Observation;
use gpu_health::plan::{Devices, Mode, Permit, Plan, plan_with};
use gpu_health::policy::{CheckKind, Health, PolicyState, Verdict};
use gpu_health::signals::{self, Assessment};
use gpu_health::view::{BreakerView, GpuHealth, HealthMetrics};
use gpu_health::{time, xid};
use retry::Backoff;

/// What the loop watches: anything that yields an observation (the exporter's
/// snapshot of one collection cycle).
pub trait Source: Send + Sync + 'static {
    fn observe(&self) -> Observation;
}

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error(transparent)]
    Action(#[from] ActionError),
    #[error(transparent)]
    Breaker(#[from] BreakerError),
    #[error("node {0} changed under us {1} times (409 Conflict on each update); giving up this check")]
    Contended(String, u32),
    #[error(transparent)]
    Rules(#[from] RuleApiError),
}

pub type Result<T, E = HealthError> = std::result::Result<T, E>;

/// What kind of failure ended a reconcile, for the log and `gpu_health_mode_info{api}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The object changed under every attempt (409s): the API server is fine, others
    /// are writing the same object.
    Contended,
    /// The API server answered that the request will not succeed (403, 404, 422, ...).
    Refused,
    /// No answer, 429 or 5xx, after the request's retries.
    Unreachable,
}

impl HealthError {
    pub fn cause(&self) -> Cause {
        let of = |e: &kube::Error| match retry::classify(e) {
            retry::Failure::Conflict => Cause::Contended,
            retry::Failure::Transient => Cause::Unreachable,
            retry::Failure::Permanent => Cause::Refused,
        };
        match self {
            Self::Contended(..) | Self::Breaker(BreakerError::Contended(..)) => Cause::Contended,
            Self::Action(a) => of(a.source_error()),
            Self::Breaker(BreakerError::Api { source, .. }) => of(source),
            Self::Rules(r) => r.source_error().map_or(Cause::Refused, of),
        }
    }
}

/// A running health loop.
#[derive(Debug)]
pub struct HealthHandle {
    pub metrics: Arc<HealthMetrics>,
    task: tokio::task::JoinHandle<()>,
}

impl HealthHandle {
    /// Stops the loop; a write in flight is abandoned (the next start plans from the
    /// Node as it is, so nothing is lost).
    pub fn stop(self) {
        self.task.abort();
    }
}

/// Whether a reconcile attempt finished or must read and plan again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    Done,
    Again,
}

/// The API handles, when an API server is configured.
#[derive(Debug, Clone)]
struct Kube {
    node: NodeApi,
    breaker: Breaker,
    rules: DeviceRules,
}

/// Starts the loop in report-only mode for `--kubernetes.api=off`: it never contacts
/// the API server.
pub fn start_offline<S: Source>(
    settings: HealthSettings,
    node: String,
    snapshots: watch::Receiver<Arc<S>>,
) -> HealthHandle {
    launch(settings, node, snapshots, None, "off")
}

/// Starts the loop against the API server `config` names (`None`: report-only).
pub async fn start_with_config<S: Source>(
    settings: HealthSettings,
    node: String,
    snapshots: watch::Receiver<Arc<S>>,
    config: Option<kube::Config>,
) -> HealthHandle {
    let metrics = Arc::new(HealthMetrics::default());
    let kube = config.and_then(|config| connect(config, &settings, &node, metrics.clone()));
    let api = if kube.is_some() { "connected" } else { "report_only" };
    launch_with(settings, node, snapshots, kube, api, metrics)
}

fn launch<S: Source>(
    settings: HealthSettings,
    node: String,
    snapshots: watch::Receiver<Arc<S>>,
    kube: Option<Kube>,
    api: &'static str,
) -> HealthHandle {
    launch_with(settings, node, snapshots, kube, api, Arc::new(HealthMetrics::default()))
}

fn launch_with<S: Source>(
    settings: HealthSettings,
    node: String,
    snapshots: watch::Receiver<Arc<S>>,
    kube: Option<Kube>,
    api: &'static str,
    metrics: Arc<HealthMetrics>,
) -> HealthHandle {
    let mode = mode_of(&settings);
    let effect = settings.gpu_effect.as_str();
    metrics.update(|v| {
        v.mode = mode.as_str();
        v.api = api;
        v.device_taint_effect = effect;
    });
    let health = HealthLoop {
        policy: PolicyState::new(settings.policy, settings.xids.clone()),
        settings,
        node,
        mode,
        kube,
        metrics: metrics.clone(),
        restored: false,
        breaker_held: None,
        verdict: None,
        last_obs: None,
        failures: 0,
        retry_at: None,
        last_intent: None,
        opted_out_logged: false,
        reset_ack: None,
        rules_restored: false,
        gpu_places: None,
        damaged_logged: Vec::new(),
    };
    let task = tokio::spawn(health.run(snapshots));
    HealthHandle { metrics, task }
}

fn mode_of(settings: &HealthSettings) -> Mode {
    if settings.dry_run {
        Mode::DryRun
    } else if settings.auto_cordon {
        Mode::Enforce
    } else {
        Mode::ConditionOnly
    }
}

fn connect(
    mut config: kube::Config,
    settings: &HealthSettings,
    node: &str,
    metrics: Arc<HealthMetrics>,
) -> Option<Kube> {
    // The loop retries itself, with jitter and with its own counts.
    config.default_retry = false;
    config.connect_timeout = Some(settings.api_timeout);
    config.read_timeout = Some(settings.api_timeout);
    config.write_timeout = Some(settings.api_timeout);
    let namespace = settings.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let cluster = config.cluster_url.to_string();
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(node, error = %e, "cannot build a Kubernetes client: the health loop runs in report-only mode");
            return None;
        }
    };
    tracing::info!(node, api = %cluster, breaker_namespace = %namespace, "health loop talks to the Kubernetes API");
    let backoff = Backoff { attempts: settings.api_attempts, ..Backoff::default() };
    let counting = metrics.clone();
    let on_retry: actions::OnRetry = Arc::new(move |op, e| {
        let label = retry::error_label(e);
        counting.update(|v| *v.api_errors.entry((op, label)).or_default() += 1);
    });
    let node_api = NodeApi::new(
        client.clone(),
        node,
        &settings.event_namespace,
        &settings.names.field_manager,
        backoff,
        on_retry.clone(),
    );
    let rules = DeviceRules::new(
        client.clone(),
        settings.names.clone(),
        node,
        &settings.names.field_manager,
        backoff,
        on_retry.clone(),
    );
    let breaker = Breaker::new(
        client,
        &namespace,
        settings.breaker.clone(),
        settings.names.clone(),
        node,
        backoff,
        on_retry,
        settings.check_interval.saturating_mul(breaker::FLEET_TTL_CHECKS),
    );
    Some(Kube { node: node_api, breaker, rules })
}

struct HealthLoop {
    settings: HealthSettings,
    node: String,
    mode: Mode,
    policy: PolicyState,
    kube: Option<Kube>,
    metrics: Arc<HealthMetrics>,
    /// The claim was read back from the Node.
    restored: bool,
    /// Whether this node holds a place in the breaker (`None`: not known).
    breaker_held: Option<bool>,
    verdict: Option<Verdict>,
    last_obs: Option<Assessment>,
    failures: u32,
    retry_at: Option<Instant>,
    /// The last intent logged while writes were impossible, to log each once.
    last_intent: Option<String>,
    opted_out_logged: bool,
    /// The operator's reset annotation last taken.
    reset_ack: Option<String>,
    /// Device taints were looked up (discovery, and the GPUs the loop's rules hold).
    rules_restored: bool,
    /// The GPUs (UUIDs) whose places in the GPU breaker this node holds, as last synced.
    gpu_places: Option<Vec<String>>,
    /// Warnings about damaged rules already logged.
    damaged_logged: Vec<String>,
}

impl HealthLoop {
    async fn run<S: Source>(mut self, mut snapshots: watch::Receiver<Arc<S>>) {
        let interval = self.settings.check_interval;
        let mut next_check: Option<Instant> = None;
        let mut current = snapshots.borrow_and_update().clone();
        loop {
            let seen = current.observe();
            let obs = signals::assess(&seen, &self.settings.thresholds);
            if next_check.is_none() && obs.observable {
                self.check(&seen, &obs, CheckKind::Scheduled).await;
                next_check = Some(Instant::now() + interval);
            } else if obs.observable
                && self.last_obs.as_ref().is_some_and(|last| {
                    let table = self.policy.table();
                    obs.has_news_since(last, |code| table.class(code) != xid::XidClass::Event)
                })
            {
                self.check(&seen, &obs, CheckKind::Event).await;
            }
            self.last_obs = Some(obs);
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    current = snapshots.borrow_and_update().clone();
                }
                () = tokio::time::sleep_until(next_check.unwrap_or(far)), if next_check.is_some() => {
                    current = snapshots.borrow_and_update().clone();
                    let seen = current.observe();
                    let obs = signals::assess(&seen, &self.settings.thresholds);
                    self.check(&seen, &obs, CheckKind::Scheduled).await;
                    next_check = Some(Instant::now() + interval);
                }
                () = tokio::time::sleep_until(self.retry_at.unwrap_or(far)), if self.retry_at.is_some() => {
                    self.retry_at = None;
                    self.reconcile_now().await;
                }
            }
        }
    }

    async fn check(&mut self, seen: &Observation, obs: &Assessment, kind: CheckKind) {
        self.last_obs = Some(obs.clone());
        self.ensure_restored().await;
        let verdict = self.policy.step(obs, kind, SystemTime::now());
        let node = self.node.as_str();
        for note in &verdict.notes {
            tracing::info!(node, "{note}");
        }
        if verdict.changed {
            match verdict.health {
                Health::Unhealthy => {
                    let reasons: Vec<String> = verdict.reasons.iter().map(|r| r.describe()).collect();
                    tracing::warn!(node, reasons = %reasons.join("; "), "GPUs unhealthy");
                }
                Health::Healthy => tracing::info!(node, "GPUs healthy"),
                Health::Unknown => {}
            }
        }
        let kind_label = if kind == CheckKind::Scheduled { "scheduled" } else { "event" };
        let mut gpus = gpu_health(seen, obs, &verdict);
        let before = self.metrics.view().gpus;
        for g in &mut gpus {
            g.quarantined = before.iter().any(|b| b.uuid == g.uuid && b.quarantined);
        }
        let (health, since, reasons) = (verdict.health, verdict.since, verdict.reasons.clone());
        self.metrics.update(|v| {
            *v.checks.entry(kind_label).or_default() += 1;
            v.health = health;
            v.since = since;
            v.reasons = reasons;
            v.gpus = gpus;
        });
        self.verdict = Some(verdict);
        self.reconcile_now().await;
    }

    /// Reads the claim an earlier run left on the Node, once.
    async fn ensure_restored(&mut self) {
        let Some(kube) = self.kube.clone() else { return };
        if self.restored {
            return;
        }
        let node = match kube.node.get_once().await {
            Ok(node) => node,
            Err(e) => {
                tracing::debug!(node = %self.node, error = %e, "cannot read the node yet; restoring later");
                return;
            }
        };
        let view = NodeView::from_node(&node, &self.settings.names);
        self.restore_from(&view);
        self.restore_rules(&kube, &view).await;
    }

    fn restore_from(&mut self, view: &NodeView) {
        self.restored = true;
        let key = if self.mode == Mode::DryRun {
            &self.settings.names.dry_run_annotation
        } else {
            &self.settings.names.state_annotation
        };
        match view.claim(key) {
            None => {}
            Some(Err(e)) => tracing::warn!(node = %self.node, error = %e, "ignoring an unreadable claim on the node"),
            Some(Ok(claim)) => {
                let restored = claim.restored(&view.boot_id);
                let reasons: Vec<String> = claim.reasons.iter().map(|r| r.describe()).collect();
                tracing::info!(
                    node = %self.node,
                    state = %claim.state,
                    since = %time::format(claim.since),
                    reasons = %reasons.join("; "),
                    "took back the health state recorded on the node"
                );
                for note in self.policy.restore(restored) {
                    tracing::info!(node = %self.node, "{note}");
                }
                self.breaker_held = Some(claim.applied.anything());
            }
        }
    }

    async fn reconcile_now(&mut self) {
        let Some(verdict) = self.verdict.clone() else { return };
        if self.kube.is_none() {
            self.report_intent(&verdict, "report-only mode");
            return;
        }
        match self.reconcile().await {
            Ok(()) => {
                if self.failures > 0 {
                    tracing::info!(node = %self.node, "Kubernetes API reachable again; node updated");
                }
                self.failures = 0;
                self.retry_at = None;
                self.last_intent = None;
                self.metrics.update(|v| v.api = "connected");
            }
            Err(e) => {
                let verdict = self.verdict.clone().unwrap_or(verdict);
                self.failures = self.failures.saturating_add(1);
                let delay = Backoff { base: Duration::from_secs(1), ..Backoff::default() }
                    .delay(self.failures)
                    .min(self.settings.check_interval);
                self.retry_at = Some(Instant::now() + delay);
                let retry_in_ms = delay.as_millis() as u64;
                let node = self.node.clone();
                let (why, api) = match e.cause() {
                    Cause::Contended => {
                        tracing::warn!(node, retry_in_ms, "{e}; will try again");
                        (e.to_string(), "connected")
                    }
                    Cause::Refused => {
                        tracing::warn!(node, error = %e, retry_in_ms, "the Kubernetes API refused an update; will try again");
                        (format!("Kubernetes API refused the update ({e})"), "connected")
                    }
                    Cause::Unreachable => {
                        tracing::warn!(node, error = %e, retry_in_ms, "cannot update the node; will try again");
                        ("Kubernetes API unavailable".to_string(), "unreachable")
                    }
                };
                self.report_intent(&verdict, &why);
                self.metrics.update(|v| v.api = api);
            }
        }
    }

    /// Logs, once per change, what the loop would do but cannot.
    fn report_intent(&mut self, verdict: &Verdict, why: &str) {
        let intent = match verdict.health {
            Health::Unknown => return,
            Health::Healthy => "keep or make the node schedulable, condition GPUHealthy=True".to_string(),
            Health::Unhealthy => {
                let primary = verdict.primary_code();
                let key = &self.settings.names.taint_key;
                let scheduling = match self.mode {
                    Mode::Enforce if !verdict.holds_node() => {
                        let effect = self.settings.gpu_effect.as_str();
                        let gpus: Vec<String> = verdict
                            .gpus
                            .iter()
                            .map(|g| {
                                format!(
                                    "device-taint GPU {} ({}) {key}={}:{effect}, ",
                                    g.index,
                                    g.uuid,
                                    g.primary_code()
                                )
                            })
                            .collect();
                        gpus.concat()
                    }
                    Mode::Enforce => format!("cordon, taint {key}={primary}:NoSchedule, "),
                    Mode::ConditionOnly => String::new(),
                    Mode::DryRun => "record a dry-run annotation of ".into(),
                };
                let reasons: Vec<String> = verdict.reasons.iter().map(|r| r.describe()).collect();
                format!("{scheduling}condition GPUHealthy=False ({})", reasons.join("; "))
            }
        };
        if self.last_intent.as_deref() != Some(intent.as_str()) {
            if verdict.health == Health::Unhealthy {
                tracing::warn!(node = %self.node, mode = self.mode.as_str(), "{why}: would {intent}");
            } else {
                tracing::info!(node = %self.node, mode = self.mode.as_str(), "{why}: would {intent}");
            }
            self.last_intent = Some(intent);
        }
    }

    /// Applies an operator's `<domain>/gpu-health-reset` annotation once; its effect
    /// shows from the next check on.
    fn take_reset_acknowledgement(&mut self, view: &NodeView) {
        let Some(text) = view.annotations.get(&self.settings.names.reset_annotation) else { return };
        let Some(at) = time::parse(text) else {
            if self.reset_ack.as_deref() != Some(text.as_str()) {
                tracing::warn!(node = %self.node, value = %text, "reset annotation is not an RFC 3339 time; ignored");
                self.reset_ack = Some(text.clone());
            }
            return;
        };
        if self.reset_ack.as_deref() == Some(text.as_str()) {
            return;
        }
        self.reset_ack = Some(text.clone());
        for note in self.policy.acknowledge_reset(at) {
            tracing::info!(node = %self.node, "{note}");
        }
    }

    /// Reads the Node (and the loop's rules), plans, asks a breaker when the plan
    /// needs it, and writes; on a 409 reads and plans again, up to `ATTEMPTS` times.
    async fn reconcile(&mut self) -> Result<()> {
        const ATTEMPTS: u32 = 5;
        let Some(kube) = self.kube.clone() else { return Ok(()) };
        let mut fresh_rules = false;
        for attempt in 0..ATTEMPTS {
            if self.reconcile_once(&kube, attempt > 0, &mut fresh_rules).await? == Attempt::Done {
                return Ok(());
            }
        }
        Err(HealthError::Contended(self.node.clone(), ATTEMPTS))
    }

    /// One read, plan and write. Rule creates and value changes go before the node
    /// patch, deletes after it (see [`Plan::rules`]).
    async fn reconcile_once(&mut self, kube: &Kube, retried: bool, fresh_rules: &mut bool) -> Result<Attempt> {
        // From the API server's cache first; after a conflict, the latest version.
        let node = kube.node.get(retried).await?;
        let view = NodeView::from_node(&node, &self.settings.names);
        let now = SystemTime::now();
        if !self.restored {
            self.restore_and_judge_again(&view, now);
        }
        if !self.rules_restored && self.restore_rules(kube, &view).await {
            self.judge_again(now);
        }
        self.take_reset_acknowledgement(&view);
        let Some(verdict) = self.verdict.clone() else { return Ok(Attempt::Done) };
        let fresh = retried || *fresh_rules;
        let (rules, list_error) = self.rules_for(kube, &view, &verdict, fresh).await;
        let (p, breaker_error) = self.plan_with_permit(kube, &view, &verdict, rules.as_deref(), now).await;
        if p.rules_missing && !fresh {
            // A rule the claim names is not in a cached listing: ask for the latest.
            *fresh_rules = true;
            return Ok(Attempt::Again);
        }
        if self.opted_out(&p) {
            return Ok(Attempt::Done);
        }
        if self.write_rules(kube, &p, false, now).await? == Attempt::Again {
            return Ok(Attempt::Again);
        }
        if let Some(patch) = &p.node_patch {
            match kube.node.patch(patch).await {
                Ok(_) => {}
                Err(ActionError::Conflict { .. }) => {
                    tracing::debug!(node = %self.node, "node changed since it was read; planning again");
                    return Ok(Attempt::Again);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if self.write_rules(kube, &p, true, now).await? == Attempt::Again {
            return Ok(Attempt::Again);
        }
        if let Some(patch) = &p.status_patch {
            kube.node.patch_status(patch).await?;
        }
        let events_written = self.write_events(kube, &view, &p, now).await;
        self.leave_breaker_if_done(kube, &p).await?;
        self.sync_gpu_places(kube, &p).await?;
        if let Some(e) = breaker_error {
            return Err(e.into());
        }
        if let Some(e) = list_error {
            return Err(e.into());
        }
        self.count_actions(&p, events_written);
        Ok(Attempt::Done)
    }

    /// Never acts on a verdict reached without the state the node carries: takes it
    /// back, then judges the last observation again (an event check, so no count
    /// advances).
    fn restore_and_judge_again(&mut self, view: &NodeView, now: SystemTime) {
        self.restore_from(view);
        self.judge_again(now);
    }

    /// Judges the last observation again, as an event check (no count advances), after
    /// the policy learnt something (state restored, device taints refused).
    fn judge_again(&mut self, now: SystemTime) {
        if let Some(obs) = self.last_obs.clone() {
            let verdict = self.policy.step(&obs, CheckKind::Event, now);
            let (health, since, reasons) = (verdict.health, verdict.since, verdict.reasons.clone());
            self.metrics.update(|v| {
                v.health = health;
                v.since = since;
                v.reasons = reasons;
            });
            self.verdict = Some(verdict);
        }
    }

    /// The plan, with a breaker's answer when it starts a new quarantine: the node
    /// breaker's for a cordon, the GPU breaker's for device taints. Without that answer
    /// nothing new is applied, but the condition still tells; the error is returned for
    /// the reconcile to be retried.
    async fn plan_with_permit(
        &mut self,
        kube: &Kube,
        view: &NodeView,
        verdict: &Verdict,
        rules: Option<&[RuleView]>,
        now: SystemTime,
    ) -> (Plan, Option<BreakerError>) {
        let mut devices = Devices { rules, permit: Permit::NotAsked, effect: self.settings.gpu_effect };
        let first = plan_with(view, verdict, self.mode, &Permit::NotAsked, &self.settings.names, now, &devices);
        if first.needs_permit {
            let (permit, error) = self.node_permit(kube, now).await;
            return (plan_with(view, verdict, self.mode, &permit, &self.settings.names, now, &devices), error);
        }
        if !first.needs_gpu_permit.is_empty() {
            let (permit, error) = self.gpu_permit(kube, &first.needs_gpu_permit, now).await;
            devices.permit = permit;
            let p = plan_with(view, verdict, self.mode, &Permit::NotAsked, &self.settings.names, now, &devices);
            return (p, error);
        }
        (first, None)
    }

    /// The node breaker's answer for a cordon.
    async fn node_permit(&mut self, kube: &Kube, now: SystemTime) -> (Permit, Option<BreakerError>) {
        match kube.breaker.acquire(now).await {
            Ok(decision) => {
                let breaker = BreakerView {
                    open: !decision.granted,
                    quarantined: decision.quarantined,
                    limit: decision.limit,
                    fleet: decision.fleet,
                };
                self.metrics.update(|v| v.breaker = Some(breaker));
                if decision.granted {
                    self.breaker_held = Some(true);
                } else {
                    tracing::warn!(
                        node = %self.node,
                        quarantined = decision.quarantined,
                        limit = decision.limit,
                        gpu_nodes = decision.fleet,
                        "circuit breaker open: not quarantining this node"
                    );
                }
                (decision.permit(), None)
            }
            Err(e) => (Permit::Unavailable, Some(e)),
        }
    }

    /// Whether the node opted out (logged once per opt-out).
    fn opted_out(&mut self, p: &Plan) -> bool {
        let opted_out = p.opted_out;
        self.metrics.update(|v| v.opted_out = opted_out);
        if !opted_out {
            self.opted_out_logged = false;
        } else if !self.opted_out_logged {
            let label = &self.settings.names.opt_out_label;
            tracing::info!(node = %self.node, label = %label, "node opted out: changing nothing on it");
            self.opted_out_logged = true;
        }
        opted_out
    }

    /// Writes the plan's Events (a failed one is logged, not retried) and logs each;
    /// returns how many were written.
    async fn write_events(&self, kube: &Kube, view: &NodeView, p: &Plan, now: SystemTime) -> u64 {
        let mut written = 0;
        for event in &p.events {
            match kube.node.event(view, event, now).await {
                Ok(()) => written += 1,
                Err(e) => tracing::warn!(node = %self.node, reason = event.reason, error = %e, "cannot write an Event"),
            }
        }
        for event in &p.events {
            tracing::info!(node = %self.node, reason = event.reason, "{}", event.message);
        }
        written
    }

    /// Gives the breaker's place back once the loop owns nothing on the node.
    async fn leave_breaker_if_done(&mut self, kube: &Kube, p: &Plan) -> Result<()> {
        if self.mode == Mode::Enforce && p.owns_nothing && self.breaker_held != Some(false) {
            kube.breaker.release().await?;
            self.breaker_held = Some(false);
            self.metrics.update(|v| {
                if let Some(b) = v.breaker.as_mut() {
                    b.open = false;
                }
            });
        }
        Ok(())
    }

    fn count_actions(&self, p: &Plan, events_written: u64) {
        let quarantined = self.mode == Mode::Enforce && !p.owns_nothing;
        let tainted = if self.mode == Mode::Enforce { p.gpus_owned.clone() } else { Vec::new() };
        self.metrics.update(|v| {
            for g in &mut v.gpus {
                g.quarantined = tainted.contains(&g.uuid);
            }
            for a in &p.actions {
                *v.actions.entry(a).or_default() += 1;
            }
            if events_written > 0 {
                *v.actions.entry("event").or_default() += events_written;
            }
            v.quarantined = quarantined;
        });
    }
}

/// Per-GPU health for the metrics: the signals seen, confirmed or still debouncing.
fn gpu_health(seen: &Observation, obs: &Assessment, verdict: &Verdict) -> Vec<GpuHealth> {
    obs.gpus
        .iter()
        .map(|g| {
            let model = seen.gpus.iter().find(|s| s.index == g.index).map(|s| s.model.clone());
            let mut signals: Vec<(String, bool)> = g
                .signals
                .iter()
                .map(|s| {
                    let code = s.kind.code();
                    let confirmed = verdict.reasons.iter().any(|r| r.gpu == Some(g.index) && r.code == code);
                    (code, confirmed)
                })
                .collect();
            for latch in verdict.latches.iter().filter(|l| l.reason.gpu == Some(g.index)) {
                signals.push((latch.reason.code.clone(), true));
            }
            signals.sort();
            signals.dedup();
            GpuHealth {
                index: g.index,
                uuid: g.uuid.clone(),
                model: model.unwrap_or_default(),
                signals,
                quarantined: false,
            }
        })
        .collect()
}
