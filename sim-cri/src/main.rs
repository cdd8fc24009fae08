//! sim-cri binary: serves the CRI on a unix socket for the real kubelet of a simulated
//! node (docs/deploy.md, "The real kubelet"). SIGTERM or SIGINT removes the socket and
//! exits.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "sim-cri",
    version,
    about = "A CRI runtime that keeps pods and containers as records and runs nothing"
)]
struct Args {
    /// Where to serve the CRI (the kubelet's --container-runtime-endpoint, unix://...).
    #[arg(long, env = "SIM_CRI_SOCKET", default_value = "/run/sim-cri/sim-cri.sock")]
    socket: PathBuf,
    /// The node's pod CIDR (a.b.c.0/24): each sandbox gets one of its addresses.
    #[arg(long, env = "SIM_CRI_POD_CIDR", default_value = "10.244.0.0/24")]
    pod_cidr: String,
    /// Reported as the image and container filesystem's mount point.
    #[arg(long, env = "SIM_CRI_ROOT", default_value = "/var/lib/sim-cri")]
    root: PathBuf,
    /// Log level: error, warn, info, debug, trace or off, and optionally comma-separated
    /// target=level pairs.
    #[arg(long = "log.level", env = "SIM_CRI_LOG_LEVEL", default_value = "info", value_parser = logging::parse_log_filter)]
    log_level: logging::LogFilter,
    #[arg(long = "log.format", env = "SIM_CRI_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: logging::LogFormat,
}

fn main() -> ExitCode {
    let args = Args::parse();
    logging::init(args.log_level.clone(), args.log_format);
    let addresses = match sim_cri::state::Addresses::new(&args.pod_cidr) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sim-cri: --pod-cidr: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sim-cri: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        let mut term = signal(SignalKind::terminate()).map_err(|e| anyhow::anyhow!("SIGTERM handler: {e}"))?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        let state = sim_cri::state::State::new(addresses);
        sim_cri::serve(&args.socket, state, args.root, shutdown).await.map_err(anyhow::Error::from)
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sim-cri: {e}");
            ExitCode::FAILURE
        }
    }
}
