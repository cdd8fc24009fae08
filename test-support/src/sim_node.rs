//! A simulated GPU node run by the real kubelet and NVIDIA's k8s-device-plugin
//! (`scripts/sim-node`: fake-nvml as libnvidia-ml.so.1, sim-cri as the runtime), joined
//! to a [`ControlPlane`], and the exporter beside it reading the real kubelet's
//! pod-resources socket. For the real-cluster tests that hold fake-kubelet and
//! fake-nvml to what really allocates GPUs.
//!
//! The script runs in a process group of its own, so that dropping a [`SimNode`] stops
//! the kubelet, the plugin and the runtime with it (and the test process's exit does
//! too, as for every child of the tests).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::control_plane::ControlPlane;
use crate::simulated::{Killed, binaries, http_get, kill_at_exit, workspace};

/// How the node's device plugin is set up.
#[derive(Debug, Clone, Default)]
pub struct SimNodeOptions {
    /// The plugin's config file (its `sharing.timeSlicing`, for example), as YAML.
    pub plugin_config: Option<String>,
    /// `--mig-strategy`: none (default), single or mixed.
    pub mig_strategy: Option<&'static str>,
    /// The node's pod CIDR (a.b.c.0/24).
    pub pod_cidr: Option<String>,
    /// Where scripts/sim-node takes fake-nvml, its library and sim-cri from
    /// (`SIM_NODE_BIN_DIR`); default: the tests' own build.
    pub bin_dir: Option<PathBuf>,
    /// Arguments of scripts/sim-node to replace, for the tests of its failures
    /// (`--kubeconfig` pointing at a broken file, say): pairs of flag and value.
    pub override_args: Vec<(&'static str, String)>,
}

/// A node the real kubelet runs.
#[derive(Debug)]
pub struct SimNode {
    pub name: String,
    /// scripts/sim-node's `--dir`.
    pub dir: PathBuf,
    script: Child,
}

impl SimNode {
    /// Starts node `name` for `scenario` (fake-nvml's YAML) and waits until the kubelet
    /// runs and the plugin has registered; `Err` is what the script said when it did not.
    pub fn start(cp: &ControlPlane, name: &str, scenario: &str, options: &SimNodeOptions) -> Result<SimNode, String> {
        let bin = binaries();
        let dir = cp.dir.join("sim-nodes").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let scenario_file = dir.join("scenario.in.yaml");
        std::fs::write(&scenario_file, scenario).unwrap();
        let kubeconfig = cp.user(&format!("system:node:{name}"), &["system:nodes"]);
        let mut args: Vec<(&str, String)> = vec![
            ("--dir", dir.display().to_string()),
            ("--name", name.to_string()),
            ("--scenario", scenario_file.display().to_string()),
            ("--kubeconfig", kubeconfig.display().to_string()),
        ];
        if let Some(config) = &options.plugin_config {
            let file = dir.join("plugin-config.yaml");
            std::fs::write(&file, config).unwrap();
            args.push(("--plugin-config", file.display().to_string()));
        }
        if let Some(strategy) = options.mig_strategy {
            args.push(("--mig-strategy", strategy.to_string()));
        }
        if let Some(cidr) = &options.pod_cidr {
            args.push(("--pod-cidr", cidr.clone()));
        }
        for (flag, value) in &options.override_args {
            args.retain(|(f, _)| f != flag);
            args.push((flag, value.clone()));
        }
        let mut command = Command::new(workspace().join("scripts/sim-node"));
        for (flag, value) in &args {
            command.arg(flag).arg(value);
        }
        command
            .env("SIM_NODE_BIN_DIR", options.bin_dir.as_ref().unwrap_or(&bin))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut script = command.spawn().unwrap_or_else(|e| panic!("scripts/sim-node: {e}"));
        if let Ok(pid) = i32::try_from(script.id()) {
            kill_at_exit(-pid);
        }
        let stdout = script.stdout.take().unwrap();
        let stderr = script.stderr.take().unwrap();
        let said = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains(" ready: ") {
                    let _ = tx.send(());
                }
            }
        });
        let node = SimNode { name: name.to_string(), dir, script };
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(()) => Ok(node),
            Err(_) => {
                drop(node);
                Err(said.join().unwrap_or_default())
            }
        }
    }

    /// The real kubelet's pod-resources socket.
    pub fn pod_resources_socket(&self) -> PathBuf {
        self.dir.join("kubelet/pod-resources/kubelet.sock")
    }

    /// The scenario fake-nvml follows for this node (the plugin's and the exporter's).
    pub fn scenario_file(&self) -> PathBuf {
        self.dir.join("scenario.yaml")
    }

    /// Rewrites the scenario (whole, by rename) for the plugin and the exporter to follow.
    pub fn set_scenario(&self, yaml: &str) {
        let tmp = self.dir.join("scenario.yaml.new");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.scenario_file()).unwrap();
    }

    /// The kubelet's own record of what the device plugin allocated (its device manager
    /// checkpoint, `device-plugins/kubelet_internal_checkpoint`).
    pub fn kubelet_checkpoint(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.join("kubelet/device-plugins/kubelet_internal_checkpoint"))
            .unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_default()
    }

    /// A log of the node: `kubelet`, `device-plugin` or `sim-cri`.
    pub fn log(&self, which: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{which}.log"))).unwrap_or_default()
    }

    /// The exporter on this node, reading its kubelet's pod-resources and fake-nvml with
    /// the node's scenario, without a Kubernetes API (the health loop reports only).
    pub fn start_exporter(&self, args: &[&str]) -> NodeExporter {
        let bin = binaries();
        let port = crate::free_port();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = std::fs::File::create(self.dir.join("exporter.log")).unwrap();
        let child = Command::new(bin.join("gpu-exporter"))
            .args(["--nvml-library"])
            .arg(bin.join("libfake_nvml.so"))
            .args(["--node-name", &self.name, "--web.listen-address", &addr.to_string()])
            .arg("--kubelet.pod-resources-socket")
            .arg(self.pod_resources_socket())
            .args(["--collect-interval", "1s", "--nvml.call-timeout", "500ms"])
            .args(args)
            .env("FAKE_NVML_SCENARIO", self.scenario_file())
            .env("FAKE_NVML_LIVE", "1")
            .env("HOME", "/nonexistent")
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let exporter = NodeExporter { addr, _process: Killed::new(child), log: self.dir.join("exporter.log") };
        crate::simulated::wait_until("the sim node's exporter serving", Duration::from_secs(60), || {
            http_get(addr, "/metrics").is_some_and(|(code, _)| code == 200)
        });
        exporter
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.script.id()) else { return };
        // SAFETY: kill(2) on the process group this struct spawned; no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGTERM);
        }
        for _ in 0..100 {
            if matches!(self.script.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above; whatever of the group is left.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.script.wait();
    }
}

/// The exporter of a [`SimNode`].
#[derive(Debug)]
pub struct NodeExporter {
    pub addr: std::net::SocketAddr,
    _process: Killed,
    log: PathBuf,
}

impl NodeExporter {
    /// Its `/metrics` page.
    pub fn metrics(&self) -> String {
        http_get(self.addr, "/metrics").map(|(_, body)| body).unwrap_or_default()
    }

    /// The last `lines` of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The series of `family` on `page` whose labels contain every `label="value"` pair.
pub fn series<'a>(page: &'a str, family: &str, labels: &[(&str, &str)]) -> Vec<&'a str> {
    page.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .collect()
}

/// The value of `label` in one exposition line.
pub fn label<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let start = line.find(&format!("{label}=\""))? + label.len() + 2;
    let rest = &line[start..];
    Some(&rest[..rest.find('"')?])
}
