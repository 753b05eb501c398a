//! `ModelStorage`: the test reference model of [`Storage`], following memcached 1.6.
//!
//! A `HashMap` behind a `Mutex`, a settable clock, and an `out_of_memory` switch. It is the
//! executable statement of the trait's semantics for the conversation tests and proptests;
//! the real store lives in `kvstore` and is checked against the same conversations.
//!
//! # Map
//! - [`Entry`]: one item plus the facts meta commands report.
//! - Lookup: `live` hides expired and flushed entries (memcached's lazy expiry).
//! - Text commands, then meta commands, each a few lines over the map.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use podkv_store::{
    expiry_of, parse_counter, ttl_of, Count, Counted, Delete, Mode, Outcome, Rank, Read,
    StoreError, StoreExtra,
};

use super::storage::{Item, ItemDebug, Lease, MetaItem, StatLines, Storage, Stored};

/// Bytes memcached adds to key and value for an item header (used only for `me size=`).
const SIZE_ITEM_HEADER: u64 = 48;

/// One stored item.
#[derive(Clone, Debug)]
struct Entry {
    value: Bytes,
    flags: u32,
    cas: u64,
    /// Absolute expiry (0: never), as the store keeps it.
    expiry: u32,
    stored_at: u32,
    last_access: u32,
    fetched: bool,
    stale: bool,
    token_sent: bool,
}

/// The mutable state behind the lock.
#[derive(Debug, Default)]
struct State {
    items: HashMap<Bytes, Entry>,
    now: u32,
    next_cas: u64,
    flush_at: Option<u32>,
    out_of_memory: bool,
    total_items: u64,
}

/// The test reference model.
#[derive(Debug, Default)]
pub struct ModelStorage {
    state: Mutex<State>,
}

impl ModelStorage {
    /// An empty model whose clock reads `now` (Unix seconds).
    pub fn at(now: u64) -> Self {
        let model = ModelStorage::default();
        model.lock().now = now as u32;
        model
    }

    /// Moves the clock forward.
    pub fn advance(&self, secs: u64) {
        self.lock().now += secs as u32;
    }

    /// Makes every later new item fail with `OutOfMemory` (or succeed again).
    pub fn set_out_of_memory(&self, on: bool) {
        self.lock().out_of_memory = on;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn is_live(&self, entry: &Entry) -> bool {
        let expired = entry.expiry != 0 && entry.expiry <= self.now;
        let flushed = self
            .flush_at
            .is_some_and(|t| t <= self.now && entry.stored_at <= t);
        !expired && !flushed
    }

    /// The live entry under `key`; dead ones are dropped on the way, as memcached does.
    fn live(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let live = self.items.get(key).map(|e| self.is_live(e))?;
        if !live {
            self.items.remove(key);
            return None;
        }
        self.items.get_mut(key)
    }

    fn new_cas(&mut self, explicit: Option<u64>) -> u64 {
        self.next_cas += 1;
        explicit.unwrap_or(self.next_cas)
    }

    /// Links a new item (its meta state clear) and returns its CAS.
    fn insert(
        &mut self,
        key: &[u8],
        flags: u32,
        expiry: u32,
        value: Bytes,
        cas: Option<u64>,
    ) -> u64 {
        let cas = self.new_cas(cas);
        let entry = Entry {
            value,
            flags,
            cas,
            expiry,
            stored_at: self.now,
            last_access: self.now,
            fetched: false,
            stale: false,
            token_sent: false,
        };
        self.items.insert(Bytes::copy_from_slice(key), entry);
        self.total_items += 1;
        cas
    }

    fn read(&mut self, key: &[u8], bump: bool) -> Option<Item> {
        let now = self.now;
        let entry = self.live(key)?.clone();
        let stored = self.items.get_mut(key)?;
        if bump {
            stored.fetched = true;
            stored.last_access = now;
        }
        Some(Item {
            value: entry.value,
            flags: entry.flags,
            cas: entry.cas,
            ttl: ttl_of(entry.expiry, now),
            last_access: now - entry.last_access,
            fetched: entry.fetched,
        })
    }

    /// A store in `mode`, deciding as the store does before it makes any item; when no item
    /// can be made, a `set` (and every `ms`, `meta`) removes the old one.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        extra: StoreExtra,
        meta: bool,
    ) -> Stored {
        let current = self.live(key).map(|e| (e.cas, e.expiry, e.token_sent));
        let decided = match (mode, current) {
            (Mode::Add, Some(_)) | (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
                Err(Outcome::NotStored)
            }
            (Mode::Cas(_), None) => Err(Outcome::NotFound),
            // memcached checks an append's token only when it is not 0.
            (Mode::Append | Mode::Prepend, Some((cas, ..)))
                if extra.compare.is_some_and(|c| c != 0 && c != cas) =>
            {
                Err(Outcome::Exists)
            }
            (Mode::Cas(token), Some((cas, ..))) if token != 0 && token == cas => Ok(None),
            // `ms I` with an older token: stored stale, keeping the TTL and a sent token.
            (Mode::Cas(token), Some((cas, expiry, sent)))
                if extra.invalidate && token != 0 && token < cas =>
            {
                Ok(Some((expiry, sent)))
            }
            (Mode::Cas(_), Some(_)) => Err(Outcome::Exists),
            _ => Ok(None),
        };
        let stale = match decided {
            Ok(stale) => stale,
            Err(outcome) => return Ok((outcome, 0)),
        };
        if self.out_of_memory {
            if mode.removes_old_when_unmade(meta) {
                self.items.remove(key);
            }
            return Err(StoreError::OutOfMemory);
        }
        let (value, flags, expiry) = match (mode, self.live(key)) {
            (Mode::Append, Some(e)) => (
                Bytes::from([&e.value[..], value].concat()),
                e.flags,
                e.expiry,
            ),
            (Mode::Prepend, Some(e)) => (
                Bytes::from([value, &e.value[..]].concat()),
                e.flags,
                e.expiry,
            ),
            _ => (
                Bytes::copy_from_slice(value),
                flags,
                expiry_of(exptime, self.now),
            ),
        };
        let expiry = stale.map_or(expiry, |(kept, _)| kept);
        let cas = self.insert(key, flags, expiry, value, extra.cas);
        if let (Some((_, sent)), Some(entry)) = (stale, self.items.get_mut(key)) {
            (entry.stale, entry.token_sent) = (true, sent);
        }
        Ok((Outcome::Stored, cas))
    }

    /// `incr`/`decr`/`ma`, as the store's counter.
    fn counter(&mut self, key: &[u8], count: Count) -> Result<Counted, StoreError> {
        let now = self.now;
        let touched = count.touch.map(|(t, rank)| (rank, expiry_of(t, now)));
        let Some(entry) = self.live(key).cloned() else {
            let Some((exptime, rank)) = count.vivify else {
                return Ok(Counted::NotFound);
            };
            if self.out_of_memory {
                return Err(StoreError::OutOfMemory);
            }
            // The new item's expiry starts at 0 (never); `N` and `T` set it in flag order.
            let steps = timeline(&[Some((rank, expiry_of(exptime, now))), touched]);
            let expiry = last(&steps, 0);
            let text = Bytes::from(count.initial.to_string());
            let cas = self.insert(key, 0, expiry, text, count.cas);
            return Ok(Counted::Value {
                value: count.initial,
                cas,
                expiry,
                shown_expiry: shown(&steps, 0, count.ttl_rank),
                created: true,
            });
        };
        if count.compare.is_some_and(|c| c != 0 && c != entry.cas) {
            return Ok(Counted::Exists);
        }
        let number = parse_counter(&entry.value).ok_or(StoreError::NonNumeric)?;
        let value = if count.decrement {
            number.saturating_sub(count.delta)
        } else {
            number.wrapping_add(count.delta)
        };
        if self.out_of_memory {
            return Err(StoreError::OutOfMemory);
        }
        let mut text = value.to_string().into_bytes();
        if text.len() < entry.value.len() {
            text.resize(entry.value.len(), b' ');
        }
        // In place (as long as the old value) the meta state stays; a new item starts clear.
        let in_place = text.len() == entry.value.len();
        let steps = timeline(&[touched]);
        let expiry = last(&steps, entry.expiry);
        let cas = self.new_cas(count.cas);
        let changed = Entry {
            value: Bytes::from(text),
            cas,
            expiry,
            stale: in_place && entry.stale,
            token_sent: in_place && entry.token_sent,
            ..entry.clone()
        };
        self.items.insert(Bytes::copy_from_slice(key), changed);
        Ok(Counted::Value {
            value,
            cas,
            expiry,
            shown_expiry: shown(&steps, entry.expiry, count.ttl_rank),
            created: false,
        })
    }
}

/// Expiry changes `(rank, expiry)` in flag order.
fn timeline(changes: &[Option<(Rank, u32)>]) -> Vec<(Rank, u32)> {
    let mut steps: Vec<(Rank, u32)> = changes.iter().flatten().copied().collect();
    steps.sort_unstable_by_key(|s| s.0);
    steps
}

/// The expiry after every change, else `initial`.
fn last(steps: &[(Rank, u32)], initial: u32) -> u32 {
    steps.last().map_or(initial, |s| s.1)
}

/// The expiry as it stands at `rank` among the flags.
fn shown(steps: &[(Rank, u32)], initial: u32, rank: Rank) -> u32 {
    steps
        .iter()
        .take_while(|s| s.0 < rank)
        .last()
        .map_or(initial, |s| s.1)
}

impl Storage for ModelStorage {
    fn now(&self) -> u32 {
        self.lock().now
    }

    fn get(&self, key: &[u8]) -> Option<Item> {
        self.lock().read(key, true)
    }

    fn gat(&self, key: &[u8], exptime: i64) -> Option<Item> {
        let mut state = self.lock();
        let expiry = expiry_of(exptime, state.now);
        state.live(key)?.expiry = expiry;
        state.read(key, true)
    }

    fn store(&self, mode: Mode, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Stored {
        let extra = StoreExtra::default();
        self.lock()
            .store(mode, key, value, flags, exptime, extra, false)
    }

    fn delete(&self, key: &[u8]) -> Result<Outcome, StoreError> {
        let mut state = self.lock();
        if state.live(key).is_none() {
            return Ok(Outcome::NotFound);
        }
        state.items.remove(key);
        Ok(Outcome::Deleted)
    }

    fn arithmetic(&self, key: &[u8], count: Count) -> Result<Counted, StoreError> {
        self.lock().counter(key, count)
    }

    fn touch(&self, key: &[u8], exptime: i64) -> Result<Outcome, StoreError> {
        let mut state = self.lock();
        let expiry = expiry_of(exptime, state.now);
        Ok(match state.live(key) {
            Some(entry) => {
                entry.expiry = expiry;
                Outcome::Touched
            }
            None => Outcome::NotFound,
        })
    }

    fn flush_all(&self, delay: i64) {
        let mut state = self.lock();
        let now = state.now;
        // A delay that resolves to the past (an old Unix time) flushes now.
        state.flush_at = Some(match delay {
            d if d > 0 => expiry_of(d, now).max(now),
            _ => now,
        });
    }

    fn stats(&self, group: &[u8]) -> Option<StatLines> {
        let state = self.lock();
        let live = state.items.values().filter(|e| state.is_live(e)).count();
        match group {
            b"" => Some(vec![
                ("curr_items".into(), live.to_string()),
                ("total_items".into(), state.total_items.to_string()),
            ]),
            b"settings" => Some(vec![("item_size_max".into(), "1048576".into())]),
            b"items" | b"slabs" | b"sizes" | b"conns" => Some(Vec::new()),
            _ => None,
        }
    }

    fn version(&self) -> String {
        "1.6.0-model".into()
    }

    fn meta_get(&self, key: &[u8], read: Read, no_bump: bool) -> Option<MetaItem> {
        let mut state = self.lock();
        let now = state.now;
        let touch = read.touch.map(|(t, rank)| (rank, expiry_of(t, now)));
        if state.live(key).is_none() {
            let (vivify, rank) = read.vivify?;
            // A created item's expiry starts at 0 (never); `N` and `T` set it in flag order.
            let steps = timeline(&[Some((rank, expiry_of(vivify, now))), touch]);
            let _ = state.insert(key, 0, last(&steps, 0), Bytes::new(), read.cas);
            state.items.get_mut(key)?.token_sent = true;
            let mut item = state.read(key, false)?;
            item.ttl = ttl_of(shown(&steps, 0, read.ttl_rank), now);
            let lease = Lease {
                won: true,
                created: true,
                ..Lease::default()
            };
            return Some(MetaItem { item, lease });
        }
        let entry = state.live(key)?;
        let steps = timeline(&[touch]);
        let before = entry.expiry;
        // `R` compares the TTL as it stands at `R`'s place among the flags.
        let recache_wins = read.recache.is_some_and(|(r, rank)| {
            let at = shown(&steps, before, rank);
            at != 0 && at < expiry_of(r, now)
        });
        let lease = Lease {
            won: !entry.token_sent && (recache_wins || entry.stale),
            token_sent: entry.token_sent,
            stale: entry.stale,
            created: false,
        };
        entry.token_sent |= lease.won;
        entry.expiry = last(&steps, before);
        let mut item = state.read(key, !no_bump)?;
        item.ttl = ttl_of(shown(&steps, before, read.ttl_rank), now);
        Some(MetaItem { item, lease })
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
        self.lock()
            .store(mode, key, value, flags, exptime, extra, true)
    }

    fn meta_delete(&self, key: &[u8], o: Delete) -> Result<Outcome, StoreError> {
        let mut state = self.lock();
        let now = state.now;
        let next = o.cas.unwrap_or(state.next_cas + 1);
        let Some(entry) = state.live(key) else {
            return Ok(Outcome::NotFound);
        };
        if o.compare.is_some_and(|c| c != entry.cas) {
            return Ok(Outcome::Exists);
        }
        if let Some(touch) = o.invalidate {
            entry.stale = true;
            entry.token_sent = false;
            entry.cas = next;
            if let Some(exptime) = touch {
                entry.expiry = expiry_of(exptime, now);
            }
            state.next_cas += 1;
        } else {
            state.items.remove(key);
        }
        Ok(Outcome::Deleted)
    }

    fn meta_arithmetic(&self, key: &[u8], count: Count) -> Result<Counted, StoreError> {
        self.lock().counter(key, count)
    }

    fn meta_debug(&self, key: &[u8]) -> Option<ItemDebug> {
        let mut state = self.lock();
        let now = state.now;
        let entry = state.live(key)?;
        let exp = match entry.expiry {
            0 => -1,
            t => i64::from(now) - i64::from(t),
        };
        Some(ItemDebug {
            exp,
            last_access: u64::from(now - entry.last_access),
            cas: entry.cas,
            fetched: entry.fetched,
            class: 1,
            size: SIZE_ITEM_HEADER + key.len() as u64 + entry.value.len() as u64 + 2,
        })
    }
}
