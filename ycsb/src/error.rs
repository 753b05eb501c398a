//! The one error type of the crate: every way a workload can be refused, each with the
//! property, the offending value and what would have been accepted.

use std::path::PathBuf;

/// Why a workload could not be read, resolved or generated.
#[derive(Debug, thiserror::Error)]
pub enum YcsbError {
    /// A property file could not be read.
    #[error("cannot read property file {path}: {source}")]
    Io {
        /// The file named with `-P`.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// The operation dump could not be written.
    #[error("cannot write operation dump {target}: {source}")]
    Dump {
        /// The file named with `--dump-ops` (`-` for standard output).
        target: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// A line of a property file, or a `-p` argument, is not `key=value`.
    #[error("{origin}: expected `key=value`, found `{line}`")]
    Malformed {
        /// Where the text came from (`FILE:LINE` or `-p`).
        origin: String,
        /// The offending text.
        line: String,
    },

    /// A property holds a value of the wrong shape (not a number, out of range, …).
    #[error("property `{key}`: `{value}` is not {expected}")]
    InvalidValue {
        /// The property name.
        key: String,
        /// The value found.
        value: String,
        /// What the property accepts, as a phrase ("a non-negative integer").
        expected: &'static str,
    },

    /// A property that names one of a closed set of choices names none of them.
    #[error("property `{key}`: unknown value `{value}` (expected one of: {allowed})")]
    UnknownChoice {
        /// The property name.
        key: String,
        /// The value found.
        value: String,
        /// The accepted values, comma separated.
        allowed: &'static str,
    },

    /// `--workload NAME` names no shipped workload.
    #[error(
        "unknown workload `{0}` (expected one of: a, b, c, d, e, f, load, cxlalloc-a, cxlalloc-d)"
    )]
    UnknownWorkload(String),

    /// A YCSB feature this port does not carry.
    #[error("property `{key}` = `{value}` is not supported: {reason}")]
    Unsupported {
        /// The property name.
        key: String,
        /// The value found.
        value: String,
        /// Why, and what to use instead.
        reason: &'static str,
    },

    /// Properties that are each valid but do not fit together.
    #[error("invalid workload: {0}")]
    Inconsistent(String),

    /// More insert acknowledgements are outstanding than YCSB's window holds (2^20).
    #[error("too many unacknowledged insertion keys (window of {window})")]
    AckWindowFull {
        /// The window size.
        window: usize,
    },
}
