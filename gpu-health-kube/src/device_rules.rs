//! The API edge of device taints: which `resource.k8s.io` version serves
//! DeviceTaintRules, and the loop's own rules listed, created, retagged and deleted.
//!
//! **Version.** DeviceTaintRule is `v1alpha3` in Kubernetes 1.33 to 1.35 (behind feature
//! gates that are off by default), `v1beta2` in 1.36 and `v1` in 1.37 (KEP-5055 is GA
//! there); the three schemas of the fields the loop writes (selector by driver,
//! pool and device; one taint) are the same. The loop asks the API server once, at its
//! first reconcile: `GET /apis/resource.k8s.io` for the versions served, then
//! `GET /apis/resource.k8s.io/<version>` for the first of `v1`, `v1beta2`, `v1alpha3`
//! it serves, until one lists `devicetaintrules` (2 requests on a 1.37 cluster, once
//! per exporter start). A cluster that serves none has no per-GPU quarantine: the
//! policy holds the node instead and the condition says why. A rule request answered
//! 403, 404 or 422 (a policy refused it, the version went away in an upgrade) turns
//! per-GPU quarantine off on the node until the exporter restarts, which asks again. The
//! objects are built as `resource.k8s.io/v1` types and converted field for field to the
//! version served.
//!
//! **Requests.** The loop's rules are listed by label selector, from the API server's
//! cache (`resourceVersion=0`) unless fresh is asked for, and only while the node's
//! claim or the verdict has a GPU held alone (a node with nothing held lists nothing).
//! A create that meets 409 reads the rule: the loop's own (a retry that had landed) is
//! fine, anyone else's under the loop's name is refused ([`RuleApiError::Foreign`]).
//! A value change is a JSON merge patch carrying the `resourceVersion` read, a delete
//! carries the UID and `resourceVersion` as preconditions: a rule changed since it was
//! read answers 409, and the loop reads again. A delete of a rule already gone is done.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::resource::{v1, v1alpha3, v1beta2};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, APIResourceList};
use kube::api::{Api, DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::actions::OnRetry;
use crate::retry::{Backoff, Failure, classify, retry};
use gpu_health::device_rules::{self, RuleView};
use gpu_health::names::Names;

/// Why a request about the loop's rules did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum RuleApiError {
    #[error("{op}: {source}")]
    Api {
        op: &'static str,
        #[source]
        source: kube::Error,
    },
    /// A rule under the loop's name that is not the loop's.
    #[error("DeviceTaintRule {name} already exists and is not the health loop's ({why})")]
    Foreign { name: String, why: String },
    #[error("DeviceTaintRule as resource.k8s.io/{version}: {source}")]
    Convert {
        version: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = RuleApiError> = std::result::Result<T, E>;

impl RuleApiError {
    /// The API error underneath, if any.
    pub fn source_error(&self) -> Option<&kube::Error> {
        match self {
            Self::Api { source, .. } => Some(source),
            Self::Foreign { .. } | Self::Convert { .. } => None,
        }
    }

    /// 409: the rule changed since it was read.
    pub fn is_conflict(&self) -> bool {
        self.source_error().is_some_and(|e| classify(e) == Failure::Conflict)
    }

    /// The cluster will not take the loop's rules (refused, not served, not its own):
    /// per-GPU quarantine is unavailable on this node until the exporter restarts.
    pub fn refuses_device_taints(&self) -> bool {
        match self {
            Self::Foreign { .. } | Self::Convert { .. } => true,
            Self::Api { source, .. } => {
                matches!(source, kube::Error::Api(status) if matches!(status.code, 400 | 403 | 404 | 405 | 415 | 422))
            }
        }
    }
}

/// A version of `resource.k8s.io` that serves DeviceTaintRules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleVersion {
    V1,
    V1beta2,
    V1alpha3,
}

impl RuleVersion {
    /// In the order the loop prefers them.
    pub const PREFERRED: [RuleVersion; 3] = [RuleVersion::V1, RuleVersion::V1beta2, RuleVersion::V1alpha3];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V1beta2 => "v1beta2",
            Self::V1alpha3 => "v1alpha3",
        }
    }
}

/// What discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    Version(RuleVersion),
    /// None of the three serves DeviceTaintRules: why, for the condition.
    None(String),
}

/// The loop's handle on its node's DeviceTaintRules.
#[derive(Clone)]
pub struct DeviceRules {
    client: kube::Client,
    names: Names,
    node: String,
    field_manager: String,
    backoff: Backoff,
    on_failure: OnRetry,
    served: Arc<Mutex<Option<Served>>>,
}

impl std::fmt::Debug for DeviceRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRules").field("node", &self.node).finish_non_exhaustive()
    }
}

/// `from` as a `To`, field for field (the schemas of the three versions agree on what
/// the loop writes), with `To`'s `apiVersion`.
fn convert<From: Serialize, To: k8s_openapi::Resource + DeserializeOwned>(from: &From) -> Result<To> {
    let version = To::VERSION;
    let mut value = serde_json::to_value(from).map_err(|source| RuleApiError::Convert { version, source })?;
    value["apiVersion"] = json!(To::API_VERSION);
    serde_json::from_value(value).map_err(|source| RuleApiError::Convert { version, source })
}

/// Runs `$body` with `$api` an `Api` of the DeviceTaintRule type `$version` names.
macro_rules! with_version {
    ($self:ident, $version:expr, |$api:ident: $ty:ident| $body:expr) => {
        match $version {
            RuleVersion::V1 => {
                type $ty = v1::DeviceTaintRule;
                let $api: Api<$ty> = Api::all($self.client.clone());
                $body
            }
            RuleVersion::V1beta2 => {
                type $ty = v1beta2::DeviceTaintRule;
                let $api: Api<$ty> = Api::all($self.client.clone());
                $body
            }
            RuleVersion::V1alpha3 => {
                type $ty = v1alpha3::DeviceTaintRule;
                let $api: Api<$ty> = Api::all($self.client.clone());
                $body
            }
        }
    };
}

impl DeviceRules {
    pub fn new(
        client: kube::Client,
        names: Names,
        node: &str,
        field_manager: &str,
        backoff: Backoff,
        on_failure: OnRetry,
    ) -> Self {
        DeviceRules {
            client,
            names,
            node: node.to_string(),
            field_manager: field_manager.to_string(),
            backoff,
            on_failure,
            served: Arc::new(Mutex::new(None)),
        }
    }

    fn counted(&self, op: &'static str) -> impl FnMut(&kube::Error, u32) + '_ {
        move |e, _| (self.on_failure)(op, e)
    }

    fn api(op: &'static str) -> impl Fn(kube::Error) -> RuleApiError {
        move |source| RuleApiError::Api { op, source }
    }

    /// What discovery found, if it ran.
    pub fn served(&self) -> Option<Served> {
        self.served.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Which version serves DeviceTaintRules; asks the API server the first time.
    pub async fn discover(&self) -> Result<Served> {
        if let Some(served) = self.served() {
            return Ok(served);
        }
        let served = self.ask().await?;
        *self.served.lock().unwrap_or_else(PoisonError::into_inner) = Some(served.clone());
        Ok(served)
    }

    async fn ask(&self) -> Result<Served> {
        let group = retry(&self.backoff, || self.get_group(), self.counted("discover_device_taint_rules"))
            .await
            .map_err(Self::api("discover_device_taint_rules"))?;
        let Some(group) = group else {
            return Ok(Served::None("the API server serves no resource.k8s.io group".into()));
        };
        let offered: Vec<&str> = group.versions.iter().map(|v| v.version.as_str()).collect();
        for version in RuleVersion::PREFERRED.into_iter().filter(|v| offered.contains(&v.as_str())) {
            let group_version = format!("resource.k8s.io/{}", version.as_str());
            let list = || self.client.list_api_group_resources(&group_version);
            let resources: APIResourceList = retry(&self.backoff, list, self.counted("discover_device_taint_rules"))
                .await
                .map_err(Self::api("discover_device_taint_rules"))?;
            if resources.resources.iter().any(|r| r.name == "devicetaintrules") {
                return Ok(Served::Version(version));
            }
        }
        Ok(Served::None(format!(
            "the API server serves no DeviceTaintRule (resource.k8s.io {} offered; device taints need Kubernetes 1.33+ \
             with the DRA device taint feature gates on before 1.37)",
            offered.join(", ")
        )))
    }

    /// `GET /apis/resource.k8s.io`; `None` when the group is not served.
    async fn get_group(&self) -> std::result::Result<Option<APIGroup>, kube::Error> {
        let request = http::Request::get("/apis/resource.k8s.io").body(Vec::new()).map_err(kube::Error::HttpError)?;
        match self.client.request::<APIGroup>(request).await {
            Ok(group) => Ok(Some(group)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The rules labelled as this node's, as `v1` objects: from the API server's cache,
    /// or the latest when `fresh`.
    pub async fn list(&self, version: RuleVersion, fresh: bool) -> Result<Vec<v1::DeviceTaintRule>> {
        let selector = device_rules::owned_selector(&self.names, &self.node);
        let params = ListParams::default().labels(&selector);
        let params = if fresh { params } else { params.match_any() };
        with_version!(self, version, |api: K| {
            let list = retry(&self.backoff, || api.list(&params), self.counted("list_device_taint_rules"))
                .await
                .map_err(Self::api("list_device_taint_rules"))?;
            list.items.iter().map(convert::<K, v1::DeviceTaintRule>).collect()
        })
    }

    /// The listed rules that are the loop's, and the others labelled as its, with why
    /// not (for a warning).
    pub fn read(&self, rules: &[v1::DeviceTaintRule]) -> (Vec<RuleView>, Vec<String>) {
        let mut ours = Vec::new();
        let mut damaged = Vec::new();
        for rule in rules {
            match device_rules::read_rule(rule, &self.names, &self.node) {
                Ok(view) => ours.push(view),
                Err(e @ device_rules::RuleError::Malformed { .. }) => damaged.push(e.to_string()),
                Err(device_rules::RuleError::NotOurs(_)) => {}
            }
        }
        (ours, damaged)
    }

    fn params(&self) -> PatchParams {
        PatchParams { field_manager: Some(self.field_manager.clone()), ..PatchParams::default() }
    }

    /// `POST /apis/resource.k8s.io/<version>/devicetaintrules`. A rule of that name that
    /// is already there is fine if it is the loop's for the same device.
    pub async fn create(&self, version: RuleVersion, rule: &v1::DeviceTaintRule) -> Result<()> {
        let params = PostParams { field_manager: Some(self.field_manager.clone()), ..PostParams::default() };
        let name = rule.metadata.name.clone().unwrap_or_default();
        let created = with_version!(self, version, |api: K| {
            let object: K = convert(rule)?;
            retry(&self.backoff, || api.create(&params, &object), self.counted("create_device_taint_rule"))
                .await
                .map(|_| ())
        });
        match created {
            Ok(()) => Ok(()),
            Err(e) if classify(&e) == Failure::Conflict => self.check_existing(version, &name, rule).await,
            Err(e) => Err(Self::api("create_device_taint_rule")(e)),
        }
    }

    /// The rule under `name` that a create met: the loop's own for the same device, or
    /// [`RuleApiError::Foreign`].
    async fn check_existing(&self, version: RuleVersion, name: &str, wanted: &v1::DeviceTaintRule) -> Result<()> {
        let found: v1::DeviceTaintRule = with_version!(self, version, |api: K| {
            let params = GetParams::default();
            let got = retry(&self.backoff, || api.get_with(name, &params), self.counted("get_device_taint_rule"))
                .await
                .map_err(Self::api("get_device_taint_rule"))?;
            convert::<K, v1::DeviceTaintRule>(&got)?
        });
        match device_rules::read_rule(&found, &self.names, &self.node) {
            Ok(view)
                if Some(&view.device.device)
                    == wanted.spec.device_selector.as_ref().and_then(|s| s.device.as_ref()) =>
            {
                Ok(())
            }
            Ok(_) => Err(RuleApiError::Foreign { name: name.into(), why: "it selects another device".into() }),
            Err(e) => Err(RuleApiError::Foreign { name: name.into(), why: e.to_string() }),
        }
    }

    /// Sets the taint's value, if the rule is still `resource_version`.
    pub async fn set_value(&self, version: RuleVersion, name: &str, resource_version: &str, value: &str) -> Result<()> {
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "spec": {"taint": {"value": value}}});
        let patch = Patch::Merge(&patch);
        let params = self.params();
        with_version!(self, version, |api: K| {
            retry(&self.backoff, || api.patch(name, &params, &patch), self.counted("patch_device_taint_rule"))
                .await
                .map(|_: K| ())
                .map_err(Self::api("patch_device_taint_rule"))
        })
    }

    /// Deletes the rule, if it is still `uid` at `resource_version`; one already gone is done.
    pub async fn delete(&self, version: RuleVersion, name: &str, uid: &str, resource_version: &str) -> Result<()> {
        let preconditions =
            Preconditions { uid: Some(uid.to_string()), resource_version: Some(resource_version.to_string()) };
        let params = DeleteParams { preconditions: Some(preconditions), ..DeleteParams::default() };
        let deleted = with_version!(self, version, |api: K| {
            retry(&self.backoff, || api.delete(name, &params), self.counted("delete_device_taint_rule"))
                .await
                .map(|_| ())
        });
        match deleted {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(Self::api("delete_device_taint_rule")(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_health::device_rules::{Effect, Hold};
    use gpu_health::observation::DraDevice;
    use kube::core::Status;

    #[test]
    fn a_rule_converts_between_the_three_versions() {
        let d = DraDevice { driver: "gpu.nvidia.com".into(), pool: "gpu-1".into(), device: "gpu-3".into() };
        let names = Names::new("gpu-telemetry.io");
        let hold = Hold {
            index: 3,
            uuid: "GPU-3",
            device: &d,
            value: "Xid79",
            effect: Effect::NoSchedule,
            since: std::time::SystemTime::UNIX_EPOCH,
        };
        let rule = device_rules::desired_rule(&names, "gpu-1", hold);
        let beta: v1beta2::DeviceTaintRule = convert(&rule).unwrap();
        assert_eq!(serde_json::to_value(&beta).unwrap()["apiVersion"], "resource.k8s.io/v1beta2");
        let alpha: v1alpha3::DeviceTaintRule = convert(&beta).unwrap();
        assert_eq!(alpha.spec.device_selector.as_ref().unwrap().device.as_deref(), Some("gpu-3"));
        let back: v1::DeviceTaintRule = convert(&alpha).unwrap();
        assert_eq!(back, rule);
    }

    #[test]
    fn errors_say_whether_device_taints_are_refused() {
        let api = |code: u16| RuleApiError::Api {
            op: "create_device_taint_rule",
            source: kube::Error::Api(Box::new(Status { code, ..Status::default() })),
        };
        assert!(api(403).refuses_device_taints());
        assert!(api(422).refuses_device_taints());
        assert!(!api(503).refuses_device_taints());
        assert!(!api(409).refuses_device_taints());
        assert!(api(409).is_conflict());
        let foreign = RuleApiError::Foreign { name: "r".into(), why: "an admin's".into() };
        assert!(foreign.refuses_device_taints());
        assert_eq!(foreign.to_string(), "DeviceTaintRule r already exists and is not the health loop's (an admin's)");
    }
}
