//! The simulated kubelet's conversation with the API server, per node: register the
//! Node, renew its Lease and Ready condition, and run the pods bound to it.
//!
//! Pods are watched with `spec.nodeName=<node>`, as a kubelet watches them (the Node
//! authorizer allows a node nothing wider). A new pod is placed ([`super::place`]) and
//! its status written Running and Ready; a pod the node cannot hold is written Failed
//! with the kubelet's `UnexpectedAdmissionError`. A pod marked for deletion gives its
//! devices back and its deletion is confirmed (grace period 0, the pod's UID as
//! precondition), which is the kubelet's part of every pod deletion. A failed write
//! is retried with the next event or relist; nothing is lost by waiting.
//!
//! A pod's ResourceClaims (by `resourceClaimName`; no claim controller runs to make them
//! from templates) are read for the devices the scheduler allocated from the node's DRA
//! driver and pool ([`claimed_devices`]). A claim that cannot be read yet leaves the pod
//! pending and is tried again with backoff ([`retry_delay`]) until the pod runs or is
//! deleted, as the kubelet's pod workers retry: the Node authorizer answers 403 ("no
//! relationship found") until its graph has linked the claim to the pod, which can come
//! after the pod is bound, and a claim created or allocated after the pod sends no pod
//! event. A claim that can never be served here (from a template, or on a node without
//! a DRA driver) is not retried.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Pod, PodStatus};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use tokio::sync::{Mutex, mpsc};

use super::{Fleet, JoinError, Result, rewrite};

fn kube_error(node: &str, what: &str) -> impl FnOnce(kube::Error) -> JoinError {
    let (node, what) = (node.to_string(), what.to_string());
    move |source| JoinError::Kube { node, what, source }
}

/// A client for `kubeconfig`.
pub async fn client(kubeconfig: &Path) -> Result<kube::Client> {
    let name = kubeconfig.display().to_string();
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| JoinError::Kubeconfig(name.clone(), e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| JoinError::Kubeconfig(name.clone(), e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| JoinError::Kubeconfig(name, e.to_string()))
}

/// Creates the Node, or brings an existing one (a restarted kubelet's) up to date.
pub async fn register(client: &kube::Client, node: &Node) -> Result<()> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.create(&PostParams::default(), node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let labels = Node { metadata: node.metadata.clone(), ..Node::default() };
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Strategic(&labels))
                .await
                .map_err(kube_error(&name, "updating the labels of the existing Node"))?;
        }
        Err(e) => return Err(kube_error(&name, "registering the Node")(e)),
    }
    // Capacity and conditions live in the status, which create ignores.
    let status = Node { status: node.status.clone(), ..Node::default() };
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .map_err(kube_error(&name, "writing the Node's status"))?;
    tracing::info!(node = %name, "registered");
    Ok(())
}

/// Renews the node's Lease every 10 s and its Ready condition every 30 s, as a kubelet
/// does; a failed renewal is logged and tried again at the next tick.
pub async fn heartbeat(client: kube::Client, name: String) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    let mut tick = 0u64;
    loop {
        let now = jiff::Timestamp::now();
        let lease = Lease {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(40),
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
        };
        let renewed = match leases.patch(&name, &PatchParams::default(), &Patch::Merge(&lease)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                leases.create(&PostParams::default(), &lease).await.map(|_| ())
            }
            other => other.map(|_| ()),
        };
        if let Err(e) = renewed {
            tracing::warn!(node = %name, "renewing the Lease: {e}");
        }
        if tick % 3 == 0 {
            let ready = NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: None,
            };
            let status = Node {
                status: Some(NodeStatus { conditions: Some(vec![ready]), ..NodeStatus::default() }),
                ..Node::default()
            };
            if let Err(e) = nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status)).await {
                tracing::warn!(node = %name, "posting the Ready condition: {e}");
            }
        }
        tick += 1;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Runs the pods bound to node `index` for as long as the process lives.
pub async fn run_pods(client: kube::Client, fleet: Arc<Mutex<Fleet>>, index: usize) -> Result<()> {
    let name = fleet.lock().await.nodes[index].settings.name.clone();
    let pods: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={name}"));
    let mut events = watcher(pods, config).boxed();
    let (retry_tx, mut retries) = mpsc::unbounded_channel::<PodKey>();
    // Pods waiting for their claims, by UID: the attempts so far. One timer each.
    let mut waiting: HashMap<String, u32> = HashMap::new();
    loop {
        let (pod, from_retry) = tokio::select! {
            event = events.next() => {
                let Some(event) = event else { break };
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
                    Ok(watcher::Event::Delete(pod)) => {
                        if let Some(uid) = &pod.metadata.uid {
                            waiting.remove(uid);
                        }
                        forget(&fleet, index, &pod).await?;
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(node = %name, "watching pods: {e}");
                        continue;
                    }
                }
            }
            Some(key) = retries.recv() => match key.current(&client).await {
                Ok(Some(pod)) => (pod, true),
                Ok(None) => {
                    waiting.remove(&key.uid);
                    continue;
                }
                Err(e) => {
                    schedule_retry(&retry_tx, &mut waiting, key, &format!("reading the pod again: {e}"));
                    continue;
                }
            },
        };
        let Some(key) = PodKey::of(&pod) else { continue };
        match handle(&client, &fleet, index, &pod).await {
            Ok(Handled::Done) => {
                waiting.remove(&key.uid);
            }
            // A watch event for a pod whose timer runs leaves the timer alone.
            Ok(Handled::Waiting(why)) if from_retry || !waiting.contains_key(&key.uid) => {
                schedule_retry(&retry_tx, &mut waiting, key, &why);
            }
            Ok(Handled::Waiting(_)) => {}
            Err(e) => tracing::warn!(node = %name, pod = %key.name, "{e}"),
        }
    }
    Ok(())
}

/// How long a pod waits for its claims before attempt `attempt` + 1: 250 ms doubling
/// to 8 s, so that the usual wait (the Node authorizer's graph a moment behind the
/// binding) costs a fraction of a second and a claim allocated much later a few seconds.
pub fn retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << attempt.min(5)))
}

/// A pod waiting to be tried again: where to read it, and which one it was.
struct PodKey {
    namespace: String,
    name: String,
    uid: String,
}

impl PodKey {
    fn of(pod: &Pod) -> Option<Self> {
        Some(Self {
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            uid: pod.metadata.uid.clone()?,
        })
    }

    /// The pod as it is now; `None` once it is gone (or another pod took its name).
    async fn current(&self, client: &kube::Client) -> std::result::Result<Option<Pod>, kube::Error> {
        let api: Api<Pod> = Api::namespaced(client.clone(), &self.namespace);
        match api.get(&self.name).await {
            Ok(pod) => Ok(Some(pod).filter(|p| p.metadata.uid.as_deref() == Some(&self.uid))),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Tries `key`'s pod again after the next delay of its backoff.
fn schedule_retry(tx: &mpsc::UnboundedSender<PodKey>, waiting: &mut HashMap<String, u32>, key: PodKey, why: &str) {
    let attempt = *waiting.entry(key.uid.clone()).and_modify(|a| *a += 1).or_insert(0);
    let delay = retry_delay(attempt);
    tracing::info!(pod = %format!("{}/{}", key.namespace, key.name), "waiting: {why}; trying again in {delay:?}");
    let tx = tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        // The receiver is gone only when the node's task ended.
        let _ = tx.send(key);
    });
}

/// What became of a pod event.
enum Handled {
    /// Run, refused, deleted or nothing to do: the next event says more.
    Done,
    /// Its claims cannot be read yet: try again.
    Waiting(String),
}

/// Why a pod's claims cannot be read, and whether waiting can help.
enum ClaimWait {
    /// Not yet: the claim is missing, unallocated, or not yet linked to the pod.
    Retry(String),
    /// Never on this node.
    Never(String),
}

async fn handle(client: &kube::Client, fleet: &Arc<Mutex<Fleet>>, index: usize, pod: &Pod) -> Result<Handled> {
    let (Some(namespace), Some(pod_name), Some(uid)) =
        (pod.metadata.namespace.clone(), pod.metadata.name.clone(), pod.metadata.uid.clone())
    else {
        return Ok(Handled::Done);
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let node = fleet.lock().await.nodes[index].settings.clone();
    if pod.metadata.deletion_timestamp.is_some() {
        forget(fleet, index, pod).await?;
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        return match api.delete(&pod_name, &params).await {
            Ok(_) => Ok(Handled::Done),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Handled::Done),
            Err(e) => Err(kube_error(&node.name, &format!("confirming the deletion of {namespace}/{pod_name}"))(e)),
        };
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed") {
        return Ok(Handled::Done);
    }
    let status = {
        let f = fleet.lock().await;
        if let Some(running) = f.nodes[index].pods.get(&uid) {
            // Already placed: write the status again only if the server lost it.
            if phase == "Running" {
                return Ok(Handled::Done);
            }
            running_status(&f, index, pod, running)
        } else {
            drop(f);
            let claimed = match claimed_devices(client, fleet, index, pod).await {
                Ok(c) => c,
                Err(ClaimWait::Retry(why)) => return Ok(Handled::Waiting(why)),
                Err(ClaimWait::Never(why)) => {
                    tracing::warn!(node = %node.name, pod = %pod_name, "cannot run here: {why}");
                    return Ok(Handled::Done);
                }
            };
            let mut f = fleet.lock().await;
            if f.nodes[index].pods.contains_key(&uid) {
                return Ok(Handled::Done);
            }
            match super::place(&mut f, index, pod, &claimed) {
                Ok(running) => {
                    let status = running_status(&f, index, pod, &running);
                    f.nodes[index].pods.insert(uid.clone(), running);
                    rewrite(&mut f)?;
                    status
                }
                Err(why) => {
                    tracing::warn!(node = %node.name, pod = %pod_name, "refused: {why}");
                    super::pods::refused_status(&why)
                }
            }
        }
    };
    let patch = Pod { status: Some(status), ..Pod::default() };
    api.patch_status(&pod_name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(kube_error(&node.name, &format!("writing the status of {namespace}/{pod_name}")))?;
    tracing::info!(node = %node.name, pod = %format!("{namespace}/{pod_name}"), "running");
    Ok(Handled::Done)
}

/// The devices of the node's DRA driver that `pod`'s claims hold, by container:
/// (claim, device name in the pool). `Err` says which claim is missing, unreadable or
/// unallocated, and whether that can change.
async fn claimed_devices(
    client: &kube::Client,
    fleet: &Arc<Mutex<Fleet>>,
    index: usize,
    pod: &Pod,
) -> std::result::Result<super::Claimed, ClaimWait> {
    let Some(spec) = &pod.spec else { return Ok(super::Claimed::new()) };
    let Some(claims) = spec.resource_claims.as_ref().filter(|c| !c.is_empty()) else {
        return Ok(super::Claimed::new());
    };
    let (dra, node_name) = {
        let f = fleet.lock().await;
        let node = &f.nodes[index];
        (node.base.dra.clone(), node.settings.name.clone())
    };
    let Some(dra) = dra else {
        return Err(ClaimWait::Never("the pod has ResourceClaims and the node no DRA driver".into()));
    };
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &namespace);
    // The pod's name for a claim → the claim's devices from this node's pool (named after
    // the node, as NVIDIA's DRA driver names it).
    let mut by_pod_name: std::collections::BTreeMap<String, (String, Vec<String>)> = Default::default();
    for c in claims {
        let Some(name) = &c.resource_claim_name else {
            return Err(ClaimWait::Never(format!(
                "claim {:?} comes from a template, which needs the claim controller",
                c.name
            )));
        };
        // 403 until the Node authorizer links the claim to the pod, 404 until it exists.
        let claim = api
            .get(name)
            .await
            .map_err(|e| ClaimWait::Retry(format!("reading ResourceClaim {namespace}/{name}: {e}")))?;
        let results = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .ok_or_else(|| ClaimWait::Retry(format!("ResourceClaim {namespace}/{name} is not allocated yet")))?;
        let devices =
            results.into_iter().filter(|r| r.driver == dra.driver && r.pool == node_name).map(|r| r.device).collect();
        by_pod_name.insert(c.name.clone(), (name.clone(), devices));
    }
    Ok(spec
        .containers
        .iter()
        .map(|c| {
            let held = c
                .resources
                .as_ref()
                .and_then(|r| r.claims.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|r| by_pod_name.get(&r.name))
                .flat_map(|(claim, devices)| devices.iter().map(move |d| (claim.clone(), d.clone())))
                .collect();
            (c.name.clone(), held)
        })
        .collect())
}

fn running_status(f: &Fleet, index: usize, pod: &Pod, running: &super::Running) -> PodStatus {
    let node = &f.nodes[index];
    let ids: Vec<(String, String)> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| (c.name.clone(), super::pods::container_id(&running.placed.uid, &c.name)))
        .collect();
    super::pods::running_status(
        pod,
        &node.settings.address,
        &format!("{}.{}", node.network, running.ip),
        &ids,
        running.placed.qos,
        jiff::Timestamp::now(),
    )
}

/// Frees what a deleted pod held.
async fn forget(fleet: &Arc<Mutex<Fleet>>, index: usize, pod: &Pod) -> Result<()> {
    let Some(uid) = &pod.metadata.uid else { return Ok(()) };
    let mut f = fleet.lock().await;
    if f.nodes[index].pods.remove(uid).is_some() {
        rewrite(&mut f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_pod_is_tried_again_soon_then_every_eight_seconds() {
        let delays: Vec<u64> = (0..8).map(|a| retry_delay(a).as_millis() as u64).collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(8));
    }
}
