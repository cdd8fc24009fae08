//! Range-checked value parsers for the duration and number flags of every binary of the
//! project (gpu-exporter, gpu-metrics-adapter), so that a value that can never work is
//! refused while the command line is parsed, in one wording everywhere:
//!
//! ```text
//! error: invalid value '500' for '--health.temperature-threshold <CELSIUS>':
//! 500 is outside the valid range 60 to 105 (flag --health.temperature-threshold,
//! variable TEMPERATURE_THRESHOLD)
//! ```
//!
//! clap alone names only the flag, even when the value was read from its environment
//! variable; [`Bounded`] adds the variable and the range. [`duration`] is the one
//! duration syntax every duration flag reads ([`parse_duration`]; the health loop's flags
//! also take bare seconds, [`parse_duration_or_seconds`]). [`table`] holds the checks
//! each binary's table-driven range test runs.

#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::builder::TypedValueParser;

pub mod duration;
pub mod table;

pub use duration::{parse_duration, parse_duration_or_seconds, show_duration};

/// A clap value parser that parses with `parse`, then refuses anything outside
/// `min..=max`.
#[derive(Clone, Copy)]
pub struct Bounded<T: 'static> {
    parse: fn(&str) -> Result<T, String>,
    show: fn(&T) -> String,
    min: T,
    max: T,
}

impl<T> fmt::Debug for Bounded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded").field("range", &self.range()).finish()
    }
}

impl Bounded<Duration> {
    /// A duration flag read by `parse`: [`parse_duration`], or
    /// [`parse_duration_or_seconds`] where bare seconds are accepted.
    pub fn duration(parse: fn(&str) -> Result<Duration, String>, min: Duration, max: Duration) -> Self {
        Bounded { parse, show: |d| show_duration(*d), min, max }
    }
}

impl<T: FromStr + fmt::Display> Bounded<T> {
    /// A number flag (`u16`, `u32`, `u64`, `usize`, `f64`, ...).
    pub fn number(min: T, max: T) -> Self {
        Bounded { parse: parse_number::<T>, show: ToString::to_string, min, max }
    }
}

impl<T> Bounded<T> {
    /// A flag of any ordered type (a release number, say): read by `parse`, shown in
    /// the range by `show`.
    pub fn new(parse: fn(&str) -> Result<T, String>, show: fn(&T) -> String, min: T, max: T) -> Self {
        Bounded { parse, show, min, max }
    }

    /// The range as help texts and docs state it, e.g. `100ms to 5m`.
    pub fn range(&self) -> String {
        format!("{} to {}", (self.show)(&self.min), (self.show)(&self.max))
    }
}

impl<T: PartialOrd> Bounded<T> {
    /// Parses and range-checks one value; the error says why and gives the range.
    pub fn check(&self, text: &str) -> Result<T, String> {
        let value = (self.parse)(text).map_err(|e| format!("{e}; valid: {}", self.range()))?;
        if value >= self.min && value <= self.max {
            Ok(value)
        } else {
            Err(format!("{} is outside the valid range {}", text.trim(), self.range()))
        }
    }
}

/// `flag --x, variable Y`: how a refusal names where a value came from.
fn argument_names(arg: Option<&clap::Arg>) -> String {
    let Some(arg) = arg else { return "this argument".into() };
    let flag = arg.get_long().map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
    match arg.get_env() {
        Some(env) => format!("flag {flag}, variable {}", env.to_string_lossy()),
        None => format!("flag {flag}"),
    }
}

impl<T: PartialOrd + Clone + Send + Sync + 'static> TypedValueParser for Bounded<T> {
    type Value = T;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<T, clap::Error> {
        let this = self.clone();
        let names = argument_names(arg);
        let check = move |text: &str| this.check(text).map_err(|reason| format!("{reason} ({names})"));
        check.parse_ref(cmd, arg, value)
    }
}

fn parse_number<T: FromStr>(text: &str) -> Result<T, String> {
    let kind = if "0.5".parse::<T>().is_ok() { "a number" } else { "a whole number" };
    text.trim().parse::<T>().map_err(|_| format!("{text:?} is not {kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_refusals_give_the_range() {
        let b = Bounded::number(1u32, 20);
        assert_eq!(b.range(), "1 to 20");
        assert_eq!(b.check("1"), Ok(1));
        assert_eq!(b.check("20"), Ok(20));
        assert_eq!(b.check("0").unwrap_err(), "0 is outside the valid range 1 to 20");
        assert_eq!(b.check("x").unwrap_err(), "\"x\" is not a whole number; valid: 1 to 20");
        assert_eq!(b.check("1.5").unwrap_err(), "\"1.5\" is not a whole number; valid: 1 to 20");
        assert_eq!(b.check("-1").unwrap_err(), "\"-1\" is not a whole number; valid: 1 to 20");
        let f = Bounded::number(0.0f64, 1.0);
        assert!(f.check("0.5").is_ok() && f.check("1.5").is_err());
        assert!(f.check("NaN").is_err(), "NaN is in no range");
        assert_eq!(f.check("y").unwrap_err(), "\"y\" is not a number; valid: 0 to 1");
        let d = Bounded::duration(parse_duration, Duration::from_secs(1), Duration::from_secs(300));
        assert_eq!(d.range(), "1s to 5m");
        assert!(d.check("0s").unwrap_err().contains("outside the valid range 1s to 5m"));
    }

    #[test]
    fn any_ordered_type_with_its_own_reader() {
        fn pair(text: &str) -> Result<(u8, u8), String> {
            let (a, b) = text.split_once('.').ok_or_else(|| format!("{text:?} is not MAJOR.MINOR"))?;
            Ok((
                a.parse().map_err(|_| format!("{a:?} is not a number"))?,
                b.parse().map_err(|_| format!("{b:?} is not a number"))?,
            ))
        }
        let b = Bounded::new(pair, |(a, b)| format!("{a}.{b}"), (3, 0), (4, 8));
        assert_eq!(b.range(), "3.0 to 4.8");
        assert_eq!(b.check("4.8"), Ok((4, 8)));
        assert_eq!(b.check("4.9").unwrap_err(), "4.9 is outside the valid range 3.0 to 4.8");
        assert_eq!(b.check("4").unwrap_err(), "\"4\" is not MAJOR.MINOR; valid: 3.0 to 4.8");
    }

    #[test]
    fn clap_refusals_name_the_flag_and_the_variable() {
        let cmd = clap::Command::new("x")
            .arg(clap::Arg::new("n").long("count").env("X_COUNT").value_parser(Bounded::number(1u32, 20)));
        let e = cmd.clone().try_get_matches_from(["x", "--count=21"]).unwrap_err().to_string();
        assert!(e.contains("21 is outside the valid range 1 to 20 (flag --count, variable X_COUNT)"), "{e}");
        let m = cmd.try_get_matches_from(["x", "--count=3"]).unwrap();
        assert_eq!(m.get_one::<u32>("n"), Some(&3));
    }
}
