//! [`Backend`]: the protocol's [`Storage`] over one worker's [`StoreHandle`].
//!
//! Text commands map one to one onto the store's memcached commands. Meta commands are built
//! from the same calls; where the store keeps no state for a meta feature, the behaviour
//! below is what podkv does instead (memcached's differs only there):
//!
//! 1. **Recache tokens.** The store keeps no per-item "token sent" or "stale" bit, so `mg R`
//!    answers `W` to every client that reads an item whose TTL is under the threshold (never
//!    `Z`), `mg N` answers `W` to the client whose add created the empty item and `Z` to the
//!    ones that lost that race; `X` is never reported.
//! 2. **Invalidation.** `md I` deletes the item; `ms I` is a plain CAS store.
//! 3. **Explicit CAS (`E`)** is ignored: the store hands out its own tokens.
//! 4. **Conditional meta commands** `md C` and append/prepend `ms C` compare the CAS read by
//!    a lookup, then act: a write by another client in between can slip through (the store
//!    has no conditional delete or append yet). Text `cas`, `ms C` with set/replace and
//!    `ma C` are exact (the store compares inside its CAS loop).
//! 5. **Padding.** A shorter `incr`/`decr`/`ma` result is padded with spaces to the old
//!    length, always. memcached pads only when it can update in place (no other reference to
//!    the item alive, which depends on its response timing) and otherwise writes the bare
//!    number.
//! 6. **Access facts** (`mg l h`, `me la= fetch=`): lookups never write shared memory, so
//!    podkv reports 0 seconds and "not fetched".

use bytes::Bytes;
use podkv_store::{expiry_of, parse_counter, Mode, Outcome, StoreError, StoreHandle};

use crate::protocol::request::{ArithmeticMode, Exptime, SetMode};
use crate::protocol::storage::{
    DeltaOutcome, Item, ItemDebug, KeyOutcome, Lease, MetaArithmeticOptions, MetaArithmeticOutcome,
    MetaDeleteOptions, MetaDeleteOutcome, MetaGetOptions, MetaItem, MetaSetOptions, StatLines,
    Storage, StoreOutcome,
};

use super::stats::{Counter, Counters};
use super::Shared;
use std::sync::Arc;

/// The memcached release whose protocol podkv speaks; `version` answers
/// `<MEMCACHED_COMPATIBLE>-podkv-<version>` so clients that gate features on the version (as
/// libmemcached's `memccapable` does) treat podkv as that memcached.
pub const MEMCACHED_COMPATIBLE: &str = "1.6.18";

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
        Some(Item {
            value: Bytes::copy_from_slice(guard.value()),
            flags: guard.flags(),
            cas: guard.cas(),
            ttl: self.ttl(guard.expiry()),
            last_access: 0,
            fetched: false,
        })
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

    /// Runs a storage command and maps its result; a failed `set` drops the old item, as
    /// memcached does, so no stale value survives.
    fn store(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: Exptime,
    ) -> StoreOutcome {
        self.counters.bump(Counter::CmdSet);
        let result = self
            .handle
            .store_cas(mode, key, value, flags, i64::from(exptime.0));
        let outcome = match result {
            Ok((Outcome::Stored, cas)) => StoreOutcome::Stored(cas),
            Ok((Outcome::Exists, _)) => StoreOutcome::Exists,
            Ok((Outcome::NotFound, _)) => StoreOutcome::NotFound,
            Ok(_) => StoreOutcome::NotStored,
            Err(error) => self.refused(error),
        };
        if mode == Mode::Set && outcome == StoreOutcome::OutOfMemory {
            let _ = self.handle.delete(key);
        }
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

    /// `ms` after its CAS pre-check: the store call for `mode`, with vivify on a miss.
    fn meta_store(&self, o: &MetaSetOptions) -> StoreOutcome {
        let concat = matches!(o.mode, SetMode::Append | SetMode::Prepend);
        if concat {
            // memcached's append checks the token only when it is not 0.
            if let Some(cas) = o.cas.filter(|&c| c != 0) {
                match self.handle.get(&o.key).ok().flatten().map(|g| g.cas()) {
                    Some(now) if now != cas => return StoreOutcome::Exists,
                    None if o.vivify.is_none() => return StoreOutcome::NotStored,
                    _ => {}
                }
            }
        }
        let mode = match (o.mode, o.cas) {
            (SetMode::Add, _) => Mode::Add,
            (SetMode::Set | SetMode::Replace, Some(cas)) => Mode::Cas(cas),
            (SetMode::Set, None) => Mode::Set,
            (SetMode::Replace, None) => Mode::Replace,
            (SetMode::Append, _) => Mode::Append,
            (SetMode::Prepend, _) => Mode::Prepend,
        };
        let outcome = self.store(mode, &o.key, &o.value, o.flags, o.exptime);
        match (outcome, o.vivify) {
            (StoreOutcome::NotStored, Some(exptime)) if concat => {
                self.store(Mode::Add, &o.key, &o.value, o.flags, exptime)
            }
            _ => outcome,
        }
    }
}

/// One try of `ma` on a present item.
enum Attempt {
    /// Finished with this outcome.
    Done(MetaArithmeticOutcome),
    /// The key has no visible item.
    Miss,
    /// Another writer changed the item between the read and the CAS store: try again.
    Raced,
}

impl Backend {
    /// `ma`: read, compute, then a CAS store against the token just read, so a concurrent
    /// write makes it retry rather than be lost. A shorter number is padded with spaces to the
    /// old length, as memcached's in-place update (and the store's `incr`) does.
    fn meta_delta_once(&self, key: &[u8], o: &MetaArithmeticOptions) -> Attempt {
        let Some(guard) = self.handle.get(key).ok().flatten() else {
            return Attempt::Miss;
        };
        let (cas, flags, expiry) = (guard.cas(), guard.flags(), guard.expiry());
        if o.cas.is_some_and(|c| c != 0 && c != cas) {
            return Attempt::Done(MetaArithmeticOutcome::Exists);
        }
        let Some(current) = parse_counter(guard.value()) else {
            return Attempt::Done(MetaArithmeticOutcome::NonNumeric);
        };
        let old_len = guard.value().len();
        drop(guard);
        let value = match o.mode {
            ArithmeticMode::Increment => current.wrapping_add(o.delta),
            ArithmeticMode::Decrement => current.saturating_sub(o.delta),
        };
        // An absolute expiry passes through memcached's exptime rules unchanged.
        let exptime = o.touch.map_or(i64::from(expiry), |t| i64::from(t.0));
        let mut text = value.to_string().into_bytes();
        if text.len() < old_len {
            text.resize(old_len, b' ');
        }
        match self
            .handle
            .store_cas(Mode::Cas(cas), key, &text, flags, exptime)
        {
            Ok((Outcome::Stored, new_cas)) => Attempt::Done(MetaArithmeticOutcome::Value {
                value,
                cas: new_cas,
                ttl: self.ttl(expiry_of(exptime, self.now())),
                created: false,
            }),
            Ok(_) => Attempt::Raced,
            Err(_) => Attempt::Done(MetaArithmeticOutcome::OutOfMemory),
        }
    }
}

impl Storage for Backend {
    fn get(&self, key: &[u8]) -> Option<Item> {
        let item = self.lookup(key);
        self.count_read(item.is_some());
        item
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
        Some(Item {
            value: Bytes::copy_from_slice(guard.value()),
            flags: guard.flags(),
            cas: guard.cas(),
            ttl: self.ttl(guard.expiry()),
            last_access: 0,
            fetched: false,
        })
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

    fn meta_get(&self, key: &[u8], options: MetaGetOptions) -> Option<MetaItem> {
        self.counters.bump(Counter::CmdMeta);
        let item = match options.touch {
            Some(exptime) => self.gat(key, exptime),
            None => self.get(key),
        };
        if let Some(item) = item {
            let won = options.recache.is_some_and(|recache| {
                let threshold = u32::try_from(recache.0).unwrap_or(0);
                item.ttl.is_some_and(|ttl| ttl < threshold)
            });
            let lease = Lease {
                won,
                ..Lease::default()
            };
            return Some(MetaItem { item, lease });
        }
        let exptime = options.vivify?;
        let won = matches!(
            self.store(Mode::Add, key, b"", 0, exptime),
            StoreOutcome::Stored(_)
        );
        let item = self.lookup(key)?;
        let lease = Lease {
            won,
            token_sent: !won,
            stale: false,
        };
        Some(MetaItem { item, lease })
    }

    fn meta_set(&self, options: MetaSetOptions) -> StoreOutcome {
        self.counters.bump(Counter::CmdMeta);
        self.meta_store(&options)
    }

    fn meta_delete(&self, key: &[u8], options: MetaDeleteOptions) -> MetaDeleteOutcome {
        self.counters.bump(Counter::CmdMeta);
        if let Some(cas) = options.cas {
            match self.handle.get(key).ok().flatten().map(|g| g.cas()) {
                None => return MetaDeleteOutcome::NotFound,
                Some(now) if now != cas => return MetaDeleteOutcome::Exists,
                Some(_) => {}
            }
        }
        match self.delete(key) {
            KeyOutcome::Done => MetaDeleteOutcome::Deleted,
            KeyOutcome::NotFound => MetaDeleteOutcome::NotFound,
        }
    }

    fn meta_arithmetic(&self, key: &[u8], o: MetaArithmeticOptions) -> MetaArithmeticOutcome {
        self.counters.bump(Counter::CmdMeta);
        let (hits, misses) = match o.mode {
            ArithmeticMode::Increment => (Counter::IncrHits, Counter::IncrMisses),
            ArithmeticMode::Decrement => (Counter::DecrHits, Counter::DecrMisses),
        };
        loop {
            match self.meta_delta_once(key, &o) {
                Attempt::Done(outcome) => {
                    self.counters.bump(match outcome {
                        MetaArithmeticOutcome::Value { created: false, .. } => hits,
                        _ => misses,
                    });
                    return outcome;
                }
                Attempt::Miss => break,
                Attempt::Raced => continue,
            }
        }
        self.counters.bump(misses);
        let Some(exptime) = o.vivify else {
            return MetaArithmeticOutcome::NotFound;
        };
        let initial = o.initial.to_string();
        match self.store(Mode::Add, key, initial.as_bytes(), 0, exptime) {
            StoreOutcome::Stored(cas) => MetaArithmeticOutcome::Value {
                value: o.initial,
                cas,
                ttl: self.ttl(expiry_of(i64::from(exptime.0), self.now())),
                created: true,
            },
            StoreOutcome::OutOfMemory | StoreOutcome::TooLarge => {
                MetaArithmeticOutcome::OutOfMemory
            }
            _ => MetaArithmeticOutcome::NotStored,
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
