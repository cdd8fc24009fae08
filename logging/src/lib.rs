//! The one logging setup of the project's binaries (gpu-exporter, gpu-metrics-adapter,
//! kubectl-gpu): the log filter syntax and the subscriber each installs.
//!
//! `--log.level` takes a level (`error`, `warn`, `info`, `debug`, `trace`, `off`) or
//! comma-separated `target=level` pairs with an optional bare default level, e.g.
//! `info,gpu_exporter::health=debug`. It is read into `tracing_subscriber`'s `Targets`,
//! not `EnvFilter`: `EnvFilter` builds its directives with regex and aho-corasick at
//! start, which kept about 0.4 MiB of their code resident in the exporter, a process that
//! logs a few lines a minute (docs/benchmarks.md, "Exporter memory"). `EnvFilter`'s span
//! and field filters were never documented for any binary. A value that is not a level
//! or such a pair is refused at start, not read as a target name that matches nothing.

#![forbid(unsafe_code)]

use tracing_subscriber::filter::{LevelFilter, Targets};

/// A parsed `--log.level`: a default level and per-target levels.
pub type LogFilter = Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use clap::ValueEnum;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for cluster log pipelines.
    Json,
}

/// Reads a `--log.level` value; the error names the part that is neither a level nor a
/// `target=level` pair.
pub fn parse_log_filter(value: &str) -> Result<Targets, String> {
    let mut targets = Targets::new();
    for part in value.split(',').map(str::trim).filter(|part| !part.is_empty()) {
        targets = match part.split_once('=') {
            None => targets.with_default(parse_level(part)?),
            Some((target, level)) => {
                if !is_target_path(target) {
                    return Err(format!(
                        "{part:?}: {target:?} is not a target (a Rust module path such as gpu_exporter::health)"
                    ));
                }
                targets.with_target(target, parse_level(level)?)
            }
        };
    }
    if targets.default_level().is_none() && targets.iter().next().is_none() {
        return Err("empty: give a level (error, warn, info, debug, trace, off)".to_owned());
    }
    Ok(targets)
}

fn parse_level(level: &str) -> Result<LevelFilter, String> {
    level
        .parse::<LevelFilter>()
        .map_err(|_| format!("{level:?} is not a level: one of error, warn, info, debug, trace, off"))
}

fn is_target_path(target: &str) -> bool {
    !target.is_empty()
        && target.split("::").all(|segment| {
            !segment.is_empty() && segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// Installs the global subscriber: lines on stderr, colour only on a terminal.
pub fn init(filter: Targets, format: LogFormat) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry.with(lines).init(),
        LogFormat::Json => registry.with(lines.json().flatten_event(true)).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn a_bare_level_is_the_default() {
        let filter = parse_log_filter("debug").unwrap();
        assert_eq!(filter.default_level(), Some(LevelFilter::DEBUG));
        assert!(filter.would_enable("anything", &Level::DEBUG));
        assert!(!filter.would_enable("anything", &Level::TRACE));
    }

    #[test]
    fn target_pairs_override_the_default() {
        let filter = parse_log_filter("warn, gpu_exporter::health=trace").unwrap();
        assert!(filter.would_enable("gpu_exporter::health::loop", &Level::TRACE));
        assert!(!filter.would_enable("gpu_exporter::collect", &Level::INFO));
        assert!(filter.would_enable("gpu_exporter::collect", &Level::WARN));
    }

    #[test]
    fn a_pair_alone_logs_nothing_else() {
        let filter = parse_log_filter("gpu_exporter=info").unwrap();
        assert!(filter.would_enable("gpu_exporter::web", &Level::INFO));
        assert!(!filter.would_enable("hyper", &Level::ERROR));
    }

    #[test]
    fn bad_values_name_what_is_wrong() {
        let misspelt = parse_log_filter("inf").unwrap_err();
        assert!(misspelt.contains("\"inf\" is not a level"), "{misspelt}");
        let bad_level = parse_log_filter("info,gpu_exporter=loud").unwrap_err();
        assert!(bad_level.contains("\"loud\" is not a level"), "{bad_level}");
        let bad_target = parse_log_filter("a b=info").unwrap_err();
        assert!(bad_target.contains("\"a b\" is not a target"), "{bad_target}");
        let span_filter = parse_log_filter("gpu_exporter[cycle]=debug").unwrap_err();
        assert!(span_filter.contains("is not a target"), "{span_filter}");
        assert!(parse_log_filter(" , ").unwrap_err().starts_with("empty"));
    }
}
