//! Store configuration and the clock.

use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// How a store is opened. The first opener's `key_max`, `value_max`, `capacity`, `eviction`
/// and `table` are written into the heap; later openers use the stored values.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The heap's geometry (for the pod store; ignored by the local store).
    pub heap: podkv_alloc::Config,
    /// Longest key in bytes (memcached: 250).
    pub key_max: usize,
    /// Longest value in bytes (memcached: 1 MiB). A heap without a huge heap
    /// (`huge_bytes: 0`) also refuses values over its largest block (about 512 KiB) with
    /// `TooLarge`.
    pub value_max: usize,
    /// Bytes of items (header + key + value) the store may hold; `None`: until the heap is
    /// full.
    pub capacity: Option<u64>,
    /// What a write does when the store is full.
    pub eviction: Eviction,
    /// How the bucket table is sized.
    pub table: Table,
    /// The clock expiry is measured against.
    pub clock: Clock,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            heap: podkv_alloc::Config::default(),
            key_max: 250,
            value_max: 1 << 20,
            capacity: None,
            eviction: Eviction::SampledOldest,
            table: Table::Growing,
            clock: Clock::System,
        }
    }
}

/// What happens when a write finds the store full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Evict the oldest-written of a few sampled items (expired ones first); see `evict`.
    SampledOldest,
    /// Fail the write with `StoreError::OutOfMemory`.
    Off,
}

/// Bucket table sizing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Start small and double as items are added (past two items per bucket on average),
    /// migrating lazily.
    Growing,
    /// Exactly `2^n` buckets, never grown (for comparison with the paper's fixed table).
    Fixed(u32),
}

/// Where "now" comes from.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// The system's Unix time.
    #[default]
    System,
    /// A settable Unix time (tests).
    Fake(Arc<AtomicU64>),
}

impl Clock {
    /// A fake clock starting at `unix_seconds`, and the handle that moves it.
    pub fn fake(unix_seconds: u64) -> (Clock, Arc<AtomicU64>) {
        let t = Arc::new(AtomicU64::new(unix_seconds));
        (Clock::Fake(t.clone()), t)
    }

    /// Now, in Unix seconds.
    #[inline]
    pub fn now(&self) -> u32 {
        match self {
            Clock::System => coarse_now(),
            Clock::Fake(t) => t.load(Ordering::Relaxed) as u32,
        }
    }
}

/// Unix seconds from the kernel's coarse real-time clock (a few ns; expiry is in seconds).
#[cfg(target_os = "linux")]
fn coarse_now() -> u32 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME_COARSE always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc == 0 {
        ts.tv_sec as u32
    } else {
        system_now()
    }
}

#[cfg(not(target_os = "linux"))]
fn coarse_now() -> u32 {
    system_now()
}

fn system_now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}
