//! Trace files of any supported format, chosen by extension.
//!
//! | extension | format |
//! | --- | --- |
//! | `.parquet` | Parquet ([`crate::columnar`]) |
//! | `.zst` (e.g. `cluster12.000.zst`, `x.csv.zst`) | CSV inside a zstd stream, decoded while read |
//! | anything else | plain CSV ([`crate::text`]) |

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::columnar::{ParquetReader, ParquetWriter};
use crate::text::{CsvReader, CsvWriter};
use crate::{Record, TraceError};

/// zstd level for `.zst` output: the command-line tool's default.
const ZSTD_LEVEL: i32 = 3;

/// Buffer between the file and the zstd decoder or the CSV writer.
const SIZE_IO_BUFFER: usize = 1 << 16;

/// The on-disk form of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Plain CSV text.
    Csv,
    /// CSV text compressed with zstd.
    CsvZst,
    /// Parquet.
    Parquet,
}

impl Format {
    /// The format a path names by its extension (see the module table).
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("parquet") => Format::Parquet,
            Some(e) if e.eq_ignore_ascii_case("zst") => Format::CsvZst,
            _ => Format::Csv,
        }
    }
}

/// How far a reader has gone through its file, for progress reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// Bytes of the file consumed (compressed bytes for `.zst`) out of the file's length.
    Bytes {
        /// Bytes read so far.
        done: u64,
        /// File length.
        total: u64,
    },
    /// Rows returned out of the rows in the file's footer.
    Rows {
        /// Rows read so far.
        done: u64,
        /// Rows in the file.
        total: u64,
    },
}

/// A `Read` that counts the bytes passing through it into a shared counter.
struct CountingRead<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The readers behind [`TraceReader`].
#[allow(clippy::large_enum_variant)] // one per open file; boxing would only add a hop per record
enum Source {
    Csv(CsvReader<Box<dyn Read + Send>>),
    Parquet(ParquetReader),
}

/// A stream of requests from a trace file of any format; see [`open`].
pub struct TraceReader {
    source: Source,
    read: Arc<AtomicU64>,
    length: u64,
}

/// Opens a trace for streaming, choosing the reader by extension.
pub fn open(path: impl AsRef<Path>) -> Result<TraceReader, TraceError> {
    let path = path.as_ref();
    if Format::of(path) == Format::Parquet {
        let reader = ParquetReader::open(path)?;
        return Ok(TraceReader {
            source: Source::Parquet(reader),
            read: Arc::default(),
            length: 0,
        });
    }
    let file = File::open(path).map_err(|e| TraceError::io(path, e))?;
    let length = file.metadata().map_err(|e| TraceError::io(path, e))?.len();
    let read = Arc::new(AtomicU64::new(0));
    let counted = CountingRead {
        inner: file,
        count: read.clone(),
    };
    let bytes: Box<dyn Read + Send> = match Format::of(path) {
        Format::CsvZst => Box::new(
            zstd::Decoder::with_buffer(BufReader::with_capacity(SIZE_IO_BUFFER, counted))
                .map_err(|e| TraceError::io(path, e))?,
        ),
        _ => Box::new(counted),
    };
    Ok(TraceReader {
        source: Source::Csv(CsvReader::new(bytes, path)),
        read,
        length,
    })
}

impl TraceReader {
    /// How far through the file the reader is.
    pub fn position(&self) -> Position {
        match &self.source {
            Source::Csv(_) => Position::Bytes {
                done: self.read.load(Ordering::Relaxed),
                total: self.length,
            },
            Source::Parquet(p) => Position::Rows {
                done: p.rows_read(),
                total: p.rows(),
            },
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.source {
            Source::Csv(r) => r.next(),
            Source::Parquet(r) => r.next(),
        }
    }
}

/// The writers behind [`TraceWriter`].
enum Sink {
    Csv(CsvWriter<BufWriter<File>>),
    CsvZst(CsvWriter<zstd::Encoder<'static, BufWriter<File>>>),
    Parquet(Box<ParquetWriter>),
}

/// A trace file being written, in the format its extension names; see [`create`].
pub struct TraceWriter {
    sink: Sink,
    path: PathBuf,
    rows: u64,
}

/// Creates (or truncates) a trace file, choosing the writer by extension.
pub fn create(path: impl AsRef<Path>) -> Result<TraceWriter, TraceError> {
    let path = path.as_ref().to_path_buf();
    let format = Format::of(&path);
    let sink = if format == Format::Parquet {
        Sink::Parquet(Box::new(ParquetWriter::create(&path)?))
    } else {
        let file = File::create(&path).map_err(|e| TraceError::io(&path, e))?;
        let buffered = BufWriter::with_capacity(SIZE_IO_BUFFER, file);
        if format == Format::CsvZst {
            let encoder =
                zstd::Encoder::new(buffered, ZSTD_LEVEL).map_err(|e| TraceError::io(&path, e))?;
            Sink::CsvZst(CsvWriter::new(encoder))
        } else {
            Sink::Csv(CsvWriter::new(buffered))
        }
    };
    Ok(TraceWriter {
        sink,
        path,
        rows: 0,
    })
}

impl TraceWriter {
    /// Appends one request.
    pub fn write(&mut self, r: &Record) -> Result<(), TraceError> {
        let result = match &mut self.sink {
            Sink::Csv(w) => w.write(r),
            Sink::CsvZst(w) => w.write(r),
            Sink::Parquet(w) => w.write(r),
        };
        self.rows += 1;
        result.map_err(|e| self.with_path(e))
    }

    /// Flushes everything (zstd frame end, Parquet footer) and returns the rows written.
    pub fn finish(self) -> Result<u64, TraceError> {
        let path = self.path;
        let in_path = |e: std::io::Error| TraceError::io(&path, e);
        match self.sink {
            Sink::Csv(w) => w
                .finish()
                .and_then(|mut b| b.flush().map_err(in_path))
                .map_err(|e| attach(e, &path))?,
            Sink::CsvZst(w) => w
                .finish()
                .and_then(|z| z.finish().map_err(in_path))
                .and_then(|mut b| b.flush().map_err(in_path))
                .map_err(|e| attach(e, &path))?,
            Sink::Parquet(w) => {
                w.finish()?;
            }
        }
        Ok(self.rows)
    }

    fn with_path(&self, e: TraceError) -> TraceError {
        attach(e, &self.path)
    }
}

/// Names the file in an error from a writer that only saw a stream.
fn attach(e: TraceError, path: &Path) -> TraceError {
    match e {
        TraceError::Stream(source) => TraceError::io(path, source),
        other => other,
    }
}
