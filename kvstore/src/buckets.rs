//! The bucket table: a directory of segments of bucket words (in the store's HWcc area), the
//! store's side of the index protocol ([`Table`], `index::Memory`: segments, bucket blocks,
//! their logs and retirement), growth, and the batched item counters that drive growth and
//! capacity.
//!
//! # Growth
//! `size` doubles (one CAS) when `count > buckets · LOAD` ([`LOAD`] items per bucket on
//! average). Nothing moves: bucket `b + 2^k` is split from its parent the first time a
//! writer needs it (`index`, # Growth), so a doubling costs O(1) and the work is spread over
//! later writes.
//!
//! A reader never splits (lookups never write), so it reads the nearest *made* ancestor and
//! passes the entries of its sibling buckets there. Writers therefore also make the new
//! half's buckets in order, [`COUNT_SPLITS_PER_INSERT`] per item inserted after the doubling:
//! the count a handle publishes is the cursor (inserts that take the count from `a` to `b`
//! owe the buckets at `half + K·(a − start) .. half + K·(b − start)`), and the handle pays
//! the debt [`COUNT_SPLITS_PER_WRITE`] per write. A debt left unpaid (a handle dropped, a
//! process killed) costs readers longer blocks, nothing else.
//!
//! Both are 64, so a doubling's splits are all made within the first 1/128 of the inserts
//! before the next doubling, if that many come. A doubling late in a load leaves most of its
//! splits to the store's maintenance thread ([`Buckets::make_whole`], `Map::spawn_maintainer`),
//! which looks at the size every `GROWTH_POLL` and makes the rest off the operations' path, as
//! memcached's hash table finishes its expansion in a thread of its own. The pace is what
//! matters, not the splits' number (a doubling makes them all in any case): while any are
//! owed, a lookup in the new half may read an ancestor's word besides its own, one more miss,
//! so a slow pace taxes every operation of a long window. The price is paid in few writes instead: one in the window makes up to
//! 64 splits (tens of microseconds), and about one write in 128 is in a window
//! (`docs/history/2026-11-27-growth-pace.md` has the measurements).

use crate::arena::Arena;
use crate::index::{self, Change, Memory, EMPTY, TAG_ITEM};
use crate::item::{self, View};
use crate::layout::{
    ALLOC_BLOCK, BLOCK, COUNT_SEGMENT, FIXED, FREE_BLOCK, SHIFT_BUCKETS_MAX, SHIFT_BUCKETS_START,
    SIZE_SEGMENT,
};
use crate::reclaim::Reclaim;
use crate::shared::Shared;
use crate::slot::Slot;
use crate::StoreError;
use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use std::cell::Cell;

/// Items per bucket on average before the table doubles: at 2, a bucket word costs 4–8 B of
/// HWcc memory per item (README, Coherence), and a lookup whose bucket holds more than its
/// item reads one bucket block more.
const LOAD: u64 = 2;
/// Entries of the block a write replaces that `Table::make` keeps on its stack to write
/// the new block from (a bucket holds one or two items on average, up to about four
/// before its split); a block with more is read a second time instead.
const COUNT_ENTRIES_KEPT: usize = 8;
/// Per-handle `count`/`used` deltas are flushed to the descriptor beyond these.
const BATCH_COUNT: i64 = 64;
const BATCH_USED: i64 = 16 * 1024;
/// Buckets of the new half of a grown table that each item inserted after the doubling
/// owes (see # Growth).
const COUNT_SPLITS_PER_INSERT: u64 = 64;
/// Owed buckets a write makes at most (one write's extra work stays bounded).
const COUNT_SPLITS_PER_WRITE: u64 = 64;

/// One handle's part in the table: the buckets it owes, its unpublished counter deltas,
/// and its sampling seed. Every method takes the store (or slot) it acts on.
#[derive(Debug)]
pub(crate) struct Buckets {
    count_delta: Cell<i64>,
    used_delta: Cell<i64>,
    /// Buckets `next..end` this handle owes (see # Growth).
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

    /// Counts an added (+) or removed (−) item of `bytes`.
    #[inline]
    pub(crate) fn account<A: Arena>(&self, slot: &Slot<A>, items: i64, bytes: i64) {
        let c = self.count_delta.get() + items;
        let u = self.used_delta.get() + bytes;
        self.count_delta.set(c);
        self.used_delta.set(u);
        if c.abs() >= BATCH_COUNT || u.abs() >= BATCH_USED {
            self.flush_counters(slot);
        }
    }

    /// Publishes this handle's batched counters (and grows the table if due).
    pub(crate) fn flush_counters<A: Arena>(&self, slot: &Slot<A>) {
        let (shared, thread) = (slot.shared(), &slot.thread);
        let d = shared.hw();
        let c = self.count_delta.replace(0);
        let u = self.used_delta.replace(0);
        let arm = || {
            podkv_hw::cas_site!("store.count.add.cas");
        };
        let count = shared
            .add_word(thread, &d.count.word, c as u64, arm)
            .wrapping_add(c as u64);
        let arm = || {
            podkv_hw::cas_site!("store.used.add.cas");
        };
        shared.add_word(thread, &d.used.word, u as u64, arm);
        // A killed process's unflushed deltas are lost, so the count can drift below zero:
        // never read it as a huge unsigned number (that would double the table to its limit).
        if c > 0 && (count as i64) > 0 {
            maybe_grow(slot, count);
            self.owe_splits(shared, count.saturating_sub(c as u64), count);
        }
    }

    /// Bytes of items as this handle sees them (shared count plus its own delta).
    pub(crate) fn used_now<A: Arena>(&self, shared: &Shared<A>) -> u64 {
        let used = shared.load_word(&shared.hw().used.word) as i64;
        (used + self.used_delta.get()).max(0) as u64
    }

    /// Notes the buckets owed by the inserts that took the count from `from` to `to`: those
    /// of the table's newer half, `K` per insert since the doubling (see # Growth).
    fn owe_splits<A: Arena>(&self, shared: &Shared<A>, from: u64, to: u64) {
        let size = shared.load_word(&shared.hw().size.word);
        if size & FIXED != 0 || size == 0 {
            return;
        }
        let half = 1u64 << (size - 1);
        // The count past which the table doubled to this size (`maybe_grow`).
        let start = half * LOAD;
        let at = |count: u64| half + count.saturating_sub(start) * COUNT_SPLITS_PER_INSERT;
        let (next, end) = (at(from), at(to).min(2 * half));
        if next < end {
            self.owed.set((next, end));
        }
    }

    /// Makes up to [`COUNT_SPLITS_PER_WRITE`] owed buckets. The caller is pinned.
    #[inline]
    pub(crate) fn split_owed<A: Arena>(&self, reclaim: &Reclaim<A>) {
        let (next, end) = self.owed.get();
        if next < end {
            self.split_owed_from(reclaim, next, end);
        }
    }

    #[cold]
    fn split_owed_from<A: Arena>(&self, reclaim: &Reclaim<A>, next: u64, end: u64) {
        let stop = (next + COUNT_SPLITS_PER_WRITE).min(end);
        let table = Table { reclaim };
        prefetch_parents(reclaim.slot().shared(), next..stop);
        for bucket in next..stop {
            // A bucket's hash is itself: the write target of `bucket` at a table that has it.
            let log2 = 64 - bucket.leading_zeros();
            if index::write_target(&table, bucket, log2, || log2).is_err() {
                // No room for a block: readers pass a few more entries instead.
                self.owed.set((end, end));
                return;
            }
        }
        self.owed.set((stop, end));
    }

    /// Makes every bucket of a growing table's newer half that is not made yet, 64 under
    /// each pin: the buckets it made, and the size (log2) whose table is now whole, `None`
    /// when a bucket could not be made for want of room. The maintenance thread's work
    /// (# Growth): a table that doubled late in a load is otherwise left half made under
    /// reads and updates, and a lookup in its newer half passes the entries of two buckets in
    /// their parent's block.
    pub(crate) fn make_whole<A: Arena>(&self, reclaim: &Reclaim<A>) -> (u64, Option<u32>) {
        let shared = reclaim.slot().shared();
        let size = shared.load_word(&shared.hw().size.word);
        let log2 = (size & !FIXED) as u32;
        if size & FIXED != 0 || size <= SHIFT_BUCKETS_START {
            return (0, Some(log2));
        }
        let table = Table { reclaim };
        // In runs of 64 from a random one, so that the maintenance threads of several
        // processes (and the inserts paying their debt from the half's start) meet made
        // buckets to skip rather than race for the same ones.
        let (half, end) = (1u64 << (log2 - 1), 1u64 << log2);
        let runs = half.div_ceil(COUNT_SPLITS_PER_WRITE);
        let first = self.random() % runs;
        let mut made = 0;
        for run in (first..runs).chain(0..first) {
            let next = half + run * COUNT_SPLITS_PER_WRITE;
            let stop = (next + COUNT_SPLITS_PER_WRITE).min(end);
            let _pin = reclaim.pin();
            for bucket in next..stop {
                if table
                    .bucket(bucket, false)
                    .is_some_and(|w| table.load(w) != 0)
                {
                    continue;
                }
                // A bucket's hash is itself: the write target of `bucket` at this size.
                if index::write_target(&table, bucket, log2, || log2).is_err() {
                    return (made, None);
                }
                made += 1;
            }
        }
        (made, Some(log2))
    }

    /// The next number of this handle's xorshift sequence.
    fn random(&self) -> u64 {
        let mut x = self.seed.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.set(x);
        x
    }

    /// A random bucket's nearest made bucket and its word (eviction's sample).
    pub(crate) fn sample<A: Arena>(&self, reclaim: &Reclaim<A>) -> (u64, u64) {
        let x = self.random();
        let table = Table { reclaim };
        let shared = reclaim.slot().shared();
        index::read(&table, x, shared.buckets_log2_cached(), || {
            shared.buckets_log2()
        })
    }
}

/// Starts loading the object each of `buckets`' parents names, so that the splits which
/// read them wait for one miss together rather than one each (the owed buckets are
/// consecutive, so are their parents: their words share a line or two, their objects do
/// not). Only a hint: the words are read as this cache has them, and a stale word costs a
/// useless prefetch, which never faults.
fn prefetch_parents<A: Arena>(shared: &Shared<A>, buckets: std::ops::Range<u64>) {
    let view = shared.view();
    for b in buckets {
        let Some(word) = bucket_word(shared, index::parent(b)) else {
            continue;
        };
        let at = index::object(word.load(Ordering::Relaxed));
        if at != 0 {
            podkv_hw::persist::prefetch_write(view.ptr(at));
        }
    }
}

/// Doubles the table (one CAS) when `count > buckets · LOAD`.
fn maybe_grow<A: Arena>(slot: &Slot<A>, count: u64) {
    let shared = slot.shared();
    let size = &shared.hw().size.word;
    let log2 = shared.load_word(size);
    if log2 & FIXED == 0 && log2 < SHIFT_BUCKETS_MAX && count > (1u64 << log2) * LOAD {
        podkv_hw::cas_site!("store.size.grow.cas");
        let _ = shared.cas_word(&slot.thread, size, log2, log2 + 1);
    }
}

/// Bucket `b`'s word, if its segment is made.
#[inline]
pub(crate) fn bucket_word<A: Arena>(shared: &Shared<A>, b: u64) -> Option<&AtomicU64> {
    let seg = shared.segment((b / COUNT_SEGMENT) as usize);
    (seg != 0).then(|| shared.view().word(seg + (b % COUNT_SEGMENT) * 8))
}

/// Calls `f(tag, item)` for each entry of the object `word` names, while it returns true.
#[inline]
pub(crate) fn entries(view: View, word: u64, mut f: impl FnMut(u64, u64) -> bool) {
    entries_read(view, word, true, |tag, item| f(tag, index::object(item)));
}

/// [`entries`], with each entry's item word as it is (hint included), making the object's
/// lines fresh first only if `fresh` (false: the caller made them fresh under the epoch pin
/// it still holds, and a published object does not change) and the word's hint is not this
/// view's (an object this cache domain wrote: rule 2b).
#[inline]
fn entries_read(view: View, word: u64, fresh: bool, mut f: impl FnMut(u64, u64) -> bool) {
    let at = index::object(word);
    if word & EMPTY != 0 || at == 0 {
        return;
    }
    let fresh = fresh && !view.hinted_here(word);
    if index::is_item(word) {
        // The tag only: whoever reads the key or value makes those lines fresh.
        if fresh {
            view.fresh_header(at);
        }
        f(view.tag(at), index::hinted(at, index::hint(word)));
        return;
    }
    if fresh {
        view.fresh_block(at);
    }
    for i in 0..view.block_len(at) {
        let (tag, item) = view.block_entry(at, i);
        if !f(tag, item) {
            return;
        }
    }
}

/// The store's side of the index protocol, for one handle (see the module doc).
pub(crate) struct Table<'r, A: Arena> {
    pub(crate) reclaim: &'r Reclaim<A>,
}

impl<A: Arena> Table<'_, A> {
    fn slot(&self) -> &Slot<A> {
        self.reclaim.slot()
    }

    /// Frees a block this thread made and never published.
    fn free_block(&self, at: u64) {
        let slot = self.slot();
        let view = slot.view();
        if view.is_swcc() && podkv_hw::site!("store.block.free_write_back") {
            view.write_back_new(at, item::block_size(view.block_len(at)));
        }
        slot.block_log(FREE_BLOCK, at);
        slot.free(at);
        slot.block_log(0, 0);
    }
}

impl<A: Arena> Memory for Table<'_, A> {
    type Error = StoreError;

    #[inline]
    fn bucket(&self, b: u64, make: bool) -> Option<&AtomicU64> {
        let shared = self.slot().shared();
        let i = (b / COUNT_SEGMENT) as usize;
        let mut seg = shared.segment(i);
        if seg == 0 {
            if !make {
                return None;
            }
            seg = make_segment(self.slot(), &shared.hw().directory[i])?;
        }
        Some(shared.view().word(seg + (b % COUNT_SEGMENT) * 8))
    }

    #[inline]
    fn load(&self, word: &AtomicU64) -> u64 {
        self.slot().shared().load_word(word)
    }

    #[inline]
    fn cas(&self, word: &AtomicU64, old: u64, new: u64) -> bool {
        let slot = self.slot();
        // Rule 1: what the new word names (an item `Writer::write_new` wrote, a block `make`
        // made) is in memory before the CAS publishes it; their write-backs were started
        // without waiting.
        slot.view().publish_fence();
        podkv_hw::cas_site!("store.bucket.cas");
        slot.shared().cas_word(&slot.thread, word, old, new).is_ok()
    }

    #[inline]
    fn entries(&self, word: u64, f: impl FnMut(u64, u64) -> bool) {
        entries_read(self.slot().view(), word, true, f)
    }

    fn make(&self, change: &Change) -> Result<u64, StoreError> {
        let view = self.slot().view();
        // Entries keep their items' hints; an item this write made carries this view's.
        let swapped = |item: u64| match change.swap {
            Some((old, new)) if old == index::object(item) => view.hinted(new),
            _ => item,
        };
        let keeps = |tag: u64, item: u64| change.keeps(tag, index::object(item));
        let add = change.add.map(|(tag, item)| (tag, view.hinted(item)));
        // The surviving entries, read once: the first `COUNT_ENTRIES_KEPT` are kept here to
        // be written from, so most blocks are read once, not twice.
        let mut kept = [(0u64, 0u64); COUNT_ENTRIES_KEPT];
        let mut survivors = 0usize;
        entries_read(view, change.from, !change.fresh, |tag, item| {
            if keeps(tag, item) {
                if let Some(entry) = kept.get_mut(survivors) {
                    *entry = (tag, swapped(item));
                }
                survivors += 1;
            }
            true
        });
        let len = survivors + usize::from(add.is_some());
        match (len, add) {
            (0, _) => return Ok(EMPTY),
            (1, Some((_, item))) => return Ok(item | TAG_ITEM),
            (1, None) => return Ok(kept[0].1 | TAG_ITEM),
            _ => {}
        }
        let slot = self.slot();
        let size = item::block_size(len);
        let at = match self.reclaim.take_spare(size) {
            Some(at) => at,
            None => {
                slot.before_alloc();
                slot.block_log(ALLOC_BLOCK, 0);
                match crate::arena::allocate_object::<A>(&slot.thread, view, size) {
                    Ok(at) => at,
                    Err(_) => {
                        slot.block_log(0, 0);
                        return Err(StoreError::OutOfMemory);
                    }
                }
            }
        };
        view.write_block(at, len);
        if survivors <= COUNT_ENTRIES_KEPT {
            for (i, &entry) in kept[..survivors].iter().enumerate() {
                view.write_entry(at, i, entry);
            }
        } else {
            let mut i = 0;
            // Read again (fresh since the count above, under the same pin).
            entries_read(view, change.from, false, |tag, item| {
                if keeps(tag, item) {
                    view.write_entry(at, i, (tag, swapped(item)));
                    i += 1;
                }
                true
            });
        }
        if let Some(add) = add {
            view.write_entry(at, survivors, add);
        }
        // Waited for by the publishing CAS (`Table::cas`).
        if view.is_swcc() && podkv_hw::site!("store.block.write_back") {
            view.write_back_new_unfenced(at, size);
        }
        slot.block_log(BLOCK, at);
        crate::reclaim::spare::end_take(slot);
        Ok(view.hinted(at))
    }

    #[inline]
    fn replacing(&self, old: u64) {
        if index::is_block(old) {
            let slot = self.slot();
            slot.put(&slot.record().replacing, index::object(old));
        }
    }

    #[inline]
    fn replaced(&self, old: u64, new: u64, won: bool) {
        let slot = self.slot();
        if won {
            if index::is_block(new) {
                slot.block_log(0, 0);
            }
            if index::is_block(old) {
                self.reclaim.retire_block(index::object(old));
            }
        } else {
            if index::is_block(old) {
                slot.put(&slot.record().replacing, 0);
            }
            if index::is_block(new) {
                self.free_block(index::object(new));
            }
        }
    }
}

/// Makes the segment of bucket words for the directory entry `entry`: carved from the HWcc
/// area, installed by CAS 0 → segment; a loser gives its carve back (`Arena::hwcc_unused`).
#[cold]
fn make_segment<A: Arena>(slot: &Slot<A>, entry: &AtomicU64) -> Option<u64> {
    let shared = slot.shared();
    let fresh = shared.arena.hwcc_block(&slot.thread, SIZE_SEGMENT).ok()?;
    podkv_hw::cas_site!("store.directory.cas");
    match shared.cas_word(&slot.thread, entry, 0, fresh) {
        Ok(_) => Some(fresh),
        Err(won) => {
            shared.arena.hwcc_unused(&slot.thread, fresh);
            Some(won)
        }
    }
}
