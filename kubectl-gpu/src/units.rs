//! How numbers are written in tables: every figure carries its unit. Memory is in
//! binary units (GiB, MiB), as `nvidia-smi` and Kubernetes write memory; percentages,
//! watts and degrees are rounded to whole numbers, dollars to cents.
//!
//! A reading the exporter does not give (not supported on the model, or withheld on a
//! stale GPU) is `-`; a reading of a node whose exporter did not answer is
//! [`UNKNOWN`].

/// The text of a figure that could not be read.
pub const UNKNOWN: &str = "unknown";
/// The text of a figure that does not exist (not supported, not applicable).
pub const NONE: &str = "-";

const GIB: f64 = 1_073_741_824.0;
const MIB: f64 = 1_048_576.0;

pub fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.into(), |v| format!("{}%", v.round() as i64))
}

pub fn watts(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.into(), |v| format!("{} W", v.round() as i64))
}

pub fn celsius(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.into(), |v| format!("{}°C", v.round() as i64))
}

pub fn mhz(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.into(), |v| format!("{} MHz", v.round() as i64))
}

pub fn dollars(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.into(), |v| format!("${v:.2}/h"))
}

/// Bytes in the largest binary unit that keeps the figure at 1 or more.
pub fn bytes(v: Option<f64>) -> String {
    match v {
        None => NONE.into(),
        Some(v) if v >= GIB => format!("{:.1} GiB", v / GIB),
        Some(v) if v >= MIB => format!("{:.0} MiB", v / MIB),
        Some(v) => format!("{} B", v.round() as i64),
    }
}

/// `used/total` in one unit, chosen by the total: `36.0/80.0 GiB`.
pub fn memory(used: Option<f64>, total: Option<f64>) -> String {
    match (used, total) {
        (None, None) => NONE.into(),
        (Some(u), None) => bytes(Some(u)),
        (used, Some(t)) => {
            let (div, unit, places) = if t >= GIB { (GIB, "GiB", 1) } else { (MIB, "MiB", 0) };
            let used = used.map_or_else(|| NONE.into(), |u| format!("{:.*}", places, u / div));
            format!("{used}/{:.*} {unit}", places, t / div)
        }
    }
}

/// GPUs' worth, two decimals: `2.43`.
pub fn gpus(v: f64) -> String {
    format!("{v:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_carry_units() {
        assert_eq!(percent(Some(73.6)), "74%");
        assert_eq!(percent(None), "-");
        assert_eq!(watts(Some(318.4)), "318 W");
        assert_eq!(celsius(Some(66.0)), "66°C");
        assert_eq!(mhz(Some(1410.0)), "1410 MHz");
        assert_eq!(dollars(Some(1.5)), "$1.50/h");
        assert_eq!(dollars(Some(3.5 * 3.0 / 7.0)), "$1.50/h");
        assert_eq!(bytes(Some(85_899_345_920.0)), "80.0 GiB");
        assert_eq!(bytes(Some(536_870_912.0)), "512 MiB");
        assert_eq!(bytes(Some(12.0)), "12 B");
        assert_eq!(memory(Some(38_273_024_000.0), Some(85_899_345_920.0)), "35.6/80.0 GiB");
        assert_eq!(memory(Some(0.0), Some(536_870_912.0)), "0/512 MiB");
        assert_eq!(memory(None, Some(GIB)), "-/1.0 GiB");
        assert_eq!(memory(None, None), "-");
        assert_eq!(gpus(3.0 / 7.0 + 0.25), "0.68");
    }
}
