//! The GPU models a scenario can put in a node, with what each one really supports.
//!
//! Figures are those the driver reports for each board (names as NVML spells them,
//! memory as `nvidia-smi` shows it, default power limit, maximum clocks, thermal
//! thresholds) and the feature set that decides which NVML calls answer
//! `NVML_ERROR_NOT_SUPPORTED`: no MIG on T4, L40S and RTX 4090, no GPM before Hopper, no
//! NVENC on A100/H100/H200, no ECC on the RTX 4090, page retirement before Ampere and
//! row remapping from Ampere on; NVLink only on the SXM boards (12 links on A100 SXM4,
//! 18 on H100 SXM5 and H200 SXM, 6 on V100 SXM2; none on the PCIe T4, L40S and RTX 4090), a
//! memory temperature sensor only on the HBM boards (those with a memory temperature
//! threshold). Thresholds are typical board values, close enough for
//! the exporter's and the health loop's logic; a scenario can override them per GPU.

use std::borrow::Cow;

/// Static description of a GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Scenario key, e.g. `H100-SXM5-80GB`.
    pub key: &'static str,
    /// `nvmlDeviceGetName`.
    pub name: &'static str,
    /// `nvmlDeviceArchitecture_t`.
    pub architecture: u32,
    pub compute_capability: (i32, i32),
    pub pci_device_id: u32,
    pub memory_total_bytes: u64,
    /// Memory the driver keeps for itself (`nvmlMemory_v2_t.reserved`).
    pub memory_reserved_bytes: u64,
    pub power_limit_watts: f64,
    pub max_sm_clock_mhz: u32,
    pub max_mem_clock_mhz: u32,
    pub temp_shutdown_c: u32,
    pub temp_slowdown_c: u32,
    pub temp_gpu_max_c: u32,
    /// `None` where the board has no memory temperature threshold.
    pub temp_mem_max_c: Option<u32>,
    pub ecc_supported: bool,
    pub nvenc: bool,
    pub nvdec: bool,
    pub mig_capable: bool,
    pub gpm: bool,
    pub row_remapping: bool,
    pub page_retirement: bool,
    pub pcie_gen: u32,
    /// NVLink links (`NVML_FI_DEV_NVLINK_LINK_COUNT`); 0 on boards without NVLink.
    pub nvlink_links: u32,
}

impl Model {
    /// Whether the board reports its memory temperature (`NVML_FI_DEV_MEMORY_TEMP`):
    /// the HBM boards, which are those with a memory temperature threshold.
    pub fn memory_temperature(&self) -> bool {
        self.temp_mem_max_c.is_some()
    }
}

const MIB: u64 = 1024 * 1024;

/// Every model the simulator knows.
pub const MODELS: &[Model] = &[
    Model {
        key: "A100-SXM4-80GB",
        name: "NVIDIA A100-SXM4-80GB",
        architecture: 7,
        compute_capability: (8, 0),
        pci_device_id: 0x20B2_10DE,
        memory_total_bytes: 81920 * MIB,
        memory_reserved_bytes: 512 * MIB,
        power_limit_watts: 400.0,
        max_sm_clock_mhz: 1410,
        max_mem_clock_mhz: 1593,
        temp_shutdown_c: 92,
        temp_slowdown_c: 89,
        temp_gpu_max_c: 85,
        temp_mem_max_c: Some(95),
        ecc_supported: true,
        nvenc: false,
        nvdec: true,
        mig_capable: true,
        gpm: false,
        row_remapping: true,
        page_retirement: false,
        pcie_gen: 4,
        nvlink_links: 12,
    },
    Model {
        key: "H100-SXM5-80GB",
        name: "NVIDIA H100 80GB HBM3",
        architecture: 9,
        compute_capability: (9, 0),
        pci_device_id: 0x2330_10DE,
        memory_total_bytes: 81559 * MIB,
        memory_reserved_bytes: 523 * MIB,
        power_limit_watts: 700.0,
        max_sm_clock_mhz: 1980,
        max_mem_clock_mhz: 2619,
        temp_shutdown_c: 92,
        temp_slowdown_c: 89,
        temp_gpu_max_c: 87,
        temp_mem_max_c: Some(95),
        ecc_supported: true,
        nvenc: false,
        nvdec: true,
        mig_capable: true,
        gpm: true,
        row_remapping: true,
        page_retirement: false,
        pcie_gen: 5,
        nvlink_links: 18,
    },
    Model {
        key: "H200-SXM-141GB",
        name: "NVIDIA H200",
        architecture: 9,
        compute_capability: (9, 0),
        pci_device_id: 0x2335_10DE,
        memory_total_bytes: 143771 * MIB,
        memory_reserved_bytes: 555 * MIB,
        power_limit_watts: 700.0,
        max_sm_clock_mhz: 1980,
        max_mem_clock_mhz: 3201,
        temp_shutdown_c: 92,
        temp_slowdown_c: 89,
        temp_gpu_max_c: 87,
        temp_mem_max_c: Some(95),
        ecc_supported: true,
        nvenc: false,
        nvdec: true,
        mig_capable: true,
        gpm: true,
        row_remapping: true,
        page_retirement: false,
        pcie_gen: 5,
        nvlink_links: 18,
    },
    Model {
        key: "L40S-48GB",
        name: "NVIDIA L40S",
        architecture: 8,
        compute_capability: (8, 9),
        pci_device_id: 0x26B9_10DE,
        memory_total_bytes: 46068 * MIB,
        memory_reserved_bytes: 414 * MIB,
        power_limit_watts: 350.0,
        max_sm_clock_mhz: 2520,
        max_mem_clock_mhz: 9001,
        temp_shutdown_c: 98,
        temp_slowdown_c: 95,
        temp_gpu_max_c: 88,
        temp_mem_max_c: None,
        ecc_supported: true,
        nvenc: true,
        nvdec: true,
        mig_capable: false,
        gpm: false,
        row_remapping: true,
        page_retirement: false,
        pcie_gen: 4,
        nvlink_links: 0,
    },
    Model {
        key: "RTX-4090-24GB",
        name: "NVIDIA GeForce RTX 4090",
        architecture: 8,
        compute_capability: (8, 9),
        pci_device_id: 0x2684_10DE,
        memory_total_bytes: 24564 * MIB,
        memory_reserved_bytes: 312 * MIB,
        power_limit_watts: 450.0,
        max_sm_clock_mhz: 3105,
        max_mem_clock_mhz: 10501,
        temp_shutdown_c: 97,
        temp_slowdown_c: 94,
        temp_gpu_max_c: 90,
        temp_mem_max_c: None,
        ecc_supported: false,
        nvenc: true,
        nvdec: true,
        mig_capable: false,
        gpm: false,
        row_remapping: false,
        page_retirement: false,
        pcie_gen: 4,
        nvlink_links: 0,
    },
    // `nvidia-smi -q` of a Tesla T4 on driver 530.30.02 (PCI device 0x1EB810DE, PCIe
    // generation 3, 15360 MiB with 393 MiB reserved, 70 W, 1590/5001 MHz, shutdown 96,
    // slowdown 93, max operating 85 °C, no memory sensor, retired pages and no remapped
    // rows); NVIDIA's T4 datasheet gives the same 70 W and 16 GB GDDR6. Turing: no MIG,
    // no GPM, no NVLink; it has NVENC and NVDEC. The dcgm-exporter pages of
    // run-ai/fake-gpu-operator were captured on it.
    Model {
        key: "T4-16GB",
        name: "Tesla T4",
        architecture: 6,
        compute_capability: (7, 5),
        pci_device_id: 0x1EB8_10DE,
        memory_total_bytes: 15360 * MIB,
        memory_reserved_bytes: 393 * MIB,
        power_limit_watts: 70.0,
        max_sm_clock_mhz: 1590,
        max_mem_clock_mhz: 5001,
        temp_shutdown_c: 96,
        temp_slowdown_c: 93,
        temp_gpu_max_c: 85,
        temp_mem_max_c: None,
        ecc_supported: true,
        nvenc: true,
        nvdec: true,
        mig_capable: false,
        gpm: false,
        row_remapping: false,
        page_retirement: true,
        pcie_gen: 3,
        nvlink_links: 0,
    },
    Model {
        key: "V100-SXM2-32GB",
        name: "Tesla V100-SXM2-32GB",
        architecture: 5,
        compute_capability: (7, 0),
        pci_device_id: 0x1DB5_10DE,
        memory_total_bytes: 32768 * MIB,
        memory_reserved_bytes: 0,
        power_limit_watts: 300.0,
        max_sm_clock_mhz: 1530,
        max_mem_clock_mhz: 877,
        temp_shutdown_c: 90,
        temp_slowdown_c: 87,
        temp_gpu_max_c: 83,
        temp_mem_max_c: Some(85),
        ecc_supported: true,
        nvenc: true,
        nvdec: true,
        mig_capable: false,
        gpm: false,
        row_remapping: false,
        page_retirement: true,
        pcie_gen: 3,
        nvlink_links: 6,
    },
];

/// Looks a model up by its scenario key (case-insensitive).
pub fn find(key: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.key.eq_ignore_ascii_case(key))
}

/// The keys, for error messages.
pub fn keys() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_table_models_have_their_real_capabilities() {
        let mig: Vec<_> = MODELS.iter().filter(|m| m.mig_capable).map(|m| m.key).collect();
        assert_eq!(mig, ["A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"]);
        let gpm: Vec<_> = MODELS.iter().filter(|m| m.gpm).map(|m| m.key).collect();
        assert_eq!(gpm, ["H100-SXM5-80GB", "H200-SXM-141GB"]);
        assert!(find("rtx-4090-24gb").is_some_and(|m| !m.ecc_supported));
    }

    #[test]
    fn only_pre_ampere_retires_pages() {
        for m in MODELS {
            assert_eq!(m.page_retirement, m.architecture < 7, "{}", m.key);
        }
    }
}

/// A MIG GPU-instance profile as the driver describes it.
///
/// NVML names a profile two ways, and the driver keeps them apart: the *profile index*
/// (`NVML_GPU_INSTANCE_PROFILE_*`, what `nvmlDeviceGetGpuInstanceProfileInfoV` takes)
/// and the *profile id* (`nvmlGpuInstanceProfileInfo_v2_t.id`, the `ID` column of
/// `nvidia-smi mig -lgip`, what `nvmlGpuInstanceInfo_t.profileId` reports and
/// `nvmlDeviceGetGpuInstanceRemainingCapacity` / `...ProfileInfoByIdV` take). On an
/// 80 GB A100 or H100, index 0 (`1_SLICE`, `1g.10gb`) has id 19.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigProfile {
    /// `nvidia-smi` name without the `MIG ` prefix, e.g. `3g.40gb` or `1g.10gb+me`.
    pub name: Cow<'static, str>,
    /// `NVML_GPU_INSTANCE_PROFILE_*`.
    pub index: u32,
    /// The driver's profile id.
    pub profile_id: u32,
    /// Compute slices (the `g` count).
    pub compute_slices: u32,
    /// Memory slices, of the GPU's eight.
    pub memory_slices: u32,
    pub memory_mib: u64,
    /// Streaming multiprocessors in the instance.
    pub multiprocessors: u32,
    /// How many instances of this profile fit on an empty GPU.
    pub max_instances: u32,
}

#[allow(clippy::too_many_arguments)]
const fn mig(
    name: &'static str,
    index: u32,
    profile_id: u32,
    compute_slices: u32,
    memory_slices: u32,
    memory_mib: u64,
    multiprocessors: u32,
    max_instances: u32,
) -> MigProfile {
    MigProfile {
        name: Cow::Borrowed(name),
        index,
        profile_id,
        compute_slices,
        memory_slices,
        memory_mib,
        multiprocessors,
        max_instances,
    }
}

// Profile indices (`NVML_GPU_INSTANCE_PROFILE_*` in nvml.h).
const P_1_SLICE: u32 = 0x0;
const P_2_SLICE: u32 = 0x1;
const P_3_SLICE: u32 = 0x2;
const P_4_SLICE: u32 = 0x3;
const P_7_SLICE: u32 = 0x4;
/// `1_SLICE_REV1`: one slice with media extensions, the `+me` profile.
const P_1_SLICE_REV1: u32 = 0x7;
/// `1_SLICE_REV2`: one slice with twice the memory.
const P_1_SLICE_REV2: u32 = 0x9;

/// Profiles of the 80 GB A100 and H100 (same memory geometry, different SM counts).
/// Ids as `nvidia-smi mig -lgip` lists them on these boards: 19, 20, 15, 14, 9, 5, 0.
const A100_80GB_MIG: &[MigProfile] = &[
    mig("1g.10gb", P_1_SLICE, 19, 1, 1, 9728, 14, 7),
    mig("1g.10gb+me", P_1_SLICE_REV1, 20, 1, 1, 9728, 14, 1),
    mig("1g.20gb", P_1_SLICE_REV2, 15, 1, 2, 19968, 14, 4),
    mig("2g.20gb", P_2_SLICE, 14, 2, 2, 19968, 28, 3),
    mig("3g.40gb", P_3_SLICE, 9, 3, 4, 40192, 42, 2),
    mig("4g.40gb", P_4_SLICE, 5, 4, 4, 40192, 56, 1),
    mig("7g.80gb", P_7_SLICE, 0, 7, 8, 80384, 98, 1),
];

const H100_80GB_MIG: &[MigProfile] = &[
    mig("1g.10gb", P_1_SLICE, 19, 1, 1, 9984, 16, 7),
    mig("1g.10gb+me", P_1_SLICE_REV1, 20, 1, 1, 9984, 16, 1),
    mig("1g.20gb", P_1_SLICE_REV2, 15, 1, 2, 20096, 16, 4),
    mig("2g.20gb", P_2_SLICE, 14, 2, 2, 20096, 32, 3),
    mig("3g.40gb", P_3_SLICE, 9, 3, 4, 40320, 60, 2),
    mig("4g.40gb", P_4_SLICE, 5, 4, 4, 40320, 64, 1),
    mig("7g.80gb", P_7_SLICE, 0, 7, 8, 80768, 132, 1),
];

const H200_141GB_MIG: &[MigProfile] = &[
    mig("1g.18gb", P_1_SLICE, 19, 1, 1, 16384, 16, 7),
    mig("1g.18gb+me", P_1_SLICE_REV1, 20, 1, 1, 16384, 16, 1),
    mig("1g.35gb", P_1_SLICE_REV2, 15, 1, 2, 32768, 16, 4),
    mig("2g.35gb", P_2_SLICE, 14, 2, 2, 32768, 32, 3),
    mig("3g.71gb", P_3_SLICE, 9, 3, 4, 65536, 60, 2),
    mig("4g.71gb", P_4_SLICE, 5, 4, 4, 65536, 64, 1),
    mig("7g.141gb", P_7_SLICE, 0, 7, 8, 137216, 132, 1),
];

/// The MIG profiles a model offers; empty where it has no MIG.
pub fn mig_profiles(model: &Model) -> &'static [MigProfile] {
    match model.key {
        "A100-SXM4-80GB" => A100_80GB_MIG,
        "H100-SXM5-80GB" => H100_80GB_MIG,
        "H200-SXM-141GB" => H200_141GB_MIG,
        _ => &[],
    }
}

/// Profile indices a driver of the NVML version `nvml-wrapper-sys` was generated from
/// knows (`NVML_GPU_INSTANCE_PROFILE_COUNT`); `nvmlDeviceGetGpuInstanceProfileInfoV`
/// answers `NVML_ERROR_INVALID_ARGUMENT` from there on, unless a scenario gives the GPU
/// profiles of a newer driver.
pub const PROFILE_INDEX_COUNT: u32 = nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_COUNT;

/// Compute and memory slices of a MIG-capable GPU.
pub const MIG_COMPUTE_SLICES: u32 = 7;
pub const MIG_MEMORY_SLICES: u32 = 8;

#[cfg(test)]
mod mig_tests {
    use super::*;

    #[test]
    fn profile_indices_and_ids_are_distinct_per_model() {
        for table in [A100_80GB_MIG, H100_80GB_MIG, H200_141GB_MIG] {
            let mut indices: Vec<u32> = table.iter().map(|p| p.index).collect();
            let mut ids: Vec<u32> = table.iter().map(|p| p.profile_id).collect();
            indices.sort_unstable();
            indices.dedup();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!((indices.len(), ids.len()), (table.len(), table.len()));
            assert!(indices.iter().all(|i| *i < PROFILE_INDEX_COUNT));
        }
    }
}
