//! podkv-store: a lock-free hash index with epoch reclamation across processes, in the pod heap.
//!
//! # Map
//! pod heap → root 0 → descriptor → bucket directory → segments of 4096 bucket words (HWcc)
//! → one item (48-byte header + key + value, one block), or an immutable bucket block of
//! `(tag, item)` entries. Every insert, replace and delete builds the bucket's next word and
//! publishes it by one CAS (copy-on-write, [`index`]); lookups only load. Removed items and
//! blocks wait in per-slot limbo bags in the heap until the global epoch has moved two steps
//! past them. memcached 1.6 semantics sit on one write loop (`Parts::update`).
//!
//! A [`Map`] (= [`Store`] in the pod heap) is the open store: `shared::Shared` (arena,
//! descriptor, clock). A [`Handle`] is one thread's seat, made of owned components, each with
//! its state and API in its own module; a command borrows them as one `writer::Parts`:
//! - `reclaim::Reclaim` — the thread's `slot::Slot` (arena slot, heap record, log words),
//!   its pins, collect schedule and spares;
//! - `buckets::Buckets` — growth debt, batched item/byte counters, eviction's sampling seed;
//! - `writer::Writer` — the CAS-token block and the lost-race count.
//!
//! # Who owns what (bottom up; no module imports one above it)
//! - leaves: [`error`], [`config`], [`layout`] (heap structures, log tags), [`item`] (item
//!   and bucket block layout, `View`), [`index`] (the bucket protocol), [`command`] (request/reply types, expiry and
//!   counter rules), [`kvmap`] (the driver trait), [`arena`] (the pod heap);
//! - `shared`: opening, `create`, descriptor facts, visibility; `slot`: the claimed slot;
//! - [`reclaim`]: [`epoch`] (the rule), `limbo` (the heap list and its walk), `spare`,
//!   `reclaimer` (`Reclaim`);
//! - `buckets`: segments, the store's side of [`index`] (blocks, their logs), growth; [`maintain`]: capacity, eviction, crawl;
//! - `writer`: new items (spare or allocator) and the write loop; [`compact`]: moving items
//!   out of sparse slabs through it;
//! - [`recover`]: settling a dead slot's log; [`memcached`], [`meta`]: the commands;
//! - [`map`]: `Map` and `Handle` (thin); [`store`], `crawler`, [`check`]; `driven`: the
//!   store behind [`kvmap`]; with feature `baselines`, `local_arena` (the same index over
//!   mimalloc) and `baseline` (dashmap), for the drivers' comparisons only;
//! - [`transfer`]: dump and load (the stream across format changes).
//!
//! # Where a change goes
//! - **Reclamation**: when a node may be freed — [`epoch`]; when a handle collects, and
//!   spares — `reclaim::reclaimer`, `reclaim::spare`; how limbo sits in the heap —
//!   `reclaim::limbo` with its layout in [`layout`] and its crash steps in [`recover`].
//! - **Recovery**: a new logged step — its tag in [`layout`], the write in the component
//!   that takes the step (via `Slot::log` / `Slot::limbo_log`), its arm in
//!   `recover::settle` and the table at the top of [`recover`].
//! - **A meta command's store semantics**: the options and results in [`command`], the
//!   decision (what `decide` returns to the write loop) in [`meta`]; an item state bit in
//!   [`item`]. The wire format is the server's, not here.
//! - **A classic command**: [`memcached`]; the write loop itself (search, CAS, retry,
//!   accounting): `writer`; item allocation and eviction: `writer` and [`maintain`].
//! - **The table** (buckets, growth, linking): `buckets`; the heap format of anything:
//!   [`layout`] / [`item`], with a new `VERSION`.
//!
//! # Example
//! ```no_run
//! use podkv_store::{Store, StoreConfig};
//! let store = Store::open("/dev/shm/podkv-example", StoreConfig::default())?;
//! let h = store.handle()?;
//! h.set(b"k", b"v", 0, 0)?;
//! assert_eq!(h.get(b"k")?.unwrap().value(), b"v");
//! # Ok::<(), podkv_store::StoreError>(())
//! ```

#![warn(missing_docs)]

pub mod error;
pub mod index;
pub mod kvmap;
pub mod reclaim;

pub use reclaim::epoch;

#[cfg(not(podkv_loom))]
pub mod arena;
#[cfg(all(not(podkv_loom), feature = "baselines"))]
pub mod baseline;
#[cfg(not(podkv_loom))]
mod buckets;
#[cfg(not(podkv_loom))]
pub mod check;
#[cfg(not(podkv_loom))]
pub mod command;
#[cfg(not(podkv_loom))]
pub mod compact;
#[cfg(not(podkv_loom))]
pub mod config;
#[cfg(not(podkv_loom))]
mod crawler;
#[cfg(not(podkv_loom))]
mod driven;
#[cfg(not(podkv_loom))]
pub mod item;
#[cfg(not(podkv_loom))]
mod key;
#[cfg(not(podkv_loom))]
pub mod layout;
#[cfg(all(not(podkv_loom), feature = "baselines"))]
pub mod local_arena;
#[cfg(not(podkv_loom))]
pub mod maintain;
#[cfg(not(podkv_loom))]
pub mod map;
#[cfg(not(podkv_loom))]
pub mod memcached;
#[cfg(not(podkv_loom))]
pub mod meta;
#[cfg(not(podkv_loom))]
pub mod recover;
#[cfg(not(podkv_loom))]
mod shared;
#[cfg(not(podkv_loom))]
mod slot;
#[cfg(not(podkv_loom))]
pub mod store;
#[cfg(not(podkv_loom))]
pub mod transfer;
#[cfg(not(podkv_loom))]
mod writer;

pub use error::StoreError;
pub use kvmap::{KvHandle, KvMap, Recycling};
#[cfg(not(podkv_loom))]
pub use {
    arena::{Arena, PodArena},
    check::StoreReport,
    compact::{CompactPass, CompactReport},
    config::{Clock, Eviction, StoreConfig, Table},
    maintain::CrawlReport,
    map::{Handle, Map},
    memcached::{expiry_of, parse_counter, ttl_of, Guard, Mode, Outcome, StoreExtra},
    meta::{Count, Counted, Delete, Lease, MetaRead, Rank, Read},
    recover::Settled,
    store::{
        check_path, open_existing, CheckReport, Crawler, Store, StoreHandle, GROWTH_POLL,
        SERVED_COHERENCE,
    },
};
/// The evaluation baselines: the same index over mimalloc, and dashmap.
#[cfg(all(not(podkv_loom), feature = "baselines"))]
pub use {
    baseline::{DashBaseline, DashHandle},
    local_arena::LocalArena,
    store::LocalStore,
};

/// The README's examples, compiled as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
