//! One type per memcached command, and the [`Request`] enum the parsers produce.
//!
//! # Map
//! - Time: [`Exptime`] (memcached's raw expiration number) and its [`Deadline`].
//! - Text commands: [`Retrieve`], [`Store`], [`Delete`], [`Delta`], [`Touch`], [`FlushAll`],
//!   [`Stats`], [`Verbosity`], [`TooLarge`].
//! - Meta commands: [`MetaGet`], [`MetaSet`], [`MetaDelete`], [`MetaArithmetic`],
//!   [`MetaDebug`], with [`MetaKey`] (a key and whether it came base64-encoded) and the
//!   ordered [`ReturnFlag`]s that shape the reply.
//!
//! Keys and values are [`Bytes`] slices of the read buffer: parsing copies nothing but
//! base64-decoded keys. Every request the codec yields already satisfies
//! [`ProtocolLimits`](super::ProtocolLimits).

use bytes::Bytes;
use podkv_store::{Count, Rank, Read};

/// Seconds after which memcached reads an expiration time as a Unix time (30 days).
pub const SECS_RELATIVE_MAX: i64 = 60 * 60 * 24 * 30;

/// An expiration time exactly as sent: 0 = never, negative = already expired,
/// up to 30 days = seconds from now, larger = Unix time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exptime(pub i32);

/// When an item expires, resolved against the store's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// The item never expires.
    Never,
    /// The item is already expired: stores make it invisible at once.
    Expired,
    /// The item expires at this Unix time (seconds).
    At(u64),
}

impl Exptime {
    /// Resolves this expiration as memcached's `realtime()` does, given the Unix time now.
    pub fn deadline(self, now: u64) -> Deadline {
        let raw = i64::from(self.0);
        match raw {
            0 => Deadline::Never,
            r if r < 0 => Deadline::Expired,
            r if r <= SECS_RELATIVE_MAX => Deadline::At(now + r as u64),
            r if (r as u64) <= now => Deadline::Expired,
            r => Deadline::At(r as u64),
        }
    }
}

/// Every command the text and meta parsers understand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `get <key>*` (and memcached's legacy alias `bget`).
    Get(Retrieve),
    /// `gets <key>*`: like get, with CAS uniques.
    Gets(Retrieve),
    /// `gat <exptime> <key>*`: get and touch.
    Gat(Retrieve),
    /// `gats <exptime> <key>*`: get and touch, with CAS uniques.
    Gats(Retrieve),
    /// `set <key> <flags> <exptime> <bytes> [noreply]` + data.
    Set(Store),
    /// `add …`: store only if absent.
    Add(Store),
    /// `replace …`: store only if present.
    Replace(Store),
    /// `append …`: add data after the existing value (flags and exptime ignored).
    Append(Store),
    /// `prepend …`: add data before the existing value (flags and exptime ignored).
    Prepend(Store),
    /// `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]` + data.
    Cas(Store),
    /// A storage command whose data block exceeds the item size limit (block swallowed).
    TooLarge(TooLarge),
    /// `delete <key> [0] [noreply]`.
    Delete(Delete),
    /// `incr <key> <delta> [noreply]`.
    Incr(Delta),
    /// `decr <key> <delta> [noreply]`.
    Decr(Delta),
    /// `touch <key> <exptime> [noreply]`.
    Touch(Touch),
    /// `flush_all [delay] [noreply]`.
    FlushAll(FlushAll),
    /// `stats [group]`.
    Stats(Stats),
    /// `version`.
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity(Verbosity),
    /// `quit`: close after earlier replies are written.
    Quit,
    /// `shutdown [graceful]`: always refused.
    Shutdown,
    /// `mg <key> <flags>*`.
    MetaGet(MetaGet),
    /// `ms <key> <datalen> <flags>*` + data.
    MetaSet(MetaSet),
    /// `md <key> <flags>*`.
    MetaDelete(MetaDelete),
    /// `ma <key> <flags>*`.
    MetaArithmetic(MetaArithmetic),
    /// `me <key> [b]`.
    MetaDebug(MetaDebug),
    /// `mn`: answers `MN`, marking the end of a pipelined batch.
    MetaNoop,
}

/// `get`, `gets`, `gat`, `gats`: keys in request order, and for gat(s) the new exptime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retrieve {
    /// The keys, in order; replies list hits in this order.
    pub keys: Vec<Bytes>,
    /// `Some` for gat/gats: the expiration to set on every hit.
    pub touch: Option<Exptime>,
}

/// `set`, `add`, `replace`, `append`, `prepend`, `cas` with their data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// The key.
    pub key: Bytes,
    /// Opaque client flags, stored and returned.
    pub flags: u32,
    /// Expiration of the stored item.
    pub exptime: Exptime,
    /// The data block, without its `\r\n`.
    pub value: Bytes,
    /// For `cas`: the CAS unique the item must still have; 0 otherwise.
    pub cas_unique: u64,
    /// `noreply`: send nothing back, not even errors.
    pub noreply: bool,
}

/// Which command was refused by the size limit, so dispatch can match memcached's side effects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TooLargeOrigin {
    /// A text `set`: memcached also removes the old item.
    Set,
    /// `add`, `replace`, `append`, `prepend`, `cas`: the old item stays.
    OtherText,
    /// An `ms`: memcached removes the old item whatever the mode.
    MetaSet,
}

/// A storage command refused because its data block is larger than the item limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// The key the client tried to store.
    pub key: Bytes,
    /// The command that carried it.
    pub origin: TooLargeOrigin,
    /// `noreply` of a text command (meta errors are never hidden).
    pub noreply: bool,
}

/// `delete <key>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// The key.
    pub key: Bytes,
    /// `noreply`.
    pub noreply: bool,
}

/// `incr` / `decr <key> <delta>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    /// The key.
    pub key: Bytes,
    /// The amount; incr wraps at 2^64, decr stops at 0.
    pub delta: u64,
    /// `noreply`.
    pub noreply: bool,
}

/// `touch <key> <exptime>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touch {
    /// The key.
    pub key: Bytes,
    /// The new expiration.
    pub exptime: Exptime,
    /// `noreply`.
    pub noreply: bool,
}

/// `flush_all [delay]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushAll {
    /// When to invalidate: zero or negative means now.
    pub delay: Exptime,
    /// `noreply`.
    pub noreply: bool,
}

/// The group a `stats` command asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsGroup {
    /// `stats`: general counters.
    General,
    /// `stats reset`: answers `RESET`.
    Reset,
    /// `stats detail on|off|dump` (anything else answers the usage error).
    Detail(Bytes),
    /// `stats cachedump …`: refused, as memcached with dumps disabled.
    CacheDump,
    /// Any other group (`items`, `slabs`, `settings`, `sizes`, `conns`, …), asked of the store.
    Named(Bytes),
}

/// `stats [group]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// The requested group.
    pub group: StatsGroup,
}

/// `verbosity <level>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verbosity {
    /// The new level.
    pub level: u32,
    /// `noreply`.
    pub noreply: bool,
}

/// A meta key: the decoded bytes, and whether the client sent it base64-encoded (`b`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaKey {
    /// The key as stored.
    pub bytes: Bytes,
    /// Echo it base64-encoded, followed by a `b` flag.
    pub base64: bool,
}

/// A flag that asks for something in the reply; the reply lists them in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReturnFlag {
    /// `s`: value size.
    Size,
    /// `t`: remaining TTL in seconds, `-1` for never.
    Ttl,
    /// `c`: CAS unique.
    Cas,
    /// `f`: client flags.
    Flags,
    /// `l`: seconds since last access.
    LastAccess,
    /// `h`: whether the item had been fetched before (0/1).
    Hit,
    /// `O<opaque>`: echoed verbatim (the token includes the `O`).
    Opaque(Bytes),
    /// `k`: the key (with `b` appended for base64 keys).
    Key,
}

/// `mg <key> <flags>*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaGet {
    /// The key.
    pub key: MetaKey,
    /// Reply flags in request order.
    pub returns: Vec<ReturnFlag>,
    /// `v`: return the value (`VA`), else `HD`.
    pub value: bool,
    /// `q`: hide `EN`.
    pub quiet: bool,
    /// What the store does: `T`, `N`, `R` with their exptimes, `E<cas>` (the CAS of an item
    /// `N` creates), and where `T`, `N`, `R` and `t` stand among the flags.
    pub read: Read,
    /// `u`: do not bump the LRU or mark fetched.
    pub no_bump: bool,
}

/// The positions of `mg`'s order-sensitive flags among its flag tokens ([`GetOrder::ABSENT`]
/// when not given). memcached walks the flags once: `T` and `N` set the expiry where they
/// stand, `R` compares the expiry as it stands at `R`, and `t` prints it as it stands at `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetOrder {
    /// `T`.
    pub touch: u8,
    /// `N`.
    pub vivify: u8,
    /// `R`.
    pub recache: u8,
    /// `t`.
    pub ttl: u8,
}

impl GetOrder {
    /// The position of a flag that was not given (after every other).
    pub const ABSENT: u8 = u8::MAX;
}

impl Default for GetOrder {
    fn default() -> Self {
        GetOrder {
            touch: Self::ABSENT,
            vivify: Self::ABSENT,
            recache: Self::ABSENT,
            ttl: Self::ABSENT,
        }
    }
}

/// An exptime as the store's commands take it: the seconds as sent, with the flag's place
/// among the flags.
#[inline]
pub fn ranked(exptime: Option<Exptime>, rank: u8) -> Option<(i64, Rank)> {
    exptime.map(|e| (i64::from(e.0), Rank(rank)))
}

/// The `M` mode of `ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetMode {
    /// `MS` (default): store.
    Set,
    /// `ME`: store only if absent ("add").
    Add,
    /// `MR`: store only if present.
    Replace,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
}

/// `ms <key> <datalen> <flags>*` + data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaSet {
    /// The key.
    pub key: MetaKey,
    /// The data block.
    pub value: Bytes,
    /// `F<flags>`.
    pub flags: u32,
    /// `T<exptime>` (0 when absent).
    pub exptime: Exptime,
    /// `M<mode>`.
    pub mode: SetMode,
    /// `C<cas>`: compare-and-swap (turns set/replace into cas).
    pub cas: Option<u64>,
    /// `E<cas>`: CAS unique to give the new item.
    pub new_cas: Option<u64>,
    /// `I`: with `C`, a stale CAS still stores but marks the item stale.
    pub invalidate: bool,
    /// `N<exptime>`: parsed, and ignored as memcached 1.6.18 ignores it (its `ms` has no
    /// append autovivify: `ms k 1 MA N30` on a miss answers `NS`).
    pub vivify: Option<Exptime>,
    /// `q`: hide `HD`.
    pub quiet: bool,
    /// Reply flags in request order (`O`, `k`, `c`).
    pub returns: Vec<ReturnFlag>,
}

/// `md <key> <flags>*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaDelete {
    /// The key.
    pub key: MetaKey,
    /// What the store does: `C<cas>` (delete only if the CAS matches), `I` (mark stale
    /// instead of removing) with `T<exptime>` (its new TTL), `E<cas>` (the stale item's CAS).
    pub delete: podkv_store::Delete,
    /// `q`: hide `HD`.
    pub quiet: bool,
    /// Reply flags in request order (`O`, `k`).
    pub returns: Vec<ReturnFlag>,
}

/// The `M` mode of `ma`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithmeticMode {
    /// `MI`, `M+` (default).
    Increment,
    /// `MD`, `M-`.
    Decrement,
}

/// `ma <key> <flags>*`: the store's [`Count`] as parsed, and what shapes the reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaArithmetic {
    /// The key.
    pub key: MetaKey,
    /// What the store does: `MI`/`MD`, `D<delta>` (default 1), `J<initial>` (default 0),
    /// `N`, `T`, `C`, `E`, and where `T`, `N` and `t` stand among the flags.
    pub count: Count,
    /// `v`: reply `VA` with the number.
    pub value: bool,
    /// `q`: hide success.
    pub quiet: bool,
    /// Reply flags in request order (`c`, `t`, `O`, `k`).
    pub returns: Vec<ReturnFlag>,
}

/// `me <key> [b]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaDebug {
    /// The key.
    pub key: MetaKey,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_resolves_like_realtime() {
        let now = 1_700_000_000;
        assert_eq!(Exptime(0).deadline(now), Deadline::Never);
        assert_eq!(Exptime(-1).deadline(now), Deadline::Expired);
        assert_eq!(Exptime(10).deadline(now), Deadline::At(now + 10));
        assert_eq!(
            Exptime(2_592_000).deadline(now),
            Deadline::At(now + 2_592_000)
        );
        assert_eq!(Exptime(2_592_001).deadline(now), Deadline::Expired);
        assert_eq!(
            Exptime(1_700_000_100).deadline(now),
            Deadline::At(1_700_000_100)
        );
    }
}
