//! fake-kubelet binary: serves pod-resources v1 for a scenario on a unix socket and writes
//! the procfs and pod log trees the exporter reads.
//!
//! `SIGUSR1` drops the socket (as a kubelet that died), `SIGUSR2` restores it (as a
//! restarted kubelet); `SIGTERM` / `SIGINT` remove it and exit.
//!
//! `fake-kubelet join --node ...` instead runs simulated nodes that join a real API
//! server (see the library's `join` module).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

use clap::Parser;
use fake_kubelet::KubeletServer;
use fake_nvml::scenario::Scenario;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "fake-kubelet",
    version,
    about = "A simulated kubelet: pod-resources v1, /proc and /var/log/pods from a fake-nvml scenario"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    /// The scenario (the same file the simulated NVML library reads).
    #[arg(long, env = "FAKE_NVML_SCENARIO")]
    scenario: Option<PathBuf>,
    /// The node's name: the pool of its DRA driver's devices is named after it.
    #[arg(long, env = "NODE_NAME", default_value = "sim-node")]
    node_name: String,
    /// Where to serve pod-resources v1.
    #[arg(long, default_value = "/var/lib/kubelet/pod-resources/kubelet.sock")]
    socket: PathBuf,
    /// Where to write `<pid>/cgroup` and `<pid>/stat` for the scenario's GPU processes.
    #[arg(long)]
    procfs: Option<PathBuf>,
    /// Where to write `<namespace>_<pod>_<uid>/<container>/` for the scenario's pods.
    #[arg(long)]
    pod_logs: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Simulated GPU nodes that join a real API server: each registers its Node, keeps it
    /// Ready, and runs the pods bound to it with devices, processes and load.
    Join(JoinArgs),
}

#[derive(Debug, clap::Args)]
struct JoinArgs {
    /// A node: name=N,scenario=FILE,kubeconfig=FILE[,pod-cidr=a.b.c.0/24][,address=IP]
    /// [,replicas=R (time-slicing replicas per whole GPU)][,mig-config=NAME]. Repeat for
    /// more nodes. The kubeconfig holds the node's identity (system:node:N).
    #[arg(long = "node", required = true)]
    nodes: Vec<fake_kubelet::join::NodeArg>,
    /// Each node's files go to DIR/<name>/: scenario.yaml (for FAKE_NVML_SCENARIO with
    /// FAKE_NVML_LIVE=1), kubelet.sock, proc/, pods/.
    #[arg(long)]
    dir: PathBuf,
    /// The load file, read again when it changes (see the join::load module).
    #[arg(long)]
    load: Option<PathBuf>,
    /// The kubelet version the Nodes report.
    #[arg(long, default_value = "v1.37.2")]
    kubelet_version: String,
}

#[derive(Debug, Clone, Copy)]
enum Command {
    Drop,
    Restore,
    Stop,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-kubelet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(Sub::Join(join)) = &args.command {
        return run_join(join);
    }
    let Some(scenario_path) = &args.scenario else {
        anyhow::bail!("--scenario (or FAKE_NVML_SCENARIO) is required, or use `fake-kubelet join`");
    };
    let scenario = Scenario::load(scenario_path)?;
    if let Some(dir) = &args.procfs {
        fake_kubelet::procfs::write_tree(&scenario, dir)?;
    }
    if let Some(dir) = &args.pod_logs {
        fake_kubelet::pod_logs::write_tree(&scenario, dir)?;
    }
    let mut server = KubeletServer::start(&args.socket, fake_kubelet::lister(&scenario, &args.node_name))?;
    tracing::info!(socket = %args.socket.display(), pods = scenario.pods.len(), "serving pod-resources v1");
    let (commands, received) = mpsc::channel();
    std::thread::Builder::new().name("signals".into()).spawn(move || forward_signals(&commands))?;
    while let Ok(command) = received.recv() {
        match command {
            Command::Drop => {
                server.drop_socket();
                tracing::info!("socket dropped");
            }
            Command::Restore => {
                server.restore_socket()?;
                tracing::info!("socket restored");
            }
            Command::Stop => break,
        }
    }
    Ok(())
}

fn run_join(args: &JoinArgs) -> anyhow::Result<()> {
    let config = fake_kubelet::join::JoinConfig {
        nodes: args.nodes.clone(),
        dir: args.dir.clone(),
        load: args.load.clone(),
        kubelet_version: args.kubelet_version.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            result = fake_kubelet::join::run(config) => Ok(result?),
            _ = term.recv() => Ok(()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

/// Turns signals into commands for the main thread.
fn forward_signals(commands: &mpsc::Sender<Command>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        let _ = commands.send(Command::Stop);
        return;
    };
    runtime.block_on(async {
        let (Ok(mut drop_signal), Ok(mut restore_signal), Ok(mut term)) =
            (signal(SignalKind::user_defined1()), signal(SignalKind::user_defined2()), signal(SignalKind::terminate()))
        else {
            let _ = commands.send(Command::Stop);
            return;
        };
        loop {
            let command = tokio::select! {
                _ = drop_signal.recv() => Command::Drop,
                _ = restore_signal.recv() => Command::Restore,
                _ = term.recv() => Command::Stop,
                _ = tokio::signal::ctrl_c() => Command::Stop,
            };
            let stop = matches!(command, Command::Stop);
            if commands.send(command).is_err() || stop {
                return;
            }
        }
    });
}
