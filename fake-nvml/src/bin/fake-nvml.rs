//! `fake-nvml check FILE...`: validates scenario files the way `nvmlInit` will, so a
//! wrong scenario is caught before the exporter starts.

use std::path::Path;
use std::process::ExitCode;

use fake_nvml::scenario::Scenario;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, files)) = args.split_first() else {
        eprintln!("usage: fake-nvml check SCENARIO.yaml...");
        return ExitCode::from(2);
    };
    if command != "check" || files.is_empty() {
        eprintln!("usage: fake-nvml check SCENARIO.yaml...");
        return ExitCode::from(2);
    }
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
