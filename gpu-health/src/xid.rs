//! The XID classification table: what the health loop does when a GPU reports an XID.
//!
//! An XID is the driver's report of a GPU error, by code. Many codes describe a fault
//! in a user's program (an illegal memory access, a kernel that was killed) and say
//! nothing about the hardware; quarantining a node for them would let one buggy job
//! cordon the fleet. Others say the GPU itself is broken until it is reset or the node
//! is rebooted. Every code the loop acts on is listed in [`DEFAULT_TABLE`] with the
//! reason; codes not listed are recorded only. `--health.xid-classes` overrides the
//! class of any code (`docs/health.md` prints the same table).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Why an XID override was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum XidError {
    #[error("--health.xid-classes {0:?}: expected CODE=CLASS, e.g. 79=reset")]
    Syntax(String),
    #[error("--health.xid-classes {entry:?}: {code:?} is not an XID code (a whole number)")]
    Code { entry: String, code: String },
    #[error("--health.xid-classes {entry:?}: class {class:?} is not one of event, quarantine, reset, reboot")]
    Class { entry: String, class: String },
}

pub type Result<T, E = XidError> = std::result::Result<T, E>;

/// What an XID code means for the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XidClass {
    /// Recorded (log line, `gpu_xid_errors_total`), no action: an application fault.
    Event,
    /// Quarantine at once; recover like any other signal (healthy checks and the
    /// minimum quarantine time), no reset needed.
    Quarantine,
    /// Quarantine at once and keep it until the GPU has been reset (or the node
    /// rebooted).
    Reset,
    /// Quarantine at once and keep it until the node has been rebooted.
    Reboot,
}

impl XidClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Event => "event",
            Self::Quarantine => "quarantine",
            Self::Reset => "reset",
            Self::Reboot => "reboot",
        }
    }
}

impl FromStr for XidClass {
    type Err = ();

    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        match s.trim().to_ascii_lowercase().as_str() {
            "event" => Ok(Self::Event),
            "quarantine" => Ok(Self::Quarantine),
            "reset" => Ok(Self::Reset),
            "reboot" => Ok(Self::Reboot),
            _ => Err(()),
        }
    }
}

impl fmt::Display for XidClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The shipped classification: code, class, what the code means and why the class.
pub const DEFAULT_TABLE: &[(u64, XidClass, &str)] = &[
    (13, XidClass::Event, "graphics engine exception: an illegal instruction or access in a user kernel"),
    (31, XidClass::Event, "GPU memory page fault: a user kernel touched memory it does not own"),
    (43, XidClass::Event, "GPU stopped processing: a user program faulted and its channel was reset"),
    (45, XidClass::Event, "preemptive cleanup: channels torn down after a user program's earlier error"),
    (48, XidClass::Reset, "double-bit (uncorrectable) ECC error: memory contents are corrupt until a reset"),
    (61, XidClass::Reset, "internal micro-controller breakpoint: the GPU's firmware stopped"),
    (62, XidClass::Reset, "internal micro-controller halt: the GPU's firmware halted"),
    (63, XidClass::Event, "ECC page retirement or row remapping recorded: watched through the pending-remap signal"),
    (64, XidClass::Reset, "ECC page retirement or row remapping could not be recorded"),
    (68, XidClass::Event, "video processor exception: usually the decoding program's input"),
    (74, XidClass::Reset, "NVLink error: a link is down or degraded until the GPU is reset"),
    (79, XidClass::Reset, "GPU has fallen off the bus: it answers nothing until it is reset"),
    (92, XidClass::Event, "high single-bit ECC rate: watched through the corrected-ECC threshold"),
    (94, XidClass::Reset, "contained ECC error: the affected program was stopped; a reset remaps the row"),
    (95, XidClass::Reset, "uncontained ECC error: every program on the GPU may have read corrupt memory"),
    (119, XidClass::Reset, "GSP RPC timeout: the GPU system processor stopped answering the driver"),
    (120, XidClass::Reset, "GSP error: the GPU system processor reported a fatal error"),
    (140, XidClass::Reset, "unrecovered ECC error: the driver could not recover the memory"),
];

/// One code's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidRule {
    pub class: XidClass,
    pub meaning: String,
}

/// The classification in force: the default table with the configured overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidTable {
    rules: BTreeMap<u64, XidRule>,
}

impl Default for XidTable {
    fn default() -> Self {
        let rules = DEFAULT_TABLE
            .iter()
            .map(|(code, class, meaning)| (*code, XidRule { class: *class, meaning: (*meaning).to_string() }))
            .collect();
        XidTable { rules }
    }
}

impl XidTable {
    /// The default table with `overrides` (`CODE=CLASS` entries) applied.
    pub fn with_overrides<S: AsRef<str>>(overrides: &[S]) -> Result<Self> {
        let mut table = XidTable::default();
        for entry in overrides.iter().map(AsRef::as_ref).map(str::trim).filter(|e| !e.is_empty()) {
            let (code, class) = entry.split_once('=').ok_or_else(|| XidError::Syntax(entry.to_string()))?;
            let code_number: u64 = code
                .trim()
                .parse()
                .map_err(|_| XidError::Code { entry: entry.to_string(), code: code.trim().to_string() })?;
            let class: XidClass = class
                .parse()
                .map_err(|()| XidError::Class { entry: entry.to_string(), class: class.trim().to_string() })?;
            let meaning = table
                .rules
                .get(&code_number)
                .map(|r| r.meaning.clone())
                .unwrap_or_else(|| "not in the default table".to_string());
            table.rules.insert(code_number, XidRule { class, meaning: format!("{meaning} (class set by flag)") });
        }
        Ok(table)
    }

    /// The class of `code`; codes not in the table are recorded only.
    pub fn class(&self, code: u64) -> XidClass {
        self.rules.get(&code).map_or(XidClass::Event, |r| r.class)
    }

    /// What `code` means, for messages.
    pub fn meaning(&self, code: u64) -> &str {
        self.rules.get(&code).map_or("not in the classification table; recorded only", |r| r.meaning.as_str())
    }

    /// Every entry, by code.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &XidRule)> {
        self.rules.iter().map(|(c, r)| (*c, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_codes_have_the_documented_classes() {
        let t = XidTable::default();
        for code in [13, 31, 43, 45, 68] {
            assert_eq!(t.class(code), XidClass::Event, "XID {code}");
        }
        for code in [48, 64, 74, 79, 94, 95, 119, 120] {
            assert_eq!(t.class(code), XidClass::Reset, "XID {code}");
        }
        assert_eq!(t.class(9999), XidClass::Event, "unknown codes are recorded only");
        assert!(t.meaning(79).contains("fallen off the bus"));
    }

    #[test]
    fn overrides_replace_and_add_codes() {
        let t = XidTable::with_overrides(&["13=quarantine", " 9999 = reboot ", ""]).unwrap();
        assert_eq!(t.class(13), XidClass::Quarantine);
        assert_eq!(t.class(9999), XidClass::Reboot);
        assert!(t.meaning(13).ends_with("(class set by flag)"));
        assert_eq!(t.class(79), XidClass::Reset, "others keep the default");
    }

    #[test]
    fn bad_overrides_are_named() {
        assert_eq!(XidTable::with_overrides(&["79"]), Err(XidError::Syntax("79".into())));
        assert!(matches!(XidTable::with_overrides(&["x=reset"]), Err(XidError::Code { .. })));
        let err = XidTable::with_overrides(&["79=panic"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--health.xid-classes \"79=panic\": class \"panic\" is not one of event, quarantine, reset, reboot"
        );
    }

    #[test]
    fn the_default_table_is_sorted_and_has_no_duplicates() {
        let codes: Vec<u64> = DEFAULT_TABLE.iter().map(|(c, _, _)| *c).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }
}
