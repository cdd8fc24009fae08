//! The health loop's flags. Each is also an environment variable; the four the
//! original deployment used keep their names (`CHECK_INTERVAL`,
//! `MEMORY_ERROR_THRESHOLD`, `TEMPERATURE_THRESHOLD`, `AUTO_CORDON`), the others are
//! `GPU_EXPORTER_HEALTH_*`.
//!
//! Every number and duration has a range that means something for a GPU node, stated in
//! its help text and in `docs/health.md` with the reason, and enforced while the command
//! line is parsed ([`flag_ranges::Bounded`]): a value outside it (`TEMPERATURE_THRESHOLD=500`,
//! `=0`, `--health.debounce-checks 0`) stops the exporter with exit code 2 and a message
//! naming the flag, the variable and the range, before any Kubernetes client exists, so
//! no API request follows a refusal. [`HealthArgs::settings`] checks what a range cannot
//! (names, selectors, XID classes) and, for arguments built without clap, the bounds the
//! loop's arithmetic relies on.

use std::time::Duration;

use clap::Args;

use flag_ranges::{Bounded, parse_duration_or_seconds as parse_seconds, show_duration};
use gpu_health::policy::PolicySettings;
use gpu_health::signals::Thresholds;
use gpu_health::xid::{XidError, XidTable};

/// Why the health flags were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HealthConfigError {
    #[error(transparent)]
    Xid(#[from] XidError),
    #[error("--health.domain {0:?}: expected a DNS subdomain such as gpu-telemetry.io")]
    Domain(String),
    #[error(
        "--health.breaker.max-fraction (GPU_EXPORTER_HEALTH_BREAKER_MAX_FRACTION) {0}: expected a share from 0 to 1, such as 0.1"
    )]
    Fraction(f64),
    #[error("--health.check-interval (CHECK_INTERVAL) {}: must be at least 1s", show_duration(*.0))]
    Interval(Duration),
    #[error("--health.breaker.node-selector {0:?}: expected KEY=VALUE or KEY, comma-separated")]
    Selector(String),
    #[error("{flag} ({variable}) {value}: expected a share from 0 to 1, such as {example}")]
    Share { flag: &'static str, variable: &'static str, value: f64, example: &'static str },
    #[error(
        "--health.breaker.gpu-count-label (GPU_EXPORTER_HEALTH_BREAKER_GPU_COUNT_LABEL) {0:?}: expected a label key \
         such as nvidia.com/gpu.count"
    )]
    CountLabel(String),
}

/// `--health.gpu-quarantine.effect`: what a device taint does to the pods on the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EffectArg {
    /// No new claim gets the device; the pods using it keep running.
    #[default]
    #[value(name = "NoSchedule")]
    NoSchedule,
    /// Also evicts the pods using the device.
    #[value(name = "NoExecute")]
    NoExecute,
}

pub type Result<T, E = HealthConfigError> = std::result::Result<T, E>;

/// Flags of the health loop, flattened into the exporter's.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Run the health loop (metrics, and node actions where an API server is reachable).
    #[arg(long = "health.enabled", env = "GPU_EXPORTER_HEALTH_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub enabled: bool,

    /// Time between scheduled health checks, 1s to 1h; a bare number is seconds. XIDs and
    /// lost GPUs are checked as they arrive. Readings change once per collection cycle, so
    /// below 1s checks repeat themselves; above an hour an overheating GPU runs unwatched
    /// for hours once the debounce is counted in.
    #[arg(
        long = "health.check-interval",
        env = "CHECK_INTERVAL",
        default_value = "60",
        value_parser = Bounded::duration(parse_seconds, Duration::from_secs(1), Duration::from_secs(3600))
    )]
    pub check_interval: Duration,

    /// Corrected ECC errors since the last GPU reset at or over which a GPU is unhealthy,
    /// 0 to 100000 (0: off). Beyond 100000 corrected errors the driver has long been
    /// retiring pages or remapping rows, which are their own signals.
    #[arg(
        long = "health.memory-error-threshold",
        env = "MEMORY_ERROR_THRESHOLD",
        default_value_t = 10,
        value_parser = Bounded::number(0u64, 100_000)
    )]
    pub memory_error_threshold: u64,

    /// GPU temperature in °C at or over which a GPU is unhealthy, 60 to 105. Healthy
    /// GPUs run at 30-85 °C under load, so a lower threshold quarantines working nodes
    /// (0 would cordon every node); current GPUs slow down near 85-95 °C and shut down
    /// below 105 °C, so a higher one could never fire.
    #[arg(
        long = "health.temperature-threshold",
        env = "TEMPERATURE_THRESHOLD",
        value_name = "CELSIUS",
        default_value_t = 90,
        value_parser = Bounded::number(60u32, 105)
    )]
    pub temperature_threshold: u32,

    /// A GPU within this many °C of its own slowdown temperature is unhealthy too, 0 to 15
    /// (0: at the slowdown temperature itself). Slowdown is at 85-95 °C; a wider margin
    /// reaches temperatures healthy GPUs run at.
    #[arg(
        long = "health.slowdown-margin",
        env = "GPU_EXPORTER_HEALTH_SLOWDOWN_MARGIN",
        value_name = "CELSIUS",
        default_value_t = 5,
        value_parser = Bounded::number(0u32, 15)
    )]
    pub slowdown_margin: u32,

    /// Retired pages (single- plus double-bit ECC) at or over which a GPU is unhealthy, 0
    /// to 64 (0: off). The driver retires at most 64 pages per GPU, so a higher limit
    /// could never be reached.
    #[arg(
        long = "health.retired-pages-limit",
        env = "GPU_EXPORTER_HEALTH_RETIRED_PAGES_LIMIT",
        default_value_t = 60,
        value_parser = Bounded::number(0u64, 64)
    )]
    pub retired_pages_limit: u64,

    /// Treat an NVLink link that NVML reports down as a fault of its GPU (noisy: the
    /// debounce applies). Off by default: only on nodes whose every link is wired and in
    /// use (HGX/DGX boards) is a link down a fault rather than the board's design.
    #[arg(
        long = "health.nvlink-down",
        env = "GPU_EXPORTER_HEALTH_NVLINK_DOWN",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub nvlink_down: bool,

    /// NVLink data-link errors on one link (CRC flit + CRC data + replay + recovery,
    /// counted since the driver loaded or the GPU was reset) at or over which the GPU is
    /// unhealthy, 0 to 1000000000 (0: off, the default). A healthy link counts none to
    /// a few; docs/health.md says how to pick a value from a fleet's own counters.
    #[arg(
        long = "health.nvlink-error-threshold",
        env = "GPU_EXPORTER_HEALTH_NVLINK_ERROR_THRESHOLD",
        default_value_t = 0,
        value_parser = Bounded::number(0u64, 1_000_000_000)
    )]
    pub nvlink_error_threshold: u64,

    /// Cordon and taint the node when it is unhealthy. Off: the condition, Events and
    /// metrics still tell, scheduling is left alone.
    #[arg(long = "health.auto-cordon", env = "AUTO_CORDON", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_cordon: bool,

    /// Record the intended action (annotation and Event) and change nothing else.
    #[arg(long = "health.dry-run", env = "GPU_EXPORTER_HEALTH_DRY_RUN", default_value_t = false, action = clap::ArgAction::Set)]
    pub dry_run: bool,

    /// Consecutive checks a noisy signal (temperature, corrected ECC, slowdown, hung call)
    /// needs, 1 to 20 (1: act on the first check that sees it). 20 checks are 20 minutes
    /// at the default interval: a fault that must last longer is not being watched.
    #[arg(
        long = "health.debounce-checks",
        env = "GPU_EXPORTER_HEALTH_DEBOUNCE_CHECKS",
        default_value_t = 3,
        value_parser = Bounded::number(1u32, 20)
    )]
    pub debounce_checks: u32,

    /// Consecutive healthy checks before a quarantined node is released, 1 to 20 (1:
    /// the first healthy check). For a longer hold use --health.min-quarantine.
    #[arg(
        long = "health.recovery-checks",
        env = "GPU_EXPORTER_HEALTH_RECOVERY_CHECKS",
        default_value_t = 3,
        value_parser = Bounded::number(1u32, 20)
    )]
    pub recovery_checks: u32,

    /// Shortest quarantine, 0s to 24h (0s: only the recovery checks count). A node held
    /// longer than a day after it recovered needs a person, not a timer.
    #[arg(
        long = "health.min-quarantine",
        env = "GPU_EXPORTER_HEALTH_MIN_QUARANTINE",
        default_value = "10m",
        value_parser = Bounded::duration(parse_seconds, Duration::ZERO, Duration::from_secs(24 * 3600))
    )]
    pub min_quarantine: Duration,

    /// XID classes overriding the default table, CODE=CLASS (event, quarantine, reset,
    /// reboot); repeat the flag or separate with commas.
    #[arg(long = "health.xid-classes", env = "GPU_EXPORTER_HEALTH_XID_CLASSES", value_delimiter = ',')]
    pub xid_classes: Vec<String>,

    /// Prefix of the taint key, annotations and opt-out label the loop writes and reads.
    #[arg(long = "health.domain", env = "GPU_EXPORTER_HEALTH_DOMAIN", default_value = "gpu-telemetry.io")]
    pub domain: String,

    /// No new quarantine while this share of the GPU nodes is quarantined by the loop, 0
    /// to 1 (a share; at least one node may always be taken out, so 0 means one node).
    #[arg(
        long = "health.breaker.max-fraction",
        env = "GPU_EXPORTER_HEALTH_BREAKER_MAX_FRACTION",
        default_value_t = 0.1,
        value_parser = Bounded::number(0.0f64, 1.0)
    )]
    pub breaker_max_fraction: f64,

    /// No new quarantine while this many GPU nodes are quarantined (replaces the share), 1
    /// to 5000. 0 would forbid every quarantine (use --health.auto-cordon=false for that);
    /// 5000 nodes is the largest cluster Kubernetes supports.
    #[arg(
        long = "health.breaker.max-nodes",
        env = "GPU_EXPORTER_HEALTH_BREAKER_MAX_NODES",
        value_parser = Bounded::number(1u32, 5000)
    )]
    pub breaker_max_nodes: Option<u32>,

    /// No new device taint while this share of the fleet's GPUs is held by the loop's
    /// device taints, 0 to 1 (at least one GPU may always be held, so 0 means one GPU).
    /// GPUs are counted apart from nodes: one GPU held alone costs an eighth of a node.
    #[arg(
        long = "health.breaker.max-gpu-fraction",
        env = "GPU_EXPORTER_HEALTH_BREAKER_MAX_GPU_FRACTION",
        default_value_t = 0.1,
        value_parser = Bounded::number(0.0f64, 1.0)
    )]
    pub breaker_max_gpu_fraction: f64,

    /// No new device taint while this many GPUs are held by the loop's device taints
    /// (replaces the share), 1 to 40000: 5000 nodes of 8 GPUs.
    #[arg(
        long = "health.breaker.max-gpus",
        env = "GPU_EXPORTER_HEALTH_BREAKER_MAX_GPUS",
        value_parser = Bounded::number(1u32, 40_000)
    )]
    pub breaker_max_gpus: Option<u32>,

    /// The node label that counts a node's GPUs for the GPU share (GPU feature
    /// discovery's); a node without it counts as many GPUs as this node has.
    #[arg(
        long = "health.breaker.gpu-count-label",
        env = "GPU_EXPORTER_HEALTH_BREAKER_GPU_COUNT_LABEL",
        default_value = "nvidia.com/gpu.count"
    )]
    pub breaker_gpu_count_label: String,

    /// Hold failed GPUs one by one (a DRA device taint each) while they are at most this
    /// share of the node's GPUs and no node-wide signal fires, 0 to 1 (0: always the
    /// node). The default, 0.125, is one GPU of eight: more failing at once points at what
    /// they share (a PCIe switch, power, the driver), so the node is quarantined.
    #[arg(
        long = "health.gpu-quarantine.max-fraction",
        env = "GPU_EXPORTER_HEALTH_GPU_QUARANTINE_MAX_FRACTION",
        default_value_t = 0.125,
        value_parser = Bounded::number(0.0f64, 1.0)
    )]
    pub gpu_quarantine_max_fraction: f64,

    /// Effect of the device taints: NoSchedule (no new claim gets the GPU) or NoExecute
    /// (also evicts the pods using it).
    #[arg(
        long = "health.gpu-quarantine.effect",
        env = "GPU_EXPORTER_HEALTH_GPU_QUARANTINE_EFFECT",
        value_enum,
        default_value_t = EffectArg::NoSchedule
    )]
    pub gpu_quarantine_effect: EffectArg,

    /// Label selector of the GPU nodes the share is taken of.
    #[arg(
        long = "health.breaker.node-selector",
        env = "GPU_EXPORTER_HEALTH_BREAKER_NODE_SELECTOR",
        default_value = "nvidia.com/gpu.present=true"
    )]
    pub breaker_node_selector: String,

    /// ConfigMap the exporters of the cluster count quarantines in.
    #[arg(
        long = "health.breaker.config-map",
        env = "GPU_EXPORTER_HEALTH_BREAKER_CONFIG_MAP",
        default_value = "gpu-health-breaker"
    )]
    pub breaker_config_map: String,

    /// Namespace of that ConfigMap; default: the exporter's own (POD_NAMESPACE, else the kubeconfig's).
    #[arg(long = "health.namespace", env = "POD_NAMESPACE")]
    pub namespace: Option<String>,

    /// Namespace the node Events are written to (the kubelet's are in `default`).
    #[arg(long = "health.event-namespace", env = "GPU_EXPORTER_HEALTH_EVENT_NAMESPACE", default_value = "default")]
    pub event_namespace: String,

    /// Attempts per API request on 409, 429, 5xx or no answer, with backoff and jitter, 1
    /// to 10 (1: no retry). A failed reconcile is retried at the next check anyway; more
    /// attempts only hold the loop on an API server that is down.
    #[arg(
        long = "health.api-attempts",
        env = "GPU_EXPORTER_HEALTH_API_ATTEMPTS",
        default_value_t = 5,
        value_parser = Bounded::number(1u32, 10)
    )]
    pub api_attempts: u32,

    /// Deadline of one API request, 1s to 2m. Below a second a loaded API server times
    /// out healthy requests; past two minutes a stuck request holds up the loop's checks.
    #[arg(
        long = "health.api-timeout",
        env = "GPU_EXPORTER_HEALTH_API_TIMEOUT",
        default_value = "10s",
        value_parser = Bounded::duration(parse_seconds, Duration::from_secs(1), Duration::from_secs(120))
    )]
    pub api_timeout: Duration,
}

pub use gpu_health::device_rules::Effect;
pub use gpu_health::names::{BreakerSettings, Names};

/// Everything the loop needs, checked.
#[derive(Debug, Clone)]
pub struct HealthSettings {
    pub check_interval: Duration,
    pub thresholds: Thresholds,
    pub policy: PolicySettings,
    pub xids: XidTable,
    pub auto_cordon: bool,
    pub dry_run: bool,
    pub names: Names,
    pub breaker: BreakerSettings,
    pub namespace: Option<String>,
    pub event_namespace: String,
    pub api_attempts: u32,
    pub api_timeout: Duration,
    /// The effect of the loop's device taints.
    pub gpu_effect: Effect,
}

fn share(flag: &'static str, variable: &'static str, value: f64, example: &'static str) -> Result<()> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(HealthConfigError::Share { flag, variable, value, example })
    }
}

impl HealthArgs {
    /// Checks the flags and resolves them.
    pub fn settings(&self) -> Result<HealthSettings> {
        let xids = XidTable::with_overrides(&self.xid_classes)?;
        if !is_dns_subdomain(&self.domain) {
            return Err(HealthConfigError::Domain(self.domain.clone()));
        }
        if !(self.breaker_max_fraction.is_finite() && (0.0..=1.0).contains(&self.breaker_max_fraction)) {
            return Err(HealthConfigError::Fraction(self.breaker_max_fraction));
        }
        if self.check_interval < Duration::from_secs(1) {
            return Err(HealthConfigError::Interval(self.check_interval));
        }
        let selector_ok = self.breaker_node_selector.split(',').all(|part| {
            let key = part.split_once('=').map_or(part, |(k, _)| k).trim();
            !key.is_empty() && !key.contains(['!', '(', ' '])
        });
        if !selector_ok {
            return Err(HealthConfigError::Selector(self.breaker_node_selector.clone()));
        }
        share(
            "--health.breaker.max-gpu-fraction",
            "GPU_EXPORTER_HEALTH_BREAKER_MAX_GPU_FRACTION",
            self.breaker_max_gpu_fraction,
            "0.1",
        )?;
        share(
            "--health.gpu-quarantine.max-fraction",
            "GPU_EXPORTER_HEALTH_GPU_QUARANTINE_MAX_FRACTION",
            self.gpu_quarantine_max_fraction,
            "0.125",
        )?;
        let label = self.breaker_gpu_count_label.trim();
        if label.is_empty() || label.contains(['=', ',', ' ', '!']) {
            return Err(HealthConfigError::CountLabel(self.breaker_gpu_count_label.clone()));
        }
        Ok(HealthSettings {
            check_interval: self.check_interval,
            thresholds: Thresholds {
                temperature_c: self.temperature_threshold,
                slowdown_margin_c: self.slowdown_margin,
                corrected_ecc: self.memory_error_threshold,
                retired_pages: self.retired_pages_limit,
                nvlink_down: self.nvlink_down,
                nvlink_errors: self.nvlink_error_threshold,
            },
            policy: PolicySettings {
                debounce_checks: self.debounce_checks.max(1),
                recovery_checks: self.recovery_checks.max(1),
                min_quarantine: self.min_quarantine,
                gpu_max_fraction: self.gpu_quarantine_max_fraction,
            },
            xids,
            auto_cordon: self.auto_cordon,
            dry_run: self.dry_run,
            names: Names::new(&self.domain),
            breaker: BreakerSettings {
                max_fraction: self.breaker_max_fraction,
                max_nodes: self.breaker_max_nodes,
                node_selector: self.breaker_node_selector.clone(),
                config_map: self.breaker_config_map.clone(),
                grace: (self.check_interval * 5).max(Duration::from_secs(300)),
                max_gpu_fraction: self.breaker_max_gpu_fraction,
                max_gpus: self.breaker_max_gpus,
                gpu_count_label: label.to_string(),
            },
            namespace: self.namespace.clone().filter(|n| !n.is_empty()),
            event_namespace: self.event_namespace.clone(),
            api_attempts: self.api_attempts.max(1),
            api_timeout: self.api_timeout,
            gpu_effect: match self.gpu_quarantine_effect {
                EffectArg::NoSchedule => Effect::NoSchedule,
                EffectArg::NoExecute => Effect::NoExecute,
            },
        })
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        health: HealthArgs,
    }

    fn parse(args: &[&str]) -> HealthArgs {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).unwrap().health
    }

    /// The settings `args` give, for the crate's other unit tests.
    pub(crate) fn settings(args: &[&str]) -> HealthSettings {
        parse(args).settings().unwrap()
    }

    #[test]
    fn defaults_match_the_original_deployment() {
        let s = parse(&[]).settings().unwrap();
        assert_eq!(s.check_interval, Duration::from_secs(60));
        assert_eq!(s.thresholds.corrected_ecc, 10);
        assert_eq!(s.thresholds.temperature_c, 90);
        assert!(s.auto_cordon);
        assert!(!s.dry_run);
        assert_eq!(s.names.taint_key, "gpu-telemetry.io/gpu-unhealthy");
        assert_eq!(s.breaker.limit(20), 2);
        assert_eq!(s.policy.gpu_max_fraction, 0.125, "one GPU of eight");
        assert_eq!(s.gpu_effect, Effect::NoSchedule);
        assert_eq!(s.breaker.gpu_limit(160), 16, "10 % of the fleet's GPUs");
        assert_eq!(s.breaker.gpu_config_map(), "gpu-health-breaker-gpus");
        assert_eq!(s.breaker.gpu_count_label, "nvidia.com/gpu.count");
        assert_eq!((s.thresholds.nvlink_down, s.thresholds.nvlink_errors), (false, 0), "NVLink signals are off");
    }

    #[test]
    fn the_nvlink_flags_turn_the_signals_on() {
        let s = parse(&["--health.nvlink-down", "true", "--health.nvlink-error-threshold", "500"]).settings().unwrap();
        assert_eq!((s.thresholds.nvlink_down, s.thresholds.nvlink_errors), (true, 500));
        let err = Cli::try_parse_from(["x", "--health.nvlink-error-threshold", "1000000001"]).unwrap_err().to_string();
        assert!(err.contains("--health.nvlink-error-threshold"), "{err}");
    }

    #[test]
    fn the_gpu_quarantine_flags_parse_and_are_checked() {
        let s = parse(&[
            "--health.gpu-quarantine.max-fraction",
            "0.25",
            "--health.gpu-quarantine.effect",
            "NoExecute",
            "--health.breaker.max-gpus",
            "3",
        ])
        .settings()
        .unwrap();
        assert_eq!((s.policy.gpu_max_fraction, s.gpu_effect), (0.25, Effect::NoExecute));
        assert_eq!(s.breaker.gpu_limit(1000), 3);
        let err = Cli::try_parse_from(["x", "--health.gpu-quarantine.effect", "PreferNoSchedule"]).unwrap_err();
        let err = err.to_string();
        assert!(err.contains("NoSchedule") && err.contains("NoExecute"), "{err}");
        let mut wide = parse(&[]);
        wide.gpu_quarantine_max_fraction = f64::NAN;
        assert_eq!(
            wide.settings().unwrap_err().to_string(),
            "--health.gpu-quarantine.max-fraction (GPU_EXPORTER_HEALTH_GPU_QUARANTINE_MAX_FRACTION) NaN: expected a \
             share from 0 to 1, such as 0.125"
        );
        let mut gpus = parse(&[]);
        gpus.breaker_max_gpu_fraction = 2.0;
        assert!(matches!(gpus.settings(), Err(HealthConfigError::Share { .. })));
        assert!(matches!(
            parse(&["--health.breaker.gpu-count-label", "a=b"]).settings(),
            Err(HealthConfigError::CountLabel(_))
        ));
    }

    #[test]
    fn values_parse() {
        let a = parse(&[
            "--health.check-interval",
            "1m30s",
            "--health.auto-cordon",
            "false",
            "--health.xid-classes",
            "13=reset,31=quarantine",
            "--health.domain",
            "example.com",
        ]);
        let s = a.settings().unwrap();
        assert_eq!(s.check_interval, Duration::from_secs(90));
        assert!(!s.auto_cordon);
        assert_eq!(s.xids.class(31), gpu_health::xid::XidClass::Quarantine);
        assert_eq!(s.names.state_annotation, "example.com/gpu-health");
        assert_eq!(parse_seconds("45"), Ok(Duration::from_secs(45)));
        assert!(parse_seconds("soon").is_err());
    }

    #[test]
    fn the_breaker_limit_is_a_share_or_a_count() {
        let mut b = parse(&[]).settings().unwrap().breaker;
        assert_eq!(b.limit(20), 2);
        assert_eq!(b.limit(29), 2);
        assert_eq!(b.limit(5), 1, "a small cluster may still take one node out");
        b.max_nodes = Some(4);
        assert_eq!(b.limit(20), 4);
    }

    #[test]
    fn out_of_range_values_are_refused_with_flag_variable_and_range() {
        for (argv, flag, variable, range) in [
            (
                ["--health.temperature-threshold", "500"],
                "--health.temperature-threshold",
                "TEMPERATURE_THRESHOLD",
                "60 to 105",
            ),
            (
                ["--health.temperature-threshold", "0"],
                "--health.temperature-threshold",
                "TEMPERATURE_THRESHOLD",
                "60 to 105",
            ),
            (
                ["--health.debounce-checks", "0"],
                "--health.debounce-checks",
                "GPU_EXPORTER_HEALTH_DEBOUNCE_CHECKS",
                "1 to 20",
            ),
            (
                ["--health.recovery-checks", "0"],
                "--health.recovery-checks",
                "GPU_EXPORTER_HEALTH_RECOVERY_CHECKS",
                "1 to 20",
            ),
            (["--health.check-interval", "0"], "--health.check-interval", "CHECK_INTERVAL", "1s to 1h"),
        ] {
            let mut full = vec!["x"];
            full.extend_from_slice(&argv);
            let err = Cli::try_parse_from(full).unwrap_err().to_string();
            for part in [flag, variable, range] {
                assert!(err.contains(part), "{argv:?}: {part} in {err}");
            }
        }
    }

    #[test]
    fn bad_values_are_named() {
        assert!(matches!(parse(&["--health.domain", "Not A Domain"]).settings(), Err(HealthConfigError::Domain(_))));
        let mut wide = parse(&[]);
        wide.breaker_max_fraction = 1.5;
        assert!(matches!(wide.settings(), Err(HealthConfigError::Fraction(_))), "checked without clap too");
        wide.breaker_max_fraction = 0.1;
        wide.check_interval = Duration::from_millis(10);
        let err = wide.settings().unwrap_err();
        assert_eq!(err.to_string(), "--health.check-interval (CHECK_INTERVAL) 10ms: must be at least 1s");
        assert!(matches!(parse(&["--health.xid-classes", "79=x"]).settings(), Err(HealthConfigError::Xid(_))));
        assert!(matches!(
            parse(&["--health.breaker.node-selector", "a!=b"]).settings(),
            Err(HealthConfigError::Selector(_))
        ));
    }
}
