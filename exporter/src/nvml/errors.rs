//! Stable, label-friendly names for NVML errors.

use nvml_wrapper::error::NvmlError;

/// A short snake_case name for an error, used as the `error` label.
pub fn error_label(error: &NvmlError) -> &'static str {
    match error {
        NvmlError::Uninitialized => "uninitialized",
        NvmlError::InvalidArg => "invalid_argument",
        NvmlError::NotSupported => "not_supported",
        NvmlError::NoPermission => "no_permission",
        NvmlError::NotFound => "not_found",
        NvmlError::InsufficientSize(_) => "insufficient_size",
        NvmlError::InsufficientPower => "insufficient_power",
        NvmlError::DriverNotLoaded => "driver_not_loaded",
        NvmlError::Timeout => "timeout",
        NvmlError::IrqIssue => "irq_issue",
        NvmlError::LibraryNotFound => "library_not_found",
        NvmlError::FunctionNotFound => "function_not_found",
        NvmlError::CorruptedInfoROM => "corrupted_inforom",
        NvmlError::GpuLost => "gpu_lost",
        NvmlError::ResetRequired => "reset_required",
        NvmlError::OperatingSystem => "operating_system",
        NvmlError::LibRmVersionMismatch => "lib_rm_version_mismatch",
        NvmlError::InUse => "in_use",
        NvmlError::NoData => "no_data",
        NvmlError::FailedToLoadSymbol(_) => "symbol_missing",
        NvmlError::LibloadingError(_) => "library_not_loaded",
        NvmlError::Utf8Error(_) | NvmlError::NulError(_) => "bad_string",
        NvmlError::UnexpectedVariant(_) | NvmlError::IncorrectBits(_) => "unexpected_value",
        _ => "unknown",
    }
}
