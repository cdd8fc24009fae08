//! A `/var/log/pods`-style tree for the scenario's pods,
//! `<dir>/<namespace>_<pod>_<uid>/<container>/0.log`, which the exporter reads to name
//! pods when it has no API server.

use std::path::Path;

use fake_nvml::scenario::Scenario;

/// Writes the tree under `dir`.
pub fn write_tree(scenario: &Scenario, dir: &Path) -> std::io::Result<()> {
    for pod in &scenario.pods {
        let pod_dir = dir.join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid));
        for container in &pod.containers {
            let container_dir = pod_dir.join(&container.name);
            std::fs::create_dir_all(&container_dir)?;
            std::fs::write(container_dir.join("0.log"), "")?;
        }
    }
    Ok(())
}
