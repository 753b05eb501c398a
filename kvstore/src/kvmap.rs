//! The one interface drivers use: [`KvMap`] (a shared map) and [`KvHandle`] (one thread's view).
//!
//! Three maps implement it so a workload runs unchanged against each and ratios come from one
//! run: [`crate::Store`] (the pod-heap store), `LocalStore` (the same index over
//! process-local memory from mimalloc; evaluation only) and `DashBaseline` (a
//! `dashmap`; evaluation only).
//!
//! # Contract
//! - `KvMap::handle` is called once per worker thread, on that thread; a handle is used only by
//!   the thread that made it (the store's handle is `!Send`: it holds a heap thread slot).
//! - Keys are 1..=250 bytes by default; values up to 1 MiB by default (see `StoreConfig`).
//! - `set` is memcached `set` with flags 0 and no expiry; `get_*` returns `Ok(false)` on a miss;
//!   `delete` returns whether the key was present; `incr` returns the new value, `None` if the
//!   key is absent, and [`StoreError::NonNumeric`] if the value is not a decimal `u64`.
//! - This trait stays small and stable; everything else (CAS, expiry, append…) is on the
//!   store's own handle.

use crate::StoreError;

/// A map shared by threads (and, for [`crate::Store`], by processes).
pub trait KvMap: Send + Sync {
    /// One thread's handle.
    type Handle: KvHandle;

    /// Short name for reports: `"podkv"`, `"local-mimalloc"`, `"dashmap"`.
    fn name(&self) -> &'static str;

    /// A handle for the calling thread.
    fn handle(&self) -> Result<Self::Handle, StoreError>;
}

/// One thread's operations on a [`KvMap`].
pub trait KvHandle {
    /// Copies the value of `key` into `out` (cleared first); `Ok(false)` on a miss.
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError>;

    /// Calls `visit` with the value of `key` in place (zero copy where the map allows it);
    /// `Ok(false)` on a miss, without calling `visit`.
    fn get_with(&mut self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool, StoreError>;

    /// Stores `value` under `key` (memcached `set`, flags 0, no expiry).
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;

    /// Removes `key`; whether it was present.
    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError>;

    /// Adds `delta` to the decimal value of `key` (wrapping at 2^64); the new value, or `None`
    /// when the key is absent.
    fn incr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError>;

    /// Writes that lost a CAS race and retried, for maps with a lock-free write loop
    /// ([`Handle::lost_races`](crate::Handle::lost_races)); `None` for maps that lock.
    fn lost_races(&self) -> Option<u64> {
        None
    }

    /// How this handle's new items were found, for maps that reuse retired items
    /// ([`Handle::recycling`](crate::Handle::recycling)); `None` for the others.
    fn recycling(&self) -> Option<Recycling> {
        None
    }
}

/// How a handle's new items were found, and how its reclamation kept up (process-local
/// counts since the handle was made; for benchmarks). A write that finds no spare goes to
/// the allocator; spares run out when the epoch stops moving, i.e. when a peer stays pinned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recycling {
    /// New items that took a spare (a reclaimable item of the same size, reused in place).
    pub spares_taken: u64,
    /// New items the allocator made (no spare of the size was left).
    pub allocations: u64,
    /// Periodic collects that found the epoch where their last limbo walk left it (a peer
    /// pinned since), so reclaimed nothing and retried sooner.
    pub stuck_collects: u64,
    /// Times such a collect gave up the CPU so a preempted peer could run and unpin.
    pub yields: u64,
}

impl std::ops::Add for Recycling {
    type Output = Recycling;

    fn add(self, other: Recycling) -> Recycling {
        Recycling {
            spares_taken: self.spares_taken + other.spares_taken,
            allocations: self.allocations + other.allocations,
            stuck_collects: self.stuck_collects + other.stuck_collects,
            yields: self.yields + other.yields,
        }
    }
}

impl std::ops::Sub for Recycling {
    type Output = Recycling;

    /// The counts since an earlier reading of the same handle.
    fn sub(self, earlier: Recycling) -> Recycling {
        Recycling {
            spares_taken: self.spares_taken - earlier.spares_taken,
            allocations: self.allocations - earlier.allocations,
            stuck_collects: self.stuck_collects - earlier.stuck_collects,
            yields: self.yields - earlier.yields,
        }
    }
}
