//! Why a payload was refused: the one error type of the crate, with the line and
//! column (1-based, in bytes) where the parser stopped.

/// Why a payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The payload is larger than [`Limits::max_bytes`](crate::Limits::max_bytes).
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Payload size (or the bytes read so far, when read a line at a time).
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A line that must be UTF-8 is not.
    #[error("payload is not valid UTF-8 (at byte {0})")]
    NotUtf8(usize),
    /// A limit other than size was exceeded.
    #[error("line {line}: {what} exceeds the limit of {limit}")]
    Limit {
        /// 1-based line number.
        line: usize,
        /// Which limit.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A line does not follow the grammar, or breaks a rule of its metric family.
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// 1-based byte column.
        column: usize,
        /// What went wrong.
        message: String,
    },
    /// An OpenMetrics payload ended without its `# EOF` line: it was cut short, and is
    /// not a whole exposition.
    #[error("OpenMetrics payload ends after line {lines} without '# EOF' (truncated)")]
    MissingEof {
        /// Lines read.
        lines: usize,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// A [`Error::Syntax`].
pub(crate) fn syntax(line: usize, column: usize, message: impl Into<String>) -> Error {
    Error::Syntax { line, column, message: message.into() }
}
