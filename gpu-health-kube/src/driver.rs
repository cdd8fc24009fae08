//! The loop driver: starts the loop ([`start_offline`], [`start_with_config`]), feeds
//! each observation to the pure core (`gpu-health`: signals, policy, plan) and acts on
//! the plan through the API handles (the Node, the breaker's ConfigMaps, the
//! DeviceTaintRules). When it checks and how a reconcile reads, plans, writes and
//! retries is told in the crate's docs; the steps for GPUs held one by one are in
//! `gpus.rs`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::actions::ActionError;
use crate::breaker::BreakerError;
use crate::config::HealthSettings;
use crate::error::{Cause, HealthError, Result};
use crate::gpus::GpuSteps;
use crate::parts::{Attempt, Context, Judge, Kube, connect, mode_of};
use crate::retry::Backoff;
use gpu_health::device_rules::RuleView;
use gpu_health::node_state::NodeView;
use gpu_health::observation::Observation;
use gpu_health::plan::{Devices, Mode, Permit, Plan, plan_with};
use gpu_health::policy::CheckKind;
use gpu_health::signals::{self, Assessment};
use gpu_health::verdict::{Health, Verdict};
use gpu_health::view::{GpuHealth, HealthMetrics};
use gpu_health::{time, xid};

/// What the loop watches: anything that yields an observation (the exporter's
/// snapshot of one collection cycle).
pub trait Source: Send + Sync + 'static {
    fn observe(&self) -> Observation;
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
    let health = HealthLoop::new(settings, node, mode, kube, metrics.clone());
    let task = tokio::spawn(health.run(snapshots));
    HealthHandle { metrics, task }
}

/// What the loop has learnt of its Node beyond the claim it reads each time.
#[derive(Default)]
struct NodeRecord {
    /// The claim was read back from the Node.
    restored: bool,
    /// Whether this node holds a place in the node breaker (`None`: not known).
    breaker_held: Option<bool>,
    /// The operator's reset annotation last taken.
    reset_ack: Option<String>,
    /// The opt-out was logged (once per opt-out).
    opted_out_logged: bool,
}

/// Reconciles that failed, and when to try again.
#[derive(Default)]
struct Retrying {
    failures: u32,
    retry_at: Option<Instant>,
    /// The last intent logged while writes were impossible, to log each once.
    last_intent: Option<String>,
}

/// Which breaker a new quarantine asks for a place.
#[derive(Debug, Clone, Copy)]
enum Asking<'a> {
    /// The node breaker, for a cordon.
    Node,
    /// The GPU breaker, for device taints on these GPUs (UUIDs).
    Gpus(&'a [String]),
}

/// The loop's state between checks.
pub(crate) struct HealthLoop {
    ctx: Context,
    kube: Option<Kube>,
    judge: Judge,
    record: NodeRecord,
    retrying: Retrying,
    /// The steps for GPUs held one by one keep their own state (`gpus.rs`).
    gpus: GpuSteps,
}

impl HealthLoop {
    fn new(
        settings: HealthSettings,
        node: String,
        mode: Mode,
        kube: Option<Kube>,
        metrics: Arc<HealthMetrics>,
    ) -> Self {
        HealthLoop {
            judge: Judge::new(&settings),
            ctx: Context { settings, node, mode, metrics },
            kube,
            record: NodeRecord::default(),
            retrying: Retrying::default(),
            gpus: GpuSteps::default(),
        }
    }

    async fn run<S: Source>(mut self, mut snapshots: watch::Receiver<Arc<S>>) {
        let interval = self.ctx.settings.check_interval;
        let mut next_check: Option<Instant> = None;
        let mut current = snapshots.borrow_and_update().clone();
        loop {
            let seen = current.observe();
            let obs = signals::assess(&seen, &self.ctx.settings.thresholds);
            if next_check.is_none() && obs.observable {
                self.check(&seen, &obs, CheckKind::Scheduled).await;
                next_check = Some(Instant::now() + interval);
            } else if obs.observable
                && self.judge.last_obs.as_ref().is_some_and(|last| {
                    let table = self.judge.table();
                    obs.has_news_since(last, |code| table.class(code) != xid::XidClass::Event)
                })
            {
                self.check(&seen, &obs, CheckKind::Event).await;
            }
            self.judge.last_obs = Some(obs);
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
                    let obs = signals::assess(&seen, &self.ctx.settings.thresholds);
                    self.check(&seen, &obs, CheckKind::Scheduled).await;
                    next_check = Some(Instant::now() + interval);
                }
                () = tokio::time::sleep_until(self.retrying.retry_at.unwrap_or(far)), if self.retrying.retry_at.is_some() => {
                    self.retrying.retry_at = None;
                    self.reconcile_now().await;
                }
            }
        }
    }

    async fn check(&mut self, seen: &Observation, obs: &Assessment, kind: CheckKind) {
        self.judge.last_obs = Some(obs.clone());
        self.ensure_restored().await;
        let verdict = self.judge.policy.step(obs, kind, SystemTime::now());
        let node = self.ctx.node.as_str();
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
        let before = self.ctx.metrics.view().gpus;
        for g in &mut gpus {
            g.quarantined = before.iter().any(|b| b.uuid == g.uuid && b.quarantined);
        }
        let (health, since, reasons) = (verdict.health, verdict.since, verdict.reasons.clone());
        self.ctx.metrics.update(|v| {
            *v.checks.entry(kind_label).or_default() += 1;
            v.health = health;
            v.since = since;
            v.reasons = reasons;
            v.gpus = gpus;
        });
        self.judge.verdict = Some(verdict);
        self.reconcile_now().await;
    }

    /// Reads the claim an earlier run left on the Node, once.
    async fn ensure_restored(&mut self) {
        let Some(kube) = self.kube.clone() else { return };
        if self.record.restored {
            return;
        }
        let node = match kube.node.get_once().await {
            Ok(node) => node,
            Err(e) => {
                tracing::debug!(node = %self.ctx.node, error = %e, "cannot read the node yet; restoring later");
                return;
            }
        };
        let view = NodeView::from_node(&node, &self.ctx.settings.names);
        self.restore_from(&view);
        self.gpus.restore_rules(&self.ctx, &mut self.judge, &kube, &view).await;
    }

    fn restore_from(&mut self, view: &NodeView) {
        self.record.restored = true;
        match view.claim(self.ctx.claim_key()) {
            None => {}
            Some(Err(e)) => {
                tracing::warn!(node = %self.ctx.node, error = %e, "ignoring an unreadable claim on the node")
            }
            Some(Ok(claim)) => {
                let restored = claim.restored(&view.boot_id);
                let reasons: Vec<String> = claim.reasons.iter().map(|r| r.describe()).collect();
                tracing::info!(
                    node = %self.ctx.node,
                    state = %claim.state,
                    since = %time::format(claim.since),
                    reasons = %reasons.join("; "),
                    "took back the health state recorded on the node"
                );
                self.judge.restore(&self.ctx, restored);
                self.record.breaker_held = Some(claim.applied.anything());
            }
        }
    }

    async fn reconcile_now(&mut self) {
        let Some(verdict) = self.judge.verdict.clone() else { return };
        if self.kube.is_none() {
            self.report_intent(&verdict, "report-only mode");
            return;
        }
        match self.reconcile().await {
            Ok(()) => {
                if self.retrying.failures > 0 {
                    tracing::info!(node = %self.ctx.node, "Kubernetes API reachable again; node updated");
                }
                self.retrying = Retrying::default();
                self.ctx.metrics.update(|v| v.api = "connected");
            }
            Err(e) => {
                let verdict = self.judge.verdict.clone().unwrap_or(verdict);
                self.retrying.failures = self.retrying.failures.saturating_add(1);
                let delay = Backoff { base: Duration::from_secs(1), ..Backoff::default() }
                    .delay(self.retrying.failures)
                    .min(self.ctx.settings.check_interval);
                self.retrying.retry_at = Some(Instant::now() + delay);
                let retry_in_ms = delay.as_millis() as u64;
                let node = self.ctx.node.clone();
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
                self.ctx.metrics.update(|v| v.api = api);
            }
        }
    }

    /// Logs, once per change, what the loop would do but cannot.
    fn report_intent(&mut self, verdict: &Verdict, why: &str) {
        let settings = &self.ctx.settings;
        let intent = match verdict.health {
            Health::Unknown => return,
            Health::Healthy => "keep or make the node schedulable, condition GPUHealthy=True".to_string(),
            Health::Unhealthy => {
                let primary = verdict.primary_code();
                let key = &settings.names.taint_key;
                let scheduling = match self.ctx.mode {
                    Mode::Enforce if !verdict.holds_node() => {
                        let effect = settings.gpu_effect.as_str();
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
        if self.retrying.last_intent.as_deref() != Some(intent.as_str()) {
            let (node, mode) = (&self.ctx.node, self.ctx.mode.as_str());
            if verdict.health == Health::Unhealthy {
                tracing::warn!(node = %node, mode, "{why}: would {intent}");
            } else {
                tracing::info!(node = %node, mode, "{why}: would {intent}");
            }
            self.retrying.last_intent = Some(intent);
        }
    }

    /// Applies an operator's `<domain>/gpu-health-reset` annotation once; its effect
    /// shows from the next check on.
    fn take_reset_acknowledgement(&mut self, view: &NodeView) {
        let Some(text) = view.annotations.get(&self.ctx.settings.names.reset_annotation) else { return };
        let Some(at) = time::parse(text) else {
            if self.record.reset_ack.as_deref() != Some(text.as_str()) {
                tracing::warn!(node = %self.ctx.node, value = %text, "reset annotation is not an RFC 3339 time; ignored");
                self.record.reset_ack = Some(text.clone());
            }
            return;
        };
        if self.record.reset_ack.as_deref() == Some(text.as_str()) {
            return;
        }
        self.record.reset_ack = Some(text.clone());
        for note in self.judge.policy.acknowledge_reset(at) {
            tracing::info!(node = %self.ctx.node, "{note}");
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
        Err(HealthError::Contended(self.ctx.node.clone(), ATTEMPTS))
    }

    /// One read, plan and write. Rule creates and value changes go before the node
    /// patch, deletes after it (see [`Plan::rules`]).
    async fn reconcile_once(&mut self, kube: &Kube, retried: bool, fresh_rules: &mut bool) -> Result<Attempt> {
        // From the API server's cache first; after a conflict, the latest version.
        let node = kube.node.get(retried).await?;
        let view = NodeView::from_node(&node, &self.ctx.settings.names);
        let now = SystemTime::now();
        if !self.record.restored {
            self.restore_and_judge_again(&view, now);
        }
        if !self.gpus.restored() && self.gpus.restore_rules(&self.ctx, &mut self.judge, kube, &view).await {
            self.judge.judge_again(&self.ctx, now);
        }
        self.take_reset_acknowledgement(&view);
        let Some(verdict) = self.judge.verdict.clone() else { return Ok(Attempt::Done) };
        let fresh = retried || *fresh_rules;
        let (rules, list_error) = self.gpus.rules_for(&self.ctx, kube, &view, &verdict, fresh).await;
        let (p, breaker_error) = self.plan_with_permit(kube, &view, &verdict, rules.as_deref(), now).await;
        if p.rules_missing && !fresh {
            // A rule the claim names is not in a cached listing: ask for the latest.
            *fresh_rules = true;
            return Ok(Attempt::Again);
        }
        if self.opted_out(&p) {
            return Ok(Attempt::Done);
        }
        if self.gpus.write_rules(&self.ctx, &mut self.judge, kube, &p, false, now).await? == Attempt::Again {
            return Ok(Attempt::Again);
        }
        if let Some(patch) = &p.node_patch {
            match kube.node.patch(patch).await {
                Ok(_) => {}
                Err(ActionError::Conflict { .. }) => {
                    tracing::debug!(node = %self.ctx.node, "node changed since it was read; planning again");
                    return Ok(Attempt::Again);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if self.gpus.write_rules(&self.ctx, &mut self.judge, kube, &p, true, now).await? == Attempt::Again {
            return Ok(Attempt::Again);
        }
        if let Some(patch) = &p.status_patch {
            kube.node.patch_status(patch).await?;
        }
        let events_written = self.write_events(kube, &view, &p, now).await;
        self.leave_breaker_if_done(kube, &p).await?;
        self.gpus.sync_gpu_places(&self.ctx, kube, &p).await?;
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
        self.judge.judge_again(&self.ctx, now);
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
        let (mode, names) = (self.ctx.mode, &self.ctx.settings.names);
        let mut devices = Devices { rules, permit: Permit::NotAsked, effect: self.ctx.settings.gpu_effect };
        let first = plan_with(view, verdict, mode, &Permit::NotAsked, names, now, &devices);
        if first.needs_permit {
            let (permit, error) = self.permit(kube, Asking::Node, now).await;
            let names = &self.ctx.settings.names;
            return (plan_with(view, verdict, mode, &permit, names, now, &devices), error);
        }
        if !first.needs_gpu_permit.is_empty() {
            let (permit, error) = self.permit(kube, Asking::Gpus(&first.needs_gpu_permit), now).await;
            devices.permit = permit;
            let names = &self.ctx.settings.names;
            return (plan_with(view, verdict, mode, &Permit::NotAsked, names, now, &devices), error);
        }
        (first, None)
    }

    /// A breaker's answer to `asking`, as the plan's permit: what it said is shown in
    /// the metrics (one view of each breaker) and logged when it refuses; a breaker that
    /// could not be asked permits nothing and its error is returned.
    async fn permit(&mut self, kube: &Kube, asking: Asking<'_>, now: SystemTime) -> (Permit, Option<BreakerError>) {
        let asked = match asking {
            Asking::Node => kube.breaker.acquire(now).await,
            Asking::Gpus(wanted) => kube.breaker.acquire_gpus(wanted, self.judge.gpus_seen(), now).await,
        };
        let decision = match asked {
            Ok(decision) => decision,
            Err(e) => return (Permit::Unavailable, Some(e)),
        };
        let view = decision.view();
        self.ctx.metrics.update(|v| match asking {
            Asking::Node => v.breaker = Some(view),
            Asking::Gpus(_) => v.gpu_breaker = Some(view),
        });
        let node = &self.ctx.node;
        match asking {
            Asking::Node if decision.granted => self.record.breaker_held = Some(true),
            Asking::Node => tracing::warn!(
                node = %node,
                quarantined = decision.quarantined,
                limit = decision.limit,
                gpu_nodes = decision.fleet,
                "circuit breaker open: not quarantining this node"
            ),
            Asking::Gpus(_) if decision.granted => {}
            Asking::Gpus(_) => tracing::warn!(
                node = %node,
                held_gpus = decision.quarantined,
                limit = decision.limit,
                fleet_gpus = decision.fleet,
                "GPU circuit breaker open: not tainting this node's GPUs"
            ),
        }
        (decision.permit(), None)
    }

    /// Whether the node opted out (logged once per opt-out).
    fn opted_out(&mut self, p: &Plan) -> bool {
        let opted_out = p.opted_out;
        self.ctx.metrics.update(|v| v.opted_out = opted_out);
        if !opted_out {
            self.record.opted_out_logged = false;
        } else if !self.record.opted_out_logged {
            let label = &self.ctx.settings.names.opt_out_label;
            tracing::info!(node = %self.ctx.node, label = %label, "node opted out: changing nothing on it");
            self.record.opted_out_logged = true;
        }
        opted_out
    }

    /// Writes the plan's Events (a failed one is logged, not retried) and logs each;
    /// returns how many were written.
    async fn write_events(&self, kube: &Kube, view: &NodeView, p: &Plan, now: SystemTime) -> u64 {
        let node = &self.ctx.node;
        let mut written = 0;
        for event in &p.events {
            match kube.node.event(view, event, now).await {
                Ok(()) => written += 1,
                Err(e) => tracing::warn!(node = %node, reason = event.reason, error = %e, "cannot write an Event"),
            }
        }
        for event in &p.events {
            tracing::info!(node = %node, reason = event.reason, "{}", event.message);
        }
        written
    }

    /// Gives the breaker's place back once the loop owns nothing on the node.
    async fn leave_breaker_if_done(&mut self, kube: &Kube, p: &Plan) -> Result<()> {
        if self.ctx.mode == Mode::Enforce && p.owns_nothing && self.record.breaker_held != Some(false) {
            kube.breaker.release().await?;
            self.record.breaker_held = Some(false);
            self.ctx.metrics.update(|v| {
                if let Some(b) = v.breaker.as_mut() {
                    b.open = false;
                }
            });
        }
        Ok(())
    }

    fn count_actions(&self, p: &Plan, events_written: u64) {
        let enforce = self.ctx.mode == Mode::Enforce;
        let quarantined = enforce && !p.owns_nothing;
        let tainted = if enforce { p.gpus_owned.clone() } else { Vec::new() };
        self.ctx.metrics.update(|v| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::settings;
    use gpu_health::fixtures;
    use gpu_health::observation::{Ecc, GpuReadings, GpuState, Nvml};
    use gpu_health::verdict::{HeldGpu, Latch, Needs, Reason};

    struct Seen(Observation);

    impl Source for Seen {
        fn observe(&self) -> Observation {
            self.0.clone()
        }
    }

    /// Two answering GPUs, XID 79 seen on GPU 0.
    fn observation() -> Observation {
        let gpu = |index: u32| GpuReadings {
            index,
            uuid: format!("GPU-{index}"),
            model: "NVIDIA H100 80GB HBM3".into(),
            state: GpuState::Ok,
            ..GpuReadings::default()
        };
        let mut gpus = vec![gpu(0), gpu(1)];
        gpus[0].xid_counts.insert(79, 1);
        Observation { generation: 1, nvml: Nvml::Up { driver_version: "550.90.07".into(), read: true }, gpus }
    }

    fn offline(args: &[&str]) -> HealthLoop {
        let s = settings(args);
        let mode = mode_of(&s);
        HealthLoop::new(s, "gpu-01".into(), mode, None, Arc::new(HealthMetrics::default()))
    }

    #[test]
    fn the_mode_follows_the_flags_dry_run_first() {
        assert_eq!(mode_of(&settings(&[])), Mode::Enforce);
        assert_eq!(mode_of(&settings(&["--health.auto-cordon", "false"])), Mode::ConditionOnly);
        let both = settings(&["--health.auto-cordon", "true", "--health.dry-run", "true"]);
        assert_eq!(mode_of(&both), Mode::DryRun);
    }

    #[test]
    fn what_the_loop_would_do_is_logged_once_per_change() {
        let mut l = offline(&[]);
        let sick = fixtures::unhealthy(SystemTime::now());
        l.report_intent(&sick, "report-only mode");
        let intent = l.retrying.last_intent.clone().unwrap();
        assert!(
            intent.starts_with(
                "cordon, taint gpu-telemetry.io/gpu-unhealthy=Xid79:NoSchedule, condition GPUHealthy=False ("
            ),
            "{intent}"
        );
        l.report_intent(&sick, "report-only mode");
        assert_eq!(l.retrying.last_intent.as_deref(), Some(intent.as_str()));

        let reason = Reason { gpu: Some(3), uuid: "GPU-3".into(), ..fixtures::xid79_reason() };
        let held = HeldGpu {
            index: 3,
            uuid: "GPU-3".into(),
            since: SystemTime::now(),
            reasons: vec![reason.clone()],
            devices: vec![],
        };
        let gpu = Verdict { reasons: vec![reason], gpus: vec![held], ..sick.clone() };
        l.report_intent(&gpu, "report-only mode");
        let intent = l.retrying.last_intent.clone().unwrap();
        assert!(
            intent.starts_with("device-taint GPU 3 (GPU-3) gpu-telemetry.io/gpu-unhealthy=Xid79:NoSchedule, "),
            "{intent}"
        );

        l.report_intent(&fixtures::healthy(), "report-only mode");
        assert_eq!(
            l.retrying.last_intent.as_deref(),
            Some("keep or make the node schedulable, condition GPUHealthy=True")
        );
        let unknown = Verdict { health: Health::Unknown, ..fixtures::healthy() };
        l.report_intent(&unknown, "report-only mode");
        assert_eq!(
            l.retrying.last_intent.as_deref(),
            Some("keep or make the node schedulable, condition GPUHealthy=True")
        );

        let mut dry = offline(&["--health.dry-run", "true"]);
        dry.report_intent(&sick, "report-only mode");
        assert!(
            dry.retrying.last_intent.unwrap().starts_with("record a dry-run annotation of condition GPUHealthy=False")
        );
        let mut condition_only = offline(&["--health.auto-cordon", "false"]);
        condition_only.report_intent(&sick, "report-only mode");
        assert!(condition_only.retrying.last_intent.unwrap().starts_with("condition GPUHealthy=False"));
    }

    #[test]
    fn per_gpu_metrics_tell_confirmed_signals_from_debouncing_ones() {
        let mut seen = observation();
        seen.gpus[0].ecc = Some(Ecc { corrected: 0, uncorrected: 1 });
        let assessed = signals::assess(&seen, &settings(&[]).thresholds);
        let ecc = Reason { code: "EccUncorrected".into(), needs: Needs::Nothing, ..fixtures::xid79_reason() };
        let latch = Latch {
            reason: Reason { uuid: "GPU-0".into(), ..fixtures::xid79_reason() },
            since: SystemTime::now(),
            ecc_baseline: Some(0),
            driver: None,
            seen_gone: false,
        };
        let sick = Verdict { reasons: vec![ecc], latches: vec![latch], ..fixtures::unhealthy(SystemTime::now()) };
        let confirmed = gpu_health(&seen, &assessed, &sick);
        assert_eq!(confirmed.len(), 2);
        assert_eq!((confirmed[0].index, confirmed[0].uuid.as_str()), (0, "GPU-0"));
        assert_eq!(confirmed[0].model, "NVIDIA H100 80GB HBM3");
        let both = [("EccUncorrected".to_string(), true), ("Xid79".to_string(), true)];
        assert_eq!(confirmed[0].signals, both, "a latched reason counts as confirmed");
        assert!(confirmed[1].signals.is_empty());
        assert!(confirmed.iter().all(|g| !g.quarantined), "the reconcile says what is quarantined");
        let debouncing = gpu_health(&seen, &assessed, &fixtures::healthy());
        assert_eq!(debouncing[0].signals, [("EccUncorrected".to_string(), false)]);
    }

    #[tokio::test]
    async fn a_report_only_loop_judges_and_exports_but_has_nothing_to_write_to() {
        let (_publish, observations) = watch::channel(Arc::new(Seen(observation())));
        let handle = start_offline(settings(&[]), "gpu-01".into(), observations);
        let metrics = handle.metrics.clone();
        for _ in 0..500 {
            if metrics.view().health == Health::Unhealthy {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let v = metrics.view();
        assert_eq!((v.health, v.api, v.mode), (Health::Unhealthy, "off", "enforce"));
        assert_eq!(v.reasons[0].code, "Xid79");
        assert!(!v.quarantined, "nothing applied without an API server");
        assert!(v.api_errors.is_empty());
        handle.stop();
    }
}
