//! Command-line and environment configuration. Every flag can also be set through an
//! environment variable named `GPU_METRICS_ADAPTER_<FLAG>` (upper case, `-` and `.` as
//! `_`); Kubernetes-style names are kept for the flags aggregated API servers share
//! (`--secure-port`, `--tls-cert-file`, `--client-ca-file`, `--requestheader-*`).
//!
//! Every duration and number flag has a valid range, stated in its `--help` text and in
//! the README's flag table with the reason, and enforced while the command line is parsed
//! ([`Bounded`]): a value outside it stops the adapter with exit code 2 before anything
//! starts, with a message naming the flag, its environment variable and the range. Limits
//! that depend on another flag (`--max-age` at least `--scrape-interval`,
//! `--tls-cert-validity` at most a third of `--tls-ca-validity`) are cross-checks with
//! their own messages, in `app.rs` and `serving_cert`.
//!
//! Durations are read by the workspace's one parser, [`flag_ranges::parse_duration`]
//! (`500ms`, `15s`, `1m30s`, `1.5h`, `43800h`; its doc states the whole syntax), as is
//! the `window` of a Prometheus rule.

pub mod compat;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand};
use flag_ranges::parse_duration;
pub use flag_ranges::{Bounded, show_duration};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const HOUR: u64 = 3600;
const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;
const GIB: usize = 1024 * 1024 * 1024;

/// Log output format, as every binary of the project writes it.
pub use logging::LogFormat;

/// gpu-metrics-adapter: the Kubernetes custom metrics API (custom.metrics.k8s.io) for GPU
/// metrics, scraping the GPU exporters directly and optionally querying Prometheus.
#[derive(Debug, Clone, Parser)]
#[command(name = "gpu-metrics-adapter", version, about, args_override_self = true)]
pub struct Cli {
    /// What to run (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Serving options.
    #[command(flatten)]
    pub args: Args,
}

impl Cli {
    /// Parses a command line (program name first) after [`compat::normalize`]; a flag of
    /// prometheus-adapter's that is not implemented is an error saying so.
    pub fn try_parse_compat<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args = compat::normalize(args.into_iter().map(Into::into).collect())
            .map_err(|r| clap::Error::raw(clap::error::ErrorKind::UnknownArgument, format!("{r}\n")))?;
        Cli::try_parse_from(args)
    }
}

/// Subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Write a CA, a serving pair, a system:masters client pair and a kubeconfig for local use.
    DevCerts(DevCertsArgs),
    /// Ask custom.metrics.k8s.io through the Kubernetes API server, as the HPA does, and
    /// exit 0 only if it answers (the Helm chart's `helm test` runs this).
    CheckApi(CheckApiArgs),
}

/// `check-api` options. The API server is reached as the server reaches it (in-cluster,
/// or `--kubeconfig` / `$KUBECONFIG`).
#[derive(Debug, Clone, ClapArgs)]
pub struct CheckApiArgs {
    /// Namespace whose pods' metric is asked for.
    #[arg(long, env = "GPU_METRICS_ADAPTER_CHECK_NAMESPACE")]
    pub namespace: String,
    /// The per-pod metric asked for.
    #[arg(long, env = "GPU_METRICS_ADAPTER_CHECK_METRIC", default_value = "gpu_utilization")]
    pub metric: String,
    /// The API version asked: v1beta1 or v1beta2.
    #[arg(long, env = "GPU_METRICS_ADAPTER_CHECK_API_VERSION", default_value = "v1beta2",
          value_parser = ["v1beta1", "v1beta2"])]
    pub api_version: String,
    /// How long to wait for each answer, 1s to 5m.
    #[arg(long, env = "GPU_METRICS_ADAPTER_CHECK_TIMEOUT", value_parser = Bounded::duration(parse_duration, secs(1), secs(300)), default_value = "30s")]
    pub timeout: Duration,
}

/// `dev-certs` options.
#[derive(Debug, Clone, ClapArgs)]
pub struct DevCertsArgs {
    /// Directory to write into (created if missing).
    #[arg(long, env = "GPU_METRICS_ADAPTER_DEV_CERTS_OUT", default_value = "adapter-dev-certs")]
    pub out: PathBuf,
    /// Server URL written into the kubeconfig.
    #[arg(long, env = "GPU_METRICS_ADAPTER_DEV_CERTS_SERVER", default_value = "https://127.0.0.1:6443")]
    pub server: String,
    /// Host names and IPs for the serving certificate.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_DEV_CERTS_HOSTS",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1"
    )]
    pub hosts: Vec<String>,
}

/// Serving options.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, env = "GPU_METRICS_ADAPTER_BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// HTTPS port, 0 to 65535 (0 picks a free port).
    #[arg(long, env = "GPU_METRICS_ADAPTER_SECURE_PORT", default_value_t = 6443, value_parser = Bounded::number(0u16, 65535))]
    pub secure_port: u16,
    /// Serving certificate (PEM chain). Without it a self-signed pair is generated at start.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving private key (PEM).
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// How often the certificate files are checked for changes, 100ms to 1h. A check is
    /// a stat of two files; an hour is well inside any certificate's renewal window.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_RELOAD_INTERVAL", value_parser = Bounded::duration(parse_duration, ms(100), secs(HOUR)), default_value = "10s")]
    pub tls_reload_interval: Duration,
    /// Names and IPs of the certificate the adapter makes itself (with --tls-secret-name,
    /// or the throwaway one made when neither that nor --tls-cert-file is given).
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_SELF_SIGNED_HOSTS",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1"
    )]
    pub self_signed_hosts: Vec<String>,
    /// Secret holding the adapter's own CA and serving certificate: created if missing,
    /// shared by every replica, rotated before expiry (see docs/deploy.md).
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_SECRET_NAME", conflicts_with_all = ["tls_cert_file", "standalone"])]
    pub tls_secret_name: Option<String>,
    /// Namespace of --tls-secret-name (in a pod: its own namespace).
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_SECRET_NAMESPACE", default_value = "gpu-telemetry")]
    pub tls_secret_namespace: String,
    /// APIServices whose caBundle the adapter keeps equal to its CA bundle (with --tls-secret-name).
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_TLS_CA_BUNDLE_APISERVICES",
        value_delimiter = ',',
        requires = "tls_secret_name"
    )]
    pub tls_ca_bundle_apiservices: Vec<String>,
    /// Lifetime of a CA the adapter makes (rotated when a third is left), 9s to 87600h
    /// (10 years, kubeadm's CA lifetime), and at least three times --tls-cert-validity.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_CA_VALIDITY", value_parser = Bounded::duration(parse_duration, secs(9), secs(87600 * HOUR)), default_value = "43800h")]
    pub tls_ca_validity: Duration,
    /// Lifetime of a serving certificate the adapter makes (renewed when a third is left),
    /// 3s to 29200h (a third of the longest CA), and at most a third of --tls-ca-validity.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_CERT_VALIDITY", value_parser = Bounded::duration(parse_duration, secs(3), secs(29200 * HOUR)), default_value = "8760h")]
    pub tls_cert_validity: Duration,
    /// How often the Secret and the APIServices are checked, 100ms to 1h; a next CA signs
    /// only after it has been in every APIService for two of these.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_SECRET_CHECK_INTERVAL", value_parser = Bounded::duration(parse_duration, ms(100), secs(HOUR)), default_value = "1m")]
    pub tls_secret_check_interval: Duration,

    /// Run without any Kubernetes API: authentication from files only, no TokenReview, no
    /// SubjectAccessReview (only system:masters is allowed), no labelSelector, exporters
    /// from --exporter-url. For development and demos.
    #[arg(long, env = "GPU_METRICS_ADAPTER_STANDALONE")]
    pub standalone: bool,
    /// kubeconfig to reach the API server (default: in-cluster, then $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Deadline for each request to the Kubernetes API, 1s to 5m. The aggregator gives up
    /// on a metrics request after a minute; a TokenReview or SubjectAccessReview slower
    /// than that is not answering.
    #[arg(long, env = "GPU_METRICS_ADAPTER_KUBE_API_TIMEOUT", value_parser = Bounded::duration(parse_duration, secs(1), secs(300)), default_value = "10s")]
    pub kube_api_timeout: Duration,

    /// CA bundle for client certificates (user = CN, groups = O). Overrides the ConfigMap.
    #[arg(long, env = "GPU_METRICS_ADAPTER_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// CA bundle for the front proxy's client certificate. Overrides the ConfigMap.
    #[arg(long, env = "GPU_METRICS_ADAPTER_REQUESTHEADER_CLIENT_CA_FILE")]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Common names allowed for the front-proxy certificate (empty: any).
    #[arg(long, env = "GPU_METRICS_ADAPTER_REQUESTHEADER_ALLOWED_NAMES", value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
    /// Headers carrying the user name behind the front proxy.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_REQUESTHEADER_USERNAME_HEADERS",
        value_delimiter = ',',
        default_value = "X-Remote-User"
    )]
    pub requestheader_username_headers: Vec<String>,
    /// Headers carrying the user's UID behind the front proxy.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_REQUESTHEADER_UID_HEADERS",
        value_delimiter = ',',
        default_value = "X-Remote-Uid"
    )]
    pub requestheader_uid_headers: Vec<String>,
    /// Headers carrying groups behind the front proxy.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_REQUESTHEADER_GROUP_HEADERS",
        value_delimiter = ',',
        default_value = "X-Remote-Group"
    )]
    pub requestheader_group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes behind the front proxy.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_REQUESTHEADER_EXTRA_HEADERS_PREFIX",
        value_delimiter = ',',
        default_value = "X-Remote-Extra-"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// Do not read kube-system/extension-apiserver-authentication.
    #[arg(long, env = "GPU_METRICS_ADAPTER_AUTHENTICATION_SKIP_LOOKUP")]
    pub authentication_skip_lookup: bool,
    /// How often authentication settings (ConfigMap and CA files) are re-read, 100ms to
    /// 1h. A rotated front-proxy or client CA is trusted at most this late.
    #[arg(long, env = "GPU_METRICS_ADAPTER_AUTHENTICATION_CONFIG_REFRESH", value_parser = Bounded::duration(parse_duration, ms(100), secs(HOUR)), default_value = "60s")]
    pub authentication_config_refresh: Duration,
    /// How long TokenReview answers are cached, 0s to 1h (0s: not cached). A revoked token
    /// keeps working this long. Also read as --authentication-token-webhook-cache-ttl.
    #[arg(long, alias = "authentication-token-webhook-cache-ttl", env = "GPU_METRICS_ADAPTER_AUTHENTICATION_TOKEN_CACHE_TTL", value_parser = Bounded::duration(parse_duration, secs(0), secs(HOUR)), default_value = "10s")]
    pub authentication_token_cache_ttl: Duration,
    /// How long SubjectAccessReview allows are cached, 0s to 1h (0s: not cached). A
    /// withdrawn permission keeps working this long. Also read as
    /// --authorization-webhook-cache-authorized-ttl.
    #[arg(long, alias = "authorization-webhook-cache-authorized-ttl", env = "GPU_METRICS_ADAPTER_AUTHORIZATION_CACHE_ALLOW_TTL", value_parser = Bounded::duration(parse_duration, secs(0), secs(HOUR)), default_value = "10s")]
    pub authorization_cache_allow_ttl: Duration,
    /// How long SubjectAccessReview denials are cached, 0s to 1h (0s: not cached). A
    /// granted permission takes this long to work. Also read as
    /// --authorization-webhook-cache-unauthorized-ttl.
    #[arg(long, alias = "authorization-webhook-cache-unauthorized-ttl", env = "GPU_METRICS_ADAPTER_AUTHORIZATION_CACHE_DENY_TTL", value_parser = Bounded::duration(parse_duration, secs(0), secs(HOUR)), default_value = "10s")]
    pub authorization_cache_deny_ttl: Duration,

    /// Serve GPU metrics scraped directly from the exporters.
    #[arg(long, env = "GPU_METRICS_ADAPTER_DIRECT_SOURCE", action = clap::ArgAction::Set, default_value_t = true)]
    pub direct_source: bool,
    /// Exporter metrics URL, repeatable; replaces EndpointSlice discovery (development).
    #[arg(long = "exporter-url", env = "GPU_METRICS_ADAPTER_EXPORTER_URL", value_delimiter = ',')]
    pub exporter_urls: Vec<String>,
    /// Namespace of the exporter Service.
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_NAMESPACE", default_value = "gpu-telemetry")]
    pub exporter_namespace: String,
    /// Name of the exporter Service (its EndpointSlices list the exporters).
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_SERVICE", default_value = "gpu-exporter")]
    pub exporter_service: String,
    /// Port name of the exporter's metrics port (empty: the first port).
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_PORT_NAME", default_value = "metrics")]
    pub exporter_port_name: String,
    /// Scheme used for discovered exporters.
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_SCHEME", default_value = "http", value_parser = ["http", "https"])]
    pub exporter_scheme: String,
    /// Metrics path of discovered exporters.
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_PATH", default_value = "/metrics")]
    pub exporter_path: String,
    /// CA bundle to verify exporters served over HTTPS.
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_CA_FILE")]
    pub exporter_ca_file: Option<PathBuf>,
    /// File holding a bearer token sent to exporters.
    #[arg(long, env = "GPU_METRICS_ADAPTER_EXPORTER_BEARER_TOKEN_FILE")]
    pub exporter_bearer_token_file: Option<PathBuf>,
    /// Time between scrapes of all exporters, 100ms to 5m. The exporters collect every 5s
    /// and the HPA syncs every 15s; above 5m the HPA scales on stale load.
    #[arg(long, env = "GPU_METRICS_ADAPTER_SCRAPE_INTERVAL", value_parser = Bounded::duration(parse_duration, ms(100), secs(300)), default_value = "15s")]
    pub scrape_interval: Duration,
    /// Deadline for one exporter's answer, 100ms to 5m, and never more than
    /// --scrape-interval (a longer one is cut to the interval, so one slow exporter
    /// cannot make a scrape cycle overrun the next). An exporter renders its last snapshot
    /// and answers in milliseconds; one that takes minutes is down.
    #[arg(long, env = "GPU_METRICS_ADAPTER_SCRAPE_TIMEOUT", value_parser = Bounded::duration(parse_duration, ms(100), secs(300)), default_value = "5s")]
    pub scrape_timeout: Duration,
    /// Largest exporter payload accepted, bytes, 4096 to 1073741824 (4 KiB to 1 GiB). An
    /// 8-GPU node's page is tens of KiB; the cap bounds memory per scrape.
    #[arg(long, env = "GPU_METRICS_ADAPTER_SCRAPE_MAX_BYTES", default_value_t = 16 << 20, value_parser = Bounded::number(4 * KIB, GIB))]
    pub scrape_max_bytes: usize,
    /// Exporters scraped at the same time, 1 to 5000 (0 would scrape nothing; Kubernetes
    /// supports at most 5000 nodes, one exporter each).
    #[arg(long, env = "GPU_METRICS_ADAPTER_SCRAPE_CONCURRENCY", default_value_t = 64, value_parser = Bounded::number(1usize, 5000))]
    pub scrape_concurrency: usize,
    /// Values older than this are not served (missing, never zero), 1s to 15m, and at least
    /// --scrape-interval. The HPA scales on what it is served; older than 15 minutes is
    /// not the current load.
    #[arg(long, env = "GPU_METRICS_ADAPTER_MAX_AGE", value_parser = Bounded::duration(parse_duration, secs(1), secs(900)), default_value = "45s")]
    pub max_age: Duration,

    /// Prometheus-compatible query API base URL; enables the Prometheus source.
    #[arg(long, env = "GPU_METRICS_ADAPTER_PROMETHEUS_URL", requires = "prometheus_rules_file")]
    pub prometheus_url: Option<String>,
    /// Rules mapping custom and external metrics to PromQL: this project's rules format or
    /// prometheus-adapter's configuration file, told apart by their fields. Also read as
    /// --config, prometheus-adapter's name for it.
    #[arg(long, alias = "config", env = "GPU_METRICS_ADAPTER_PROMETHEUS_RULES_FILE", requires = "prometheus_url")]
    pub prometheus_rules_file: Option<PathBuf>,
    /// How often prometheus-adapter rules re-discover their series (/api/v1/series), 1s
    /// to 1h. New metrics appear in API discovery this late; each relist asks Prometheus
    /// once per distinct seriesQuery.
    #[arg(long, env = "GPU_METRICS_ADAPTER_METRICS_RELIST_INTERVAL", value_parser = Bounded::duration(parse_duration, secs(1), secs(HOUR)), default_value = "1m")]
    pub metrics_relist_interval: Duration,
    /// How far back discovery looks for series, 1s to 24h, and at least
    /// --metrics-relist-interval (default: that interval). A series last seen longer ago
    /// is not discovered.
    #[arg(long, env = "GPU_METRICS_ADAPTER_METRICS_MAX_AGE", value_parser = Bounded::duration(parse_duration, secs(1), secs(24 * HOUR)))]
    pub metrics_max_age: Option<Duration>,
    /// Query a label selection of many pods (64 or more, at least half of their namespace)
    /// namespace-wide and keep the selected pods' values, instead of sending a regex of
    /// every name (see NOTES.md, "Prometheus path"). Rules whose query compares the
    /// selected objects with each other should turn this off.
    #[arg(long, env = "GPU_METRICS_ADAPTER_PROMETHEUS_NAMESPACE_WIDE_QUERIES", action = clap::ArgAction::Set, default_value_t = true)]
    pub prometheus_namespace_wide_queries: bool,
    /// Deadline for one Prometheus query, 100ms to 5m (Prometheus' own default query
    /// timeout is 2m).
    #[arg(long, env = "GPU_METRICS_ADAPTER_PROMETHEUS_TIMEOUT", value_parser = Bounded::duration(parse_duration, ms(100), secs(300)), default_value = "5s")]
    pub prometheus_timeout: Duration,
    /// Largest Prometheus answer accepted, bytes, 4096 to 1073741824 (4 KiB to 1 GiB).
    #[arg(long, env = "GPU_METRICS_ADAPTER_PROMETHEUS_MAX_BYTES", default_value_t = 32 << 20, value_parser = Bounded::number(4 * KIB, GIB))]
    pub prometheus_max_bytes: usize,
    /// CA bundle to verify Prometheus served over HTTPS.
    #[arg(long, env = "GPU_METRICS_ADAPTER_PROMETHEUS_CA_FILE")]
    pub prometheus_ca_file: Option<PathBuf>,
    /// Client certificate (PEM chain) presented to Prometheus.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_PROMETHEUS_CLIENT_TLS_CERT_FILE",
        requires = "prometheus_client_tls_key_file"
    )]
    pub prometheus_client_tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of --prometheus-client-tls-cert-file.
    #[arg(
        long,
        env = "GPU_METRICS_ADAPTER_PROMETHEUS_CLIENT_TLS_KEY_FILE",
        requires = "prometheus_client_tls_cert_file"
    )]
    pub prometheus_client_tls_key_file: Option<PathBuf>,
    /// File holding a bearer token sent to Prometheus. Also read as --prometheus-token-file.
    #[arg(long, alias = "prometheus-token-file", env = "GPU_METRICS_ADAPTER_PROMETHEUS_BEARER_TOKEN_FILE")]
    pub prometheus_bearer_token_file: Option<PathBuf>,
    /// A header sent with every Prometheus request, Name=value; repeatable (for example
    /// X-Scope-OrgID=team-a for Mimir).
    #[arg(long = "prometheus-header", env = "GPU_METRICS_ADAPTER_PROMETHEUS_HEADER")]
    pub prometheus_headers: Vec<String>,
    /// HTTP method of Prometheus requests: POST (a form body; long label selections fit)
    /// or GET.
    #[arg(long, env = "GPU_METRICS_ADAPTER_PROMETHEUS_VERB", default_value = "POST", value_parser = ["GET", "POST"])]
    pub prometheus_verb: String,

    /// Longest request target accepted (414 beyond), bytes, 1024 to 1048576 (1 KiB to 1
    /// MiB). Below 1 KiB a request with a label selector is refused; above, a client holds
    /// that much memory per request.
    #[arg(long, env = "GPU_METRICS_ADAPTER_MAX_REQUEST_URI_BYTES", default_value_t = 16 << 10, value_parser = Bounded::number(KIB, MIB))]
    pub max_request_uri_bytes: usize,
    /// Largest total request header size accepted (431 beyond), bytes, 4096 to 1048576 (4
    /// KiB to 1 MiB). The aggregator's user, group and extra headers must fit.
    #[arg(long, env = "GPU_METRICS_ADAPTER_MAX_REQUEST_HEADER_BYTES", default_value_t = 64 << 10, value_parser = Bounded::number(4 * KIB, MIB))]
    pub max_request_header_bytes: usize,
    /// How long a client may take to send a complete HTTP/1 request head after its TLS
    /// handshake (and between the requests of a keep-alive connection), 1s to 1m; a
    /// client that has not finished by then is closed. The aggregator and the HPA send
    /// their heads in one write; above a minute a silent client holds its place through
    /// several HPA syncs.
    #[arg(long, env = "GPU_METRICS_ADAPTER_HEADER_READ_TIMEOUT", value_parser = Bounded::duration(parse_duration, secs(1), secs(60)), default_value = "5s")]
    pub header_read_timeout: Duration,
    /// How long a client may take from accept to the end of its TLS handshake, 1s to 1m.
    /// A handshake takes milliseconds; above a minute a silent client holds its place
    /// through several HPA syncs.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_HANDSHAKE_TIMEOUT", value_parser = Bounded::duration(parse_duration, secs(1), secs(60)), default_value = "5s")]
    pub tls_handshake_timeout: Duration,
    /// Connections open at once, 16 to 65536. At the limit the connection idle the
    /// longest is closed to make room, so idle sockets never lock the aggregator or the
    /// kubelet's probes out; only when every connection is serving a request do new
    /// clients wait. Each connection costs a file descriptor.
    #[arg(long, env = "GPU_METRICS_ADAPTER_MAX_CONNECTIONS", default_value_t = https_edge::DEFAULT_MAX_CONNECTIONS, value_parser = Bounded::number(16usize, 65536))]
    pub max_connections: usize,
    /// Connections open at once from one IP address, 1 to 65536, and at most
    /// --max-connections (default: a quarter of it, 256). At the limit that address's
    /// connection idle the longest is closed to make room (or the new one, when all of
    /// them are serving), so one address cannot take every place.
    #[arg(long, env = "GPU_METRICS_ADAPTER_MAX_CONNECTIONS_PER_IP", value_parser = Bounded::number(1usize, 65536))]
    pub max_connections_per_ip: Option<usize>,
    /// How long open connections may finish at shutdown, 0s to 5m (0s: close at once).
    /// Past the pod's termination grace period the kubelet kills the adapter anyway.
    #[arg(long, env = "GPU_METRICS_ADAPTER_SHUTDOWN_DRAIN", value_parser = Bounded::duration(parse_duration, secs(0), secs(300)), default_value = "20s")]
    pub shutdown_drain: Duration,

    /// Directory for the serving certificate when neither --tls-cert-file nor
    /// --tls-secret-name is given: apiserver.crt and apiserver.key there are served, and
    /// made (self-signed) when missing, as Kubernetes API servers do.
    #[arg(long, env = "GPU_METRICS_ADAPTER_CERT_DIR")]
    pub cert_dir: Option<PathBuf>,
    /// Oldest TLS version served: VersionTLS12 (TLS 1.2 and 1.3) or VersionTLS13; the
    /// Go names VersionTLS10 and VersionTLS11 are read as VersionTLS12 (rustls has no
    /// older versions).
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_MIN_VERSION", value_parser = ["VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"])]
    pub tls_min_version: Option<String>,
    /// TLS 1.2 cipher suites to offer, by their Go names; TLS 1.3 suites are always
    /// offered, as in Go. Names of suites rustls does not implement (CBC, RSA key exchange)
    /// are left out with a warning; a list of only those is refused.
    #[arg(long, env = "GPU_METRICS_ADAPTER_TLS_CIPHER_SUITES", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Serve HTTP/1.1 only.
    #[arg(long, env = "GPU_METRICS_ADAPTER_DISABLE_HTTP2")]
    pub disable_http2: bool,
    /// prometheus-adapter's kubeconfig flags, read as --kubeconfig: given together they
    /// must name the same file (one client serves listing, authentication and
    /// authorization here).
    #[arg(long, env = "GPU_METRICS_ADAPTER_LISTER_KUBECONFIG")]
    pub lister_kubeconfig: Option<PathBuf>,
    /// See --lister-kubeconfig.
    #[arg(long, env = "GPU_METRICS_ADAPTER_AUTHENTICATION_KUBECONFIG")]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// See --lister-kubeconfig.
    #[arg(long, env = "GPU_METRICS_ADAPTER_AUTHORIZATION_KUBECONFIG")]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// klog's verbosity, 0 to 10, as prometheus-adapter takes it: up to 3 logs at info, 4
    /// and 5 at debug, 6 and more at trace. Overrides --log.level when given.
    #[arg(long = "v", short = 'v', env = "GPU_METRICS_ADAPTER_V", value_parser = Bounded::number(0u8, 10))]
    pub verbosity: Option<u8>,
    /// klog's --logtostderr: logs always go to standard error here, so only true is
    /// accepted.
    #[arg(long, env = "GPU_METRICS_ADAPTER_LOGTOSTDERR", action = clap::ArgAction::Set, default_value_t = true)]
    pub logtostderr: bool,

    /// Log format. Also read as --logging-format (Kubernetes components' name).
    #[arg(
        long = "log.format",
        alias = "logging-format",
        env = "GPU_METRICS_ADAPTER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log filter: a level (error, warn, info, debug, trace, off) and optionally
    /// comma-separated target=level pairs (e.g. `info,gpu_metrics_adapter::source=debug`),
    /// the exporter's syntax. `--v` (klog verbosity) overrides it.
    #[arg(long = "log.level", env = "GPU_METRICS_ADAPTER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl Args {
    /// Parses serving options from an argument list (program name first), for tests.
    pub fn parse_from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Cli::try_parse_compat(args).map(|c| c.args)
    }

    /// The log filter in force: `--v` mapped as klog levels map, else `--log.level`.
    pub fn effective_log_level(&self) -> String {
        match self.verbosity {
            None => self.log_level.clone(),
            Some(0..=3) => "info".into(),
            Some(4 | 5) => "debug".into(),
            Some(_) => "trace".into(),
        }
    }

    /// The kubeconfig in force: --kubeconfig, else prometheus-adapter's kubeconfig flags.
    pub fn effective_kubeconfig(&self) -> Option<&std::path::Path> {
        self.kubeconfig
            .as_deref()
            .or(self.lister_kubeconfig.as_deref())
            .or(self.authentication_kubeconfig.as_deref())
            .or(self.authorization_kubeconfig.as_deref())
    }

    /// The scrape deadline in force: --scrape-timeout, at most --scrape-interval.
    pub fn effective_scrape_timeout(&self) -> Duration {
        self.scrape_timeout.min(self.scrape_interval)
    }

    /// `--max-connections-per-ip`, by default a quarter of `--max-connections` (the
    /// edge's own proportion: 256 of 1024).
    pub fn effective_max_connections_per_ip(&self) -> usize {
        self.max_connections_per_ip.unwrap_or(self.max_connections / 4).clamp(1, self.max_connections)
    }

    /// `--metrics-max-age`, defaulting to `--metrics-relist-interval`.
    pub fn effective_metrics_max_age(&self) -> Duration {
        self.metrics_max_age.unwrap_or(self.metrics_relist_interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn duration_flags_read_the_shared_syntax() {
        let a =
            Args::parse_from_args(["x", "--scrape-interval=1m30s", "--scrape-timeout=250ms", "--max-age=2m"]).unwrap();
        assert_eq!(a.scrape_interval, Duration::from_secs(90));
        assert_eq!(a.scrape_timeout, Duration::from_millis(250));
        assert_eq!(a.effective_scrape_timeout(), Duration::from_millis(250));
        let short = Args::parse_from_args(["x", "--scrape-interval=1s"]).unwrap();
        assert_eq!(short.scrape_timeout, Duration::from_secs(5), "the default is kept as given");
        assert_eq!(short.effective_scrape_timeout(), Duration::from_secs(1), "and cut to the interval");
        assert_eq!(a.max_age, Duration::from_secs(120));
        assert_eq!(Args::parse_from_args(["x", "--shutdown-drain=0"]).unwrap().shutdown_drain, Duration::ZERO);
        // Decimals are read on the last unit, as Go and Prometheus read them.
        assert_eq!(Args::parse_from_args(["x", "--scrape-interval=1.5s"]).unwrap().scrape_interval, ms(1500));
        for bad in ["", "15", "s", "1x", "-1s", "1d", "99999999999h"] {
            let err = Args::parse_from_args(["x", &format!("--scrape-interval={bad}")]).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "the refusal names {bad:?}: {err}");
        }
    }

    #[test]
    fn connection_flags_are_read_and_bad_values_refused_naming_the_flag() {
        let a = Args::parse_from_args(["x"]).unwrap();
        assert_eq!(a.header_read_timeout, https_edge::DEFAULT_HEADER_READ_TIMEOUT);
        assert_eq!(a.tls_handshake_timeout, https_edge::DEFAULT_HANDSHAKE_TIMEOUT);
        assert_eq!(a.max_connections, https_edge::DEFAULT_MAX_CONNECTIONS);
        assert_eq!(a.effective_max_connections_per_ip(), https_edge::DEFAULT_MAX_CONNECTIONS_PER_PEER);
        let a = Args::parse_from_args([
            "x",
            "--header-read-timeout=2s",
            "--tls-handshake-timeout=1m",
            "--max-connections=64",
            "--max-connections-per-ip=8",
        ])
        .unwrap();
        assert_eq!((a.header_read_timeout, a.tls_handshake_timeout), (secs(2), secs(60)));
        assert_eq!((a.max_connections, a.effective_max_connections_per_ip()), (64, 8));
        let a = Args::parse_from_args(["x", "--max-connections=64"]).unwrap();
        assert_eq!(a.effective_max_connections_per_ip(), 16, "by default a quarter of the total");
        for (flag, value, env, range) in [
            ("--header-read-timeout", "0s", "GPU_METRICS_ADAPTER_HEADER_READ_TIMEOUT", "1s to 1m"),
            ("--header-read-timeout", "10m", "GPU_METRICS_ADAPTER_HEADER_READ_TIMEOUT", "1s to 1m"),
            ("--tls-handshake-timeout", "100ms", "GPU_METRICS_ADAPTER_TLS_HANDSHAKE_TIMEOUT", "1s to 1m"),
            ("--max-connections", "0", "GPU_METRICS_ADAPTER_MAX_CONNECTIONS", "16 to 65536"),
            ("--max-connections", "100000", "GPU_METRICS_ADAPTER_MAX_CONNECTIONS", "16 to 65536"),
            ("--max-connections-per-ip", "0", "GPU_METRICS_ADAPTER_MAX_CONNECTIONS_PER_IP", "1 to 65536"),
        ] {
            let err = Args::parse_from_args(["x", &format!("{flag}={value}")]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{flag}={value}");
            let text = err.to_string();
            for part in [flag, env, range, &format!("'{value}'")] {
                assert!(text.contains(part), "{flag}={value}: {part} in {text}");
            }
        }
    }

    #[test]
    fn durations_are_shown_as_they_are_written() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (ms(100), "100ms"),
            (ms(1500), "1s500ms"),
            (secs(90), "1m30s"),
            (secs(3600), "1h"),
            (secs(43800 * HOUR), "43800h"),
        ] {
            assert_eq!(show_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d), "{text} reads back");
        }
    }

    #[test]
    fn a_refusal_names_the_flag_the_variable_and_the_range() {
        let err = Args::parse_from_args(["x", "--scrape-interval=0s"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        let text = err.to_string();
        for part in ["'--scrape-interval", "GPU_METRICS_ADAPTER_SCRAPE_INTERVAL", "100ms to 5m", "'0s'"] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let text = Args::parse_from_args(["x", "--scrape-concurrency=0"]).unwrap_err().to_string();
        assert!(text.contains("0 is outside the valid range 1 to 5000"), "{text}");
    }

    #[test]
    fn prometheus_adapter_command_lines_parse() {
        // The helm chart's container arguments.
        let helm = Args::parse_from_args([
            "gpu-metrics-adapter",
            "/adapter",
            "--secure-port=6443",
            "--cert-dir=/tmp/cert",
            "--prometheus-url=http://prometheus.default.svc:9090",
            "--metrics-relist-interval=1m",
            "--v=4",
            "--config=/etc/adapter/config.yaml",
        ])
        .unwrap();
        assert_eq!(helm.prometheus_rules_file.as_deref(), Some(std::path::Path::new("/etc/adapter/config.yaml")));
        assert_eq!(helm.metrics_relist_interval, secs(60));
        assert_eq!(helm.effective_metrics_max_age(), secs(60));
        assert_eq!(helm.effective_log_level(), "debug");
        assert_eq!(helm.cert_dir.as_deref(), Some(std::path::Path::new("/tmp/cert")));
        // kube-prometheus' container arguments.
        let kp = Args::parse_from_args([
            "x",
            "--cert-dir=/var/run/serving-cert",
            "--config=/etc/adapter/config.yaml",
            "--logtostderr=true",
            "--metrics-relist-interval=1m",
            "--prometheus-url=http://prometheus-k8s.monitoring.svc:9090/",
            "--secure-port=6443",
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ])
        .unwrap();
        assert_eq!(kp.tls_cipher_suites.len(), 2);
        assert!(kp.logtostderr);
        let more = Args::parse_from_args([
            "x",
            "--prometheus-url=https://thanos:9091",
            "--config=c.yaml",
            "--prometheus-token-file=/var/run/secrets/token",
            "--prometheus-header=X-Scope-OrgID=team-a",
            "--prometheus-verb=GET",
            "--metrics-max-age=5m",
            "--lister-kubeconfig=/k",
            "--authentication-token-webhook-cache-ttl=30s",
            "--authorization-webhook-cache-unauthorized-ttl=5s",
            "--logging-format=json",
            "--disable-http2",
            "--tls-min-version=VersionTLS13",
        ])
        .unwrap();
        assert_eq!(more.prometheus_bearer_token_file.as_deref(), Some(std::path::Path::new("/var/run/secrets/token")));
        assert_eq!((more.prometheus_verb.as_str(), more.prometheus_headers.len()), ("GET", 1));
        assert_eq!(more.effective_metrics_max_age(), secs(300));
        assert_eq!(more.effective_kubeconfig(), Some(std::path::Path::new("/k")));
        assert_eq!(more.authentication_token_cache_ttl, secs(30));
        assert_eq!(more.authorization_cache_deny_ttl, secs(5));
        assert_eq!(more.log_format, LogFormat::Json);
        let e = Args::parse_from_args(["x", "--prometheus-auth-incluster"]).unwrap_err().to_string();
        assert!(e.contains("does not implement") && e.contains("--prometheus-token-file"), "{e}");
        assert!(Args::parse_from_args(["x", "--prometheus-verb=PUT"]).is_err());
        assert!(Args::parse_from_args(["x", "--tls-min-version=VersionTLS14"]).is_err());
    }

    #[test]
    fn cli_is_consistent_and_defaults_are_sane() {
        Cli::command().debug_assert();
        let a = Args::parse_from_args(["gpu-metrics-adapter"]).unwrap();
        assert_eq!(a.secure_port, 6443);
        assert_eq!(a.scrape_interval, Duration::from_secs(15));
        assert!(a.direct_source);
        assert_eq!(a.requestheader_username_headers, vec!["X-Remote-User".to_owned()]);
        let a = Args::parse_from_args([
            "x",
            "--exporter-url=http://a:9400/metrics",
            "--exporter-url",
            "http://b:9400/metrics",
            "--direct-source=true",
            "--log.format=json",
        ])
        .unwrap();
        assert_eq!(a.exporter_urls.len(), 2);
        assert_eq!(a.log_format, LogFormat::Json);
        // A flag given twice takes the last value, as with Kubernetes components.
        let a = Args::parse_from_args(["x", "--secure-port=1", "--secure-port=2"]).unwrap();
        assert_eq!(a.secure_port, 2);
        assert!(Args::parse_from_args(["x", "--prometheus-url=http://p:9090"]).is_err());
        assert!(Args::parse_from_args(["x", "--tls-cert-file=a.pem"]).is_err());
        // Self-provisioned and file certificates exclude each other; the bundle needs a Secret.
        assert!(
            Args::parse_from_args(["x", "--tls-secret-name=s", "--tls-cert-file=a", "--tls-private-key-file=b"])
                .is_err()
        );
        assert!(Args::parse_from_args(["x", "--tls-secret-name=s", "--standalone"]).is_err());
        assert!(Args::parse_from_args(["x", "--tls-ca-bundle-apiservices=v1beta1.custom.metrics.k8s.io"]).is_err());
        let a = Args::parse_from_args(["x", "--tls-secret-name=s", "--tls-ca-bundle-apiservices=a,b"]).unwrap();
        assert_eq!(a.tls_ca_bundle_apiservices, ["a", "b"]);
        assert_eq!(a.tls_ca_validity, Duration::from_secs(43800 * 3600));
        assert!(Args::parse_from_args(["x", "--scrape-interval=soon"]).is_err());
    }
}
