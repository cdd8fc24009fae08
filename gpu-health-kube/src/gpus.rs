//! The loop's steps for GPUs held one by one: finding out whether the cluster serves
//! device taints, taking back what the loop's DeviceTaintRules hold after a restart,
//! listing them for a plan, writing the plan's rule writes, and giving back the GPU
//! breaker's places no rule holds any more. What these steps remember is their own
//! ([`GpuSteps`]); the driver lends them its [`Context`] and, where the policy must
//! learn something, its [`Judge`]. The GPU breaker is asked for a place where the node
//! breaker is, by the driver, so that both answers are read and shown one way.
//!
//! Requests per check (figures in `docs/health.md`): a node with no GPU held alone
//! sends none of these; a node holding a GPU alone lists its rules once per check, by
//! label selector from the API server's cache (its own one to a few objects); a node
//! the GPU breaker holds back also reads the GPU breaker's ConfigMap, and lists the GPU
//! nodes when its kept listing is too old or a place looks free, as for nodes.
//! Discovery runs once per exporter start (2 requests on a 1.37 cluster).

use std::time::SystemTime;

use gpu_health::device_rules::{RuleView, restored_from_rules};
use gpu_health::node_state::NodeView;
use gpu_health::plan::{Mode, Plan, RuleWrite};
use gpu_health::policy::DeviceTaints;
use gpu_health::verdict::Verdict;

use crate::device_rules::{RuleApiError, RuleVersion, Served};
use crate::error::Result;
use crate::parts::{Attempt, Context, Judge, Kube};

/// What the steps for GPUs held one by one remember between checks.
#[derive(Debug, Default)]
pub(crate) struct GpuSteps {
    /// Device taints were looked up (discovery, and the GPUs the loop's rules hold).
    restored: bool,
    /// The GPUs (UUIDs) whose places in the GPU breaker this node holds, as last synced.
    places: Option<Vec<String>>,
    /// Warnings about damaged rules already logged.
    damaged_logged: Vec<String>,
}

impl GpuSteps {
    /// The version rules are written in, when the cluster serves one.
    fn rule_version(kube: &Kube) -> Option<RuleVersion> {
        match kube.rules.served() {
            Some(Served::Version(v)) => Some(v),
            _ => None,
        }
    }

    /// Whether device taints were looked up ([`GpuSteps::restore_rules`] succeeded).
    pub(crate) fn restored(&self) -> bool {
        self.restored
    }

    /// Once: asks which version serves DeviceTaintRules and takes back the GPUs that the
    /// loop's rules hold and the node's claim does not (the exporter stopped between
    /// creating a rule and recording it). Returns whether the policy learnt anything; a
    /// failed request is tried again at the next reconcile.
    pub(crate) async fn restore_rules(
        &mut self,
        ctx: &Context,
        judge: &mut Judge,
        kube: &Kube,
        view: &NodeView,
    ) -> bool {
        let served = match kube.rules.discover().await {
            Ok(served) => served,
            Err(e) => {
                tracing::debug!(node = %ctx.node, error = %e, "cannot ask about device taints yet; asking later");
                return false;
            }
        };
        let version = match served {
            Served::Version(v) => v,
            Served::None(why) => {
                tracing::info!(node = %ctx.node, "{why}: failed GPUs are quarantined with their node");
                judge.set_device_taints(ctx, DeviceTaints::Unavailable(why), "none");
                self.restored = true;
                return true;
            }
        };
        let listed = match kube.rules.list(version, false).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::debug!(node = %ctx.node, error = %e, "cannot list the device taint rules yet; asking later");
                return false;
            }
        };
        judge.set_device_taints(ctx, DeviceTaints::Available, version.as_str());
        self.restored = true;
        let (ours, damaged) = kube.rules.read(&listed);
        self.warn_damaged(ctx, damaged);
        let held: Vec<String> = match view.claim(ctx.claim_key()) {
            Some(Ok(claim)) => claim.gpus.iter().filter(|g| !g.rules.is_empty()).map(|g| g.uuid.clone()).collect(),
            _ => Vec::new(),
        };
        let Some(restored) = restored_from_rules(&ours, &held, judge.table()) else { return true };
        let gpus: Vec<String> = restored.gpus.iter().map(|g| format!("GPU {}", g.index)).collect();
        tracing::info!(
            node = %ctx.node,
            gpus = %gpus.join(", "),
            "took back GPUs the health loop's DeviceTaintRules hold but its claim did not record"
        );
        judge.restore(ctx, restored);
        true
    }

    /// Logs each damaged rule once.
    fn warn_damaged(&mut self, ctx: &Context, damaged: Vec<String>) {
        for why in damaged {
            if !self.damaged_logged.contains(&why) {
                tracing::warn!(node = %ctx.node, "{why}");
                self.damaged_logged.push(why);
            }
        }
    }

    /// The loop's rules for a plan: listed while the claim or the verdict holds a GPU
    /// alone (an empty list otherwise: nothing to list); `None` without device taints.
    /// A listing that failed plans nothing for the rules and returns its error, for the
    /// reconcile to be retried once the rest is written.
    pub(crate) async fn rules_for(
        &mut self,
        ctx: &Context,
        kube: &Kube,
        view: &NodeView,
        verdict: &Verdict,
        fresh: bool,
    ) -> (Option<Vec<RuleView>>, Option<RuleApiError>) {
        let Some(version) = Self::rule_version(kube) else { return (None, None) };
        let claimed = matches!(view.claim(ctx.claim_key()), Some(Ok(c)) if !c.gpus.is_empty());
        if !claimed && verdict.gpus.is_empty() {
            return (Some(Vec::new()), None);
        }
        match kube.rules.list(version, fresh).await {
            Ok(listed) => {
                let (ours, damaged) = kube.rules.read(&listed);
                self.warn_damaged(ctx, damaged);
                (Some(ours), None)
            }
            Err(e) => (None, Some(e)),
        }
    }

    /// Writes the plan's creates and value changes (`deletes` false), or its deletes.
    /// A 409 asks for another read and plan; a rule the API server will not take makes
    /// the policy hold the node instead, and the plan is made again.
    pub(crate) async fn write_rules(
        &mut self,
        ctx: &Context,
        judge: &mut Judge,
        kube: &Kube,
        p: &Plan,
        deletes: bool,
        now: SystemTime,
    ) -> Result<Attempt> {
        let Some(version) = Self::rule_version(kube) else { return Ok(Attempt::Done) };
        for w in p.rules.iter().filter(|w| matches!(w, RuleWrite::Delete { .. }) == deletes) {
            let written = match w {
                RuleWrite::Create(rule) => kube.rules.create(version, rule).await,
                RuleWrite::SetValue { name, resource_version, value } => {
                    kube.rules.set_value(version, name, resource_version, value).await
                }
                RuleWrite::Delete { name, uid, resource_version } => {
                    kube.rules.delete(version, name, uid, resource_version).await
                }
            };
            match written {
                Ok(()) => {}
                Err(e) if e.is_conflict() => {
                    tracing::debug!(node = %ctx.node, error = %e, "a rule changed since it was read; planning again");
                    return Ok(Attempt::Again);
                }
                Err(e) if e.refuses_device_taints() && !deletes => {
                    Self::refuse_device_taints(ctx, judge, &e, now);
                    return Ok(Attempt::Again);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Attempt::Done)
    }

    /// The API server will not take the loop's device taints: from now on the policy
    /// holds the node where it would have held a GPU, and says why.
    fn refuse_device_taints(ctx: &Context, judge: &mut Judge, e: &RuleApiError, now: SystemTime) {
        let why = format!("the Kubernetes API refused the health loop's device taint ({e})");
        tracing::warn!(node = %ctx.node, "{why}: failed GPUs are quarantined with their node until the exporter restarts");
        judge.set_device_taints(ctx, DeviceTaints::Unavailable(why), "none");
        judge.judge_again(ctx, now);
    }

    /// Gives back this node's GPU places that no rule holds any more.
    pub(crate) async fn sync_gpu_places(&mut self, ctx: &Context, kube: &Kube, p: &Plan) -> Result<()> {
        if ctx.mode != Mode::Enforce || p.rules_unknown || Self::rule_version(kube).is_none() {
            return Ok(());
        }
        let mut owned = p.gpus_owned.clone();
        owned.sort();
        if self.places.as_ref() == Some(&owned) {
            return Ok(());
        }
        kube.breaker.release_gpus(&owned).await?;
        self.places = Some(owned);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_health::device_rules::{Effect, Hold, desired_rule};
    use gpu_health::observation::DraDevice;
    use gpu_health::verdict::HeldGpu;
    use gpu_health::{fixtures, time};
    use serde_json::json;
    use test_support::apiserver::{ApiServer, Running};
    use test_support::cluster::registered_node;

    const NODE: &str = "gpu-01";
    const GPUS: &str = "gpu-health-breaker-gpus";

    fn start(api: &Running) -> (GpuSteps, Context, Judge, Kube) {
        api.add_node(registered_node(NODE));
        let settings = crate::config::tests::settings(&["--health.namespace", "gpu-telemetry"]);
        let (ctx, judge, kube) = crate::parts::parts_for_test(settings, NODE, &api.url());
        (GpuSteps::default(), ctx, judge, kube)
    }

    fn rule_lists(api: &Running) -> usize {
        api.requests().iter().filter(|r| r.method == "GET" && r.path.ends_with("/devicetaintrules")).count()
    }

    fn device(i: u32) -> DraDevice {
        DraDevice { driver: "gpu.nvidia.com".into(), pool: NODE.into(), device: format!("gpu-{i}") }
    }

    /// GPU 3 held alone.
    fn gpu_3_held() -> Verdict {
        let reason = gpu_health::verdict::Reason { gpu: Some(3), uuid: "GPU-3".into(), ..fixtures::xid79_reason() };
        let held = HeldGpu {
            index: 3,
            uuid: "GPU-3".into(),
            since: SystemTime::now(),
            reasons: vec![reason.clone()],
            devices: vec![device(3)],
        };
        Verdict { reasons: vec![reason], gpus: vec![held], ..fixtures::unhealthy(SystemTime::now()) }
    }

    #[tokio::test]
    async fn without_device_taints_failed_gpus_are_held_with_their_node() {
        let api = ApiServer::open().run();
        let (mut l, ctx, mut judge, kube) = start(&api);
        assert!(l.restore_rules(&ctx, &mut judge, &kube, &NodeView::default()).await, "the policy learnt something");
        assert!(l.restored());
        assert_eq!(ctx.metrics.view().device_taints, "none");
        assert_eq!(GpuSteps::rule_version(&kube), None);
        let (rules, error) = l.rules_for(&ctx, &kube, &NodeView::default(), &gpu_3_held(), false).await;
        assert!(rules.is_none() && error.is_none());
        assert_eq!(rule_lists(&api), 0, "nothing to list where nothing is served");
    }

    #[tokio::test]
    async fn rules_are_listed_only_while_a_gpu_is_held_alone() {
        let api = ApiServer::open().run();
        api.serve_resource_api(&["v1"], &["v1"]);
        let (mut l, ctx, mut judge, kube) = start(&api);
        let names = ctx.settings.names.clone();
        let hold = Hold {
            index: 3,
            uuid: "GPU-3",
            device: &device(3),
            value: "Xid79",
            effect: Effect::NoSchedule,
            since: SystemTime::now(),
        };
        api.add_device_taint_rule(serde_json::to_value(desired_rule(&names, NODE, hold)).unwrap());
        assert!(l.restore_rules(&ctx, &mut judge, &kube, &NodeView::default()).await);
        assert_eq!(ctx.metrics.view().device_taints, "v1");
        assert_eq!(GpuSteps::rule_version(&kube), Some(RuleVersion::V1));
        let listed = rule_lists(&api);

        let whole_node = fixtures::unhealthy(SystemTime::now());
        let (rules, error) = l.rules_for(&ctx, &kube, &NodeView::default(), &whole_node, false).await;
        assert_eq!((rules, error.is_none()), (Some(Vec::new()), true));
        assert_eq!(rule_lists(&api), listed, "no GPU held alone, no listing");

        let (rules, error) = l.rules_for(&ctx, &kube, &NodeView::default(), &gpu_3_held(), true).await;
        assert!(error.is_none());
        let rules = rules.unwrap();
        assert_eq!(rules.iter().map(|r| (r.gpu_index, r.value.as_str())).collect::<Vec<_>>(), [(3, "Xid79")]);
        assert_eq!(rule_lists(&api), listed + 1);
        let last = api.requests().into_iter().rev().find(|r| r.path.ends_with("/devicetaintrules")).unwrap();
        assert!(!last.query.contains("resourceVersion=0"), "fresh when asked: {}", last.query);
    }

    #[tokio::test]
    async fn gpu_places_no_rule_holds_are_given_back_once() {
        let api = ApiServer::open().run();
        api.serve_resource_api(&["v1"], &["v1"]);
        let (mut l, ctx, mut judge, kube) = start(&api);
        assert!(l.restore_rules(&ctx, &mut judge, &kube, &NodeView::default()).await);
        let stamp = json!(time::format(SystemTime::now()));
        let places = json!({"gpu-01_GPU-1": stamp, "gpu-01_GPU-2": stamp, "gpu-02_GPU-9": stamp});
        api.put_config_map("gpu-telemetry", GPUS, places);
        let plan = Plan { gpus_owned: vec!["GPU-2".into()], ..Plan::default() };
        l.sync_gpu_places(&ctx, &kube, &plan).await.unwrap();
        let left = api.config_map("gpu-telemetry", GPUS).unwrap()["data"].clone();
        let keys: Vec<&String> = left.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["gpu-01_GPU-2", "gpu-02_GPU-9"], "another node's places are not this node's to give");
        let writes = api.writes().len();
        l.sync_gpu_places(&ctx, &kube, &plan).await.unwrap();
        assert_eq!(api.writes().len(), writes, "the same places are not synced twice");
    }
}
