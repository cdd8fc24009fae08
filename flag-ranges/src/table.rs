//! Test support: the checks every binary's table of range flags goes through
//! (`exporter/tests/cli_ranges.rs`, `metrics-adapter/tests/cli_ranges.rs`). A binary
//! lists one [`Row`] per duration or number flag; the checks fail (panic) when a flag
//! has no row, a row names no flag, the help text omits the range, a bound is refused,
//! or a value just outside is accepted or refused without naming flag, variable and
//! range.

use std::any::TypeId;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One flag: its long name, variable, range as stated, the two bounds (accepted) and a
/// value just outside each bound (refused).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Long name, without `--`.
    pub flag: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// The range as help and docs state it.
    pub range: &'static str,
    /// The two bounds.
    pub inside: [&'static str; 2],
    /// A value just outside each bound.
    pub outside: [&'static str; 2],
}

/// A [`Row`], for `const` tables.
pub const fn row(
    flag: &'static str,
    env: &'static str,
    range: &'static str,
    inside: [&'static str; 2],
    outside: [&'static str; 2],
) -> Row {
    Row { flag, env, range, inside, outside }
}

/// Whether an argument's value is a duration or a number.
fn is_numeric(parser: &clap::builder::ValueParser) -> bool {
    let id = parser.type_id();
    [
        TypeId::of::<Duration>(),
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i8>(),
        TypeId::of::<i16>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<isize>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ]
    .iter()
    .any(|t| id == *t)
}

/// Every duration or number argument of `command`, its subcommands' included.
pub fn numeric_arguments(command: &clap::Command) -> Vec<clap::Arg> {
    let mut out: Vec<clap::Arg> =
        command.get_arguments().filter(|a| is_numeric(a.get_value_parser())).cloned().collect();
    for sub in command.get_subcommands() {
        out.extend(numeric_arguments(sub));
    }
    out
}

/// Every duration or number argument has a row with its variable and a help text that
/// states the range, and every row is such an argument.
pub fn check_rows_cover(command: &clap::Command, rows: &[Row]) {
    let numeric = numeric_arguments(command);
    for arg in &numeric {
        let long = arg.get_long().unwrap_or_else(|| panic!("{} has no long name", arg.get_id()));
        let row = rows.iter().find(|r| r.flag == long);
        let row = row.unwrap_or_else(|| panic!("--{long} takes a duration or number but has no row in ROWS"));
        let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        assert_eq!(env.as_deref(), Some(row.env), "--{long}: its variable");
        let help = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
        assert!(help.contains(row.range), "--{long}: the help text does not state the range {}: {help}", row.range);
    }
    for row in rows {
        assert!(
            numeric.iter().any(|a| a.get_long() == Some(row.flag)),
            "row --{} is not a duration or number flag",
            row.flag
        );
    }
    assert_eq!(numeric.len(), rows.len(), "one row per flag");
}

/// Each bound is accepted by `parse(flag, value)`; a value just outside is refused as a
/// validation error that names the flag, the variable, the range and the value.
pub fn check_bounds<T>(rows: &[Row], parse: impl Fn(&str, &str) -> Result<T, clap::Error>) {
    for row in rows {
        for value in row.inside {
            if let Err(e) = parse(row.flag, value) {
                panic!("--{}={value} is at a bound of {} and must be accepted: {e}", row.flag, row.range);
            }
        }
        for value in row.outside {
            let err = match parse(row.flag, value) {
                Ok(_) => panic!("--{}={value} is outside {} and must be refused", row.flag, row.range),
                Err(e) => e,
            };
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "--{}={value}", row.flag);
            let text = err.to_string();
            for part in [format!("--{}", row.flag), row.env.to_owned(), row.range.to_owned(), format!("'{value}'")] {
                assert!(text.contains(&part), "--{}={value}: the refusal lacks {part:?}: {text}", row.flag);
            }
        }
    }
}

/// Runs a command to its end and returns its exit code and stderr; fails if it is still
/// running after `limit` (a value that should have been refused started the program).
pub fn run_to_exit(mut command: Command, limit: Duration) -> (Option<i32>, String) {
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => panic!("{command:?}: {e}"),
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            panic!("{command:?} did not exit within {limit:?} (so it was not refused); stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    (status.code(), stderr)
}

/// Every out-of-range value, set through the flag's variable on the real binary
/// (`command(row, value)` builds the invocation), stops it with exit code 2 and a
/// message naming the flag, the variable and the range.
pub fn check_refused_from_env(rows: &[Row], command: impl Fn(&Row, &str) -> Command) {
    for row in rows {
        for value in row.outside {
            let (code, stderr) = run_to_exit(command(row, value), Duration::from_secs(20));
            assert_eq!(code, Some(2), "{}={value}: {stderr}", row.env);
            for part in [format!("--{}", row.flag), row.env.to_owned(), row.range.to_owned()] {
                assert!(stderr.contains(&part), "{}={value}: the refusal lacks {part:?}: {stderr}", row.env);
            }
        }
    }
}
