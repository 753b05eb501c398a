//! The dump stream's bytes: the header, one record per item, the end mark with its count and
//! checksum (the format is documented in [`crate::transfer`]). Encoding appends to a buffer;
//! decoding checks a whole stream before handing out any record, so a truncated or foreign
//! stream is refused before anything is written.

use std::fmt;

/// The stream's first eight bytes.
pub const MAGIC: [u8; 8] = *b"PODKVDMP";
/// The stream format this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the header: magic, version, reserved word.
pub const SIZE_HEADER: usize = 16;
/// Bytes of a record before its key and value.
pub const SIZE_RECORD_HEAD: usize = 24;
/// Bytes of the end mark: tag, record count, checksum.
pub const SIZE_END: usize = 17;
/// Tag of an item record.
pub const TAG_ITEM: u8 = b'I';
/// Tag of the end mark.
pub const TAG_END: u8 = b'E';

/// One item as the stream carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// Expiry in absolute Unix seconds; zero: never.
    pub exptime: u32,
    /// CAS token.
    pub cas: u64,
    /// Meta state: `item::LEASE_TOKEN_SENT` | `item::LEASE_STALE`.
    pub state: u8,
    /// The value.
    pub value: &'a [u8],
}

/// Why a stream was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// The first bytes are not [`MAGIC`].
    Foreign,
    /// A version this build does not read.
    Version(u32),
    /// The stream ends before its end mark, or inside a record.
    Truncated {
        /// Complete records before the cut.
        records: u64,
    },
    /// A byte where a record or the end mark should start.
    BadTag {
        /// Offset of the byte.
        at: usize,
        /// The byte.
        tag: u8,
    },
    /// The end mark's count or checksum disagrees with the records.
    Mismatch(&'static str),
    /// Bytes after the end mark.
    Trailing(usize),
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Foreign => write!(f, "not a podkv dump (no PODKVDMP header)"),
            StreamError::Version(v) => write!(
                f,
                "dump format version {v}, this podkv reads version {VERSION}"
            ),
            StreamError::Truncated { records } => write!(
                f,
                "truncated dump: it stops after {records} records, before its end mark"
            ),
            StreamError::BadTag { at, tag } => {
                write!(
                    f,
                    "corrupt dump: byte {tag:#04x} at offset {at} starts no record"
                )
            }
            StreamError::Mismatch(what) => {
                write!(f, "corrupt dump: its end mark's {what} disagrees")
            }
            StreamError::Trailing(n) => write!(f, "corrupt dump: {n} bytes after its end mark"),
        }
    }
}

impl std::error::Error for StreamError {}

/// FNV-1a (64-bit) over the stream, header included: cheap, and enough to tell a damaged
/// stream from a whole one (not an integrity guarantee against an adversary).
#[derive(Clone, Copy, Debug)]
pub struct Checksum(u64);

impl Default for Checksum {
    fn default() -> Self {
        Checksum(0xcbf2_9ce4_8422_2325)
    }
}

impl Checksum {
    /// Adds `bytes`.
    pub fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The sum so far.
    pub fn value(self) -> u64 {
        self.0
    }
}

/// The header.
pub fn header() -> [u8; SIZE_HEADER] {
    let mut h = [0u8; SIZE_HEADER];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Appends one record.
pub fn put_record(out: &mut Vec<u8>, r: &Record<'_>) {
    out.push(TAG_ITEM);
    out.extend_from_slice(&(r.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
    out.extend_from_slice(&r.flags.to_le_bytes());
    out.extend_from_slice(&r.exptime.to_le_bytes());
    out.extend_from_slice(&r.cas.to_le_bytes());
    out.push(r.state);
    out.extend_from_slice(r.key);
    out.extend_from_slice(r.value);
}

/// The end mark: tag and count, then the checksum of everything before the checksum.
pub fn end(count: u64, mut sum: Checksum) -> [u8; SIZE_END] {
    let mut e = [0u8; SIZE_END];
    e[0] = TAG_END;
    e[1..9].copy_from_slice(&count.to_le_bytes());
    sum.add(&e[..9]);
    e[9..].copy_from_slice(&sum.value().to_le_bytes());
    e
}

/// Checks a whole stream (header, every record, count, checksum, nothing after) and returns
/// its records in stream order.
pub fn decode(bytes: &[u8]) -> Result<Vec<Record<'_>>, StreamError> {
    if bytes.len() < 8 || bytes[..8] != MAGIC {
        return Err(StreamError::Foreign);
    }
    let truncated = |records: usize| StreamError::Truncated {
        records: records as u64,
    };
    if bytes.len() < SIZE_HEADER {
        return Err(truncated(0));
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(StreamError::Version(version));
    }
    let mut records = Vec::new();
    let mut at = SIZE_HEADER;
    loop {
        match bytes.get(at) {
            None => return Err(truncated(records.len())),
            Some(&TAG_ITEM) => {
                let r = record_at(bytes, at).ok_or_else(|| truncated(records.len()))?;
                at += SIZE_RECORD_HEAD + r.key.len() + r.value.len();
                records.push(r);
            }
            Some(&TAG_END) => break,
            Some(&tag) => return Err(StreamError::BadTag { at, tag }),
        }
    }
    check_end(bytes, at, records.len() as u64)?;
    Ok(records)
}

/// The record at `at` (its tag checked by the caller), if the stream holds all of it.
fn record_at(bytes: &[u8], at: usize) -> Option<Record<'_>> {
    let head = bytes.get(at..at + SIZE_RECORD_HEAD)?;
    let klen = u16::from_le_bytes([head[1], head[2]]) as usize;
    let vlen = u32_at(head, 3) as usize;
    let key_at = at + SIZE_RECORD_HEAD;
    Some(Record {
        key: bytes.get(key_at..key_at + klen)?,
        flags: u32_at(head, 7),
        exptime: u32_at(head, 11),
        cas: u64_at(head, 15),
        state: head[23],
        value: bytes.get(key_at + klen..key_at + klen + vlen)?,
    })
}

/// Checks the end mark at `at` against the `count` records before it.
fn check_end(bytes: &[u8], at: usize, count: u64) -> Result<(), StreamError> {
    let Some(e) = bytes.get(at..at + SIZE_END) else {
        return Err(StreamError::Truncated { records: count });
    };
    if u64_at(e, 1) != count {
        return Err(StreamError::Mismatch("record count"));
    }
    let mut sum = Checksum::default();
    sum.add(&bytes[..at + 9]);
    if u64_at(e, 9) != sum.value() {
        return Err(StreamError::Mismatch("checksum"));
    }
    match bytes.len() - (at + SIZE_END) {
        0 => Ok(()),
        n => Err(StreamError::Trailing(n)),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(records: &[Record<'_>]) -> Vec<u8> {
        let mut out = header().to_vec();
        for r in records {
            put_record(&mut out, r);
        }
        let mut sum = Checksum::default();
        sum.add(&out);
        out.extend_from_slice(&end(records.len() as u64, sum));
        out
    }

    fn two() -> [Record<'static>; 2] {
        [
            Record {
                key: b"a",
                flags: 7,
                exptime: 0,
                cas: 3,
                state: 2,
                value: b"",
            },
            Record {
                key: b"key:2",
                flags: u32::MAX,
                exptime: 1_900_000_000,
                cas: u64::MAX,
                state: 1,
                value: b"value bytes",
            },
        ]
    }

    #[test]
    fn records_round_trip() {
        let records = two();
        let bytes = stream(&records);
        assert_eq!(decode(&bytes).unwrap(), records);
        assert_eq!(decode(&stream(&[])).unwrap(), []);
    }

    /// Every cut of a whole stream is refused: nothing decodes from a prefix.
    #[test]
    fn every_truncation_is_refused() {
        let bytes = stream(&two());
        for cut in 0..bytes.len() {
            let err = decode(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, StreamError::Truncated { .. } | StreamError::Foreign),
                "cut {cut}: {err}"
            );
        }
    }

    #[test]
    fn foreign_newer_damaged_and_trailing_streams_are_refused() {
        let bytes = stream(&two());
        assert_eq!(decode(b"VALUE a 0 1\r\n"), Err(StreamError::Foreign));
        let mut newer = bytes.clone();
        newer[8] = 2;
        assert_eq!(decode(&newer), Err(StreamError::Version(2)));
        let mut flipped = bytes.clone();
        let last_value_byte = bytes.len() - SIZE_END - 1;
        flipped[last_value_byte] ^= 1;
        assert_eq!(decode(&flipped), Err(StreamError::Mismatch("checksum")));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer), Err(StreamError::Trailing(1)));
        let line = StreamError::Truncated { records: 3 }.to_string();
        assert!(!line.contains('\n'));
    }
}
