//! The node's ResourceSlices (`resource.k8s.io/v1`, Kubernetes 1.34+): which GPU or MIG
//! instance each DRA device is.
//!
//! pod-resources names a DRA allocation by driver, pool and device (`gpu-0`,
//! `gpu-1-mig-1g10gb-19-0`); only the ResourceSlice that publishes the device says which
//! GPU it is. NVIDIA's DRA driver (`gpu.nvidia.com`) gives each device a `uuid`
//! attribute (`GPU-...` for a whole GPU, `MIG-...` for a MIG device), and MIG devices
//! also `parentUUID` and `profile`. An attribute is read under its bare name or
//! qualified with the driver's domain (`gpu.nvidia.com/uuid`), the two spellings
//! Kubernetes treats as one. A device without a `uuid` is not mapped: its allocations
//! are counted as unknown, never guessed from the name.
//!
//! The watch (kube-runtime's watcher, `spec.nodeName=<node>`, relist on `410 Gone`)
//! keeps the devices of the GPU drivers (`--kubelet.dra-drivers`). A cluster that does
//! not serve the API (DRA off, older than 1.34) answers 404: that is said once and
//! asked again every [`NOT_SERVED_RETRY`], not retried at the watcher's pace from every
//! node.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::snapshot::attribution::{DraDeviceName, SliceWatchHealth};

/// How long to wait before asking again a cluster that does not serve ResourceSlices.
pub const NOT_SERVED_RETRY: Duration = Duration::from_secs(600);

/// What a slice says of one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceDevice {
    /// `GPU-...` or `MIG-...`.
    pub uuid: String,
    /// The GPU's UUID, for a MIG device.
    pub parent_uuid: Option<String>,
    /// The MIG profile, e.g. `1g.10gb`.
    pub profile: Option<String>,
}

/// Every GPU device the node's slices publish, by its DRA name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SliceDirectory {
    pub devices: HashMap<DraDeviceName, SliceDevice>,
}

impl SliceDirectory {
    pub fn get(&self, name: &DraDeviceName) -> Option<&SliceDevice> {
        self.devices.get(name)
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// The GPU devices one slice publishes: those of a wanted driver that carry a `uuid`.
pub fn published(slice: &ResourceSlice, wanted_driver: impl Fn(&str) -> bool) -> Vec<(DraDeviceName, SliceDevice)> {
    let spec = &slice.spec;
    if !wanted_driver(&spec.driver) {
        return Vec::new();
    }
    spec.devices
        .iter()
        .flatten()
        .filter_map(|device| {
            let uuid = attribute(device, &spec.driver, "uuid")?;
            let name = DraDeviceName {
                driver: spec.driver.clone(),
                pool: spec.pool.name.clone(),
                device: device.name.clone(),
            };
            let parent_uuid = attribute(device, &spec.driver, "parentUUID");
            let profile = attribute(device, &spec.driver, "profile");
            Some((name, SliceDevice { uuid, parent_uuid, profile }))
        })
        .collect()
}

/// A string attribute by its bare name or qualified with the driver's domain.
fn attribute(device: &Device, driver: &str, name: &str) -> Option<String> {
    let attributes = device.attributes.as_ref()?;
    let value = attributes.get(name).or_else(|| attributes.get(&format!("{driver}/{name}")))?;
    value.string.clone().filter(|s| !s.is_empty())
}

#[derive(Debug, Default)]
struct State {
    /// Slice name to its GPU devices.
    slices: BTreeMap<String, Vec<(DraDeviceName, SliceDevice)>>,
    directory: Arc<SliceDirectory>,
    health: SliceWatchHealth,
    /// Whether "not served" was said since the API last answered.
    not_served_said: bool,
    /// Slices listed since the last `Init`, installed at `InitDone`.
    listing: Option<BTreeMap<String, Vec<(DraDeviceName, SliceDevice)>>>,
}

impl State {
    fn rebuild(&mut self) {
        let devices = self.slices.values().flatten().cloned().collect();
        self.directory = Arc::new(SliceDirectory { devices });
        self.health.devices = self.directory.len();
    }
}

/// Shared between the watch task and the collector.
#[derive(Debug)]
pub struct SliceWatch {
    state: Mutex<State>,
    drivers: Vec<String>,
}

impl SliceWatch {
    /// A watch keeping the devices of `drivers`.
    pub fn new(drivers: Vec<String>) -> Self {
        SliceWatch { state: Mutex::new(State::default()), drivers }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn devices_of(&self, slice: &ResourceSlice) -> Vec<(DraDeviceName, SliceDevice)> {
        published(slice, |driver| self.drivers.iter().any(|d| d == driver))
    }

    /// The node's GPU devices as last seen.
    pub fn directory(&self) -> Arc<SliceDirectory> {
        self.lock().directory.clone()
    }

    pub fn health(&self) -> SliceWatchHealth {
        self.lock().health.clone()
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: Event<ResourceSlice>) {
        let mut state = self.lock();
        match event {
            Event::Init => state.listing = Some(BTreeMap::new()),
            Event::InitApply(slice) => {
                let devices = self.devices_of(&slice);
                if let (Some(listing), Some(name)) = (state.listing.as_mut(), slice.metadata.name) {
                    listing.insert(name, devices);
                }
            }
            Event::InitDone => {
                state.slices = state.listing.take().unwrap_or_default();
                state.rebuild();
                if !state.health.up {
                    tracing::info!(
                        devices = state.health.devices,
                        "ResourceSlice watch synced; DRA devices are mapped"
                    );
                }
                state.health.up = true;
                state.health.served = true;
                state.not_served_said = false;
            }
            Event::Apply(slice) => {
                let devices = self.devices_of(&slice);
                if let Some(name) = slice.metadata.name {
                    state.slices.insert(name, devices);
                    state.rebuild();
                }
            }
            Event::Delete(slice) => {
                if let Some(name) = slice.metadata.name.as_deref() {
                    state.slices.remove(name);
                    state.rebuild();
                }
            }
        }
    }

    /// Records a watch error; logged when the watch goes from up to down.
    pub fn failed(&self, error: &watcher::Error) {
        let mut state = self.lock();
        if state.health.up {
            tracing::warn!(%error, "ResourceSlice watch failed; keeping the last slices and retrying");
        } else {
            tracing::debug!(%error, "ResourceSlice watch still failing");
        }
        state.health.up = false;
    }

    /// Records that the cluster does not serve ResourceSlices; said once.
    fn not_served(&self) {
        let mut state = self.lock();
        if !state.not_served_said {
            tracing::info!(
                "the cluster serves no resource.k8s.io/v1 ResourceSlices (DRA off, or Kubernetes before 1.34): \
                 DRA devices are not mapped; asking again every {}s",
                NOT_SERVED_RETRY.as_secs()
            );
        }
        state.not_served_said = true;
        state.health = SliceWatchHealth::default();
        state.slices.clear();
        state.rebuild();
    }
}

/// Whether a watch error is the API server saying it has no such resource.
fn is_not_served(error: &watcher::Error) -> bool {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        _ => return false,
    };
    status.code == 404 || status.is_not_found()
}

/// Watches the node's slices until the task is dropped.
pub async fn run(client: kube::Client, node: String, watch: Arc<SliceWatch>) {
    loop {
        let api: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => watch.apply(event),
                Err(error) if is_not_served(&error) => {
                    watch.not_served();
                    break;
                }
                Err(error) => watch.failed(&error),
            }
        }
        tokio::time::sleep(NOT_SERVED_RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, driver: &str, devices: serde_json::Value) -> ResourceSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}
        }))
        .unwrap()
    }

    fn name(driver: &str, device: &str) -> DraDeviceName {
        DraDeviceName { driver: driver.into(), pool: "n".into(), device: device.into() }
    }

    #[test]
    fn gpu_and_mig_devices_are_read_under_either_spelling_and_others_skipped() {
        let devices = serde_json::json!([
            {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}}},
            {"name": "gpu-1-mig-1g10gb-19-0", "attributes": {
                "gpu.nvidia.com/type": {"string": "mig"}, "gpu.nvidia.com/uuid": {"string": "MIG-1a"},
                "gpu.nvidia.com/parentUUID": {"string": "GPU-1"}, "gpu.nvidia.com/profile": {"string": "1g.10gb"}}},
            {"name": "no-uuid", "attributes": {"type": {"string": "gpu"}}},
            {"name": "int-uuid", "attributes": {"uuid": {"int": 3}}}
        ]);
        let found = published(&slice("s", "gpu.nvidia.com", devices.clone()), |d| d == "gpu.nvidia.com");
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            (name("gpu.nvidia.com", "gpu-0"), SliceDevice { uuid: "GPU-0".into(), ..SliceDevice::default() })
        );
        let mig = &found[1].1;
        assert_eq!(
            (mig.uuid.as_str(), mig.parent_uuid.as_deref(), mig.profile.as_deref()),
            ("MIG-1a", Some("GPU-1"), Some("1g.10gb"))
        );
        assert!(published(&slice("s", "nic.example.com", devices), |d| d == "gpu.nvidia.com").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_slices_and_events_update_them() {
        let watch = SliceWatch::new(vec!["gpu.nvidia.com".into()]);
        let one = |n: &str, uuid: &str| {
            slice(n, "gpu.nvidia.com", serde_json::json!([{"name": n, "attributes": {"uuid": {"string": uuid}}}]))
        };
        watch.apply(Event::Init);
        watch.apply(Event::InitApply(one("a", "GPU-A")));
        assert!(watch.directory().is_empty(), "not before the list is complete");
        watch.apply(Event::InitDone);
        assert_eq!(watch.health(), SliceWatchHealth { up: true, served: true, devices: 1 });
        watch.apply(Event::Apply(one("b", "GPU-B")));
        assert_eq!(watch.directory().get(&name("gpu.nvidia.com", "b")).unwrap().uuid, "GPU-B");
        watch.apply(Event::Delete(one("a", "GPU-A")));
        assert!(watch.directory().get(&name("gpu.nvidia.com", "a")).is_none());
        watch.apply(Event::Init);
        watch.apply(Event::InitApply(one("c", "GPU-C")));
        watch.apply(Event::InitDone);
        let directory = watch.directory();
        assert_eq!(directory.len(), 1);
        assert!(directory.get(&name("gpu.nvidia.com", "c")).is_some());
        watch.not_served();
        assert!(watch.directory().is_empty() && !watch.health().served);
    }

    #[test]
    fn only_404_means_not_served() {
        let status = |code| kube::core::Status { code, ..kube::core::Status::default() }.boxed();
        assert!(is_not_served(&watcher::Error::InitialListFailed(kube::Error::Api(status(404)))));
        assert!(is_not_served(&watcher::Error::WatchError(status(404))));
        assert!(!is_not_served(&watcher::Error::InitialListFailed(kube::Error::Api(status(403)))));
        assert!(!is_not_served(&watcher::Error::NoResourceVersion));
    }
}
