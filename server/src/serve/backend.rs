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

use bytes::Bytes;
use podkv_store::{
    Count, Counted, Delete, Guard, Mode, Outcome, PodArena, Read, StoreError, StoreExtra,
    StoreHandle,
};

use crate::protocol::request::{ArithmeticMode, Exptime, SetMode};
use crate::protocol::storage::{
    DeltaOutcome, Item, ItemDebug, KeyOutcome, MetaArithmeticOutcome, MetaDeleteOutcome, MetaItem,
    MetaSetOptions, StatLines, Storage, StoreOutcome,
};

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

    fn now(&self) -> u32 {
        self.handle.map().now()
    }

    fn ttl(&self, expiry: u32) -> Option<u32> {
        (expiry != 0).then(|| expiry.saturating_sub(self.now()))
    }

    /// The visible item under `key`, copied out (value, flags, CAS, TTL).
    fn lookup(&self, key: &[u8]) -> Option<Item> {
        let guard = self.handle.get(key).ok().flatten()?;
        Some(self.item(&guard, guard.expiry()))
    }

    /// An item copied out of the heap, with the TTL of `expiry`.
    fn item(&self, guard: &Guard<'_, PodArena>, expiry: u32) -> Item {
        Item {
            value: Bytes::copy_from_slice(guard.value()),
            flags: guard.flags(),
            cas: guard.cas(),
            ttl: self.ttl(expiry),
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

    /// Runs a classic storage command (the store removes the old item of a failed `set`).
    fn store(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: Exptime,
    ) -> StoreOutcome {
        let result = self.handle.store_with(
            mode,
            key,
            value,
            flags,
            i64::from(exptime.0),
            StoreExtra::default(),
        );
        self.stored(mode, result)
    }

    /// A store's result as the protocol's outcome, counted as memcached counts.
    fn stored(&self, mode: Mode, result: Result<(Outcome, u64), StoreError>) -> StoreOutcome {
        self.counters.bump(Counter::CmdSet);
        let outcome = match result {
            Ok((Outcome::Stored, cas)) => StoreOutcome::Stored(cas),
            Ok((Outcome::Exists, _)) => StoreOutcome::Exists,
            Ok((Outcome::NotFound, _)) => StoreOutcome::NotFound,
            Ok(_) => StoreOutcome::NotStored,
            Err(error) => self.refused(error),
        };
        if matches!(outcome, StoreOutcome::Stored(_)) {
            self.counters.bump(Counter::TotalItems);
        }
        if let Mode::Cas(_) = mode {
            self.counters.bump(match outcome {
                StoreOutcome::Stored(_) => Counter::CasHits,
                StoreOutcome::Exists => Counter::CasBadval,
                _ => Counter::CasMisses,
            });
        }
        outcome
    }

    /// The reply for a store the store refused.
    fn refused(&self, error: StoreError) -> StoreOutcome {
        match error {
            StoreError::TooLarge { .. } => {
                self.counters.bump(Counter::StoreTooLarge);
                StoreOutcome::TooLarge
            }
            StoreError::KeyLength { .. } => StoreOutcome::NotStored,
            _ => {
                self.counters.bump(Counter::StoreNoMemory);
                StoreOutcome::OutOfMemory
            }
        }
    }

    /// `incr`/`decr` with memcached's outcomes.
    fn delta(&self, key: &[u8], mode: ArithmeticMode, delta: u64) -> DeltaOutcome {
        let result = match mode {
            ArithmeticMode::Increment => self.handle.incr(key, delta),
            ArithmeticMode::Decrement => self.handle.decr(key, delta),
        };
        let (hits, misses) = match mode {
            ArithmeticMode::Increment => (Counter::IncrHits, Counter::IncrMisses),
            ArithmeticMode::Decrement => (Counter::DecrHits, Counter::DecrMisses),
        };
        match result {
            Ok(Some(value)) => {
                self.counters.bump(hits);
                DeltaOutcome::Value(value)
            }
            Ok(None) | Err(StoreError::KeyLength { .. }) => {
                self.counters.bump(misses);
                DeltaOutcome::NotFound
            }
            Err(StoreError::NonNumeric) => DeltaOutcome::NonNumeric,
            Err(_) => DeltaOutcome::OutOfMemory,
        }
    }

    /// `mg` as a plain read, when nothing in it can change the item: `None` when it must go
    /// through the store's `meta_get` (a miss, or a stale item whose token is not out).
    fn meta_peek(&self, key: &[u8]) -> Option<MetaItem> {
        let guard = self.handle.get(key).ok().flatten()?;
        let lease = guard.lease();
        if lease.read_would_win() {
            return None;
        }
        Some(MetaItem {
            item: self.item(&guard, guard.expiry()),
            lease,
        })
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

/// The store's mode for an `ms`: `C` turns set and replace into a CAS store.
fn meta_mode(o: &MetaSetOptions) -> Mode {
    match (o.mode, o.cas) {
        (SetMode::Add, _) => Mode::Add,
        (SetMode::Set | SetMode::Replace, Some(cas)) => Mode::Cas(cas),
        (SetMode::Set, None) => Mode::Set,
        (SetMode::Replace, None) => Mode::Replace,
        (SetMode::Append, _) => Mode::Append,
        (SetMode::Prepend, _) => Mode::Prepend,
    }
}

impl Storage for Backend {
    fn get(&self, key: &[u8]) -> Option<Item> {
        let item = self.lookup(key);
        self.count_read(item.is_some());
        item
    }

    fn get_with(&self, key: &[u8], emit: &mut dyn FnMut(u32, u64, &[u8])) -> bool {
        let guard = self.handle.get(key).ok().flatten();
        self.count_read(guard.is_some());
        let Some(guard) = guard else {
            return false;
        };
        emit(guard.flags(), guard.cas(), guard.value());
        true
    }

    fn gat(&self, key: &[u8], exptime: Exptime) -> Option<Item> {
        self.counters.bump(Counter::CmdTouch);
        let guard = self.handle.gat(key, i64::from(exptime.0)).ok().flatten();
        self.count_read(guard.is_some());
        self.counters.bump(if guard.is_some() {
            Counter::TouchHits
        } else {
            Counter::TouchMisses
        });
        let guard = guard?;
        Some(self.item(&guard, guard.expiry()))
    }

    fn set(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome {
        self.store(Mode::Set, &key, &value, flags, exptime)
    }

    fn add(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome {
        self.store(Mode::Add, &key, &value, flags, exptime)
    }

    fn replace(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome {
        self.store(Mode::Replace, &key, &value, flags, exptime)
    }

    fn append(&self, key: Bytes, value: Bytes) -> StoreOutcome {
        self.store(Mode::Append, &key, &value, 0, Exptime(0))
    }

    fn prepend(&self, key: Bytes, value: Bytes) -> StoreOutcome {
        self.store(Mode::Prepend, &key, &value, 0, Exptime(0))
    }

    fn cas(
        &self,
        key: Bytes,
        flags: u32,
        exptime: Exptime,
        value: Bytes,
        cas: u64,
    ) -> StoreOutcome {
        self.store(Mode::Cas(cas), &key, &value, flags, exptime)
    }

    fn delete(&self, key: &[u8]) -> KeyOutcome {
        let deleted = matches!(self.handle.delete(key), Ok(Outcome::Deleted));
        self.counters.bump(if deleted {
            Counter::DeleteHits
        } else {
            Counter::DeleteMisses
        });
        if deleted {
            KeyOutcome::Done
        } else {
            KeyOutcome::NotFound
        }
    }

    fn incr(&self, key: &[u8], delta: u64) -> DeltaOutcome {
        self.delta(key, ArithmeticMode::Increment, delta)
    }

    fn decr(&self, key: &[u8], delta: u64) -> DeltaOutcome {
        self.delta(key, ArithmeticMode::Decrement, delta)
    }

    fn touch(&self, key: &[u8], exptime: Exptime) -> KeyOutcome {
        self.counters.bump(Counter::CmdTouch);
        let touched = matches!(
            self.handle.touch(key, i64::from(exptime.0)),
            Ok(Outcome::Touched)
        );
        self.counters.bump(if touched {
            Counter::TouchHits
        } else {
            Counter::TouchMisses
        });
        if touched {
            KeyOutcome::Done
        } else {
            KeyOutcome::NotFound
        }
    }

    fn flush_all(&self, delay: Exptime) {
        self.counters.bump(Counter::CmdFlush);
        self.handle.flush_all(i64::from(delay.0));
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
        let touch = read.touch.is_some();
        let changes = touch || read.recache.is_some() || read.vivify.is_some();
        if !changes {
            if let Some(hit) = self.meta_peek(key) {
                self.count_meta_get(false, true);
                return Some(hit);
            }
        }
        let hit = match self.handle.meta_get(key, read) {
            Ok(found) => found.map(|read| MetaItem {
                item: self.item(&read.guard, read.shown_expiry),
                lease: read.lease,
            }),
            // No room for the copy a win or touch needs: answer as a plain read.
            Err(_) => self.meta_peek(key),
        };
        self.count_meta_get(touch, hit.is_some());
        hit
    }

    fn meta_set(&self, o: MetaSetOptions) -> StoreOutcome {
        self.counters.bump(Counter::CmdMeta);
        let extra = StoreExtra {
            compare: o.cas,
            invalidate: o.invalidate,
            cas: o.new_cas,
        };
        let mode = meta_mode(&o);
        // The store removes the old item when it cannot make the new one, as memcached's `ms`.
        let exptime = i64::from(o.exptime.0);
        let result = self
            .handle
            .meta_set(mode, &o.key, &o.value, o.flags, exptime, extra);
        self.stored(mode, result)
    }

    fn meta_delete(&self, key: &[u8], delete: Delete) -> MetaDeleteOutcome {
        self.counters.bump(Counter::CmdMeta);
        let invalidate = delete.invalidate.is_some();
        let outcome = match self.handle.meta_delete(key, delete) {
            Ok(Outcome::Deleted) => MetaDeleteOutcome::Deleted,
            Ok(Outcome::Exists) => MetaDeleteOutcome::Exists,
            Ok(_) | Err(StoreError::KeyLength { .. }) => MetaDeleteOutcome::NotFound,
            Err(_) => MetaDeleteOutcome::OutOfMemory,
        };
        // memcached counts a removal as a hit, a mark-stale as neither, the rest as misses.
        match outcome {
            MetaDeleteOutcome::Deleted if !invalidate => self.counters.bump(Counter::DeleteHits),
            MetaDeleteOutcome::Deleted | MetaDeleteOutcome::OutOfMemory => {}
            _ => self.counters.bump(Counter::DeleteMisses),
        }
        outcome
    }

    fn meta_arithmetic(&self, key: &[u8], count: Count) -> MetaArithmeticOutcome {
        self.counters.bump(Counter::CmdMeta);
        let (hits, misses) = if count.decrement {
            (Counter::DecrHits, Counter::DecrMisses)
        } else {
            (Counter::IncrHits, Counter::IncrMisses)
        };
        match self.handle.meta_counter(key, count) {
            Ok(Counted::Value {
                value,
                cas,
                shown_expiry,
                created,
                ..
            }) => {
                if !created {
                    self.counters.bump(hits);
                }
                MetaArithmeticOutcome::Value {
                    value,
                    cas,
                    ttl: self.ttl(shown_expiry),
                    created,
                }
            }
            Ok(Counted::NotFound) | Err(StoreError::KeyLength { .. }) => {
                self.counters.bump(misses);
                MetaArithmeticOutcome::NotFound
            }
            Ok(Counted::Exists) => MetaArithmeticOutcome::Exists,
            Err(StoreError::NonNumeric) => MetaArithmeticOutcome::NonNumeric,
            Err(_) => MetaArithmeticOutcome::OutOfMemory,
        }
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
