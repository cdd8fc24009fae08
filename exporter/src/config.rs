//! Command-line flags (each also settable from an environment variable) and their
//! checks. Flag names follow the Prometheus exporters (`--web.listen-address`,
//! `--web.config.file`, `--log.level`).
//!
//! Every duration and number flag has a valid range, stated in its `--help` text and in
//! the docs (README for these, `docs/health.md` for the health loop's), and enforced by
//! clap through [`Bounded`] while the command line is parsed, so a value that can never
//! work (`--nvml.call-timeout 0s`, `TEMPERATURE_THRESHOLD=500`) stops the exporter with
//! exit code 2 before anything starts, with a message that names the flag, its
//! environment variable and the range. A limit that depends on another flag
//! (`--nvml.call-timeout` below `--collect-interval`) is a cross-check in
//! [`Args::validate`] with its own message.
//!
//! Durations are read by the workspace's one parser, [`flag_ranges::parse_duration`]
//! (`250ms`, `5s`, `1m30s`, `1.5h`, `43800h`; its doc states the whole syntax). The flags
//! of the health loop and attribution live with those parts and use the same parser.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use flag_ranges::{Bounded, parse_duration, show_duration};

/// Why the flags were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("--label {0:?}: expected NAME=VALUE")]
    LabelSyntax(String),
    #[error("--label {name:?}: {reason}")]
    LabelName { name: String, reason: &'static str },
    #[error("--web.listen-address {0:?}: expected HOST:PORT or :PORT")]
    ListenAddress(String),
    #[error(
        "--nvml.call-timeout (GPU_EXPORTER_NVML_CALL_TIMEOUT) {} must be shorter than --collect-interval \
         (GPU_EXPORTER_COLLECT_INTERVAL) {}: a cycle must be able to finish a call before the next one is due",
        show_duration(*.timeout), show_duration(*.interval)
    )]
    TimeoutNotBelowInterval { timeout: Duration, interval: Duration },
    #[error(
        "--web.max-connections-per-ip (GPU_EXPORTER_WEB_MAX_CONNECTIONS_PER_IP) {per_ip} must be at most \
         --web.max-connections (GPU_EXPORTER_WEB_MAX_CONNECTIONS) {total}: one address cannot hold more places than there are"
    )]
    PerIpAboveTotal { per_ip: usize, total: usize },
    #[error(transparent)]
    Attribution(#[from] crate::attribution::config::AttributionConfigError),
}

pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// Exporter flags.
#[derive(Debug, Clone, Parser)]
#[command(name = "gpu-exporter", version, about = "GPU telemetry for Kubernetes nodes, read through NVML")]
pub struct Args {
    /// Address to serve /metrics, /healthz and /readyz on.
    #[arg(long = "web.listen-address", env = "GPU_EXPORTER_WEB_LISTEN_ADDRESS", default_value = ":9400")]
    pub listen_address: String,

    /// Prometheus exporter-toolkit web configuration (TLS, client certificates, basic auth).
    #[arg(long = "web.config.file", env = "GPU_EXPORTER_WEB_CONFIG_FILE")]
    pub web_config_file: Option<PathBuf>,

    /// How long a client may take to send a complete request head, 1s to 1m: from accept
    /// on plain HTTP, from the end of the TLS handshake with TLS, and between the requests
    /// of a keep-alive connection; a client that has not finished by then is closed. A
    /// scraper or the kubelet sends its head in one write; keep it below the scrape
    /// interval (the default 5s is a third of the usual 15s), so that a silent client
    /// never holds its place through a whole scrape.
    #[arg(
        long = "web.header-read-timeout",
        env = "GPU_EXPORTER_WEB_HEADER_READ_TIMEOUT",
        default_value = "5s",
        value_parser = Bounded::duration(parse_duration, Duration::from_secs(1), Duration::from_secs(60))
    )]
    pub header_read_timeout: Duration,

    /// How long a client may take from accept to the end of its TLS handshake, 1s to 1m
    /// (with TLS in --web.config.file). A handshake takes milliseconds on a busy node;
    /// above a minute a silent client holds its place through several scrapes.
    #[arg(
        long = "web.tls-handshake-timeout",
        env = "GPU_EXPORTER_WEB_TLS_HANDSHAKE_TIMEOUT",
        default_value = "5s",
        value_parser = Bounded::duration(parse_duration, Duration::from_secs(1), Duration::from_secs(60))
    )]
    pub handshake_timeout: Duration,

    /// Connections open at once, 16 to 65536. At the limit the connection idle the
    /// longest is closed to make room, so idle sockets never lock scrapes or probes out;
    /// only when every connection is serving a request do new clients wait. Below 16 a
    /// node's scrapers, probes and keep-alive connections crowd each other out; each
    /// connection costs a file descriptor.
    #[arg(
        long = "web.max-connections",
        env = "GPU_EXPORTER_WEB_MAX_CONNECTIONS",
        default_value_t = https_edge::DEFAULT_MAX_CONNECTIONS,
        value_parser = Bounded::number(16usize, 65536)
    )]
    pub max_connections: usize,

    /// Connections open at once from one IP address, 1 to 65536, and at most
    /// --web.max-connections (default: a quarter of it, 256). At the limit that address's
    /// connection idle the longest is closed to make room (or the new one, when all of
    /// them are serving), so one address cannot take every place.
    #[arg(
        long = "web.max-connections-per-ip",
        env = "GPU_EXPORTER_WEB_MAX_CONNECTIONS_PER_IP",
        value_parser = Bounded::number(1usize, 65536)
    )]
    pub max_connections_per_ip: Option<usize>,

    /// The NVML library to load; on a GPU node the driver's libnvidia-ml.so.1.
    #[arg(long = "nvml-library", env = "GPU_EXPORTER_NVML_LIBRARY", default_value = "libnvidia-ml.so.1")]
    pub nvml_library: PathBuf,

    /// Time between collection cycles, 100ms to 5m. 5s keeps every 15s scrape (the usual
    /// interval, and the HPA's sync period) at most a third of a scrape behind, while a
    /// cycle of 8 GPUs costs well under a millisecond of CPU. Below 100ms the driver is
    /// polled faster than its own counters move; above 5m the HPA and the health loop act
    /// on readings minutes old.
    #[arg(
        long = "collect-interval",
        env = "GPU_EXPORTER_COLLECT_INTERVAL",
        default_value = "5s",
        value_parser = Bounded::duration(parse_duration, Duration::from_millis(100), Duration::from_secs(300))
    )]
    pub collect_interval: Duration,

    /// Deadline of a single NVML call (and of nvmlInit); a GPU whose call runs longer is
    /// marked stale. 50ms to 1m, and shorter than --collect-interval: below 50ms ordinary
    /// calls on a busy driver miss it and healthy GPUs go stale (0s never initialises
    /// NVML); above 1m a hung GPU goes unnoticed for longer than any scrape interval.
    #[arg(
        long = "nvml.call-timeout",
        env = "GPU_EXPORTER_NVML_CALL_TIMEOUT",
        default_value = "2s",
        value_parser = Bounded::duration(parse_duration, Duration::from_millis(50), Duration::from_secs(60))
    )]
    pub call_timeout: Duration,

    /// Longest wait between NVML initialisation attempts while NVML is down, 1s to 1h. The
    /// waits start at 1s and double up to this; an hour is as long as a node should go
    /// without noticing that its driver came back.
    #[arg(
        long = "nvml.init-retry-max",
        env = "GPU_EXPORTER_NVML_INIT_RETRY_MAX",
        default_value = "60s",
        value_parser = Bounded::duration(parse_duration, Duration::from_secs(1), Duration::from_secs(3600))
    )]
    pub init_retry_max: Duration,

    /// Value of the `node` label; in a DaemonSet, set NODE_NAME from spec.nodeName.
    #[arg(long = "node-name", env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// Constant label added to every series, NAME=VALUE; repeat the flag or separate with commas.
    #[arg(long = "label", env = "GPU_EXPORTER_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,

    /// Log level: error, warn, info, debug, trace or off, and optionally comma-separated
    /// target=level pairs (e.g. info,gpu_exporter::health=debug).
    #[arg(
        long = "log.level",
        env = "GPU_EXPORTER_LOG_LEVEL",
        default_value = "info",
        value_parser = logging::parse_log_filter
    )]
    pub log_level: logging::LogFilter,

    #[arg(long = "log.format", env = "GPU_EXPORTER_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: logging::LogFormat,

    /// How long in-flight scrapes (and the collector) may take to finish after SIGTERM,
    /// 0s to 2m (0s: stop at once). The kubelet kills the pod at the end of its grace
    /// period anyway (15s in the shipped DaemonSet), so longer only delays that.
    #[arg(
        long = "shutdown-timeout",
        env = "GPU_EXPORTER_SHUTDOWN_TIMEOUT",
        default_value = "5s",
        value_parser = Bounded::duration(parse_duration, Duration::ZERO, Duration::from_secs(120))
    )]
    pub shutdown_timeout: Duration,

    /// Whose metric names to serve: native (ours, docs/metrics.md), dcgm-exporter
    /// (dcgm-exporter's default counters, as --metrics.dcgm-exporter-version's release
    /// writes them, for dashboards and rules written against it) or both (for a
    /// migration). The gpu_exporter_* and gpu_health_* families are served in every
    /// naming. See docs/replacing-dcgm-exporter.md.
    #[arg(long = "metrics.naming", env = "GPU_EXPORTER_METRICS_NAMING", value_enum, default_value = "native")]
    pub naming: crate::render::Naming,

    /// The dcgm-exporter release whose page dcgm-exporter's naming copies, 3.0.0 to
    /// 4.8.3: the exporter's own version (4.8.2), or the whole image tag (4.5.3-4.8.2, as
    /// the GPU operator's values name it). Releases differ in the host label (Hostname to
    /// 4.8.2, hostname from 4.8.3), pod_uid (4.5.0 to 4.8.1), pci_bus_id (from 3.5.0),
    /// err_code and err_msg (from 3.4.2) and more; docs/replacing-dcgm-exporter.md has
    /// the table. GPU operator v26.3 ships 4.8.0 (v26.3.2: 4.8.2), v26.7 ships 4.8.3.
    #[arg(
        long = "metrics.dcgm-exporter-version",
        env = "GPU_EXPORTER_METRICS_DCGM_EXPORTER_VERSION",
        value_name = "VERSION",
        default_value = "4.8.2",
        value_parser = crate::render::dcgm::version::parser()
    )]
    pub dcgm_exporter_version: crate::render::dcgm::version::Version,

    #[command(flatten)]
    pub health: gpu_health_kube::config::HealthArgs,
    #[command(flatten)]
    pub attribution: crate::attribution::config::AttributionArgs,
}

/// Labels the exporter sets itself; a constant label may not reuse them.
const RESERVED_LABELS: &[&str] = &[
    "node",
    "gpu",
    "uuid",
    "model",
    "mig_profile",
    "gpu_instance_id",
    "compute_instance_id",
    "namespace",
    "pod",
    "container",
];

impl Args {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<()> {
        self.extra_labels()?;
        self.socket_addresses()?;
        self.attribution.validate()?;
        if self.call_timeout >= self.collect_interval {
            return Err(ConfigError::TimeoutNotBelowInterval {
                timeout: self.call_timeout,
                interval: self.collect_interval,
            });
        }
        if let Some(per_ip) = self.max_connections_per_ip
            && per_ip > self.max_connections
        {
            return Err(ConfigError::PerIpAboveTotal { per_ip, total: self.max_connections });
        }
        Ok(())
    }

    /// `--web.max-connections-per-ip`, by default a quarter of `--web.max-connections`
    /// (the edge's own proportion: 256 of 1024).
    pub fn effective_max_connections_per_ip(&self) -> usize {
        self.max_connections_per_ip.unwrap_or(self.max_connections / 4).clamp(1, self.max_connections)
    }

    /// The web server's connection settings: these flags, with `--shutdown-timeout` as
    /// the drain.
    pub fn serve_options(&self) -> crate::web::ServeOptions {
        crate::web::ServeOptions {
            drain: self.shutdown_timeout,
            handshake_timeout: self.handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            max_connections: self.max_connections,
            max_connections_per_ip: self.effective_max_connections_per_ip(),
            ..crate::web::ServeOptions::default()
        }
    }

    /// The constant labels as (name, value) pairs.
    pub fn extra_labels(&self) -> Result<Vec<(String, String)>> {
        let mut labels: Vec<(String, String)> = Vec::new();
        for item in self.labels.iter().filter(|l| !l.trim().is_empty()) {
            let (name, value) = item.split_once('=').ok_or_else(|| ConfigError::LabelSyntax(item.clone()))?;
            let name = name.trim();
            let bad = |reason| ConfigError::LabelName { name: name.to_string(), reason };
            let mut chars = name.chars();
            let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(bad("not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)"));
            }
            if name.starts_with("__") {
                return Err(bad("names starting with __ are reserved by Prometheus"));
            }
            if RESERVED_LABELS.contains(&name) {
                return Err(bad("the exporter sets this label itself"));
            }
            if self.naming.dcgm() && crate::render::dcgm::LABELS.contains(&name) {
                return Err(bad("dcgm-exporter's naming (--metrics.naming) sets this label itself"));
            }
            if labels.iter().any(|(n, _)| n == name) {
                return Err(bad("given twice"));
            }
            labels.push((name.to_string(), value.to_string()));
        }
        Ok(labels)
    }

    /// The addresses to bind: `:PORT` means every interface, IPv6 and IPv4.
    pub fn socket_addresses(&self) -> Result<Vec<SocketAddr>> {
        let text = self.listen_address.trim();
        let bad = || ConfigError::ListenAddress(self.listen_address.clone());
        if let Some(port) = text.strip_prefix(':') {
            let port: u16 = port.parse().map_err(|_| bad())?;
            return Ok(vec![SocketAddr::from(([0u16; 8], port)), SocketAddr::from(([0u8; 4], port))]);
        }
        text.parse::<SocketAddr>().map(|a| vec![a]).map_err(|_| bad())
    }

    /// The `node` label: the flag, else the host name.
    pub fn node(&self) -> String {
        self.node_name.clone().filter(|n| !n.is_empty()).unwrap_or_else(hostname)
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["gpu-exporter"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn duration_flags_read_the_shared_syntax() {
        let a = args(&["--collect-interval", "1m30s", "--nvml.call-timeout", "250ms", "--shutdown-timeout", "0"]);
        assert_eq!(a.collect_interval, Duration::from_secs(90));
        assert_eq!(a.call_timeout, Duration::from_millis(250));
        assert_eq!(a.shutdown_timeout, Duration::ZERO);
        assert_eq!(args(&["--collect-interval", "1.5s"]).collect_interval, Duration::from_millis(1500));
        for bad in ["5", "fast", "", "1d", "99999999999h"] {
            let err = Args::try_parse_from(["gpu-exporter", "--collect-interval", bad]).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "the refusal names {bad:?}: {err}");
        }
    }

    #[test]
    fn seed_labels_parse() {
        let a = args(&["--label", "cluster=production,region=cn-east"]);
        assert_eq!(
            a.extra_labels().unwrap(),
            vec![("cluster".into(), "production".into()), ("region".into(), "cn-east".into())]
        );
    }

    #[test]
    fn bad_labels_are_named() {
        let err = args(&["--label", "gpu=7"]).validate().unwrap_err();
        assert_eq!(err.to_string(), "--label \"gpu\": the exporter sets this label itself");
        assert!(matches!(args(&["--label", "novalue"]).validate(), Err(ConfigError::LabelSyntax(_))));
        assert!(matches!(args(&["--label", "1x=a"]).validate(), Err(ConfigError::LabelName { .. })));
    }

    #[test]
    fn naming_is_read_from_the_flag_and_refused_when_unknown() {
        use crate::render::Naming;
        assert_eq!(args(&[]).naming, Naming::Native);
        assert_eq!(args(&["--metrics.naming", "dcgm-exporter"]).naming, Naming::DcgmExporter);
        assert_eq!(args(&["--metrics.naming", "both"]).naming, Naming::Both);
        let err = Args::try_parse_from(["gpu-exporter", "--metrics.naming", "dcgm"]).unwrap_err().to_string();
        for part in ["--metrics.naming", "'dcgm'", "native", "dcgm-exporter", "both"] {
            assert!(err.contains(part), "{part} in {err}");
        }
    }

    #[test]
    fn the_dcgm_exporter_release_is_read_in_both_forms_and_refused_outside_the_range() {
        use crate::render::dcgm::version::{DEFAULT, v};
        assert_eq!(args(&[]).dcgm_exporter_version, DEFAULT);
        assert_eq!(args(&["--metrics.dcgm-exporter-version", "4.8.3"]).dcgm_exporter_version, v(4, 8, 3));
        assert_eq!(args(&["--metrics.dcgm-exporter-version", "4.4.1-4.6.0"]).dcgm_exporter_version, v(4, 6, 0));
        assert_eq!(args(&["--metrics.dcgm-exporter-version=3.0.0"]).dcgm_exporter_version, v(3, 0, 0));
        for (value, reason) in [
            ("4.9.0", "4.9.0 is outside the valid range 3.0.0 to 4.8.3"),
            ("2.6.11", "2.6.11 is outside the valid range 3.0.0 to 4.8.3"),
            ("latest", "is not a dcgm-exporter version"),
            ("3.3.7", "3.3.7 is the DCGM version of 3.3.7-3.5.0"),
        ] {
            let err = Args::try_parse_from(["gpu-exporter", "--metrics.dcgm-exporter-version", value]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{value}");
            let text = err.to_string();
            for part in [
                reason,
                "--metrics.dcgm-exporter-version",
                "GPU_EXPORTER_METRICS_DCGM_EXPORTER_VERSION",
                "3.0.0 to 4.8.3",
            ] {
                assert!(text.contains(part), "{value}: {part} in {text}");
            }
        }
    }

    #[test]
    fn a_constant_label_may_not_take_a_dcgm_exporter_label_when_that_naming_is_served() {
        assert!(args(&["--label", "modelName=x"]).validate().is_ok(), "free in our naming");
        let err = args(&["--metrics.naming", "both", "--label", "modelName=x"]).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "--label \"modelName\": dcgm-exporter's naming (--metrics.naming) sets this label itself"
        );
    }

    #[test]
    fn listen_address_forms() {
        assert_eq!(args(&[]).socket_addresses().unwrap().len(), 2);
        assert_eq!(args(&["--web.listen-address", "127.0.0.1:9500"]).socket_addresses().unwrap().len(), 1);
        assert!(args(&["--web.listen-address", "localhost"]).validate().is_err());
    }

    #[test]
    fn call_timeout_must_fit_in_the_interval() {
        let err = args(&["--collect-interval", "1s", "--nvml.call-timeout", "2s"]).validate().unwrap_err();
        assert!(matches!(err, ConfigError::TimeoutNotBelowInterval { .. }));
        let text = err.to_string();
        assert!(text.contains("--nvml.call-timeout (GPU_EXPORTER_NVML_CALL_TIMEOUT) 2s"), "{text}");
        assert!(text.contains("--collect-interval (GPU_EXPORTER_COLLECT_INTERVAL) 1s"), "{text}");
    }

    #[test]
    fn connection_flags_reach_the_serving_options() {
        let defaults = args(&[]).serve_options();
        assert_eq!(defaults.header_read_timeout, https_edge::DEFAULT_HEADER_READ_TIMEOUT);
        assert_eq!(defaults.handshake_timeout, https_edge::DEFAULT_HANDSHAKE_TIMEOUT);
        assert_eq!(defaults.max_connections, https_edge::DEFAULT_MAX_CONNECTIONS);
        assert_eq!(defaults.max_connections_per_ip, https_edge::DEFAULT_MAX_CONNECTIONS_PER_PEER);
        let a = args(&[
            "--web.header-read-timeout",
            "2s500ms",
            "--web.tls-handshake-timeout",
            "3s",
            "--web.max-connections",
            "64",
            "--web.max-connections-per-ip",
            "16",
            "--shutdown-timeout",
            "1s",
        ]);
        a.validate().unwrap();
        let options = a.serve_options();
        assert_eq!(options.header_read_timeout, Duration::from_millis(2500));
        assert_eq!(options.handshake_timeout, Duration::from_secs(3));
        assert_eq!((options.max_connections, options.max_connections_per_ip), (64, 16));
        assert_eq!(options.drain, Duration::from_secs(1));
        assert_eq!(options.probe_paths, crate::web::ServeOptions::default().probe_paths);
    }

    #[test]
    fn connection_flags_out_of_range_are_refused_naming_the_flag() {
        for (flag, value, env, range) in [
            ("--web.header-read-timeout", "0s", "GPU_EXPORTER_WEB_HEADER_READ_TIMEOUT", "1s to 1m"),
            ("--web.header-read-timeout", "2m", "GPU_EXPORTER_WEB_HEADER_READ_TIMEOUT", "1s to 1m"),
            ("--web.tls-handshake-timeout", "500ms", "GPU_EXPORTER_WEB_TLS_HANDSHAKE_TIMEOUT", "1s to 1m"),
            ("--web.max-connections", "0", "GPU_EXPORTER_WEB_MAX_CONNECTIONS", "16 to 65536"),
            ("--web.max-connections", "1000000", "GPU_EXPORTER_WEB_MAX_CONNECTIONS", "16 to 65536"),
            ("--web.max-connections-per-ip", "0", "GPU_EXPORTER_WEB_MAX_CONNECTIONS_PER_IP", "1 to 65536"),
        ] {
            let err = Args::try_parse_from(["gpu-exporter", flag, value]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{flag} {value}");
            let text = err.to_string();
            for part in [flag, env, range, &format!("'{value}'")] {
                assert!(text.contains(part), "{flag} {value}: {part} in {text}");
            }
        }
        let err = Args::try_parse_from(["gpu-exporter", "--web.header-read-timeout", "5"]).unwrap_err().to_string();
        assert!(err.contains("--web.header-read-timeout") && err.contains("\"5\""), "a bare number: {err}");
    }

    #[test]
    fn the_per_ip_limit_may_not_exceed_the_total() {
        let err = args(&["--web.max-connections", "64", "--web.max-connections-per-ip", "65"]).validate().unwrap_err();
        assert_eq!(err, ConfigError::PerIpAboveTotal { per_ip: 65, total: 64 });
        let text = err.to_string();
        assert!(text.contains("--web.max-connections-per-ip (GPU_EXPORTER_WEB_MAX_CONNECTIONS_PER_IP) 65"), "{text}");
        assert!(text.contains("--web.max-connections (GPU_EXPORTER_WEB_MAX_CONNECTIONS) 64"), "{text}");
        assert!(args(&["--web.max-connections", "64", "--web.max-connections-per-ip", "64"]).validate().is_ok());
        let a = args(&["--web.max-connections", "64"]);
        a.validate().unwrap();
        assert_eq!(a.serve_options().max_connections_per_ip, 16, "by default a quarter of the total");
        assert_eq!(args(&["--web.max-connections", "17"]).effective_max_connections_per_ip(), 4);
    }

    #[test]
    fn durations_are_shown_as_they_are_written() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(50), "50ms"),
            (Duration::from_millis(1500), "1s500ms"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(43800 * 3600), "43800h"),
            (Duration::from_micros(5), "5000ns"),
        ] {
            assert_eq!(show_duration(d), text);
            if d >= Duration::from_millis(1) {
                assert_eq!(parse_duration(text), Ok(d), "{text} reads back");
            }
        }
    }

    #[test]
    fn a_refusal_names_the_flag_the_variable_and_the_range() {
        let err = Args::try_parse_from(["gpu-exporter", "--nvml.call-timeout", "0s"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        let text = err.to_string();
        for part in ["'--nvml.call-timeout", "GPU_EXPORTER_NVML_CALL_TIMEOUT", "50ms to 1m", "'0s'"] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let err = Args::try_parse_from(["gpu-exporter", "--collect-interval", "0s"]).unwrap_err().to_string();
        assert!(err.contains("--collect-interval") && err.contains("100ms to 5m"), "{err}");
        assert!(!err.contains("call-timeout"), "refused for itself, not through the call timeout: {err}");
    }
}
