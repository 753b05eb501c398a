//! Spares: reclaimable items a handle reuses in place for new items of the same size.
//!
//! A periodic `collect` ([`Reuse::Keep`]) leaves up to [`COUNT_SPARES`] reclaimable items
//! ([`SIZE_SPARES`] bytes) in the slot's limbo instead of freeing them, and notes them here. A
//! new item of exactly the same size takes one ([`take`]) instead of calling the
//! allocator: a rewrite gets a block this thread wrote recently (cache-warm), and the
//! allocator's work, and the pages it would return to the OS and fault back, are left out.
//!
//! # Invariant
//! Every spare names a limbo entry of this handle's slot that holds its item and whose retire
//! epoch is reclaimable: no reader can reach the item, and `check` counts it as a limbo entry.
//! The list is process-local (a limbo walk adds what became reclaimable since the last one;
//! a `FreeAll` walk frees every spare and empties it), so a process that dies loses
//! nothing (the entries stay in the heap for the slot's next owner). Taking one is a logged
//! step, `TAKE_ENTRY` (see `recover`).

use crate::arena::Arena;
use crate::layout::{MASK_TAG, TAKE_ENTRY};
use crate::slot::Slot;
use podkv_hw::sync::mapped::Ordering;

/// Most spares a handle keeps. With several threads the epoch advances in bursts: a peer
/// preempted while pinned holds it for its whole time off the CPU (a scheduler slice, ~4 ms),
/// while this handle rewrites ~2000 items that all become reclaimable at once when it
/// returns. Kept as spares, they serve the writes of the next stall; freed (at 256, as
/// before), the next stall allocated again: 38% of a two-thread 50/50 run's sets went to the
/// allocator, and half of their frees were remote (callgrind, which serializes threads).
pub(crate) const COUNT_SPARES: usize = 4096;
/// Most bytes of items a handle keeps as spares (large items would otherwise hoard memory):
/// the stall above at 1 KiB items.
pub(crate) const SIZE_SPARES: usize = 4 << 20;

/// Whether a `collect` keeps spares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Keep up to [`COUNT_SPARES`] / [`SIZE_SPARES`] (the periodic collect of a busy handle).
    Keep,
    /// Free everything reclaimable (an explicit `collect`, a handle dropped, out of memory).
    FreeAll,
}

/// A limbo entry kept for reuse: the entry word's offset, the item in it and its size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spare {
    pub(crate) entry_at: u64,
    pub(crate) node: u64,
    pub(crate) size: usize,
}

/// A handle's spares by item size (a write needs one of exactly its size, and scanning a list
/// of thousands for it would cost more than the allocator): one list per size, sorted by
/// size (most workloads have a few sizes; one binary search finds the list).
///
/// Each list is a stack, newest on top: a write takes the spare retired last, whose lines
/// are the likeliest still in cache (retired ~`BATCH_COLLECT` writes ago, where the oldest of
/// a long stall's spares is thousands), and a walk's spares go above the older ones left.
/// A limbo walk goes newest to oldest, so its spares wait in `walk` and `end_walk` stacks
/// them in reverse. (The walk used to push them bag by bag, newest bag first and each bag
/// oldest first: a write took the oldest bag's spares first.)
#[derive(Debug, Default)]
pub(crate) struct Spares {
    by_size: Vec<(usize, Vec<Spare>)>,
    /// The spares of the walk under way, newest first (see `end_walk`).
    walk: Vec<Spare>,
    /// The indexes in `by_size` the last two lookups found, the latest first: a write peeks
    /// and takes a spare of its item's size and one of its bucket block's, and a walk notes
    /// spares of both sizes in turn; a binary search per call cost ~15 instructions each,
    /// and one remembered index missed at every change of size.
    last: std::cell::Cell<[usize; 2]>,
    /// Spares noted, and their bytes.
    count: usize,
    bytes: usize,
}

impl Spares {
    /// Forgets every spare (before a walk that frees them), keeping the lists' memory.
    pub(crate) fn clear(&mut self) {
        self.by_size.retain(|(_, list)| !list.is_empty());
        self.by_size.iter_mut().for_each(|(_, list)| list.clear());
        self.walk.clear();
        (self.count, self.bytes) = (0, 0);
    }

    /// Notes a spare found by the walk under way, which goes from the newest entry to the
    /// oldest; it is takeable after [`end_walk`](Self::end_walk).
    pub(crate) fn push(&mut self, spare: Spare) {
        self.count += 1;
        self.bytes += spare.size;
        self.walk.push(spare);
    }

    /// Ends a walk: stacks its spares oldest first, so the newest is taken first.
    pub(crate) fn end_walk(&mut self) {
        let mut walk = std::mem::take(&mut self.walk);
        for spare in walk.drain(..).rev() {
            self.stack(spare);
        }
        self.walk = walk;
    }

    /// Puts a spare on top of its size's stack.
    fn stack(&mut self, spare: Spare) {
        let i = match self.find(spare.size) {
            Ok(i) => i,
            Err(i) => {
                self.by_size.insert(i, (spare.size, Vec::new()));
                i
            }
        };
        self.by_size[i].1.push(spare);
    }

    /// The spare a new item of `size` bytes would take next.
    #[inline]
    pub(crate) fn peek(&self, size: usize) -> Option<&Spare> {
        self.by_size[self.find(size).ok()?].1.last()
    }

    /// Where the list of `size` is (or would go).
    #[inline]
    fn find(&self, size: usize) -> Result<usize, usize> {
        let [latest, before] = self.last.get();
        let is = |i: usize| self.by_size.get(i).is_some_and(|(s, _)| *s == size);
        if is(latest) {
            return Ok(latest);
        }
        if is(before) {
            self.last.set([before, latest]);
            return Ok(before);
        }
        let found = self.by_size.binary_search_by_key(&size, |(s, _)| *s);
        if let Ok(i) = found {
            self.last.set([i, latest]);
        }
        found
    }

    /// Removes and returns the spare [`peek`](Self::peek) names.
    #[inline]
    pub(crate) fn take(&mut self, size: usize) -> Option<Spare> {
        let i = self.find(size).ok()?;
        let spare = self.by_size[i].1.pop()?;
        self.count -= 1;
        self.bytes -= spare.size;
        Some(spare)
    }

    /// Whether no spare is noted.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// What a `collect` may still keep as spares.
pub(crate) struct Room {
    count: usize,
    bytes: usize,
}

impl Room {
    /// The room a collect has beside the spares already noted.
    pub(crate) fn for_reuse(reuse: Reuse, noted: &Spares) -> Room {
        match reuse {
            Reuse::Keep => Room {
                count: COUNT_SPARES.saturating_sub(noted.count),
                bytes: SIZE_SPARES.saturating_sub(noted.bytes),
            },
            Reuse::FreeAll => Room { count: 0, bytes: 0 },
        }
    }

    /// Makes room for one item of `size` bytes if it fits; its size, or `None` (then the
    /// caller frees it).
    #[inline]
    pub(crate) fn take(&mut self, size: usize) -> Option<usize> {
        if self.count == 0 || size > self.bytes {
            return None;
        }
        self.count -= 1;
        self.bytes -= size;
        Some(size)
    }
}

/// Takes a spare item of exactly `size` bytes out of `slot`'s limbo for reuse: logs
/// `TAKE_ENTRY(node) @ entry`, then zeroes the entry. From then until the new item is
/// logged, the log is the only reference: recovery frees the block unless the `log` word
/// names it as an item (see `recover`). The spare was reclaimable (retired two epochs
/// ago), so no reader can still reach it.
#[inline]
pub(crate) fn take<A: Arena>(slot: &Slot<A>, spares: &mut Spares, size: usize) -> Option<u64> {
    let spare = spares.take(size)?;
    let entry = slot.view().word(spare.entry_at);
    debug_assert_eq!(entry.load(Ordering::Relaxed), spare.node, "a spare's entry");
    slot.limbo_log(TAKE_ENTRY, spare.node, spare.entry_at);
    slot.put(entry, 0);
    Some(spare.node)
}

/// Starts loading, for writing, the spare a new item of `size` bytes would take, so its
/// lines arrive while the write searches its bucket (the copy into it then stalls on
/// nothing). Only a hint: it changes no state.
#[inline]
pub(crate) fn prefetch<A: Arena>(slot: &Slot<A>, spares: &Spares, size: usize) {
    let Some(spare) = spares.peek(size) else {
        return;
    };
    // A plain count of lines: `(0..size).step_by(64)` compiled to about 9 instructions
    // a line, 150 of a 1 KiB set's (callgrind).
    let mut line = slot.view().ptr(spare.node);
    for _ in 0..size.div_ceil(64) {
        podkv_hw::persist::prefetch_write(line);
        line = line.wrapping_add(64);
    }
}

/// After the item a write allocated is logged as `ITEM`: ends a spare's `TAKE_ENTRY`.
/// The slot's limbo word says whether one is open: every other limbo step ends where it
/// starts, so only [`take`] leaves the word set across an allocation.
#[inline]
pub(crate) fn end_take<A: Arena>(slot: &Slot<A>) {
    let open = slot.record().limbo_log.load(Ordering::Relaxed);
    if open != 0 {
        debug_assert_eq!(open & MASK_TAG, TAKE_ENTRY, "open limbo step");
        slot.limbo_log(0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use crate::item::SIZE_HEADER;
    use crate::map::Handle;
    use crate::reclaim::{limbo, BATCH_COLLECT};
    use crate::{PodArena, Store, StoreConfig};
    use podkv_hw::sync::mapped::Ordering;

    const VALUE: &[u8] = &[b'v'; 960];
    /// The size of an item of key `k` and `VALUE`.
    const SIZE: usize = SIZE_HEADER + 1 + 960;

    /// A fresh store in a directory removed when the returned guard drops.
    fn store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            heap: podkv_alloc::Config {
                small_bytes: 1 << 30,
                large_bytes: 1 << 30,
                slots: 4,
                ..podkv_alloc::Config::default()
            },
            ..StoreConfig::default()
        };
        (Store::open(dir.path().join("store"), config).unwrap(), dir)
    }

    /// The node of the newest entry of `h`'s limbo (the item retired last).
    fn retired_last(h: &Handle<PodArena>) -> u64 {
        let head = h.reclaim.slot().record().limbo.load(Ordering::Relaxed);
        let bag = limbo::bag(h.reclaim.slot(), head);
        let len = bag.len.load(Ordering::Relaxed) as usize;
        bag.entries[len - 1][0].load(Ordering::Relaxed)
    }

    /// Rewrites `k` until a periodic collect has noted spares.
    fn rewrite_until_spares(h: &Handle<PodArena>) {
        for _ in 0..4 * BATCH_COLLECT {
            h.set(b"k", VALUE, 0, 0).unwrap();
            if h.reclaim.spares().peek(SIZE).is_some() {
                return;
            }
        }
        panic!("no spares after {} rewrites", 4 * BATCH_COLLECT);
    }

    #[test]
    fn a_write_takes_the_spare_retired_last() {
        let (store, _dir) = store();
        let h = store.handle().unwrap();
        rewrite_until_spares(&h);
        // The collect ran right after the rewrite that retired the newest entry; the epoch
        // moved twice since it was stamped, so every entry was reclaimable.
        let last = retired_last(&h);
        assert_eq!(h.reclaim.spares().peek(SIZE).unwrap().node, last);
        let taken = h.recycling().spares_taken;
        h.set(b"k", VALUE, 0, 0).unwrap();
        assert_eq!(h.recycling().spares_taken, taken + 1);
        assert_eq!(h.get(b"k").unwrap().unwrap().item, last);
    }

    #[test]
    fn spares_of_a_later_walk_come_first() {
        let (store, _dir) = store();
        let h = store.handle().unwrap();
        rewrite_until_spares(&h);
        let first_walk = h.reclaim.spares().peek(SIZE).unwrap().node;
        // Rewrite until the next walk (taking the first walk's spares meanwhile): its spares
        // were retired after every one of the first walk's.
        let walks = h.reclaim.walks_so_far();
        while h.reclaim.walks_so_far() == walks {
            h.set(b"k", VALUE, 0, 0).unwrap();
        }
        let later = retired_last(&h);
        assert_ne!(later, first_walk);
        assert_eq!(h.reclaim.spares().peek(SIZE).unwrap().node, later);
    }

    #[test]
    fn a_writer_reuses_again_soon_after_a_stall() {
        let (store, _dir) = store();
        let h = store.handle().unwrap();
        let peer = store.handle().unwrap();
        rewrite_until_spares(&h);
        {
            // A peer pinned for a while (as if preempted inside an operation): the epoch
            // stops, the writer's spares run out and its writes go to the allocator.
            let _pinned = peer.reclaim.pin();
            let before = h.recycling();
            for _ in 0..8 * BATCH_COLLECT {
                h.set(b"k", VALUE, 0, 0).unwrap();
            }
            let stall = h.recycling() - before;
            assert!(stall.allocations > 0, "{stall:?}");
            assert!(stall.stuck_collects > 0, "{stall:?}");
        }
        // The peer unpinned: the writer reuses within a few writes, not a full batch.
        let before = h.recycling();
        let mut writes = 0;
        while h.recycling().spares_taken == before.spares_taken {
            h.set(b"k", VALUE, 0, 0).unwrap();
            writes += 1;
            assert!(writes <= BATCH_COLLECT, "no reuse after {writes} writes");
        }
        // A stuck collect retries after `BATCH_COLLECT_STUCK` retirements; the one after the
        // unpin walks, and the next write takes a spare.
        assert!(writes <= 32, "reuse after {writes} writes");
    }
}
