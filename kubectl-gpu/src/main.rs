//! `kubectl-gpu`: parse the command line, set up logging, run, map errors to exit codes
//! (0 done, 1 the cluster could not be read, 2 a command line that can never work).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use kubectl_gpu::app;
use kubectl_gpu::cli::Cli;
use kubectl_gpu::sanitize::escape;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr, quiet by default; KUBECTL_GPU_LOG=debug shows every request.
    // kube logs every error answer itself; the command reports them once, in its words.
    // The filter syntax is the exporter's and the adapter's --log.level.
    const QUIET: &str = "warn,kube_client::client::builder=off";
    let asked = std::env::var("KUBECTL_GPU_LOG").unwrap_or_else(|_| QUIET.to_string());
    let filter = logging::parse_log_filter(&asked).unwrap_or_else(|e| {
        eprintln!("warning: KUBECTL_GPU_LOG {}; logging warnings only", escape(&e.to_string()));
        logging::parse_log_filter(QUIET).unwrap_or_default()
    });
    logging::init(filter, logging::LogFormat::Text);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(app::run(&cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // `kubectl gpu nodes | head`: the reader went away; nothing left to say.
        Err(app::AppError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            // API errors quote the server, and through it exporters and Node fields.
            eprintln!("error: {}", escape(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
