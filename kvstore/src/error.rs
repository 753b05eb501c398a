//! The store's errors: typed, one line each; exhaustion is a value, never a panic.

#[cfg(not(podkv_loom))]
use podkv_alloc::HeapError;

/// Why a store operation failed.
///
/// Outcomes that memcached reports as replies (`NOT_STORED`, `EXISTS`, `NOT_FOUND`) are not
/// errors: they are [`crate::Outcome`] values. These are the failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The heap could not be opened or a thread slot claimed.
    #[cfg(not(podkv_loom))]
    #[error(transparent)]
    Heap(#[from] HeapError),
    /// A key that is empty or longer than the configured maximum.
    #[error("key of {len} bytes: keys are 1 to {max} bytes")]
    KeyLength {
        /// The key's length.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A value over the configured maximum, or over what the heap serves today.
    #[error("value of {len} bytes is too large: at most {max} bytes")]
    TooLarge {
        /// The value's length.
        len: usize,
        /// The largest value that fits.
        max: usize,
    },
    /// The heap (or the store's capacity, with eviction off) is full.
    #[error("out of memory: the store is full and eviction is off or found nothing to evict")]
    OutOfMemory,
    /// `incr`/`decr` on a value that is not a decimal `u64`.
    #[error("cannot increment or decrement non-numeric value")]
    NonNumeric,
    /// The heap's coherence mode is one the store does not serve ([`crate::SERVED_COHERENCE`]:
    /// today every mode is served, so this guards a mode added later). Refused before
    /// anything is written.
    #[cfg(not(podkv_loom))]
    #[error(
        "the heap's coherence mode is {mode}, which the store does not serve yet: it needs a heap created with --coherence hardware or --coherence limited"
    )]
    UnservedCoherence {
        /// The heap's mode.
        mode: podkv_hw::Coherence,
    },
    /// The heap's user HWcc area has no room for the store's multi-writer words (a heap
    /// created with a too small `--hwcc-bytes`, or none).
    #[cfg(not(podkv_loom))]
    #[error("the heap's HWcc area ({area} bytes) has no room for the store's {need} bytes of shared words: create the heap with a larger --hwcc-bytes")]
    NoHwccRoom {
        /// Bytes the store needs.
        need: u64,
        /// Bytes of the heap's area.
        area: u64,
    },
    /// The heap holds a store of another format version; its items cross by dump and load.
    #[error("the heap's store has format version {found}; this podkv reads version {expected}: move its items with `podkv store dump` (run by the podkv that wrote it) and `podkv store load` into a heap made by this one")]
    Version {
        /// The store's version.
        found: u64,
        /// This build's.
        expected: u64,
    },
    /// The heap's root names something that is not a podkv store.
    #[error("store is corrupt: {0}")]
    Corrupt(String),
}
