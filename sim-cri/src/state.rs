//! What the runtime holds: pod sandboxes, containers and images, as records. Nothing
//! runs: a started container is `RUNNING` until it is stopped, and then `EXITED` with
//! code 0. Pure data and rules, no I/O; the gRPC services (`runtime`, `images`) read and
//! write it under one lock.
//!
//! The rules are the ones the kubelet relies on (k8s.io/cri-api v0.37.2's
//! `pkg/apis/runtime/v1/api.proto` comments): `RunPodSandbox` makes a `READY` sandbox,
//! `StopPodSandbox` stops its containers and makes it `NOTREADY` and may be repeated,
//! `RemovePodSandbox` removes it with its containers and may be repeated; a container
//! is `CREATED`, then `RUNNING`, then `EXITED`; removing what is gone is no error.

use std::collections::BTreeMap;

use crate::proto;

/// Now, in nanoseconds since the epoch, as CRI timestamps are.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A sandbox or container id: 64 hex digits, as runtimes give them.
fn new_id(kind: u8, n: u64) -> String {
    format!("{kind:02x}{n:062x}")
}

/// One pod sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub metadata: proto::PodSandboxMetadata,
    pub ready: bool,
    pub created_at: i64,
    pub ip: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub runtime_handler: String,
}

/// One container, in the three states a container that runs nothing can be in.
#[derive(Debug, Clone)]
pub struct Container {
    pub id: String,
    pub sandbox_id: String,
    pub metadata: proto::ContainerMetadata,
    /// The image as the pod names it (`ImageSpec.user_specified_image`).
    pub image: String,
    /// What the kubelet created it from: the id `PullImage` answered.
    pub image_ref: String,
    pub state: proto::ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub log_path: String,
}

/// Why a request cannot be done.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("pod sandbox {0} not found")]
    NoSandbox(String),
    #[error("container {0} not found")]
    NoContainer(String),
    #[error("pod sandbox {0} is not ready: no container can be created in it")]
    SandboxNotReady(String),
    #[error("container {id} is {state:?}, not CREATED: it cannot be started")]
    NotCreated { id: String, state: proto::ContainerState },
    #[error("the pod sandbox config has no metadata")]
    NoMetadata,
    #[error("no pod IP left in {0}")]
    NoAddress(String),
}

pub type Result<T> = std::result::Result<T, StateError>;

/// Pod addresses: host numbers 2..=254 of a /24, handed out in turn and given back when
/// a sandbox is removed.
#[derive(Debug, Clone)]
pub struct Addresses {
    prefix: String,
    used: std::collections::BTreeSet<u8>,
}

impl Addresses {
    /// `cidr` is `a.b.c.0/24`.
    pub fn new(cidr: &str) -> std::result::Result<Self, String> {
        let net = cidr.strip_suffix(".0/24").ok_or_else(|| format!("pod CIDR {cidr:?} is not a.b.c.0/24"))?;
        let parts: Vec<&str> = net.split('.').collect();
        if parts.len() != 3 || parts.iter().any(|p| p.parse::<u8>().is_err()) {
            return Err(format!("pod CIDR {cidr:?} is not a.b.c.0/24"));
        }
        Ok(Self { prefix: net.to_string(), used: Default::default() })
    }

    fn take(&mut self) -> Option<String> {
        let n = (2..=254u8).find(|n| !self.used.contains(n))?;
        self.used.insert(n);
        Some(format!("{}.{n}", self.prefix))
    }

    fn give_back(&mut self, ip: &str) {
        if let Some(n) = ip.rsplit('.').next().and_then(|n| n.parse::<u8>().ok()) {
            self.used.remove(&n);
        }
    }
}

/// Everything the runtime holds.
#[derive(Debug, Clone)]
pub struct State {
    pub sandboxes: BTreeMap<String, Sandbox>,
    pub containers: BTreeMap<String, Container>,
    /// Images "pulled": by reference, their id.
    pub images: BTreeMap<String, String>,
    addresses: Addresses,
    next: u64,
    /// Where container logs go: the kubelet's `log_directory` + `log_path`.
    pub log_root: std::path::PathBuf,
}

impl State {
    pub fn new(addresses: Addresses) -> Self {
        Self {
            sandboxes: BTreeMap::new(),
            containers: BTreeMap::new(),
            images: BTreeMap::new(),
            addresses,
            next: 1,
            log_root: std::path::PathBuf::new(),
        }
    }

    fn id(&mut self, kind: u8) -> String {
        self.next += 1;
        new_id(kind, self.next)
    }

    /// A new ready sandbox for `config`, with an address of its own; the same pod
    /// (name, namespace, uid, attempt) asked again gets its existing sandbox, as a
    /// runtime answers a retried request.
    pub fn run_sandbox(&mut self, config: proto::PodSandboxConfig, handler: String, now: i64) -> Result<String> {
        let metadata = config.metadata.ok_or(StateError::NoMetadata)?;
        if let Some(s) = self.sandboxes.values().find(|s| s.metadata == metadata && s.ready) {
            return Ok(s.id.clone());
        }
        let ip =
            self.addresses.take().ok_or_else(|| StateError::NoAddress(format!("{}.0/24", self.addresses.prefix)))?;
        let id = self.id(1);
        self.sandboxes.insert(
            id.clone(),
            Sandbox {
                id: id.clone(),
                metadata,
                ready: true,
                created_at: now,
                ip,
                labels: config.labels.into_iter().collect(),
                annotations: config.annotations.into_iter().collect(),
                runtime_handler: handler,
            },
        );
        Ok(id)
    }

    /// Stops every container of the sandbox and makes it not ready; a sandbox already
    /// gone is no error (the kubelet stops what it may have removed).
    pub fn stop_sandbox(&mut self, id: &str, now: i64) {
        let Some(s) = self.sandboxes.get_mut(id) else { return };
        s.ready = false;
        let ids: Vec<String> = self.containers.values().filter(|c| c.sandbox_id == id).map(|c| c.id.clone()).collect();
        for c in ids {
            self.stop_container(&c, now);
        }
    }

    pub fn remove_sandbox(&mut self, id: &str) {
        if let Some(s) = self.sandboxes.remove(id) {
            self.addresses.give_back(&s.ip);
        }
        self.containers.retain(|_, c| c.sandbox_id != id);
    }

    pub fn create_container(&mut self, sandbox_id: &str, config: proto::ContainerConfig, now: i64) -> Result<String> {
        let sandbox = self.sandboxes.get(sandbox_id).ok_or_else(|| StateError::NoSandbox(sandbox_id.into()))?;
        if !sandbox.ready {
            return Err(StateError::SandboxNotReady(sandbox_id.into()));
        }
        let metadata = config.metadata.ok_or(StateError::NoMetadata)?;
        let spec = config.image.unwrap_or_default();
        let image = if spec.user_specified_image.is_empty() { spec.image.clone() } else { spec.user_specified_image };
        let id = self.id(2);
        self.containers.insert(
            id.clone(),
            Container {
                id: id.clone(),
                sandbox_id: sandbox_id.into(),
                metadata,
                image,
                image_ref: spec.image,
                state: proto::ContainerState::ContainerCreated,
                created_at: now,
                started_at: 0,
                finished_at: 0,
                labels: config.labels.into_iter().collect(),
                annotations: config.annotations.into_iter().collect(),
                log_path: config.log_path,
            },
        );
        Ok(id)
    }

    pub fn start_container(&mut self, id: &str, now: i64) -> Result<()> {
        let c = self.containers.get_mut(id).ok_or_else(|| StateError::NoContainer(id.into()))?;
        if c.state != proto::ContainerState::ContainerCreated {
            return Err(StateError::NotCreated { id: id.into(), state: c.state });
        }
        c.state = proto::ContainerState::ContainerRunning;
        c.started_at = now;
        Ok(())
    }

    /// Stops a container (exit code 0); one already exited, or gone, is left as it is.
    pub fn stop_container(&mut self, id: &str, now: i64) {
        if let Some(c) = self.containers.get_mut(id)
            && c.state != proto::ContainerState::ContainerExited
        {
            c.state = proto::ContainerState::ContainerExited;
            c.finished_at = now;
        }
    }

    pub fn remove_container(&mut self, id: &str) {
        self.containers.remove(id);
    }

    /// The image's id, once "pulled": a digest made from its reference.
    pub fn pull(&mut self, image: &str) -> String {
        let id = image_id(image);
        self.images.insert(image.to_string(), id.clone());
        id
    }
}

/// A stable `sha256:` id for an image reference (not a real digest: there is no image).
pub fn image_id(image: &str) -> String {
    // FNV-1a, widened: only stability and spread matter here.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in image.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("sha256:{h:016x}{:016x}{:016x}{:016x}", h.rotate_left(16), h.rotate_left(32), h.rotate_left(48))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_config(name: &str) -> proto::PodSandboxConfig {
        proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }
    }

    fn container_config(name: &str) -> proto::ContainerConfig {
        proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(proto::ImageSpec { image: "registry.example/app:1".into(), ..Default::default() }),
            ..Default::default()
        }
    }

    fn state() -> State {
        State::new(Addresses::new("10.244.1.0/24").unwrap())
    }

    #[test]
    fn a_pod_runs_stops_and_is_removed_with_its_containers() {
        let mut s = state();
        let pod = s.run_sandbox(sandbox_config("a"), String::new(), 1).unwrap();
        assert_eq!(s.sandboxes[&pod].ip, "10.244.1.2");
        let c = s.create_container(&pod, container_config("main"), 2).unwrap();
        assert_eq!(s.containers[&c].state, proto::ContainerState::ContainerCreated);
        s.start_container(&c, 3).unwrap();
        assert_eq!(s.containers[&c].state, proto::ContainerState::ContainerRunning);
        assert!(matches!(s.start_container(&c, 4), Err(StateError::NotCreated { .. })));
        s.stop_sandbox(&pod, 5);
        s.stop_sandbox(&pod, 6);
        assert_eq!((s.containers[&c].state, s.containers[&c].finished_at), (proto::ContainerState::ContainerExited, 5));
        assert_eq!(
            s.create_container(&pod, container_config("late"), 7),
            Err(StateError::SandboxNotReady(pod.clone()))
        );
        s.remove_sandbox(&pod);
        s.remove_sandbox(&pod);
        assert!(s.containers.is_empty() && s.sandboxes.is_empty());
        // Its address is free again.
        let next = s.run_sandbox(sandbox_config("b"), String::new(), 8).unwrap();
        assert_eq!(s.sandboxes[&next].ip, "10.244.1.2");
    }

    #[test]
    fn a_retried_run_gets_the_same_sandbox_and_unknown_ids_are_named() {
        let mut s = state();
        let a = s.run_sandbox(sandbox_config("a"), String::new(), 1).unwrap();
        assert_eq!(s.run_sandbox(sandbox_config("a"), String::new(), 2).unwrap(), a);
        assert_eq!(a.len(), 64);
        assert_eq!(s.create_container("nope", container_config("x"), 1), Err(StateError::NoSandbox("nope".into())));
        assert_eq!(s.start_container("gone", 1), Err(StateError::NoContainer("gone".into())));
        assert_eq!(s.run_sandbox(proto::PodSandboxConfig::default(), String::new(), 1), Err(StateError::NoMetadata));
    }

    #[test]
    fn addresses_run_out_with_a_named_error_and_cidrs_are_checked() {
        let mut s = state();
        for i in 0..253 {
            s.run_sandbox(sandbox_config(&format!("p{i}")), String::new(), 1).unwrap();
        }
        assert_eq!(
            s.run_sandbox(sandbox_config("one-too-many"), String::new(), 1),
            Err(StateError::NoAddress("10.244.1.0/24".into()))
        );
        assert!(Addresses::new("10.244.1.0/16").unwrap_err().contains("not a.b.c.0/24"));
        assert!(Addresses::new("10.300.1.0/24").is_err());
    }

    #[test]
    fn image_ids_are_stable_and_distinct() {
        assert_eq!(image_id("a:1"), image_id("a:1"));
        assert_ne!(image_id("a:1"), image_id("a:2"));
        assert_eq!(image_id("a:1").len(), "sha256:".len() + 64);
    }
}
