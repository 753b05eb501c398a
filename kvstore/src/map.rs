//! The index: one split-ordered Harris–Michael list, a growing bucket table of sentinels, and
//! epoch reclamation, over an [`Arena`].
//!
//! # Reading order
//! - [`Map::open_in`]: find or create the descriptor (root CAS 0 → offset; a loser frees its own);
//! - buckets: `head_for_write` (makes the bucket's sentinel on first use, recursively from its
//!   parent: this *is* the incremental migration of a doubling) and `head_for_read` (uses the
//!   nearest made ancestor: lookups never write);
//! - pins and retirement: `Pin`, `retire`, `collect`;
//! - `update`: the one write loop every memcached command goes through.
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
use crate::config::{Clock, Eviction, StoreConfig, Table};
use crate::epoch;
use crate::item::{self, View, SENTINEL_CLAIMED, SENTINEL_LINKED, SIZE_SENTINEL};
use crate::kvmap::Recycling;
use crate::layout::*;
use crate::list::{self, Probe};
use crate::recover;
use crate::spare::{Reuse, Room, Spare, Spares};
use crate::StoreError;
use podkv_alloc::AllocError;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The index over arena `A`: [`crate::Store`] in the pod heap, [`crate::LocalStore`] in
/// process memory. Cheap to clone (an `Arc`).
pub struct Map<A: Arena> {
    pub(crate) inner: Arc<Inner<A>>,
}

impl<A: Arena> Clone for Map<A> {
    fn clone(&self) -> Self {
        Map {
            inner: self.inner.clone(),
        }
    }
}

impl<A: Arena> std::fmt::Debug for Map<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map")
            .field("descriptor", &self.inner.desc_at)
            .finish()
    }
}

pub(crate) struct Inner<A: Arena> {
    pub(crate) arena: A,
    pub(crate) view: View,
    pub(crate) desc_at: u64,
    pub(crate) clock: Clock,
    /// What `open_in` settled for a slot `create` adopted (see [`Map::settled_at_open`]).
    pub(crate) settled_at_open: std::sync::OnceLock<recover::Settled>,
    /// [`Map::value_max`], set once the descriptor is validated (0 before): fixed for the
    /// map's life, and computing it asked the heap's geometry on every write.
    value_max: std::sync::atomic::AtomicUsize,
}

// SAFETY: `View` is a base address into memory shared on purpose; all shared words are atomics.
unsafe impl<A: Arena> Send for Inner<A> {}
// SAFETY: as above.
unsafe impl<A: Arena> Sync for Inner<A> {}

/// Buckets of a new growing table (log2).
const SHIFT_BUCKETS_START: u64 = 10;
/// The table doubles when items exceed `buckets >> SHIFT_LOAD` (load factor ≤ 1/2): a lookup
/// then passes ~0.2 other items of its bucket on average instead of ~0.4, each a cache and
/// TLB miss, for 16 B more of sentinel per bucket (see README, Performance).
const SHIFT_LOAD: u64 = 1;
/// Per-handle `count`/`used` deltas are flushed to the descriptor beyond these.
const BATCH_COUNT: i64 = 64;
const BATCH_USED: i64 = 16 * 1024;
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
/// Sentinels of the new half of a grown table that each item inserted after the doubling
/// owes (see # Growth): the half has twice as many buckets as the inserts that fill the
/// table to its next doubling, so at 8 it is linked after the first quarter of them.
const COUNT_LINKS_PER_INSERT: u64 = 8;
/// Owed sentinels a write links at most (one write's extra work stays bounded).
const COUNT_LINKS_PER_WRITE: u64 = 8;

impl<A: Arena> Map<A> {
    /// Opens the store in `arena`, creating it if the root is empty.
    pub fn open_in(arena: A, config: &StoreConfig) -> Result<Map<A>, StoreError> {
        let seen = arena.root().load(Ordering::Acquire);
        Map::open_seen(arena, config, seen)
    }

    /// As [`Map::open_in`], given the root as this process read it: zero makes a descriptor
    /// and lets the root CAS decide (another process may have installed one since).
    pub(crate) fn open_seen(
        arena: A,
        config: &StoreConfig,
        seen: u64,
    ) -> Result<Map<A>, StoreError> {
        let view = View::new(arena.base());
        let mut desc_at = seen;
        let mut created = None;
        if desc_at == 0 {
            let made = create(&arena, view, config)?;
            desc_at = made.desc_at;
            created = Some(made);
        }
        let map = Map {
            inner: Arc::new(Inner {
                arena,
                view,
                desc_at,
                clock: config.clock.clone(),
                settled_at_open: std::sync::OnceLock::new(),
                value_max: std::sync::atomic::AtomicUsize::new(0),
            }),
        };
        map.validate_descriptor()?;
        let value_max = map.value_max_now();
        map.inner.value_max.store(value_max, Ordering::Relaxed);
        if let Some(Created {
            thread,
            adopted: Some(report),
            ..
        }) = created
        {
            // The slot `create` claimed was a dead owner's: settle its store log with the
            // allocator's report while the slot is still held (as `recover_dead` does).
            Handle::new(map.clone(), thread).settle_own(report);
        }
        Ok(map)
    }

    fn validate_descriptor(&self) -> Result<(), StoreError> {
        let d = self.desc();
        if d.magic != MAGIC || d.version != VERSION {
            return Err(StoreError::Corrupt(format!(
                "root names {:#x}, which is not a podkv store descriptor (version {VERSION})",
                self.inner.desc_at
            )));
        }
        if d.slots < u64::from(self.inner.arena.slots()) {
            return Err(StoreError::Corrupt(
                "fewer slot records than heap slots".into(),
            ));
        }
        Ok(())
    }

    /// The descriptor.
    #[inline]
    pub(crate) fn desc(&self) -> &Descriptor {
        // SAFETY: `desc_at` was published by the root CAS after its fields were written and is
        // never freed (INVARIANT: root[0] ≠ 0 ⇒ a live descriptor); its shared words are atomics.
        unsafe { &*(self.inner.view.ptr(self.inner.desc_at) as *const Descriptor) }
    }

    /// Offset of slot record `i`.
    #[inline]
    fn slot_at(&self, i: u32) -> u64 {
        self.desc().slots_at + u64::from(i) * std::mem::size_of::<SlotRecord>() as u64
    }

    /// Slot record `i`.
    #[inline]
    pub(crate) fn slot(&self, i: u32) -> &SlotRecord {
        let at = self.slot_at(i);
        // SAFETY: `i < slots` (arena slots ≤ descriptor slots, checked at open); the array is
        // never freed and its words are atomics.
        unsafe { &*(self.inner.view.ptr(at) as *const SlotRecord) }
    }

    /// The node view.
    #[inline]
    pub(crate) fn view(&self) -> View {
        self.inner.view
    }

    /// Now, in Unix seconds.
    #[inline]
    pub fn now(&self) -> u32 {
        self.inner.clock.now()
    }

    /// Longest key this store accepts.
    pub fn key_max(&self) -> usize {
        self.desc().key_max as usize
    }

    /// Longest value this store accepts (and the heap serves today).
    #[inline]
    pub fn value_max(&self) -> usize {
        self.inner.value_max.load(Ordering::Relaxed)
    }

    /// [`value_max`](Self::value_max) from the descriptor and the heap.
    fn value_max_now(&self) -> usize {
        let block = self.inner.arena.block_max() - item::SIZE_HEADER - self.key_max();
        (self.desc().value_max as usize).min(block)
    }

    /// log2 of the bucket count now.
    pub fn buckets_log2(&self) -> u32 {
        (self.desc().size.word.load(Ordering::Relaxed) & !FIXED) as u32
    }

    /// Items linked and their bytes (header + key + value) as the shared counters say now:
    /// approximate, since each handle publishes its deltas in batches (`flush_counters`).
    pub fn usage(&self) -> (u64, u64) {
        let d = self.desc();
        let count = d.count.word.load(Ordering::Relaxed) as i64;
        let used = d.used.word.load(Ordering::Relaxed) as i64;
        (count.max(0) as u64, used.max(0) as u64)
    }

    /// Items evicted to make room since the store was made, by every process (the sum of the
    /// per-slot counters in the heap; exact once the evicting threads have returned).
    pub fn evictions(&self) -> u64 {
        (0..self.inner.arena.slots())
            .map(|i| self.slot(i).evictions.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes of items the store may hold (`None`: until the heap is full), as its creator set.
    pub fn capacity(&self) -> Option<u64> {
        Some(self.desc().capacity).filter(|&c| c != 0)
    }

    /// A handle for the calling thread (claims an arena slot). Recovers dead slots first
    /// ([`Map::recover_dead`]), so a killed process's in-flight blocks are settled with the
    /// allocator's report rather than by a silent adoption of its slot.
    pub fn handle(&self) -> Result<Handle<A>, StoreError> {
        self.recover_dead()?;
        self.handle_unrecovered()
    }

    /// A handle without recovering dead slots first; the slot's own record is settled
    /// (a slot adopted from a dead owner by the arena leaves its store log behind).
    pub(crate) fn handle_unrecovered(&self) -> Result<Handle<A>, StoreError> {
        let thread = self.inner.arena.thread()?;
        let h = Handle::new(self.clone(), thread);
        h.settle(h.slot, None);
        Ok(h)
    }
}

/// What [`create`] leaves for [`Map::open_in`]: the descriptor that won the root, and the
/// thread it claimed, with the allocator's report if that claim adopted a dead owner's slot
/// (the store's log of that slot is settled once the descriptor is known).
pub(crate) struct Created<A: Arena> {
    pub(crate) desc_at: u64,
    pub(crate) thread: A::Thread,
    pub(crate) adopted: Option<(podkv_alloc::InFlight, u64)>,
}

/// Makes a descriptor, its slot records and segment 0 (holding bucket 0's sentinel), installs it at
/// the root; returns whichever descriptor won. If another process's descriptor won, the slot
/// this claimed may be one its dead owner used in that store: the report of the adoption is
/// taken at once (it belongs to this claim only) and returned for settling.
pub(crate) fn create<A: Arena>(
    arena: &A,
    view: View,
    config: &StoreConfig,
) -> Result<Created<A>, StoreError> {
    let thread = arena.thread()?;
    let adopted = A::adoption(&thread);
    let slots = u64::from(arena.slots());
    let desc_at = alloc_zeroed::<A>(&thread, view, std::mem::size_of::<Descriptor>())?;
    let slots_at = alloc_zeroed::<A>(&thread, view, slots as usize * 64)?;
    let seg0 = alloc_zeroed::<A>(&thread, view, SIZE_SEGMENT)?;
    // Bucket 0's sentinel is the list's head: linked from birth.
    view.sentinel_state(seg0)
        .store(item::sentinel_order(0) | SENTINEL_LINKED, Ordering::Relaxed);
    // SAFETY: a fresh zeroed block of `size_of::<Descriptor>()` bytes, unpublished.
    let d = unsafe { &mut *(view.ptr(desc_at) as *mut Descriptor) };
    d.magic = MAGIC;
    d.version = VERSION;
    d.key_max = config.key_max as u64;
    d.value_max = config.value_max as u64;
    d.capacity = config.capacity.unwrap_or(0);
    d.evict = u64::from(config.eviction == Eviction::SampledOldest);
    d.slots_at = slots_at;
    d.slots = slots;
    let size = match config.table {
        Table::Growing => SHIFT_BUCKETS_START,
        Table::Fixed(n) => FIXED | u64::from(n).min(SHIFT_BUCKETS_MAX),
    };
    d.size.word.store(size, Ordering::Relaxed);
    d.epoch.word.store(2, Ordering::Relaxed);
    d.directory[0].store(seg0, Ordering::Relaxed);
    let desc_at =
        match arena
            .root()
            .compare_exchange(0, desc_at, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => desc_at,
            Err(winner) => {
                for at in [seg0, slots_at, desc_at] {
                    A::free(&thread, at);
                }
                winner
            }
        };
    Ok(Created {
        desc_at,
        thread,
        adopted,
    })
}

fn alloc_zeroed<A: Arena>(thread: &A::Thread, view: View, size: usize) -> Result<u64, StoreError> {
    let at = A::allocate(thread, size).map_err(|_| StoreError::OutOfMemory)?;
    // SAFETY: a fresh block of `size` bytes this thread owns and has not published.
    unsafe { std::ptr::write_bytes(view.ptr(at), 0, size) };
    Ok(at)
}

/// One thread's handle on a [`Map`]: its arena slot, its epoch pin, and batched counters.
/// Not `Send`: it holds the thread's slot.
pub struct Handle<A: Arena> {
    pub(crate) map: Map<A>,
    pub(crate) thread: A::Thread,
    pub(crate) slot: u32,
    /// Offset of this slot's record (`Map::slot(slot)`): a set reaches it 6–10 times (pin,
    /// logs, limbo), and each `Map::slot` re-read the descriptor for the array.
    record_at: u64,
    /// Write-loop passes whose link CAS lost to a concurrent change (see `lost_races`).
    pub(crate) lost: Cell<u64>,
    /// Nesting depth of pins (guards alive).
    pins: Cell<u32>,
    /// Nodes retired since the last `collect` (which scans every slot's announcement, so it
    /// runs once per `BATCH_COLLECT` retirements).
    retired_since: Cell<u64>,
    count_delta: Cell<i64>,
    used_delta: Cell<i64>,
    seed: Cell<u64>,
    /// This handle's block of CAS tokens: `cas_next..cas_end` (see `cas_after`).
    pub(crate) cas_next: Cell<u64>,
    pub(crate) cas_end: Cell<u64>,
    /// Buckets `next..end` whose sentinels this handle owes (see # Growth).
    owed: Cell<(u64, u64)>,
    /// The global epoch of this handle's last limbo walk (see `collect_keeping`).
    walked: Cell<u64>,
    /// Limbo walks so far (every `COUNT_WALKS_FULL`-th goes through the whole limbo).
    walks: Cell<u32>,
    /// Reclaimable items of this slot's limbo kept for reuse, as the last `collect` kept
    /// them minus those taken since (process-local; see `spare`).
    pub(crate) spares: RefCell<Spares>,
    /// How new items were found and how collects fared (see [`Handle::recycling`]).
    pub(crate) recycled: Cell<Recycling>,
}

impl<A: Arena> std::fmt::Debug for Handle<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("slot", &self.slot).finish()
    }
}

/// An epoch pin: while it lives, no node this thread can reach is freed.
pub(crate) struct Pin<'h, A: Arena> {
    pub(crate) handle: &'h Handle<A>,
}

impl<A: Arena> Drop for Pin<'_, A> {
    fn drop(&mut self) {
        self.handle.unpin();
    }
}

impl<A: Arena> Drop for Handle<A> {
    /// Publishes the counters and empties this slot's limbo if the epoch lets it within a
    /// few tries (other threads unpin within one operation); what remains waits for the
    /// slot's next owner.
    fn drop(&mut self) {
        self.flush_counters();
        for _ in 0..COUNT_DROP_COLLECTS {
            self.collect();
            if self.limbo_is_empty() {
                break;
            }
            std::thread::yield_now();
        }
    }
}

/// The epochs a limbo walk decides by: entries reclaimable at `global` are freed or kept as
/// spares, except those already reclaimable at `decided` (the last walk's), which that walk
/// decided.
#[derive(Clone, Copy, Debug)]
struct Epochs {
    global: u64,
    decided: u64,
}

/// Whether every entry of `bag` was decided by the walk at epoch `decided`: its newest entry
/// was reclaimable then (entries are pushed in epoch order).
fn bag_is_decided(bag: &Bag, decided: u64) -> bool {
    let len = bag.len.load(Ordering::Relaxed) as usize;
    len > 0 && {
        let newest = Stamp(bag.entries[len - 1][1].load(Ordering::Relaxed));
        epoch::is_reclaimable(newest.epoch(), decided)
    }
}

/// Every this-many `Keep` walks goes through the whole limbo (see `collect_keeping`).
const COUNT_WALKS_FULL: u32 = 16;

/// `collect` attempts when a handle is dropped.
const COUNT_DROP_COLLECTS: usize = 64;

impl<A: Arena> Handle<A> {
    /// A handle on `map` for the slot `thread` holds (its record not settled yet).
    fn new(map: Map<A>, thread: A::Thread) -> Handle<A> {
        let slot = A::slot_index(&thread);
        let record_at = map.slot_at(slot);
        Handle {
            map,
            thread,
            slot,
            record_at,
            lost: Cell::new(0),
            pins: Cell::new(0),
            retired_since: Cell::new(0),
            count_delta: Cell::new(0),
            used_delta: Cell::new(0),
            seed: Cell::new(0x2545_F491_4F6C_DD1D ^ (u64::from(slot) << 32)),
            cas_next: Cell::new(0),
            cas_end: Cell::new(0),
            owed: Cell::new((0, 0)),
            walked: Cell::new(0),
            walks: Cell::new(0),
            spares: RefCell::default(),
            recycled: Cell::new(Recycling::default()),
        }
    }

    /// Limbo walks so far.
    #[cfg(test)]
    pub(crate) fn walks_so_far(&self) -> u32 {
        self.walks.get()
    }

    /// This handle's slot record (`self.record()`).
    #[inline]
    pub(crate) fn record(&self) -> &SlotRecord {
        // SAFETY: as `Map::slot`: `record_at` is that record's offset, never freed; its words
        // are atomics.
        unsafe { &*(self.map.view().ptr(self.record_at) as *const SlotRecord) }
    }

    /// Write-loop passes of this handle whose insert, replace or delete CAS failed because
    /// another writer changed the link first, so the write searched again (process-local; for
    /// benchmarks: contention on hot keys shows here).
    pub fn lost_races(&self) -> u64 {
        self.lost.get()
    }

    /// How this handle's new items were found (spares reused or the allocator) and how often
    /// its periodic collects found the epoch stuck and yielded (process-local; for
    /// benchmarks: a machine too busy for reclamation to keep up shows here).
    pub fn recycling(&self) -> Recycling {
        self.recycled.get()
    }

    /// Adds to this handle's recycling counts.
    #[inline]
    pub(crate) fn count_recycling(&self, change: impl FnOnce(&mut Recycling)) {
        let mut counts = self.recycled.get();
        change(&mut counts);
        self.recycled.set(counts);
    }

    /// The map this handle works on.
    pub fn map(&self) -> &Map<A> {
        &self.map
    }

    /// The arena slot this handle holds.
    pub fn slot_index(&self) -> u32 {
        self.slot
    }

    #[inline]
    pub(crate) fn pin(&self) -> Pin<'_, A> {
        let depth = self.pins.get();
        if depth == 0 {
            let d = self.map.desc();
            epoch::pin(&d.epoch.word, &self.record().announce);
        }
        self.pins.set(depth + 1);
        Pin { handle: self }
    }

    #[inline]
    fn unpin(&self) {
        let depth = self.pins.get() - 1;
        self.pins.set(depth);
        if depth == 0 {
            epoch::unpin(&self.record().announce);
            if self.retired_since.get() >= BATCH_COLLECT {
                self.collect_keeping(Reuse::Keep);
            }
        }
    }

    /// Whether this slot's limbo holds nothing.
    fn limbo_is_empty(&self) -> bool {
        let head = self.record().limbo.load(Ordering::Relaxed);
        head == 0
            || (self.bag(head).len.load(Ordering::Relaxed) == 0
                && self.bag(head).next.load(Ordering::Relaxed) == 0)
    }

    pub(crate) fn bag(&self, at: u64) -> &Bag {
        // SAFETY: bags are blocks of this slot's limbo list, touched only by this slot's owner
        // (this thread); their words are atomics.
        unsafe { &*(self.map.view().ptr(at) as *const Bag) }
    }

    /// Retires a node this thread just snipped: claims the retirement (recovery of a killed
    /// snipper may race for it, see `recover`), then puts it on this slot's limbo list.
    pub(crate) fn retire(&self, node: u64) {
        if self.map.view().claim_retire(node, self.slot) {
            self.push_limbo(node);
        }
        self.record().unlink.store(0, Ordering::Relaxed);
    }

    /// Puts an unlinked, claimed node on this slot's limbo list, stamped with the epoch now.
    pub(crate) fn push_limbo(&self, node: u64) {
        let record = self.record();
        let mut head = record.limbo.load(Ordering::Relaxed);
        if head == 0 || self.bag(head).len.load(Ordering::Relaxed) == COUNT_BAG as u64 {
            self.before_alloc();
            self.limbo_log(recover::ALLOC_BAG, 0, 0);
            let made = alloc_zeroed::<A>(&self.thread, self.map.view(), SIZE_BAG);
            match made {
                Ok(bag) => {
                    self.bag(bag).next.store(head, Ordering::Relaxed);
                    record.limbo.store(bag, Ordering::Relaxed);
                    self.limbo_log(0, 0, 0);
                    head = bag;
                }
                // No room for a bag: the node leaks (counted by `check` as unreachable). Bags
                // are 512 B and items are freed first, so this needs a heap with no free slab.
                Err(_) => {
                    self.limbo_log(0, 0, 0);
                    return;
                }
            }
        }
        let bag = self.bag(head);
        let len = bag.len.load(Ordering::Relaxed) as usize;
        let epoch = epoch::retire_epoch(&self.map.desc().epoch.word);
        // The node was just unlinked by this thread: its header is in cache.
        let stamp = Stamp::new(epoch, self.map.view().item_size(node));
        bag.entries[len][0].store(node, Ordering::Relaxed);
        bag.entries[len][1].store(stamp.0, Ordering::Relaxed);
        bag.len.store(len as u64 + 1, Ordering::Relaxed);
        self.retired_since.set(self.retired_since.get() + 1);
    }

    /// Tries to advance the epoch and frees every limbo entry old enough; drops empty bags.
    pub fn collect(&self) {
        self.collect_keeping(Reuse::FreeAll);
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
        self.retired_since.set(0);
        let mut global = self.try_advance();
        if self.pins.get() == 0 {
            global = self.try_advance();
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
        let view = self.map.view();
        let record = self.record();
        let head_at = offset_in(view, &record.limbo);
        let mut link_at = head_at;
        loop {
            let at = view.word(link_at).load(Ordering::Relaxed);
            if at == 0 {
                break;
            }
            let bag = self.bag(at);
            if !full && bag_is_decided(bag, decided) {
                break;
            }
            let epochs = Epochs { global, decided };
            self.free_reclaimable(at, bag, epochs, &mut kept, &mut room);
            if bag.len.load(Ordering::Relaxed) == 0 && link_at != head_at {
                self.limbo_log(recover::FREE_BAG, at, link_at);
                view.word(link_at)
                    .store(bag.next.load(Ordering::Relaxed), Ordering::Relaxed);
                A::free(&self.thread, at);
                self.limbo_log(0, 0, 0);
                continue;
            }
            link_at = at; // `next` is the bag's first word
        }
        // The walk went newest to oldest: the newest spare goes on top (see `Spares`).
        kept.end_walk();
    }

    /// One attempt to advance the global epoch; the epoch afterwards.
    fn try_advance(&self) -> u64 {
        let d = self.map.desc();
        let slots = (0..self.map.inner.arena.slots()).map(|i| &self.map.slot(i).announce);
        epoch::try_advance(&d.epoch.word, slots)
    }

    /// For a collect that found the epoch at `stuck`: if unpinned, yields the CPU up to
    /// [`COUNT_STUCK_YIELDS`] times until an advance succeeds, then tries once more (an entry
    /// needs two advances); the epoch afterwards. Pinned (an explicit collect inside an
    /// operation), this thread itself may be what holds the epoch: no yield.
    #[cold]
    fn yield_for_epoch(&self, stuck: u64) -> u64 {
        if self.pins.get() != 0 {
            return stuck;
        }
        for _ in 0..COUNT_STUCK_YIELDS {
            std::thread::yield_now();
            self.count_recycling(|c| c.yields += 1);
            let global = self.try_advance();
            if global != stuck {
                return self.try_advance();
            }
        }
        stuck
    }

    /// Frees the entries of `bag` (at `bag_at`) old enough for `global` and not decided by
    /// the last walk, but keeps those that fit in `room` in place as spares, newest first
    /// (entries are pushed in retire order, so this goes from the end: when room runs out, the
    /// older ones are freed). Each freed entry is zeroed, then freed, under a `FREE_ENTRY`
    /// log, so a crash frees it once; entries are never moved (a move is two stores: a crash
    /// between them would leave the node twice). The bag empties (`len = 0`) once no entry is
    /// left.
    fn free_reclaimable(
        &self,
        bag_at: u64,
        bag: &Bag,
        epochs: Epochs,
        spares: &mut Spares,
        room: &mut Room,
    ) {
        let len = bag.len.load(Ordering::Relaxed) as usize;
        let mut kept = 0;
        for (i, entry) in bag.entries[..len].iter().enumerate().rev() {
            let node = entry[0].load(Ordering::Relaxed);
            if node == 0 {
                continue;
            }
            let stamp = Stamp(entry[1].load(Ordering::Relaxed));
            if epoch::is_reclaimable(stamp.epoch(), epochs.decided) {
                // A spare noted by an earlier walk.
                kept += 1;
            } else if epoch::is_reclaimable(stamp.epoch(), epochs.global) {
                let entry_at = bag_at + 16 + 16 * i as u64;
                if let Some(size) = stamp.size().and_then(|size| room.take(size)) {
                    spares.push(Spare {
                        entry_at,
                        node,
                        size,
                    });
                    kept += 1;
                    continue;
                }
                self.limbo_log(recover::FREE_ENTRY, node, entry_at);
                entry[0].store(0, Ordering::Relaxed);
                A::free(&self.thread, node);
                self.limbo_log(0, 0, 0);
            } else {
                kept += 1;
            }
        }
        if kept == 0 {
            bag.len.store(0, Ordering::Relaxed);
        }
    }

    /// Allocates `size` bytes for a new item, evicting to make room as configured: a spare
    /// of the same size if this handle has one (`take_spare`), else from the arena. The
    /// caller writes the item and logs `ITEM(at)`, then calls `allocated`.
    pub(crate) fn allocate(&self, size: usize) -> Result<u64, StoreError> {
        let d = self.map.desc();
        if d.capacity != 0 {
            self.make_room(size as u64)?;
        }
        if let Some(at) = self.take_spare(size) {
            return Ok(at);
        }
        self.count_recycling(|c| c.allocations += 1);
        loop {
            self.before_alloc();
            self.log(recover::ALLOC_ITEM, 0);
            let made = A::allocate(&self.thread, size);
            if made.is_err() {
                self.log(0, 0);
            }
            match made {
                // The caller writes the item and logs `ITEM(at)`.
                Ok(at) => return Ok(at),
                Err(AllocError::Unsupported { .. }) => {
                    return Err(StoreError::TooLarge {
                        len: size,
                        max: self.map.value_max(),
                    })
                }
                Err(AllocError::OutOfMemory) => {
                    if d.evict == 0 || !self.evict_one() {
                        return Err(StoreError::OutOfMemory);
                    }
                    self.collect();
                }
            }
        }
    }

    /// Evicts until `used + size ≤ capacity`, or fails with out-of-memory when eviction is off
    /// or finds nothing.
    fn make_room(&self, size: u64) -> Result<(), StoreError> {
        let d = self.map.desc();
        let mut tries = 0;
        while self.used_now() + size > d.capacity {
            if d.evict == 0 || tries > 64 {
                return Err(StoreError::OutOfMemory);
            }
            if !self.evict_one() {
                tries += 8;
            }
            tries += 1;
        }
        Ok(())
    }

    /// Bytes of linked items as this handle sees them (shared count plus its own delta).
    pub(crate) fn used_now(&self) -> u64 {
        let shared = self.map.desc().used.word.load(Ordering::Relaxed) as i64;
        (shared + self.used_delta.get()).max(0) as u64
    }

    /// Frees a node this thread allocated and never published.
    pub(crate) fn free_unpublished(&self, at: u64) {
        self.log(recover::FREE_ITEM, at);
        A::free(&self.thread, at);
        self.log(0, 0);
    }

    /// Counts a linked (+) or unlinked (−) item of `bytes`.
    #[inline]
    pub(crate) fn account(&self, items: i64, bytes: i64) {
        let c = self.count_delta.get() + items;
        let u = self.used_delta.get() + bytes;
        self.count_delta.set(c);
        self.used_delta.set(u);
        if c.abs() >= BATCH_COUNT || u.abs() >= BATCH_USED {
            self.flush_counters();
        }
    }

    /// Publishes this handle's batched counters (and grows the table if due).
    pub fn flush_counters(&self) {
        let d = self.map.desc();
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
            self.maybe_grow(count);
            self.owe_links(count.saturating_sub(c as u64), count);
        }
    }

    /// Notes the sentinels owed by the inserts that took the count from `from` to `to`: those
    /// of the table's newer half, `K` per insert since the doubling (see # Growth).
    fn owe_links(&self, from: u64, to: u64) {
        let size = self.map.desc().size.word.load(Ordering::Relaxed);
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
    pub(crate) fn link_owed(&self) {
        let (next, end) = self.owed.get();
        if next < end {
            self.link_owed_from(next, end);
        }
    }

    #[cold]
    fn link_owed_from(&self, next: u64, end: u64) {
        let stop = (next + COUNT_LINKS_PER_WRITE).min(end);
        for bucket in next..stop {
            if self.sentinel(bucket).is_err() {
                // No room for a segment: readers walk a little further instead.
                self.owed.set((end, end));
                return;
            }
        }
        self.owed.set((stop, end));
    }

    /// Doubles the table (one CAS) when `count > buckets >> SHIFT_LOAD`.
    fn maybe_grow(&self, count: u64) {
        let size = &self.map.desc().size.word;
        let log2 = size.load(Ordering::Relaxed);
        if log2 & FIXED == 0 && log2 < SHIFT_BUCKETS_MAX && count > (1u64 << log2) >> SHIFT_LOAD {
            let _ = size.compare_exchange(log2, log2 + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A pseudo-random number (xorshift; for eviction sampling).
    pub(crate) fn random(&self) -> u64 {
        let mut x = self.seed.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.set(x);
        x
    }

    /// The offset of `bucket`'s sentinel, making its segment if `make`.
    #[inline]
    fn sentinel_at(&self, bucket: u64, make: bool) -> Option<u64> {
        let d = self.map.desc();
        let entry = &d.directory[(bucket / COUNT_SEGMENT) as usize];
        let mut seg = entry.load(Ordering::Acquire);
        if seg == 0 {
            if !make {
                return None;
            }
            seg = self.make_segment(entry)?;
        }
        Some(seg + (bucket % COUNT_SEGMENT) * SIZE_SENTINEL as u64)
    }

    #[cold]
    fn make_segment(&self, entry: &AtomicU64) -> Option<u64> {
        self.before_alloc();
        self.log(recover::ALLOC_SEGMENT, offset_in(self.map.view(), entry));
        let Ok(fresh) = alloc_zeroed::<A>(&self.thread, self.map.view(), SIZE_SEGMENT) else {
            self.log(0, 0);
            return None;
        };
        let won = match entry.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(won) => {
                self.log(recover::FREE_ITEM, fresh);
                A::free(&self.thread, fresh);
                won
            }
        };
        self.log(0, 0);
        Some(won)
    }

    /// Whether the sentinel at `at` is linked.
    #[inline]
    fn is_linked(&self, at: u64) -> bool {
        self.map.view().sentinel_state(at).load(Ordering::Acquire) & SENTINEL_LINKED != 0
    }

    /// The bucket `hash` falls in now.
    #[inline]
    fn bucket_of(&self, hash: u64) -> u64 {
        let log2 = self.map.buckets_log2();
        hash & ((1u64 << log2) - 1)
    }

    /// The `next` word of the nearest linked sentinel at or above `hash`'s bucket. Never writes.
    #[inline]
    pub(crate) fn head_for_read(&self, hash: u64) -> &AtomicU64 {
        let mut bucket = self.bucket_of(hash);
        loop {
            if let Some(at) = self.sentinel_at(bucket, false) {
                if self.is_linked(at) {
                    return self.map.view().word(at);
                }
            }
            bucket = parent(bucket);
        }
    }

    /// The `next` word of `hash`'s bucket sentinel, linking it (and its ancestors) if needed.
    #[inline]
    pub(crate) fn head_for_write(&self, hash: u64) -> Result<&AtomicU64, StoreError> {
        let at = self.sentinel(self.bucket_of(hash))?;
        Ok(self.map.view().word(at))
    }

    /// Bucket `bucket`'s sentinel if linked (linking it first), else its nearest linked
    /// ancestor's (when another thread holds the claim).
    /// (Inline, and no `ok_or(StoreError::OutOfMemory)`: that built and dropped an error on
    /// every call, 11 of the 50 instructions this took per write.)
    #[inline]
    fn sentinel(&self, bucket: u64) -> Result<u64, StoreError> {
        match self.sentinel_at(bucket, true) {
            Some(at) if self.is_linked(at) => Ok(at),
            Some(at) => self.link_sentinel(bucket, at),
            None => Err(StoreError::OutOfMemory),
        }
    }

    /// The lazy migration step: claims bucket `bucket`'s sentinel (one CAS) and splices it
    /// into the list after its parent's (one CAS, retried), then marks it linked.
    #[cold]
    fn link_sentinel(&self, bucket: u64, at: u64) -> Result<u64, StoreError> {
        let parent_at = self.sentinel(parent(bucket))?;
        let view = self.map.view();
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
            return Ok(if self.is_linked(at) { at } else { parent_at });
        }
        let probe = Probe { order, key: &[] };
        let head = view.word(parent_at);
        let nodes = self.nodes();
        loop {
            let pos = list::find(&nodes, head, &probe, &mut |n| self.retire(n));
            debug_assert!(!pos.found, "only the claimer links a sentinel");
            if list::try_insert(&view, &pos, at) {
                break;
            }
        }
        state.store(order | SENTINEL_LINKED, Ordering::Release);
        Ok(at)
    }
}

/// The offset of a store word (in the heap, or an address for the local arena).
fn offset_in(view: View, word: &AtomicU64) -> u64 {
    word as *const AtomicU64 as u64 - view.ptr(0) as u64
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

impl<A: Arena> Handle<A> {
    /// Whether the segment holding `bucket` was never made.
    pub(crate) fn segment_missing(&self, bucket: u64) -> bool {
        let d = self.map.desc();
        d.directory[(bucket / COUNT_SEGMENT) as usize].load(Ordering::Acquire) == 0
    }

    /// The `next` word of `bucket`'s sentinel if it is linked.
    pub(crate) fn made_head(&self, bucket: u64) -> Option<&AtomicU64> {
        let at = self.sentinel_at(bucket, false)?;
        self.is_linked(at).then(|| self.map.view().word(at))
    }
}
