//! NVIDIA's k8s-device-plugin v0.17.4, call by call: the sequences its code makes on
//! start-up, for the MIG strategies, in its health check and for a preferred
//! allocation, replayed against the built library through `nvml-wrapper-sys`'s typed
//! symbols, with the answers the plugin needs to carry on. Each step names the Go code
//! it mirrors (paths at the v0.17.4 tag; `go-nvlib/` is its vendored
//! `vendor/github.com/NVIDIA/go-nvlib/`, v0.7.4, `go-gpuallocator/` v0.5.0). The symbol
//! lists themselves are in `tests/nvml_consumers.rs`.
//!
//! Also here: the host tree `nvmlInit` writes under `FAKE_NVML_HOST_ROOT`, matched
//! against the MIG capability paths the plugin derives, the calls fake-nvml does not
//! model answering `NVML_ERROR_NOT_SUPPORTED`, and null out-pointers refused without a
//! crash.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_char, c_int, c_uint};
use std::ptr::null_mut;

use fake_nvml::models::{self, Model};
use nvml_wrapper_sys::bindings::{
    NvmlLib, nvmlComputeInstance_t, nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlDevice_t,
    nvmlDeviceAttributes_t, nvmlEventData_t, nvmlEventSet_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t,
    nvmlGpuInstanceProfileInfo_t, nvmlMemory_t, nvmlPciInfo_t,
};

const SUCCESS: u32 = 0;
const UNINITIALIZED: u32 = 1;
const INVALID_ARGUMENT: u32 = 2;
const NOT_SUPPORTED: u32 = 3;
const NOT_FOUND: u32 = 6;
const TIMEOUT: u32 = 10;
/// go-nvml `const.go`: GPU_INSTANCE_PROFILE_COUNT, COMPUTE_INSTANCE_PROFILE_COUNT,
/// COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT, NVLINK_MAX_LINKS.
const GI_PROFILES: u32 = 17;
const CI_PROFILES: u32 = 8;
const CI_ENGINE_PROFILES: u32 = 1;
const NVLINK_MAX_LINKS: u32 = 18;
/// `nvmlEventTypeXidCriticalError | DoubleBitEccError | SingleBitEccError`, internal/rm/health.go.
const HEALTH_EVENTS: u64 = 0x8 | 0x2 | 0x1;

const SCENARIO: &str = r#"
gpus:
  - model: H100-SXM5-80GB
    uuid: GPU-00000000-1111-2222-3333-000000000000
    faults: [{at_s: 5, xid: 79}]
  - model: H100-SXM5-80GB
    uuid: GPU-00000000-1111-2222-3333-000000000001
  - model: H100-SXM5-80GB
    uuid: GPU-00000000-1111-2222-3333-000000000002
    mig:
      instances:
        - {profile: 3g.40gb, uuid: MIG-00000000-2222-4000-8000-000000000000}
        - {profile: 1g.10gb+me, uuid: MIG-00000000-2222-4000-8000-000000000001}
        - {profile: 1g.10gb, uuid: MIG-00000000-2222-4000-8000-000000000002}
  - model: A100-SXM4-80GB
    mig: {layout: all-1g.10gb}
"#;

/// go-nvlib `pkg/nvlib/device/mig_profile.go` `NewMigProfile` and `String`: the name the
/// device plugin gives a MIG device of GPU-instance profile index `gi`, compute-instance
/// profile index `ci`, `mig_mb` MiB on a GPU of `device_bytes` (`None`: an index go-nvlib
/// refuses).
fn go_nvlib_profile_name(gi: u32, ci: u32, mig_mb: u64, device_bytes: u64) -> Option<String> {
    let g = match gi {
        0 | 7 | 9 | 10 | 13 | 15 => 1,
        1 | 8 | 11 | 14 | 16 => 2,
        2 => 3,
        3 | 12 => 4,
        6 => 6,
        4 => 7,
        5 => 8,
        _ => return None,
    };
    let c = [1, 2, 3, 4, 7, 8, 6, 1].get(ci as usize).copied()?;
    let suffix = match gi {
        7 | 8 => "+me",
        15 | 16 => "+me.all",
        10..=12 => "+gfx",
        13 | 14 => "-me",
        _ => "",
    };
    // getMigMemorySizeGB.
    const GB: u64 = 1024 * 1024 * 1024;
    let fraction = (mig_mb as f64 * 1024.0 * 1024.0) / device_bytes as f64;
    let fraction = (fraction * 8.0).ceil() / 8.0;
    let total_gb = device_bytes.div_ceil(GB) as f64;
    let gb = (fraction * total_gb).round() as u64;
    Some(if c == g { format!("{g}g.{gb}gb{suffix}") } else { format!("{c}c.{g}g.{gb}gb{suffix}") })
}

#[test]
fn the_plugin_names_every_profile_as_the_scenario_does() {
    for model in models::MODELS.iter().filter(|m: &&Model| m.mig_capable) {
        for p in models::mig_profiles(model) {
            // The full-size compute instance of a `g`-slice GPU instance (index 0..4 for 1, 2, 3, 4, 7 slices).
            let ci = [1, 2, 3, 4, 7].iter().position(|s| *s == p.compute_slices).unwrap() as u32;
            let name = go_nvlib_profile_name(p.index, ci, p.memory_mib, model.memory_total_bytes);
            assert_eq!(name.as_deref(), Some(p.name.as_ref()), "{} {}", model.key, p.name);
        }
    }
}

fn cstr(buf: &[c_char]) -> String {
    // SAFETY: the library NUL-terminates what it writes; the buffers start zeroed.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the plain C structs of nvml.h, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// What the plugin learns about one GPU at start-up (internal/rm/device_map.go,
/// nvml_devices.go `BuildDevice`).
#[derive(Debug)]
struct Gpu {
    handle: nvmlDevice_t,
    uuid: String,
    mig_enabled: bool,
    minor: c_uint,
    bus_id: String,
}

fn uuid_of(lib: &NvmlLib, handle: nvmlDevice_t) -> String {
    let mut buf = [0 as c_char; 96];
    // SAFETY: valid handle and buffer.
    assert_eq!(unsafe { lib.nvmlDeviceGetUUID(handle, buf.as_mut_ptr(), 96) }, SUCCESS);
    cstr(&buf)
}

/// go-nvlib device.go `VisitDevices` and the plugin's per-GPU queries.
fn start_up(lib: &NvmlLib) -> Vec<Gpu> {
    let mut count: c_uint = 0;
    // SAFETY: every call below gets valid handles and out-pointers.
    unsafe {
        assert_eq!(lib.nvmlDeviceGetCount_v2(&mut count), SUCCESS);
        (0..count)
            .map(|i| {
                let mut handle: nvmlDevice_t = null_mut();
                assert_eq!(lib.nvmlDeviceGetHandleByIndex_v2(i, &mut handle), SUCCESS);
                let mut name = [0 as c_char; 96];
                assert_eq!(lib.nvmlDeviceGetName(handle, name.as_mut_ptr(), 96), SUCCESS);
                let (mut current, mut pending) = (0, 0);
                assert_eq!(lib.nvmlDeviceGetMigMode(handle, &mut current, &mut pending), SUCCESS);
                let mut minor = 0;
                assert_eq!(lib.nvmlDeviceGetMinorNumber(handle, &mut minor), SUCCESS);
                let mut pci: nvmlPciInfo_t = zeroed();
                assert_eq!(lib.nvmlDeviceGetPciInfo_v3(handle, &mut pci), SUCCESS);
                let mut memory: nvmlMemory_t = zeroed();
                assert_eq!(lib.nvmlDeviceGetMemoryInfo(handle, &mut memory), SUCCESS);
                assert!(memory.total > 0);
                let (mut major, mut minor_cc): (c_int, c_int) = (0, 0);
                assert_eq!(lib.nvmlDeviceGetCudaComputeCapability(handle, &mut major, &mut minor_cc), SUCCESS);
                assert!(major >= 8, "{}", cstr(&name));
                Gpu { handle, uuid: uuid_of(lib, handle), mig_enabled: current == 1, minor, bus_id: cstr(&pci.busId) }
            })
            .collect()
    }
}

/// go-nvlib device.go `VisitMigProfiles` as `rm.AddDefaultResourcesToConfig` runs it for
/// the mixed strategy: the resource names the plugin will advertise.
fn mixed_strategy_resources(lib: &NvmlLib, gpu: &Gpu) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut memory: nvmlMemory_t = zeroed();
    // SAFETY: valid handle and out-pointers throughout.
    unsafe {
        assert_eq!(lib.nvmlDeviceGetMemoryInfo(gpu.handle, &mut memory), SUCCESS);
        for i in 0..GI_PROFILES {
            let mut info: nvmlGpuInstanceProfileInfo_t = zeroed();
            match lib.nvmlDeviceGetGpuInstanceProfileInfo(gpu.handle, i, &mut info) {
                NOT_SUPPORTED | INVALID_ARGUMENT => continue,
                code => assert_eq!(code, SUCCESS, "profile index {i}"),
            }
            let full = [1, 2, 3, 4, 7].iter().position(|s| *s == info.sliceCount).unwrap() as u32;
            let name = go_nvlib_profile_name(i, full, info.memorySizeMB, memory.total).expect("go-nvlib knows it");
            names.insert(format!("mig-{name}").replace('+', "."));
        }
    }
    names
}

/// go-nvlib mig_device.go `GetProfile`: the profile name of a MIG device, and the
/// plugin's GI/CI ids of it (internal/rm/nvml_devices.go `GetPaths`).
fn mig_profile(lib: &NvmlLib, mig: nvmlDevice_t) -> (String, c_uint, c_uint) {
    // SAFETY: valid handles and out-pointers throughout.
    unsafe {
        let mut parent: nvmlDevice_t = null_mut();
        assert_eq!(lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &mut parent), SUCCESS);
        let mut parent_memory: nvmlMemory_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetMemoryInfo(parent, &mut parent_memory), SUCCESS);
        let mut attributes: nvmlDeviceAttributes_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetAttributes_v2(mig, &mut attributes), SUCCESS);
        let (mut gi_id, mut ci_id) = (0, 0);
        assert_eq!(lib.nvmlDeviceGetGpuInstanceId(mig, &mut gi_id), SUCCESS);
        assert_eq!(lib.nvmlDeviceGetComputeInstanceId(mig, &mut ci_id), SUCCESS);
        let mut gi: nvmlGpuInstance_t = null_mut();
        assert_eq!(lib.nvmlDeviceGetGpuInstanceById(parent, gi_id, &mut gi), SUCCESS);
        let mut ci: nvmlComputeInstance_t = null_mut();
        assert_eq!(lib.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, &mut ci), SUCCESS);
        let mut gi_info: nvmlGpuInstanceInfo_t = zeroed();
        assert_eq!(lib.nvmlGpuInstanceGetInfo(gi, &mut gi_info), SUCCESS);
        let mut ci_info: nvmlComputeInstanceInfo_t = zeroed();
        assert_eq!(lib.nvmlComputeInstanceGetInfo_v2(ci, &mut ci_info), SUCCESS);
        assert_eq!((ci_info.device, ci_info.gpuInstance, ci_info.id), (parent, gi, ci_id));
        for i in 0..GI_PROFILES {
            let mut gi_profile: nvmlGpuInstanceProfileInfo_t = zeroed();
            match lib.nvmlDeviceGetGpuInstanceProfileInfo(parent, i, &mut gi_profile) {
                NOT_SUPPORTED | INVALID_ARGUMENT => continue,
                code => assert_eq!(code, SUCCESS),
            }
            if gi_profile.id != gi_info.profileId {
                continue;
            }
            for j in 0..CI_PROFILES {
                for k in 0..CI_ENGINE_PROFILES {
                    let mut ci_profile: nvmlComputeInstanceProfileInfo_t = zeroed();
                    match lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, j, k, &mut ci_profile) {
                        NOT_SUPPORTED | INVALID_ARGUMENT => continue,
                        code => assert_eq!(code, SUCCESS),
                    }
                    if ci_profile.id != ci_info.profileId {
                        continue;
                    }
                    let name = go_nvlib_profile_name(i, j, attributes.memorySizeMB, parent_memory.total).unwrap();
                    return (name, gi_id, ci_id);
                }
            }
        }
        panic!("no matching profile IDs found (go-nvlib's error)");
    }
}

#[test]
fn the_device_plugins_calls_are_answered() {
    // SAFETY: the only test of this binary that uses the environment; the other test
    // neither reads nor writes it.
    let node = unsafe { common::SteppedNode::start(SCENARIO) };
    let host = node.dir.path().join("host");
    // SAFETY: as above.
    unsafe { std::env::set_var("FAKE_NVML_HOST_ROOT", &host) };
    // SAFETY: loading runs no code of ours; calls below follow nvml.h's contracts.
    let lib = unsafe { NvmlLib::new(common::library()) }.unwrap();

    // Before nvmlInit every call says so.
    let mut minor: c_uint = 0;
    // SAFETY: a null handle is refused before it is used.
    assert_eq!(unsafe { lib.nvmlDeviceGetMinorNumber(null_mut(), &mut minor) }, UNINITIALIZED);
    // SAFETY: no arguments.
    assert_eq!(unsafe { lib.nvmlInit_v2() }, SUCCESS);

    // Start-up.
    let gpus = start_up(&lib);
    assert_eq!(
        gpus.iter().map(|g| (g.minor, g.mig_enabled)).collect::<Vec<_>>(),
        [(0, false), (1, false), (2, true), (3, true)]
    );
    for gpu in &gpus {
        let numa = std::fs::read_to_string(
            // internal/rm/nvml_devices.go GetNumaNode: lower case, one leading "0000" dropped.
            host.join(format!("sys/bus/pci/devices/{}/numa_node", gpu.bus_id.to_lowercase().replacen("0000", "", 1))),
        )
        .unwrap();
        assert_eq!(numa, if gpu.minor < 2 { "0\n" } else { "1\n" });
        assert!(host.join(format!("dev/nvidia{}", gpu.minor)).is_file());
    }

    // Mixed strategy: the resources, and each MIG device's name, GI/CI and capability paths.
    let resources: BTreeSet<String> =
        gpus.iter().filter(|g| g.mig_enabled).flat_map(|g| mixed_strategy_resources(&lib, g)).collect();
    for wanted in
        ["mig-1g.10gb", "mig-1g.10gb.me", "mig-1g.20gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb"]
    {
        assert!(resources.contains(wanted), "{wanted} not in {resources:?}");
    }
    let minors = std::fs::read_to_string(host.join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    let mut mig_devices = Vec::new();
    for gpu in gpus.iter().filter(|g| g.mig_enabled) {
        let mut max: c_uint = 0;
        // SAFETY: valid handle and out-pointer.
        assert_eq!(unsafe { lib.nvmlDeviceGetMaxMigDeviceCount(gpu.handle, &mut max) }, SUCCESS);
        for j in 0..max {
            let mut mig: nvmlDevice_t = null_mut();
            // SAFETY: valid handle and out-pointers.
            match unsafe { lib.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, j, &mut mig) } {
                NOT_FOUND | INVALID_ARGUMENT => continue,
                code => assert_eq!(code, SUCCESS),
            }
            let mut is_mig: c_uint = 0;
            // SAFETY: as above.
            assert_eq!(unsafe { lib.nvmlDeviceIsMigDeviceHandle(mig, &mut is_mig) }, SUCCESS);
            assert_eq!(is_mig, 1);
            let (name, gi, ci) = mig_profile(&lib, mig);
            for cap in [format!("gpu{}/gi{gi}/access ", gpu.minor), format!("gpu{}/gi{gi}/ci{ci}/access ", gpu.minor)] {
                assert!(minors.contains(&cap), "mig-minors has no {cap}");
            }
            assert!(
                host.join(format!("proc/driver/nvidia/capabilities/gpu{}/mig/gi{gi}/ci{ci}/access", gpu.minor))
                    .is_file()
            );
            let mut memory: nvmlMemory_t = zeroed();
            // SAFETY: as above.
            assert_eq!(
                unsafe { lib.nvmlDeviceGetMemoryInfo(mig, &mut memory) },
                SUCCESS,
                "GetTotalMemory of a MIG device"
            );
            mig_devices.push((gpu.minor, uuid_of(&lib, mig), name, memory.total / (1024 * 1024)));
        }
    }
    let names: Vec<(c_uint, &str)> = mig_devices.iter().map(|(g, _, n, _)| (*g, n.as_str())).collect();
    assert_eq!(names[..3], [(2, "3g.40gb"), (2, "1g.10gb+me"), (2, "1g.10gb")]);
    assert_eq!(names.iter().filter(|(g, n)| *g == 3 && *n == "1g.10gb").count(), 7);
    assert_eq!(mig_devices[0].3, 40320, "a MIG device's own memory");

    // Single strategy: every MIG device of one GPU the same (attributes compared).
    let attributes = |mig: nvmlDevice_t| {
        let mut a: nvmlDeviceAttributes_t = zeroed();
        // SAFETY: valid handle and out-pointer.
        assert_eq!(unsafe { lib.nvmlDeviceGetAttributes_v2(mig, &mut a) }, SUCCESS);
        (a.gpuInstanceSliceCount, a.computeInstanceSliceCount, a.memorySizeMB, a.multiprocessorCount)
    };
    let a100 = gpus[3].handle;
    let (mut first, mut last) = (null_mut(), null_mut());
    // SAFETY: valid handle and out-pointers.
    unsafe {
        assert_eq!(lib.nvmlDeviceGetMigDeviceHandleByIndex(a100, 0, &mut first), SUCCESS);
        assert_eq!(lib.nvmlDeviceGetMigDeviceHandleByIndex(a100, 6, &mut last), SUCCESS);
    }
    assert_eq!(attributes(first), attributes(last));

    // Health (internal/rm/health.go): MIG devices by UUID to their parent, events on the parents.
    let mut set: nvmlEventSet_t = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { lib.nvmlEventSetCreate(&mut set) }, SUCCESS);
    let mut parents = BTreeSet::new();
    for (_, uuid, _, _) in &mig_devices {
        let c = CString::new(uuid.as_str()).unwrap();
        let (mut mig, mut parent): (nvmlDevice_t, nvmlDevice_t) = (null_mut(), null_mut());
        let (mut gi, mut ci) = (0, 0);
        // SAFETY: a NUL-terminated UUID and valid out-pointers.
        unsafe {
            assert_eq!(lib.nvmlDeviceGetHandleByUUID(c.as_ptr(), &mut mig), SUCCESS, "MIG devices are found by UUID");
            assert_eq!(lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &mut parent), SUCCESS);
            assert_eq!(lib.nvmlDeviceGetGpuInstanceId(mig, &mut gi), SUCCESS);
            assert_eq!(lib.nvmlDeviceGetComputeInstanceId(mig, &mut ci), SUCCESS);
        }
        assert_eq!(uuid_of(&lib, mig), *uuid);
        parents.insert(uuid_of(&lib, parent));
    }
    let watched: Vec<String> = gpus.iter().filter(|g| !g.mig_enabled).map(|g| g.uuid.clone()).chain(parents).collect();
    for uuid in &watched {
        let c = CString::new(uuid.as_str()).unwrap();
        let mut gpu: nvmlDevice_t = null_mut();
        let mut supported = 0;
        // SAFETY: a NUL-terminated UUID, valid handles and out-pointers.
        unsafe {
            assert_eq!(lib.nvmlDeviceGetHandleByUUID(c.as_ptr(), &mut gpu), SUCCESS);
            assert_eq!(lib.nvmlDeviceGetSupportedEventTypes(gpu, &mut supported), SUCCESS);
            assert_eq!(lib.nvmlDeviceRegisterEvents(gpu, HEALTH_EVENTS & supported, set), SUCCESS, "{uuid}");
        }
    }
    let mut event: nvmlEventData_t = zeroed();
    // SAFETY: a live set and a valid out-pointer.
    assert_eq!(unsafe { lib.nvmlEventSetWait_v2(set, &mut event, 10) }, TIMEOUT);
    std::fs::write(&node.clock, "6").unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { lib.nvmlEventSetWait_v2(set, &mut event, 1000) }, SUCCESS);
    assert_eq!((event.eventType, event.eventData), (0x8, 79));
    assert_eq!(uuid_of(&lib, event.device), gpus[0].uuid);
    // SAFETY: the set is live and freed once.
    assert_eq!(unsafe { lib.nvmlEventSetFree(set) }, SUCCESS);

    // Preferred allocation (go-gpuallocator): every pair has a PCIe level, links lead to NVSwitches.
    let bus_ids: Vec<&str> = gpus.iter().map(|g| g.bus_id.as_str()).collect();
    for a in &gpus {
        for b in &gpus {
            let mut level = 99;
            // SAFETY: valid handles and out-pointer.
            assert_eq!(unsafe { lib.nvmlDeviceGetTopologyCommonAncestor(a.handle, b.handle, &mut level) }, SUCCESS);
            let expected = match (a.minor, b.minor) {
                (x, y) if x == y => 0,
                (x, y) if x / 2 == y / 2 => 10,
                _ => 50,
            };
            assert_eq!(level, expected, "GPUs {} and {}", a.minor, b.minor);
        }
        let mut active_links = 0;
        for link in 0..NVLINK_MAX_LINKS {
            let mut state = 0;
            let mut remote: nvmlPciInfo_t = zeroed();
            // SAFETY: valid handle and out-pointers.
            unsafe {
                match lib.nvmlDeviceGetNvLinkState(a.handle, link, &mut state) {
                    NOT_SUPPORTED | INVALID_ARGUMENT => continue,
                    code => assert_eq!(code, SUCCESS),
                }
                assert_eq!(lib.nvmlDeviceGetNvLinkRemotePciInfo_v2(a.handle, link, &mut remote), SUCCESS);
            }
            active_links += state;
            let remote_bus = cstr(&remote.busId);
            assert!(!bus_ids.contains(&remote_bus.as_str()), "link {link} leads to a switch, not GPU {remote_bus}");
            assert_eq!(remote.pciDeviceId, if a.minor == 3 { 0x1AF1_10DE } else { 0x22A3_10DE });
        }
        assert_eq!(active_links, if a.minor == 3 { 12 } else { 18 });
    }

    // Not modelled: NOT_SUPPORTED, on a GPU and a MIG device alike.
    let mut speed = 0;
    // SAFETY: valid handles and out-pointer.
    unsafe {
        assert_eq!(lib.nvmlDeviceGetFanSpeed(gpus[0].handle, &mut speed), NOT_SUPPORTED);
        assert_eq!(lib.nvmlDeviceGetFanSpeed(first, &mut speed), NOT_SUPPORTED);
    }

    // Null out-pointers and stray handles: refused, never a crash.
    let bogus = 0x10 as nvmlDevice_t;
    // SAFETY: the library checks every pointer before it writes; these are the cases it refuses.
    unsafe {
        assert_eq!(lib.nvmlDeviceGetMinorNumber(gpus[0].handle, null_mut()), INVALID_ARGUMENT);
        assert_eq!(lib.nvmlDeviceGetMinorNumber(bogus, &mut minor), INVALID_ARGUMENT);
        assert_eq!(lib.nvmlDeviceGetHandleByUUID(std::ptr::null(), null_mut()), INVALID_ARGUMENT);
        assert_eq!(lib.nvmlDeviceGetTopologyCommonAncestor(gpus[0].handle, bogus, null_mut()), INVALID_ARGUMENT);
        assert_eq!(lib.nvmlDeviceGetGpuInstanceProfileInfo(gpus[2].handle, 0, null_mut()), INVALID_ARGUMENT);
        assert_eq!(
            lib.nvmlGpuInstanceGetComputeInstanceById(bogus as nvmlGpuInstance_t, 0, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(lib.nvmlComputeInstanceGetInfo_v2(bogus as nvmlComputeInstance_t, null_mut()), INVALID_ARGUMENT);
        assert_eq!(lib.nvmlDeviceGetNvLinkRemotePciInfo_v2(gpus[0].handle, 0, null_mut()), INVALID_ARGUMENT);
        assert_eq!(
            lib.nvmlDeviceGetGraphicsRunningProcesses_v3(gpus[0].handle, null_mut(), null_mut()),
            INVALID_ARGUMENT
        );
        let unknown = CString::new("MIG-ffffffff-2222-4000-8000-000000000000").unwrap();
        let mut mig: nvmlDevice_t = null_mut();
        assert_eq!(lib.nvmlDeviceGetHandleByUUID(unknown.as_ptr(), &mut mig), NOT_FOUND);
    }

    // SAFETY: no arguments.
    assert_eq!(unsafe { lib.nvmlShutdown() }, SUCCESS);
}
