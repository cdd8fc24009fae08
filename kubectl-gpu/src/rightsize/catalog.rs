//! The GPU models `rightsize` knows, and the MIG profiles each one can be cut into.
//!
//! Source: NVIDIA's MIG User Guide (r580), "Supported MIG Profiles", tables "GPU Instance
//! Profiles on A100" (with its note giving the A100-SXM4-80GB names), "on H100" and "on
//! H200" (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html>):
//! each profile's compute slices (of 7), memory slices (of 8) and instance count; and
//! "Getting Started with MIG", `nvidia-smi mig -lgipp`, for the **placements**:
//!
//! ```text
//! Profile ID 19 (1g)        Placements: {0,1,2,3,4,5,6}:1
//! Profile ID 20 (1g+me)     Placements: {0,1,2,3,4,5,6}:1
//! Profile ID 15 (1g, 2 mem) Placements: {0,2,4,6}:2
//! Profile ID 14 (2g)        Placements: {0,2,4}:2
//! Profile ID  9 (3g)        Placements: {0,4}:4
//! Profile ID  5 (4g)        Placement : {0}:4
//! Profile ID  0 (7g)        Placement : {0}:8
//! ```
//!
//! A placement is `{start}:size` on the **memory-slice** axis (NVML's
//! `nvmlGpuInstancePlacement_t`: "start: index of first occupied memory slice; size:
//! number of memory slices occupied"), and NVML refuses a GPU instance that overlaps one
//! already there. The three boards share this geometry (the guide's tables give all three
//! the same slice fractions and instance counts, and the `-lgipp` output above is the
//! same on A100 and H100); their profiles differ only in memory and name.
//!
//! Memory is the lowest figure the profile is reported with (`nvidia-smi mig -lgip`
//! moves by a few hundred MiB between drivers), so that "it fits" errs on the safe side.
//! For the H200 no `-lgip` listing was at hand: its figures are kept below the names'
//! nominal gigabytes (1g.18gb as 16 GiB, 7g.141gb as 134 GiB).
//! The guide's A100 table gives `1g.10gb` (40 GB board; `1g.20gb` on 80 GB) one memory
//! slice, but its placement size is 2 and the H100 table says 1/4: two slices it is.
//!
//! L40S, RTX 4090 and V100 have no MIG; they are shared by time-slicing.

/// Compute slices of a MIG-capable GPU (each about 1/7 of its SMs).
pub const COMPUTE_SLICES: u8 = 7;
/// Memory slices of a MIG-capable GPU (each 1/8 of its memory and bandwidth).
pub const MEMORY_SLICES: u8 = 8;

const GIB: f64 = 1_073_741_824.0;

/// Why a model or profile was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CatalogError {
    #[error("GPU model {model:?} is not one rightsize knows; it knows {known}")]
    UnknownModel { model: String, known: String },
    #[error("{model} has no MIG profile {profile:?}; it has {known}")]
    UnknownProfile { model: String, profile: String, known: String },
    #[error("{model} has no MIG (it is shared by time-slicing), so it has no profile {profile:?}")]
    NoMig { model: String, profile: String },
}

pub type Result<T, E = CatalogError> = std::result::Result<T, E>;

/// One MIG GPU-instance profile of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// As `nvidia-smi` and the device plugin's `nvidia.com/mig-<name>` write it.
    pub name: &'static str,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub memory_bytes: f64,
    /// How many fit on an empty GPU.
    pub max_instances: u8,
    /// Valid first memory slices (`-lgipp`); the instance spans `memory_slices` from there.
    pub starts: &'static [u8],
    /// A `+me` profile: the media engines, at most one per GPU. Never recommended (the
    /// plain profile of the same size costs the same); known so a pod on one is read.
    pub media_extensions: bool,
}

impl Profile {
    /// The share of the GPU it blocks: the larger of its compute share (of 7) and its
    /// memory share (of 8). 3g.40gb is max(3/7, 4/8) = 1/2.
    pub fn fraction(&self) -> f64 {
        (f64::from(self.compute_slices) / f64::from(COMPUTE_SLICES))
            .max(f64::from(self.memory_slices) / f64::from(MEMORY_SLICES))
    }

    /// Its compute as a fraction of the GPU's.
    pub fn compute_fraction(&self) -> f64 {
        f64::from(self.compute_slices) / f64::from(COMPUTE_SLICES)
    }
}

/// A GPU model.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// `A100-80GB`.
    pub key: &'static str,
    /// Whether an NVML model name (the exporter's `model` label) is this model.
    pub is: fn(&str) -> bool,
    /// Memory of the whole GPU as NVML reports it (the figure a time-slice share is cut from).
    pub memory_bytes: f64,
    /// Empty where the model has no MIG.
    pub profiles: &'static [Profile],
}

impl Model {
    pub fn has_mig(&self) -> bool {
        !self.profiles.is_empty()
    }

    /// The profile called `name` on this model.
    pub fn profile(&self, name: &str) -> Result<&'static Profile> {
        if !self.has_mig() {
            return Err(CatalogError::NoMig { model: self.key.into(), profile: name.into() });
        }
        self.profiles.iter().find(|p| p.name == name).ok_or_else(|| CatalogError::UnknownProfile {
            model: self.key.into(),
            profile: name.into(),
            known: self.profiles.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        })
    }

    /// Profiles worth recommending (no `+me`), cheapest first; among equals, the one
    /// with more memory, then more compute.
    pub fn ladder(&self) -> Vec<&'static Profile> {
        let mut v: Vec<&'static Profile> = self.profiles.iter().filter(|p| !p.media_extensions).collect();
        v.sort_by(|a, b| {
            a.fraction()
                .total_cmp(&b.fraction())
                .then(b.memory_bytes.total_cmp(&a.memory_bytes))
                .then(b.compute_slices.cmp(&a.compute_slices))
        });
        v
    }
}

const ONE: &[u8] = &[0, 1, 2, 3, 4, 5, 6];
const TWO_MEM: &[u8] = &[0, 2, 4, 6];
const TWO: &[u8] = &[0, 2, 4];
const THREE: &[u8] = &[0, 4];
const ZERO: &[u8] = &[0];

const fn p(
    name: &'static str,
    compute_slices: u8,
    memory_slices: u8,
    gib: f64,
    max_instances: u8,
    starts: &'static [u8],
    media_extensions: bool,
) -> Profile {
    Profile { name, compute_slices, memory_slices, memory_bytes: gib * GIB, max_instances, starts, media_extensions }
}

const A100_80GB: &[Profile] = &[
    p("1g.10gb", 1, 1, 9.5, 7, ONE, false),
    p("1g.10gb+me", 1, 1, 9.5, 1, ONE, true),
    p("1g.20gb", 1, 2, 19.5, 4, TWO_MEM, false),
    p("2g.20gb", 2, 2, 19.5, 3, TWO, false),
    p("3g.40gb", 3, 4, 39.25, 2, THREE, false),
    p("4g.40gb", 4, 4, 39.25, 1, ZERO, false),
    p("7g.80gb", 7, 8, 78.5, 1, ZERO, false),
];

const H100_80GB: &[Profile] = &[
    p("1g.10gb", 1, 1, 9.62, 7, ONE, false),
    p("1g.10gb+me", 1, 1, 9.62, 1, ONE, true),
    p("1g.20gb", 1, 2, 19.5, 4, TWO_MEM, false),
    p("2g.20gb", 2, 2, 19.5, 3, TWO, false),
    p("3g.40gb", 3, 4, 39.25, 2, THREE, false),
    p("4g.40gb", 4, 4, 39.25, 1, ZERO, false),
    p("7g.80gb", 7, 8, 78.875, 1, ZERO, false),
];

const H200_141GB: &[Profile] = &[
    p("1g.18gb", 1, 1, 16.0, 7, ONE, false),
    p("1g.18gb+me", 1, 1, 16.0, 1, ONE, true),
    p("1g.35gb", 1, 2, 32.0, 4, TWO_MEM, false),
    p("2g.35gb", 2, 2, 32.0, 3, TWO, false),
    p("3g.71gb", 3, 4, 64.0, 2, THREE, false),
    p("4g.71gb", 4, 4, 64.0, 1, ZERO, false),
    p("7g.141gb", 7, 8, 134.0, 1, ZERO, false),
];

/// Every model, in the price table's order. The 40 GB A100 and the 94/96 GB H100 have
/// other profiles and are left out rather than priced by a neighbour's table.
pub const MODELS: &[Model] = &[
    Model {
        key: "A100-80GB",
        is: |n| n.starts_with("NVIDIA A100") && n.contains("80GB"),
        memory_bytes: 80.0 * GIB,
        profiles: A100_80GB,
    },
    Model {
        key: "H100-80GB",
        is: |n| n.starts_with("NVIDIA H100") && !["NVL", "94GB", "96GB"].iter().any(|x| n.contains(x)),
        memory_bytes: 79.6 * GIB,
        profiles: H100_80GB,
    },
    Model { key: "H200-141GB", is: |n| n.starts_with("NVIDIA H200"), memory_bytes: 140.4 * GIB, profiles: H200_141GB },
    Model { key: "L40S", is: |n| n.starts_with("NVIDIA L40S"), memory_bytes: 44.9 * GIB, profiles: &[] },
    Model {
        key: "RTX 4090",
        is: |n| n.starts_with("NVIDIA GeForce RTX 4090"),
        memory_bytes: 23.9 * GIB,
        profiles: &[],
    },
    Model {
        key: "V100-32GB",
        is: |n| n.contains("V100") && n.contains("32GB"),
        memory_bytes: 32.0 * GIB,
        profiles: &[],
    },
    Model {
        key: "V100-16GB",
        is: |n| n.contains("V100") && n.contains("16GB"),
        memory_bytes: 16.0 * GIB,
        profiles: &[],
    },
];

/// The model called `name`: a key (`A100-80GB`, any case) or an NVML model name.
pub fn model(name: &str) -> Result<&'static Model> {
    MODELS.iter().find(|m| m.key.eq_ignore_ascii_case(name) || (m.is)(name)).ok_or_else(|| CatalogError::UnknownModel {
        model: name.into(),
        known: MODELS.iter().map(|m| m.key).collect::<Vec<_>>().join(", "),
    })
}

/// Where a layout breaks the placement rules.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("{profile} cannot start at memory slice {start}; it starts at {starts:?}")]
    Start { profile: String, start: u8, starts: &'static [u8] },
    #[error("{profile} at memory slice {start} overlaps {other} at {other_start}")]
    Overlap { profile: String, start: u8, other: String, other_start: u8 },
    #[error("the instances need {needed} compute slices; the GPU has {COMPUTE_SLICES}")]
    Compute { needed: u32 },
    #[error("{count} instances of {profile}; at most {max} fit on a GPU")]
    TooMany { profile: String, count: usize, max: u8 },
}

/// Checks a GPU's layout (profile name, first memory slice) against the model's rules:
/// each start one the profile allows, no two instances on the same memory slice, at most
/// 7 compute slices in all and no more instances of a profile than the GPU holds.
pub fn validate_layout(model: &Model, layout: &[(&str, u8)]) -> Result<(), LayoutError> {
    let mut owner: [Option<(usize, u8)>; MEMORY_SLICES as usize] = [None; MEMORY_SLICES as usize];
    let mut compute = 0u32;
    let mut profiles = Vec::with_capacity(layout.len());
    for (i, (name, start)) in layout.iter().enumerate() {
        let p = model.profile(name)?;
        if !p.starts.contains(start) {
            return Err(LayoutError::Start { profile: p.name.into(), start: *start, starts: p.starts });
        }
        for slice in *start..start + p.memory_slices {
            let cell = &mut owner[usize::from(slice)];
            if let Some((other, other_start)) = *cell {
                return Err(LayoutError::Overlap {
                    profile: p.name.into(),
                    start: *start,
                    other: layout[other].0.into(),
                    other_start,
                });
            }
            *cell = Some((i, *start));
        }
        compute += u32::from(p.compute_slices);
        profiles.push(p);
    }
    if compute > u32::from(COMPUTE_SLICES) {
        return Err(LayoutError::Compute { needed: compute });
    }
    for p in &profiles {
        let count = profiles.iter().filter(|q| q.name == p.name).count();
        if count > usize::from(p.max_instances) {
            return Err(LayoutError::TooMany { profile: p.name.into(), count, max: p.max_instances });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_names_and_keys_find_their_model() {
        for (name, key) in [
            ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
            ("NVIDIA A100 80GB PCIe", "A100-80GB"),
            ("NVIDIA H100 80GB HBM3", "H100-80GB"),
            ("NVIDIA H100", "H100-80GB"),
            ("NVIDIA H200", "H200-141GB"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA GeForce RTX 4090", "RTX 4090"),
            ("Tesla V100-SXM2-32GB", "V100-32GB"),
            ("a100-80gb", "A100-80GB"),
        ] {
            assert_eq!(model(name).unwrap().key, key, "{name}");
        }
    }

    #[test]
    fn an_unknown_model_or_profile_is_refused_by_name() {
        let e = model("NVIDIA A100-SXM4-40GB").unwrap_err().to_string();
        assert!(e.contains("\"NVIDIA A100-SXM4-40GB\" is not one rightsize knows") && e.contains("H200-141GB"), "{e}");
        let a100 = model("A100-80GB").unwrap();
        let e = a100.profile("1g.18gb").unwrap_err().to_string();
        assert_eq!(
            e,
            "A100-80GB has no MIG profile \"1g.18gb\"; it has 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
        );
        let e = model("L40S").unwrap().profile("1g.10gb").unwrap_err();
        assert!(matches!(e, CatalogError::NoMig { .. }), "{e}");
    }

    #[test]
    fn the_three_boards_have_nvidias_geometry() {
        for key in ["A100-80GB", "H100-80GB", "H200-141GB"] {
            let m = model(key).unwrap();
            let shape: Vec<(u8, u8, u8, &[u8])> =
                m.profiles.iter().map(|p| (p.compute_slices, p.memory_slices, p.max_instances, p.starts)).collect();
            assert_eq!(
                shape,
                [
                    (1, 1, 7, ONE),
                    (1, 1, 1, ONE),
                    (1, 2, 4, TWO_MEM),
                    (2, 2, 3, TWO),
                    (3, 4, 2, THREE),
                    (4, 4, 1, ZERO),
                    (7, 8, 1, ZERO)
                ],
                "{key}"
            );
            // Every profile fills the GPU to its instance count at its placements.
            for p in m.profiles.iter().filter(|p| !p.media_extensions) {
                let layout: Vec<(&str, u8)> =
                    p.starts.iter().take(usize::from(p.max_instances)).map(|s| (p.name, *s)).collect();
                assert_eq!(layout.len(), usize::from(p.max_instances), "{key} {}", p.name);
                validate_layout(m, &layout).unwrap();
            }
        }
        assert!(model("RTX 4090").unwrap().profiles.is_empty());
    }

    #[test]
    fn a_profile_costs_the_larger_of_its_compute_and_memory_shares() {
        let a100 = model("A100-80GB").unwrap();
        let f = |n: &str| a100.profile(n).unwrap().fraction();
        assert_eq!(f("1g.10gb"), 1.0 / 7.0);
        assert_eq!(f("1g.20gb"), 0.25);
        assert_eq!(f("2g.20gb"), 2.0 / 7.0);
        assert_eq!(f("3g.40gb"), 0.5);
        assert_eq!(f("4g.40gb"), 4.0 / 7.0);
        assert_eq!(f("7g.80gb"), 1.0);
        let ladder: Vec<&str> = a100.ladder().iter().map(|p| p.name).collect();
        assert_eq!(ladder, ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]);
    }

    #[test]
    fn layouts_that_break_placement_rules_are_refused() {
        let a100 = model("A100-80GB").unwrap();
        // The seed's layouts hold.
        validate_layout(a100, &[("3g.40gb", 0), ("3g.40gb", 4)]).unwrap();
        validate_layout(a100, &[("4g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5)]).unwrap();
        validate_layout(a100, &[("4g.40gb", 0), ("3g.40gb", 4)]).unwrap();
        let cases: &[(&[(&str, u8)], &str)] = &[
            (&[("3g.40gb", 3)], "3g.40gb cannot start at memory slice 3; it starts at [0, 4]"),
            (&[("1g.10gb", 7)], "cannot start at memory slice 7"),
            (&[("4g.40gb", 0), ("1g.20gb", 2)], "1g.20gb at memory slice 2 overlaps 4g.40gb at 0"),
            // Counted by slices alone (7 compute, 8 memory) this fits; placed, the
            // second 2g.20gb would need to start at 6, where no 2g profile may.
            (&[("3g.40gb", 0), ("2g.20gb", 4), ("2g.20gb", 6)], "2g.20gb cannot start at memory slice 6"),
            (&[("1g.10gb+me", 0), ("1g.10gb+me", 1)], "2 instances of 1g.10gb+me; at most 1"),
            (&[("7g.80gb", 0), ("1g.10gb", 0)], "overlaps"),
            (&[("2g.20gb", 0), ("1g.18gb", 2)], "A100-80GB has no MIG profile \"1g.18gb\""),
        ];
        for (layout, wanted) in cases {
            let e = validate_layout(a100, layout).unwrap_err().to_string();
            assert!(e.contains(wanted), "{layout:?}: {e}");
        }
    }
}
