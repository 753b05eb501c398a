//! Carrying items across a format change: [`dump`] writes every visible item of a store as a
//! stream, [`load`] writes a stream's items into a store — typically a fresh heap of another
//! format version or geometry (`podkv store dump PATH > items`, `podkv store load PATH <
//! items`).
//!
//! # The stream, version 1 (all integers little-endian)
//! ```text
//! header   "PODKVDMP" (8 bytes) | version u32 = 1 | reserved u32 = 0
//! record   'I' u8 | klen u16 | vlen u32 | flags u32 | exptime u32 | cas u64 | state u8
//!          | key (klen bytes) | value (vlen bytes)                      -- one per item
//! end      'E' u8 | records u64 | checksum u64
//! ```
//! - `exptime` is the item's expiry in absolute Unix seconds, `0` never: it means the same
//!   moment on any host and after any delay. An item expired (or flushed) when the dump reads
//!   it is not written, and a record whose `exptime` has passed by the time it is loaded is
//!   skipped.
//! - `cas` is the item's CAS token; `state` is its meta state (`item::LEASE_TOKEN_SENT` = 1:
//!   a recache token was handed out, readers see `Z`; `item::LEASE_STALE` = 2: marked stale,
//!   readers see `X`). Both are memcached semantics a client may hold on to, so they cross.
//!   The write time (`time`, for a delayed `flush_all`) does not: a loaded item is written now.
//! - `checksum` is FNV-1a 64 over every byte before it, header included; `records` counts the
//!   records. A reader refuses a stream whose magic, version, count or checksum disagree, that
//!   stops before its end mark, or that has bytes after it.
//! - Records come in split order (`(reverse(hash), key)`, the same for every table size), so
//!   two stores holding the same items dump the same stream.
//!
//! # Dumping a live store
//! [`dump`] is one more reader of the store: it takes a handle (a thread slot) and walks the
//! buckets through the normal epoch-pinned read path, a chunk at a time (`walk`). It never
//! writes an item and never holds the epoch for more than one chunk, so a server keeps
//! serving (and reclaiming) while it runs. What it guarantees with writers running is in
//! `walk`: each key at most once, every key untouched during the dump exactly once.
//!
//! # Loading
//! [`load`] checks the whole stream first (`stream::decode`) and that every record fits the
//! store (key and value lengths), so a truncated, damaged or foreign stream, or one the store
//! cannot hold, writes nothing. Each record is then stored as `set` would, replacing the key,
//! keeping its flags, expiry, CAS token and meta state. A store that fills up mid-load (its
//! capacity with eviction on evicts, as any write does) or another failure stops the load
//! with the items so far loaded, each whole: the store stays consistent (`store check`).
//! The price of checking first: the loader holds the whole stream in memory (`podkv store
//! load` reads standard input to its end), about the size of the items it carries.
//!
//! CAS tokens are kept whatever the heap's geometry: a token lives in the item's header, and
//! the load raises the store's token counter past the largest one loaded, so later writes
//! never hand out a loaded token again. One exception: a store that has had an immediate
//! `flush_all` hides every token below its flush mark, so a record whose token is below it
//! takes a fresh token instead (counted as `fresh_cas`); a fresh heap has no mark.

pub mod stream;
mod walk;

use crate::arena::Arena;
use crate::command::{Outcome, Step};
use crate::map::Handle;
use crate::StoreError;
use std::io::Write;
pub use stream::{Record, StreamError, VERSION};
pub use walk::{COUNT_CHUNK, SIZE_CHUNK};

/// What a dump wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpReport {
    /// Items written.
    pub items: u64,
    /// Bytes of stream written.
    pub bytes: u64,
}

/// What a load did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Items stored.
    pub loaded: u64,
    /// Records skipped because their expiry had passed.
    pub expired: u64,
    /// Records stored with a fresh CAS token (theirs was below the store's flush mark).
    pub fresh_cas: u64,
}

/// Why a dump or load failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Reading or writing the stream failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The stream is not a whole dump this build reads; nothing was written.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A record the store cannot hold; nothing was written.
    #[error("record {index} (key {key:?}) does not fit this store: {source}")]
    DoesNotFit {
        /// Its place in the stream (from 0).
        index: usize,
        /// The key, lossily as text.
        key: String,
        /// The store's limit.
        source: StoreError,
    },
    /// The store failed part-way; the items before stay loaded, each whole.
    #[error("stopped after {loaded} items: {source}")]
    Store {
        /// Items stored before the failure.
        loaded: u64,
        /// Why.
        source: StoreError,
    },
}

/// Writes every visible item of `h`'s store to `out` as a stream (see the module doc).
/// Safe while other threads and processes use the store.
pub fn dump<A: Arena>(h: &Handle<A>, out: &mut impl Write) -> Result<DumpReport, TransferError> {
    let mut sum = stream::Checksum::default();
    let header = stream::header();
    out.write_all(&header)?;
    sum.add(&header);
    let mut report = DumpReport {
        items: 0,
        bytes: header.len() as u64,
    };
    let mut cursor = walk::Cursor::default();
    let mut chunk = Vec::new();
    while !cursor.done {
        chunk.clear();
        report.items += walk::next_chunk(&h.reclaim, &mut cursor, &mut chunk);
        out.write_all(&chunk)?;
        sum.add(&chunk);
        report.bytes += chunk.len() as u64;
    }
    let end = stream::end(report.items, sum);
    out.write_all(&end)?;
    out.flush()?;
    report.bytes += end.len() as u64;
    Ok(report)
}

/// Checks the whole stream in `bytes` and stores its items in `h`'s store (see the module
/// doc): nothing is written unless every record is whole and fits.
pub fn load<A: Arena>(h: &Handle<A>, bytes: &[u8]) -> Result<LoadReport, TransferError> {
    let records = stream::decode(bytes)?;
    let shared = h.reclaim.slot().shared();
    for (index, r) in records.iter().enumerate() {
        let fits = shared.check_key(r.key).and_then(|()| {
            let max = shared.value_max();
            match r.value.len() <= max {
                true => Ok(()),
                false => Err(StoreError::TooLarge {
                    len: r.value.len(),
                    max,
                }),
            }
        });
        if let Err(source) = fits {
            let key = String::from_utf8_lossy(r.key).into_owned();
            return Err(TransferError::DoesNotFit { index, key, source });
        }
    }
    let mut report = LoadReport::default();
    let mut highest = 0;
    for r in &records {
        let stored = store_record(h, r, &mut report);
        match stored {
            Ok(cas) => highest = highest.max(cas),
            Err(source) => {
                crate::writer::raise_cas(h.parts().slot(), highest);
                let loaded = report.loaded;
                return Err(TransferError::Store { loaded, source });
            }
        }
    }
    crate::writer::raise_cas(h.parts().slot(), highest);
    h.flush_counters();
    Ok(report)
}

/// Stores one record as `set` would, keeping its token and meta state; the token it stored
/// (0: none, the record had expired).
fn store_record<A: Arena>(
    h: &Handle<A>,
    r: &Record<'_>,
    report: &mut LoadReport,
) -> Result<u64, StoreError> {
    let p = h.parts();
    let shared = p.shared();
    if r.exptime != 0 && r.exptime <= shared.now() {
        report.expired += 1;
        return Ok(0);
    }
    let oldest_cas = shared.load_word(&shared.hw().flush.oldest_cas);
    let cas = if r.cas == 0 || r.cas < oldest_cas {
        report.fresh_cas += 1;
        p.cas_after(None, 0)
    } else {
        r.cas
    };
    p.update(r.key, |_| {
        let at = p.new_item(r.key, &[r.value], r.flags, r.exptime, cas, r.state)?;
        Ok(Step::Put(at, Outcome::Stored))
    })?;
    report.loaded += 1;
    Ok(cas)
}
