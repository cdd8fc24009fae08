//! `kubectl-gpu`: parse the command line, set up logging, run, map errors to exit codes
//! (0 done, 1 the cluster could not be read, 2 a command line that can never work).

use std::process::ExitCode;

use clap::Parser;
use kubectl_gpu::app;
use kubectl_gpu::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr, quiet by default; KUBECTL_GPU_LOG=debug shows every request.
    // kube logs every error answer itself; the command reports them once, in its words.
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBECTL_GPU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
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
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
