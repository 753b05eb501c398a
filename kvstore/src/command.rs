//! What commands say and what they reply: the request and outcome types of memcached's classic
//! commands (`memcached`) and meta commands (`meta`), the one decision type of the write loop
//! (`Step`), and the rules both read the same way (expiry, counter values). Plain data: no
//! store access, so both command modules build on it without reaching into each other.

use crate::item::{LEASE_STALE, LEASE_TOKEN_SENT};

/// memcached's boundary between relative and absolute expiry (30 days).
pub const SECONDS_RELATIVE_MAX: i64 = 60 * 60 * 24 * 30;

/// A command's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `STORED`.
    Stored,
    /// `NOT_STORED` (add on a present key, replace/append/prepend on an absent one).
    NotStored,
    /// `EXISTS` (cas with a stale token).
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// `TOUCHED`.
    Touched,
}

/// What a store command does when the key is present or absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Always store.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Add the data after the present value.
    Append,
    /// Add the data before the present value.
    Prepend,
    /// Store only if present with this CAS token.
    Cas(u64),
}

impl Mode {
    /// Whether a store in this mode whose new item cannot be made (no memory, or over the
    /// size limit) removes the old item, so no stale value outlives the failed write: as
    /// memcached, a `set` does, and an `ms` (`meta`) whatever its mode; other commands
    /// leave the old item as it was.
    #[inline]
    pub fn removes_old_when_unmade(self, meta: bool) -> bool {
        meta || self == Mode::Set
    }
}

/// The meta protocol's extras of a store (`ms`), beyond its [`Mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreExtra {
    /// `C` with `Append`/`Prepend`: store only if the item's CAS token is this (0: no check,
    /// as memcached). (`Set`/`Replace` with `C` are [`Mode::Cas`].)
    pub compare: Option<u64>,
    /// `I` with [`Mode::Cas`]: a token older than the item's still stores, as a stale item.
    pub invalidate: bool,
    /// `E`: the CAS token the stored item takes instead of a fresh one.
    pub cas: Option<u64>,
}

/// One decision of an update.
pub(crate) enum Step {
    /// Change nothing; reply with this.
    Keep(Outcome),
    /// Link this new (unpublished) item in place of the current one.
    Put(u64, Outcome),
    /// Delete the current item.
    Remove(Outcome),
}

/// The absolute expiry of a command's `exptime` at `now` (0: never; 1: already expired).
pub fn expiry_of(exptime: i64, now: u32) -> u32 {
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e > SECONDS_RELATIVE_MAX => {
            if e <= i64::from(now) {
                1
            } else {
                e.min(i64::from(u32::MAX)) as u32
            }
        }
        e => (i64::from(now) + e).min(i64::from(u32::MAX)) as u32,
    }
}

/// The seconds an item of absolute `expiry` has left at `now`, as memcached prints a TTL
/// (`mg t`, `ma t`): `None` for never, 0 once it has passed. The inverse of [`expiry_of`].
#[inline]
pub fn ttl_of(expiry: u32, now: u32) -> Option<u32> {
    (expiry != 0).then(|| expiry.saturating_sub(now))
}

/// Parses a counter value as memcached's `safe_strtoull` does on item data: the data is a C
/// string (it ends at a NUL, and memcached's `\r\n` after it counts as white space), so
/// `strtoull` may skip leading white space and take a sign, and what follows the digits only
/// has to start with white space or end the string. A negative number is refused when its
/// wrapped value looks negative (so `-0` is 0 and `-1` is refused), as memcached does.
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let text = value.split(|&b| b == 0).next().unwrap_or_default();
    let mut at = text.iter().take_while(|&&b| is_space(b)).count();
    let negative = text.get(at) == Some(&b'-');
    if matches!(text.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    let digits = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let end = at + digits;
    if digits == 0 || text.get(end).is_some_and(|&b| !is_space(b)) {
        return None;
    }
    let magnitude = text[at..end].iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    if negative {
        let value = magnitude.wrapping_neg();
        return ((value as i64) >= 0).then_some(value);
    }
    Some(magnitude)
}

/// An item's meta state and what one `mg` did to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    /// `W`: this read won the recache token.
    pub won: bool,
    /// `Z`: the token had been sent before this read.
    pub token_sent: bool,
    /// `X`: the item is stale.
    pub stale: bool,
    /// The read created the item (`N` on a miss).
    pub created: bool,
}

impl Lease {
    /// The state an item's `lease` bits show to a reader that changes nothing.
    pub fn of_bits(bits: u8) -> Lease {
        Lease {
            token_sent: bits & LEASE_TOKEN_SENT != 0,
            stale: bits & LEASE_STALE != 0,
            ..Lease::default()
        }
    }

    /// Whether a plain read of an item in this state would win the token (a stale item whose
    /// token is not out): such a read must go through [`crate::Handle::meta_get`].
    pub fn read_would_win(self) -> bool {
        self.stale && !self.token_sent
    }
}

/// Where a flag stands among an `mg`'s flags (`Rank::NONE`: absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank(pub u8);

impl Rank {
    /// The flag was not given.
    pub const NONE: Rank = Rank(u8::MAX);
}

impl Default for Rank {
    fn default() -> Self {
        Rank::NONE
    }
}

/// The options of `mg` that change the item, with the positions that order their effects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// `T<exptime>` and its rank.
    pub touch: Option<(i64, Rank)>,
    /// `N<exptime>` and its rank: create an empty item on a miss.
    pub vivify: Option<(i64, Rank)>,
    /// `R<exptime>` and its rank: win the token when the TTL is below it.
    pub recache: Option<(i64, Rank)>,
    /// The rank of `t` (which TTL it prints).
    pub ttl_rank: Rank,
    /// `E<cas>`: the CAS token of an item `N` creates.
    pub cas: Option<u64>,
}

/// The options of `ma`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Decrement (stopping at 0) instead of increment (wrapping).
    pub decrement: bool,
    /// The amount.
    pub delta: u64,
    /// `C`: act only if the item's CAS token is this (0: no check, as memcached).
    pub compare: Option<u64>,
    /// `T`: the result's new exptime, and its rank among the flags.
    pub touch: Option<(i64, Rank)>,
    /// `N`: create the item on a miss with this exptime (set at `N`'s rank).
    pub vivify: Option<(i64, Rank)>,
    /// `J`: the value `N` creates.
    pub initial: u64,
    /// The rank of `t` (which expiry it prints), as in [`Read`].
    pub ttl_rank: Rank,
    /// `E`: the CAS token the result takes.
    pub cas: Option<u64>,
}

/// What `ma` (and `incr`/`decr`) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// The new value, its CAS token and absolute expiry; `created` when `N` made the item.
    Value {
        /// The number.
        value: u64,
        /// The item's CAS token.
        cas: u64,
        /// Absolute expiry (0: never).
        expiry: u32,
        /// The expiry `t` prints, as of `t`'s place among the flags.
        shown_expiry: u32,
        /// Made by `N` on a miss.
        created: bool,
    },
    /// No item.
    NotFound,
    /// `C` did not match.
    Exists,
}

/// What `md` does to a present item.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delete {
    /// `C`: act only if the item's CAS token is this (0 included, as memcached).
    pub compare: Option<u64>,
    /// `I`: mark stale instead of removing, with `T` (exptime) if given.
    pub invalidate: Option<Option<i64>>,
    /// `E`: the CAS token a stale-marked item takes.
    pub cas: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u32 = 1_700_000_000;

    #[test]
    fn expiry_boundaries() {
        assert_eq!(expiry_of(0, NOW), 0);
        assert_eq!(expiry_of(-1, NOW), 1);
        assert_eq!(expiry_of(10, NOW), NOW + 10);
        assert_eq!(
            expiry_of(SECONDS_RELATIVE_MAX, NOW),
            NOW + SECONDS_RELATIVE_MAX as u32
        );
        assert_eq!(
            expiry_of(SECONDS_RELATIVE_MAX + 1, NOW),
            1,
            "an absolute time in 1970"
        );
        assert_eq!(expiry_of(i64::from(NOW) + 5, NOW), NOW + 5);
        assert_eq!(expiry_of(i64::from(NOW), NOW), 1);
    }

    #[test]
    fn a_failed_set_or_ms_removes_the_old_item() {
        assert!(Mode::Set.removes_old_when_unmade(false));
        for mode in [
            Mode::Add,
            Mode::Replace,
            Mode::Append,
            Mode::Prepend,
            Mode::Cas(1),
        ] {
            assert!(!mode.removes_old_when_unmade(false), "{mode:?}");
            assert!(mode.removes_old_when_unmade(true), "ms {mode:?}");
        }
    }

    #[test]
    fn ttl_inverts_expiry() {
        assert_eq!(ttl_of(expiry_of(0, NOW), NOW), None, "never");
        assert_eq!(ttl_of(expiry_of(10, NOW), NOW), Some(10));
        assert_eq!(ttl_of(expiry_of(-1, NOW), NOW), Some(0), "already expired");
        assert_eq!(ttl_of(NOW + 5, NOW + 9), Some(0), "passed");
    }

    #[test]
    fn counters_parse_like_strtoull() {
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"99 "), Some(99));
        assert_eq!(parse_counter(b" 7"), Some(7));
        assert_eq!(parse_counter(b"00000000000000000012"), Some(12));
        // As memcached 1.6.18 answers `incr` on these values (checked against it):
        assert_eq!(
            parse_counter(b"1 2"),
            Some(1),
            "white space ends the number"
        );
        assert_eq!(parse_counter(b"+1"), Some(1));
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"5\0x"), Some(5), "item data is a C string");
        assert_eq!(parse_counter(b" \t7"), Some(7));
        assert_eq!(parse_counter(b"7\r\n"), Some(7));
        for bad in [
            &b""[..],
            b" ",
            b"-1",
            b"0x10",
            b"1.0",
            b"\0" as &[u8],
            b"12abc",
        ] {
            assert_eq!(parse_counter(bad), None, "{bad:?}");
        }
    }
}
