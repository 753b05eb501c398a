//! The Parquet form of a trace: one row per request, seven columns, zstd-compressed.
//!
//! | column | Arrow type | CSV column |
//! | --- | --- | --- |
//! | `timestamp` | `UInt64` | timestamp |
//! | `key` | `Utf8` | anonymized key |
//! | `key_size` | `UInt32` | key size |
//! | `value_size` | `UInt32` | value size |
//! | `client_id` | `UInt32` | client id |
//! | `operation` | `Utf8` (dictionary-encoded by Parquet) | operation |
//! | `ttl` | `UInt32` | TTL |
//!
//! Row groups hold [`ROWS_PER_GROUP`] rows (the last one fewer), so `N` readers can each take
//! every `N`-th row group. Both sides stream: the writer holds one row group in memory, the
//! reader one batch of [`ROWS_PER_BATCH`] rows.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow::array::{ArrayBuilder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::{Op, Record, TraceError};

/// Rows per Parquet row group: large enough to compress well, small enough (about 20 MB
/// compressed for typical keys) that a file of 10⁹ requests offers ~1000 units of parallelism.
pub const ROWS_PER_GROUP: usize = 1 << 20;

/// Rows per Arrow batch, on both the writing and the reading side.
pub const ROWS_PER_BATCH: usize = 1 << 13;

/// zstd level for column chunks: the library default, a good speed/ratio point.
const ZSTD_LEVEL: i32 = 3;

/// The column names, in file order.
pub const COLUMNS: [&str; 7] = [
    "timestamp",
    "key",
    "key_size",
    "value_size",
    "client_id",
    "operation",
    "ttl",
];

/// The Arrow schema of a trace file (see the module table).
pub fn schema() -> SchemaRef {
    let types = [
        DataType::UInt64,
        DataType::Utf8,
        DataType::UInt32,
        DataType::UInt32,
        DataType::UInt32,
        DataType::Utf8,
        DataType::UInt32,
    ];
    let fields: Vec<Field> = COLUMNS
        .iter()
        .zip(types)
        .map(|(name, ty)| Field::new(*name, ty, false))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Column builders for one batch; the struct is the batch under construction.
#[derive(Default)]
struct Columns {
    timestamp: UInt64Builder,
    key: StringBuilder,
    key_size: UInt32Builder,
    value_size: UInt32Builder,
    client_id: UInt32Builder,
    operation: StringBuilder,
    ttl: UInt32Builder,
}

impl Columns {
    fn push(&mut self, r: &Record) {
        self.timestamp.append_value(r.timestamp);
        self.key.append_value(&r.key);
        self.key_size.append_value(r.key_size);
        self.value_size.append_value(r.value_size);
        self.client_id.append_value(r.client_id);
        self.operation.append_value(r.op.as_str());
        self.ttl.append_value(r.ttl);
    }

    fn len(&self) -> usize {
        self.timestamp.len()
    }

    /// Empties the builders into a batch.
    fn take(&mut self, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(self.timestamp.finish()),
            Arc::new(self.key.finish()),
            Arc::new(self.key_size.finish()),
            Arc::new(self.value_size.finish()),
            Arc::new(self.client_id.finish()),
            Arc::new(self.operation.finish()),
            Arc::new(self.ttl.finish()),
        ];
        RecordBatch::try_new(schema.clone(), arrays)
    }
}

/// Writes requests to a Parquet file, one batch at a time.
pub struct ParquetWriter {
    writer: ArrowWriter<File>,
    columns: Columns,
    schema: SchemaRef,
    path: PathBuf,
    rows: u64,
}

impl ParquetWriter {
    /// Creates (or truncates) `path`.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(|e| TraceError::io(&path, e))?;
        let level = ZstdLevel::try_new(ZSTD_LEVEL).map_err(|e| TraceError::parquet(&path, e))?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_max_row_group_size(ROWS_PER_GROUP)
            .build();
        let schema = schema();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(properties))
            .map_err(|e| TraceError::parquet(&path, e))?;
        Ok(Self {
            writer,
            columns: Columns::default(),
            schema,
            path,
            rows: 0,
        })
    }

    /// Appends one request.
    pub fn write(&mut self, r: &Record) -> Result<(), TraceError> {
        self.columns.push(r);
        self.rows += 1;
        if self.columns.len() >= ROWS_PER_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// Writes the last batch and the footer; returns the number of rows written.
    pub fn finish(mut self) -> Result<u64, TraceError> {
        self.flush_batch()?;
        self.writer
            .close()
            .map_err(|e| TraceError::parquet(&self.path, e))?;
        Ok(self.rows)
    }

    fn flush_batch(&mut self) -> Result<(), TraceError> {
        if self.columns.len() == 0 {
            return Ok(());
        }
        let batch = self
            .columns
            .take(&self.schema)
            .map_err(|e| TraceError::Schema {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        self.writer
            .write(&batch)
            .map_err(|e| TraceError::parquet(&self.path, e))
    }
}

/// The columns of one decoded batch, typed.
struct Batch {
    timestamp: UInt64Array,
    key: StringArray,
    key_size: UInt32Array,
    value_size: UInt32Array,
    client_id: UInt32Array,
    operation: StringArray,
    ttl: UInt32Array,
}

impl Batch {
    fn from_record_batch(batch: &RecordBatch, path: &Path) -> Result<Self, TraceError> {
        Ok(Self {
            timestamp: column(batch, "timestamp", path)?,
            key: column(batch, "key", path)?,
            key_size: column(batch, "key_size", path)?,
            value_size: column(batch, "value_size", path)?,
            client_id: column(batch, "client_id", path)?,
            operation: column(batch, "operation", path)?,
            ttl: column(batch, "ttl", path)?,
        })
    }

    fn len(&self) -> usize {
        self.timestamp.len()
    }

    /// Row `i` of the batch; `None` if the operation name is unknown.
    fn record(&self, i: usize) -> Option<Record> {
        Some(Record {
            timestamp: self.timestamp.value(i),
            key: self.key.value(i).to_owned(),
            key_size: self.key_size.value(i),
            value_size: self.value_size.value(i),
            client_id: self.client_id.value(i),
            op: Op::parse(self.operation.value(i).as_bytes())?,
            ttl: self.ttl.value(i),
        })
    }
}

/// Finds column `name` and checks its type.
fn column<T: Array + Clone + 'static>(
    batch: &RecordBatch,
    name: &str,
    path: &Path,
) -> Result<T, TraceError> {
    let schema_error = |message: String| TraceError::Schema {
        path: path.to_path_buf(),
        message,
    };
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| schema_error(format!("no column `{name}`")))?;
    if array.null_count() > 0 {
        return Err(schema_error(format!("column `{name}` has nulls")));
    }
    array
        .as_any()
        .downcast_ref::<T>()
        .cloned()
        .ok_or_else(|| schema_error(format!("column `{name}` has type {}", array.data_type())))
}

/// Streams requests back out of a Parquet trace, one batch in memory at a time.
pub struct ParquetReader {
    batches: ParquetRecordBatchReader,
    batch: Option<Batch>,
    next: usize,
    row: u64,
    rows: u64,
    path: PathBuf,
}

impl ParquetReader {
    /// Opens `path` and reads its footer.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| TraceError::io(&path, e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| TraceError::parquet(&path, e))?;
        let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let batches = builder
            .with_batch_size(ROWS_PER_BATCH)
            .build()
            .map_err(|e| TraceError::parquet(&path, e))?;
        Ok(Self {
            batches,
            batch: None,
            next: 0,
            row: 0,
            rows,
            path,
        })
    }

    /// Rows in the file, from its footer.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows returned so far.
    pub fn rows_read(&self) -> u64 {
        self.row
    }

    /// Makes `self.batch` hold an unread row; `Ok(false)` at the end of the file.
    fn fill(&mut self) -> Result<bool, TraceError> {
        while self.batch.as_ref().is_none_or(|b| self.next >= b.len()) {
            let Some(batch) = self.batches.next() else {
                return Ok(false);
            };
            let batch = batch.map_err(|e| TraceError::Parquet {
                path: self.path.clone(),
                source: e.into(),
            })?;
            self.batch = Some(Batch::from_record_batch(&batch, &self.path)?);
            self.next = 0;
        }
        Ok(true)
    }
}

impl Iterator for ParquetReader {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.fill() {
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
            Ok(true) => {}
        }
        let batch = self.batch.as_ref()?;
        let (i, row) = (self.next, self.row);
        self.next += 1;
        self.row += 1;
        Some(batch.record(i).ok_or_else(|| TraceError::BadRow {
            path: self.path.clone(),
            row,
            message: format!("unknown operation {:?}", batch.operation.value(i)),
        }))
    }
}
