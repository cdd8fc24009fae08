//! A node's own scenario changed while it runs: a test (or the demo) injecting a fault
//! into a joined node rewrites the node's file, say with `faults: [{at_s: 0, xid: 79}]`
//! on one GPU, and the node follows it as fake-nvml follows its live file.
//!
//! A changed file is taken only when the node stays the same machine: the same devices
//! offered to pods (so no running pod loses what it holds, and the Node's capacity stays
//! true) and no pods or processes of its own (a joined node's pods come from the API
//! server). Anything else is refused and the node goes on with the file it had; so is a
//! file that does not parse. Faults, values and the DRA section's attributes may change.

use fake_nvml::scenario::Scenario;

use super::devices::DeviceTable;

/// `text` (the node's file `file`, read again) as the node's new scenario, or why not.
pub fn rebase(file: &str, text: &str, replicas: u32, table: &DeviceTable) -> Result<Scenario, String> {
    let scenario = Scenario::parse(file, text).map_err(|e| e.to_string())?;
    if !scenario.pods.is_empty() || !scenario.processes.is_empty() {
        return Err(format!("{file} lists pods or processes; a joined node's pods come from the API server"));
    }
    let offered = DeviceTable::new(&scenario, replicas);
    if offered.devices != table.devices {
        return Err(format!(
            "{file} changes the devices the node offers ({} instead of {}); a running node keeps its GPUs",
            offered.devices.len(),
            table.devices.len()
        ));
    }
    Ok(scenario)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "gpus:\n  - model: H100-SXM5-80GB\n  - model: H100-SXM5-80GB\n";

    fn table() -> DeviceTable {
        DeviceTable::new(&Scenario::parse("n.yaml", BASE).unwrap(), 2)
    }

    #[test]
    fn a_fault_added_to_the_same_gpus_is_taken() {
        let faulty = "gpus:\n  - model: H100-SXM5-80GB\n    faults: [{at_s: 0, xid: 79}, {at_s: 0, lost: true}]\n  - \
                      model: H100-SXM5-80GB\n";
        let s = rebase("n.yaml", faulty, 2, &table()).unwrap();
        assert_eq!(s.gpus[0].faults.len(), 2);
    }

    #[test]
    fn other_gpus_pods_or_a_broken_file_are_refused() {
        let three = format!("{BASE}  - model: H100-SXM5-80GB\n");
        let e = rebase("n.yaml", &three, 2, &table()).unwrap_err();
        assert_eq!(e, "n.yaml changes the devices the node offers (6 instead of 4); a running node keeps its GPUs");
        let mig = "gpus:\n  - model: H100-SXM5-80GB\n    mig: {layout: all-1g.10gb}\n  - model: H100-SXM5-80GB\n";
        assert!(rebase("n.yaml", mig, 2, &table()).unwrap_err().contains("changes the devices"));
        let pods = format!(
            "{BASE}pods:\n  - {{namespace: a, name: p, containers: [{{name: c, devices: [{{resource: nvidia.com/gpu, \
             gpu: 0}}]}}]}}\n"
        );
        assert!(rebase("n.yaml", &pods, 2, &table()).unwrap_err().contains("lists pods or processes"));
        assert!(rebase("n.yaml", "gpus: [", 2, &table()).unwrap_err().starts_with("n.yaml"));
    }
}
