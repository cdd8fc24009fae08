//! The command line, as kubectl users expect it: kubectl runs `kubectl-gpu` for
//! `kubectl gpu ...` and passes every argument after `gpu` as it was typed, so the
//! kubectl flags a plugin should honour (`--kubeconfig`, `--context`, `-n`, `-A`, `-l`,
//! `-o`, `--sort-by`, `-w`) are parsed here, anywhere on the line. Flags of our own also
//! read a `KUBECTL_GPU_*` variable; durations use the project's one syntax
//! ([`flag_ranges::parse_duration`]) and every figure has a range.
//!
//! Scope: `nodes` and `gpus` are about nodes (cluster-scoped; `-l` selects nodes, `-n`
//! does not apply). `pods` lists the current namespace (the context's, as `kubectl get
//! pods`), `-n` another, `-A` all; `-l` selects pods. `cost` covers the whole cluster
//! unless `-n` narrows it; `-l` selects pods. `rightsize` is scoped as `pods`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use flag_ranges::{Bounded, parse_duration};

use crate::output::Format;
use crate::views::cost::GroupBy;

/// `kubectl gpu`: GPUs, MIG slices, pods, health and cost of the cluster.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-gpu",
    bin_name = "kubectl gpu",
    version,
    about = "Every GPU, MIG slice, GPU pod, health state and dollar of the cluster, read through the API server",
    after_help = "Examples:\n  kubectl gpu nodes\n  kubectl gpu gpus gpu-node-1 -o wide\n  kubectl gpu pods -A --sort-by=-util\n  kubectl gpu cost --by namespace --price H100=4.2\n  kubectl gpu nodes --watch"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub global: Global,
}

/// What to show.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// One row per GPU node: model × count, MIG layout, utilization, memory, power, hottest GPU, health.
    Nodes,
    /// One row per GPU and MIG instance: readings, throttling, ECC, remapped rows, XIDs, holder.
    Gpus {
        /// Only this node's GPUs.
        node: Option<String>,
    },
    /// One row per GPU pod and device: node, device, share of the GPU, utilization, memory.
    Pods {
        /// Where per-pod figures come from: `auto` reads the custom metrics API for one
        /// namespace (one request per figure, however many nodes) and the exporters for
        /// all namespaces (`-A`); `exporters` always reads the exporters (device, GPU
        /// index and time-slice share); `custom-metrics` always the adapter.
        #[arg(long, value_enum, default_value = "auto", env = "KUBECTL_GPU_SOURCE")]
        source: Source,
    },
    /// Dollars per hour allocated and idle, by namespace, pod or node.
    Cost {
        /// How to group.
        #[arg(long, value_enum, default_value = "namespace")]
        by: GroupBy,
    },
    /// Per workload: peak and p95 GPU memory and p95 compute over a window, the smallest
    /// device that holds them (a MIG profile, a time-slice share, or keep) and the dollars
    /// that frees; --plan adds the MIG layout per node and its mig-parted config.
    Rightsize(Rightsize),
}

/// `rightsize`'s flags.
#[derive(Debug, Clone, Args)]
pub struct Rightsize {
    /// The window of history, 1h to 90d (`d` is 24h, as in PromQL).
    #[arg(
        long, env = "KUBECTL_GPU_WINDOW", default_value = "7d",
        value_parser = Bounded::duration(parse_window, Duration::from_secs(3600), Duration::from_secs(90 * 86_400))
    )]
    pub window: Duration,

    /// Memory above the observed peak a device must hold, in percent, 0 to 1000.
    #[arg(long, env = "KUBECTL_GPU_HEADROOM", default_value = "20", value_parser = Bounded::number(0.0f64, 1000.0))]
    pub headroom: f64,

    /// Also print, per node, the MIG layout that holds the recommendations, and its
    /// mig-parted config (changes nothing in the cluster).
    #[arg(long)]
    pub plan: bool,

    /// The Prometheus-compatible API's Service, NAMESPACE/NAME:PORT, read through the
    /// API server's services proxy (needs get on services/proxy there).
    #[arg(long = "prometheus-service", env = "KUBECTL_GPU_PROMETHEUS_SERVICE", value_name = "NAMESPACE/NAME:PORT")]
    pub prometheus_service: Option<String>,

    /// The Prometheus-compatible API at a URL of its own (http(s)://HOST:PORT[/PATH]).
    #[arg(
        long = "prometheus-url",
        env = "KUBECTL_GPU_PROMETHEUS_URL",
        value_name = "URL",
        conflicts_with = "prometheus_service"
    )]
    pub prometheus_url: Option<String>,
}

/// A window: the project's duration syntax, plus PromQL's `d` (24h) and `w` (7d) for
/// the windows Prometheus users write (`7d`, `2w`). Anything else is
/// [`parse_duration`]'s to refuse.
pub fn parse_window(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    for (unit, hours) in [('d', 24u64), ('w', 168)] {
        if let Some(n) = t.strip_suffix(unit).and_then(|n| n.parse::<u64>().ok()) {
            return parse_duration(&format!("{}h", n.saturating_mul(hours)));
        }
    }
    parse_duration(t)
}

/// Where `pods` reads per-pod figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    Auto,
    Exporters,
    CustomMetrics,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Colour {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    Always,
    Never,
}

/// Flags every command takes.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// The kubeconfig cluster to use.
    #[arg(long, global = true)]
    pub cluster: Option<String>,

    /// The kubeconfig user to use.
    #[arg(long, global = true)]
    pub user: Option<String>,

    /// The namespace (pods, cost).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,

    /// Every namespace (pods, cost).
    #[arg(short = 'A', long = "all-namespaces", global = true, conflicts_with = "namespace")]
    pub all_namespaces: bool,

    /// Label selector: of nodes (nodes, gpus) or of pods (pods, cost), e.g. `-l app=inference`.
    #[arg(short = 'l', long = "selector", global = true)]
    pub selector: Option<String>,

    /// Output format: wide, json, yaml (default: a table).
    #[arg(short = 'o', long, global = true, value_enum)]
    pub output: Option<Format>,

    /// Sort rows by a column (`--sort-by util`, `--sort-by=-cost` for descending).
    #[arg(long = "sort-by", global = true, value_name = "COLUMN", allow_hyphen_values = true)]
    pub sort_by: Option<String>,

    /// Redraw every --interval (in place on a terminal) until interrupted.
    #[arg(short = 'w', long, global = true)]
    pub watch: bool,

    /// How often --watch redraws, 500ms to 1h.
    #[arg(
        long, global = true, env = "KUBECTL_GPU_INTERVAL", default_value = "2s",
        value_parser = Bounded::duration(parse_duration, Duration::from_millis(500), Duration::from_secs(3600))
    )]
    pub interval: Duration,

    /// Deadline of the whole command (of each redraw under --watch), 1s to 10m:
    /// exporters not read by then show as unknown.
    #[arg(
        long, global = true, env = "KUBECTL_GPU_TIMEOUT", default_value = "10s",
        value_parser = Bounded::duration(parse_duration, Duration::from_secs(1), Duration::from_secs(600))
    )]
    pub timeout: Duration,

    /// Deadline of one exporter read through the API server, 100ms to 5m.
    #[arg(
        long = "exporter-timeout", global = true, env = "KUBECTL_GPU_EXPORTER_TIMEOUT", default_value = "3s",
        value_parser = Bounded::duration(parse_duration, Duration::from_millis(100), Duration::from_secs(300))
    )]
    pub exporter_timeout: Duration,

    /// Exporter reads in flight at once, 1 to 1000.
    #[arg(long, global = true, env = "KUBECTL_GPU_CONCURRENCY", default_value = "64", value_parser = Bounded::number(1usize, 1000))]
    pub concurrency: usize,

    /// Namespace of the exporter pods.
    #[arg(
        long = "exporter-namespace",
        global = true,
        env = "KUBECTL_GPU_EXPORTER_NAMESPACE",
        default_value = "gpu-telemetry"
    )]
    pub exporter_namespace: String,

    /// Label selector of the exporter pods.
    #[arg(
        long = "exporter-selector",
        global = true,
        env = "KUBECTL_GPU_EXPORTER_SELECTOR",
        default_value = "app.kubernetes.io/name=gpu-exporter"
    )]
    pub exporter_selector: String,

    /// The exporter container's port: a name or a number.
    #[arg(long = "exporter-port", global = true, env = "KUBECTL_GPU_EXPORTER_PORT", default_value = "metrics")]
    pub exporter_port: String,

    /// Scheme of the exporter's port (https when its web config turns TLS on).
    #[arg(
        long = "exporter-scheme",
        global = true,
        env = "KUBECTL_GPU_EXPORTER_SCHEME",
        value_enum,
        default_value = "http"
    )]
    pub exporter_scheme: Scheme,

    /// The health loop's domain (`--health.domain` of the exporter).
    #[arg(
        long = "health-domain",
        global = true,
        env = "KUBECTL_GPU_HEALTH_DOMAIN",
        default_value = "gpu-telemetry.io"
    )]
    pub health_domain: String,

    /// A price in dollars per hour: NAME=DOLLARS, NAME an entry of the table (H100) or
    /// text that model names contain; repeatable (the variable takes a comma-separated list).
    #[arg(
        long = "price",
        global = true,
        value_name = "NAME=DOLLARS",
        env = "KUBECTL_GPU_PRICES",
        value_delimiter = ','
    )]
    pub prices: Vec<String>,

    /// The ConfigMap (namespace/name) holding a price table under `prices.yaml`;
    /// missing is fine, the defaults apply.
    #[arg(
        long = "prices-configmap",
        global = true,
        env = "KUBECTL_GPU_PRICES_CONFIGMAP",
        default_value = "gpu-telemetry/gpu-prices"
    )]
    pub prices_configmap: String,

    /// An allocated device whose holder uses less than this percent of its share is idle, 0 to 100 (default: the price table's, 10).
    #[arg(long = "idle-below", global = true, env = "KUBECTL_GPU_IDLE_BELOW", value_parser = Bounded::number(0.0f64, 100.0))]
    pub idle_below: Option<f64>,

    /// Colour: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, env = "KUBECTL_GPU_COLOR", value_enum, default_value = "auto")]
    pub color: Colour,
}

/// The exporter port's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scheme {
    Http,
    Https,
}

/// Why the flags were refused after parsing.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CliError {
    #[error("--prices-configmap {0:?}: expected NAMESPACE/NAME")]
    ConfigMap(String),
    #[error("--exporter-timeout {exporter} is longer than --timeout {overall}: no exporter could be read")]
    Timeouts { exporter: String, overall: String },
    #[error(transparent)]
    Price(#[from] crate::prices::PriceError),
    #[error("--source custom-metrics reads one namespace: give -n (or none, for the context's), not -A")]
    MetricsAllNamespaces,
    /// A flag's value refused by the module that reads it (`--prometheus-service`,
    /// `--prometheus-url`, `--headroom`), in its words.
    #[error("{0}")]
    Flag(String),
}

impl Global {
    /// Checks between flags.
    pub fn validate(&self) -> Result<(), CliError> {
        self.prices_configmap()?;
        for price in &self.prices {
            crate::prices::parse_flag(price)?;
        }
        if self.exporter_timeout > self.timeout {
            return Err(CliError::Timeouts {
                exporter: flag_ranges::show_duration(self.exporter_timeout),
                overall: flag_ranges::show_duration(self.timeout),
            });
        }
        Ok(())
    }

    /// `--prices-configmap` as (namespace, name).
    pub fn prices_configmap(&self) -> Result<(&str, &str), CliError> {
        match self.prices_configmap.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Ok((ns, name)),
            _ => Err(CliError::ConfigMap(self.prices_configmap.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-gpu").chain(args.iter().copied()))
    }

    #[test]
    fn kubectl_flags_go_anywhere() {
        let cli =
            parse(&["-n", "ai", "pods", "-o", "wide", "--context", "prod", "-l", "app=x", "--sort-by=-util"]).unwrap();
        assert!(matches!(cli.command, Command::Pods { source: Source::Auto }));
        let g = &cli.global;
        assert_eq!(g.namespace.as_deref(), Some("ai"));
        assert_eq!(g.context.as_deref(), Some("prod"));
        assert_eq!(g.selector.as_deref(), Some("app=x"));
        assert_eq!(g.output, Some(Format::Wide));
        assert_eq!(g.sort_by.as_deref(), Some("-util"));
        assert_eq!(g.timeout, Duration::from_secs(10));
        let cli =
            parse(&["cost", "--by", "node", "--price", "H100=4", "--price", "L40S=1", "-A", "-w", "--interval", "5s"])
                .unwrap();
        assert!(matches!(cli.command, Command::Cost { by: GroupBy::Node }));
        assert_eq!(cli.global.prices, ["H100=4", "L40S=1"]);
        assert!(cli.global.watch && cli.global.all_namespaces);
        assert_eq!(cli.global.interval, Duration::from_secs(5));
        let cli = parse(&["cost", "--price", "H100=4,Tesla V100=2"]).unwrap();
        assert_eq!(cli.global.prices, ["H100=4", "Tesla V100=2"]);
        let cli = parse(&["gpus", "gpu-node-1"]).unwrap();
        assert!(matches!(cli.command, Command::Gpus { node: Some(ref n) } if n == "gpu-node-1"));
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_flags_are_refused_naming_the_flag() {
        let e = parse(&["nodes", "-o", "table"]).unwrap_err().to_string();
        assert!(e.contains("invalid value 'table' for '--output <OUTPUT>'") && e.contains("wide, json, yaml"), "{e}");
        let e = parse(&["nodes", "--timeout", "0s"]).unwrap_err().to_string();
        assert!(
            e.contains("0s is outside the valid range 1s to 10m (flag --timeout, variable KUBECTL_GPU_TIMEOUT)"),
            "{e}"
        );
        let e = parse(&["nodes", "--concurrency", "0"]).unwrap_err().to_string();
        assert!(e.contains("0 is outside the valid range 1 to 1000"), "{e}");
        let e = parse(&["cost", "--by", "team"]).unwrap_err().to_string();
        assert!(e.contains("invalid value 'team' for '--by <BY>'"), "{e}");
        let e = parse(&["pods", "-n", "a", "-A"]).unwrap_err().to_string();
        assert!(e.contains("cannot be used with"), "{e}");
        assert!(parse(&["frobnicate"]).unwrap_err().to_string().contains("unrecognized subcommand 'frobnicate'"));
        let cli = parse(&["nodes", "--prices-configmap", "gpu-prices"]).unwrap();
        assert_eq!(cli.global.validate(), Err(CliError::ConfigMap("gpu-prices".into())));
        let cli = parse(&["nodes", "--exporter-timeout", "20s", "--timeout", "5s"]).unwrap();
        assert_eq!(
            cli.global.validate().unwrap_err().to_string(),
            "--exporter-timeout 20s is longer than --timeout 5s: no exporter could be read"
        );
        let cli = parse(&["cost", "--price", "H100"]).unwrap();
        assert!(cli.global.validate().unwrap_err().to_string().starts_with("--price \"H100\": expected NAME=DOLLARS"));
    }

    #[test]
    fn rightsize_takes_a_window_a_headroom_and_one_prometheus() {
        let cli = parse(&["rightsize", "-A", "--prometheus-service", "monitoring/prometheus:9090", "--plan"]).unwrap();
        let Command::Rightsize(r) = &cli.command else { panic!("{:?}", cli.command) };
        assert_eq!((r.window, r.headroom, r.plan), (Duration::from_secs(7 * 86_400), 20.0, true));
        let cli = parse(&["rightsize", "--window", "36h", "--headroom", "0"]).unwrap();
        let Command::Rightsize(r) = &cli.command else { panic!() };
        assert_eq!((r.window, r.headroom), (Duration::from_secs(36 * 3600), 0.0));
        assert_eq!(parse_window("2w"), Ok(Duration::from_secs(14 * 86_400)));
        let e = parse(&["rightsize", "--window", "30m"]).unwrap_err().to_string();
        assert!(e.contains("30m is outside the valid range 1h to"), "{e}");
        let e = parse(&["rightsize", "--window", "7x"]).unwrap_err().to_string();
        assert!(e.contains("unknown unit \"x\""), "{e}");
        let e = parse(&["rightsize", "--headroom=-5"]).unwrap_err().to_string();
        assert!(e.contains("--headroom"), "{e}");
        let e = parse(&["rightsize", "--prometheus-service", "a/b:1", "--prometheus-url", "http://x"]).unwrap_err();
        assert!(e.to_string().contains("cannot be used with"), "{e}");
    }
}
