//! The [`Storage`] trait: one method per command, in the store's own vocabulary.
//!
//! # Map
//! - [`Item`]: what a read returns (value, flags, CAS, TTL, access facts).
//! - Text commands: `get` … `flush_all`, `stats`, `version`, `verbosity`.
//! - Meta commands: `meta_get`, `meta_set`, `meta_delete`, `meta_arithmetic`, `meta_debug`.
//!
//! Requests and outcomes are the store's types (`podkv_store`): a store takes its [`Mode`]
//! (and `ms` its [`StoreExtra`]) and answers an [`Outcome`] with the new CAS ([`Stored`]);
//! `incr`/`decr`/`ma` take a [`Count`] and answer [`Counted`]; `mg` takes a [`Read`] and an
//! hit carries the store's [`Lease`]; `md` takes a [`Delete`]. A refusal is the store's
//! [`StoreError`]. The protocol layer ([`text`](super::text), [`meta`](super::meta)) turns
//! them into memcached's reply bytes; memcached's semantics (what a failed `set` leaves,
//! what an over-long `append` answers) are the store's.
//!
//! The store implements this trait; [`dispatch`](super::dispatch) calls it. All methods take
//! `&self`: the store is shared by every connection. The test reference model
//! (`protocol::model::ModelStorage`) follows the same semantics and is the executable spec.

use bytes::Bytes;
use podkv_store::{Count, Counted, Delete, Mode, Outcome, Read, StoreError, StoreExtra};

/// The recache-token state memcached reports after `mg` flags (`W`, `Z`, `X`): the store's
/// own, so an `mg` hit carries what the store decided unchanged.
pub use podkv_store::Lease;

/// What a storage command answers: the store's outcome and the CAS unique of the item it
/// linked (0 when it stored nothing), or why the store refused it.
pub type Stored = Result<(Outcome, u64), StoreError>;

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
    /// The clock expiry is measured against (Unix seconds): a reply's TTL is the store's
    /// absolute expiry at this time (`podkv_store::ttl_of`).
    fn now(&self) -> u32;
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
    /// `gat`/`gats`: like `get`, also setting a new exptime on a hit.
    fn gat(&self, key: &[u8], exptime: i64) -> Option<Item>;
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas`, as `mode` says: `Stored`,
    /// `NotStored` (the mode's condition failed, or an append's joined value is too
    /// large), `Exists` (a stale CAS unique), `NotFound` (cas on a missing key). A `set`
    /// that cannot be stored removes the old item. Append and prepend keep the item's flags
    /// and exptime.
    fn store(&self, mode: Mode, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Stored;
    /// `delete`: `Deleted` or `NotFound`.
    fn delete(&self, key: &[u8]) -> Result<Outcome, StoreError>;
    /// `incr`/`decr`: the value must be a decimal u64 (memcached's `strtoull` rules, so a
    /// value with trailing spaces counts); an increment wraps at 2^64, a decrement stops at 0.
    /// memcached rewrites the number in place, space-padded, when it is not longer than the
    /// old value.
    fn arithmetic(&self, key: &[u8], count: Count) -> Result<Counted, StoreError>;
    /// `touch`: a new exptime; `Touched` or `NotFound`.
    fn touch(&self, key: &[u8], exptime: i64) -> Result<Outcome, StoreError>;
    /// `flush_all`: invalidate every item stored before now + `delay` (≤ 0 means now).
    fn flush_all(&self, delay: i64);
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
    /// `ms`: as [`Storage::store`] with the meta extras; an `ms` that cannot be stored
    /// removes the old item whatever its mode.
    fn meta_set(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        extra: StoreExtra,
    ) -> Stored;
    /// `md`: `Deleted` (removed or marked stale), `NotFound`, or `Exists` (`C` differs).
    fn meta_delete(&self, key: &[u8], delete: Delete) -> Result<Outcome, StoreError>;
    /// `ma`: as [`Storage::arithmetic`] with the meta options; the value's `shown_expiry`
    /// is the expiry `t` prints, at `t`'s place among the flags.
    fn meta_arithmetic(&self, key: &[u8], count: Count) -> Result<Counted, StoreError>;
    /// `me`: debug facts about an item, `None` on a miss (`EN`).
    fn meta_debug(&self, key: &[u8]) -> Option<ItemDebug>;
}
