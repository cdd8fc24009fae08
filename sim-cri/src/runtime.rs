//! The CRI `RuntimeService`: pod sandboxes and containers as [`State`] keeps them, the
//! runtime's status (ready, network ready, cgroupfs driver), and "not implemented" for
//! what needs a process (exec, attach, port-forward, checkpoints) or a measurement
//! (stats and metrics: the list calls answer empty lists, so the kubelet's summary has
//! no container figures, which nothing of ours reads).
//!
//! The streaming list calls answer one message with the whole list, then end.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::Stream;
use tonic::{Request, Response, Status};

use crate::proto::runtime_service_server::RuntimeService;
use crate::proto::*;
use crate::state::{Container as Held, Sandbox, State, StateError, now_nanos};

/// The runtime's name, as `crictl version` and the Node's containerRuntimeVersion show it.
pub const RUNTIME_NAME: &str = "sim-cri";

type Shared = Arc<Mutex<State>>;
type Listing<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The runtime service over shared state.
#[derive(Clone)]
pub struct Runtime {
    pub state: Shared,
}

fn to_status(e: StateError) -> Status {
    match e {
        StateError::NoSandbox(_) | StateError::NoContainer(_) => Status::not_found(e.to_string()),
        StateError::NoMetadata => Status::invalid_argument(e.to_string()),
        StateError::SandboxNotReady(_) | StateError::NotCreated { .. } => Status::failed_precondition(e.to_string()),
        StateError::NoAddress(_) => Status::resource_exhausted(e.to_string()),
    }
}

fn needs_a_process(what: &str) -> Status {
    Status::unimplemented(format!("{what}: sim-cri runs no process"))
}

fn one<T: Send + 'static>(item: T) -> Listing<T> {
    Box::pin(futures::stream::once(async move { Ok(item) }))
}

fn labels_match(labels: &std::collections::BTreeMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn sandbox_state(s: &Sandbox) -> PodSandboxState {
    if s.ready { PodSandboxState::SandboxReady } else { PodSandboxState::SandboxNotready }
}

fn pod_sandbox(s: &Sandbox) -> PodSandbox {
    PodSandbox {
        id: s.id.clone(),
        metadata: Some(s.metadata.clone()),
        state: sandbox_state(s) as i32,
        created_at: s.created_at,
        labels: s.labels.clone().into_iter().collect(),
        annotations: s.annotations.clone().into_iter().collect(),
        runtime_handler: s.runtime_handler.clone(),
    }
}

fn sandbox_status(s: &Sandbox) -> PodSandboxStatus {
    PodSandboxStatus {
        id: s.id.clone(),
        metadata: Some(s.metadata.clone()),
        state: sandbox_state(s) as i32,
        created_at: s.created_at,
        network: Some(PodSandboxNetworkStatus { ip: s.ip.clone(), additional_ips: vec![] }),
        linux: None,
        labels: s.labels.clone().into_iter().collect(),
        annotations: s.annotations.clone().into_iter().collect(),
        runtime_handler: s.runtime_handler.clone(),
    }
}

fn container(c: &Held) -> Container {
    Container {
        id: c.id.clone(),
        pod_sandbox_id: c.sandbox_id.clone(),
        metadata: Some(c.metadata.clone()),
        image: Some(ImageSpec { image: c.image.clone(), ..Default::default() }),
        image_ref: c.image_ref.clone(),
        state: c.state as i32,
        created_at: c.created_at,
        labels: c.labels.clone().into_iter().collect(),
        annotations: c.annotations.clone().into_iter().collect(),
        image_id: c.image_ref.clone(),
    }
}

fn container_status(c: &Held, log_root: &std::path::Path) -> ContainerStatus {
    let reason = match c.state {
        ContainerState::ContainerExited => "Completed",
        _ => "",
    };
    ContainerStatus {
        id: c.id.clone(),
        metadata: Some(c.metadata.clone()),
        state: c.state as i32,
        created_at: c.created_at,
        started_at: c.started_at,
        finished_at: c.finished_at,
        exit_code: 0,
        image: Some(ImageSpec { image: c.image.clone(), ..Default::default() }),
        image_ref: c.image_ref.clone(),
        reason: reason.into(),
        labels: c.labels.clone().into_iter().collect(),
        annotations: c.annotations.clone().into_iter().collect(),
        log_path: log_root.join(&c.log_path).display().to_string(),
        image_id: c.image_ref.clone(),
        ..Default::default()
    }
}

impl Runtime {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }

    fn sandboxes(&self, filter: Option<PodSandboxFilter>) -> Vec<PodSandbox> {
        self.with(|s| {
            s.sandboxes
                .values()
                .filter(|sb| {
                    filter.as_ref().is_none_or(|f| {
                        (f.id.is_empty() || f.id == sb.id)
                            && f.state.as_ref().is_none_or(|st| st.state == sandbox_state(sb) as i32)
                            && labels_match(&sb.labels, &f.label_selector)
                    })
                })
                .map(pod_sandbox)
                .collect()
        })
    }

    fn containers(&self, filter: Option<ContainerFilter>) -> Vec<Container> {
        self.with(|s| {
            s.containers
                .values()
                .filter(|c| {
                    filter.as_ref().is_none_or(|f| {
                        (f.id.is_empty() || f.id == c.id)
                            && (f.pod_sandbox_id.is_empty() || f.pod_sandbox_id == c.sandbox_id)
                            && f.state.as_ref().is_none_or(|st| st.state == c.state as i32)
                            && labels_match(&c.labels, &f.label_selector)
                    })
                })
                .map(container)
                .collect()
        })
    }
}

#[tonic::async_trait]
impl RuntimeService for Runtime {
    type StreamPodSandboxesStream = Listing<StreamPodSandboxesResponse>;
    type StreamContainersStream = Listing<StreamContainersResponse>;
    type StreamContainerStatsStream = Listing<StreamContainerStatsResponse>;
    type StreamPodSandboxStatsStream = Listing<StreamPodSandboxStatsResponse>;
    type GetContainerEventsStream = Listing<ContainerEventResponse>;
    type StreamPodSandboxMetricsStream = Listing<StreamPodSandboxMetricsResponse>;

    async fn version(&self, _: Request<VersionRequest>) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        let r = request.into_inner();
        let config = r.config.ok_or_else(|| Status::invalid_argument("RunPodSandbox without a config"))?;
        let id = self.with(|s| s.run_sandbox(config, r.runtime_handler, now_nanos())).map_err(to_status)?;
        tracing::info!(sandbox = %id, "pod sandbox ready");
        Ok(Response::new(RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.with(|s| s.stop_sandbox(&id, now_nanos()));
        Ok(Response::new(StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.with(|s| s.remove_sandbox(&id));
        Ok(Response::new(RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let status = self
            .with(|s| s.sandboxes.get(&id).map(sandbox_status))
            .ok_or_else(|| to_status(StateError::NoSandbox(id)))?;
        Ok(Response::new(PodSandboxStatusResponse { status: Some(status), ..Default::default() }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        Ok(Response::new(ListPodSandboxResponse { items: self.sandboxes(request.into_inner().filter) }))
    }

    async fn stream_pod_sandboxes(
        &self,
        request: Request<StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        let pod_sandboxes = self.sandboxes(request.into_inner().filter);
        Ok(Response::new(one(StreamPodSandboxesResponse { pod_sandboxes })))
    }

    async fn create_container(
        &self,
        request: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        let r = request.into_inner();
        let config = r.config.ok_or_else(|| Status::invalid_argument("CreateContainer without a config"))?;
        let id = self.with(|s| s.create_container(&r.pod_sandbox_id, config, now_nanos())).map_err(to_status)?;
        Ok(Response::new(CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        request: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.with(|s| s.start_container(&id, now_nanos())).map_err(to_status)?;
        tracing::info!(container = %id, "container running (no process)");
        Ok(Response::new(StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.with(|s| s.stop_container(&id, now_nanos()));
        Ok(Response::new(StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        request: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.with(|s| s.remove_container(&id));
        Ok(Response::new(RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        Ok(Response::new(ListContainersResponse { containers: self.containers(request.into_inner().filter) }))
    }

    async fn stream_containers(
        &self,
        request: Request<StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        let containers = self.containers(request.into_inner().filter);
        Ok(Response::new(one(StreamContainersResponse { containers })))
    }

    async fn container_status(
        &self,
        request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        let status = self
            .with(|s| s.containers.get(&id).map(|c| container_status(c, &s.log_root)))
            .ok_or_else(|| to_status(StateError::NoContainer(id)))?;
        Ok(Response::new(ContainerStatusResponse { status: Some(status), ..Default::default() }))
    }

    async fn update_container_resources(
        &self,
        _: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        Ok(Response::new(UpdateContainerResourcesResponse {}))
    }

    async fn reopen_container_log(
        &self,
        _: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        Ok(Response::new(ReopenContainerLogResponse {}))
    }

    async fn exec_sync(&self, _: Request<ExecSyncRequest>) -> Result<Response<ExecSyncResponse>, Status> {
        Err(needs_a_process("ExecSync"))
    }

    async fn exec(&self, _: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        Err(needs_a_process("Exec"))
    }

    async fn attach(&self, _: Request<AttachRequest>) -> Result<Response<AttachResponse>, Status> {
        Err(needs_a_process("Attach"))
    }

    async fn port_forward(&self, _: Request<PortForwardRequest>) -> Result<Response<PortForwardResponse>, Status> {
        Err(needs_a_process("PortForward"))
    }

    async fn container_stats(
        &self,
        request: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        let id = request.into_inner().container_id;
        Err(Status::not_found(format!("no stats for container {id}: sim-cri measures nothing")))
    }

    async fn list_container_stats(
        &self,
        _: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        Ok(Response::new(ListContainerStatsResponse { stats: vec![] }))
    }

    async fn stream_container_stats(
        &self,
        _: Request<StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        Ok(Response::new(one(StreamContainerStatsResponse { container_stats: vec![] })))
    }

    async fn pod_sandbox_stats(
        &self,
        request: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        Err(Status::not_found(format!("no stats for pod sandbox {id}: sim-cri measures nothing")))
    }

    async fn list_pod_sandbox_stats(
        &self,
        _: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        Ok(Response::new(ListPodSandboxStatsResponse { stats: vec![] }))
    }

    async fn stream_pod_sandbox_stats(
        &self,
        _: Request<StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        Ok(Response::new(one(StreamPodSandboxStatsResponse { pod_sandbox_stats: vec![] })))
    }

    async fn update_runtime_config(
        &self,
        _: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        Ok(Response::new(UpdateRuntimeConfigResponse {}))
    }

    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let ready = |t: &str| RuntimeCondition { r#type: t.into(), status: true, ..Default::default() };
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus { conditions: vec![ready("RuntimeReady"), ready("NetworkReady")] }),
            ..Default::default()
        }))
    }

    async fn checkpoint_container(
        &self,
        _: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        Err(needs_a_process("CheckpointContainer"))
    }

    async fn checkpoint_pod(
        &self,
        _: Request<CheckpointPodRequest>,
    ) -> Result<Response<CheckpointPodResponse>, Status> {
        Err(needs_a_process("CheckpointPod"))
    }

    async fn restore_pod(&self, _: Request<RestorePodRequest>) -> Result<Response<RestorePodResponse>, Status> {
        Err(needs_a_process("RestorePod"))
    }

    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Err(Status::unimplemented("GetContainerEvents: sim-cri has no event stream; the kubelet's generic PLEG lists"))
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        Ok(Response::new(ListMetricDescriptorsResponse { descriptors: vec![] }))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        Ok(Response::new(ListPodSandboxMetricsResponse { pod_metrics: vec![] }))
    }

    async fn stream_pod_sandbox_metrics(
        &self,
        _: Request<StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        Ok(Response::new(one(StreamPodSandboxMetricsResponse { pod_sandbox_metrics: vec![] })))
    }

    async fn runtime_config(
        &self,
        _: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration { cgroup_driver: CgroupDriver::Cgroupfs as i32 }),
        }))
    }

    async fn update_pod_sandbox_resources(
        &self,
        _: Request<UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<UpdatePodSandboxResourcesResponse>, Status> {
        Ok(Response::new(UpdatePodSandboxResourcesResponse {}))
    }
}
