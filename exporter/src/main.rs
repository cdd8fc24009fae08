//! gpu-exporter binary: parse flags, start logging, run, map errors to exit codes
//! (0 clean shutdown, 1 runtime failure, 2 bad configuration).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use gpu_exporter::attribution::config::ApiMode;
use gpu_exporter::collect::{self, CollectorSettings};
use gpu_exporter::config::Args;
use gpu_exporter::health::KubeAccess;
use gpu_exporter::render::RenderContext;
use gpu_exporter::server::{AppState, router};
use gpu_exporter::web::{self, WebConfig};
use tokio::net::TcpListener;

fn main() -> ExitCode {
    gpu_exporter::process_memory::tune_allocator();
    let args = Args::parse();
    logging::init(args.log_level.clone(), args.log_format);
    if let Err(e) = args.validate() {
        tracing::error!("invalid configuration: {e}");
        eprintln!("gpu-exporter: {e}");
        return ExitCode::from(2);
    }
    let web_config = match &args.web_config_file {
        Some(path) => match WebConfig::load(path) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!("invalid web configuration: {e}");
                eprintln!("gpu-exporter: {e}");
                return ExitCode::from(2);
            }
        },
        None => WebConfig::none(),
    };
    // One process-wide TLS provider: ring (two providers in one process panic).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let health = match args.health.settings() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!("invalid configuration: {e}");
            eprintln!("gpu-exporter: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpu-exporter: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args, web_config, health)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("gpu-exporter: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args, web_config: WebConfig, health: gpu_health_kube::config::HealthSettings) -> anyhow::Result<()> {
    let context = RenderContext {
        node: args.node(),
        extra_labels: args.extra_labels()?,
        version: env!("CARGO_PKG_VERSION").to_string(),
        revision: option_env!("GPU_EXPORTER_REVISION").unwrap_or("unknown").to_string(),
        naming: args.naming,
        dcgm_version: args.dcgm_exporter_version,
    };
    let listener = bind(&args).await?;
    let local = listener.local_addr().context("listener address")?;
    let attribution = gpu_exporter::attribution::start(&args.attribution, &context.node).await;
    let (collector, snapshots) = collect::spawn(CollectorSettings {
        library: args.nvml_library.clone(),
        interval: args.collect_interval,
        call_timeout: args.call_timeout,
        init_retry_max: args.init_retry_max,
        attribution: Some(attribution),
    })
    .context("starting the collector thread")?;
    tracing::info!(address = %local, node = %context.node, library = %args.nvml_library.display(), "serving /metrics");
    let health = match args.health.enabled {
        true => {
            // `--kubernetes.api` means the same for the pod watch and the health loop.
            let access = match args.attribution.api {
                ApiMode::Off => KubeAccess::Off,
                ApiMode::Auto => KubeAccess::Auto { kubeconfig: args.attribution.kubeconfig.clone() },
            };
            Some(gpu_exporter::health::start(health, context.node.clone(), snapshots.clone(), access).await)
        }
        false => None,
    };
    tokio::spawn(release_startup_code(snapshots.clone()));
    let sections = health.as_ref().map(gpu_exporter::health::sections).unwrap_or_default();
    let app = router(AppState::with_sections(snapshots, context, sections));
    web::serve_with(listener, app, Arc::new(web_config), shutdown_signal(), args.serve_options())
        .await
        .context("HTTP server")?;
    tracing::info!("shutting down");
    if let Some(health) = health {
        health.stop();
    }
    collector.stop(args.shutdown_timeout);
    Ok(())
}

/// Once the first collection cycle is done, start-up is over: unmaps the start-up code
/// (see `process_memory`).
async fn release_startup_code(mut snapshots: tokio::sync::watch::Receiver<Arc<gpu_exporter::snapshot::Snapshot>>) {
    if snapshots.wait_for(|snapshot| snapshot.generation > 0).await.is_err() {
        return;
    }
    match gpu_exporter::process_memory::release_code_pages() {
        Ok(bytes) => tracing::debug!(bytes, "released the start-up code pages"),
        Err(e) => tracing::warn!("could not release the start-up code pages: {e}"),
    }
}

/// Binds the first address that works: for `:PORT`, IPv6 dual-stack, else IPv4.
async fn bind(args: &Args) -> anyhow::Result<TcpListener> {
    let mut last_error = None;
    for address in args.socket_addresses()? {
        match https_edge::listen::bind(address) {
            Ok(listener) => return Ok(listener),
            Err(e) => last_error = Some(anyhow::Error::new(e).context(format!("cannot listen on {address}"))),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no address to listen on")))
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
