//! [`Backend`]: the protocol's [`Storage`] over one worker's [`StoreHandle`].
//!
//! Text commands map one to one onto the store's memcached commands, meta commands onto its
//! meta commands (`podkv_store::meta`): recache tokens (`W`/`Z`), stale items (`X`, `md I`,
//! `ms I`), explicit CAS (`E`) and every `C` comparison are decided inside the store's write
//! loop, as memcached 1.6.18 decides them under its item lock. A plain `get` or `mg` (no `T`,
//! `N`, `R`, and the item not stale) still writes nothing to shared memory.
//!
//! What remains different from memcached 1.6.18:
//!
//! 1. **Padding.** A shorter `incr`/`decr`/`ma` result is padded with spaces to the old
//!    length, always. memcached pads only when it can update in place (no other reference to
//!    the item alive; its LRU maintainer and crawler threads take references in the
//!    background) and otherwise writes the bare number.
//! 2. **Access facts** (`mg l h`, `me la= fetch=`): lookups never write shared memory, so
//!    podkv reports 0 seconds and "not fetched".
//! 3. **`E`** (explicit CAS) is a flag of later memcached releases (1.6.18 refuses it as an
//!    invalid flag); podkv accepts it and gives the item that CAS, as those releases do.
//! 4. **Room for a token.** Winning a token, touching or marking stale makes a copy of the
//!    item (items are immutable once linked); if even eviction cannot make room for it, `mg`
//!    answers as a plain read (no `W`) and `md I` answers `SERVER_ERROR out of memory`.
//! 5. **A negative vivify TTL** (`N-1`, or an `N` that wraps to a negative 32-bit number):
//!    memcached 1.6.18 makes the item already expired and reports its TTL as its own clock
//!    wrapped around (`t4294967173`, changing with its uptime); podkv reports `t0`.
//! 6. **Binary keys in replies.** memcached 1.6.18 returns `k` base64-encoded (with ` b`)
//!    only for an item made by `ms … b` and not copied since (an `ma` that cannot update in
//!    place, an item vivified by `ma b N` or `mg b N`), and the raw bytes otherwise; podkv
//!    encodes whenever the request has `b`. Following memcached needs one more bit per item
//!    in the store.
//! 7. **Earlier replies of a batch.** When a `get`-family command refuses an over-long key,
//!    memcached 1.6.18 also drops the replies of the commands before it that arrived in the
//!    same read; podkv sends them.

use bytes::Bytes;
use podkv_store::{
    ttl_of, CompactPass, Count, Counted, Delete, Guard, Mode, Outcome, PodArena, Read, StoreError,
    StoreExtra, StoreHandle,
};

use crate::protocol::storage::{Item, ItemDebug, MetaItem, StatLines, Storage, Stored};

use super::stats::{Counter, Counters, Shared, MEMCACHED_COMPATIBLE};
use std::sync::Arc;

/// Bytes of item header the store adds to key and value (`me size=`).
const SIZE_ITEM_HEADER: u64 = 48;

/// One worker's view of the store: its handle (its thread slot) and its counters.
/// Not `Send`: it lives on the worker thread that claimed the slot.
pub struct Backend {
    handle: StoreHandle,
    counters: Arc<Counters>,
    shared: Arc<Shared>,
}

impl Backend {
    /// A backend for worker `index` (claims a thread slot for the calling thread).
    pub fn new(shared: Arc<Shared>, index: usize) -> Result<Backend, StoreError> {
        Ok(Backend {
            handle: shared.store.handle()?,
            counters: shared.workers[index].clone(),
            shared,
        })
    }

    /// This worker's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// What every worker shares.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Publishes this worker's batched item counts to the store (for `stats`).
    pub fn publish(&self) {
        self.handle.flush_counters();
    }

    /// Begins a compaction pass of this worker's (`--drain`, `Handle::compact_begin`): gives
    /// up its sparse slabs, and its sparsest for its share of the slab memory over
    /// `--memory` ([`Backend::share_over`]), and names the disowned slabs (anyone's) to drain.
    /// Over the limit, any slab whose items fit in the slabs kept is drained, however full
    /// (unless `--drain 0`): a move costs a copy, the alternative an eviction.
    pub fn compact_begin(&self, percent: u32) -> CompactPass {
        let over = self.share_over();
        let percent = if over > 0 && percent > 0 {
            100
        } else {
            percent
        };
        self.handle.compact_begin(percent, over)
    }

    /// This worker's share (one of `--threads`) of the bytes of slab memory the heap holds
    /// over the store's capacity (`--memory`), which bounds slab memory as memcached's `-m`
    /// bounds its pages; 0 without a capacity. Every worker gives up its share, so the other
    /// servers of the store, if any, give up theirs on their next pass.
    pub fn share_over(&self) -> u64 {
        let store = &self.shared.store;
        let over = match (store.capacity(), store.held_bytes()) {
            (Some(capacity), Some(held)) => held.saturating_sub(capacity),
            _ => 0,
        };
        over / self.shared.settings.threads as u64
    }

    /// Walks `buckets` more buckets of `pass`, moving items into this worker's slabs; whether
    /// the pass is done. A done pass is counted in `stats` as memcached counts its slab
    /// mover's work.
    pub fn compact_slice(&self, pass: &mut CompactPass, buckets: u64) -> bool {
        if !self.handle.compact_slice(pass, buckets) {
            return false;
        }
        let report = pass.report();
        self.counters.add(Counter::SlabsMoved, report.disowned);
        self.counters
            .add(Counter::SlabReassignRescues, report.moved);
        self.counters
            .add(Counter::SlabReassignRescuedBytes, report.moved_bytes);
        self.counters
            .add(Counter::SlabReassignEvictionsNomem, report.evicted);
        true
    }

    /// An item copied out of the heap, with the TTL of `expiry`.
    fn item(&self, guard: &Guard<'_, PodArena>, expiry: u32) -> Item {
        Item {
            value: Bytes::copy_from_slice(guard.value()),
            flags: guard.flags(),
            cas: guard.cas(),
            ttl: ttl_of(expiry, self.now()),
            last_access: 0,
            fetched: false,
        }
    }

    /// Counts a read of one key.
    fn count_read(&self, hit: bool) {
        self.counters.bump(Counter::CmdGet);
        self.counters.bump(if hit {
            Counter::GetHits
        } else {
            Counter::GetMisses
        });
    }

    /// Counts a store as memcached counts it.
    fn count_store(&self, mode: Mode, stored: &Stored) {
        self.counters.bump(Counter::CmdSet);
        match stored {
            Ok((Outcome::Stored, _)) => self.counters.bump(Counter::TotalItems),
            Err(StoreError::TooLarge { .. }) => self.counters.bump(Counter::StoreTooLarge),
            Ok(_) | Err(StoreError::KeyLength { .. }) => {}
            Err(_) => self.counters.bump(Counter::StoreNoMemory),
        }
        if let Mode::Cas(_) = mode {
            self.counters.bump(match stored {
                Ok((Outcome::Stored, _)) => Counter::CasHits,
                Ok((Outcome::Exists, _)) => Counter::CasBadval,
                _ => Counter::CasMisses,
            });
        }
    }

    /// Counts an `incr`/`decr`/`ma` as memcached does: a hit when it changed a value that
    /// was there, a miss when there was none.
    fn count_arithmetic(&self, count: Count, counted: &Result<Counted, StoreError>) {
        let (hits, misses) = if count.decrement {
            (Counter::DecrHits, Counter::DecrMisses)
        } else {
            (Counter::IncrHits, Counter::IncrMisses)
        };
        match counted {
            Ok(Counted::Value { created: false, .. }) => self.counters.bump(hits),
            Ok(Counted::NotFound) | Err(StoreError::KeyLength { .. }) => self.counters.bump(misses),
            _ => {}
        }
    }

    /// Counts an `mg` as memcached does: a touch when it had `T`, else a get.
    fn count_meta_get(&self, touch: bool, hit: bool) {
        if !touch {
            return self.count_read(hit);
        }
        self.counters.bump(Counter::CmdTouch);
        self.counters.bump(if hit {
            Counter::TouchHits
        } else {
            Counter::TouchMisses
        });
    }
}

impl Storage for Backend {
    fn now(&self) -> u32 {
        self.handle.map().now()
    }

    fn get(&self, key: &[u8]) -> Option<Item> {
        let guard = self.handle.get(key).ok().flatten();
        self.count_read(guard.is_some());
        let guard = guard?;
        Some(self.item(&guard, guard.expiry()))
    }

    #[inline]
    fn get_with(&self, key: &[u8], emit: &mut dyn FnMut(u32, u64, &[u8])) -> bool {
        let guard = self.handle.get(key).ok().flatten();
        self.count_read(guard.is_some());
        let Some(guard) = guard else {
            return false;
        };
        emit(guard.flags(), guard.cas(), guard.value());
        true
    }

    fn gat(&self, key: &[u8], exptime: i64) -> Option<Item> {
        self.counters.bump(Counter::CmdTouch);
        let guard = self.handle.gat(key, exptime).ok().flatten();
        self.count_read(guard.is_some());
        self.counters.bump(if guard.is_some() {
            Counter::TouchHits
        } else {
            Counter::TouchMisses
        });
        let guard = guard?;
        Some(self.item(&guard, guard.expiry()))
    }

    #[inline]
    fn store(&self, mode: Mode, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Stored {
        let extra = StoreExtra::default();
        let stored = self
            .handle
            .store_with(mode, key, value, flags, exptime, extra);
        self.count_store(mode, &stored);
        stored
    }

    fn delete(&self, key: &[u8]) -> Result<Outcome, StoreError> {
        let deleted = self.handle.delete(key);
        self.counters.bump(match deleted {
            Ok(Outcome::Deleted) => Counter::DeleteHits,
            _ => Counter::DeleteMisses,
        });
        deleted
    }

    fn arithmetic(&self, key: &[u8], count: Count) -> Result<Counted, StoreError> {
        let counted = self.handle.meta_counter(key, count);
        self.count_arithmetic(count, &counted);
        counted
    }

    fn touch(&self, key: &[u8], exptime: i64) -> Result<Outcome, StoreError> {
        self.counters.bump(Counter::CmdTouch);
        let touched = self.handle.touch(key, exptime);
        self.counters.bump(match touched {
            Ok(Outcome::Touched) => Counter::TouchHits,
            _ => Counter::TouchMisses,
        });
        touched
    }

    fn flush_all(&self, delay: i64) {
        self.counters.bump(Counter::CmdFlush);
        self.handle.flush_all(delay);
    }

    fn stats(&self, group: &[u8]) -> Option<StatLines> {
        self.publish();
        self.shared.stat_lines(group)
    }

    fn version(&self) -> String {
        format!("{MEMCACHED_COMPATIBLE}-podkv-{}", env!("CARGO_PKG_VERSION"))
    }

    fn stats_reset(&self) {
        self.shared.reset();
    }

    // `u` changes nothing here: lookups never write shared memory (see the module doc).
    fn meta_get(&self, key: &[u8], read: Read, _no_bump: bool) -> Option<MetaItem> {
        self.counters.bump(Counter::CmdMeta);
        // The store answers a plain read itself when nothing can change the item, and when
        // a change finds no room.
        let hit = self.handle.meta_get(key, read).ok().flatten();
        let hit = hit.map(|found| MetaItem {
            item: self.item(&found.guard, found.shown_expiry),
            lease: found.lease,
        });
        self.count_meta_get(read.touch.is_some(), hit.is_some());
        hit
    }

    fn meta_set(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        extra: StoreExtra,
    ) -> Stored {
        self.counters.bump(Counter::CmdMeta);
        let stored = self
            .handle
            .meta_set(mode, key, value, flags, exptime, extra);
        self.count_store(mode, &stored);
        stored
    }

    fn meta_delete(&self, key: &[u8], delete: Delete) -> Result<Outcome, StoreError> {
        self.counters.bump(Counter::CmdMeta);
        let invalidate = delete.invalidate.is_some();
        let deleted = self.handle.meta_delete(key, delete);
        // memcached counts a removal as a hit, a mark-stale as neither, the rest as misses.
        match deleted {
            Ok(Outcome::Deleted) if !invalidate => self.counters.bump(Counter::DeleteHits),
            Ok(Outcome::Deleted) => {}
            Ok(_) | Err(StoreError::KeyLength { .. }) => self.counters.bump(Counter::DeleteMisses),
            Err(_) => {}
        }
        deleted
    }

    fn meta_arithmetic(&self, key: &[u8], count: Count) -> Result<Counted, StoreError> {
        self.counters.bump(Counter::CmdMeta);
        self.arithmetic(key, count)
    }

    fn meta_debug(&self, key: &[u8]) -> Option<ItemDebug> {
        self.counters.bump(Counter::CmdMeta);
        let guard = self.handle.get(key).ok().flatten()?;
        let expiry = guard.expiry();
        Some(ItemDebug {
            exp: if expiry == 0 {
                -1
            } else {
                i64::from(self.now()) - i64::from(expiry)
            },
            last_access: 0,
            cas: guard.cas(),
            fetched: false,
            class: 1,
            size: SIZE_ITEM_HEADER + key.len() as u64 + guard.value().len() as u64,
        })
    }
}
