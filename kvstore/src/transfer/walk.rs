//! Reading every visible item of a live store, a chunk at a time, through the store's normal
//! epoch-pinned read path: the walk pins, copies up to [`COUNT_CHUNK`] items (or
//! [`SIZE_CHUNK`] bytes) into a buffer, and unpins, so the epoch — and with it every other
//! process's reclamation — is never held back for longer than one chunk's copy. It never
//! writes the store.
//!
//! The walk goes through the items in split order, `(order, key)`, one bucket's range at a
//! time: at any table size, bucket `b` of `2^k` holds exactly the split orders whose top `k`
//! bits are `b` reversed, and a doubling splits each range in two, so the ranges stay in
//! order as the table grows. The [`Cursor`] holds where the next range starts and the last
//! item passed; each chunk reads a bucket as a lookup does (its nearest made ancestor) and
//! takes its items past the cursor, sorted; if the table grew while it read, it reads the
//! range again at the new size. Hence, with writers running: an item present and
//! unchanged for the whole walk is seen exactly once; a key written during the walk is seen
//! at most once, with a value it held at some moment of the walk.

use crate::arena::Arena;
use crate::buckets::Table;
use crate::index::{self, Memory};
use crate::item::{self, View};
use crate::reclaim::Reclaim;
use crate::transfer::stream::{self, Record};
use std::cmp::Ordering as Order;

/// Items a chunk copies at most under one pin.
pub const COUNT_CHUNK: usize = 256;
/// Bytes a chunk copies at most under one pin (a chunk takes at least one item).
pub const SIZE_CHUNK: usize = 1 << 20;
/// Buckets a chunk reads at most under one pin (most may be empty).
const COUNT_CHUNK_BUCKETS: usize = 4096;

/// Where the walk stands: the split order where the next bucket's range starts, and the
/// `(order, key)` of the last item passed (`None`: not started).
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    from: u64,
    last: Option<(u64, Vec<u8>)>,
    /// The walk passed the last bucket.
    pub(crate) done: bool,
}

impl Cursor {
    /// Whether item `at` sorts after the cursor.
    fn passed_by(&self, view: View, at: u64) -> bool {
        let Some((order, key)) = &self.last else {
            return true;
        };
        match view.order(at).cmp(order) {
            Order::Equal => item::compare_keys(view.key(at), key) == Order::Greater,
            other => other == Order::Greater,
        }
    }
}

/// Appends the next chunk's visible items to `out` as stream records, under one pin;
/// returns how many it appended. Sets `cursor.done` after the last bucket.
pub(crate) fn next_chunk<A: Arena>(
    reclaim: &Reclaim<A>,
    cursor: &mut Cursor,
    out: &mut Vec<u8>,
) -> u64 {
    let _pin = reclaim.pin();
    let shared = reclaim.slot().shared();
    let view = shared.view();
    let table = Table { reclaim };
    let now = shared.now();
    let (mut passed, mut visible, start) = (0, 0, out.len());
    for _ in 0..COUNT_CHUNK_BUCKETS {
        // The table's size now, and again once the bucket's words are read: a doubling
        // meanwhile may have split the range's bucket, moving some of its keys to a bucket
        // past this size, so the range is read again at the new size (where `from` starts
        // its first half). As a reader does (`index`, # Growth).
        let log2 = shared.buckets_log2();
        let mask = (1u64 << log2) - 1;
        let b = cursor.from.reverse_bits() & mask;
        let (_, word) = index::read(&table, b, log2, || log2);
        let mut items = Vec::new();
        // All the word's entries, as a lookup reads them: a frozen word still holds the items
        // its split moves to the child (`owned` would skip them once the child is installed,
        // though the child was unmade when `read` checked it, so they would be missed).
        table.entries(word, |tag, entry| {
            let at = index::object(entry);
            view.fresh_item(at);
            if tag & mask == b && cursor.passed_by(view, at) {
                items.push(at);
            }
            true
        });
        if shared.buckets_log2() != log2 {
            continue;
        }
        items.sort_by(|&x, &y| (view.order(x), view.key(x)).cmp(&(view.order(y), view.key(y))));
        let count = items.len();
        for (i, at) in items.into_iter().enumerate() {
            if shared.visible(at, now) {
                put_item(out, view, at);
                visible += 1;
            }
            passed += 1;
            cursor.last = Some((view.order(at), view.key(at).to_vec()));
            if passed == COUNT_CHUNK || out.len() - start >= SIZE_CHUNK {
                if i + 1 < count {
                    return visible;
                }
                break;
            }
        }
        // Bucket `b`'s range is done: the next starts past it (`2^(64 − log2)` orders wide).
        let width = 1u128 << (64 - log2);
        let next = u128::from(cursor.from) + width;
        if next > u128::from(u64::MAX) {
            cursor.done = true;
            return visible;
        }
        cursor.from = next as u64;
        if passed == COUNT_CHUNK || out.len() - start >= SIZE_CHUNK {
            break;
        }
    }
    visible
}

/// Appends item `at` (pinned by the caller) as a record.
fn put_item(out: &mut Vec<u8>, view: View, at: u64) {
    let meta = view.meta(at);
    let record = Record {
        key: view.key(at),
        flags: meta.flags,
        exptime: meta.expiry,
        cas: meta.cas,
        state: meta.lease,
        value: view.value(at),
    };
    stream::put_record(out, &record);
}
