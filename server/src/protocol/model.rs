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
use podkv_store::{Count, Delete, Read};

use super::numeric::parse_u64;
use super::request::{ArithmeticMode, Deadline, Exptime, GetOrder, SetMode};
use super::storage::{
    DeltaOutcome, Item, ItemDebug, KeyOutcome, Lease, MetaArithmeticOutcome, MetaDeleteOutcome,
    MetaItem, MetaSetOptions, StatLines, Storage, StoreOutcome,
};

/// Bytes memcached adds to key and value for an item header (used only for `me size=`).
const SIZE_ITEM_HEADER: u64 = 48;

/// One stored item.
#[derive(Clone, Debug)]
struct Entry {
    value: Bytes,
    flags: u32,
    cas: u64,
    deadline: Deadline,
    stored_at: u64,
    last_access: u64,
    fetched: bool,
    stale: bool,
    token_sent: bool,
}

/// Why an arithmetic step did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeltaError {
    NotFound,
    NonNumeric,
    CasMismatch,
}

/// What an arithmetic step produced: the value, its CAS, its deadline.
type DeltaResult = Result<(u64, u64, Deadline), DeltaError>;

/// The mutable state behind the lock.
#[derive(Debug, Default)]
struct State {
    items: HashMap<Bytes, Entry>,
    now: u64,
    next_cas: u64,
    flush_at: Option<u64>,
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
        model.lock().now = now;
        model
    }

    /// Moves the clock forward.
    pub fn advance(&self, secs: u64) {
        self.lock().now += secs;
    }

    /// Makes every later store fail with `OutOfMemory` (or succeed again).
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
        let expired = matches!(entry.deadline, Deadline::At(t) if t <= self.now)
            || entry.deadline == Deadline::Expired;
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

    fn ttl(&self, deadline: Deadline) -> Option<u32> {
        match deadline {
            Deadline::Never => None,
            Deadline::Expired => Some(0),
            Deadline::At(t) => Some(t.saturating_sub(self.now) as u32),
        }
    }

    fn insert(
        &mut self,
        key: Bytes,
        flags: u32,
        exptime: Exptime,
        value: Bytes,
        cas: Option<u64>,
    ) -> StoreOutcome {
        let cas = self.new_cas(cas);
        let entry = Entry {
            value,
            flags,
            cas,
            deadline: exptime.deadline(self.now),
            stored_at: self.now,
            last_access: self.now,
            fetched: false,
            stale: false,
            token_sent: false,
        };
        self.items.insert(key, entry);
        self.total_items += 1;
        StoreOutcome::Stored(cas)
    }

    /// A store refused for memory: memcached drops the old item of a failed set.
    fn refuse(&mut self, key: &[u8], drop_old: bool) -> StoreOutcome {
        if drop_old {
            self.items.remove(key);
        }
        StoreOutcome::OutOfMemory
    }

    fn read(&mut self, key: &[u8], bump: bool) -> Option<Item> {
        let now = self.now;
        let entry = self.live(key)?.clone();
        let ttl = self.ttl(entry.deadline);
        let stored = self.items.get_mut(key)?;
        if bump {
            stored.fetched = true;
            stored.last_access = now;
        }
        Some(Item {
            value: entry.value,
            flags: entry.flags,
            cas: entry.cas,
            ttl,
            last_access: (now - entry.last_access) as u32,
            fetched: entry.fetched,
        })
    }

    fn concat(&mut self, key: Bytes, data: Bytes, append: bool, cas: Option<u64>) -> StoreOutcome {
        if self.out_of_memory {
            return self.refuse(&key, false);
        }
        let next = self.next_cas + 1;
        let Some(entry) = self.live(&key) else {
            return StoreOutcome::NotStored;
        };
        // memcached's append checks the token only when it is not 0.
        if cas.is_some_and(|c| c != 0 && c != entry.cas) {
            return StoreOutcome::Exists;
        }
        let (head, tail) = if append {
            (&entry.value, &data)
        } else {
            (&data, &entry.value)
        };
        entry.value = Bytes::from([&head[..], &tail[..]].concat());
        entry.cas = next;
        self.next_cas = next;
        StoreOutcome::Stored(next)
    }

    fn delta(
        &mut self,
        key: &[u8],
        mode: ArithmeticMode,
        delta: u64,
        cas: Option<u64>,
    ) -> DeltaResult {
        let next = self.next_cas + 1;
        let entry = self.live(key).ok_or(DeltaError::NotFound)?;
        if cas.is_some_and(|c| c != 0 && c != entry.cas) {
            return Err(DeltaError::CasMismatch);
        }
        let current = if entry.value.is_empty() {
            None
        } else {
            parse_u64(&entry.value)
        };
        let current = current.ok_or(DeltaError::NonNumeric)?;
        let value = match mode {
            ArithmeticMode::Increment => current.wrapping_add(delta),
            ArithmeticMode::Decrement => current.saturating_sub(delta),
        };
        let mut digits = value.to_string().into_bytes();
        if digits.len() < entry.value.len() {
            digits.resize(entry.value.len(), b' ');
        }
        if digits.len() > entry.value.len() {
            // Not in place: a new item, whose meta state starts clear.
            (entry.stale, entry.token_sent) = (false, false);
        }
        entry.value = Bytes::from(digits);
        entry.cas = next;
        let deadline = entry.deadline;
        self.next_cas = next;
        Ok((value, next, deadline))
    }
}

/// The exptime the store's commands carry as sent (the parser read it as an `i32`).
fn exptime(seconds: i64) -> Exptime {
    Exptime(seconds as i32)
}

/// Expiry changes `(rank, deadline)` in flag order.
fn timeline(changes: &[Option<(u8, Deadline)>]) -> Vec<(u8, Deadline)> {
    let mut steps: Vec<(u8, Deadline)> = changes.iter().flatten().copied().collect();
    steps.sort_unstable_by_key(|s| s.0);
    steps
}

/// The deadline as it stands at `rank` among the flags.
fn shown(steps: &[(u8, Deadline)], initial: Deadline, rank: u8) -> Deadline {
    steps
        .iter()
        .take_while(|s| s.0 < rank)
        .last()
        .map_or(initial, |s| s.1)
}

/// The text `incr`/`decr` outcome of an arithmetic step.
fn text_delta(result: DeltaResult) -> DeltaOutcome {
    match result {
        Ok((value, _, _)) => DeltaOutcome::Value(value),
        Err(DeltaError::NonNumeric) => DeltaOutcome::NonNumeric,
        Err(_) => DeltaOutcome::NotFound,
    }
}

impl Storage for ModelStorage {
    fn get(&self, key: &[u8]) -> Option<Item> {
        self.lock().read(key, true)
    }

    fn gat(&self, key: &[u8], exptime: Exptime) -> Option<Item> {
        let mut state = self.lock();
        let deadline = exptime.deadline(state.now);
        state.live(key)?.deadline = deadline;
        state.read(key, true)
    }

    fn set(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome {
        let mut state = self.lock();
        if state.out_of_memory {
            return state.refuse(&key, true);
        }
        state.insert(key, flags, exptime, value, None)
    }

    fn add(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome {
        let mut state = self.lock();
        if state.live(&key).is_some() {
            return StoreOutcome::NotStored;
        }
        if state.out_of_memory {
            return state.refuse(&key, false);
        }
        state.insert(key, flags, exptime, value, None)
    }

    fn replace(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome {
        let mut state = self.lock();
        if state.live(&key).is_none() {
            return StoreOutcome::NotStored;
        }
        if state.out_of_memory {
            return state.refuse(&key, false);
        }
        state.insert(key, flags, exptime, value, None)
    }

    fn append(&self, key: Bytes, value: Bytes) -> StoreOutcome {
        self.lock().concat(key, value, true, None)
    }

    fn prepend(&self, key: Bytes, value: Bytes) -> StoreOutcome {
        self.lock().concat(key, value, false, None)
    }

    fn cas(
        &self,
        key: Bytes,
        flags: u32,
        exptime: Exptime,
        value: Bytes,
        cas: u64,
    ) -> StoreOutcome {
        let mut state = self.lock();
        if state.out_of_memory {
            return state.refuse(&key, false);
        }
        match state.live(&key) {
            None => StoreOutcome::NotFound,
            Some(entry) if entry.cas != cas => StoreOutcome::Exists,
            Some(_) => state.insert(key, flags, exptime, value, None),
        }
    }

    fn delete(&self, key: &[u8]) -> KeyOutcome {
        let mut state = self.lock();
        match state.live(key) {
            Some(_) => {
                state.items.remove(key);
                KeyOutcome::Done
            }
            None => KeyOutcome::NotFound,
        }
    }

    fn incr(&self, key: &[u8], delta: u64) -> DeltaOutcome {
        text_delta(
            self.lock()
                .delta(key, ArithmeticMode::Increment, delta, None),
        )
    }

    fn decr(&self, key: &[u8], delta: u64) -> DeltaOutcome {
        text_delta(
            self.lock()
                .delta(key, ArithmeticMode::Decrement, delta, None),
        )
    }

    fn touch(&self, key: &[u8], exptime: Exptime) -> KeyOutcome {
        let mut state = self.lock();
        let deadline = exptime.deadline(state.now);
        match state.live(key) {
            Some(entry) => {
                entry.deadline = deadline;
                KeyOutcome::Done
            }
            None => KeyOutcome::NotFound,
        }
    }

    fn flush_all(&self, delay: Exptime) {
        let mut state = self.lock();
        let now = state.now;
        state.flush_at = Some(match delay.deadline(now) {
            Deadline::At(t) if delay.0 > 0 => t,
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
        let touch = read
            .touch
            .map(|(t, rank)| (rank.0, exptime(t).deadline(now)));
        if state.live(key).is_none() {
            let (vivify, rank) = read.vivify?;
            let vivify = exptime(vivify);
            // A created item's expiry starts at "never"; `N` and `T` set it in flag order.
            let steps = timeline(&[Some((rank.0, vivify.deadline(now))), touch]);
            let key = Bytes::copy_from_slice(key);
            let _ = state.insert(key.clone(), 0, vivify, Bytes::new(), read.cas);
            let entry = state.items.get_mut(&key)?;
            entry.token_sent = true;
            entry.deadline = shown(&steps, Deadline::Never, GetOrder::ABSENT);
            let mut item = state.read(&key, false)?;
            item.ttl = state.ttl(shown(&steps, Deadline::Never, read.ttl_rank.0));
            let lease = Lease {
                won: true,
                created: true,
                ..Lease::default()
            };
            return Some(MetaItem { item, lease });
        }
        let entry = state.live(key)?;
        let steps = timeline(&[touch]);
        let before = entry.deadline;
        let recache_wins = read.recache.is_some_and(|(r, rank)| {
            let at = shown(&steps, before, rank.0);
            matches!((at, exptime(r).deadline(now)), (Deadline::At(t), Deadline::At(r)) if t < r)
        });
        let lease = Lease {
            won: !entry.token_sent && (recache_wins || entry.stale),
            token_sent: entry.token_sent,
            stale: entry.stale,
            created: false,
        };
        entry.token_sent |= lease.won;
        entry.deadline = shown(&steps, before, GetOrder::ABSENT);
        let mut item = state.read(key, !no_bump)?;
        item.ttl = state.ttl(shown(&steps, before, read.ttl_rank.0));
        Some(MetaItem { item, lease })
    }

    fn meta_set(&self, o: MetaSetOptions) -> StoreOutcome {
        let mut state = self.lock();
        if state.out_of_memory {
            return state.refuse(&o.key, true);
        }
        let current = state.live(&o.key).map(|e| e.cas);
        match (o.mode, o.cas, current) {
            (SetMode::Append | SetMode::Prepend, _, None) => StoreOutcome::NotStored,
            (SetMode::Append | SetMode::Prepend, cas, Some(_)) => {
                state.concat(o.key, o.value, o.mode == SetMode::Append, cas)
            }
            (SetMode::Add, _, Some(_)) | (SetMode::Replace, None, None) => StoreOutcome::NotStored,
            (SetMode::Set | SetMode::Replace, Some(_), None) => StoreOutcome::NotFound,
            (SetMode::Set | SetMode::Replace, Some(cas), Some(now_cas)) if cas != now_cas => {
                if !(o.invalidate && cas < now_cas) {
                    return StoreOutcome::Exists;
                }
                // Stored stale, keeping the item's TTL and a sent token (`CAS_STALE`).
                let Some((deadline, sent)) = state.live(&o.key).map(|e| (e.deadline, e.token_sent))
                else {
                    return StoreOutcome::NotFound;
                };
                let stored = state.insert(o.key.clone(), o.flags, o.exptime, o.value, o.new_cas);
                if let Some(entry) = state.items.get_mut(&o.key) {
                    (entry.stale, entry.deadline, entry.token_sent) = (true, deadline, sent);
                }
                stored
            }
            _ => state.insert(o.key, o.flags, o.exptime, o.value, o.new_cas),
        }
    }

    fn meta_delete(&self, key: &[u8], o: Delete) -> MetaDeleteOutcome {
        let mut state = self.lock();
        let now = state.now;
        let next = o.cas.unwrap_or(state.next_cas + 1);
        let Some(entry) = state.live(key) else {
            return MetaDeleteOutcome::NotFound;
        };
        if o.compare.is_some_and(|c| c != entry.cas) {
            return MetaDeleteOutcome::Exists;
        }
        if let Some(touch) = o.invalidate {
            entry.stale = true;
            entry.token_sent = false;
            entry.cas = next;
            if let Some(seconds) = touch {
                entry.deadline = exptime(seconds).deadline(now);
            }
            state.next_cas += 1;
        } else {
            state.items.remove(key);
        }
        MetaDeleteOutcome::Deleted
    }

    fn meta_arithmetic(&self, key: &[u8], o: Count) -> MetaArithmeticOutcome {
        let mut state = self.lock();
        let now = state.now;
        let touch = o.touch.map(|(t, rank)| (rank.0, exptime(t).deadline(now)));
        let mode = if o.decrement {
            ArithmeticMode::Decrement
        } else {
            ArithmeticMode::Increment
        };
        match state.delta(key, mode, o.delta, o.compare) {
            Ok((value, cas, before)) => {
                let steps = timeline(&[touch]);
                let entry = state.live(key);
                let cas = match (entry, o.cas) {
                    (Some(entry), explicit) => {
                        entry.deadline = shown(&steps, before, GetOrder::ABSENT);
                        entry.cas = explicit.unwrap_or(cas);
                        entry.cas
                    }
                    (None, _) => cas,
                };
                MetaArithmeticOutcome::Value {
                    value,
                    cas,
                    ttl: state.ttl(shown(&steps, before, o.ttl_rank.0)),
                    created: false,
                }
            }
            Err(DeltaError::NotFound) => match o.vivify {
                None => MetaArithmeticOutcome::NotFound,
                Some((vivify, rank)) => {
                    let vivify = exptime(vivify);
                    // The new item's expiry starts at "never"; `N` and `T` set it in order.
                    let steps = timeline(&[Some((rank.0, vivify.deadline(now))), touch]);
                    let value = Bytes::from(o.initial.to_string());
                    let key = Bytes::copy_from_slice(key);
                    let StoreOutcome::Stored(cas) =
                        state.insert(key.clone(), 0, vivify, value, o.cas)
                    else {
                        return MetaArithmeticOutcome::NotStored;
                    };
                    if let Some(entry) = state.items.get_mut(&key) {
                        entry.deadline = shown(&steps, Deadline::Never, GetOrder::ABSENT);
                    }
                    MetaArithmeticOutcome::Value {
                        value: o.initial,
                        cas,
                        ttl: state.ttl(shown(&steps, Deadline::Never, o.ttl_rank.0)),
                        created: true,
                    }
                }
            },
            Err(DeltaError::NonNumeric) => MetaArithmeticOutcome::NonNumeric,
            Err(DeltaError::CasMismatch) => MetaArithmeticOutcome::Exists,
        }
    }

    fn meta_debug(&self, key: &[u8]) -> Option<ItemDebug> {
        let mut state = self.lock();
        let now = state.now;
        let entry = state.live(key)?;
        let exp = match entry.deadline {
            Deadline::Never => -1,
            Deadline::Expired => 0,
            Deadline::At(t) => now as i64 - t as i64,
        };
        Some(ItemDebug {
            exp,
            last_access: now - entry.last_access,
            cas: entry.cas,
            fetched: entry.fetched,
            class: 1,
            size: SIZE_ITEM_HEADER + key.len() as u64 + entry.value.len() as u64 + 2,
        })
    }
}
