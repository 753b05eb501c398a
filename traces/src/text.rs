//! The CSV text format: parse and compose, one request per line.
//!
//! ```text
//! timestamp,anonymized key,key size,value size,client id,operation,TTL
//! 0,nz:u:eeW511W3dcH3de3d15ec,24,1030,7,set,300
//! ```
//!
//! # Policy for awkward lines
//!
//! - **Quoted keys** are unquoted (`"a,b"` is the key `a,b`; `""` inside quotes is one `"`).
//! - **Unquoted commas in a key**: the key is the only free-form column, so a line with more than
//!   seven fields is read as a key that contains commas: fields `1 ..= n-6` are joined with `,`.
//! - **Fewer than seven fields**: [`TraceError::MissingField`] naming the first absent column.
//! - **A number that does not parse** (or overflows its column): [`TraceError::BadNumber`].
//! - **An operation outside the eleven of the format**: [`TraceError::UnknownOp`].
//! - **A header line** (first field `timestamp` on the first line) is skipped; blank lines are
//!   skipped.
//!
//! Every error carries the 1-based line number. A bad line yields one `Err` and reading goes on
//! with the next line, so a caller may count and skip bad lines or stop at the first; an I/O
//! error ends the stream.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use csv::{ByteRecord, Reader, ReaderBuilder, Writer, WriterBuilder};

use crate::{Op, Record, TraceError};

/// The seven columns, in file order, as named by the format.
pub const FIELDS: [&str; 7] = [
    "timestamp",
    "anonymized key",
    "key size",
    "value size",
    "client id",
    "operation",
    "TTL",
];

/// Read buffer for the CSV parser; large enough that the decoder, not the parser, sets the pace.
const SIZE_READ_BUFFER: usize = 1 << 16;

/// A `Read` that notes where each newline falls, so a record's byte offset can be turned into
/// a line number that counts every line (the csv crate skips blank lines without counting them).
///
/// Holds only the newlines read ahead of the parser: `newlines` are absolute byte offsets,
/// increasing, all at or after the start of the record last asked about.
struct LineIndex<R> {
    inner: R,
    offset: u64,
    newlines: VecDeque<u64>,
    lines_before: u64,
}

impl<R: Read> Read for LineIndex<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let start = self.offset;
        let found = buf[..n].iter().enumerate().filter(|(_, &b)| b == b'\n');
        self.newlines.extend(found.map(|(i, _)| start + i as u64));
        self.offset += n as u64;
        Ok(n)
    }
}

impl<R> LineIndex<R> {
    /// The 1-based line holding byte `at`; `at` must not decrease between calls.
    fn line_of(&mut self, at: u64) -> u64 {
        while self.newlines.front().is_some_and(|&nl| nl < at) {
            self.newlines.pop_front();
            self.lines_before += 1;
        }
        self.lines_before + 1
    }
}

/// A streaming reader of CSV trace lines from any byte stream (plain or already decompressed).
pub struct CsvReader<R> {
    inner: Reader<LineIndex<R>>,
    row: ByteRecord,
    path: PathBuf,
    first: bool,
    done: bool,
}

impl<R: Read> CsvReader<R> {
    /// Reads lines from `source`; `path` only names the source in I/O errors.
    pub fn new(source: R, path: impl AsRef<Path>) -> Self {
        let inner = ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .buffer_capacity(SIZE_READ_BUFFER)
            .from_reader(LineIndex {
                inner: source,
                offset: 0,
                newlines: VecDeque::new(),
                lines_before: 0,
            });
        Self {
            inner,
            row: ByteRecord::new(),
            path: path.as_ref().to_path_buf(),
            first: true,
            done: false,
        }
    }

    /// Reads the next request into `out`, reusing its key allocation. Returns `Ok(false)` at the
    /// end of the stream.
    pub fn read_into(&mut self, out: &mut Record) -> Result<bool, TraceError> {
        loop {
            if !self.read_row()? {
                return Ok(false);
            }
            let first = std::mem::replace(&mut self.first, false);
            if first && self.row.get(0) == Some(FIELDS[0].as_bytes()) {
                continue;
            }
            if self.row.len() == 1 && self.row[0].trim_ascii().is_empty() {
                continue;
            }
            let line = self.line();
            return parse_row(&self.row, line, out).map(|()| true);
        }
    }

    fn read_row(&mut self) -> Result<bool, TraceError> {
        if self.done {
            return Ok(false);
        }
        match self.inner.read_byte_record(&mut self.row) {
            Ok(more) => {
                self.done = !more;
                Ok(more)
            }
            Err(e) => Err(self.csv_error(e)),
        }
    }

    /// The line of the record just read: the line of its last byte, the terminator. (The
    /// record's own start position may point at blank lines the parser skipped before it.)
    fn line(&mut self) -> u64 {
        let end = self.inner.position().byte();
        self.inner.get_mut().line_of(end.saturating_sub(1))
    }

    fn csv_error(&mut self, e: csv::Error) -> TraceError {
        let line = self.line();
        match e.into_kind() {
            csv::ErrorKind::Io(source) => {
                self.done = true;
                TraceError::io(&self.path, source)
            }
            other => TraceError::Csv {
                line,
                message: format!("{other:?}"),
            },
        }
    }
}

impl<R: Read> Iterator for CsvReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut record = Record {
            timestamp: 0,
            key: String::new(),
            key_size: 0,
            value_size: 0,
            client_id: 0,
            op: Op::Get,
            ttl: 0,
        };
        match self.read_into(&mut record) {
            Ok(true) => Some(Ok(record)),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// Parses one split line (see the module's policy) into `out`.
fn parse_row(row: &ByteRecord, line: u64, out: &mut Record) -> Result<(), TraceError> {
    let n = row.len();
    if n < FIELDS.len() {
        return Err(TraceError::MissingField {
            line,
            field: FIELDS[n],
            found: n,
        });
    }
    // The last five columns sit at fixed offsets from the end; the key takes what is left.
    let tail = n - 5;
    out.timestamp = number(&row[0], line, FIELDS[0])?;
    out.key_size = number(&row[tail], line, FIELDS[2])?;
    out.value_size = number(&row[tail + 1], line, FIELDS[3])?;
    out.client_id = number(&row[tail + 2], line, FIELDS[4])?;
    let op = row[tail + 3].trim_ascii();
    out.op = Op::parse(op).ok_or_else(|| TraceError::UnknownOp {
        line,
        op: String::from_utf8_lossy(op).into_owned(),
    })?;
    out.ttl = number(&row[tail + 4], line, FIELDS[6])?;
    out.key.clear();
    for (i, part) in (1..tail).map(|i| &row[i]).enumerate() {
        if i > 0 {
            out.key.push(',');
        }
        out.key
            .push_str(std::str::from_utf8(part).map_err(|_| TraceError::BadKey { line })?);
    }
    Ok(())
}

/// Parses an unsigned decimal column, tolerating surrounding ASCII blanks.
fn number<T: std::str::FromStr>(
    bytes: &[u8],
    line: u64,
    field: &'static str,
) -> Result<T, TraceError> {
    std::str::from_utf8(bytes.trim_ascii())
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| TraceError::BadNumber {
            line,
            field,
            value: String::from_utf8_lossy(bytes).into_owned(),
        })
}

/// A streaming writer of CSV trace lines, without a header, quoting keys only when they need it.
pub struct CsvWriter<W: Write> {
    inner: Writer<W>,
    digits: Vec<u8>,
}

impl<W: Write> CsvWriter<W> {
    /// Writes lines to `sink`.
    pub fn new(sink: W) -> Self {
        let inner = WriterBuilder::new().has_headers(false).from_writer(sink);
        Self {
            inner,
            digits: Vec::with_capacity(20),
        }
    }

    /// Appends one request.
    pub fn write(&mut self, r: &Record) -> Result<(), TraceError> {
        self.number(r.timestamp)?;
        self.field(r.key.as_bytes())?;
        self.number(r.key_size)?;
        self.number(r.value_size)?;
        self.number(r.client_id)?;
        self.field(r.op.as_str().as_bytes())?;
        self.number(r.ttl)?;
        self.inner.write_record(None::<&[u8]>).map_err(csv_io)
    }

    /// Flushes and returns the sink (for example a zstd encoder that must still be finished).
    pub fn finish(self) -> Result<W, TraceError> {
        self.inner
            .into_inner()
            .map_err(|e| TraceError::Stream(e.into_error()))
    }

    fn number(&mut self, n: impl Into<u64>) -> Result<(), TraceError> {
        self.digits.clear();
        write!(self.digits, "{}", n.into())?;
        self.inner.write_field(&self.digits).map_err(csv_io)
    }

    fn field(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        self.inner.write_field(bytes).map_err(csv_io)
    }
}

/// Writing can only fail in the sink: csv reports those as `ErrorKind::Io`.
fn csv_io(e: csv::Error) -> TraceError {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => TraceError::Stream(io),
        other => TraceError::Stream(std::io::Error::other(format!("{other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> Vec<Result<Record, TraceError>> {
        CsvReader::new(text.as_bytes(), "test").collect()
    }

    #[test]
    fn parses_a_plain_line() {
        let rows = read_all("5,nz:u:eeW511,24,1030,7,set,300\n");
        let r = rows[0].as_ref().unwrap();
        assert_eq!(
            (r.timestamp, r.key.as_str(), r.key_size, r.value_size),
            (5, "nz:u:eeW511", 24, 1030)
        );
        assert_eq!((r.client_id, r.op, r.ttl), (7, Op::Set, 300));
    }

    #[test]
    fn written_lines_read_back() {
        let r = Record {
            timestamp: 9,
            key: "a,\"b\"".into(),
            key_size: 5,
            value_size: 0,
            client_id: 1,
            op: Op::Cas,
            ttl: 60,
        };
        let mut w = CsvWriter::new(Vec::new());
        w.write(&r).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes, b"9,\"a,\"\"b\"\"\",5,0,1,cas,60\n");
        let back: Vec<_> = CsvReader::new(&bytes[..], "t").collect();
        assert_eq!(back[0].as_ref().unwrap(), &r);
    }
}
