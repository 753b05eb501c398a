//! memcached 1.6 semantics over the index: every command is one pass of the write loop
//! (`writer::Parts::update`), whose `decide` closure sees the key's current *visible* item and
//! returns one `Step`. The request and reply types are in `command`; `Handle`'s methods of
//! the same names call these.
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
//! - a new item that cannot be made (no memory, or over the size limit): a `set` removes the
//!   old item, so no stale value outlives the failed write (`ms` does so whatever its mode,
//!   in `meta`); an `append`/`prepend` whose data fits but whose joined value does not
//!   answers `NotStored`. Other commands leave the old item as it was.

use crate::arena::Arena;
use crate::buckets::Table;
use crate::command::{Lease, Step};
use crate::index;
use crate::item::{self, View, SIZE_HEADER};
use crate::reclaim::Pin;
use crate::writer::Parts;
use crate::StoreError;

pub use crate::command::{
    expiry_of, parse_counter, ttl_of, Mode, Outcome, StoreExtra, SECONDS_RELATIVE_MAX,
};
pub use crate::writer::BATCH_CAS;

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

/// `get`/`gets`: the visible item of `key`, read in place through a guard.
#[inline]
pub(crate) fn get<'h, A: Arena>(
    p: Parts<'h, A>,
    key: &[u8],
) -> Result<Option<Guard<'h, A>>, StoreError> {
    let shared = p.shared();
    shared.check_key(key)?;
    let h = item::hash(key);
    let pin = p.pin();
    let view = p.slot().view();
    let table = Table { reclaim: p.reclaim };
    let (_, word) = index::read(&table, h, shared.buckets_log2_cached(), || {
        shared.buckets_log2()
    });
    let at = index::find(&table, word, index::tag(h), |entry| {
        let at = view.fresh_candidate(word, entry);
        view.fresh_value(at);
        item::compare_keys(view.key(at), key) == std::cmp::Ordering::Equal
    });
    if at == 0 || !shared.visible_when(at, || shared.now()) {
        return Ok(None);
    }
    Ok(Some(Guard {
        _pin: pin,
        view,
        item: at,
    }))
}

/// `set`/`add`/`replace`/`append`/`prepend`/`cas` with the meta protocol's extras (`ms C I
/// E`), returning the CAS token of the item it linked (0 when it stored nothing). Every
/// condition is decided inside the write loop on the item the CAS replaces, so no write
/// can slip between the comparison and the store.
///
/// Two of memcached's rules for a new item that cannot be made: a `set` removes the old
/// item (so no stale value survives the failed write), and an `append`/`prepend` whose data
/// fits but whose joined value is over the limit answers `NotStored` (memcached allocates
/// the joined item only after the data arrived, and reports that failure so).
#[inline]
pub(crate) fn store_with<A: Arena>(
    p: Parts<'_, A>,
    mode: Mode,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exptime: i64,
    extra: StoreExtra,
) -> Result<(Outcome, u64), StoreError> {
    let shared = p.shared();
    let view = shared.view();
    let written = std::cell::Cell::new(0);
    if matches!(mode, Mode::Set | Mode::Add | Mode::Replace | Mode::Cas(_)) {
        p.reclaim
            .prefetch_spare(SIZE_HEADER + key.len() + value.len());
    }
    shared.check_key(key)?;
    let h = item::hash(key);
    let order = item::item_order(h);
    let updated = p.update_hashed(key, h, |current| {
        // `exptime` 0 (never) needs no clock.
        let expiry = match exptime {
            0 => 0,
            e => expiry_of(e, shared.now()),
        };
        let floor = current.map_or(0, |cur| view.cas(cur));
        let put = |parts: &[&[u8]], flags, expiry, lease| -> Result<Step, StoreError> {
            let cas = p.cas_after(extra.cas, floor);
            let new = p.new_item_ordered(order, key, parts, flags, expiry, cas, lease)?;
            written.set(cas);
            Ok(Step::Put(new, Outcome::Stored))
        };
        let Some(cur) = current else {
            return match mode {
                Mode::Set | Mode::Add => put(&[value], flags, expiry, 0),
                Mode::Cas(_) => Ok(Step::Keep(Outcome::NotFound)),
                Mode::Replace | Mode::Append | Mode::Prepend => Ok(Step::Keep(Outcome::NotStored)),
            };
        };
        if let Mode::Set | Mode::Replace = mode {
            // The common write reads no more of the item it replaces than its token.
            return put(&[value], flags, expiry, 0);
        }
        let m = view.meta(cur);
        view.fresh_value(cur);
        match mode {
            Mode::Set | Mode::Replace => put(&[value], flags, expiry, 0),
            Mode::Add => Ok(Step::Keep(Outcome::NotStored)),
            // memcached checks an append's token only when it is not 0.
            Mode::Append | Mode::Prepend if extra.compare.is_some_and(|c| c != 0 && c != m.cas) => {
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
    });
    let outcome = match updated {
        Ok(outcome) => outcome,
        Err(error) => return unmade(p, mode, key, value.len(), error),
    };
    let cas = if outcome == Outcome::Stored {
        written.get()
    } else {
        0
    };
    Ok((outcome, cas))
}

/// A store whose new item could not be made, by memcached's rules (see [`store_with`]).
#[cold]
fn unmade<A: Arena>(
    p: Parts<'_, A>,
    mode: Mode,
    key: &[u8],
    data: usize,
    error: StoreError,
) -> Result<(Outcome, u64), StoreError> {
    match (mode, error) {
        (Mode::Append | Mode::Prepend, StoreError::TooLarge { .. })
            if data <= p.shared().value_max() =>
        {
            Ok((Outcome::NotStored, 0))
        }
        (mode, error) => {
            if mode.removes_old_when_unmade(false) {
                // The removal's own failure changes nothing the caller can act on.
                let _ = delete(p, key);
            }
            Err(error)
        }
    }
}

/// `delete key`: `Deleted` or `NotFound`.
pub(crate) fn delete<A: Arena>(p: Parts<'_, A>, key: &[u8]) -> Result<Outcome, StoreError> {
    p.update(key, |current| {
        Ok(match current {
            Some(_) => Step::Remove(Outcome::Deleted),
            None => Step::Keep(Outcome::NotFound),
        })
    })
}

/// Touch, returning the new item too (the caller is pinned if it will read it).
pub(crate) fn touch_item<A: Arena>(
    p: Parts<'_, A>,
    key: &[u8],
    exptime: i64,
) -> Result<(Outcome, u64), StoreError> {
    let shared = p.shared();
    let view = shared.view();
    let mut made = 0;
    let outcome = p.update(key, |current| {
        let Some(cur) = current else {
            return Ok(Step::Keep(Outcome::NotFound));
        };
        let m = view.meta(cur);
        view.fresh_value(cur);
        let expiry = expiry_of(exptime, shared.now());
        made = p.new_item(key, &[view.value(cur)], m.flags, expiry, m.cas, m.lease)?;
        Ok(Step::Put(made, Outcome::Touched))
    })?;
    Ok((outcome, made))
}

/// `gat`/`gats`: touch and return the touched item (memcached returns it even when the
/// new expiry has already passed).
pub(crate) fn gat<'h, A: Arena>(
    p: Parts<'h, A>,
    key: &[u8],
    exptime: i64,
) -> Result<Option<Guard<'h, A>>, StoreError> {
    let pin = p.pin();
    match touch_item(p, key, exptime)? {
        (Outcome::Touched, item) => Ok(Some(Guard {
            _pin: pin,
            view: p.shared().view(),
            item,
        })),
        _ => Ok(None),
    }
}

/// `flush_all [delay]`: every item stored before now (or before `delay` seconds from now,
/// memcached's rules for `exptime`) becomes invisible then; the crawler reclaims them.
pub(crate) fn flush_all<A: Arena>(p: Parts<'_, A>, delay: i64) {
    let shared = p.shared();
    let d = shared.hw();
    let now = shared.now();
    let new_oldest = if delay > 0 {
        expiry_of(delay, now)
    } else {
        now
    };
    let oldest_live = u64::from(new_oldest).saturating_sub(1);
    let thread = &p.slot().thread;
    if oldest_live <= u64::from(now) {
        let barrier = p.writer.cas_barrier(p.slot());
        podkv_hw::cas_site!("store.flush.oldest_cas.store");
        shared.store_word(thread, &d.flush.oldest_cas, barrier);
    }
    podkv_hw::cas_site!("store.flush.oldest_live.store");
    shared.store_word(thread, &d.flush.oldest_live, oldest_live.max(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Eviction, Store, StoreConfig};

    /// Values over this are refused with `TooLarge`.
    const VALUE_MAX: usize = 64;

    fn store(capacity: Option<u64>) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            heap: podkv_alloc::Config {
                small_bytes: 1 << 20,
                large_bytes: 4 << 20,
                slots: 4,
                huge_bytes: 0,
                ..podkv_alloc::Config::default()
            },
            value_max: VALUE_MAX,
            capacity,
            eviction: Eviction::Off,
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path().join("heap"), config).unwrap();
        (dir, store)
    }

    fn value_of(h: &crate::StoreHandle, key: &[u8]) -> Option<Vec<u8>> {
        h.get(key).unwrap().map(|g| g.value().to_vec())
    }

    #[test]
    fn a_set_that_cannot_make_its_item_removes_the_old_one() {
        let (_d, store) = store(None);
        let h = store.handle().unwrap();
        let big = [b'x'; VALUE_MAX + 1];
        for mode in [Mode::Replace, Mode::Append, Mode::Cas(0)] {
            h.set(b"k", b"old", 0, 0).unwrap();
            let mode = match mode {
                Mode::Cas(_) => Mode::Cas(h.get(b"k").unwrap().unwrap().cas()),
                mode => mode,
            };
            let refused = h.store(mode, b"k", &big, 0, 0);
            assert!(
                matches!(refused, Err(StoreError::TooLarge { .. })),
                "{mode:?}"
            );
            assert_eq!(value_of(&h, b"k").as_deref(), Some(&b"old"[..]), "{mode:?}");
        }
        let refused = h.store(Mode::Set, b"k", &big, 0, 0);
        assert!(matches!(refused, Err(StoreError::TooLarge { .. })));
        assert_eq!(
            value_of(&h, b"k"),
            None,
            "a failed set leaves no stale value"
        );
    }

    #[test]
    fn a_set_out_of_memory_removes_the_old_one() {
        let (_d, store) = store(Some(256 << 10));
        let h = store.handle().unwrap();
        h.set(b"k", b"old", 0, 0).unwrap();
        let mut at = 0u32;
        let full = loop {
            match h.set(format!("f{at}").as_bytes(), &[1u8; VALUE_MAX], 0, 0) {
                Ok(()) => at += 1,
                Err(error) => break error,
            }
            assert!(at < 100_000, "capacity never reached");
        };
        assert!(matches!(full, StoreError::OutOfMemory), "{full}");
        let refused = h.store(Mode::Replace, b"k", &[2u8; VALUE_MAX], 0, 0);
        assert!(matches!(refused, Err(StoreError::OutOfMemory)));
        assert_eq!(
            value_of(&h, b"k").as_deref(),
            Some(&b"old"[..]),
            "replace keeps it"
        );
        let refused = h.store(Mode::Set, b"k", &[2u8; VALUE_MAX], 0, 0);
        assert!(matches!(refused, Err(StoreError::OutOfMemory)));
        assert_eq!(
            value_of(&h, b"k"),
            None,
            "a failed set leaves no stale value"
        );
    }

    #[test]
    fn an_append_past_the_limit_is_not_stored() {
        let (_d, store) = store(None);
        let h = store.handle().unwrap();
        let half = [b'a'; VALUE_MAX / 2 + 1];
        h.set(b"k", &half, 0, 0).unwrap();
        for mode in [Mode::Append, Mode::Prepend] {
            assert_eq!(
                h.store(mode, b"k", &half, 0, 0).unwrap(),
                Outcome::NotStored
            );
            assert_eq!(value_of(&h, b"k").as_deref(), Some(&half[..]), "{mode:?}");
        }
        // Data that is itself over the limit is refused as such.
        let big = [b'x'; VALUE_MAX + 1];
        let refused = h.store(Mode::Append, b"k", &big, 0, 0);
        assert!(matches!(refused, Err(StoreError::TooLarge { .. })));
        // Within the limit, the joined value is stored.
        assert_eq!(
            h.store(Mode::Append, b"k", b"b", 0, 0).unwrap(),
            Outcome::Stored
        );
    }

    #[test]
    fn a_meta_set_that_cannot_make_its_item_removes_the_old_one() {
        let (_d, store) = store(None);
        let h = store.handle().unwrap();
        let big = [b'x'; VALUE_MAX + 1];
        let extra = StoreExtra::default();
        for mode in [Mode::Set, Mode::Replace, Mode::Cas(0), Mode::Prepend] {
            h.set(b"k", b"old", 0, 0).unwrap();
            let mode = match mode {
                Mode::Cas(_) => Mode::Cas(h.get(b"k").unwrap().unwrap().cas()),
                mode => mode,
            };
            let refused = h.meta_set(mode, b"k", &big, 0, 0, extra);
            assert!(
                matches!(refused, Err(StoreError::TooLarge { .. })),
                "{mode:?}"
            );
            assert_eq!(value_of(&h, b"k"), None, "{mode:?}: no stale value");
        }
        // An append whose joined value is too large stores nothing and removes nothing.
        let half = [b'a'; VALUE_MAX / 2 + 1];
        h.set(b"k", &half, 0, 0).unwrap();
        let outcome = h.meta_set(Mode::Append, b"k", &half, 0, 0, extra).unwrap();
        assert_eq!(outcome, (Outcome::NotStored, 0));
        assert_eq!(value_of(&h, b"k").as_deref(), Some(&half[..]));
    }
}
