//! The write loop every command goes through, and the state a handle's writes keep.
//!
//! [`Parts`] is a handle's components borrowed for one command (slot, reclamation, bucket
//! table, writer). Its [`update`](Parts::update) is the one write loop: search, let the
//! command's `decide` choose from the visible item, make it so by one CAS; on a lost race,
//! free what `decide` made and search again. New items come from [`Parts::new_item`], which
//! takes a spare of the same size, or the allocator (evicting first when the store is at
//! capacity). [`Writer`] is the state writes keep between commands: the handle's block of
//! CAS tokens and its count of lost races.

use crate::arena::Arena;
use crate::buckets::{Buckets, Table};
use crate::command::{Outcome, Step};
use crate::index::{self, Change, Memory};
use crate::item::{self, Meta, SIZE_HEADER};
use crate::layout::{ALLOC_ITEM, FREE_ITEM, ITEM};
use crate::maintain;
use crate::reclaim::epoch;
use crate::reclaim::{Pin, Reclaim};
use crate::shared::Shared;
use crate::slot::Slot;
use crate::StoreError;
use podkv_alloc::AllocError;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// CAS tokens a handle reserves at once.
pub const BATCH_CAS: u64 = 64;
/// Items one write evicts for room at most before it fails with out-of-memory (each is one
/// round: evict, reclaim, retry; see `Parts::room_after_oom`).
const COUNT_ROOM_VICTIMS: u32 = 64;
/// Samples one round of eviction for room takes before it gives up: a round whose victim
/// another writer removed first samples again.
const COUNT_EVICT_TRIES: u32 = 8;
/// How long a write for room waits, yielding, for its victim to become reclaimable: a peer
/// pinned and preempted holds the epoch for its time off the CPU (a scheduler slice, or
/// tens of them on a loaded machine: 20 ms failed two test writers at a load of 11 on two
/// cores, and 100 ms failed one set in 24,576 there); a peer pinned for good (a stopped
/// process not yet recovered) must not hold the write forever. For a cache a set that waits
/// is better than one that errs, so the bound is generous.
const TIME_ROOM_WAIT: Duration = Duration::from_secs(1);

/// One write's rounds of eviction for room (see `Parts::room_after_oom`).
#[derive(Debug, Default)]
struct Room {
    /// Items evicted so far.
    victims: u32,
    /// The global epoch just after the last victim was retired: it is reclaimable once the
    /// epoch is two past.
    victim_epoch: Option<u64>,
    /// When the write began waiting for its last victim to become reclaimable.
    waiting_since: Option<Instant>,
}

/// What a handle's writes keep between commands (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Writer {
    /// This handle's block of CAS tokens: `cas_next..cas_end` (see `cas_after`).
    cas_next: Cell<u64>,
    cas_end: Cell<u64>,
    /// Write-loop passes whose link CAS lost to a concurrent change (see `lost_races`).
    lost: Cell<u64>,
    /// Bytes of the last new item the allocator had no room for, until the write loop makes
    /// room for it (0: none; see `Parts::room_after_oom`).
    short: Cell<usize>,
}

impl Writer {
    /// The CAS token a write replacing an item whose token is `floor` (0: none) gives its new
    /// item: the client's explicit one (meta `E`), else a fresh one above `floor`.
    ///
    /// Handles take fresh tokens from blocks of [`BATCH_CAS`] reserved with one `fetch_add`
    /// (one shared RMW per 64 writes instead of per write), so tokens are unique and increase
    /// per handle, and across handles only roughly (eviction's write age is approximate
    /// anyway). A handle takes a new block, which starts past every token handed out so far,
    /// when its own is used up, when another handle's block is ahead on this key (`floor`: so
    /// each key's tokens increase, and "older than the item's" (`ms I`) means older), and when
    /// its block started before the last immediate `flush_all` (`oldest_cas`: no write that
    /// starts after a flush gets a flushed token; a write racing the flush may, which orders
    /// it before the flush — as memcached's does).
    pub(crate) fn cas_after<A: Arena>(
        &self,
        slot: &Slot<A>,
        explicit: Option<u64>,
        floor: u64,
    ) -> u64 {
        if let Some(token) = explicit {
            return token;
        }
        let shared = slot.shared();
        let d = shared.hw();
        let mut token = self.cas_next.get();
        if token == self.cas_end.get()
            || token <= floor
            || token < shared.load_word(&d.flush.oldest_cas)
        {
            let arm = || {
                podkv_hw::cas_site!("store.token.add.cas");
            };
            token = shared.add_word(&slot.thread, &d.cas.word, BATCH_CAS, arm) + 1;
            self.cas_end.set(token + BATCH_CAS);
        }
        self.cas_next.set(token + 1);
        token
    }

    /// A token above every token handed out so far (for `flush_all`).
    pub(crate) fn cas_barrier<A: Arena>(&self, slot: &Slot<A>) -> u64 {
        let (shared, arm) = (slot.shared(), || {
            podkv_hw::cas_site!("store.token.barrier.cas");
        });
        shared.add_word(&slot.thread, &shared.hw().cas.word, 1, arm) + 1
    }

    /// Write-loop passes whose insert, replace or delete CAS lost to another writer.
    pub(crate) fn lost_races(&self) -> u64 {
        self.lost.get()
    }

    #[inline]
    fn count_lost(&self) {
        self.lost.set(self.lost.get() + 1);
    }
}

/// Raises the store's token counter to at least `token`, so no later write hands out a token
/// that items written with explicit tokens (a load) already hold.
pub(crate) fn raise_cas<A: Arena>(slot: &Slot<A>, token: u64) {
    let shared = slot.shared();
    let arm = || {
        podkv_hw::cas_site!("store.token.raise.cas");
    };
    shared.update_word(&slot.thread, &shared.hw().cas.word, arm, |seen| {
        seen.max(token)
    });
}

/// A handle's components, borrowed for one command (see the module doc).
pub(crate) struct Parts<'h, A: Arena> {
    pub(crate) reclaim: &'h Reclaim<A>,
    pub(crate) buckets: &'h Buckets,
    pub(crate) writer: &'h Writer,
}

impl<A: Arena> Clone for Parts<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: Arena> Copy for Parts<'_, A> {}

impl<'h, A: Arena> Parts<'h, A> {
    /// The handle's slot.
    #[inline]
    pub(crate) fn slot(self) -> &'h Slot<A> {
        self.reclaim.slot()
    }

    /// The store.
    #[inline]
    pub(crate) fn shared(self) -> &'h Shared<A> {
        self.slot().shared()
    }

    /// Pins the handle's slot for the pin's life.
    #[inline]
    pub(crate) fn pin(self) -> Pin<'h, A> {
        self.reclaim.pin()
    }

    /// A fresh CAS token above `floor`, or `explicit` (see [`Writer::cas_after`]).
    #[inline]
    pub(crate) fn cas_after(self, explicit: Option<u64>, floor: u64) -> u64 {
        self.writer.cas_after(self.slot(), explicit, floor)
    }

    /// Allocates `size` bytes for a new item, evicting to make room as configured: a spare
    /// of the same size if this handle has one, else from the arena. The caller writes the
    /// item and logs `ITEM(at)`, then ends a spare's `TAKE_ENTRY` (`spare::end_take`). When
    /// the arena has no room (the item's region is full), the error goes back to the write
    /// loop, which makes room unpinned and retries ([`room_after_oom`](Self::room_after_oom)).
    pub(crate) fn allocate(self, size: usize) -> Result<u64, StoreError> {
        if self.shared().desc().capacity != 0 {
            maintain::make_room(self.reclaim, self.buckets, size as u64)?;
        }
        if let Some(at) = self.reclaim.take_spare(size) {
            return Ok(at);
        }
        // With no room the write loop makes some, unpinned (`room_after_oom`), for this size.
        self.take_block(size).inspect_err(|e| {
            if matches!(e, StoreError::OutOfMemory) {
                self.writer.short.set(size);
            }
        })
    }

    /// A block of `size` bytes from the arena: [`allocate`](Self::allocate) without making
    /// room or taking a spare.
    fn take_block(self, size: usize) -> Result<u64, StoreError> {
        let (slot, reclaim) = (self.slot(), self.reclaim);
        reclaim.count_recycling(|c| c.allocations += 1);
        slot.before_alloc();
        slot.log(ALLOC_ITEM, 0);
        let made = crate::arena::allocate_object::<A>(&slot.thread, slot.view(), size);
        if made.is_err() {
            slot.log(0, 0);
        }
        match made {
            // The caller writes the item and logs `ITEM(at)`.
            Ok(at) => Ok(at),
            Err(AllocError::Unsupported { .. }) => Err(StoreError::TooLarge {
                len: size,
                max: slot.shared().value_max(),
            }),
            Err(AllocError::OutOfMemory) => Err(StoreError::OutOfMemory),
        }
    }

    /// Frees a node this thread allocated and never published.
    pub(crate) fn free_unpublished(self, at: u64) {
        let slot = self.slot();
        let view = slot.view();
        // What this thread wrote goes out before the block changes owner (SWcc).
        if view.is_swcc() && podkv_hw::site!("store.item.free_write_back") {
            view.write_back_new(at, view.item_size(at));
        }
        slot.log(FREE_ITEM, at);
        slot.free(at);
        slot.log(0, 0);
    }

    /// Allocates and writes a new item (`lease`: its meta state bits, see `item`).
    pub(crate) fn new_item(
        self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        expiry: u32,
        cas: u64,
        lease: u8,
    ) -> Result<u64, StoreError> {
        let order = item::item_order(item::hash(key));
        self.new_item_ordered(order, key, value, flags, expiry, cas, lease)
    }

    /// As [`new_item`](Self::new_item), for a writer that already has the key's split
    /// `order` (the write loop hashed the key to find its bucket: hashing it again and
    /// reversing the bits cost a set 20–45 instructions).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_item_ordered(
        self,
        order: u64,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        expiry: u32,
        cas: u64,
        lease: u8,
    ) -> Result<u64, StoreError> {
        debug_assert_eq!(order, item::item_order(item::hash(key)));
        let vlen: usize = value.iter().map(|v| v.len()).sum();
        let shared = self.shared();
        let max = shared.value_max();
        if vlen > max {
            return Err(StoreError::TooLarge { len: vlen, max });
        }
        let at = self.allocate(SIZE_HEADER + key.len() + vlen)?;
        let meta = Meta {
            order,
            cas,
            expiry,
            time: shared.now(),
            flags,
            lease,
        };
        self.write_new(at, &meta, key, value, vlen);
        Ok(at)
    }

    /// A copy of item `from` (read fresh by the caller, who is pinned), header and all, in a
    /// new block, for compaction (`compact`): the same key, value, flags, expiry, CAS token,
    /// write time and lease state. It never evicts: when the item's region has no room, the
    /// copy fails with out-of-memory and the write loop does not make room for it. Nor does
    /// it take a spare: the spares of a mover are the blocks it moved items out of.
    pub(crate) fn copy_item(self, from: u64) -> Result<u64, StoreError> {
        let view = self.shared().view();
        let (meta, key, value) = (view.meta(from), view.key(from), view.value(from));
        let at = self.take_block(SIZE_HEADER + key.len() + value.len())?;
        self.write_new(at, &meta, key, &[value], value.len());
        Ok(at)
    }

    /// Writes a new item's header, key and value into the block at `at` (and, under SWcc,
    /// back to memory), then logs `ITEM(at)`: from here recovery frees it unless published.
    fn write_new(self, at: u64, meta: &Meta, key: &[u8], value: &[&[u8]], vlen: usize) {
        let view = self.shared().view();
        view.write_item(at, meta, key, value, vlen);
        // Waited for by the publishing CAS (`buckets::Table::cas`).
        if view.is_swcc() && podkv_hw::site!("store.item.write_back") {
            view.write_back_new_unfenced(at, SIZE_HEADER + key.len() + vlen);
        }
        self.slot().log(ITEM, at);
        crate::reclaim::spare::end_take(self.slot());
    }

    /// The write loop: search, let `decide` choose from the visible item, make it so by one CAS;
    /// on a lost race, free what `decide` made and search again.
    pub(crate) fn update(
        self,
        key: &[u8],
        decide: impl FnMut(Option<u64>) -> Result<Step, StoreError>,
    ) -> Result<Outcome, StoreError> {
        self.shared().check_key(key)?;
        self.update_hashed(key, item::hash(key), decide)
    }

    /// [`update`](Self::update) with the key checked and hashed (`h = item::hash(key)`) by
    /// the caller, so that `decide` can make its item without hashing the key again.
    ///
    /// A full heap is not an error here while eviction can make room: when `decide`'s new
    /// item found no room in its region, the write evicts where it needs room and runs the
    /// loop again (see [`room_after_oom`](Self::room_after_oom)).
    #[inline]
    pub(crate) fn update_hashed(
        self,
        key: &[u8],
        h: u64,
        mut decide: impl FnMut(Option<u64>) -> Result<Step, StoreError>,
    ) -> Result<Outcome, StoreError> {
        let mut room = Room::default();
        loop {
            match self.update_pinned(key, h, &mut decide) {
                Err(StoreError::OutOfMemory) if self.room_after_oom(&mut room) => continue,
                done => return done,
            }
        }
    }

    /// After a write found no room for its new item (`Writer::short` says its size): evicts
    /// one item where it needs room ([`maintain::evict_for`]), then collects — unpinned, the
    /// epoch can move the two steps that make the victim reclaimable, and the victim becomes
    /// a spare of this handle (or goes back to its slab). While the last victim is not yet
    /// reclaimable (a peer pinned, maybe preempted), a round only collects, which yields to
    /// the peer, instead of evicting more. Whether to run the write again: not when eviction
    /// is off, the failure was not a new item's, nothing could be evicted, or the bounds of
    /// [`Room`] are reached (then the client gets out-of-memory). Every fourth victim's
    /// collect frees all this handle's spares, so that blocks kept for other sizes go back
    /// to their slabs.
    #[cold]
    #[inline(never)]
    fn room_after_oom(self, room: &mut Room) -> bool {
        let size = self.writer.short.replace(0);
        let (reclaim, buckets) = (self.reclaim, self.buckets);
        let (d, hw) = (self.shared().desc(), self.shared().hw());
        if size == 0 || d.evict == 0 {
            return false;
        }
        let waiting = room
            .victim_epoch
            .is_some_and(|e| !epoch::is_reclaimable(e, self.shared().load_word(&hw.epoch.word)));
        if waiting {
            let started = *room.waiting_since.get_or_insert_with(Instant::now);
            if reclaim.is_pinned() || started.elapsed() > TIME_ROOM_WAIT {
                return false;
            }
            reclaim.collect_spares();
            return true;
        }
        room.waiting_since = None;
        if room.victims >= COUNT_ROOM_VICTIMS {
            return false;
        }
        // Writers sampling at once pick the same oldest item; the one whose delete loses
        // that race samples again rather than fail its write.
        if !(0..COUNT_EVICT_TRIES).any(|_| maintain::evict_for(reclaim, buckets, size)) {
            return false;
        }
        room.victims += 1;
        room.victim_epoch = Some(self.shared().load_word(&hw.epoch.word));
        if room.victims % 4 == 0 {
            reclaim.collect();
        } else {
            reclaim.collect_spares();
        }
        true
    }

    /// One run of the write loop, pinned (see [`update`](Self::update)): the bucket's word
    /// is made and read, `decide` chooses from the visible item, and the bucket's next word
    /// (`index::Change`) is published by one CAS, whose winner retires what it removed.
    #[inline]
    fn update_pinned(
        self,
        key: &[u8],
        h: u64,
        decide: &mut impl FnMut(Option<u64>) -> Result<Step, StoreError>,
    ) -> Result<Outcome, StoreError> {
        let _pin = self.pin();
        let (slot, reclaim, buckets) = (self.slot(), self.reclaim, self.buckets);
        let shared = slot.shared();
        let view = slot.view();
        let table = Table { reclaim };
        let (tag, log2) = (index::tag(h), || shared.buckets_log2());
        loop {
            let (word, w) = index::write_target(&table, h, shared.buckets_log2_cached(), log2)?;
            let found = index::find(&table, w, tag, |entry| {
                let at = view.fresh_candidate(w, entry);
                view.fresh_key(at);
                item::compare_keys(view.key(at), key) == std::cmp::Ordering::Equal
            });
            let visible =
                (found != 0 && shared.visible_when(found, || shared.now())).then_some(found);
            let mut change = Change::read(w);
            let (new, outcome) = match decide(visible)? {
                Step::Keep(outcome) => return Ok(outcome),
                Step::Put(new, outcome) => {
                    match found {
                        0 => change.add = Some((tag, new)),
                        old => change.swap = Some((old, new)),
                    }
                    (new, outcome)
                }
                Step::Remove(outcome) if found == 0 => return Ok(outcome),
                Step::Remove(outcome) => {
                    change.drop = found;
                    (0, outcome)
                }
            };
            let next = match index::make(&table, &change) {
                Ok(next) => next,
                Err(e) => {
                    if new != 0 {
                        self.free_unpublished(new);
                    }
                    return Err(e);
                }
            };
            slot.put(&slot.record().unlink, found);
            table.replacing(w);
            let won = table.cas(word, w, next);
            table.replaced(w, next, won);
            if !won {
                slot.put(&slot.record().unlink, 0);
                self.writer.count_lost();
                if new != 0 {
                    self.free_unpublished(new);
                }
                continue;
            }
            if new != 0 {
                slot.log(0, 0); // published: recovery must not look at it again
            }
            let added = if new != 0 {
                view.item_size(new) as i64
            } else {
                0
            };
            if found != 0 {
                let removed = view.item_size(found) as i64;
                buckets.account(slot, i64::from(new != 0) - 1, added - removed);
                reclaim.retire(found);
            } else {
                buckets.account(slot, 1, added);
            }
            buckets.split_owed(reclaim);
            return Ok(outcome);
        }
    }
}
