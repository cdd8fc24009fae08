//! The scenario file: one simulated GPU node, read from the path in `FAKE_NVML_SCENARIO`.
//!
//! A scenario lists the node's GPUs (a model from [`crate::models`] plus per-GPU
//! overrides), the readings that move over time ([`Signal`]s), starting counter values,
//! and faults scheduled at scenario times. Loading checks everything up front and
//! refuses a wrong file with the file, the field path and the reason, so that a typo
//! never turns into a silently different node.
//!
//! The format is YAML with unknown keys refused. A GPU may be cut into MIG instances
//! ([`mig`]); pods, their device allocations and their GPU processes are described in
//! [`pods`].

pub mod dra;
pub mod fault;
pub mod mig;
pub mod nvlink;
pub mod pods;
pub mod signal;

use std::path::Path;

use serde::Deserialize;

pub use dra::{Dra, PublishedDevice};
pub use fault::{ClockEventReason, Fault, FaultKind, RecoveryAction};
pub use mig::MigInstance;
pub use nvlink::NvLink;
pub use pods::{ClaimedDevice, Container, KubeletSpec, Pod, Process};
pub use signal::Signal;

use crate::models::{self, Model};

/// Why a scenario was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("FAKE_NVML_SCENARIO is not set; point it at a scenario file")]
    NotSet,
    #[error("{file}: cannot read the scenario: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {field}: {reason}")]
    Invalid { file: String, field: String, reason: String },
}

pub type Result<T, E = ScenarioError> = std::result::Result<T, E>;

/// A scenario as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Free text shown nowhere but the file; scenarios document themselves with it.
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// CUDA version the driver supports, `MAJOR.MINOR`.
    #[serde(default = "default_cuda_version")]
    pub cuda_version: String,
    #[serde(default)]
    pub gpus: Vec<GpuSpec>,
    /// How the simulated kubelet names cgroups; defaults to cgroup v2, systemd, containerd.
    #[serde(default)]
    pub kubelet: KubeletSpec,
    /// The node's DRA driver, when GPUs are allocated through ResourceClaims.
    pub dra: Option<dra::DraSpec>,
    /// How NVIDIA's device plugin offers the GPUs (MIG strategy, time-slicing).
    #[serde(default)]
    pub device_plugin: DevicePlugin,
    #[serde(default)]
    pub pods: Vec<pods::PodSpec>,
    /// GPU processes that belong to no pod.
    #[serde(default)]
    pub host_processes: Vec<pods::ProcessSpec>,
}

fn default_driver_version() -> String {
    "550.90.07".into()
}

fn default_cuda_version() -> String {
    "12.4".into()
}

/// One GPU as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// A key of [`models::MODELS`], e.g. `H100-SXM5-80GB`.
    pub model: String,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    /// `DDDDDDDD:BB:DD.F`, as NVML writes it.
    pub pci_bus_id: Option<String>,
    /// Current ECC mode; defaults to on where the model supports ECC.
    pub ecc_enabled: Option<bool>,
    pub power_limit_watts: Option<f64>,
    pub temperature_slowdown_c: Option<u32>,
    pub temperature_shutdown_c: Option<u32>,
    #[serde(default)]
    pub values: Values,
    #[serde(default)]
    pub counters: Counters,
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Present when the GPU is in MIG mode.
    pub mig: Option<mig::MigSpec>,
    /// NVLink links and their traffic ([`nvlink`]); default: the model's links, idle.
    pub nvlink: Option<nvlink::NvLinkSpec>,
}

/// Readings that move over time. Unset readings take the defaults noted on each.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Values {
    /// Percent of time a kernel ran (`nvmlUtilization_t.gpu`). Default 0.
    pub utilization: Option<Signal>,
    /// Percent of time device memory was read or written (`nvmlUtilization_t.memory`).
    /// Default 0.
    pub memory_activity: Option<Signal>,
    /// Memory allocated by processes, in MiB. Default 0.
    pub memory_used_mib: Option<Signal>,
    /// Default: a tenth of the power limit.
    pub power_watts: Option<Signal>,
    /// Default 35.
    pub temperature_c: Option<Signal>,
    /// Default: the model's maximum.
    pub sm_clock_mhz: Option<Signal>,
    /// Default: the model's maximum.
    pub mem_clock_mhz: Option<Signal>,
    /// Percent; only on models with NVENC. Default 0.
    pub encoder_utilization: Option<Signal>,
    /// Percent; only on models with NVDEC. Default 0.
    pub decoder_utilization: Option<Signal>,
    /// Bytes per second. Default 0.
    pub pcie_tx_bytes_per_second: Option<Signal>,
    /// Bytes per second. Default 0.
    pub pcie_rx_bytes_per_second: Option<Signal>,
    /// P-state number, 0 (fastest) to 15. Default 0.
    pub performance_state: Option<Signal>,
    /// GPM SM activity of the whole GPU, percent (Hopper and newer). Default: `utilization`.
    pub sm_activity: Option<Signal>,
    /// GPM tensor-pipe activity, percent. Default 0.
    pub tensor_activity: Option<Signal>,
    /// GPM DRAM bandwidth use, percent. Default: `memory_activity`.
    pub dram_activity: Option<Signal>,
    /// GPM graphics engine activity (`NVML_GPM_METRIC_GRAPHICS_UTIL`), percent.
    /// Default: `utilization`.
    pub graphics_activity: Option<Signal>,
    /// Memory (HBM) temperature, °C; only on models with a memory sensor. Default:
    /// the GPU temperature plus 4.
    pub memory_temperature_c: Option<Signal>,
}

/// Counter values at scenario time 0; faults add to them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    #[serde(default)]
    pub energy_joules: f64,
    #[serde(default)]
    pub ecc_corrected_aggregate: u64,
    #[serde(default)]
    pub ecc_uncorrected_aggregate: u64,
    #[serde(default)]
    pub pcie_replays: u64,
}

/// How NVIDIA's device plugin (k8s-device-plugin v0.17.4) is set up on the node, for
/// what the simulated kubelet offers and allocates:
///
/// ```yaml
/// device_plugin: {mig_strategy: single, time_slicing: {replicas: 4, rename_by_default: true}}
/// ```
/// `mig_strategy` is its `--mig-strategy` (`mixed`, the default here: each MIG instance
/// as `nvidia.com/mig-<profile>`; `single`: as `nvidia.com/gpu`). `time_slicing` is its
/// config's `sharing.timeSlicing` for `nvidia.com/gpu`: each whole GPU offered as
/// `replicas` devices `<uuid>::<n>`, under `nvidia.com/gpu.shared` with
/// `rename_by_default`. Without it each whole GPU is offered once, or as the replicas
/// the scenario's pods hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevicePlugin {
    #[serde(default)]
    pub mig_strategy: MigStrategy,
    pub time_slicing: Option<TimeSlicing>,
}

/// The plugin's `--mig-strategy`, where GPUs are in MIG mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigStrategy {
    #[default]
    Mixed,
    Single,
}

/// Every whole GPU shared by time-slicing ([`DevicePlugin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeSlicing {
    pub replicas: u32,
    #[serde(default)]
    pub rename_by_default: bool,
}

impl TimeSlicing {
    /// The resource the replicas are offered as.
    pub fn resource(&self) -> &'static str {
        if self.rename_by_default { "nvidia.com/gpu.shared" } else { "nvidia.com/gpu" }
    }
}

/// A scenario checked and resolved against the model table, ready to simulate.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub driver_version: String,
    /// `nvmlSystemGetCudaDriverVersion_v2` form: 12040 for 12.4.
    pub cuda_driver_version: i32,
    pub gpus: Vec<Gpu>,
    pub kubelet: KubeletSpec,
    /// `None` where no DRA driver publishes GPUs.
    pub dra: Option<Dra>,
    pub device_plugin: DevicePlugin,
    pub pods: Vec<Pod>,
    /// Every GPU process, in pods or not.
    pub processes: Vec<Process>,
}

/// One GPU with every default filled in.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub index: u32,
    pub model: &'static Model,
    pub uuid: String,
    pub serial: String,
    pub pci_bus_id: String,
    pub pci: PciAddress,
    pub ecc_enabled: bool,
    pub power_limit_watts: f64,
    pub temperature_slowdown_c: u32,
    pub temperature_shutdown_c: u32,
    pub values: Values,
    pub counters: Counters,
    /// Sorted by time.
    pub faults: Vec<Fault>,
    /// MIG instances when the GPU is in MIG mode.
    pub mig: Option<Vec<MigInstance>>,
    /// The MIG profiles the driver offers on this GPU: the model's, plus any extra
    /// ones the scenario gives (empty where the model has no MIG).
    pub mig_profiles: Vec<crate::models::MigProfile>,
    /// NVLink links (none on a model without NVLink).
    pub nvlink: NvLink,
}

impl Gpu {
    /// The GPU's device minor number (`nvmlDeviceGetMinorNumber`, `/dev/nvidia<minor>`):
    /// its index, as on a node whose driver numbered the GPUs in the order NVML lists them.
    pub fn minor_number(&self) -> u32 {
        self.index
    }
}

/// The parts of a PCI bus id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

/// Bus numbers of the eight GPUs of an HGX H100 board, used when a scenario gives none.
const HGX_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

impl Scenario {
    /// Reads the file named by `FAKE_NVML_SCENARIO`.
    pub fn from_env() -> Result<Self> {
        let path = std::env::var_os("FAKE_NVML_SCENARIO").ok_or(ScenarioError::NotSet)?;
        Self::load(Path::new(&path))
    }

    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Self> {
        let file = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { file: file.clone(), source })?;
        Self::parse(&file, &text)
    }

    /// Parses and checks scenario text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self> {
        let invalid = |field: String, reason: String| ScenarioError::Invalid { file: file.to_string(), field, reason };
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        let raw: ScenarioFile = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "(document)".to_string() } else { path };
            invalid(field, e.into_inner().to_string())
        })?;
        resolve(raw).map_err(|(field, reason)| invalid(field, reason))
    }
}

type FieldError = (String, String);

fn resolve(raw: ScenarioFile) -> Result<Scenario, FieldError> {
    let cuda_driver_version = parse_cuda_version(&raw.cuda_version)
        .ok_or_else(|| ("cuda_version".to_string(), format!("{:?} is not MAJOR.MINOR", raw.cuda_version)))?;
    if raw.driver_version.is_empty() || raw.driver_version.len() >= 80 {
        return Err(("driver_version".into(), "must be 1 to 79 characters".into()));
    }
    let mut gpus = Vec::with_capacity(raw.gpus.len());
    for (i, spec) in raw.gpus.into_iter().enumerate() {
        let gpu = resolve_gpu(i as u32, spec).map_err(|(f, r)| (format!("gpus[{i}].{f}"), r))?;
        if let Some(other) = gpus.iter().find(|g: &&Gpu| g.uuid == gpu.uuid) {
            return Err((format!("gpus[{i}].uuid"), format!("{} is already used by gpus[{}]", gpu.uuid, other.index)));
        }
        if let Some(other) = gpus.iter().find(|g: &&Gpu| g.pci == gpu.pci) {
            return Err((
                format!("gpus[{i}].pci_bus_id"),
                format!("{} is already used by gpus[{}]", gpu.pci_bus_id, other.index),
            ));
        }
        gpus.push(gpu);
    }
    let dra = raw.dra.map(|spec| dra::resolve(spec, &gpus)).transpose()?;
    if let Some(t) = raw.device_plugin.time_slicing.filter(|t| t.replicas < 2) {
        // As the plugin refuses it (api/config/v1/replicas.go: "must be >= 2").
        let reason = format!("{} is not a number of replicas (2 or more)", t.replicas);
        return Err(("device_plugin.time_slicing.replicas".into(), reason));
    }
    let (pods, processes) = pods::resolve(&gpus, dra.as_ref(), raw.device_plugin, raw.pods, raw.host_processes)?;
    if !matches!(raw.kubelet.cgroup_version, 1 | 2) {
        return Err(("kubelet.cgroup_version".into(), format!("{} is not 1 or 2", raw.kubelet.cgroup_version)));
    }
    Ok(Scenario {
        driver_version: raw.driver_version,
        cuda_driver_version,
        gpus,
        kubelet: raw.kubelet,
        dra,
        device_plugin: raw.device_plugin,
        pods,
        processes,
    })
}

fn resolve_gpu(index: u32, spec: GpuSpec) -> Result<Gpu, FieldError> {
    let model = models::find(&spec.model).ok_or_else(|| {
        ("model".to_string(), format!("unknown model {:?}; known models: {}", spec.model, models::keys().join(", ")))
    })?;
    let uuid = match spec.uuid {
        Some(u) if is_gpu_uuid(&u) => u,
        Some(u) => {
            return Err((
                "uuid".into(),
                format!("{u:?} is not of the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)"),
            ));
        }
        None => default_uuid(index),
    };
    let pci_bus_id = spec.pci_bus_id.unwrap_or_else(|| {
        let bus = HGX_BUSES.get(index as usize).copied().unwrap_or(0x100 - 1 - index.min(0xfe));
        format!("00000000:{bus:02X}:00.0")
    });
    let pci = parse_pci_bus_id(&pci_bus_id).ok_or_else(|| {
        ("pci_bus_id".to_string(), format!("{pci_bus_id:?} is not of the form DDDDDDDD:BB:DD.F (hex)"))
    })?;
    let ecc_enabled = spec.ecc_enabled.unwrap_or(model.ecc_supported);
    if ecc_enabled && !model.ecc_supported {
        return Err(("ecc_enabled".into(), format!("{} has no ECC memory", model.key)));
    }
    let power_limit_watts = spec.power_limit_watts.unwrap_or(model.power_limit_watts);
    if !(power_limit_watts > 0.0 && power_limit_watts <= 2000.0) {
        return Err(("power_limit_watts".into(), format!("{power_limit_watts} is outside (0, 2000]")));
    }
    let temperature_slowdown_c = spec.temperature_slowdown_c.unwrap_or(model.temp_slowdown_c);
    let temperature_shutdown_c = spec.temperature_shutdown_c.unwrap_or(model.temp_shutdown_c);
    if temperature_slowdown_c >= temperature_shutdown_c {
        return Err((
            "temperature_slowdown_c".into(),
            format!("slowdown {temperature_slowdown_c} must be below shutdown {temperature_shutdown_c}"),
        ));
    }
    check_values(&spec.values, model)?;
    if !spec.counters.energy_joules.is_finite() || spec.counters.energy_joules < 0.0 {
        return Err(("counters.energy_joules".into(), "must be a finite number >= 0".into()));
    }
    let (mig_profiles, mig) = match spec.mig {
        Some(m) => {
            let (profiles, instances) = mig::resolve(m, model, index)?;
            (profiles, Some(instances))
        }
        None => (models::mig_profiles(model).to_vec(), None),
    };
    let mig_instances = mig.as_ref().map_or(0, Vec::len);
    let nvlink = nvlink::resolve(spec.nvlink, model)?;
    let mut faults = spec.faults;
    for (i, fault) in faults.iter().enumerate() {
        fault
            .validate(model, ecc_enabled, mig_instances, nvlink.links)
            .map_err(|(f, r)| (format!("faults[{i}].{f}"), r))?;
    }
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Ok(Gpu {
        index,
        model,
        uuid,
        serial: spec.serial.unwrap_or_else(|| format!("{:013}", 1_650_000_000_000u64 + u64::from(index))),
        pci_bus_id,
        pci,
        ecc_enabled,
        power_limit_watts,
        temperature_slowdown_c,
        temperature_shutdown_c,
        values: spec.values,
        counters: spec.counters,
        faults,
        mig,
        mig_profiles,
        nvlink,
    })
}

fn check_values(values: &Values, model: &Model) -> Result<(), FieldError> {
    let named: [(&str, &Option<Signal>); 17] = [
        ("graphics_activity", &values.graphics_activity),
        ("memory_temperature_c", &values.memory_temperature_c),
        ("sm_activity", &values.sm_activity),
        ("tensor_activity", &values.tensor_activity),
        ("dram_activity", &values.dram_activity),
        ("utilization", &values.utilization),
        ("memory_activity", &values.memory_activity),
        ("memory_used_mib", &values.memory_used_mib),
        ("power_watts", &values.power_watts),
        ("temperature_c", &values.temperature_c),
        ("sm_clock_mhz", &values.sm_clock_mhz),
        ("mem_clock_mhz", &values.mem_clock_mhz),
        ("encoder_utilization", &values.encoder_utilization),
        ("decoder_utilization", &values.decoder_utilization),
        ("pcie_tx_bytes_per_second", &values.pcie_tx_bytes_per_second),
        ("pcie_rx_bytes_per_second", &values.pcie_rx_bytes_per_second),
        ("performance_state", &values.performance_state),
    ];
    for (name, signal) in named {
        if let Some(signal) = signal {
            signal.validate().map_err(|r| (format!("values.{name}"), r))?;
        }
    }
    if values.encoder_utilization.is_some() && !model.nvenc {
        return Err(("values.encoder_utilization".into(), format!("{} has no NVENC encoder", model.key)));
    }
    if values.memory_temperature_c.is_some() && !model.memory_temperature() {
        return Err((
            "values.memory_temperature_c".into(),
            format!("{} reports no memory temperature (no HBM sensor)", model.key),
        ));
    }
    if values.decoder_utilization.is_some() && !model.nvdec {
        return Err(("values.decoder_utilization".into(), format!("{} has no NVDEC decoder", model.key)));
    }
    Ok(())
}

fn parse_cuda_version(text: &str) -> Option<i32> {
    let (major, minor) = text.split_once('.')?;
    let major: i32 = major.parse().ok()?;
    let minor: i32 = minor.parse().ok()?;
    (major > 0 && (0..100).contains(&minor)).then_some(major * 1000 + minor * 10)
}

fn is_gpu_uuid(text: &str) -> bool {
    let Some(hex) = text.strip_prefix("GPU-") else {
        return false;
    };
    let groups: Vec<&str> = hex.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn default_uuid(index: u32) -> String {
    let h = 0x5eed_0000_0000_0000u64 ^ (u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (h >> 32) as u32,
        (h >> 16) as u16,
        h as u16,
        0x4000 | (index & 0x0fff),
        0x00c0_ffee_0000u64 + u64::from(index)
    )
}

/// Parses `DDDDDDDD:BB:DD.F` (domain may be 4 or 8 hex digits).
pub fn parse_pci_bus_id(text: &str) -> Option<PciAddress> {
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, max_len: usize| {
        (!s.is_empty() && s.len() <= max_len).then(|| u32::from_str_radix(s, 16).ok()).flatten()
    };
    let address =
        PciAddress { domain: hex(domain, 8)?, bus: hex(bus, 2)?, device: hex(device, 2)?, function: hex(function, 1)? };
    (address.device < 32 && address.function < 8).then_some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> (String, String) {
        match Scenario::parse("node.yaml", text) {
            Err(ScenarioError::Invalid { file, field, reason }) => {
                assert_eq!(file, "node.yaml");
                (field, reason)
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn minimal_scenario_fills_defaults() {
        let s = Scenario::parse("n.yaml", "gpus: [{model: H100-SXM5-80GB}, {model: l40s-48gb}]").unwrap();
        assert_eq!(s.cuda_driver_version, 12040);
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(s.gpus[0].pci_bus_id, "00000000:18:00.0");
        assert_eq!(s.gpus[1].pci.bus, 0x2a);
        assert!(is_gpu_uuid(&s.gpus[1].uuid), "{}", s.gpus[1].uuid);
        assert_ne!(s.gpus[0].uuid, s.gpus[1].uuid);
        assert_eq!(s.gpus[0].power_limit_watts, 700.0);
    }

    #[test]
    fn wrong_type_names_the_field_path() {
        let (field, reason) = refused("gpus:\n  - model: H100-SXM5-80GB\n    values:\n      power_watts: hot\n");
        assert_eq!(field, "gpus[0].values.power_watts");
        assert!(reason.contains("did not match any variant"), "{reason}");
    }

    #[test]
    fn unknown_key_is_refused() {
        let (field, reason) = refused("gpus:\n  - model: H100-SXM5-80GB\n    colour: green\n");
        assert_eq!(field, "gpus[0].colour");
        assert!(reason.contains("unknown field `colour`"), "{reason}");
    }

    #[test]
    fn unknown_model_lists_the_known_ones() {
        let (field, reason) = refused("gpus: [{model: Z9000}]");
        assert_eq!(field, "gpus[0].model");
        assert!(reason.contains("H200-SXM-141GB"), "{reason}");
    }

    #[test]
    fn duplicate_uuid_and_bus_id_are_refused() {
        let uuid = "GPU-11111111-2222-3333-4444-555555555555";
        let (field, _) = refused(&format!(
            "gpus: [{{model: H100-SXM5-80GB, uuid: {uuid}}}, {{model: H100-SXM5-80GB, uuid: {uuid}}}]"
        ));
        assert_eq!(field, "gpus[1].uuid");
        let (field, _) = refused(
            "gpus: [{model: H100-SXM5-80GB, pci_bus_id: '00000000:18:00.0'}, {model: H100-SXM5-80GB, pci_bus_id: '00000000:18:00.0'}]",
        );
        assert_eq!(field, "gpus[1].pci_bus_id");
    }

    #[test]
    fn ecc_on_a_gpu_without_ecc_is_refused() {
        let (field, reason) = refused("gpus: [{model: RTX-4090-24GB, ecc_enabled: true}]");
        assert_eq!(field, "gpus[0].ecc_enabled");
        assert!(reason.contains("no ECC"), "{reason}");
    }

    #[test]
    fn encoder_on_h100_is_refused() {
        let (field, _) = refused("gpus: [{model: H100-SXM5-80GB, values: {encoder_utilization: 5}}]");
        assert_eq!(field, "gpus[0].values.encoder_utilization");
    }

    #[test]
    fn nvlink_and_memory_temperature_are_refused_where_the_board_lacks_them() {
        let (field, reason) = refused("gpus: [{model: L40S-48GB, nvlink: {tx_bytes_per_second: 1e9}}]");
        assert_eq!((field.as_str(), reason.as_str()), ("gpus[0].nvlink", "L40S-48GB has no NVLink"));
        let (field, reason) = refused("gpus: [{model: L40S-48GB, values: {memory_temperature_c: 70}}]");
        assert_eq!(field, "gpus[0].values.memory_temperature_c");
        assert!(reason.contains("no memory temperature"), "{reason}");
        let (field, _) = refused("gpus: [{model: H100-SXM5-80GB, nvlink: {links: 40}}]");
        assert_eq!(field, "gpus[0].nvlink.links");
        let (field, reason) =
            refused("gpus: [{model: H100-SXM5-80GB, nvlink: {links: 4}, faults: [{at_s: 1, nvlink_down: {link: 4}}]}]");
        assert_eq!(field, "gpus[0].faults[0].nvlink_down.link");
        assert!(reason.contains("4 links"), "{reason}");
        let (field, _) =
            refused("gpus: [{model: L40S-48GB, faults: [{at_s: 1, nvlink_errors: {link: 0, replay: 1}}]}]");
        assert_eq!(field, "gpus[0].faults[0].nvlink_errors.link");
        let s = Scenario::parse("n.yaml", "gpus: [{model: H200-SXM-141GB}, {model: L40S-48GB}]").unwrap();
        assert_eq!((s.gpus[0].nvlink.links, s.gpus[1].nvlink.links), (18, 0));
    }

    #[test]
    fn yaml_syntax_error_reports_the_line() {
        let (field, reason) = refused("gpus: [\n  {model: H100\n");
        assert!(field.starts_with("gpus[0]"), "{field}");
        assert!(reason.contains("line"), "{reason}");
    }

    const MIG_NODE: &str = "gpus:
  - {model: H100-SXM5-80GB, mig: {layout: all-3g.40gb}}
  - {model: H100-SXM5-80GB}
";

    #[test]
    fn time_sliced_gpus_are_held_as_replicas_the_plugin_offers() {
        let pod = |device: &str| {
            format!(
                "{MIG_NODE}device_plugin: {{time_slicing: {{replicas: 4, rename_by_default: true}}}}
pods:
  - {{namespace: a, name: p, containers: [{{name: c, devices: [{device}]}}]}}
"
            )
        };
        let s = Scenario::parse("n.yaml", &pod("{resource: nvidia.com/gpu.shared, gpu: 1, replica: 3}")).unwrap();
        assert_eq!(s.device_plugin.time_slicing.map(|t| t.resource()), Some("nvidia.com/gpu.shared"));
        assert_eq!(s.pods[0].containers[0].devices[0].1, format!("{}::3", s.gpus[1].uuid));
        // MIG instances are not time-sliced.
        assert!(Scenario::parse("n.yaml", &pod("{resource: nvidia.com/mig-3g.40gb, gpu: 0, mig: 1}")).is_ok());
        let (field, reason) = refused(&pod("{resource: nvidia.com/gpu.shared, gpu: 1}"));
        assert_eq!(field, "pods[0].containers[0].devices[0]");
        assert!(reason.contains("name the replica"), "{reason}");
        let reason = refused(&pod("{resource: nvidia.com/gpu.shared, gpu: 1, replica: 4}")).1;
        assert!(reason.contains("replicas 0 to 3"), "{reason}");
        let reason = refused(&pod("{resource: nvidia.com/gpu, gpu: 1, replica: 0}")).1;
        assert!(reason.contains("offered as nvidia.com/gpu.shared, not nvidia.com/gpu"), "{reason}");
        assert_eq!(
            refused(&format!("{MIG_NODE}device_plugin: {{time_slicing: {{replicas: 1}}}}\n")),
            (
                "device_plugin.time_slicing.replicas".to_string(),
                "1 is not a number of replicas (2 or more)".to_string()
            )
        );
    }

    #[test]
    fn pods_resolve_to_kubelet_device_ids() {
        let text = format!(
            "{MIG_NODE}pods:
  - namespace: a
    name: p
    containers:
      - name: c
        devices: [{{resource: nvidia.com/mig-3g.40gb, gpu: 0, mig: 1}}, {{resource: nvidia.com/gpu, gpu: 1, replica: 2}}]
        processes: [{{pid: 100, gpu: 0, mig: 1, memory_used_mib: 10}}]
"
        );
        let s = Scenario::parse("n.yaml", &text).unwrap();
        let devices = &s.pods[0].containers[0].devices;
        let mig_uuid = &s.gpus[0].mig.as_ref().unwrap()[1].uuid;
        assert_eq!(devices[0], ("nvidia.com/mig-3g.40gb".to_string(), mig_uuid.clone()));
        assert_eq!(devices[1].1, format!("{}::2", s.gpus[1].uuid));
        assert_eq!(s.processes[0].owner, Some((0, 0)));
        assert_eq!(s.pods[0].containers[0].id.len(), 64);
    }

    #[test]
    fn allocations_the_device_plugin_could_not_make_are_refused() {
        let twice = format!(
            "{MIG_NODE}pods:
  - {{namespace: a, name: p, containers: [{{name: c, devices: [{{resource: nvidia.com/gpu, gpu: 1}}]}}]}}
  - {{namespace: a, name: q, containers: [{{name: c, devices: [{{resource: nvidia.com/gpu, gpu: 1}}]}}]}}
"
        );
        let (field, reason) = refused(&twice);
        assert_eq!(field, "pods[1].containers[0].devices[0]");
        assert!(reason.contains("already allocated to a/p/c"), "{reason}");
        let wrong_profile = format!(
            "{MIG_NODE}pods:
  - {{namespace: a, name: p, containers: [{{name: c, devices: [{{resource: nvidia.com/mig-1g.10gb, gpu: 0, mig: 0}}]}}]}}
"
        );
        assert!(refused(&wrong_profile).1.contains("is a 3g.40gb"));
        let whole_mig_gpu = format!(
            "{MIG_NODE}pods:
  - {{namespace: a, name: p, containers: [{{name: c, devices: [{{resource: nvidia.com/gpu, gpu: 0}}]}}]}}
"
        );
        assert!(refused(&whole_mig_gpu).1.contains("in MIG mode"));
    }

    #[test]
    fn claims_name_the_dra_drivers_devices_and_pods_of_a_namespace_share_one() {
        let text = format!(
            "{MIG_NODE}dra: {{}}
pods:
  - {{namespace: a, name: p, containers: [{{name: c, claims: [{{name: slice, gpu: 0, mig: 1}}, {{name: whole, gpu: 1}}]}}]}}
  - {{namespace: a, name: q, containers: [{{name: c, claims: [{{name: whole, gpu: 1}}]}}]}}
"
        );
        let s = Scenario::parse("n.yaml", &text).unwrap();
        let dra = s.dra.as_ref().unwrap();
        assert_eq!((dra.driver.as_str(), dra.gpus.clone()), ("gpu.nvidia.com", vec![0, 1]));
        let published = dra.devices(&s.gpus);
        assert_eq!(published.len(), 3, "two 3g.40gb instances and one whole GPU: {published:?}");
        let instance = &s.gpus[0].mig.as_ref().unwrap()[1];
        let slice = &s.pods[0].containers[0].claims[0];
        assert_eq!(slice.uuid, instance.uuid);
        assert_eq!(
            slice.device,
            format!("gpu-0-mig-3g40gb-{}-{}", instance.profile.profile_id, instance.placement_start)
        );
        let mig = published.iter().find(|d| d.uuid == instance.uuid).unwrap();
        assert_eq!(
            (mig.parent_uuid.as_deref(), mig.profile.as_deref()),
            (Some(s.gpus[0].uuid.as_str()), Some("3g.40gb"))
        );
        assert_eq!(s.pods[1].containers[0].claims[0].device, "gpu-1");
    }

    #[test]
    fn claims_the_driver_could_not_allocate_are_refused() {
        let other_claim = format!(
            "{MIG_NODE}dra: {{}}
pods:
  - {{namespace: a, name: p, containers: [{{name: c, claims: [{{name: one, gpu: 1}}]}}]}}
  - {{namespace: a, name: q, containers: [{{name: c, claims: [{{name: two, gpu: 1}}]}}]}}
"
        );
        let (field, reason) = refused(&other_claim);
        assert_eq!(field, "pods[1].containers[0].claims[0]");
        assert!(reason.contains("already allocated to claim a/one"), "{reason}");
        let other_namespace =
            other_claim.replace("name: two", "name: one").replace("namespace: a, name: q", "namespace: b, name: q");
        assert!(refused(&other_namespace).1.contains("already allocated to claim a/one"));
        let plugin_on_dra = format!(
            "{MIG_NODE}dra: {{gpus: [1]}}
pods:
  - {{namespace: a, name: p, containers: [{{name: c, devices: [{{resource: nvidia.com/gpu, gpu: 1}}]}}]}}
"
        );
        assert!(refused(&plugin_on_dra).1.contains("allocate it through a claim"));
        let unpublished = format!(
            "{MIG_NODE}dra: {{gpus: [1]}}
pods:
  - {{namespace: a, name: p, containers: [{{name: c, claims: [{{name: x, gpu: 0, mig: 0}}]}}]}}
"
        );
        assert!(refused(&unpublished).1.contains("does not publish GPU 0"));
        let whole_mig_gpu = unpublished.replace("gpus: [1]", "gpus: [0, 1]").replace(", mig: 0", "");
        assert!(refused(&whole_mig_gpu).1.contains("in MIG mode"));
        let no_driver = format!(
            "{MIG_NODE}pods:\n  - {{namespace: a, name: p, containers: [{{name: c, claims: [{{name: x, gpu: 1}}]}}]}}\n"
        );
        assert!(refused(&no_driver).1.contains("no `dra` section"));
        assert_eq!(
            refused(&format!("{MIG_NODE}dra: {{gpus: [5]}}\n")),
            ("dra.gpus".to_string(), "there is no GPU 5".to_string())
        );
    }

    #[test]
    fn processes_must_sit_where_the_gpu_allows() {
        let no_instance = format!("{MIG_NODE}host_processes: [{{pid: 7, gpu: 0}}]\n");
        assert_eq!(refused(&no_instance).0, "host_processes[0].mig");
        let duplicate = format!("{MIG_NODE}host_processes: [{{pid: 7, gpu: 1}}, {{pid: 7, gpu: 1}}]\n");
        assert!(refused(&duplicate).1.contains("PID 7"));
    }

    #[test]
    fn pci_bus_ids_parse_in_both_domain_widths() {
        assert_eq!(parse_pci_bus_id("0000:3b:00.0"), Some(PciAddress { domain: 0, bus: 0x3b, device: 0, function: 0 }));
        assert!(parse_pci_bus_id("00000000:3b:00").is_none());
        assert!(parse_pci_bus_id("00000000:3b:40.0").is_none());
    }
}
