//! `FAKE_NVML_LIVE=1` through `nvml-wrapper`: a rewritten scenario shows its new
//! processes and readings to a process that initialised NVML before the change; the
//! energy counter carries on; a rewrite that changes the GPUs, or does not parse, is
//! refused and the node goes on as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;

fn scenario(utilization: u32, pids: &[u32]) -> String {
    let processes: Vec<String> =
        pids.iter().map(|pid| format!("{{pid: {pid}, gpu: 0, memory_used_mib: 1000, sm_utilization: 10}}")).collect();
    format!(
        "gpus:\n  - {{model: H100-SXM5-80GB, uuid: GPU-00000000-0000-4000-8000-000000000001, values: {{utilization: \
         {utilization}, power_watts: 400}}}}\nhost_processes: [{}]\n",
        processes.join(", ")
    )
}

/// Writes the file the way fake-kubelet does: a temporary file renamed over it.
fn rewrite(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_rewritten_scenario_is_followed_and_a_wrong_one_refused() {
    // SAFETY: this test binary has a single test, so no other thread uses the environment.
    let node = unsafe { common::SteppedNode::start(&scenario(5, &[100])) };
    // SAFETY: as above.
    unsafe { std::env::set_var("FAKE_NVML_LIVE", "1") };
    let path = node.dir.path().join("node.yaml");
    let nvml = Nvml::builder().lib_path(common::library().as_os_str()).init().unwrap();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.utilization_rates().unwrap().gpu, 5);
    assert_eq!(gpu.running_compute_processes().unwrap().len(), 1);
    std::fs::write(&node.clock, "100").unwrap();
    let energy_before = gpu.total_energy_consumption().unwrap();

    rewrite(&path, &scenario(80, &[100, 101, 102]));
    eventually("the new processes and utilization", || {
        gpu.running_compute_processes().unwrap().len() == 3 && gpu.utilization_rates().unwrap().gpu == 80
    });
    let energy_after = gpu.total_energy_consumption().unwrap();
    assert!(energy_after >= energy_before, "energy went back from {energy_before} to {energy_after} mJ");
    assert!(energy_after > 0);

    // Other GPUs: refused, the node keeps its three processes.
    rewrite(&path, &scenario(80, &[100]).replace("000000000001", "000000000002"));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(gpu.running_compute_processes().unwrap().len(), 3);
    // Not a scenario: refused too.
    rewrite(&path, "gpus: [{model: no-such-gpu}]\n");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(gpu.running_compute_processes().unwrap().len(), 3);
    // A good one after them is followed again.
    rewrite(&path, &scenario(20, &[]));
    eventually("the emptied node", || gpu.running_compute_processes().unwrap().is_empty());
}
