//! Wiring: from [`Args`] to a listening server with its background tasks (exporter
//! scraping, label watches and object lists, authentication refresh, certificate reload). [`App::build`]
//! validates everything that can be wrong in the configuration before anything is served;
//! [`App::run`] serves until shutdown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::{self, AppState, ReadyCheck};
use crate::auth::authn::{Authenticator, TokenReviewer};
use crate::auth::authz::Authorizer;
use crate::auth::config::{self as authcfg, AuthnConfig, FileSettings};
use crate::catalog::{self, Catalog};
use crate::config::{Args, show_duration};
use crate::http_client::HttpClient;
use crate::labels::LabelStore;
use crate::objects::ObjectNames;
use crate::server::{self, CertSlot, ServingCert};
use crate::serving_cert;
use crate::source::Sources;
use crate::source::direct::discovery::{Target, Targets};
use crate::source::direct::{self, DirectSource};
use crate::source::prometheus::{self, PrometheusSource, RuleSet, adapter, rules};
use exposition_parser::Limits;

/// Why the adapter cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Flags that do not fit together or point at unusable files.
    #[error("configuration: {0}")]
    Config(String),
    /// The Kubernetes API client could not be set up.
    #[error("Kubernetes client: {0}")]
    Kube(String),
    /// The rules file is wrong.
    #[error(transparent)]
    Rules(#[from] rules::Error),
    /// The prometheus-adapter configuration is wrong.
    #[error("prometheus-adapter configuration {0}")]
    AdapterConfig(#[from] adapter::Error),
    /// Prometheus refused queries of the rules at start.
    #[error("Prometheus refused the configuration: {0}")]
    RuleProblems(String),
    /// Authentication files are wrong.
    #[error("authentication: {0}")]
    Auth(#[from] authcfg::Error),
    /// The serving certificate is wrong.
    #[error(transparent)]
    Serve(#[from] server::Error),
    /// The port could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Error.
        source: std::io::Error,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
type TaskFactory = Box<dyn FnOnce(watch::Receiver<bool>) -> Task + Send>;

/// A built adapter, bound and ready to serve.
pub struct App {
    addr: SocketAddr,
    listener: TcpListener,
    tls: Arc<https_edge::ServerTls>,
    state: AppState,
    tasks: Vec<TaskFactory>,
    options: https_edge::Options,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("addr", &self.addr).field("state", &self.state).finish_non_exhaustive()
    }
}

fn read_token(path: Option<&Path>, flag: &str) -> Result<Option<String>> {
    path.map(|p| {
        std::fs::read_to_string(p)
            .map(|t| t.trim().to_owned())
            .map_err(|e| Error::Config(format!("{flag} {}: {e}", p.display())))
    })
    .transpose()
}

/// The Kubernetes client, and a second one without the client's retries of 503 for API
/// discovery: an aggregated API that is down answers 503 for minutes, and the retries
/// would hold up the other requests.
async fn kube_clients(args: &Args) -> Result<(kube::Client, kube::Client)> {
    let config = kube_config(args).await?;
    let mut discovery = config.clone();
    discovery.default_retry = false;
    let client = kube::Client::try_from(config).map_err(|e| Error::Kube(e.to_string()))?;
    let discovery = kube::Client::try_from(discovery).map_err(|e| Error::Kube(e.to_string()))?;
    Ok((client, discovery))
}

pub(crate) async fn kube_config(args: &Args) -> Result<kube::Config> {
    let config = match args.effective_kubeconfig() {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| Error::Kube(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Kube(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            Error::Kube(format!("{e} (run in a cluster, pass --kubeconfig, or use --standalone for development)"))
        })?,
    };
    Ok(config)
}

/// The cross-checks between flags that clap's per-flag ranges cannot make, before any
/// client is built or file read. (Each flag's own range is enforced while parsing.)
pub fn check_flags(args: &Args) -> Result<()> {
    if !args.logtostderr {
        return Err(Error::Config(
            "--logtostderr=false: logs always go to standard error here; remove the flag".into(),
        ));
    }
    let kubeconfigs: Vec<(&str, &Path)> = [
        ("--kubeconfig", args.kubeconfig.as_deref()),
        ("--lister-kubeconfig", args.lister_kubeconfig.as_deref()),
        ("--authentication-kubeconfig", args.authentication_kubeconfig.as_deref()),
        ("--authorization-kubeconfig", args.authorization_kubeconfig.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .collect();
    if let Some(((f1, p1), (f2, p2))) =
        kubeconfigs.first().zip(kubeconfigs.iter().find(|(_, p)| p != &kubeconfigs[0].1))
    {
        return Err(Error::Config(format!(
            "{f1} {} and {f2} {} differ: this adapter uses one client for listing, authentication and authorization; give one file",
            p1.display(),
            p2.display()
        )));
    }
    if args.effective_metrics_max_age() < args.metrics_relist_interval {
        return Err(Error::Config(format!(
            "--metrics-max-age (GPU_METRICS_ADAPTER_METRICS_MAX_AGE) {} shorter than --metrics-relist-interval \
             (GPU_METRICS_ADAPTER_METRICS_RELIST_INTERVAL) {} would miss series between relists",
            show_duration(args.effective_metrics_max_age()),
            show_duration(args.metrics_relist_interval)
        )));
    }
    if let Some(per_ip) = args.max_connections_per_ip
        && per_ip > args.max_connections
    {
        return Err(Error::Config(format!(
            "--max-connections-per-ip (GPU_METRICS_ADAPTER_MAX_CONNECTIONS_PER_IP) {per_ip} must be at most \
             --max-connections (GPU_METRICS_ADAPTER_MAX_CONNECTIONS) {}: one address cannot hold more places than there are",
            args.max_connections
        )));
    }
    if args.direct_source && args.max_age < args.scrape_interval {
        return Err(Error::Config(format!(
            "--max-age (GPU_METRICS_ADAPTER_MAX_AGE) {} shorter than --scrape-interval \
             (GPU_METRICS_ADAPTER_SCRAPE_INTERVAL) {} would leave metrics missing between scrapes",
            show_duration(args.max_age),
            show_duration(args.scrape_interval)
        )));
    }
    Ok(())
}

/// Reads the authentication ConfigMap.
pub async fn fetch_auth_configmap(
    client: &kube::Client,
    timeout: Duration,
) -> std::result::Result<AuthnConfig, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), authcfg::CONFIGMAP_NAMESPACE);
    let cm = tokio::time::timeout(timeout, api.get(authcfg::CONFIGMAP_NAME))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    let data: BTreeMap<String, String> = cm.data.unwrap_or_default();
    AuthnConfig::from_configmap(&data).map_err(|e| e.to_string())
}

/// Where the direct source finds exporters: the `--exporter-url` list, else the
/// exporter Service's EndpointSlices.
fn exporter_targets(args: &Args, client: Option<&kube::Client>) -> Result<Targets> {
    if !args.exporter_urls.is_empty() {
        for u in &args.exporter_urls {
            let uri: http::Uri = u.parse().map_err(|e| Error::Config(format!("--exporter-url {u:?}: {e}")))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                return Err(Error::Config(format!("--exporter-url {u:?}: needs http:// or https:// and a host")));
            }
        }
        return Ok(Targets::Static(args.exporter_urls.iter().map(|u| Target { url: u.clone(), node: None }).collect()));
    }
    let Some(client) = client else {
        return Err(Error::Config("--standalone has no EndpointSlice discovery: give --exporter-url".into()));
    };
    Ok(Targets::EndpointSlices {
        client: client.clone(),
        namespace: args.exporter_namespace.clone(),
        service: args.exporter_service.clone(),
        port_name: args.exporter_port_name.clone(),
        scheme: args.exporter_scheme.clone(),
        path: args.exporter_path.clone(),
    })
}

/// The direct source (scrapes the exporters), with its scrape task and readiness check.
fn direct_source(
    args: &Args,
    client: Option<&kube::Client>,
    tasks: &mut Vec<TaskFactory>,
    ready_checks: &mut Vec<ReadyCheck>,
) -> Result<Option<Arc<DirectSource>>> {
    if !args.direct_source {
        return Ok(None);
    }
    let targets = exporter_targets(args, client)?;
    if args.scrape_timeout > args.scrape_interval {
        tracing::info!(
            timeout = ?args.scrape_timeout,
            interval = ?args.scrape_interval,
            "--scrape-timeout is longer than --scrape-interval: scrapes give up at the interval"
        );
    }
    let http = HttpClient::new(args.exporter_ca_file.as_deref(), 0)
        .map_err(|e| Error::Config(format!("--exporter-ca-file: {e}")))?;
    let cfg = direct::Config {
        interval: args.scrape_interval,
        timeout: args.effective_scrape_timeout(),
        max_age: args.max_age,
        limits: Limits { max_bytes: args.scrape_max_bytes, ..Limits::default() },
        concurrency: args.scrape_concurrency,
        bearer_token: read_token(args.exporter_bearer_token_file.as_deref(), "--exporter-bearer-token-file")?,
    };
    let d = Arc::new(DirectSource::new(cfg, http, targets));
    let run = d.clone();
    tasks.push(Box::new(move |s| Box::pin(run.run(s))));
    let check = d.clone();
    ready_checks.push(("direct-source".into(), Arc::new(move || check.is_ready())));
    Ok(Some(d))
}

/// The rules file, in whichever of the two formats it is written, with the catalog it
/// was read against: prometheus-adapter rules name resources the cluster must serve, so
/// its discovery documents are read (the built-in catalog without an API server).
async fn rule_set(args: &Args, path: &Path, client: Option<&kube::Client>) -> Result<(RuleSet, Catalog)> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|source| Error::Rules(rules::Error::Read { path: shown.clone(), source }))?;
    if !adapter::is_adapter_format(&text) {
        return Ok((RuleSet::Native(rules::parse(&text, &shown)?), Catalog::builtin()));
    }
    let catalog = match client {
        Some(c) => catalog::fetch::fetch(c, args.kube_api_timeout).await.map_err(|e| Error::Kube(e.to_string()))?,
        None => Catalog::builtin(),
    };
    Ok((RuleSet::Adapter(adapter::parse(&text, &shown, &catalog)?), catalog))
}

/// The Prometheus source's client settings from the flags.
fn prometheus_client(args: &Args, url: &str) -> Result<(prometheus::client::Config, HttpClient)> {
    let _: http::Uri = url.parse().map_err(|e| Error::Config(format!("--prometheus-url {url:?}: {e}")))?;
    let identity = args.prometheus_client_tls_cert_file.as_deref().zip(args.prometheus_client_tls_key_file.as_deref());
    let http = HttpClient::with_identity(args.prometheus_ca_file.as_deref(), identity, 8)
        .map_err(|e| Error::Config(format!("Prometheus TLS settings: {e}")))?;
    let cfg = prometheus::client::Config {
        url: url.to_owned(),
        timeout: args.prometheus_timeout,
        max_body: args.prometheus_max_bytes,
        bearer_token: read_token(args.prometheus_bearer_token_file.as_deref(), "--prometheus-token-file")?,
        headers: prometheus::client::parse_headers(&args.prometheus_headers).map_err(Error::Config)?,
        get: args.prometheus_verb == "GET",
    };
    Ok((cfg, http))
}

/// The Prometheus source, when both `--prometheus-url` and the rules file are given
/// (`client` reads API discovery): a
/// project-format rule may not shadow a metric the direct source serves; a
/// prometheus-adapter configuration is compiled against the cluster's catalog and
/// relisted once before serving, which refuses rules Prometheus rejects.
async fn prometheus_source(
    args: &Args,
    direct_enabled: bool,
    client: Option<&kube::Client>,
    tasks: &mut Vec<TaskFactory>,
) -> Result<Option<Arc<PrometheusSource>>> {
    let (Some(url), Some(rules_file)) = (&args.prometheus_url, &args.prometheus_rules_file) else {
        return Ok(None);
    };
    let (set, catalog) = rule_set(args, rules_file, client).await?;
    let adapter_format = matches!(set, RuleSet::Adapter(_));
    if let RuleSet::Native(rules) = &set
        && direct_enabled
        && let Some(r) = rules.iter().find(|r| DirectSource::metric_names().any(|n| n == r.name))
    {
        return Err(Error::Config(format!(
            "metric {} is served by both the direct source and rule {} in {}; rename the rule or pass --direct-source=false",
            r.name,
            r.name,
            rules_file.display()
        )));
    }
    let (client_cfg, http) = prometheus_client(args, url)?;
    let cfg = prometheus::Config {
        client: client_cfg,
        relist_interval: args.metrics_relist_interval,
        max_age: args.effective_metrics_max_age(),
        widen: args.prometheus_namespace_wide_queries,
    };
    let source = Arc::new(PrometheusSource::new(cfg, http, set, catalog));
    first_relist(&source).await?;
    let run = source.clone();
    tasks.push(Box::new(move |s| Box::pin(run.run(s))));
    if let Some(c) = client.filter(|_| adapter_format) {
        let (refreshed, c, timeout) = (source.clone(), c.clone(), args.kube_api_timeout);
        tasks.push(Box::new(move |s| Box::pin(refresh_catalog(refreshed, c, timeout, s))));
    }
    Ok(Some(source))
}

/// The first relist, before serving: rules Prometheus refuses stop the start; a
/// Prometheus that does not answer does not (the relist is retried while serving).
async fn first_relist(source: &PrometheusSource) -> Result<()> {
    match source.relist().await {
        Ok(report) if !report.problems.is_empty() => {
            let all: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
            Err(Error::RuleProblems(all.join("; ")))
        }
        Ok(report) => {
            tracing::info!(custom = report.custom, external = report.external, "discovered Prometheus metrics");
            Ok(())
        }
        Err(e) => {
            tracing::warn!(error = %e, "Prometheus did not answer the first relist; serving, and relisting until it does");
            Ok(())
        }
    }
}

/// How often the cluster's resources are read again (new CRDs become mappable).
const CATALOG_REFRESH: Duration = Duration::from_secs(600);

async fn refresh_catalog(
    source: Arc<PrometheusSource>,
    client: kube::Client,
    timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(CATALOG_REFRESH) => {}
            _ = shutdown.changed() => return,
        }
        match catalog::fetch::fetch(&client, timeout).await {
            Ok(c) => source.set_catalog(c),
            Err(e) => tracing::warn!(error = %e, "reading the cluster's resources failed; keeping the previous list"),
        }
    }
}

/// Which objects exist (for `*` reads and label selectors): the pod and node label store
/// with its watch task and sync check, and lists of other resources through `lister`
/// (the client without retries: a failing list is reported within the deadline).
fn existing_objects(
    client: &kube::Client,
    lister: &kube::Client,
    timeout: Duration,
    tasks: &mut Vec<TaskFactory>,
    ready_checks: &mut Vec<ReadyCheck>,
) -> Arc<ObjectNames> {
    let store = Arc::new(LabelStore::new());
    let (run, c) = (store.clone(), client.clone());
    tasks.push(Box::new(move |s| Box::pin(run.run(c, s))));
    let check = store.clone();
    ready_checks.push(("object-labels".into(), Arc::new(move || check.is_synced())));
    Arc::new(ObjectNames::new(store, lister.clone(), timeout))
}

/// Authentication (client CA and request-header CA from files and from
/// kube-system/extension-apiserver-authentication, TokenReview) and authorization
/// (SubjectAccessReview), with the task that keeps the authentication config current.
async fn authentication(
    args: &Args,
    client: Option<&kube::Client>,
    tasks: &mut Vec<TaskFactory>,
    ready_checks: &mut Vec<ReadyCheck>,
) -> Result<(Arc<Authenticator>, Arc<Authorizer>)> {
    let files = FileSettings {
        client_ca_file: args.client_ca_file.clone(),
        requestheader_client_ca_file: args.requestheader_client_ca_file.clone(),
        requestheader_allowed_names: args.requestheader_allowed_names.clone(),
        requestheader_username_headers: args.requestheader_username_headers.clone(),
        requestheader_uid_headers: args.requestheader_uid_headers.clone(),
        requestheader_group_headers: args.requestheader_group_headers.clone(),
        requestheader_extra_headers_prefix: args.requestheader_extra_headers_prefix.clone(),
    };
    let from_files = files.load()?;
    let lookup = client.cloned().filter(|_| !args.authentication_skip_lookup);
    let loaded = Arc::new(AtomicBool::new(lookup.is_none()));
    let mut from_cm = AuthnConfig::default();
    if let Some(c) = &lookup {
        match fetch_auth_configmap(c, args.kube_api_timeout).await {
            Ok(cfg) => {
                from_cm = cfg;
                loaded.store(true, Ordering::Release);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading kube-system/extension-apiserver-authentication failed; retrying")
            }
        }
    }
    let initial = from_files.clone().or(from_cm.clone());
    if initial.client_ca.is_none() && initial.request_header.is_none() && lookup.is_none() && client.is_none() {
        tracing::warn!(
            "no client CA and no request-header CA: only bearer tokens could authenticate, and standalone mode has none"
        );
    }
    let tokens =
        client.map(|c| TokenReviewer::new(c.clone(), args.authentication_token_cache_ttl, args.kube_api_timeout));
    let authn = Arc::new(Authenticator::new(initial, tokens));
    let authz = Arc::new(Authorizer::new(
        client.cloned(),
        args.authorization_cache_allow_ttl,
        args.authorization_cache_deny_ttl,
        args.kube_api_timeout,
    ));
    let (refreshed, loaded_flag, timeout, refresh) =
        (authn.clone(), loaded.clone(), args.kube_api_timeout, args.authentication_config_refresh);
    tasks.push(Box::new(move |s| {
        Box::pin(refresh_auth(refreshed, files, lookup, from_cm, loaded_flag, timeout, refresh, s))
    }));
    ready_checks.push(("authentication-config".into(), Arc::new(move || loaded.load(Ordering::Acquire))));
    Ok((authn, authz))
}

impl App {
    /// Validates the configuration, connects what must be connected and binds the port.
    pub async fn build(args: &Args) -> Result<Self> {
        check_flags(args)?;
        let (client, discovery) = if args.standalone {
            (None, None)
        } else {
            let (c, d) = kube_clients(args).await?;
            (Some(c), Some(d))
        };
        let mut tasks: Vec<TaskFactory> = Vec::new();
        let mut ready_checks: Vec<ReadyCheck> = Vec::new();

        let direct = direct_source(args, client.as_ref(), &mut tasks, &mut ready_checks)?;
        let prometheus = prometheus_source(args, direct.is_some(), discovery.as_ref(), &mut tasks).await?;
        if direct.is_none() && prometheus.is_none() {
            return Err(Error::Config("no source: enable --direct-source or give --prometheus-url".into()));
        }
        let objects = client
            .as_ref()
            .zip(discovery.as_ref())
            .map(|(c, d)| existing_objects(c, d, args.kube_api_timeout, &mut tasks, &mut ready_checks));
        let (authn, authz) = authentication(args, client.as_ref(), &mut tasks, &mut ready_checks).await?;

        let external = prometheus.as_ref().is_some_and(|p| p.has_external());
        let serving = serving_certificate(args, client.as_ref(), external, &mut tasks, &mut ready_checks).await?;
        let tls = server::tls(serving, &protocols(args)?)?;

        let addr = SocketAddr::new(args.bind_address, args.secure_port);
        let listener = https_edge::listen::bind(addr).map_err(|source| Error::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind { addr, source })?;
        let state = AppState {
            sources: Sources { direct, prometheus },
            objects,
            authn,
            authz,
            ready_checks,
            limits: api::Limits {
                max_uri_bytes: args.max_request_uri_bytes,
                max_header_bytes: args.max_request_header_bytes,
            },
        };
        let options = server::options(server::Limits {
            drain: args.shutdown_drain,
            max_head_bytes: (args.max_request_uri_bytes + args.max_request_header_bytes).saturating_mul(2),
            header_read_timeout: args.header_read_timeout,
            handshake_timeout: args.tls_handshake_timeout,
            max_connections: args.max_connections,
            max_connections_per_ip: args.effective_max_connections_per_ip(),
        });
        Ok(Self { addr, listener, tls, state, tasks, options })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The handler state (for in-process tests).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The serving certificate chain in use now (leaf first).
    pub fn serving_chain(&self) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        self.tls.serving_chain()
    }

    /// Starts the background tasks and serves until `shutdown` turns true.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let mut handles = Vec::new();
        for t in self.tasks {
            handles.push(tokio::spawn(t(shutdown.clone())));
        }
        tracing::info!(addr = %self.addr, "serving custom.metrics.k8s.io");
        let mut stop = shutdown;
        let stopped = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        let transport = https_edge::Transport::Tls(self.tls);
        if let Err(e) =
            https_edge::serve(self.listener, transport, api::router(self.state), stopped, self.options).await
        {
            tracing::error!(error = %e, "serving failed");
        }
        for h in handles {
            h.abort();
        }
        tracing::info!("stopped");
    }
}

/// TLS versions, suites and HTTP/2 from `--tls-min-version`, `--tls-cipher-suites` and
/// `--disable-http2`.
fn protocols(args: &Args) -> Result<server::Protocols> {
    let cipher_suites = if args.tls_cipher_suites.is_empty() {
        None
    } else {
        let (suites, left_out) =
            crate::config::compat::cipher_suites(&args.tls_cipher_suites).map_err(Error::Config)?;
        if !left_out.is_empty() {
            tracing::warn!(left_out = ?left_out, "--tls-cipher-suites names suites rustls does not implement; they are not offered");
        }
        Some(suites)
    };
    if matches!(args.tls_min_version.as_deref(), Some("VersionTLS10" | "VersionTLS11")) {
        tracing::warn!("--tls-min-version below VersionTLS12: TLS 1.0 and 1.1 are not offered, TLS 1.2 and 1.3 are");
    }
    Ok(server::Protocols {
        tls13_only: args.tls_min_version.as_deref() == Some("VersionTLS13"),
        cipher_suites,
        http2: !args.disable_http2,
    })
}

/// `--cert-dir`: its `apiserver.crt` and `apiserver.key`, made self-signed when missing.
fn cert_dir_pair(dir: &Path, hosts: &[&str]) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (cert, key) = (dir.join("apiserver.crt"), dir.join("apiserver.key"));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let fail = |e: std::io::Error| Error::Config(format!("--cert-dir {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let pair = crate::certs::self_signed(hosts).map_err(server::Error::from)?;
    std::fs::write(&cert, pair.cert_pem.as_bytes()).map_err(fail)?;
    std::fs::write(&key, pair.key_pem.as_bytes()).map_err(fail)?;
    tracing::info!(dir = %dir.display(), "wrote a self-signed serving certificate into --cert-dir");
    Ok((cert, key))
}

/// The APIServices whose `caBundle` the adapter keeps: those of `--tls-ca-bundle-apiservices`
/// for the groups it serves. `external.metrics.k8s.io` is served only with external rules,
/// and its APIService is installed only with them (deploy/components/adapter-external-metrics),
/// so without them it is left alone rather than waited for.
pub fn ca_bundle_apiservices(names: &[String], external_served: bool) -> Vec<String> {
    names.iter().filter(|n| external_served || !n.ends_with(".external.metrics.k8s.io")).cloned().collect()
}

/// The serving certificate: from files (re-read when they change), from the Secret the
/// adapter keeps itself (`--tls-secret-name`), from `--cert-dir`, or a throwaway
/// self-signed pair.
async fn serving_certificate(
    args: &Args,
    client: Option<&kube::Client>,
    external_served: bool,
    tasks: &mut Vec<TaskFactory>,
    ready_checks: &mut Vec<ReadyCheck>,
) -> Result<ServingCert> {
    let hosts: Vec<&str> = args.self_signed_hosts.iter().map(String::as_str).collect();
    let throwaway = || -> Result<_> {
        let pair = crate::certs::self_signed(&hosts).map_err(server::Error::from)?;
        Ok(server::load_pair(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes(), "self-signed")?)
    };
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) {
        return Ok(ServingCert::Files { cert: cert.clone(), key: key.clone(), check_every: args.tls_reload_interval });
    }
    if let (Some(dir), None) = (&args.cert_dir, &args.tls_secret_name) {
        let (cert, key) = cert_dir_pair(dir, &hosts)?;
        return Ok(ServingCert::Files { cert, key, check_every: args.tls_reload_interval });
    }
    let Some(secret) = &args.tls_secret_name else {
        tracing::info!(hosts = ?hosts, "no --tls-cert-file or --tls-secret-name: serving a throwaway self-signed certificate");
        return Ok(ServingCert::Slot(CertSlot::new(throwaway()?)));
    };
    let client = client.ok_or_else(|| Error::Config("--tls-secret-name needs the Kubernetes API".into()))?;
    let policy = serving_cert::Policy {
        hosts: args.self_signed_hosts.iter().cloned().collect(),
        ca_validity: args.tls_ca_validity,
        cert_validity: args.tls_cert_validity,
        promote_after: args.tls_secret_check_interval.saturating_mul(2),
    };
    policy.check().map_err(Error::Config)?;
    let config = serving_cert::Config {
        namespace: args.tls_secret_namespace.clone(),
        secret: secret.clone(),
        apiservices: ca_bundle_apiservices(&args.tls_ca_bundle_apiservices, external_served),
        policy,
        interval: args.tls_secret_check_interval,
        api_timeout: args.kube_api_timeout,
    };
    // Until the Secret's certificate is loaded, a throwaway one answers the kubelet's
    // probes (which do not verify) and readiness says why the adapter is not ready.
    let slot = CertSlot::new(throwaway()?);
    let manager = Arc::new(serving_cert::Manager::new(client.clone(), config, slot.clone()));
    if let Err(e) = manager.reconcile().await {
        tracing::warn!(error = %e, "serving certificate not settled yet; retrying");
    }
    let check = manager.clone();
    ready_checks.push(("serving-certificate".into(), Arc::new(move || check.is_ready())));
    tasks.push(Box::new(move |s| Box::pin(manager.run(s))));
    Ok(ServingCert::Slot(slot))
}

#[allow(clippy::too_many_arguments)]
async fn refresh_auth(
    authn: Arc<Authenticator>,
    files: FileSettings,
    lookup: Option<kube::Client>,
    mut from_cm: AuthnConfig,
    loaded: Arc<AtomicBool>,
    timeout: Duration,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let retry = Duration::from_secs(5).min(every);
    loop {
        let wait = if loaded.load(Ordering::Acquire) { every } else { retry };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        let from_files = match files.load() {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "authentication files unreadable; keeping the current settings");
                continue;
            }
        };
        if let Some(c) = &lookup {
            match fetch_auth_configmap(c, timeout).await {
                Ok(cfg) => {
                    from_cm = cfg;
                    loaded.store(true, Ordering::Release);
                }
                Err(e) => tracing::warn!(error = %e, "re-reading the authentication ConfigMap failed"),
            }
        }
        let merged = from_files.or(from_cm.clone());
        if merged != authn.config() {
            tracing::info!("authentication settings changed");
            authn.set_config(merged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_external_apiservice_is_kept_only_when_its_group_is_served() {
        let names: Vec<String> =
            ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"]
                .map(str::to_owned)
                .into();
        assert_eq!(ca_bundle_apiservices(&names, true), names);
        assert_eq!(ca_bundle_apiservices(&names, false), names[..2]);
    }
}
