//! MIG layouts in a scenario: which GPU instances a GPU is cut into.
//!
//! `mig: {layout: all-1g.10gb}` fills the GPU with one profile (the seed's
//! `all-1g.10gb`, `all-2g.20gb`, `all-3g.40gb`; on H200 e.g. `all-1g.18gb`); or
//! `mig: {instances: [{profile: 4g.40gb}, {profile: 1g.10gb}, ...]}` lists them. Each
//! GPU instance holds one compute instance of the same size. Layouts are checked
//! against the GPU's seven compute and eight memory slices.
//!
//! `extra_profiles` gives the GPU profiles a newer driver offers beyond the model's
//! table (the `-me`, `+me.all` and `+gfx` variants, or profile indices past
//! `NVML_GPU_INSTANCE_PROFILE_COUNT`), each with its profile index, the driver's
//! profile id and its size. Their ids are the scenario's own, not a real driver's: the
//! point is to show a consumer a profile table it has not seen, and a consumer must
//! treat ids as opaque anyway.

use serde::Deserialize;

use super::Signal;
use crate::models::{MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, MigProfile, Model, mig_profiles};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub layout: Option<String>,
    #[serde(default)]
    pub instances: Vec<InstanceSpec>,
    #[serde(default)]
    pub extra_profiles: Vec<ProfileSpec>,
}

/// A profile of a newer driver, as the scenario describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// Without the `MIG ` prefix, e.g. `1g.10gb-me`.
    pub name: String,
    /// `NVML_GPU_INSTANCE_PROFILE_*` value (may be past the count this NVML knows).
    pub index: u32,
    /// The driver's profile id (`nvidia-smi mig -lgip` ID column).
    pub id: u32,
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub memory_mib: u64,
    #[serde(default = "default_instances")]
    pub max_instances: u32,
    pub multiprocessors: Option<u32>,
}

fn default_instances() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSpec {
    pub profile: String,
    pub uuid: Option<String>,
    #[serde(default)]
    pub values: InstanceValues,
}

/// Per-instance readings; GPM metrics are percentages of the instance's own capacity.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceValues {
    /// SM activity (GPM). Default 0.
    pub sm_activity: Option<Signal>,
    /// Tensor pipe activity (GPM). Default 0.
    pub tensor_activity: Option<Signal>,
    /// DRAM bandwidth use (GPM). Default 0.
    pub dram_activity: Option<Signal>,
    /// Graphics engine activity (GPM). Default: `sm_activity`.
    pub graphics_activity: Option<Signal>,
    /// Memory allocated in the instance, MiB. Default 0.
    pub memory_used_mib: Option<Signal>,
}

/// A resolved GPU instance (with its single compute instance).
#[derive(Debug, Clone)]
pub struct MigInstance {
    /// Position in the GPU's MIG device list (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
    pub profile: MigProfile,
    pub uuid: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    /// First compute slice it occupies.
    pub placement_start: u32,
    pub values: InstanceValues,
}

/// The extended resource NVIDIA's k8s-device-plugin v0.17.4 advertises a MIG instance of
/// profile `instance` under with the mixed strategy and its default resource patterns, on
/// a GPU with `profiles`. The plugin makes one resource per profile, `nvidia.com/mig-` and
/// the profile's name with `+` (not allowed in a resource name) as `.` (internal/rm/rm.go:
/// `strings.ReplaceAll("mig-"+p.String(), "+", ".")`), its pattern the profile's name, in
/// profile-index order (go-nvlib v0.7.4 `VisitMigProfiles`); an instance goes to the first
/// pattern that matches, and a pattern matches anywhere in the name (api/config/v1/
/// resources.go, `Matches`: an unanchored regular expression). So a `1g.18gb+me` instance
/// falls under `1g.18gb`, listed first, and is advertised as `nvidia.com/mig-1g.18gb`, as
/// the real plugin on the real kubelet shows (real-cluster/tests/real_kubelet.rs).
pub fn mixed_resource(instance: &MigProfile, profiles: &[MigProfile]) -> String {
    let mut ordered: Vec<&MigProfile> = profiles.iter().collect();
    ordered.sort_by_key(|p| p.index);
    let name = ordered.iter().find(|p| instance.name.contains(p.name.as_ref())).map_or(&instance.name, |p| &p.name);
    format!("nvidia.com/mig-{}", name.replace('+', "."))
}

/// The resource the plugin offers a MIG instance as: its [`mixed_resource`] under the
/// mixed strategy, `nvidia.com/gpu` under the single one (internal/rm/rm.go
/// `AddDefaultResourcesToConfig`: the single strategy adds one MIG pattern, `*`, named
/// `gpu`).
pub fn offered_as(strategy: super::MigStrategy, instance: &MigProfile, profiles: &[MigProfile]) -> String {
    match strategy {
        super::MigStrategy::Mixed => mixed_resource(instance, profiles),
        super::MigStrategy::Single => "nvidia.com/gpu".to_string(),
    }
}

/// The model's profiles plus the spec's extra ones; the error is (field, reason).
fn resolve_profiles(extra: &[ProfileSpec], model: &Model) -> Result<Vec<MigProfile>, (String, String)> {
    let mut profiles = mig_profiles(model).to_vec();
    for (i, p) in extra.iter().enumerate() {
        let field = |name: &str| format!("mig.extra_profiles[{i}].{name}");
        if p.name.is_empty() || p.name.len() >= 90 || p.name.starts_with("MIG ") {
            return Err((field("name"), format!("{:?}: 1 to 89 characters, without the `MIG ` prefix", p.name)));
        }
        if let Some(other) = profiles.iter().find(|o| o.name == p.name) {
            return Err((field("name"), format!("{} is already a profile of this GPU", other.name)));
        }
        if let Some(other) = profiles.iter().find(|o| o.index == p.index) {
            return Err((field("index"), format!("{} is already the index of {}", p.index, other.name)));
        }
        if let Some(other) = profiles.iter().find(|o| o.profile_id == p.id) {
            return Err((field("id"), format!("{} is already the id of {}", p.id, other.name)));
        }
        if !(1..=MIG_COMPUTE_SLICES).contains(&p.compute_slices) {
            return Err((field("compute_slices"), format!("{} is not in 1..={MIG_COMPUTE_SLICES}", p.compute_slices)));
        }
        if !(1..=MIG_MEMORY_SLICES).contains(&p.memory_slices) {
            return Err((field("memory_slices"), format!("{} is not in 1..={MIG_MEMORY_SLICES}", p.memory_slices)));
        }
        if p.max_instances == 0 || p.max_instances > MIG_COMPUTE_SLICES {
            return Err((field("max_instances"), format!("{} is not in 1..={MIG_COMPUTE_SLICES}", p.max_instances)));
        }
        profiles.push(MigProfile {
            name: p.name.clone().into(),
            index: p.index,
            profile_id: p.id,
            compute_slices: p.compute_slices,
            memory_slices: p.memory_slices,
            memory_mib: p.memory_mib,
            multiprocessors: p.multiprocessors.unwrap_or(16 * p.compute_slices),
            max_instances: p.max_instances,
        });
    }
    Ok(profiles)
}

/// Resolves a MIG spec for GPU `gpu_index` into the GPU's profile table and its
/// instances; the error is (field, reason).
pub fn resolve(
    spec: MigSpec,
    model: &Model,
    gpu_index: u32,
) -> Result<(Vec<MigProfile>, Vec<MigInstance>), (String, String)> {
    if mig_profiles(model).is_empty() {
        return Err(("mig".into(), format!("{} has no MIG", model.key)));
    }
    let profiles = resolve_profiles(&spec.extra_profiles, model)?;
    let specs = instance_specs(spec, &profiles, model)?;
    let compute: u32 = specs.iter().map(|(p, _)| p.compute_slices).sum();
    let memory: u32 = specs.iter().map(|(p, _)| p.memory_slices).sum();
    if compute > MIG_COMPUTE_SLICES || memory > MIG_MEMORY_SLICES {
        return Err((
            "mig".into(),
            format!(
                "the instances need {compute} compute and {memory} memory slices; the GPU has {MIG_COMPUTE_SLICES} and {MIG_MEMORY_SLICES}"
            ),
        ));
    }
    let mut start = 0;
    let mut instances = Vec::with_capacity(specs.len());
    for (i, (profile, spec)) in specs.into_iter().enumerate() {
        let compute_slices = profile.compute_slices;
        instances.push(instance(i, profile, spec, gpu_index, start)?);
        start += compute_slices;
    }
    Ok((profiles, instances))
}

/// Each instance with its profile, from a named layout (`all-<profile>`) or a list.
fn instance_specs(
    spec: MigSpec,
    profiles: &[MigProfile],
    model: &Model,
) -> Result<Vec<(MigProfile, InstanceSpec)>, (String, String)> {
    let find = |name: &str, field: String| {
        profiles.iter().find(|p| p.name == name).cloned().ok_or_else(|| {
            let known: Vec<&str> = profiles.iter().map(|p| p.name.as_ref()).collect();
            (field, format!("{} has no MIG profile {name:?}; it has {}", model.key, known.join(", ")))
        })
    };
    match (&spec.layout, spec.instances.is_empty()) {
        (Some(_), false) => Err(("mig".into(), "give either layout or instances, not both".into())),
        (None, true) => Err(("mig".into(), "give a layout (e.g. all-1g.10gb) or a list of instances".into())),
        (Some(layout), true) => {
            let name = layout.strip_prefix("all-").ok_or_else(|| {
                ("mig.layout".to_string(), format!("{layout:?}: named layouts are all-<profile>, e.g. all-3g.40gb"))
            })?;
            let profile = find(name, "mig.layout".into())?;
            let blank = InstanceSpec { profile: name.into(), uuid: None, values: InstanceValues::default() };
            Ok((0..profile.max_instances).map(|_| (profile.clone(), blank.clone())).collect())
        }
        (None, false) => spec
            .instances
            .into_iter()
            .enumerate()
            .map(|(i, instance)| Ok((find(&instance.profile, format!("mig.instances[{i}].profile"))?, instance)))
            .collect(),
    }
}

/// Instance `i`, placed at compute slice `start`: its UUID (given or derived from the
/// GPU and index) and its validated value signals.
fn instance(
    i: usize,
    profile: MigProfile,
    spec: InstanceSpec,
    gpu_index: u32,
    start: u32,
) -> Result<MigInstance, (String, String)> {
    let index = i as u32;
    let uuid = match spec.uuid {
        Some(u) if is_mig_uuid(&u) => u,
        Some(u) => {
            return Err((
                format!("mig.instances[{i}].uuid"),
                format!("{u:?} is not of the form MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"),
            ));
        }
        None => format!(
            "MIG-{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            0x5eed_0000u32 + gpu_index,
            index,
            gpu_index,
            index,
            0xa11ce_u64
        ),
    };
    for (name, signal) in [
        ("sm_activity", &spec.values.sm_activity),
        ("tensor_activity", &spec.values.tensor_activity),
        ("dram_activity", &spec.values.dram_activity),
        ("graphics_activity", &spec.values.graphics_activity),
        ("memory_used_mib", &spec.values.memory_used_mib),
    ] {
        if let Some(s) = signal {
            s.validate().map_err(|r| (format!("mig.instances[{i}].values.{name}"), r))?;
        }
    }
    Ok(MigInstance {
        index,
        profile,
        uuid,
        // The driver numbers GPU instances from 1 in creation order here; real ids
        // depend on placement, and consumers must not assume either.
        gpu_instance_id: index + 1,
        compute_instance_id: 0,
        placement_start: start,
        values: spec.values,
    })
}

fn is_mig_uuid(text: &str) -> bool {
    text.strip_prefix("MIG-").is_some_and(|hex| {
        let groups: Vec<&str> = hex.split('-').collect();
        groups.len() == 5
            && groups
                .iter()
                .zip([8, 4, 4, 4, 12])
                .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::find;

    fn spec(yaml: &str) -> MigSpec {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn the_seed_layouts_fit() {
        let h100 = find("H100-SXM5-80GB").unwrap();
        assert_eq!(resolve(spec("layout: all-1g.10gb"), h100, 0).unwrap().1.len(), 7);
        assert_eq!(resolve(spec("layout: all-2g.20gb"), h100, 0).unwrap().1.len(), 3);
        assert_eq!(resolve(spec("layout: all-3g.40gb"), h100, 0).unwrap().1.len(), 2);
        let mixed = resolve(spec("instances: [{profile: 4g.40gb}, {profile: 1g.10gb}, {profile: 1g.10gb}]"), h100, 0)
            .unwrap()
            .1;
        assert_eq!(mixed.iter().map(|i| i.placement_start).collect::<Vec<_>>(), [0, 4, 5]);
        let h200 = find("H200-SXM-141GB").unwrap();
        assert_eq!(resolve(spec("layout: all-1g.18gb"), h200, 0).unwrap().1.len(), 7);
    }

    #[test]
    fn instances_are_advertised_under_the_device_plugins_first_matching_pattern() {
        let h100 = find("H100-SXM5-80GB").unwrap();
        let (profiles, instances) =
            resolve(spec("instances: [{profile: 1g.10gb+me}, {profile: 3g.40gb}, {profile: 1g.20gb}]"), h100, 0)
                .unwrap();
        let names: Vec<String> = instances.iter().map(|i| mixed_resource(&i.profile, &profiles)).collect();
        // `1g.10gb` (index 0) matches inside `1g.10gb+me` first.
        assert_eq!(names, ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.20gb"]);
        // A profile no earlier pattern matches keeps its own name, `+` as `.`.
        let alone: Vec<crate::models::MigProfile> =
            profiles.iter().filter(|p| p.name == "1g.10gb+me").cloned().collect();
        assert_eq!(mixed_resource(&instances[0].profile, &alone), "nvidia.com/mig-1g.10gb.me");
    }

    #[test]
    fn impossible_layouts_are_refused() {
        let a100 = find("A100-SXM4-80GB").unwrap();
        let err = resolve(spec("instances: [{profile: 4g.40gb}, {profile: 4g.40gb}]"), a100, 0).unwrap_err();
        assert!(err.1.contains("8 compute"), "{err:?}");
        let err = resolve(spec("layout: all-1g.18gb"), a100, 0).unwrap_err();
        assert_eq!(err.0, "mig.layout");
        let l40s = find("L40S-48GB").unwrap();
        assert!(resolve(spec("layout: all-1g.10gb"), l40s, 0).unwrap_err().1.contains("no MIG"));
    }

    #[test]
    fn generated_uuids_are_distinct_and_well_formed() {
        let h100 = find("H100-SXM5-80GB").unwrap();
        let a = resolve(spec("layout: all-1g.10gb"), h100, 0).unwrap().1;
        let b = resolve(spec("layout: all-1g.10gb"), h100, 1).unwrap().1;
        let mut all: Vec<&str> = a.iter().chain(&b).map(|i| i.uuid.as_str()).collect();
        assert!(all.iter().all(|u| is_mig_uuid(u)), "{all:?}");
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 14);
    }

    #[test]
    fn extra_profiles_extend_the_table_and_can_be_used() {
        let h100 = find("H100-SXM5-80GB").unwrap();
        let (profiles, instances) = resolve(
            spec(
                "extra_profiles: [{name: 2g.20gb+me.all, index: 16, id: 48, compute_slices: 2, memory_slices: 2, memory_mib: 20096}]
instances: [{profile: 2g.20gb+me.all}, {profile: 1g.10gb+me}]",
            ),
            h100,
            0,
        )
        .unwrap();
        assert_eq!(profiles.len(), 8);
        assert_eq!((instances[0].profile.index, instances[0].profile.profile_id), (16, 48));
        assert_eq!(instances[1].profile.index, 7);
        let clash = "extra_profiles: [{name: x, index: 0, id: 99, compute_slices: 1, memory_slices: 1, memory_mib: 1}]
layout: all-1g.10gb";
        let err = resolve(spec(clash), h100, 0).unwrap_err();
        assert_eq!(err.0, "mig.extra_profiles[0].index");
        assert!(err.1.contains("1g.10gb"), "{err:?}");
    }
}
