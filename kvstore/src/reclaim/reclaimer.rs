//! [`Reclaim`]: one handle's part in reclamation — its pins, when it collects, what its last
//! limbo walk decided, and its spares. The words it acts on are its slot's (announcement,
//! limbo) and the descriptor's epoch; the state here is process-local.
//!
//! `Reclaim` holds the handle's [`Slot`] (the other components borrow it from here): a pin
//! then is one pointer, and a read's guard stays three words, as when the pin named the
//! handle (one more word cost every `get` 3 instructions in callgrind).

use super::epoch;
use super::limbo::{self, Epochs};
use super::spare::{self, Reuse, Room, Spares};
use crate::arena::Arena;
use crate::kvmap::Recycling;
use crate::slot::Slot;
use podkv_hw::sync::mapped::Ordering::Relaxed;
use std::cell::{Cell, RefCell};

/// Retirements between two `collect`s. Each reads every slot's announcement (one line per
/// heap slot, 64 in the benchmark, evicted again by the writes in between): at 64 that was
/// one D1 miss per set (callgrind); at 256 a quarter, for 256 KiB more of limbo per writer
/// at 1 KiB items.
pub(crate) const BATCH_COLLECT: u64 = 256;
/// Retirements before a collect that found the epoch stuck (unmoved since its last limbo
/// walk: a peer pinned all along) tries again. A peer preempted while pinned holds the epoch
/// for its whole time off the CPU; once it unpins, waiting the full `BATCH_COLLECT` again
/// sent up to 256 more writes to the allocator (remote frees, page faults) with the spares
/// run dry, which is what a busy machine made of two-thread 50/50 (README, Performance).
/// A retry costs one pass over the announcements, and only while the epoch is stuck.
pub(crate) const BATCH_COLLECT_STUCK: u64 = 16;
/// Times a stuck collect, unpinned, gives up the CPU (`yield_now`) for a preempted peer to
/// run and unpin, trying the epoch after each. Bounded: a peer pinned for a reason of its
/// own (a long read, a dead process before recovery) costs a writer at most this many
/// yields per `BATCH_COLLECT_STUCK` retirements.
pub(crate) const COUNT_STUCK_YIELDS: u32 = 8;
/// Every this-many `Keep` walks goes through the whole limbo (see `collect_keeping`).
const COUNT_WALKS_FULL: u32 = 16;
/// Pins between two that load the global epoch fresh (the others announce the epoch as this
/// host's cache holds it: `epoch::pin_cached_with`; in an `mcas` heap that saves an
/// eviction per operation). A handle that only reads never loads the epoch fresh otherwise,
/// and would hold advancing back at every pin; this bounds that to a pin in 64.
const COUNT_PINS_FRESH: u32 = 64;
/// `collect` attempts when a handle is dropped.
const COUNT_DROP_COLLECTS: usize = 64;

/// One handle's reclamation state, and the slot it acts for (see the module doc).
pub(crate) struct Reclaim<A: Arena> {
    slot: Slot<A>,
    /// Nesting depth of pins (guards alive).
    pins: Cell<u32>,
    /// Outermost pins so far, mod [`COUNT_PINS_FRESH`].
    pinned: Cell<u32>,
    /// Nodes retired since the last `collect` (which scans every slot's announcement, so it
    /// runs once per `BATCH_COLLECT` retirements).
    retired_since: Cell<u64>,
    /// The global epoch of this handle's last limbo walk (see `collect_keeping`).
    walked: Cell<u64>,
    /// Limbo walks so far (every `COUNT_WALKS_FULL`-th goes through the whole limbo).
    walks: Cell<u32>,
    /// Reclaimable items of this slot's limbo kept for reuse, as the last `collect` kept
    /// them minus those taken since (process-local; see `spare`).
    spares: RefCell<Spares>,
    /// How new items were found and how collects fared (see `recycling`).
    recycled: Cell<Recycling>,
    /// Whether new blocks come from the allocator only (`fresh_blocks`).
    no_spares: Cell<bool>,
}

/// An epoch pin: while it lives, no node this thread can reach is freed.
pub(crate) struct Pin<'h, A: Arena> {
    reclaim: &'h Reclaim<A>,
}

impl<A: Arena> Drop for Pin<'_, A> {
    fn drop(&mut self) {
        self.reclaim.unpin();
    }
}

impl<A: Arena> Reclaim<A> {
    /// The reclamation state of a handle on `slot`: nothing pinned, retired or kept yet.
    pub(crate) fn new(slot: Slot<A>) -> Reclaim<A> {
        Reclaim {
            slot,
            pins: Cell::new(0),
            pinned: Cell::new(0),
            retired_since: Cell::new(0),
            walked: Cell::new(0),
            walks: Cell::new(0),
            spares: RefCell::default(),
            recycled: Cell::new(Recycling::default()),
            no_spares: Cell::new(false),
        }
    }

    /// Runs `f` with every new block taken from the allocator, none from the spares:
    /// compaction's moves, whose copies must leave the slabs being drained, where the spares
    /// of the blocks moved before lie.
    pub(crate) fn fresh_blocks<R>(&self, f: impl FnOnce() -> R) -> R {
        let was = self.no_spares.replace(true);
        let result = f();
        self.no_spares.set(was);
        result
    }

    /// The slot this acts for.
    #[inline]
    pub(crate) fn slot(&self) -> &Slot<A> {
        &self.slot
    }

    /// Pins the slot (announces the epoch) unless it is pinned already.
    #[inline]
    pub(crate) fn pin(&self) -> Pin<'_, A> {
        let depth = self.pins.get();
        if depth == 0 {
            let hw = self.slot.shared().hw();
            let pinned = self.pinned.get();
            self.pinned.set((pinned + 1) % COUNT_PINS_FRESH);
            if pinned == 0 {
                epoch::pin_with(&self.slot, &hw.epoch.word, self.slot.announce());
            } else {
                epoch::pin_cached_with(&self.slot, &hw.epoch.word, self.slot.announce());
            }
        }
        self.pins.set(depth + 1);
        Pin { reclaim: self }
    }

    #[inline]
    fn unpin(&self) {
        let slot = &self.slot;
        let depth = self.pins.get() - 1;
        self.pins.set(depth);
        if depth == 0 {
            // Before the unpin: this pin's claims must be in memory when a recoverer's
            // grace sees it end (`recover::grace`).
            slot.write_back_puts();
            epoch::unpin_with(slot, slot.announce());
            if self.retired_since.get() >= BATCH_COLLECT {
                self.collect_keeping(Reuse::Keep);
                slot.write_back_puts();
            }
        }
    }

    /// Retires an item this thread's bucket CAS just removed: claims the retirement
    /// (recovery of a killed remover may race for it, see `recover`), then puts it on the
    /// slot's limbo list. Every remover read the item's header line in the pin it removes it
    /// in (a writer compared the key; an evictor sampled the item fresh), so the claim needs
    /// no fresh read ([`View::claim_removed`]).
    ///
    /// [`View::claim_removed`]: crate::item::View::claim_removed
    pub(crate) fn retire(&self, node: u64) {
        let slot = &self.slot;
        let view = slot.view();
        if view.claim_removed(node, false, slot.index) {
            slot.put_claim(node, false);
            self.push_limbo(node, view.item_size(node));
        }
        slot.put(&slot.record().unlink, 0);
    }

    /// As [`retire`](Self::retire), for a bucket block, whose entries the caller read in
    /// this pin (it made the bucket's next word from them).
    pub(crate) fn retire_block(&self, block: u64) {
        let slot = &self.slot;
        if slot.view().claim_removed(block, true, slot.index) {
            slot.put_claim(block, true);
            let len = slot.view().block_len(block);
            self.push_limbo(block, crate::item::block_size(len));
        }
        slot.put(&slot.record().replacing, 0);
    }

    /// Puts a removed, claimed item or block of `size` bytes on the slot's limbo list,
    /// stamped with the epoch now.
    pub(crate) fn push_limbo(&self, node: u64, size: usize) {
        if limbo::push(&self.slot, node, size) {
            self.retired_since.set(self.retired_since.get() + 1);
        }
    }

    /// Whether the slot is pinned now (a guard is alive).
    #[inline]
    pub(crate) fn is_pinned(&self) -> bool {
        self.pins.get() != 0
    }

    /// A collect that keeps spares, as the periodic one (a write that made room for its
    /// item reuses its victim's block as a spare).
    pub(crate) fn collect_spares(&self) {
        self.collect_keeping(Reuse::Keep);
    }

    /// Tries to advance the epoch and frees every limbo entry old enough; drops empty bags.
    pub(crate) fn collect(&self) {
        self.collect_keeping(Reuse::FreeAll);
    }

    /// A handle is going: collects until the limbo is empty, a few tries at most (other
    /// threads unpin within one operation); what remains waits for the slot's next owner.
    pub(crate) fn release(&self) {
        self.collect_all();
        self.slot.write_back_puts();
    }

    /// Collects until the limbo is empty, a few tries at most (other threads unpin within
    /// one operation), so that what this handle retired is freed now; with the slot's
    /// pending remote frees counted on their slab, so a slab they empty goes back now.
    pub(crate) fn collect_all(&self) {
        for _ in 0..COUNT_DROP_COLLECTS {
            self.collect();
            if limbo::is_empty(&self.slot) {
                break;
            }
            std::thread::yield_now();
        }
        A::flush_remote_frees(&self.slot.thread);
    }

    /// As [`collect`](Self::collect), but with [`Reuse::Keep`] leaves some reclaimable items
    /// in limbo as this handle's spares (see `spare`).
    ///
    /// A periodic collect whose epoch has not moved since the last walk skips the walk: an
    /// entry becomes reclaimable only when the epoch advances (entries retired since carry
    /// the epoch now), so the walk would find what the last one left, and the spares noted
    /// then are still exact. While a preempted peer holds the epoch back, the limbo grows
    /// and re-walking it every `BATCH_COLLECT` retirements made the stall quadratic.
    ///
    /// Such a stuck collect, if unpinned, first yields the CPU up to [`COUNT_STUCK_YIELDS`]
    /// times (a peer preempted while pinned may be waiting for it, on a busy machine), trying
    /// the epoch after each; if it is still stuck, the next collect comes after
    /// [`BATCH_COLLECT_STUCK`] retirements instead of `BATCH_COLLECT`, so reuse resumes
    /// soon after the peer unpins.
    fn collect_keeping(&self, reuse: Reuse) {
        let slot = &self.slot;
        self.retired_since.set(0);
        let mut global = try_advance(slot);
        if self.pins.get() == 0 {
            global = try_advance(slot);
        }
        if reuse == Reuse::Keep && global == self.walked.get() {
            global = self.yield_for_epoch(global);
            if global == self.walked.get() {
                self.count_recycling(|c| c.stuck_collects += 1);
                self.retired_since
                    .set(BATCH_COLLECT.saturating_sub(BATCH_COLLECT_STUCK));
                return;
            }
        }
        let mut kept = self.spares.borrow_mut();
        // Entries the last walk decided (reclaimable then) are freed or noted spares already:
        // a `Keep` walk leaves them and stops at the first bag they fill (stamps only grow
        // towards the head), except every `COUNT_WALKS_FULL`-th walk, which goes on to free
        // the old bags whose spares were all taken. A `FreeAll` walk frees them all.
        let decided = match reuse {
            Reuse::Keep => self.walked.get(),
            Reuse::FreeAll => {
                kept.clear();
                0
            }
        };
        let walks = self.walks.get().wrapping_add(1);
        self.walks.set(walks);
        let full = reuse == Reuse::FreeAll || walks % COUNT_WALKS_FULL == 0;
        self.walked.set(global);
        let mut room = Room::for_reuse(reuse, &kept);
        limbo::walk(slot, Epochs { global, decided }, full, &mut kept, &mut room);
        // The walk went newest to oldest: the newest spare goes on top (see `Spares`).
        kept.end_walk();
    }

    /// For a collect that found the epoch at `stuck`: if unpinned, yields the CPU up to
    /// [`COUNT_STUCK_YIELDS`] times until an advance succeeds, then tries once more (an entry
    /// needs two advances); the epoch afterwards. Pinned (an explicit collect inside an
    /// operation), this thread itself may be what holds the epoch: no yield.
    #[cold]
    fn yield_for_epoch(&self, stuck: u64) -> u64 {
        let slot = &self.slot;
        if self.pins.get() != 0 {
            return stuck;
        }
        for _ in 0..COUNT_STUCK_YIELDS {
            std::thread::yield_now();
            self.count_recycling(|c| c.yields += 1);
            let global = try_advance(slot);
            if global != stuck {
                return try_advance(slot);
            }
        }
        stuck
    }

    /// A spare of exactly `size` bytes for a new item, taken out of limbo (see
    /// [`spare::take`]); `None` when there is none.
    pub(crate) fn take_spare(&self, size: usize) -> Option<u64> {
        if self.no_spares.get() {
            return None;
        }
        let taken = spare::take(&self.slot, &mut self.spares.borrow_mut(), size)?;
        self.count_recycling(|c| c.spares_taken += 1);
        Some(taken)
    }

    /// Starts loading the spare a new item of `size` bytes would take ([`spare::prefetch`]).
    #[inline]
    pub(crate) fn prefetch_spare(&self, size: usize) {
        spare::prefetch(&self.slot, &self.spares.borrow(), size);
    }

    /// How this handle's new items were found and how its collects fared.
    pub(crate) fn recycling(&self) -> Recycling {
        self.recycled.get()
    }

    /// Adds to this handle's recycling counts.
    #[inline]
    pub(crate) fn count_recycling(&self, change: impl FnOnce(&mut Recycling)) {
        let mut counts = self.recycled.get();
        change(&mut counts);
        self.recycled.set(counts);
    }

    /// Limbo walks so far.
    #[cfg(test)]
    pub(crate) fn walks_so_far(&self) -> u32 {
        self.walks.get()
    }

    /// The spares noted now.
    #[cfg(test)]
    pub(crate) fn spares(&self) -> std::cell::Ref<'_, Spares> {
        self.spares.borrow()
    }
}

/// One attempt to advance the global epoch; the epoch afterwards.
///
/// Only the announcements of owned slots are read: a heap has 1024 slots by default, one
/// announcement line each, and a few threads. A slot read as unowned is one whose thread (if
/// it claims the slot later) pins after this scan, exactly as if its announcement had been
/// read unpinned: it claims before it announces, and the owner word is read after the
/// scan's fence, as the announcements are. A dead owner keeps its word until its recovery
/// has cleared the announcement, so a dead pin still holds the epoch back.
fn try_advance<A: Arena>(slot: &Slot<A>) -> u64 {
    let shared = slot.shared();
    let global = &shared.hw().epoch.word;
    let count = shared.arena.slots();
    let Some(owners) = shared.arena.slot_owners() else {
        return epoch::try_advance_with(slot, global, (0..count).map(|i| shared.announce(i)));
    };
    let owners = &owners[..owners.len().min(count as usize)];
    let epoch = epoch::advance_begin(slot, global);
    // Eight owner words at a time: a heap has 1024 slots and a few threads, so most groups
    // are all zero and cost eight loads and one test, where a filter over single slots costs
    // about 20 instructions a slot (and a collect scans twice).
    for (g, group) in owners.chunks(COUNT_OWNERS_GROUP).enumerate() {
        if group.iter().fold(0, |any, w| any | w.load(Relaxed)) == 0 {
            continue;
        }
        for (j, owner) in group.iter().enumerate() {
            let i = (g * COUNT_OWNERS_GROUP + j) as u32;
            if owner.load(Relaxed) != 0 && epoch::holds_back(slot, shared.announce(i), epoch) {
                return epoch;
            }
        }
    }
    epoch::advance_end(slot, global, epoch)
}

/// Owner words [`try_advance`] tests at once.
const COUNT_OWNERS_GROUP: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, StoreConfig};
    use std::sync::atomic::Ordering;

    /// A pinned thread holds the epoch wherever its slot lies among the groups of owner words
    /// the advance tests at once (a full group past the first, and the last, partial one).
    #[test]
    fn a_pin_in_any_group_of_slots_holds_the_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            heap: podkv_alloc::Config {
                small_bytes: 1 << 30,
                large_bytes: 1 << 30,
                slots: 2 * COUNT_OWNERS_GROUP as u64 + 3,
                ..podkv_alloc::Config::default()
            },
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path().join("store"), config).unwrap();
        let handles: Vec<_> = (0..2 * COUNT_OWNERS_GROUP + 2)
            .map(|_| store.handle().unwrap())
            .collect();
        let advancer = handles[0].reclaim.slot();
        let global = || advancer.shared().hw().epoch.word.load(Ordering::SeqCst);
        for peer in &handles[1..] {
            let pin = peer.reclaim.pin();
            let pinned_at = global();
            for _ in 0..3 {
                try_advance(advancer);
            }
            assert_eq!(global(), pinned_at + 1, "a pin held nothing back");
            drop(pin);
            try_advance(advancer);
            try_advance(advancer);
            assert_eq!(global(), pinned_at + 3, "an unpinned slot held the epoch");
        }
    }
}
