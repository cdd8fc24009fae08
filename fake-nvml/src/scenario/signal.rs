//! Values that move over time: the building block of every simulated reading.
//!
//! A signal is written in a scenario either as a bare number (a constant) or as a
//! one-key map naming its shape. Every shape is a pure function of scenario time, so
//! a frozen clock gives the same reading on every call (the golden tests rely on it).

use serde::Deserialize;

/// A reading as a function of scenario time `t` in seconds.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Signal {
    /// `45`: the same value at every instant.
    Constant(f64),
    /// `{ramp: {...}}`, `{noise: {...}}`, `{periodic: {...}}`, `{steps: [...]}`.
    Shaped(Shape),
}

/// The non-constant shapes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Shape {
    /// Linear from `from` to `to` between `start_s` and `start_s + over_s`, flat outside.
    Ramp(Ramp),
    /// `mean` plus deterministic pseudo-random noise within `amplitude`, a new draw every
    /// `every_s` seconds.
    Noise(Noise),
    /// A repeating wave between `min` and `max`.
    Periodic(Periodic),
    /// Piecewise constant: `[[at_s, value], ...]`, sorted by time; before the first
    /// step the first value holds.
    Steps(Vec<(f64, f64)>),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ramp {
    pub from: f64,
    pub to: f64,
    #[serde(default)]
    pub start_s: f64,
    pub over_s: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Noise {
    pub mean: f64,
    pub amplitude: f64,
    #[serde(default = "default_noise_period")]
    pub every_s: f64,
    #[serde(default)]
    pub seed: u64,
}

fn default_noise_period() -> f64 {
    1.0
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Periodic {
    pub min: f64,
    pub max: f64,
    pub period_s: f64,
    #[serde(default)]
    pub phase_s: f64,
    #[serde(default)]
    pub wave: Wave,
}

/// The waveform of a periodic signal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wave {
    #[default]
    Sine,
    /// `max` for the first half of each period, `min` for the second.
    Square,
    Triangle,
}

impl Signal {
    /// The value at scenario time `t` (seconds).
    pub fn at(&self, t: f64) -> f64 {
        match self {
            Signal::Constant(v) => *v,
            Signal::Shaped(shape) => shape.at(t),
        }
    }

    /// Checks the parameters; the message names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Signal::Constant(v) if !v.is_finite() => Err(format!("{v} is not a finite number")),
            Signal::Constant(_) => Ok(()),
            Signal::Shaped(Shape::Ramp(r)) => {
                if !is_positive(r.over_s) {
                    return Err(format!("ramp over_s must be > 0, got {}", r.over_s));
                }
                finite(&[r.from, r.to, r.start_s])
            }
            Signal::Shaped(Shape::Noise(n)) => {
                if !is_positive(n.every_s) {
                    return Err(format!("noise every_s must be > 0, got {}", n.every_s));
                }
                if n.amplitude < 0.0 {
                    return Err(format!("noise amplitude must be >= 0, got {}", n.amplitude));
                }
                finite(&[n.mean, n.amplitude])
            }
            Signal::Shaped(Shape::Periodic(p)) => {
                if !is_positive(p.period_s) {
                    return Err(format!("periodic period_s must be > 0, got {}", p.period_s));
                }
                if p.min > p.max {
                    return Err(format!("periodic min {} is above max {}", p.min, p.max));
                }
                finite(&[p.min, p.max, p.phase_s])
            }
            Signal::Shaped(Shape::Steps(steps)) => {
                if steps.is_empty() {
                    return Err("steps needs at least one [at_s, value] pair".into());
                }
                if steps.windows(2).any(|w| w[1].0 < w[0].0) {
                    return Err("steps must be sorted by time".into());
                }
                finite(&steps.iter().flat_map(|&(a, b)| [a, b]).collect::<Vec<_>>())
            }
        }
    }
}

/// True for a finite number above zero (false for NaN).
fn is_positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

fn finite(values: &[f64]) -> Result<(), String> {
    match values.iter().find(|v| !v.is_finite()) {
        Some(v) => Err(format!("{v} is not a finite number")),
        None => Ok(()),
    }
}

impl Shape {
    fn at(&self, t: f64) -> f64 {
        match self {
            Shape::Ramp(r) => {
                let progress = ((t - r.start_s) / r.over_s).clamp(0.0, 1.0);
                r.from + (r.to - r.from) * progress
            }
            Shape::Noise(n) => {
                let slot = (t / n.every_s).floor() as i64;
                n.mean + n.amplitude * unit_noise(n.seed, slot)
            }
            Shape::Periodic(p) => {
                let phase = ((t + p.phase_s) / p.period_s).rem_euclid(1.0);
                let level = match p.wave {
                    Wave::Sine => 0.5 - 0.5 * (phase * std::f64::consts::TAU).cos(),
                    Wave::Square => {
                        if phase < 0.5 {
                            1.0
                        } else {
                            0.0
                        }
                    }
                    Wave::Triangle => 1.0 - (2.0 * phase - 1.0).abs(),
                };
                p.min + (p.max - p.min) * level
            }
            Shape::Steps(steps) => {
                steps.iter().rev().find(|(at, _)| *at <= t).or(steps.first()).map_or(0.0, |(_, v)| *v)
            }
        }
    }
}

/// A deterministic draw in [-1, 1] for (seed, slot): splitmix64 of both.
fn unit_noise(seed: u64, slot: i64) -> f64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(slot as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Signal {
        serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn constant_is_a_bare_number() {
        assert_eq!(parse("42").at(1e6), 42.0);
    }

    #[test]
    fn ramp_is_flat_outside_its_window() {
        let s = parse("{ramp: {from: 10, to: 90, start_s: 100, over_s: 40}}");
        assert_eq!(s.at(0.0), 10.0);
        assert_eq!(s.at(120.0), 50.0);
        assert_eq!(s.at(1000.0), 90.0);
    }

    #[test]
    fn noise_is_deterministic_and_bounded() {
        let s = parse("{noise: {mean: 50, amplitude: 5, seed: 7}}");
        for t in 0..500 {
            let v = s.at(t as f64);
            assert!((45.0..=55.0).contains(&v), "{v}");
            assert_eq!(v, s.at(t as f64 + 0.5), "same slot, same draw");
        }
        assert_ne!(s.at(0.0), s.at(1.0));
    }

    #[test]
    fn square_wave_alternates_between_min_and_max() {
        let s = parse("{periodic: {min: 85, max: 95, period_s: 20, wave: square}}");
        assert_eq!(s.at(0.0), 95.0);
        assert_eq!(s.at(9.9), 95.0);
        assert_eq!(s.at(10.0), 85.0);
        assert_eq!(s.at(25.0), 95.0);
    }

    #[test]
    fn sine_starts_at_min_and_peaks_mid_period() {
        let s = parse("{periodic: {min: 0, max: 100, period_s: 60}}");
        assert!(s.at(0.0).abs() < 1e-9);
        assert!((s.at(30.0) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn steps_hold_until_the_next_step() {
        let s = parse("{steps: [[0, 10], [30, 80], [60, 5]]}");
        assert_eq!(s.at(-1.0), 10.0);
        assert_eq!(s.at(29.0), 10.0);
        assert_eq!(s.at(30.0), 80.0);
        assert_eq!(s.at(1e4), 5.0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = parse("{ramp: {from: 0, to: 1, over_s: 0}}").validate().unwrap_err();
        assert!(err.contains("over_s"), "{err}");
        let err = parse("{periodic: {min: 9, max: 1, period_s: 5}}").validate().unwrap_err();
        assert!(err.contains("min 9 is above max 1"), "{err}");
        let err = parse("{steps: [[5, 1], [1, 2]]}").validate().unwrap_err();
        assert!(err.contains("sorted"), "{err}");
    }

    #[test]
    fn unknown_shape_is_refused() {
        assert!(serde_yaml_ng::from_str::<Signal>("{zigzag: {a: 1}}").is_err());
    }
}
