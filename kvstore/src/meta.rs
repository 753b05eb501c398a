//! memcached 1.6's meta commands over the write loop: `mg` with recache tokens, `ms` with its
//! extras, `md` with invalidation and a compared CAS, `ma` with its options — each one pass
//! of `writer::Parts::update`, so every condition is decided on the very item the CAS
//! replaces.
//! Their options and results are in `command`; `Handle::meta_*` call these.
//!
//! # Meta state (`item` `lease` byte)
//! memcached keeps two bits per item: `ITEM_TOKEN_SENT` (a client was told `W`: it won the
//! right to recache) and `ITEM_STALE` (`md I` / `ms I`). Its rules, from `proto_text.c`:
//! - `mg`: a reader sees `Z` if the token was sent, `X` if stale; it wins (`W`, and the token
//!   is now sent) if the token was not sent and either `R<ttl>` finds the remaining TTL below
//!   `ttl` or the item is stale; `N<ttl>` on a miss creates an empty item whose creator wins.
//! - `md I`: the item stays, stale, with the token released, a new CAS and (`T`) a new TTL.
//! - `ms I` with an older CAS: the value is stored stale, keeping TTL and a sent token.
//!
//! Here those bits are header fields like the rest: a change is a new item replacing the old
//! by one link CAS, so of two clients racing to win a token exactly one replace succeeds (the
//! other decides again on the new item and sees `Z`), and a token won on an item that a
//! touch is copying cannot get lost. A read that changes nothing — every plain `get`, every
//! `mg` without `T`/`N`/`R` of an item that is not stale — stays a read: no shared write.
//!
//! # Token order
//! memcached applies `mg`'s `T`, `N`, `R` and prints `t` in the order the client wrote them
//! (`mg k T10 R20` compares the new TTL; `mg k t T30` prints the old one); [`Read`] carries
//! that order.

use crate::arena::Arena;
use crate::command::{expiry_of, parse_counter, Outcome, Step};
use crate::item::{LEASE_STALE, LEASE_TOKEN_SENT};
use crate::memcached::{self, Guard, Mode, StoreExtra};
use crate::writer::Parts;
use crate::StoreError;

pub use crate::command::{Count, Counted, Delete, Lease, Rank, Read};

/// What `mg` found: the item (read in place) and its meta state.
#[derive(Debug)]
pub struct MetaRead<'h, A: Arena> {
    /// The item after the read's changes.
    pub guard: Guard<'h, A>,
    /// `W Z X`.
    pub lease: Lease,
    /// The absolute expiry `t` prints (0: never), as of `t`'s place among the flags.
    pub shown_expiry: u32,
}

/// `mg`: a plain read when nothing in it can change the item (no `T`, `N`, `R`, and the
/// item not stale with its token out), else one update that may touch, create, or win the
/// token, deciding `W` by the replace CAS. When that update finds no room for the copy it
/// needs, the answer is the plain read's. `None`: a miss.
#[inline]
pub(crate) fn get<'h, A: Arena>(
    p: Parts<'h, A>,
    key: &[u8],
    read: Read,
) -> Result<Option<MetaRead<'h, A>>, StoreError> {
    let changes = read.touch.is_some() || read.recache.is_some() || read.vivify.is_some();
    if !changes {
        if let Some(found) = peek(p, key)? {
            return Ok(Some(found));
        }
    }
    match change(p, key, read) {
        // No room for the copy a win or touch needs (even after eviction).
        Err(error) if !matches!(error, StoreError::KeyLength { .. }) => peek(p, key),
        result => result,
    }
}

/// The item as a plain read sees it, when that read would not win the token (a stale item
/// whose token is not out must go through [`change`]); `None` also for a miss.
#[inline]
fn peek<'h, A: Arena>(p: Parts<'h, A>, key: &[u8]) -> Result<Option<MetaRead<'h, A>>, StoreError> {
    let Some(guard) = memcached::get(p, key)? else {
        return Ok(None);
    };
    let lease = guard.lease();
    if lease.read_would_win() {
        return Ok(None);
    }
    let shown_expiry = guard.expiry();
    Ok(Some(MetaRead {
        guard,
        lease,
        shown_expiry,
    }))
}

/// `mg`'s update: touch, create or win the token in one pass of the write loop.
fn change<'h, A: Arena>(
    p: Parts<'h, A>,
    key: &[u8],
    read: Read,
) -> Result<Option<MetaRead<'h, A>>, StoreError> {
    let pin = p.pin();
    let view = p.shared().view();
    let mut found = None;
    p.update(key, |current| {
        let now = p.shared().now();
        let Some(cur) = current else {
            found = None;
            let Some((exptime, rank)) = read.vivify else {
                return Ok(Step::Keep(Outcome::NotFound));
            };
            // The new item's expiry starts at 0; `N` and `T` set it in flag order.
            let steps = timeline(&[
                Some((rank, expiry_of(exptime, now))),
                touch_at(read.touch, now),
            ]);
            let final_expiry = last(&steps, 0);
            let made = p.new_item(
                key,
                &[],
                0,
                final_expiry,
                p.cas_after(read.cas, 0),
                LEASE_TOKEN_SENT,
            )?;
            let lease = Lease {
                won: true,
                created: true,
                ..Lease::default()
            };
            found = Some((made, lease, shown(&steps, 0, read.ttl_rank)));
            return Ok(Step::Put(made, Outcome::Stored));
        };
        let m = view.meta(cur);
        view.fresh_value(cur);
        let before = Lease::of_bits(m.lease);
        let touched = touch_at(read.touch, now);
        let steps = timeline(&[touched]);
        let final_expiry = last(&steps, m.expiry);
        // `R` compares the TTL as it stands at `R`'s place among the flags.
        let recache_wins = read.recache.is_some_and(|(r, rank)| {
            let expiry = shown(&steps, m.expiry, rank);
            expiry != 0 && expiry < expiry_of(r, now)
        });
        let lease = Lease {
            won: !before.token_sent && (recache_wins || before.stale),
            ..before
        };
        let shown_expiry = shown(&steps, m.expiry, read.ttl_rank);
        if !lease.won && touched.is_none() {
            found = Some((cur, lease, shown_expiry));
            return Ok(Step::Keep(Outcome::Stored));
        }
        let bits = m.lease | if lease.won { LEASE_TOKEN_SENT } else { 0 };
        let made = p.new_item(key, &[view.value(cur)], m.flags, final_expiry, m.cas, bits)?;
        found = Some((made, lease, shown_expiry));
        Ok(Step::Put(made, Outcome::Touched))
    })?;
    Ok(found.map(|(item, lease, shown_expiry)| MetaRead {
        guard: Guard {
            _pin: pin,
            view,
            item,
        },
        lease,
        shown_expiry,
    }))
}

/// `ms`: a store in `mode` with the meta extras, as `memcached::store_with`, returning the
/// outcome and the linked item's CAS token. When the new item cannot be made, the old one is
/// removed whatever the mode (memcached's `ms` unlinks it after any failed allocation, so no
/// stale value survives); a `set` has removed it already.
#[inline]
pub(crate) fn set<A: Arena>(
    p: Parts<'_, A>,
    mode: Mode,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exptime: i64,
    extra: StoreExtra,
) -> Result<(Outcome, u64), StoreError> {
    let stored = memcached::store_with(p, mode, key, value, flags, exptime, extra);
    if let Err(error) = &stored {
        // `store_with` has removed it already where a classic command would.
        let removed = mode.removes_old_when_unmade(false);
        let refused_key = matches!(error, StoreError::KeyLength { .. });
        if mode.removes_old_when_unmade(true) && !removed && !refused_key {
            // The removal's own failure changes nothing the caller can act on.
            let _ = memcached::delete(p, key);
        }
    }
    stored
}

/// `md`: `Deleted` (removed, or marked stale with `I`), `NotFound`, or `Exists` when `C`
/// does not match — compared inside the write loop.
pub(crate) fn delete<A: Arena>(
    p: Parts<'_, A>,
    key: &[u8],
    delete: Delete,
) -> Result<Outcome, StoreError> {
    let view = p.shared().view();
    p.update(key, |current| {
        let Some(cur) = current else {
            return Ok(Step::Keep(Outcome::NotFound));
        };
        let m = view.meta(cur);
        view.fresh_value(cur);
        if delete.compare.is_some_and(|c| c != m.cas) {
            return Ok(Step::Keep(Outcome::Exists));
        }
        let Some(touch) = delete.invalidate else {
            return Ok(Step::Remove(Outcome::Deleted));
        };
        // Stale, the token released so the next reader wins, a new CAS, maybe a new TTL.
        let expiry = touch.map_or(m.expiry, |t| expiry_of(t, p.shared().now()));
        let bits = (m.lease | LEASE_STALE) & !LEASE_TOKEN_SENT;
        let cas = p.cas_after(delete.cas, m.cas);
        let made = p.new_item(key, &[view.value(cur)], m.flags, expiry, cas, bits)?;
        Ok(Step::Put(made, Outcome::Deleted))
    })
}

/// `ma` (and `incr`/`decr`): the value must be a decimal `u64` (`NonNumeric` otherwise);
/// a shorter result is padded with spaces to the old length and keeps the meta state (as
/// memcached's in-place update), a longer one is a new item with the state clear.
pub(crate) fn counter<A: Arena>(
    p: Parts<'_, A>,
    key: &[u8],
    count: Count,
) -> Result<Counted, StoreError> {
    let view = p.shared().view();
    let mut result = Counted::NotFound;
    p.update(key, |current| {
        let now = p.shared().now();
        let touched = touch_at(count.touch, now);
        let Some(cur) = current else {
            let Some((exptime, rank)) = count.vivify else {
                result = Counted::NotFound;
                return Ok(Step::Keep(Outcome::NotFound));
            };
            // As `mg`: the new item's expiry starts at 0, `N` and `T` set it in order.
            let steps = timeline(&[Some((rank, expiry_of(exptime, now))), touched]);
            let expiry = last(&steps, 0);
            let cas = p.cas_after(count.cas, 0);
            let text = count.initial.to_string();
            let made = p.new_item(key, &[text.as_bytes()], 0, expiry, cas, 0)?;
            result = Counted::Value {
                value: count.initial,
                cas,
                expiry,
                shown_expiry: shown(&steps, 0, count.ttl_rank),
                created: true,
            };
            return Ok(Step::Put(made, Outcome::Stored));
        };
        let m = view.meta(cur);
        view.fresh_value(cur);
        if count.compare.is_some_and(|c| c != 0 && c != m.cas) {
            result = Counted::Exists;
            return Ok(Step::Keep(Outcome::Exists));
        }
        let old = view.value(cur);
        let number = parse_counter(old).ok_or(StoreError::NonNumeric)?;
        let value = if count.decrement {
            number.saturating_sub(count.delta)
        } else {
            number.wrapping_add(count.delta)
        };
        let mut text = value.to_string().into_bytes();
        if text.len() < old.len() {
            text.resize(old.len(), b' ');
        }
        let bits = if text.len() == old.len() { m.lease } else { 0 };
        let steps = timeline(&[touched]);
        let expiry = last(&steps, m.expiry);
        let cas = p.cas_after(count.cas, m.cas);
        let made = p.new_item(key, &[&text], m.flags, expiry, cas, bits)?;
        result = Counted::Value {
            value,
            cas,
            expiry,
            shown_expiry: shown(&steps, m.expiry, count.ttl_rank),
            created: false,
        };
        Ok(Step::Put(made, Outcome::Stored))
    })?;
    Ok(result)
}

/// `T`'s effect on the expiry: (its rank, the new absolute expiry).
fn touch_at(touch: Option<(i64, Rank)>, now: u32) -> Option<(Rank, u32)> {
    touch.map(|(t, rank)| (rank, expiry_of(t, now)))
}

/// The expiry changes in flag order.
fn timeline(changes: &[Option<(Rank, u32)>]) -> Vec<(Rank, u32)> {
    let mut steps: Vec<(Rank, u32)> = changes.iter().flatten().copied().collect();
    steps.sort_unstable_by_key(|s| s.0);
    steps
}

/// The expiry after every change, else `initial`: what the item keeps.
fn last(steps: &[(Rank, u32)], initial: u32) -> u32 {
    steps.last().map_or(initial, |s| s.1)
}

/// The expiry as it stands at `rank` among the flags: the last change before it, else
/// `initial` (at [`Rank::NONE`]: the final expiry).
fn shown(steps: &[(Rank, u32)], initial: u32, rank: Rank) -> u32 {
    steps
        .iter()
        .take_while(|s| s.0 < rank)
        .last()
        .map_or(initial, |s| s.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_follows_flag_order() {
        let steps = timeline(&[Some((Rank(3), 30)), Some((Rank(1), 60))]);
        assert_eq!(steps, vec![(Rank(1), 60), (Rank(3), 30)]);
        assert_eq!(shown(&steps, 0, Rank(0)), 0, "t before both");
        assert_eq!(shown(&steps, 0, Rank(2)), 60, "t between");
        assert_eq!(shown(&steps, 0, Rank::NONE), 30, "no t: the final expiry");
        assert_eq!(steps.last().map(|s| s.1), Some(30));
    }

    #[test]
    fn lease_bits() {
        let stale = Lease::of_bits(LEASE_STALE);
        assert!(stale.stale && !stale.token_sent && stale.read_would_win());
        let both = Lease::of_bits(LEASE_STALE | LEASE_TOKEN_SENT);
        assert!(both.token_sent && !both.read_would_win());
        assert_eq!(Lease::of_bits(0), Lease::default());
    }
}
