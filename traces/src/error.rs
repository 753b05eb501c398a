//! The crate's one error type.
//!
//! Malformed input always names its line (CSV, 1-based, as an editor shows it) or its row
//! (Parquet, 0-based index into the file), so a bad request in a 100 GB trace can be found with
//! `sed -n 'Np'`.

use std::path::PathBuf;

/// Everything that can go wrong reading, writing, summarising or generating a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// An operating-system error on `path`.
    #[error("{path}: {source}")]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An I/O error with no single file to blame (a stream handed in by the caller).
    #[error(transparent)]
    Stream(#[from] std::io::Error),
    /// The CSV layer could not split a line into fields (for example, bytes after a closing
    /// quote).
    #[error("line {line}: {message}")]
    Csv {
        /// 1-based line number.
        line: u64,
        /// What the CSV parser reported.
        message: String,
    },
    /// A line has fewer than the seven fields of the format.
    #[error("line {line}: missing field `{field}` (found {found} of 7 fields)")]
    MissingField {
        /// 1-based line number.
        line: u64,
        /// Name of the first absent field.
        field: &'static str,
        /// How many fields the line has.
        found: usize,
    },
    /// A numeric field does not parse.
    #[error("line {line}: field `{field}` is not a valid number: {value:?}")]
    BadNumber {
        /// 1-based line number.
        line: u64,
        /// Name of the field.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// The operation field names no operation of the format.
    #[error("line {line}: unknown operation {op:?} (expected one of {expected})", expected = crate::Op::NAMES.join(", "))]
    UnknownOp {
        /// 1-based line number.
        line: u64,
        /// The text found.
        op: String,
    },
    /// The key is not valid UTF-8.
    #[error("line {line}: key is not valid UTF-8")]
    BadKey {
        /// 1-based line number.
        line: u64,
    },
    /// The Parquet file could not be read or written.
    #[error("{path}: parquet: {source}")]
    Parquet {
        /// The Parquet file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A Parquet file whose columns are not the ones this crate writes.
    #[error("{path}: {message}")]
    Schema {
        /// The Parquet file.
        path: PathBuf,
        /// What is missing or mistyped.
        message: String,
    },
    /// A Parquet row holds a value the record type cannot carry.
    #[error("{path}: row {row}: {message}")]
    BadRow {
        /// The Parquet file.
        path: PathBuf,
        /// 0-based row index in the file.
        row: u64,
        /// What is wrong.
        message: String,
    },
    /// The published statistics have no usable row for this cluster.
    #[error("cluster {cluster}: {message}")]
    Cluster {
        /// Cluster number as in the table (`cluster12` is 12).
        cluster: u32,
        /// Why it cannot be used.
        message: String,
    },
    /// A caller-supplied argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// JSON output failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A worker side of a partitioned stream went away before the stream ended.
    #[error("partition: worker {worker} stopped receiving")]
    WorkerGone {
        /// Index of the worker whose receiver was dropped.
        worker: usize,
    },
}

impl TraceError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether the error concerns one malformed line or row, after which reading can go on
    /// (as opposed to I/O, schema or argument errors, which end the stream).
    pub fn is_bad_line(&self) -> bool {
        matches!(
            self,
            Self::Csv { .. }
                | Self::MissingField { .. }
                | Self::BadNumber { .. }
                | Self::UnknownOp { .. }
                | Self::BadKey { .. }
                | Self::BadRow { .. }
        )
    }

    /// Wraps a Parquet error with the path it concerns.
    pub fn parquet(path: impl Into<PathBuf>, source: parquet::errors::ParquetError) -> Self {
        Self::Parquet {
            path: path.into(),
            source,
        }
    }
}
