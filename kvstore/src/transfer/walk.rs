//! Reading every visible item of a live store, a chunk at a time, through the store's normal
//! epoch-pinned read path: the walk pins, copies up to [`COUNT_CHUNK`] items (or
//! [`SIZE_CHUNK`] bytes) into a buffer, and unpins, so the epoch — and with it every other
//! process's reclamation — is never held back for longer than one chunk's copy. It never
//! writes the store.
//!
//! The split-ordered list is sorted by `(order, key)` whatever the table's size, so the walk
//! follows it in that order and resumes each chunk after the last item it passed (the
//! [`Cursor`]), entering the list again at the nearest linked sentinel before that item (a
//! lookup's entry point). Hence, with writers running: an item present and unchanged for the
//! whole walk is seen exactly once; a key written during the walk is seen at most once, with
//! a value it held at some moment of the walk.

use crate::arena::Arena;
use crate::buckets;
use crate::item::{self, View};
use crate::list::MARK;
use crate::reclaim::Reclaim;
use crate::transfer::stream::{self, Record};
use podkv_hw::sync::mapped::Ordering;
use std::cmp::Ordering as Order;

/// Items a chunk copies at most under one pin.
pub const COUNT_CHUNK: usize = 256;
/// Bytes a chunk copies at most under one pin (a chunk takes at least one item).
pub const SIZE_CHUNK: usize = 1 << 20;

/// Where the walk stands: the `(order, key)` of the last item passed (`None`: not started).
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    last: Option<(u64, Vec<u8>)>,
    /// The walk reached the end of the list.
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
/// returns how many it appended. Sets `cursor.done` at the end of the list.
pub(crate) fn next_chunk<A: Arena>(
    reclaim: &Reclaim<A>,
    cursor: &mut Cursor,
    out: &mut Vec<u8>,
) -> u64 {
    let _pin = reclaim.pin();
    let shared = reclaim.slot().shared();
    let view = shared.view();
    let now = shared.now();
    let hash = cursor.last.as_ref().map_or(0, |(_, key)| item::hash(key));
    let mut at = buckets::head_for_read(shared, hash).load(Ordering::Acquire) & !MARK;
    let (mut passed, mut visible, start) = (0, 0, out.len());
    let mut last = 0;
    while at != 0 {
        let next = view.word(at).load(Ordering::Acquire);
        if next & MARK == 0 && view.is_item(at) && cursor.passed_by(view, at) {
            if shared.visible(at, now) {
                put_item(out, view, at);
                visible += 1;
            }
            passed += 1;
            last = at;
            if passed == COUNT_CHUNK || out.len() - start >= SIZE_CHUNK {
                break;
            }
        }
        at = next & !MARK;
    }
    if last != 0 {
        cursor.last = Some((view.order(last), view.key(last).to_vec()));
    }
    cursor.done = at == 0;
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
