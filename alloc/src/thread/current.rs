//! [`Current`]: the per-class word the small fast path allocates from, cached in the handle.

use podkv_hw::sync::AtomicU64;

/// Where the next small allocation of one class comes from: one bitset word of a slab on the
/// class's sized list, cached in the handle (process memory, not the heap) so the fast path
/// neither walks from the list head nor checks for phantom bits. The word stays valid while
/// the slab is on this slot's sized list for the class: `sized_unlink` forgets it. An empty
/// entry has `mask` 0 (its `word` is any readable word), so it never yields a block.
#[derive(Clone, Copy, Debug)]
pub(super) struct Current {
    pub(super) word: *const AtomicU64,
    /// The word's allocatable bits: all but the phantom bits past the slab's capacity.
    pub(super) mask: u64,
    /// Offset of the word's block 0.
    pub(super) at: u64,
    /// The class's block size (here, so the fast path multiplies by a word it has loaded
    /// from the same line instead of indexing a table).
    pub(super) size: u64,
}

impl Current {
    /// An entry that yields nothing; `readable` is any word that outlives it.
    pub(super) fn none(readable: &AtomicU64) -> Current {
        Current {
            word: readable,
            mask: 0,
            at: 0,
            size: 0,
        }
    }
}
