//! The parts of a running loop that its steps share: who the loop is ([`Context`]), its
//! API handles ([`Kube`]), its judge ([`Judge`]: the policy and what it last saw), and
//! what a reconcile attempt came to ([`Attempt`]), and how they are made ([`connect`],
//! [`mode_of`]). The driver (`driver.rs`) owns them;
//! the steps for GPUs held one by one (`gpus.rs`) borrow them, so neither of the two
//! modules imports the other's loop.

use std::sync::Arc;
use std::time::SystemTime;

use gpu_health::plan::Mode;
use gpu_health::policy::{CheckKind, DeviceTaints, PolicyState, Restored};
use gpu_health::signals::Assessment;
use gpu_health::verdict::Verdict;
use gpu_health::view::HealthMetrics;
use gpu_health::xid;

use crate::actions::{self, NodeApi};
use crate::breaker::{self, Breaker};
use crate::config::HealthSettings;
use crate::device_rules::DeviceRules;
use crate::retry::{self, Backoff};

/// Whether a reconcile attempt finished or must read and plan again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Done,
    Again,
}

/// The API handles, when an API server is configured.
#[derive(Debug, Clone)]
pub(crate) struct Kube {
    pub(crate) node: NodeApi,
    pub(crate) breaker: Breaker,
    pub(crate) rules: DeviceRules,
}

/// Who the loop is and how it acts: fixed at start, read by every step.
pub(crate) struct Context {
    pub(crate) settings: HealthSettings,
    pub(crate) node: String,
    pub(crate) mode: Mode,
    pub(crate) metrics: Arc<HealthMetrics>,
}

impl Context {
    /// The annotation the loop keeps its claim in (another one in dry-run).
    pub(crate) fn claim_key(&self) -> &str {
        if self.mode == Mode::DryRun {
            &self.settings.names.dry_run_annotation
        } else {
            &self.settings.names.state_annotation
        }
    }
}

/// The policy, and what it last saw and judged.
pub(crate) struct Judge {
    pub(crate) policy: PolicyState,
    pub(crate) verdict: Option<Verdict>,
    pub(crate) last_obs: Option<Assessment>,
}

impl Judge {
    pub(crate) fn new(settings: &HealthSettings) -> Judge {
        Judge { policy: PolicyState::new(settings.policy, settings.xids.clone()), verdict: None, last_obs: None }
    }

    /// The XID table the policy classes codes by.
    pub(crate) fn table(&self) -> &xid::XidTable {
        self.policy.table()
    }

    /// How many GPUs the last observation saw.
    pub(crate) fn gpus_seen(&self) -> u32 {
        self.last_obs.as_ref().map_or(0, |o| o.gpus.len()) as u32
    }

    /// Tells the policy whether the cluster can hold a GPU on its own; the metrics say
    /// which API version does it (`none`).
    pub(crate) fn set_device_taints(&mut self, ctx: &Context, taints: DeviceTaints, served: &'static str) {
        self.policy.set_device_taints(taints);
        ctx.metrics.update(|v| v.device_taints = served);
    }

    /// Takes back state kept on the node (its claim, the loop's rules), logging what the
    /// policy made of it.
    pub(crate) fn restore(&mut self, ctx: &Context, restored: Restored) {
        for note in self.policy.restore(restored) {
            tracing::info!(node = %ctx.node, "{note}");
        }
    }

    /// Judges the last observation again, as an event check (no count advances), after
    /// the policy learnt something (state restored, device taints refused).
    pub(crate) fn judge_again(&mut self, ctx: &Context, now: SystemTime) {
        if let Some(obs) = self.last_obs.clone() {
            let verdict = self.policy.step(&obs, CheckKind::Event, now);
            let (health, since, reasons) = (verdict.health, verdict.since, verdict.reasons.clone());
            ctx.metrics.update(|v| {
                v.health = health;
                v.since = since;
                v.reasons = reasons;
            });
            self.verdict = Some(verdict);
        }
    }
}

/// The API handles for `node`, from the client configuration `config`.
pub(crate) fn connect(
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

/// The parts of a loop on `node` with `settings`, talking to the API server at `url`,
/// not started: for the unit tests of its steps.
#[cfg(test)]
pub(crate) fn parts_for_test(settings: HealthSettings, node: &str, url: &str) -> (Context, Judge, Kube) {
    let metrics = Arc::new(HealthMetrics::default());
    let config = kube::Config::new(url.parse().expect("a URL"));
    let kube = connect(config, &settings, node, metrics.clone()).expect("a client");
    let mode = mode_of(&settings);
    let judge = Judge::new(&settings);
    (Context { settings, node: node.to_string(), mode, metrics }, judge, kube)
}

/// How the loop acts, from its settings: dry-run over everything, then auto-cordon.
pub(crate) fn mode_of(settings: &HealthSettings) -> Mode {
    if settings.dry_run {
        Mode::DryRun
    } else if settings.auto_cordon {
        Mode::Enforce
    } else {
        Mode::ConditionOnly
    }
}
