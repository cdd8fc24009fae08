//! gpu-metrics-adapter: parse flags, set up logging, build and run the server, map
//! failures to exit codes (2: configuration, 1: runtime).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context as _;
use gpu_metrics_adapter::app::{self, App};
use gpu_metrics_adapter::config::{Cli, Command, LogFormat};
use gpu_metrics_adapter::{certs, check};

fn init_logging(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = logging::parse_log_filter(level).map_err(|e| anyhow::anyhow!("--log.level {level:?}: {e}"))?;
    logging::init(filter, format);
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        r = tokio::signal::ctrl_c() => { r.context("installing the SIGINT handler")?; tracing::info!("SIGINT: shutting down") }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::try_parse_compat(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if let Err(e) = init_logging(cli.args.log_format, &cli.args.effective_log_level()) {
        eprintln!("gpu-metrics-adapter: {e:#}");
        return ExitCode::from(2);
    }
    // One process-wide provider: ring. A second provider in the process would panic.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Some(Command::DevCerts(a)) = &cli.command {
        let hosts: Vec<&str> = a.hosts.iter().map(String::as_str).collect();
        return match certs::write_dev_bundle(&a.out, &a.server, &hosts) {
            Ok(b) => {
                println!("wrote {}, {}, {}", b.ca.display(), b.serving_cert.display(), b.kubeconfig.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("gpu-metrics-adapter: {e}");
                ExitCode::from(1)
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpu-metrics-adapter: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(Command::CheckApi(a)) = &cli.command {
        return match runtime.block_on(check::run(&cli.args, a)) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("gpu-metrics-adapter check-api: {e}");
                ExitCode::from(1)
            }
        };
    }
    runtime.block_on(async {
        let app = match App::build(&cli.args).await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                return ExitCode::from(match e {
                    app::Error::Bind { .. } | app::Error::Kube(_) => 1,
                    _ => 2,
                });
            }
        };
        let (tx, rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(app.run(rx));
        if let Err(e) = shutdown_signal().await {
            tracing::error!(error = %e, "signal handling failed; shutting down");
        }
        let _ = tx.send(true);
        match server.await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "server task failed");
                ExitCode::from(1)
            }
        }
    })
}
