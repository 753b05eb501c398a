//! The bucket table: a directory of segments of in-place sentinels over the one split-ordered
//! list, its growth, and the batched item counters that drive growth and capacity.
//!
//! # Buckets
//! `head_for_write` makes the bucket's sentinel on first use, recursively from its parent:
//! this *is* the incremental migration of a doubling. `head_for_read` uses the nearest made
//! ancestor: lookups never write.
//!
//! # Growth
//! `size` doubles (one CAS) when `count > buckets / 2` (load factor ≤ 1/2). Nothing moves: bucket `b + 2^k`'s
//! sentinel is spliced in front of its items the first time a writer needs it, so a doubling
//! costs O(1) and the work is spread over later writes (Shalev–Shavit split-ordered lists).
//!
//! A reader never links (lookups never write), so it starts from the nearest *linked*
//! ancestor and walks past the items of its sibling buckets. Writers therefore also link the
//! new half's sentinels in order, [`COUNT_LINKS_PER_INSERT`] per item inserted after the
//! doubling: the count a handle publishes is the cursor (inserts that take the count from `a`
//! to `b` owe the sentinels at `half + K·(a − start) .. half + K·(b − start)`), and the handle
//! pays the debt [`COUNT_LINKS_PER_WRITE`] per write. So the new half is linked after the
//! first `1/K` of the inserts that fill it, not only where writes happened to land; a debt
//! left unpaid (a handle dropped, a process killed) costs readers a longer walk, nothing else.

use crate::arena::Arena;
use crate::item::{self, SENTINEL_CLAIMED, SENTINEL_LINKED, SIZE_SENTINEL};
use crate::layout::{
    ALLOC_SEGMENT, COUNT_SEGMENT, FIXED, FREE_ITEM, SHIFT_BUCKETS_MAX, SIZE_SEGMENT,
};
use crate::list::{self, Probe};
use crate::reclaim::Reclaim;
use crate::shared::Shared;
use crate::slot::Slot;
use crate::StoreError;
use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use std::cell::Cell;

/// The table doubles when items exceed `buckets >> SHIFT_LOAD` (load factor ≤ 1/2): a lookup
/// then passes ~0.2 other items of its bucket on average instead of ~0.4, each a cache and
/// TLB miss, for 16 B more of sentinel per bucket (see README, Performance).
const SHIFT_LOAD: u64 = 1;
/// Per-handle `count`/`used` deltas are flushed to the descriptor beyond these.
const BATCH_COUNT: i64 = 64;
const BATCH_USED: i64 = 16 * 1024;
/// Sentinels of the new half of a grown table that each item inserted after the doubling
/// owes (see # Growth): the half has twice as many buckets as the inserts that fill the
/// table to its next doubling, so at 8 it is linked after the first quarter of them.
const COUNT_LINKS_PER_INSERT: u64 = 8;
/// Owed sentinels a write links at most (one write's extra work stays bounded).
const COUNT_LINKS_PER_WRITE: u64 = 8;

/// One handle's part in the table: the sentinels it owes, its unpublished counter deltas,
/// and its sampling seed. Every method takes the store (or slot) it acts on.
#[derive(Debug)]
pub(crate) struct Buckets {
    count_delta: Cell<i64>,
    used_delta: Cell<i64>,
    /// Buckets `next..end` whose sentinels this handle owes (see # Growth).
    owed: Cell<(u64, u64)>,
    /// Xorshift state for sampling buckets (eviction).
    seed: Cell<u64>,
}

impl Buckets {
    /// The table state of a handle on slot `slot` (which seeds its sampling).
    pub(crate) fn new(slot: u32) -> Buckets {
        Buckets {
            count_delta: Cell::new(0),
            used_delta: Cell::new(0),
            owed: Cell::new((0, 0)),
            seed: Cell::new(0x2545_F491_4F6C_DD1D ^ (u64::from(slot) << 32)),
        }
    }

    /// Counts a linked (+) or unlinked (−) item of `bytes`.
    #[inline]
    pub(crate) fn account<A: Arena>(&self, shared: &Shared<A>, items: i64, bytes: i64) {
        let c = self.count_delta.get() + items;
        let u = self.used_delta.get() + bytes;
        self.count_delta.set(c);
        self.used_delta.set(u);
        if c.abs() >= BATCH_COUNT || u.abs() >= BATCH_USED {
            self.flush_counters(shared);
        }
    }

    /// Publishes this handle's batched counters (and grows the table if due).
    pub(crate) fn flush_counters<A: Arena>(&self, shared: &Shared<A>) {
        let d = shared.hw();
        let c = self.count_delta.replace(0);
        let u = self.used_delta.replace(0);
        let count = d
            .count
            .word
            .fetch_add(c as u64, Ordering::Relaxed)
            .wrapping_add(c as u64);
        d.used.word.fetch_add(u as u64, Ordering::Relaxed);
        // A killed process's unflushed deltas are lost, so the count can drift below zero:
        // never read it as a huge unsigned number (that would double the table to its limit).
        if c > 0 && (count as i64) > 0 {
            maybe_grow(shared, count);
            self.owe_links(shared, count.saturating_sub(c as u64), count);
        }
    }

    /// Bytes of linked items as this handle sees them (shared count plus its own delta).
    pub(crate) fn used_now<A: Arena>(&self, shared: &Shared<A>) -> u64 {
        let used = shared.hw().used.word.load(Ordering::Relaxed) as i64;
        (used + self.used_delta.get()).max(0) as u64
    }

    /// Notes the sentinels owed by the inserts that took the count from `from` to `to`: those
    /// of the table's newer half, `K` per insert since the doubling (see # Growth).
    fn owe_links<A: Arena>(&self, shared: &Shared<A>, from: u64, to: u64) {
        let size = shared.hw().size.word.load(Ordering::Relaxed);
        if size & FIXED != 0 || size == 0 {
            return;
        }
        let half = 1u64 << (size - 1);
        // The count past which the table doubled to this size (`maybe_grow`).
        let start = half >> SHIFT_LOAD;
        let at = |count: u64| half + count.saturating_sub(start) * COUNT_LINKS_PER_INSERT;
        let (next, end) = (at(from), at(to).min(2 * half));
        if next < end {
            self.owed.set((next, end));
        }
    }

    /// Links up to [`COUNT_LINKS_PER_WRITE`] owed sentinels. The caller is pinned (linking
    /// searches the list).
    #[inline]
    pub(crate) fn link_owed<A: Arena>(&self, reclaim: &Reclaim<A>) {
        let (next, end) = self.owed.get();
        if next < end {
            self.link_owed_from(reclaim, next, end);
        }
    }

    #[cold]
    fn link_owed_from<A: Arena>(&self, reclaim: &Reclaim<A>, next: u64, end: u64) {
        let stop = (next + COUNT_LINKS_PER_WRITE).min(end);
        for bucket in next..stop {
            if sentinel(reclaim, bucket).is_err() {
                // No room for a segment: readers walk a little further instead.
                self.owed.set((end, end));
                return;
            }
        }
        self.owed.set((stop, end));
    }

    /// The `next` word of a random bucket's nearest linked sentinel (eviction's sample).
    pub(crate) fn sample<'s, A: Arena>(&self, shared: &'s Shared<A>) -> &'s AtomicU64 {
        let mut x = self.seed.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.set(x);
        head_for_read(shared, x)
    }
}

/// Doubles the table (one CAS) when `count > buckets >> SHIFT_LOAD`.
fn maybe_grow<A: Arena>(shared: &Shared<A>, count: u64) {
    let size = &shared.hw().size.word;
    let log2 = size.load(Ordering::Relaxed);
    if log2 & FIXED == 0 && log2 < SHIFT_BUCKETS_MAX && count > (1u64 << log2) >> SHIFT_LOAD {
        let _ = size.compare_exchange(log2, log2 + 1, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The `next` word of the nearest linked sentinel at or above `hash`'s bucket. Never writes.
#[inline]
pub(crate) fn head_for_read<A: Arena>(shared: &Shared<A>, hash: u64) -> &AtomicU64 {
    let mut bucket = bucket_of(shared, hash);
    loop {
        if let Some(at) = made_sentinel(shared, bucket) {
            if is_linked(shared, at) {
                return shared.view().word(at);
            }
        }
        bucket = parent(bucket);
    }
}

/// The `next` word of `hash`'s bucket sentinel, linking it (and its ancestors) if needed.
/// The caller is pinned.
///
/// When the bucket's segment cannot be made (segments live in the large region, which may
/// be full of items), the write starts from the nearest linked ancestor, as a reader does:
/// the list is sorted by split order, so any earlier sentinel is a correct start, and the
/// write costs a longer walk instead of failing for want of 64 KiB of table.
#[inline]
pub(crate) fn head_for_write<A: Arena>(reclaim: &Reclaim<A>, hash: u64) -> &AtomicU64 {
    let slot = reclaim.slot();
    match sentinel(reclaim, bucket_of(slot.shared(), hash)) {
        Ok(at) => slot.view().word(at),
        Err(_) => head_without_room(slot.shared(), hash),
    }
}

#[cold]
fn head_without_room<A: Arena>(shared: &Shared<A>, hash: u64) -> &AtomicU64 {
    head_for_read(shared, hash)
}

/// Whether the segment holding `bucket` was never made.
pub(crate) fn segment_missing<A: Arena>(shared: &Shared<A>, bucket: u64) -> bool {
    let d = shared.hw();
    d.directory[(bucket / COUNT_SEGMENT) as usize].load(Ordering::Acquire) == 0
}

/// The `next` word of `bucket`'s sentinel if it is linked.
pub(crate) fn made_head<A: Arena>(shared: &Shared<A>, bucket: u64) -> Option<&AtomicU64> {
    let at = made_sentinel(shared, bucket)?;
    is_linked(shared, at).then(|| shared.view().word(at))
}

/// The offset of `bucket`'s sentinel if its segment is made.
#[inline]
fn made_sentinel<A: Arena>(shared: &Shared<A>, bucket: u64) -> Option<u64> {
    let entry = &shared.hw().directory[(bucket / COUNT_SEGMENT) as usize];
    let seg = entry.load(Ordering::Acquire);
    (seg != 0).then(|| seg + (bucket % COUNT_SEGMENT) * SIZE_SENTINEL as u64)
}

/// The offset of `bucket`'s sentinel, making its segment if needed.
#[inline]
fn sentinel_at<A: Arena>(slot: &Slot<A>, bucket: u64) -> Option<u64> {
    let entry = &slot.shared().hw().directory[(bucket / COUNT_SEGMENT) as usize];
    let mut seg = entry.load(Ordering::Acquire);
    if seg == 0 {
        seg = make_segment(slot, entry)?;
    }
    Some(seg + (bucket % COUNT_SEGMENT) * SIZE_SENTINEL as u64)
}

#[cold]
fn make_segment<A: Arena>(slot: &Slot<A>, entry: &AtomicU64) -> Option<u64> {
    slot.before_alloc();
    slot.log(ALLOC_SEGMENT, slot.view().offset_of(entry));
    let Ok(fresh) = slot.alloc_zeroed(SIZE_SEGMENT) else {
        slot.log(0, 0);
        return None;
    };
    let won = match entry.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(won) => {
            slot.log(FREE_ITEM, fresh);
            slot.free(fresh);
            won
        }
    };
    slot.log(0, 0);
    Some(won)
}

/// Whether the sentinel at `at` is linked.
#[inline]
fn is_linked<A: Arena>(shared: &Shared<A>, at: u64) -> bool {
    shared.view().sentinel_state(at).load(Ordering::Acquire) & SENTINEL_LINKED != 0
}

/// The bucket `hash` falls in now.
#[inline]
fn bucket_of<A: Arena>(shared: &Shared<A>, hash: u64) -> u64 {
    let log2 = shared.buckets_log2();
    hash & ((1u64 << log2) - 1)
}

/// Bucket `bucket`'s sentinel if linked (linking it first), else its nearest linked
/// ancestor's (when another thread holds the claim).
/// (Inline, and no `ok_or(StoreError::OutOfMemory)`: that built and dropped an error on
/// every call, 11 of the 50 instructions this took per write.)
#[inline]
fn sentinel<A: Arena>(reclaim: &Reclaim<A>, bucket: u64) -> Result<u64, StoreError> {
    let slot = reclaim.slot();
    match sentinel_at(slot, bucket) {
        Some(at) if is_linked(slot.shared(), at) => Ok(at),
        Some(at) => link_sentinel(reclaim, bucket, at),
        None => Err(StoreError::OutOfMemory),
    }
}

/// The lazy migration step: claims bucket `bucket`'s sentinel (one CAS) and splices it
/// into the list after its parent's (one CAS, retried), then marks it linked.
#[cold]
fn link_sentinel<A: Arena>(reclaim: &Reclaim<A>, bucket: u64, at: u64) -> Result<u64, StoreError> {
    let slot = reclaim.slot();
    let parent_at = sentinel(reclaim, parent(bucket))?;
    let view = slot.view();
    let order = item::sentinel_order(bucket);
    let state = view.sentinel_state(at);
    if state
        .compare_exchange(
            0,
            order | SENTINEL_CLAIMED,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        return Ok(if is_linked(slot.shared(), at) {
            at
        } else {
            parent_at
        });
    }
    let probe = Probe { order, key: &[] };
    let head = view.word(parent_at);
    let nodes = slot.nodes();
    loop {
        let pos = list::find(&nodes, head, &probe, &mut |n| reclaim.retire(n));
        debug_assert!(!pos.found, "only the claimer links a sentinel");
        if list::try_insert(&view, &pos, at) {
            break;
        }
    }
    state.store(order | SENTINEL_LINKED, Ordering::Release);
    Ok(at)
}

/// The bucket a bucket was split from: its highest set bit cleared.
#[inline]
fn parent(bucket: u64) -> u64 {
    if bucket == 0 {
        0
    } else {
        bucket & !(1u64 << (63 - bucket.leading_zeros()))
    }
}
