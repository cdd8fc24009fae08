//! `fake-nvml check FILE...`: validates scenario files the way `nvmlInit` will, so a
//! wrong scenario is caught before the exporter starts.
//!
//! `fake-nvml host-tree SCENARIO ROOT [--library PATH]`: writes what the simulated
//! node's driver puts on the host (`mig-minors`, capability files, device nodes, NUMA
//! nodes; see `fake_nvml::host`) under ROOT, with `usr/lib/<arch>-linux-gnu/libnvidia-ml.so.1`
//! linked to PATH when given, before NVIDIA's device plugin is started on it.

use std::path::Path;
use std::process::ExitCode;

use fake_nvml::host;
use fake_nvml::scenario::Scenario;

const USAGE: &str =
    "usage: fake-nvml check SCENARIO.yaml...\n       fake-nvml host-tree SCENARIO.yaml ROOT [--library PATH]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((command, files)) if command == "check" && !files.is_empty() => check(files),
        Some((command, rest)) if command == "host-tree" => match rest {
            [scenario, root] => host_tree(scenario, root, None),
            [scenario, root, flag, library] if flag == "--library" => host_tree(scenario, root, Some(library)),
            _ => usage(),
        },
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

fn check(files: &[String]) -> ExitCode {
    let mut failed = false;
    for file in files {
        match Scenario::load(Path::new(file)) {
            Ok(s) => println!("{file}: ok ({} GPUs)", s.gpus.len()),
            Err(e) => {
                eprintln!("{e}");
                failed = true;
            }
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn host_tree(scenario: &str, root: &str, library: Option<&String>) -> ExitCode {
    let scenario = match Scenario::load(Path::new(scenario)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match host::write(&scenario, Path::new(root), library.map(Path::new)) {
        Ok(()) => {
            println!("{root}: simulated host of {} GPUs written", scenario.gpus.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
