//! memcached 1.6 semantics over the index: every command is one pass of `Handle::update`,
//! whose `decide` closure sees the key's current *visible* item and returns one `Step`.
//!
//! # Rules (as memcached 1.6 behaves)
//! - expiry `0` never expires; `1..=30 days` is relative; larger is a Unix time; negative is
//!   already expired. An item with `expiry != 0 && expiry <= now` is invisible at once.
//! - `flush_all [delay]`: `oldest_live = realtime(delay) - 1`, and for an immediate flush
//!   `oldest_cas = next token`; an item is flushed when `cas < oldest_cas`, or when
//!   `oldest_live != 0 && oldest_live <= now && time <= oldest_live`. Two deliberate
//!   differences: memcached checks `cas < oldest_cas` only while `oldest_live <= now`, so a
//!   later *delayed* flush revives items an immediate flush hid (unless a get had unlinked
//!   them); here an immediate flush is final. memcached's `time` is last access (60-second
//!   granularity); ours is the last write (reads never write).
//! - `incr`/`decr`: the value (leading spaces allowed, trailing spaces allowed) must be a
//!   decimal `u64`, else `NonNumeric`; incr wraps at 2^64, decr stops at 0; a shorter result is
//!   padded with spaces to the old length (as memcached's in-place update does), a longer one
//!   makes a new item; a new CAS token either way, flags and expiry kept.
//! - `append`/`prepend` keep flags and expiry; `touch`/`gat` keep the CAS token.
//! - the meta state (`item` `lease`: token sent, stale) is kept where memcached changes the
//!   item in place — `touch`, `gat`, an `incr`/`decr` whose result fits the old value — and
//!   starts clear in every new item (set, add, replace, cas, append, prepend, a longer
//!   counter), as memcached's `do_item_alloc` makes it. The meta commands are in `meta`.

use crate::arena::Arena;
use crate::command::{Count, Counted, Lease, Step};
use crate::item::{self, Meta, View, SIZE_HEADER};
use crate::list::{self, Probe};
use crate::map::{Handle, Pin};
use crate::StoreError;
use std::sync::atomic::Ordering;

pub use crate::command::{
    expiry_of, parse_counter, Mode, Outcome, StoreExtra, SECONDS_RELATIVE_MAX,
};

/// CAS tokens a handle reserves at once.
pub const BATCH_CAS: u64 = 64;

/// A value read through a pin: valid for the guard's lifetime, never longer.
pub struct Guard<'h, A: Arena> {
    pub(crate) _pin: Pin<'h, A>,
    pub(crate) view: View,
    pub(crate) item: u64,
}

impl<'h, A: Arena> Guard<'h, A> {
    /// The value, in place in the heap.
    pub fn value(&self) -> &[u8] {
        self.view.value(self.item)
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        self.view.key(self.item)
    }

    /// Client flags.
    pub fn flags(&self) -> u32 {
        self.view.meta(self.item).flags
    }

    /// CAS token (`gets`).
    pub fn cas(&self) -> u64 {
        self.view.meta(self.item).cas
    }

    /// Absolute expiry in Unix seconds (0: never).
    pub fn expiry(&self) -> u32 {
        self.view.meta(self.item).expiry
    }

    /// The item's meta state (`Z`, `X`); a plain read changes nothing, so `won` is false.
    pub fn lease(&self) -> Lease {
        Lease::of_bits(self.view.meta(self.item).lease)
    }
}

impl<'h, A: Arena> std::fmt::Debug for Guard<'h, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("item", &self.item).finish()
    }
}

impl<A: Arena> Handle<A> {
    fn check_key(&self, key: &[u8]) -> Result<(), StoreError> {
        let max = self.map.key_max();
        if key.is_empty() || key.len() > max {
            return Err(StoreError::KeyLength {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }

    /// Whether `item` is visible now (not expired, not flushed).
    #[inline]
    pub(crate) fn visible(&self, item: u64, now: u32) -> bool {
        self.visible_when(item, || now)
    }

    /// As [`visible`](Self::visible), reading the clock only if the answer depends on it (an
    /// item with an expiry, or a delayed `flush_all` pending): most reads need no clock.
    #[inline]
    pub(crate) fn visible_when(&self, item: u64, now: impl Fn() -> u32) -> bool {
        let m = self.map.view().meta(item);
        if m.expiry != 0 && m.expiry <= now() {
            return false;
        }
        let d = self.map.desc();
        let oldest_cas = d.oldest_cas.word.load(Ordering::Acquire);
        if oldest_cas != 0 && m.cas < oldest_cas {
            return false;
        }
        let oldest = d.oldest_live.word.load(Ordering::Acquire);
        oldest == 0 || u64::from(m.time) > oldest || oldest > u64::from(now())
    }

    /// `get`/`gets`: the visible item of `key`, read in place through a guard.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Result<Option<Guard<'_, A>>, StoreError> {
        self.check_key(key)?;
        let h = item::hash(key);
        let pin = self.pin();
        let view = self.map.view();
        let probe = Probe {
            order: item::item_order(h),
            key,
        };
        let at = list::lookup(&view, self.head_for_read(h), &probe);
        if at == 0 || !self.visible_when(at, || self.map.now()) {
            return Ok(None);
        }
        Ok(Some(Guard {
            _pin: pin,
            view,
            item: at,
        }))
    }

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
    pub(crate) fn cas_after(&self, explicit: Option<u64>, floor: u64) -> u64 {
        if let Some(token) = explicit {
            return token;
        }
        let d = self.map.desc();
        let mut token = self.cas_next.get();
        if token == self.cas_end.get()
            || token <= floor
            || token < d.oldest_cas.word.load(Ordering::Acquire)
        {
            token = d.cas.word.fetch_add(BATCH_CAS, Ordering::Relaxed) + 1;
            self.cas_end.set(token + BATCH_CAS);
        }
        self.cas_next.set(token + 1);
        token
    }

    /// A token above every token handed out so far (for `flush_all`).
    fn cas_barrier(&self) -> u64 {
        self.map.desc().cas.word.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Allocates and writes a new item (`lease`: its meta state bits, see `item`).
    pub(crate) fn new_item(
        &self,
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
        &self,
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
        let max = self.map.value_max();
        if vlen > max {
            return Err(StoreError::TooLarge { len: vlen, max });
        }
        let at = self.allocate(SIZE_HEADER + key.len() + vlen)?;
        let meta = Meta {
            order,
            cas,
            expiry,
            time: self.map.now(),
            flags,
            lease,
        };
        self.map.view().write_item(at, &meta, key, value, vlen);
        self.log(crate::recover::ITEM, at);
        self.allocated();
        Ok(at)
    }

    /// The write loop: search, let `decide` choose from the visible item, make it so by one CAS;
    /// on a lost race, free what `decide` made and search again.
    pub(crate) fn update(
        &self,
        key: &[u8],
        decide: impl FnMut(Option<u64>) -> Result<Step, StoreError>,
    ) -> Result<Outcome, StoreError> {
        self.check_key(key)?;
        self.update_hashed(key, item::hash(key), decide)
    }

    /// [`update`](Self::update) with the key checked and hashed (`h = item::hash(key)`) by
    /// the caller, so that `decide` can make its item without hashing the key again.
    fn update_hashed(
        &self,
        key: &[u8],
        h: u64,
        mut decide: impl FnMut(Option<u64>) -> Result<Step, StoreError>,
    ) -> Result<Outcome, StoreError> {
        let _pin = self.pin();
        let view = self.map.view();
        let probe = Probe {
            order: item::item_order(h),
            key,
        };
        let head = self.head_for_write(h)?;
        let nodes = self.nodes();
        let mut retire = |n| self.retire(n);
        loop {
            let pos = list::find(&nodes, head, &probe, &mut retire);
            let visible =
                (pos.found && self.visible_when(pos.curr, || self.map.now())).then_some(pos.curr);
            match decide(visible)? {
                Step::Keep(outcome) => return Ok(outcome),
                Step::Put(new, outcome) => {
                    let done = if pos.found {
                        list::try_replace(&view, &pos, new)
                    } else {
                        list::try_insert(&view, &pos, new)
                    };
                    if !done {
                        self.lost.set(self.lost.get() + 1);
                        self.free_unpublished(new);
                        continue;
                    }
                    self.log(0, 0); // published: recovery must not look at it again
                    let size = view.item_size(new) as i64;
                    if pos.found {
                        // One update for the replace: +1 − 1 items, new − old bytes.
                        self.account(0, size - view.item_size(pos.curr) as i64);
                        list::unlink(&nodes, head, &pos, &probe, &mut retire);
                    } else {
                        self.account(1, size);
                    }
                    self.link_owed();
                    return Ok(outcome);
                }
                Step::Remove(outcome) => {
                    if !list::try_delete(&view, &pos) {
                        self.lost.set(self.lost.get() + 1);
                        continue;
                    }
                    self.account(-1, -(view.item_size(pos.curr) as i64));
                    list::unlink(&nodes, head, &pos, &probe, &mut retire);
                    return Ok(outcome);
                }
            }
        }
    }

    /// `set`/`add`/`replace`/`append`/`prepend`/`cas`, with memcached's `exptime`.
    pub fn store(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<Outcome, StoreError> {
        self.store_with(mode, key, value, flags, exptime, StoreExtra::default())
            .map(|(outcome, _)| outcome)
    }

    /// As [`store`](Self::store), with the meta protocol's extras (`ms C I E`), also
    /// returning the CAS token of the item it linked (0 when it stored nothing). Every
    /// condition is decided inside the write loop on the item the CAS replaces, so no write
    /// can slip between the comparison and the store.
    pub fn store_with(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        extra: StoreExtra,
    ) -> Result<(Outcome, u64), StoreError> {
        let view = self.map.view();
        let written = std::cell::Cell::new(0);
        if matches!(mode, Mode::Set | Mode::Add | Mode::Replace | Mode::Cas(_)) {
            self.prefetch_spare(SIZE_HEADER + key.len() + value.len());
        }
        self.check_key(key)?;
        let h = item::hash(key);
        let order = item::item_order(h);
        let outcome = self.update_hashed(key, h, |current| {
            // `exptime` 0 (never) needs no clock.
            let expiry = match exptime {
                0 => 0,
                e => expiry_of(e, self.map.now()),
            };
            let floor = current.map_or(0, |cur| view.cas(cur));
            let put = |parts: &[&[u8]], flags, expiry, lease| -> Result<Step, StoreError> {
                let cas = self.cas_after(extra.cas, floor);
                let new = self.new_item_ordered(order, key, parts, flags, expiry, cas, lease)?;
                written.set(cas);
                Ok(Step::Put(new, Outcome::Stored))
            };
            let Some(cur) = current else {
                return match mode {
                    Mode::Set | Mode::Add => put(&[value], flags, expiry, 0),
                    Mode::Cas(_) => Ok(Step::Keep(Outcome::NotFound)),
                    Mode::Replace | Mode::Append | Mode::Prepend => {
                        Ok(Step::Keep(Outcome::NotStored))
                    }
                };
            };
            if let Mode::Set | Mode::Replace = mode {
                // The common write reads no more of the item it replaces than its token.
                return put(&[value], flags, expiry, 0);
            }
            let m = view.meta(cur);
            match mode {
                Mode::Set | Mode::Replace => put(&[value], flags, expiry, 0),
                Mode::Add => Ok(Step::Keep(Outcome::NotStored)),
                // memcached checks an append's token only when it is not 0.
                Mode::Append | Mode::Prepend
                    if extra.compare.is_some_and(|c| c != 0 && c != m.cas) =>
                {
                    Ok(Step::Keep(Outcome::Exists))
                }
                Mode::Append => put(&[view.value(cur), value], m.flags, m.expiry, 0),
                Mode::Prepend => put(&[value, view.value(cur)], m.flags, m.expiry, 0),
                // A zero token matches nothing (memcached's `CAS_NONE`).
                Mode::Cas(token) if token != 0 && token == m.cas => put(&[value], flags, expiry, 0),
                // `ms I` with an older token: store, but stale, keeping the item's TTL and a
                // sent token (memcached's `CAS_STALE`).
                Mode::Cas(token) if extra.invalidate && token != 0 && token < m.cas => {
                    let lease = item::LEASE_STALE | (m.lease & item::LEASE_TOKEN_SENT);
                    put(&[value], flags, m.expiry, lease)
                }
                Mode::Cas(_) => Ok(Step::Keep(Outcome::Exists)),
            }
        })?;
        let cas = if outcome == Outcome::Stored {
            written.get()
        } else {
            0
        };
        Ok((outcome, cas))
    }

    /// `set key flags exptime`.
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<(), StoreError> {
        self.store(Mode::Set, key, value, flags, exptime).map(drop)
    }

    /// `delete key`: `Deleted` or `NotFound`.
    pub fn delete(&self, key: &[u8]) -> Result<Outcome, StoreError> {
        self.update(key, |current| {
            Ok(match current {
                Some(_) => Step::Remove(Outcome::Deleted),
                None => Step::Keep(Outcome::NotFound),
            })
        })
    }

    /// `incr key delta`: the new value, `None` if absent.
    pub fn incr(&self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError> {
        self.counter(key, delta, false)
    }

    /// `decr key delta`: the new value (stops at 0), `None` if absent.
    pub fn decr(&self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError> {
        self.counter(key, delta, true)
    }

    fn counter(&self, key: &[u8], delta: u64, decrement: bool) -> Result<Option<u64>, StoreError> {
        let count = Count {
            decrement,
            delta,
            ..Default::default()
        };
        Ok(match self.meta_counter(key, count)? {
            Counted::Value { value, .. } => Some(value),
            _ => None,
        })
    }

    /// `touch key exptime`: `Touched` or `NotFound`.
    pub fn touch(&self, key: &[u8], exptime: i64) -> Result<Outcome, StoreError> {
        self.touch_item(key, exptime).map(|(outcome, _)| outcome)
    }

    /// Touch, returning the new item too (the caller is pinned if it will read it).
    fn touch_item(&self, key: &[u8], exptime: i64) -> Result<(Outcome, u64), StoreError> {
        let view = self.map.view();
        let mut made = 0;
        let outcome = self.update(key, |current| {
            let Some(cur) = current else {
                return Ok(Step::Keep(Outcome::NotFound));
            };
            let m = view.meta(cur);
            let expiry = expiry_of(exptime, self.map.now());
            made = self.new_item(key, &[view.value(cur)], m.flags, expiry, m.cas, m.lease)?;
            Ok(Step::Put(made, Outcome::Touched))
        })?;
        Ok((outcome, made))
    }

    /// `gat`/`gats`: touch and return the touched item (memcached returns it even when the
    /// new expiry has already passed).
    pub fn gat(&self, key: &[u8], exptime: i64) -> Result<Option<Guard<'_, A>>, StoreError> {
        let pin = self.pin();
        match self.touch_item(key, exptime)? {
            (Outcome::Touched, item) => Ok(Some(Guard {
                _pin: pin,
                view: self.map.view(),
                item,
            })),
            _ => Ok(None),
        }
    }

    /// `flush_all [delay]`: every item stored before now (or before `delay` seconds from now,
    /// memcached's rules for `exptime`) becomes invisible then; the crawler reclaims them.
    pub fn flush_all(&self, delay: i64) {
        let d = self.map.desc();
        let now = self.map.now();
        let new_oldest = if delay > 0 {
            expiry_of(delay, now)
        } else {
            now
        };
        let oldest_live = u64::from(new_oldest).saturating_sub(1);
        if oldest_live <= u64::from(now) {
            d.oldest_cas
                .word
                .store(self.cas_barrier(), Ordering::Release);
        }
        d.oldest_live
            .word
            .store(oldest_live.max(1), Ordering::Release);
    }
}
