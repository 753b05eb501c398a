//! One type per memcached command, and the [`Request`] enum the parsers produce.
//!
//! # Map
//! - Text commands: [`Retrieve`], [`Store`], [`Delete`], [`Delta`], [`Touch`], [`FlushAll`],
//!   [`Stats`], [`Verbosity`], [`TooLarge`].
//! - Meta commands: [`MetaGet`], [`MetaSet`], [`MetaDelete`], [`MetaArithmetic`],
//!   [`MetaDebug`], with [`MetaKey`] (a key and whether it came base64-encoded) and the
//!   ordered [`ReturnFlag`]s that shape the reply.
//!
//! What a command asks of the store is the store's own type, built here once by the parser
//! and taken as is by [`Storage`](super::Storage): a store's [`Mode`] (and `ms`'s
//! [`StoreExtra`]), `incr`/`decr`/`ma`'s [`Count`], `mg`'s [`Read`], `md`'s
//! [`podkv_store::Delete`]. Expiration times are memcached's raw `exptime` numbers (0 never,
//! negative already expired, up to 30 days relative, larger a Unix time) as the store's
//! commands take them; the store resolves them against its clock (`podkv_store::expiry_of`).
//!
//! Keys and values are [`Bytes`] slices of the read buffer: parsing copies nothing but
//! base64-decoded keys. Every request the codec yields already satisfies
//! [`ProtocolLimits`](super::ProtocolLimits).

use bytes::Bytes;
use podkv_store::{Count, Mode, Rank, Read, StoreExtra};

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
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]` + data, and
    /// `cas` with `<cas unique>` before `noreply`: the command is the store's [`Mode`].
    Store(Store),
    /// A storage command whose data block exceeds the item size limit (block swallowed).
    TooLarge(TooLarge),
    /// `delete <key> [0] [noreply]`.
    Delete(Delete),
    /// `incr|decr <key> <delta> [noreply]`.
    Delta(Delta),
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
    /// `Some` for gat/gats: the exptime to set on every hit.
    pub touch: Option<i64>,
    /// A key after `keys` was over-long: touch `keys` (gat/gats), then answer only
    /// `CLIENT_ERROR bad command line format`, as memcached, which meets the long key after
    /// it has touched those before it.
    pub refused: bool,
}

/// `set`, `add`, `replace`, `append`, `prepend`, `cas` with their data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// Which command: the store's mode (`cas` carries its CAS unique).
    pub mode: Mode,
    /// The key.
    pub key: Bytes,
    /// Opaque client flags, stored and returned (ignored by append and prepend).
    pub flags: u32,
    /// Exptime of the stored item (ignored by append and prepend).
    pub exptime: i64,
    /// The data block, without its `\r\n`.
    pub value: Bytes,
    /// `noreply`: send nothing back, not even errors.
    pub noreply: bool,
}

/// A storage command refused because its data block is larger than the item limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// The key the client tried to store.
    pub key: Bytes,
    /// The command that carried it: its store mode, and whether it was an `ms` (which
    /// decide, by the store's rule, whether the old item goes: [`Mode::removes_old_when_unmade`]).
    pub mode: Mode,
    /// An `ms` (else a text command).
    pub meta: bool,
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
    /// What the store does: increment (wrapping at 2^64) or decrement (stopping at 0) by
    /// the delta, nothing else.
    pub count: Count,
    /// `noreply`.
    pub noreply: bool,
}

/// `touch <key> <exptime>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touch {
    /// The key.
    pub key: Bytes,
    /// The new exptime.
    pub exptime: i64,
    /// `noreply`.
    pub noreply: bool,
}

/// `flush_all [delay]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushAll {
    /// When to invalidate, as an exptime: zero or negative means now.
    pub delay: i64,
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

/// The places of the order-sensitive flags among a meta command's flag tokens, as the
/// store's [`Rank`]s ([`Rank::NONE`] when not given). memcached walks the flags once: `T`
/// and `N` set the expiry where they stand, `R` compares the expiry as it stands at `R`, and
/// `t` prints it as it stands at `t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetOrder {
    /// `T`.
    pub touch: Rank,
    /// `N`.
    pub vivify: Rank,
    /// `R`.
    pub recache: Rank,
    /// `t`.
    pub ttl: Rank,
}

/// An exptime with its flag's place among the flags, as the store's commands take it.
#[inline]
pub fn ranked(exptime: Option<i64>, rank: Rank) -> Option<(i64, Rank)> {
    exptime.map(|e| (e, rank))
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
    pub exptime: i64,
    /// `M<mode>` as the store's mode: `MS` set, `ME` add, `MR` replace, `MA` append, `MP`
    /// prepend; `C<cas>` turns set and replace into [`Mode::Cas`].
    pub mode: Mode,
    /// The store's extras: `C` for append/prepend, `I` (a stale CAS still stores, marking
    /// the item stale), `E<cas>` (the stored item's CAS unique).
    pub extra: StoreExtra,
    /// `N<exptime>`: parsed, and ignored as memcached 1.6.18 ignores it (its `ms` has no
    /// append autovivify: `ms k 1 MA N30` on a miss answers `NS`).
    pub vivify: Option<i64>,
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
