//! podkv-store: a lock-free hash index with epoch reclamation across processes, in the pod heap.
//!
//! # Map
//! pod heap → root 0 → descriptor → bucket directory → 4096-bucket segments → sentinels; one
//! split-ordered Harris–Michael list of items (48-byte header + key + value, one block each)
//! threads all buckets. Every insert, replace and delete is one CAS on a link; lookups only
//! load. Retired items wait in per-slot limbo bags in the heap until the global epoch has moved
//! two steps past them. memcached 1.6 semantics sit on one write loop (`Handle::update`).
//!
//! # Reading order
//! - [`list`]: the link protocol (loom-checked in `tests/loom.rs`);
//! - [`epoch`]: pinning and advancing (loom-checked);
//! - `item`, `layout`: what lives in the heap;
//! - `map`: the table, growth, pins, limbo;
//! - `memcached`: commands; `meta`: the meta commands' state (recache tokens, stale items);
//!   `maintain`: eviction and the expiry crawler; `check`: the walker;
//! - `store`: [`Store`] / [`StoreHandle`] / [`Guard`]; `kvmap` + `baseline`: the driver trait.
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
pub mod kvmap;
pub mod list;
pub mod reclaim;

pub use reclaim::epoch;

#[cfg(not(podkv_loom))]
pub mod arena;
#[cfg(not(podkv_loom))]
pub mod baseline;
#[cfg(not(podkv_loom))]
mod buckets;
#[cfg(not(podkv_loom))]
pub mod check;
#[cfg(not(podkv_loom))]
pub mod command;
#[cfg(not(podkv_loom))]
pub mod config;
#[cfg(not(podkv_loom))]
mod crawler;
#[cfg(not(podkv_loom))]
pub mod item;
#[cfg(not(podkv_loom))]
pub mod layout;
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
mod writer;

pub use error::StoreError;
pub use kvmap::{KvHandle, KvMap, Recycling};
#[cfg(not(podkv_loom))]
pub use {
    arena::{Arena, LocalArena, PodArena},
    baseline::{DashBaseline, DashHandle},
    check::StoreReport,
    config::{Clock, Eviction, StoreConfig, Table},
    maintain::CrawlReport,
    map::{Handle, Map},
    memcached::{expiry_of, parse_counter, Guard, Mode, Outcome, StoreExtra},
    meta::{Count, Counted, Delete, Lease, MetaRead, Rank, Read},
    recover::Settled,
    store::{check_path, CheckReport, Crawler, LocalStore, Store, StoreHandle, SERVED_COHERENCE},
};
