//! Attribution flags (flattened into the exporter's [`crate::config::Args`]).
//!
//! Defaults fit a DaemonSet that mounts the kubelet's pod-resources directory, the host
//! `/proc` and `/var/log/pods`, and runs with a service account allowed to list and
//! watch pods. The two durations have valid ranges enforced while the command line is
//! parsed ([`flag_ranges::Bounded`]); `--kubelet.timeout` below
//! `--kubelet.refresh-interval` is a cross-check in [`AttributionArgs::validate`].

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use flag_ranges::{Bounded, parse_duration, show_duration};

/// Why the attribution flags were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AttributionConfigError {
    #[error("--kubernetes.pod-labels {pattern:?}: {reason}")]
    PodLabels { pattern: String, reason: String },
    #[error("--kubelet.refresh-interval (GPU_EXPORTER_KUBELET_REFRESH_INTERVAL) {}: must be at least 1s", show_duration(*.0))]
    RefreshTooShort(Duration),
    #[error(
        "--kubelet.timeout (GPU_EXPORTER_KUBELET_TIMEOUT) {} must be shorter than --kubelet.refresh-interval \
         (GPU_EXPORTER_KUBELET_REFRESH_INTERVAL) {}",
        show_duration(*.timeout), show_duration(*.interval)
    )]
    TimeoutNotBelowInterval { timeout: Duration, interval: Duration },
}

pub type Result<T, E = AttributionConfigError> = std::result::Result<T, E>;

/// Whether to watch pods on the Kubernetes API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiMode {
    /// Watch when a configuration is found (in-cluster service account, `--kubernetes.kubeconfig`,
    /// `KUBECONFIG` or `~/.kube/config`); without one, carry on without the API.
    Auto,
    /// Never contact the API server.
    Off,
}

/// Pod attribution flags.
#[derive(Debug, Clone, clap::Args)]
pub struct AttributionArgs {
    /// The kubelet's pod-resources socket; an empty value turns the kubelet source off.
    #[arg(
        long = "kubelet.pod-resources-socket",
        env = "GPU_EXPORTER_KUBELET_POD_RESOURCES_SOCKET",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock",
        value_parser = path_or_empty
    )]
    pub pod_resources_socket: PathBuf,

    /// Time between pod-resources `List` calls, 1s to 5m. Allocations change only when a
    /// pod starts or ends, and ended pods are dropped sooner through the pod watch, so 10s
    /// (two collection cycles, less than one 15s scrape) names a new pod before its first
    /// scrape or HPA sync is due, at one small call per 10s instead of one per scrape.
    /// Below 1s the kubelet is asked again before anything could change; above 5m a new
    /// pod's GPUs stay unattributed through many scrapes and HPA syncs.
    #[arg(
        long = "kubelet.refresh-interval",
        env = "GPU_EXPORTER_KUBELET_REFRESH_INTERVAL",
        default_value = "10s",
        value_parser = Bounded::duration(parse_duration, Duration::from_secs(1), Duration::from_secs(300))
    )]
    pub refresh_interval: Duration,

    /// Deadline of one pod-resources call, 100ms to 1m, and shorter than
    /// --kubelet.refresh-interval. The call is local (a unix socket); below 100ms a busy
    /// kubelet misses it, and a kubelet that takes a minute is not answering.
    #[arg(
        long = "kubelet.timeout",
        env = "GPU_EXPORTER_KUBELET_TIMEOUT",
        default_value = "5s",
        value_parser = Bounded::duration(parse_duration, Duration::from_millis(100), Duration::from_secs(60))
    )]
    pub timeout: Duration,

    /// More resource names to attribute besides `nvidia.com/gpu` and `nvidia.com/mig-*`
    /// (e.g. a renamed shared resource `nvidia.com/gpu.shared`); comma-separated.
    #[arg(long = "kubelet.resource-names", env = "GPU_EXPORTER_KUBELET_RESOURCE_NAMES", value_delimiter = ',')]
    pub resource_names: Vec<String>,

    /// DRA drivers whose devices are GPUs, comma-separated; an empty value turns DRA
    /// attribution (pod-resources' `dynamic_resources` and the ResourceSlice watch) off.
    #[arg(
        long = "kubelet.dra-drivers",
        env = "GPU_EXPORTER_KUBELET_DRA_DRIVERS",
        value_delimiter = ',',
        default_value = super::pod_resources::DEFAULT_DRA_DRIVER
    )]
    pub dra_drivers: Vec<String>,

    /// The host's /proc, for `<pid>/cgroup` of GPU processes (NVML reports host PIDs).
    #[arg(long = "path.procfs", env = "GPU_EXPORTER_PATH_PROCFS", default_value = "/proc")]
    pub procfs: PathBuf,

    /// The kubelet's pod log directory (`<namespace>_<pod>_<uid>/<container>/`), used to
    /// name pods without the API server; an empty value turns it off.
    #[arg(long = "path.pod-logs", env = "GPU_EXPORTER_PATH_POD_LOGS", default_value = "/var/log/pods", value_parser = path_or_empty)]
    pub pod_logs: PathBuf,

    /// The Kubernetes API, for the pod watch and the health loop alike. `off`: the process
    /// never contacts the API server: no pod watch, and the health loop runs report-only
    /// (it evaluates and exports its verdict, and writes nothing). `auto`: use it when a
    /// configuration is found.
    #[arg(long = "kubernetes.api", env = "GPU_EXPORTER_KUBERNETES_API", value_enum, default_value = "auto")]
    pub api: ApiMode,

    /// Kubeconfig for the pod watch and the health loop; default: in-cluster, then `KUBECONFIG` / `~/.kube/config`.
    #[arg(long = "kubernetes.kubeconfig", env = "GPU_EXPORTER_KUBERNETES_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Pod labels to copy onto `gpu_pod_info` as `label_<name>`: a regular expression that
    /// must match the whole label name (e.g. `app|app\.kubernetes\.io/.*|team`). None by default.
    #[arg(long = "kubernetes.pod-labels", env = "GPU_EXPORTER_KUBERNETES_POD_LABELS")]
    pub pod_labels: Option<String>,
}

/// A path where the empty string (turning a source off) is allowed.
fn path_or_empty(text: &str) -> std::result::Result<PathBuf, String> {
    Ok(PathBuf::from(text))
}

impl AttributionArgs {
    pub fn validate(&self) -> Result<()> {
        self.label_allowlist()?;
        if self.refresh_interval < Duration::from_secs(1) {
            return Err(AttributionConfigError::RefreshTooShort(self.refresh_interval));
        }
        if self.timeout >= self.refresh_interval {
            return Err(AttributionConfigError::TimeoutNotBelowInterval {
                timeout: self.timeout,
                interval: self.refresh_interval,
            });
        }
        Ok(())
    }

    /// The compiled `--kubernetes.pod-labels`, anchored so that it must match a whole
    /// label name, if given and not empty.
    pub fn label_allowlist(&self) -> Result<Option<regex::Regex>> {
        let Some(pattern) = self.pod_labels.as_deref().filter(|p| !p.is_empty()) else { return Ok(None) };
        let bad = |reason: String| AttributionConfigError::PodLabels { pattern: pattern.to_string(), reason };
        // Checked alone first, so that an error points into the user's pattern.
        regex::Regex::new(pattern).map_err(|e| bad(e.to_string()))?;
        regex::Regex::new(&format!("^(?:{pattern})$")).map(Some).map_err(|e| bad(e.to_string()))
    }

    /// The socket, unless turned off.
    pub fn socket(&self) -> Option<&std::path::Path> {
        Some(self.pod_resources_socket.as_path()).filter(|p| !p.as_os_str().is_empty())
    }

    /// The pod log directory, unless turned off.
    pub fn pod_log_dir(&self) -> Option<&std::path::Path> {
        Some(self.pod_logs.as_path()).filter(|p| !p.as_os_str().is_empty())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        a: AttributionArgs,
    }

    fn parse(args: &[&str]) -> AttributionArgs {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        Wrapper::try_parse_from(argv).unwrap().a
    }

    #[test]
    fn defaults_fit_a_daemonset() {
        let a = parse(&[]);
        assert_eq!(a.socket(), Some(std::path::Path::new("/var/lib/kubelet/pod-resources/kubelet.sock")));
        assert_eq!(a.refresh_interval, Duration::from_secs(10));
        assert_eq!(a.api, ApiMode::Auto);
        assert!(a.validate().is_ok());
        assert!(a.label_allowlist().unwrap().is_none());
    }

    #[test]
    fn the_label_allowlist_matches_whole_names() {
        let allow =
            parse(&["--kubernetes.pod-labels", "app|app\\.kubernetes\\.io/name"]).label_allowlist().unwrap().unwrap();
        assert!(allow.is_match("app"));
        assert!(allow.is_match("app.kubernetes.io/name"), "a later alternative matching the whole name counts");
        assert!(!allow.is_match("application"));
        assert!(!allow.is_match("my-app"));
        assert!(parse(&["--kubernetes.pod-labels", ""]).label_allowlist().unwrap().is_none());
    }

    #[test]
    fn empty_paths_turn_sources_off() {
        let a = parse(&["--kubelet.pod-resources-socket", "", "--path.pod-logs", ""]);
        assert!(a.socket().is_none() && a.pod_log_dir().is_none());
    }

    #[test]
    fn bad_values_are_refused_with_the_flag() {
        let err = parse(&["--kubernetes.pod-labels", "app("]).validate().unwrap_err();
        assert!(err.to_string().starts_with("--kubernetes.pod-labels \"app(\""), "{err}");
        let err = Wrapper::try_parse_from(["x", "--kubelet.refresh-interval", "500ms"]).unwrap_err().to_string();
        assert!(err.contains("--kubelet.refresh-interval") && err.contains("1s to 5m"), "{err}");
        let mut short = parse(&[]);
        short.refresh_interval = Duration::from_millis(500);
        assert!(
            matches!(short.validate(), Err(AttributionConfigError::RefreshTooShort(_))),
            "checked without clap too"
        );
        let err = parse(&["--kubelet.refresh-interval", "2s", "--kubelet.timeout", "2s"]).validate().unwrap_err();
        assert!(matches!(err, AttributionConfigError::TimeoutNotBelowInterval { .. }));
        assert!(err.to_string().contains("(GPU_EXPORTER_KUBELET_TIMEOUT) 2s"), "{err}");
        let names = parse(&["--kubelet.resource-names", "nvidia.com/gpu.shared,example.com/vgpu"]).resource_names;
        assert_eq!(names, ["nvidia.com/gpu.shared", "example.com/vgpu"]);
    }
}
