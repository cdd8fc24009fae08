//! The XID classification table: what the health loop does when a GPU reports an XID.
//!
//! An XID is the driver's report of a GPU error, by code. Many codes describe a fault
//! in a user's program (an illegal memory access, a kernel that was killed) and say
//! nothing about the hardware; quarantining a node for them would let one buggy job
//! cordon the fleet. Others say the GPU itself is broken until it is reset or the node
//! is rebooted. [`DEFAULT_TABLE`] lists every code NVIDIA's XID catalog documents as in
//! use on current data-center GPUs, with NVIDIA's recommended action, the loop's class
//! and why; codes not listed (those the catalog marks unused, [`UNUSED_CODES`], and
//! codes newer than the table) are recorded only. `--health.xid-classes` overrides the
//! class of any code (`docs/health.md` prints the same table, and where it differs from
//! NVIDIA's action and from the EKS node monitoring agent's fatal list, [`EKS_FATAL`]).

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

/// NVIDIA's recommended immediate action for a code (the catalog's "resolution bucket",
/// `docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvidiaAction {
    /// Restart the application; the GPU is fine.
    RestartApp,
    /// Informational.
    Ignore,
    /// Stop the GPU's processes and reset it (`nvidia-smi -r`).
    ResetGpu,
    /// Power-cycle the machine (the GPU is gone from PCIe).
    RestartBareMetal,
    /// Restart the virtual machine.
    RestartVm,
    /// Check the board's physical connections.
    CheckMechanicals,
    /// Follow the XID 45 flow: look at the XID that came with it.
    WorkflowXid45,
    /// Reset, then check the SRAM error thresholds (XID 48 flow).
    WorkflowXid48,
    /// Reset the GPU or reboot, then check the links (NVLink flow).
    WorkflowNvlink,
    /// NVLink 5: the subcode decides; the fatal ones raise the recovery action.
    WorkflowNvlink5,
    /// Update software or firmware.
    UpdateSoftware,
    /// No automatic recovery: contact the vendor.
    ContactSupport,
    /// Summarises the recovery action other XIDs need.
    Xid154,
    /// Check the unified-memory driver.
    CheckUvm,
    /// The catalog gives no bucket, only text.
    NotGiven,
}

impl NvidiaAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RestartApp => "RESTART_APP",
            Self::Ignore => "IGNORE",
            Self::ResetGpu => "RESET_GPU",
            Self::RestartBareMetal => "RESTART_BM",
            Self::RestartVm => "RESTART_VM",
            Self::CheckMechanicals => "CHECK_MECHANICALS",
            Self::WorkflowXid45 => "WORKFLOW_XID_45",
            Self::WorkflowXid48 => "WORKFLOW_XID_48",
            Self::WorkflowNvlink => "WORKFLOW_NVLINK_ERR",
            Self::WorkflowNvlink5 => "WORKFLOW_NVLINK5_ERR",
            Self::UpdateSoftware => "UPDATE_SWFW",
            Self::ContactSupport => "CONTACT_SUPPORT",
            Self::Xid154 => "XID_154",
            Self::CheckUvm => "CHECK_UVM",
            Self::NotGiven => "(none given)",
        }
    }
}

impl fmt::Display for NvidiaAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of the shipped table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidEntry {
    pub code: u64,
    /// The driver's name for the code.
    pub mnemonic: &'static str,
    /// What NVIDIA's catalog recommends.
    pub nvidia: NvidiaAction,
    /// What the loop does.
    pub class: XidClass,
    /// What the code means and why the class.
    pub meaning: &'static str,
}

const fn x(
    code: u64,
    mnemonic: &'static str,
    nvidia: NvidiaAction,
    class: XidClass,
    meaning: &'static str,
) -> XidEntry {
    XidEntry { code, mnemonic, nvidia, class, meaning }
}

use NvidiaAction as N;
use XidClass as C;

const APP: &str = "an engine fault in one program's work; the program is stopped, the GPU is fine";

/// The shipped classification: every code NVIDIA's XID catalog documents as in use on
/// A100, H100, B100 or GB200 (plus 61, used by older GPUs), with NVIDIA's recommended
/// action, the loop's class and why. The codes the catalog marks unused on these GPUs
/// are not listed and so are recorded only. `docs/health.md` prints this table and
/// where it differs from NVIDIA's action and from the EKS node monitoring agent.
pub const DEFAULT_TABLE: &[XidEntry] = &[
    x(
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        N::RestartApp,
        C::Event,
        "a channel stopped processing: the program timed out, the GPU is fine",
    ),
    x(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", N::RestartApp, C::Event, "invalid push buffer stream from a program"),
    x(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        N::RestartApp,
        C::Event,
        "graphics engine exception: an illegal instruction or access in a user kernel",
    ),
    x(14, "ROBUST_CHANNEL_FAKE_ERROR", N::Ignore, C::Event, "an error injected from user space for testing"),
    x(25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", N::RestartApp, C::Event, "illegal push buffer stream from a program"),
    x(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        N::RestartApp,
        C::Event,
        "GPU memory page fault: a user kernel touched memory it does not own",
    ),
    x(
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        N::RestartApp,
        C::Event,
        "corrupted push buffer stream, often PCIe signal quality; a link that fails outright shows as XID 79",
    ),
    x(
        37,
        "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD",
        N::Ignore,
        C::Event,
        "driver firmware error reported to the program",
    ),
    x(
        38,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        N::Ignore,
        C::Event,
        "driver firmware watchdog timeout reported to the program",
    ),
    x(39, "ROBUST_CHANNEL_CE0_ERROR", N::RestartApp, C::Event, APP),
    x(40, "ROBUST_CHANNEL_CE1_ERROR", N::RestartApp, C::Event, APP),
    x(41, "ROBUST_CHANNEL_CE2_ERROR", N::RestartApp, C::Event, APP),
    x(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        N::Ignore,
        C::Event,
        "GPU stopped processing: a user program faulted and its channel was reset",
    ),
    x(
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        N::Ignore,
        C::Event,
        "graphics engine fault during a context switch, reported to the program",
    ),
    x(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        N::WorkflowXid45,
        C::Event,
        "preemptive cleanup: channels torn down after a user program's earlier error",
    ),
    x(
        46,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        N::ResetGpu,
        C::Reset,
        "GPU stopped processing: an engine no longer answers until the GPU is reset",
    ),
    x(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        N::WorkflowXid48,
        C::Reset,
        "double-bit (uncorrectable) ECC error: memory contents are corrupt until a reset",
    ),
    x(
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        N::CheckMechanicals,
        C::Reboot,
        "auxiliary power is not connected to the board: fixing it needs the node powered off",
    ),
    x(60, "ROBUST_CHANNEL_SEC2_ERROR", N::RestartApp, C::Event, APP),
    x(
        61,
        "PMU_BREAKPOINT",
        N::ContactSupport,
        C::Reset,
        "internal micro-controller breakpoint: the GPU's firmware stopped (older GPUs; unused from A100 on)",
    ),
    x(62, "PMU_HALT_ERROR", N::ResetGpu, C::Reset, "internal micro-controller halt: the GPU's firmware halted"),
    x(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        N::Ignore,
        C::Event,
        "ECC page retirement or row remapping recorded: watched through the pending-remap signal",
    ),
    x(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        N::ResetGpu,
        C::Reset,
        "ECC page retirement or row remapping could not be recorded",
    ),
    x(
        66,
        "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION",
        N::Ignore,
        C::Event,
        "illegal register access by the driver, reported to the program",
    ),
    x(
        67,
        "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION",
        N::Ignore,
        C::Event,
        "illegal access by the driver, reported to the program",
    ),
    x(
        68,
        "ROBUST_CHANNEL_NVDEC0_ERROR",
        N::RestartApp,
        C::Event,
        "video processor exception: usually the decoding program's input",
    ),
    x(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", N::RestartApp, C::Event, APP),
    x(70, "ROBUST_CHANNEL_CE3_ERROR", N::RestartApp, C::Event, APP),
    x(71, "ROBUST_CHANNEL_CE4_ERROR", N::RestartApp, C::Event, APP),
    x(72, "ROBUST_CHANNEL_CE5_ERROR", N::RestartApp, C::Event, APP),
    x(
        74,
        "NVLINK_ERROR",
        N::WorkflowNvlink,
        C::Reset,
        "NVLink error: a link is down or degraded until the GPU is reset",
    ),
    x(75, "ROBUST_CHANNEL_CE6_ERROR", N::RestartApp, C::Event, APP),
    x(76, "ROBUST_CHANNEL_CE7_ERROR", N::RestartApp, C::Event, APP),
    x(77, "ROBUST_CHANNEL_CE8_ERROR", N::RestartApp, C::Event, APP),
    x(
        78,
        "VGPU_START_ERROR",
        N::UpdateSoftware,
        C::Event,
        "a vGPU could not start: host software or firmware to update, not a GPU fault",
    ),
    x(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        N::RestartBareMetal,
        C::Reset,
        "GPU has fallen off the bus: it answers nothing until it is reset",
    ),
    x(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", N::RestartApp, C::Event, "corrupted data sent to the GPU by a program"),
    x(82, "ROBUST_CHANNEL_NVJPG0_ERROR", N::RestartApp, C::Event, APP),
    x(83, "ROBUST_CHANNEL_NVDEC1_ERROR", N::RestartApp, C::Event, APP),
    x(84, "ROBUST_CHANNEL_NVDEC2_ERROR", N::RestartApp, C::Event, APP),
    x(85, "ROBUST_CHANNEL_CE9_ERROR", N::RestartApp, C::Event, APP),
    x(86, "ROBUST_CHANNEL_OFA0_ERROR", N::RestartApp, C::Event, APP),
    x(88, "ROBUST_CHANNEL_NVDEC3_ERROR", N::RestartApp, C::Event, APP),
    x(89, "ROBUST_CHANNEL_NVDEC4_ERROR", N::RestartApp, C::Event, APP),
    x(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        N::Ignore,
        C::Event,
        "high single-bit ECC rate: watched through the corrected-ECC threshold",
    ),
    x(
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        N::Ignore,
        C::Event,
        "the InfoROM wear limit set with nvflash was reached: a setting, not a fault",
    ),
    x(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        N::RestartApp,
        C::Reset,
        "contained ECC error: the affected program was stopped; a reset remaps the row",
    ),
    x(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        N::ResetGpu,
        C::Reset,
        "uncontained ECC error: every program on the GPU may have read corrupt memory",
    ),
    x(96, "ROBUST_CHANNEL_NVDEC5_ERROR", N::RestartApp, C::Event, APP),
    x(97, "ROBUST_CHANNEL_NVDEC6_ERROR", N::RestartApp, C::Event, APP),
    x(98, "ROBUST_CHANNEL_NVDEC7_ERROR", N::RestartApp, C::Event, APP),
    x(99, "ROBUST_CHANNEL_NVJPG1_ERROR", N::RestartApp, C::Event, APP),
    x(100, "ROBUST_CHANNEL_NVJPG2_ERROR", N::RestartApp, C::Event, APP),
    x(101, "ROBUST_CHANNEL_NVJPG3_ERROR", N::RestartApp, C::Event, APP),
    x(102, "ROBUST_CHANNEL_NVJPG4_ERROR", N::RestartApp, C::Event, APP),
    x(103, "ROBUST_CHANNEL_NVJPG5_ERROR", N::RestartApp, C::Event, APP),
    x(104, "ROBUST_CHANNEL_NVJPG6_ERROR", N::RestartApp, C::Event, APP),
    x(105, "ROBUST_CHANNEL_NVJPG7_ERROR", N::RestartApp, C::Event, APP),
    x(106, "SMBPBI_TEST_MESSAGE", N::Ignore, C::Event, "a test message from the out-of-band management interface"),
    x(
        107,
        "SMBPBI_TEST_MESSAGE_SILENT",
        N::Ignore,
        C::Event,
        "a silent test message from the out-of-band management interface",
    ),
    x(108, "NVLINK_REMOTE_TRANSLATION_ERROR", N::Ignore, C::Event, "listed, but unused by current drivers"),
    x(
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        N::ResetGpu,
        C::Reset,
        "context switch timeout: an engine hangs until the GPU is reset",
    ),
    x(
        110,
        "SEC_FAULT_ERROR",
        N::ResetGpu,
        C::Reset,
        "security fault: rare without a hardware failure; needs a (cold) reset",
    ),
    x(
        119,
        "GSP_RPC_TIMEOUT",
        N::ResetGpu,
        C::Reset,
        "GSP RPC timeout: the GPU system processor stopped answering the driver",
    ),
    x(120, "GSP_ERROR", N::ResetGpu, C::Reset, "GSP error: the GPU system processor reported a fatal error"),
    x(
        121,
        "C2C_ERROR",
        N::Ignore,
        C::Event,
        "corrected errors on the C2C link to a Grace CPU: no effect on running work",
    ),
    x(126, "ROBUST_CHANNEL_CE10_ERROR", N::RestartApp, C::Event, APP),
    x(127, "ROBUST_CHANNEL_CE11_ERROR", N::RestartApp, C::Event, APP),
    x(128, "ROBUST_CHANNEL_CE12_ERROR", N::RestartApp, C::Event, APP),
    x(129, "ROBUST_CHANNEL_CE13_ERROR", N::RestartApp, C::Event, APP),
    x(130, "ROBUST_CHANNEL_CE14_ERROR", N::RestartApp, C::Event, APP),
    x(131, "ROBUST_CHANNEL_CE15_ERROR", N::RestartApp, C::Event, APP),
    x(132, "ROBUST_CHANNEL_CE16_ERROR", N::RestartApp, C::Event, APP),
    x(133, "ROBUST_CHANNEL_CE17_ERROR", N::RestartApp, C::Event, APP),
    x(134, "ROBUST_CHANNEL_CE18_ERROR", N::RestartApp, C::Event, APP),
    x(135, "ROBUST_CHANNEL_CE19_ERROR", N::RestartApp, C::Event, APP),
    x(
        136,
        "ALI_TRAINING_FAIL",
        N::ResetGpu,
        C::Reset,
        "NVLink training failed: the links stay down until the GPU is reset",
    ),
    x(137, "NVLINK_PRIV_ERR", N::Ignore, C::Event, "an illegal NVLink peer-to-peer access by a program"),
    x(139, "ROBUST_CHANNEL_OFA1_ERROR", N::RestartApp, C::Event, APP),
    x(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        N::ResetGpu,
        C::Reset,
        "unrecovered ECC error: the driver could not recover the memory",
    ),
    x(141, "ROBUST_CHANNEL_FAST_PATH_ERROR", N::Ignore, C::Event, "CUDA fast-path error reported to the program"),
    x(
        142,
        "ROBUST_CHANNEL_NVENC3_ERROR",
        N::ContactSupport,
        C::Reset,
        "video encoder failure with no automatic recovery",
    ),
    x(143, "GPU_INIT_ERROR", N::ResetGpu, C::Reset, "GPU initialisation failed"),
    x(
        144,
        "NVLINK_SAW_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        145,
        "NVLINK_RLW_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        146,
        "NVLINK_TLW_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        147,
        "NVLINK_TREX_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        148,
        "NVLINK_NVLPW_CTRL_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        149,
        "NVLINK_NETIR_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        150,
        "NVLINK_MSE_ERROR",
        N::WorkflowNvlink5,
        C::Event,
        "NVLink 5 error: the subcode decides; the fatal ones raise the driver's recovery action, watched",
    ),
    x(
        151,
        "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
        N::RestartVm,
        C::Reboot,
        "confidential-computing key rotation failed: the machine must restart",
    ),
    x(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        N::Xid154,
        C::Event,
        "the driver's recovery action changed: watched through NVML's recovery action",
    ),
    x(
        155,
        "NVLINK_SW_DEFINED_ERROR",
        N::ResetGpu,
        C::Reset,
        "NVLink taken down by software: it stays down until the GPU is reset",
    ),
    x(
        156,
        "RESOURCE_RETIREMENT_EVENT",
        N::ResetGpu,
        C::Reset,
        "a GPU resource was retired: the repair takes effect at the next reset",
    ),
    x(
        157,
        "RESOURCE_RETIREMENT_FAILURE",
        N::Ignore,
        C::Event,
        "a resource could not be retired (no spares left): work may go on",
    ),
    x(158, "GPU_FATAL_TIMEOUT", N::ResetGpu, C::Reset, "fatal GPU timeout"),
    x(
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        N::CheckUvm,
        C::Event,
        "C2C non-data error: a unified-memory driver matter, not a GPU fault",
    ),
    x(160, "CHANNEL_RETIREMENT_EVENT", N::Ignore, C::Event, "a channel was retired"),
    x(161, "CHANNEL_RETIREMENT_FAILURE", N::Ignore, C::Event, "a channel could not be retired"),
    x(162, "PSHC_REENGAGED", N::NotGiven, C::Event, "power smoothing circuitry engaged again"),
    x(163, "PSHC_DISENGAGED", N::NotGiven, C::Event, "power smoothing circuitry disengaged: no reset needed"),
    x(
        164,
        "PSHC_LOW_LIFETIME",
        N::NotGiven,
        C::Event,
        "power smoothing circuitry near the end of its life: plan service",
    ),
    x(
        165,
        "PSHC_ZERO_LIFETIME",
        N::NotGiven,
        C::Event,
        "power smoothing circuitry worn out: power swings, but the GPU works",
    ),
    x(
        166,
        "NVLINK_SECURE_CRYPTO_ERR",
        N::NotGiven,
        C::Event,
        "confidential-computing traffic before the link was set up for it",
    ),
    x(167, "PCIE_FATAL_TIMEOUT", N::NotGiven, C::Reset, "fatal PCIe timeout: the GPU did not answer on the bus"),
    x(
        168,
        "REDUCED_GPU_MEMORY_CAPACITY",
        N::NotGiven,
        C::Reboot,
        "errors in the protected memory region (ECC off): boot again, with ECC on",
    ),
    x(169, "SEC2_HALT_ERROR", N::NotGiven, C::Reset, "internal micro-controller (SEC2) halt"),
    x(170, "NVLINK_SECURE_OTHER", N::NotGiven, C::Event, "an interrupt seen in confidential-computing mode"),
    x(171, "UNCORRECTABLE_DRAM_ERROR", N::NotGiven, C::Event, "detail of an XID 48 (DRAM): XID 48 carries the action"),
    x(172, "UNCORRECTABLE_SRAM_ERROR", N::NotGiven, C::Event, "detail of an XID 48 (SRAM): XID 48 carries the action"),
];

/// The codes NVIDIA's catalog lists but marks unused on A100, H100, B100 and GB200:
/// recorded only, like any code not in [`DEFAULT_TABLE`].
pub const UNUSED_CODES: &[u64] = &[
    1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30, 33, 34, 35, 36, 42, 47,
    49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 65, 73, 81, 87, 90, 91, 111, 112, 113, 114, 115, 116, 117, 118, 122, 123,
    124, 125, 138, 152, 153,
];

/// The XIDs the EKS node monitoring agent treats as fatal (`WellKnownXidCodes` in
/// `aws/eks-node-monitoring-agent`, `monitors/nvidia/dcgm/dcgm_policies.go`), for the
/// comparison in `docs/health.md`.
pub const EKS_FATAL: &[u64] =
    &[46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158];

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
            .map(|e| (e.code, XidRule { class: e.class, meaning: e.meaning.to_string() }))
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
        let codes: Vec<u64> = DEFAULT_TABLE.iter().map(|e| e.code).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }

    #[test]
    fn every_catalog_code_is_classified_or_marked_unused() {
        // NVIDIA's catalog documents 1 to 172.
        for code in 1..=172u64 {
            let listed = DEFAULT_TABLE.iter().any(|e| e.code == code);
            let unused = UNUSED_CODES.contains(&code);
            assert!(listed != unused, "XID {code}: listed {listed}, unused {unused}");
        }
    }

    #[test]
    fn the_loop_acts_on_every_code_nvidia_says_needs_a_reset_or_a_restart() {
        let t = XidTable::default();
        for e in DEFAULT_TABLE {
            let needs_hands = matches!(
                e.nvidia,
                NvidiaAction::ResetGpu
                    | NvidiaAction::RestartBareMetal
                    | NvidiaAction::RestartVm
                    | NvidiaAction::CheckMechanicals
                    | NvidiaAction::WorkflowXid48
                    | NvidiaAction::WorkflowNvlink
            );
            if needs_hands {
                assert_ne!(t.class(e.code), XidClass::Event, "XID {} ({})", e.code, e.nvidia);
            }
        }
        // Where the loop differs from EKS's fatal list, it is on purpose (docs/health.md).
        let not_acted: Vec<u64> = EKS_FATAL.iter().copied().filter(|c| t.class(*c) == XidClass::Event).collect();
        assert_eq!(not_acted, vec![63], "XID 63 is watched through the pending row remap instead");
        let beyond: Vec<u64> = DEFAULT_TABLE
            .iter()
            .filter(|e| e.class != XidClass::Event && !EKS_FATAL.contains(&e.code))
            .map(|e| e.code)
            .collect();
        assert_eq!(beyond, vec![61, 94, 167, 168, 169]);
        assert_eq!(t.class(54), XidClass::Reboot, "a loose power connector needs the node powered off");
        assert_eq!(t.class(151), XidClass::Reboot);
    }
}
