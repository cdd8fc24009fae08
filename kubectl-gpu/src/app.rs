//! One run: check the flags, build the client, gather what the command needs, lay it
//! out, write it, and under `--watch` do it again every `--interval` until Ctrl-C.
//!
//! The whole of one frame runs under `--timeout`: exporter reads end at it (their nodes
//! then show unknown), and an API server that does not answer the lists by then is an
//! error. Under `--watch` an error is drawn in place of the table and the next refresh
//! tries again, as `watch(1)` does.
//!
//! What reaches the terminal from outside the plugin is escaped at this edge and in the
//! table ([`crate::sanitize`]): warnings and error frames here, cells in
//! [`crate::table`]. JSON and YAML are written as their encoders write them.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_health::names::Names;
use kube::Client;
use tokio::time::Instant;

use crate::api::gather::{self, Exporters, Plan, PodScope};
use crate::api::objects::{self, PricesFrom};
use crate::api::prometheus::{Prometheus, PrometheusError};
use crate::api::scrape::ScrapeOptions;
use crate::api::{ApiError, metrics};
use crate::cli::{Cli, CliError, Command, Global, Rightsize, Source};
use crate::output::{self, Format, OutputError};
use crate::prices::PriceTable;
use crate::rightsize::history::{self, History, Source as Source_};
use crate::rightsize::plan::NodeGpus;
use crate::rightsize::recommend::Rules;
use crate::rightsize::workload::{PodFacts, pod_facts};
use crate::sanitize;
use crate::table::TableError;
use crate::terminal::{self, Terminal};
use crate::views::pods::Scope;
use crate::views::{self, Report};
use crate::{cost, fleet::Fleet};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Cli(#[from] CliError),
    #[error(transparent)]
    Sort(#[from] TableError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error(transparent)]
    Prometheus(#[from] PrometheusError),
    #[error("the API server did not answer within --timeout {0}")]
    Timeout(String),
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),
}

impl AppError {
    /// The exit code: 2 for a command line that can never work, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Cli(_) | AppError::Sort(_) => 2,
            _ => 1,
        }
    }
}

pub type Result<T, E = AppError> = std::result::Result<T, E>;

/// One drawn frame: the text for stdout and the warnings for stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub text: String,
    pub warnings: Vec<String>,
}

fn pods_scope(global: &Global, client: &Client) -> Scope {
    let namespace = if global.all_namespaces {
        None
    } else {
        Some(global.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string()))
    };
    Scope { namespace, listed_only: global.selector.is_some() }
}

fn cost_scope(global: &Global) -> Scope {
    let namespace = if global.all_namespaces { None } else { global.namespace.clone() };
    Scope { namespace, listed_only: global.selector.is_some() }
}

/// The command's report over an empty fleet: its columns, for checking `--sort-by`
/// before anything is read.
fn empty_report(cli: &Cli) -> Result<Report> {
    let fleet = Fleet::default();
    let table = PriceTable::defaults().map_err(CliError::from)?;
    Ok(match &cli.command {
        Command::Nodes => views::nodes::report(&fleet),
        Command::Gpus { .. } => views::gpus::report(&fleet, None),
        Command::Pods { .. } => {
            let namespace = if cli.global.all_namespaces { None } else { Some(String::new()) };
            let empty = cost::report(&fleet, &table, 10.0);
            views::pods::report(&fleet, &empty, &Scope { namespace, listed_only: false })
        }
        Command::Cost { by } => views::cost::report(&fleet, &table, 10.0, *by, &Scope::default()),
        Command::Rightsize(r) => views::rightsize::report(&views::rightsize::Input {
            observations: &[],
            prices: &table,
            rules: Rules::with_headroom_percent(r.headroom).unwrap_or_default(),
            source: Source_::Raw,
            prometheus: "",
            window_seconds: r.window.as_secs_f64(),
            plan: None,
        }),
    })
}

/// Checks everything that needs no cluster.
pub fn check(cli: &Cli) -> Result<()> {
    cli.global.validate()?;
    if let Command::Pods { source: Source::CustomMetrics } = cli.command
        && cli.global.all_namespaces
    {
        return Err(CliError::MetricsAllNamespaces.into());
    }
    if let Command::Rightsize(r) = &cli.command {
        if let Some(s) = &r.prometheus_service {
            crate::api::prometheus::parse_service(s).map_err(|e| CliError::Flag(e.to_string()))?;
        }
        if let Some(u) = &r.prometheus_url {
            Prometheus::url(u).map_err(|e| CliError::Flag(e.to_string()))?;
        }
    }
    if let Some(by) = &cli.global.sort_by {
        empty_report(cli)?.table.column(by.trim_start_matches('-'))?;
    }
    Ok(())
}

struct Run<'a> {
    client: &'a Client,
    global: &'a Global,
    names: Names,
    exporters: Exporters,
    now: f64,
}

impl<'a> Run<'a> {
    fn new(client: &'a Client, global: &'a Global, deadline: Instant) -> Run<'a> {
        let scrape = ScrapeOptions {
            namespace: global.exporter_namespace.clone(),
            port: global.exporter_port.clone(),
            scheme: global.exporter_scheme,
            per_read: global.exporter_timeout,
            deadline,
            concurrency: global.concurrency,
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        Run {
            client,
            global,
            names: Names::new(&global.health_domain),
            exporters: Exporters { selector: global.exporter_selector.clone(), scrape },
            now,
        }
    }

    fn plan(&self) -> Plan {
        Plan {
            node_selector: None,
            only_node: None,
            pods: PodScope::None,
            pod_selector: None,
            only_nodes_with_pods: false,
        }
    }

    async fn fleet(&self, plan: Plan) -> Result<Fleet> {
        Ok(gather::fleet(self.client, &plan, &self.exporters, &self.names, self.now).await?)
    }

    async fn prices(&self) -> Result<(PriceTable, Vec<String>)> {
        let (ns, name) = self.global.prices_configmap()?;
        let (table, from) = objects::prices(self.client, ns, name, &self.global.prices).await?;
        let warnings = match from {
            PricesFrom::Forbidden(e) => {
                vec![format!("cannot read ConfigMap {ns}/{name} ({e}); the default prices apply")]
            }
            PricesFrom::ConfigMap | PricesFrom::Missing => Vec::new(),
        };
        Ok((table, warnings))
    }

    async fn nodes(&self) -> Result<Report> {
        let plan = Plan { node_selector: self.global.selector.clone(), ..self.plan() };
        Ok(views::nodes::report(&self.fleet(plan).await?))
    }

    async fn gpus(&self, node: Option<&str>) -> Result<Report> {
        let plan =
            Plan { node_selector: self.global.selector.clone(), only_node: node.map(str::to_string), ..self.plan() };
        let mut report = views::gpus::report(&self.fleet(plan).await?, node);
        if self.global.output == Some(Format::Wide) {
            views::gpus::widen_holders(&mut report);
        }
        Ok(report)
    }

    async fn pods(&self, source: Source) -> Result<Report> {
        let scope = pods_scope(self.global, self.client);
        let mut warnings = Vec::new();
        if let (Some(ns), Source::Auto | Source::CustomMetrics) = (&scope.namespace, source) {
            let listed = objects::pods(self.client, Some(ns), self.global.selector.as_deref()).await?;
            let pods: Vec<_> = listed.iter().map(crate::cluster::pod_info).filter(|p| p.wants_gpus()).collect();
            match metrics::pod_metrics(self.client, ns).await {
                Ok(m) => return Ok(views::pods::from_metrics(&pods, &m, ns)),
                Err(e) if source == Source::Auto => {
                    warnings.push(format!("{e}; reading the exporters of the namespace's nodes instead"));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let pod_scope = scope.namespace.clone().map_or(PodScope::All, PodScope::Namespace);
        let plan = Plan {
            pods: pod_scope,
            pod_selector: self.global.selector.clone(),
            only_nodes_with_pods: scope.namespace.is_some(),
            ..self.plan()
        };
        let (fleet, (table, price_warnings)) = futures::try_join!(self.fleet(plan), self.prices())?;
        let idle = self.global.idle_below.unwrap_or(table.idle_below_percent);
        let mut report = views::pods::report(&fleet, &cost::report(&fleet, &table, idle), &scope);
        report.warnings.extend(warnings.into_iter().chain(price_warnings));
        Ok(report)
    }

    async fn cost(&self, by: views::cost::GroupBy) -> Result<Report> {
        let scope = cost_scope(self.global);
        let pods = match (&scope.namespace, scope.listed_only) {
            (Some(ns), _) => PodScope::Namespace(ns.clone()),
            (None, true) => PodScope::All,
            (None, false) => PodScope::None,
        };
        let plan = Plan {
            pods,
            pod_selector: self.global.selector.clone(),
            only_nodes_with_pods: scope.namespace.is_some(),
            ..self.plan()
        };
        let (fleet, (table, price_warnings)) = futures::try_join!(self.fleet(plan), self.prices())?;
        let idle = self.global.idle_below.unwrap_or(table.idle_below_percent);
        let mut report = views::cost::report(&fleet, &table, idle, by, &scope);
        report.warnings.extend(price_warnings);
        Ok(report)
    }

    /// `rightsize`: the window from Prometheus, or, without one, a labelled snapshot.
    async fn rightsize(&self, args: &Rightsize) -> Result<Report> {
        let prometheus = match (&args.prometheus_service, &args.prometheus_url) {
            (Some(s), _) => Prometheus::service(self.client, s)?,
            (None, Some(u)) => Prometheus::url(u)?,
            (None, None) => {
                let pods = self.pods(Source::Exporters).await?;
                return Ok(views::rightsize::snapshot(pods, "no Prometheus was given"));
            }
        };
        let scope = pods_scope(self.global, self.client);
        let ns = scope.namespace.as_deref();
        let window = args.window.as_secs_f64();
        let rules = Rules::with_headroom_percent(args.headroom).map_err(|e| CliError::Flag(e.to_string()))?;
        let coverage_query = history::recorded_coverage_query(ns, window);
        let (listed, nodes, prices, coverage) = futures::join!(
            objects::pods(self.client, ns, self.global.selector.as_deref()),
            objects::nodes(self.client, None),
            self.prices(),
            prometheus.query(&coverage_query, self.now),
        );
        let (listed, nodes, (table, mut warnings)) = (listed?, nodes?, prices?);
        let coverage = match coverage {
            Ok(c) => c,
            Err(e) => {
                let pods = self.pods(Source::Exporters).await?;
                let why = format!("{} could not be read ({e})", prometheus.name);
                return Ok(views::rightsize::snapshot(pods, &why));
            }
        };
        let recorded_from = coverage.iter().map(|(_, v)| *v).reduce(f64::min);
        let source =
            if history::recorded_covers(recorded_from, self.now, window) { Source_::Recorded } else { Source_::Raw };
        let queries = history::queries(ns, window, source);
        let answers = futures::future::try_join_all(queries.iter().map(|(figure, q)| {
            let prometheus = prometheus.clone();
            async move { prometheus.query(q, self.now).await.map(|samples| (*figure, samples)) }
        }))
        .await?;
        let mut history = History { source: Some(source), ..History::default() };
        for (figure, samples) in answers {
            history.add(figure, samples);
        }
        if !history.pods.values().any(|p| !p.devices.is_empty()) {
            warnings.push(format!(
                "{} has no gpu_pod_memory_used_bytes series in the window for this scope: is it scraping the exporters?",
                prometheus.name
            ));
        }
        if history.pods.values().all(|p| p.restarts.is_none()) {
            warnings.push(
                "no kube-state-metrics series in the window: restarts and OOM kills are the pods' status (since each pod started)".into(),
            );
        }
        let pods: Vec<PodFacts> = listed.iter().map(pod_facts).filter(PodFacts::may_hold_gpus).collect();
        let infos: Vec<_> = nodes.iter().map(|n| crate::cluster::node_info(n, &self.names)).collect();
        let mut node_models = std::collections::BTreeMap::new();
        let mut gpus = Vec::new();
        for info in &infos {
            let Some(product) = info.labels.get("nvidia.com/gpu.product") else { continue };
            let model = history::label_model(product);
            let count: u32 = info.labels.get("nvidia.com/gpu.count").and_then(|c| c.parse().ok()).unwrap_or(0);
            gpus.push(NodeGpus { node: info.name.clone(), model: model.clone(), indices: (0..count).collect() });
            node_models.insert(info.name.clone(), model);
        }
        let observations = history::observe(&pods, &history, &node_models, self.now, window);
        if args.plan && scope.namespace.is_some() {
            warnings.push(
                "--plan places only the pods in scope on each node; run it with -A for a plan that holds every pod"
                    .into(),
            );
        }
        let mut report = views::rightsize::report(&views::rightsize::Input {
            observations: &observations,
            prices: &table,
            rules,
            source,
            prometheus: &prometheus.name,
            window_seconds: window,
            plan: args.plan.then_some(gpus.as_slice()),
        });
        warnings.append(&mut report.warnings);
        report.warnings = warnings;
        Ok(report)
    }

    async fn report(&self, command: &Command) -> Result<Report> {
        let mut report = match command {
            Command::Nodes => self.nodes().await?,
            Command::Gpus { node } => self.gpus(node.as_deref()).await?,
            Command::Pods { source } => self.pods(*source).await?,
            Command::Cost { by } => self.cost(*by).await?,
            Command::Rightsize(r) => self.rightsize(r).await?,
        };
        if let Some(by) = &self.global.sort_by {
            report.sort(by)?;
        }
        Ok(report)
    }
}

/// Gathers and lays out one frame, all within `--timeout`.
pub async fn frame(client: &Client, cli: &Cli, colour: bool) -> Result<Frame> {
    let global = &cli.global;
    let deadline = Instant::now() + global.timeout;
    let run = Run::new(client, global, deadline);
    // Exporter reads stop at the deadline; the grace covers laying out what they gave.
    let grace = Duration::from_millis(500);
    let report = tokio::time::timeout_at(deadline + grace, run.report(&cli.command))
        .await
        .map_err(|_| AppError::Timeout(flag_ranges::show_duration(global.timeout)))??;
    let text = output::render(&report, global.output, colour)?;
    Ok(Frame { text, warnings: report.warnings })
}

fn command_line(cli: &Cli) -> String {
    match &cli.command {
        Command::Nodes => "nodes".into(),
        Command::Gpus { node } => node.as_ref().map_or_else(|| "gpus".into(), |n| format!("gpus {n}")),
        Command::Pods { .. } => "pods".into(),
        Command::Cost { by } => format!("cost --by {}", format!("{by:?}").to_lowercase()),
        Command::Rightsize(_) => "rightsize".into(),
    }
}

/// One warning as written: they quote exporters and the API server, so their control
/// characters are shown escaped, on a terminal or not.
pub fn warning_line(warning: &str) -> String {
    format!("Warning: {}\n", sanitize::escape(warning))
}

fn write_warnings(warnings: &[String]) {
    let mut err = std::io::stderr().lock();
    for w in warnings {
        let _ = err.write_all(warning_line(w).as_bytes());
    }
}

/// Runs the command once, or until Ctrl-C under `--watch`.
pub async fn run(cli: &Cli) -> Result<()> {
    check(cli)?;
    let client = crate::api::client(&cli.global).await?;
    let terminal = Terminal::detect(cli.global.color);
    if !cli.global.watch {
        let f = frame(&client, cli, terminal.colour).await?;
        write_warnings(&f.warnings);
        let mut out = std::io::stdout().lock();
        out.write_all(f.text.as_bytes())?;
        return Ok(out.flush()?);
    }
    watch(&client, cli, terminal).await
}

async fn watch(client: &Client, cli: &Cli, terminal: Terminal) -> Result<()> {
    let every = flag_ranges::show_duration(cli.global.interval);
    let mut first = true;
    loop {
        let started = Instant::now();
        let (text, warnings) = match frame(client, cli, terminal.colour).await {
            Ok(f) => (f.text, f.warnings),
            Err(e) => (format!("error: {}\n", sanitize::escape(&e.to_string())), Vec::new()),
        };
        let mut out = std::io::stdout().lock();
        if terminal.tty {
            let at = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M:%S UTC").to_string();
            let mut screen = terminal::header(&sanitize::escape(&command_line(cli)), &every, &at) + &text;
            for w in &warnings {
                screen.push_str(&warning_line(w));
            }
            let clear = if first { terminal::CLEAR } else { "" };
            out.write_all(format!("{clear}{}", terminal::redraw(&screen)).as_bytes())?;
        } else {
            if !first {
                out.write_all(if cli.global.output == Some(Format::Yaml) { b"---\n" } else { b"\n" })?;
            }
            out.write_all(text.as_bytes())?;
            write_warnings(&warnings);
        }
        out.flush()?;
        drop(out);
        first = false;
        tokio::select! {
            _ = tokio::time::sleep_until(started + cli.global.interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
