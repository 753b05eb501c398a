//! The [`Storage`] trait: one method per command, typed outcomes, no wire bytes.
//!
//! # Map
//! - [`Item`]: what a read returns (value, flags, CAS, TTL, access facts).
//! - Text commands: `get` … `flush_all`, `stats`, `version`, `verbosity`.
//! - Meta commands: `meta_get`, `meta_set`, `meta_delete`, `meta_arithmetic`, `meta_debug`,
//!   with their option structs and outcomes (`mg`, `ma` and `md` take the store's [`Read`],
//!   [`Count`] and [`Delete`]; an `mg` hit carries the store's [`Lease`]).
//!
//! The store implements this trait; [`dispatch`](super::dispatch) calls it and turns outcomes
//! into memcached's reply bytes. All methods take `&self`: the store is shared by every
//! connection. Semantics are memcached 1.6's and are spelled out on each method; the test
//! reference model (`protocol::model::ModelStorage`) follows them and is the executable spec.

use bytes::Bytes;
use podkv_store::{Count, Delete, Read};

use super::request::{Exptime, SetMode};

/// The recache-token state memcached reports after `mg` flags (`W`, `Z`, `X`): the store's
/// own, so an `mg` hit carries what the store decided unchanged.
pub use podkv_store::Lease;

/// An item as a read sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The value bytes.
    pub value: Bytes,
    /// Client flags.
    pub flags: u32,
    /// CAS unique.
    pub cas: u64,
    /// Seconds until expiry, or `None` for never (meta `t` prints `-1`).
    pub ttl: Option<u32>,
    /// Seconds since the last access, before this one (meta `l`).
    pub last_access: u32,
    /// Whether the item had been fetched before this access (meta `h`).
    pub fetched: bool,
}

/// Outcome of a storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum StoreOutcome {
    /// `STORED` / `HD`; carries the item's new CAS unique.
    Stored(u64),
    /// `NOT_STORED` / `NS`: the add/replace/append/prepend condition failed.
    NotStored,
    /// `EXISTS` / `EX`: the CAS unique did not match.
    Exists,
    /// `NOT_FOUND` / `NF`: cas on a missing key.
    NotFound,
    /// `SERVER_ERROR object too large for cache`.
    TooLarge,
    /// `SERVER_ERROR out of memory storing object`; a failed `set` must also remove the old
    /// item, as memcached does, so no stale value survives.
    OutOfMemory,
}

/// Outcome of `delete`, `touch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum KeyOutcome {
    /// `DELETED` / `TOUCHED`.
    Done,
    /// `NOT_FOUND`.
    NotFound,
}

/// Outcome of `incr` / `decr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum DeltaOutcome {
    /// The new value.
    Value(u64),
    /// `NOT_FOUND`.
    NotFound,
    /// The value is not a decimal u64 (`CLIENT_ERROR cannot increment or decrement …`).
    NonNumeric,
    /// `SERVER_ERROR out of memory`.
    OutOfMemory,
}

/// A `stats` answer: `STAT <name> <value>` lines in order.
pub type StatLines = Vec<(String, String)>;

/// An `mg` hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaItem {
    /// The item as read (before any `T` took effect, except `ttl`, which is after).
    pub item: Item,
    /// The recache-token state.
    pub lease: Lease,
}

/// Options of `ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaSetOptions {
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// Client flags.
    pub flags: u32,
    /// Expiration.
    pub exptime: Exptime,
    /// The mode; with `cas`, `Set` and `Replace` become a CAS store, `Add` ignores it, and
    /// `Append`/`Prepend` check it.
    pub mode: SetMode,
    /// `C`: compare-and-swap.
    pub cas: Option<u64>,
    /// `E`: the CAS unique to give the stored item.
    pub new_cas: Option<u64>,
    /// `I`: a CAS older than the item's still stores, marking the item stale.
    pub invalidate: bool,
}

/// Outcome of `md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum MetaDeleteOutcome {
    /// `HD`: deleted or marked stale.
    Deleted,
    /// `NF`.
    NotFound,
    /// `EX`: CAS mismatch.
    Exists,
    /// `SERVER_ERROR out of memory` (no room for an `I` copy even after eviction).
    OutOfMemory,
}

/// Outcome of `ma`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum MetaArithmeticOutcome {
    /// Success: the new number, its CAS unique and remaining TTL (`None` = never).
    Value {
        /// The new value.
        value: u64,
        /// The item's CAS unique.
        cas: u64,
        /// Seconds until expiry.
        ttl: Option<u32>,
        /// Whether `N` created the item (memcached then answers even under `q`).
        created: bool,
    },
    /// `NF`.
    NotFound,
    /// `EX`: CAS mismatch.
    Exists,
    /// `NS`: an `N` miss lost the race to create the item.
    NotStored,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    NonNumeric,
    /// `SERVER_ERROR out of memory`.
    OutOfMemory,
}

/// What `me` prints about an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemDebug {
    /// memcached's `exp=`: `now - exptime` (negative while live), `-1` for never.
    pub exp: i64,
    /// Seconds since last access (`la=`).
    pub last_access: u64,
    /// CAS unique (`cas=`).
    pub cas: u64,
    /// Fetched before (`fetch=yes|no`).
    pub fetched: bool,
    /// Size class (`cls=`).
    pub class: u32,
    /// Total item size in bytes (`size=`).
    pub size: u64,
}

/// The store behind the protocol: one method per command.
pub trait Storage {
    /// `get`/`gets`: the live item under `key`, marking it fetched.
    fn get(&self, key: &[u8]) -> Option<Item>;
    /// `get`/`gets` without a copy: on a hit, calls `emit(flags, cas, value)` while the value
    /// is readable in place, and returns true. The default goes through [`Storage::get`].
    fn get_with(&self, key: &[u8], emit: &mut dyn FnMut(u32, u64, &[u8])) -> bool {
        match self.get(key) {
            Some(item) => {
                emit(item.flags, item.cas, &item.value);
                true
            }
            None => false,
        }
    }
    /// `gat`/`gats`: like `get`, also setting a new expiration on a hit.
    fn gat(&self, key: &[u8], exptime: Exptime) -> Option<Item>;
    /// `set`: store unconditionally.
    fn set(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome;
    /// `add`: store only if no live item exists (`NotStored` otherwise; memcached also bumps
    /// the existing item in the LRU).
    fn add(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome;
    /// `replace`: store only if a live item exists.
    fn replace(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes) -> StoreOutcome;
    /// `append`: extend an existing value; keeps its flags and exptime (`NotStored` on miss).
    fn append(&self, key: Bytes, value: Bytes) -> StoreOutcome;
    /// `prepend`: like `append`, before the existing value.
    fn prepend(&self, key: Bytes, value: Bytes) -> StoreOutcome;
    /// `cas`: store only if the item's CAS unique equals `cas` (`Exists` if not, `NotFound`
    /// if there is no item).
    fn cas(&self, key: Bytes, flags: u32, exptime: Exptime, value: Bytes, cas: u64)
        -> StoreOutcome;
    /// `delete`.
    fn delete(&self, key: &[u8]) -> KeyOutcome;
    /// `incr`: the value must be a decimal u64 (memcached's `strtoull` rules, so a value with
    /// trailing spaces counts); the sum wraps at 2^64. memcached rewrites the number in place,
    /// space-padded, when it is not longer than the old value.
    fn incr(&self, key: &[u8], delta: u64) -> DeltaOutcome;
    /// `decr`: like `incr`, stopping at 0.
    fn decr(&self, key: &[u8], delta: u64) -> DeltaOutcome;
    /// `touch`: set a new expiration.
    fn touch(&self, key: &[u8], exptime: Exptime) -> KeyOutcome;
    /// `flush_all`: invalidate every item stored before now + `delay` (≤ 0 means now).
    fn flush_all(&self, delay: Exptime);
    /// `stats` / `stats <group>` (`group` empty for the general stats): `None` for an
    /// unknown group, which answers `ERROR`.
    fn stats(&self, group: &[u8]) -> Option<StatLines>;
    /// `stats reset`.
    fn stats_reset(&self) {}
    /// The text after `VERSION `.
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_owned()
    }
    /// `verbosity <level>`.
    fn verbosity(&self, _level: u32) {}
    /// `mg`: read with meta options (`no_bump`: `u`, neither bump the LRU nor mark fetched);
    /// `None` is a miss (`EN`). The hit's [`Item::ttl`] is the TTL as `t` prints it: at
    /// `t`'s place among the flags.
    fn meta_get(&self, key: &[u8], read: Read, no_bump: bool) -> Option<MetaItem>;
    /// `ms`.
    fn meta_set(&self, options: MetaSetOptions) -> StoreOutcome;
    /// `md`.
    fn meta_delete(&self, key: &[u8], delete: Delete) -> MetaDeleteOutcome;
    /// `ma`: the outcome's `ttl` is as `t` prints it, at `t`'s place among the flags.
    fn meta_arithmetic(&self, key: &[u8], count: Count) -> MetaArithmeticOutcome;
    /// `me`: debug facts about an item, `None` on a miss (`EN`).
    fn meta_debug(&self, key: &[u8]) -> Option<ItemDebug>;
}
