//! The user's HWcc area: the last part of the heap's HWcc region, `2^hwcc_user_log2` bytes
//! (`Geometry::hwcc_user_log2`, chosen at creation: `podkv heap create --hwcc-bytes`) that
//! the heap's user — the store — lays out itself, for the words several hosts change.
//!
//! # What the heap promises about it
//! - It is HWcc memory in a `limited` heap and among the mCAS region's targets in an `mcas`
//!   heap, so a word there changes by [`HwccUser::cas`] / [`HwccUser::store`]: the heap's one
//!   hook (CPU CAS in `hardware` and `limited`, memory-side CAS on behalf of the caller's
//!   thread slot in `mcas`), and is read by [`HwccUser::load`].
//! - It is zero until written (a fresh file is sparse), and never handed out or freed by the
//!   allocator: the user places its words at offsets of its own choosing.
//! - Only its *backed* prefix may be touched: [`HwccUser::back`] backs `0..len` (idempotent,
//!   an error value when the file has no room, never `SIGBUS` later) and raises the
//!   high-water mark in the header that [`crate::Heap::hwcc_bytes`] counts. The store backs
//!   what its table is about to use before it publishes the size that uses it.

use crate::error::HeapError;
use crate::shared::Hold;
use crate::thread::ThreadHandle;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use std::ops::Range;

/// A process's handle on the user's HWcc area of one heap (see the module doc). Cheap to
/// clone; keeps the heap open.
#[derive(Clone)]
pub struct HwccUser {
    shared: Hold,
}

impl std::fmt::Debug for HwccUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwccUser")
            .field("range", &self.range())
            .finish()
    }
}

impl HwccUser {
    pub(crate) fn new(shared: Hold) -> HwccUser {
        HwccUser { shared }
    }

    /// The area's heap offsets (empty for a heap created without one).
    pub fn range(&self) -> Range<u64> {
        self.shared.layout.hwcc_user..self.shared.layout.hwcc_end
    }

    /// Bytes of the area.
    pub fn len(&self) -> u64 {
        self.shared.geometry.hwcc_user_bytes()
    }

    /// Whether the heap has no area.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes at the area's start backed so far, by any process (what `hwcc_bytes` counts).
    pub fn backed(&self) -> u64 {
        self.shared.hwcc_user_backed_word().load(Ordering::Acquire).min(self.len())
    }

    /// Backs the area's first `len` bytes (rounded up to a page, at most the area), so its
    /// words may be touched; idempotent. Fails, touching nothing, when the file has no room.
    pub fn back(&self, len: u64) -> Result<(), HeapError> {
        let len = len.next_multiple_of(4096).min(self.len());
        if len <= self.backed() {
            return Ok(());
        }
        self.shared.file.back(self.shared.layout.hwcc_user, len)?;
        self.shared.hwcc_user_backed_word().fetch_max(len, Ordering::AcqRel);
        Ok(())
    }

    /// The word at byte `at` of the area (8-aligned, inside the backed prefix).
    ///
    /// # Panics
    /// If `at` is misaligned or not backed: the caller's layout is wrong.
    pub fn word(&self, at: u64) -> &AtomicU64 {
        assert!(
            at % 8 == 0 && at + 8 <= self.backed(),
            "HWcc area word {at} is misaligned or not backed ({} bytes backed)",
            self.backed()
        );
        // SAFETY: inside the area's backed prefix (checked above), which the mapping covers
        // while `shared` stands; 8-aligned (the area is page aligned); an AtomicU64 is valid
        // for any bits.
        unsafe {
            &*(self
                .shared
                .mapping
                .base()
                .add((self.shared.layout.hwcc_user + at) as usize) as *const AtomicU64)
        }
    }

    /// The one way a word of the area changes by CAS, for `thread` (a handle on this heap):
    /// memory-side CAS on behalf of its slot in an `mcas` heap, CPU CAS otherwise. `Ok` with
    /// the previous value on success, `Err` with the value found.
    #[inline]
    pub fn cas(
        &self,
        thread: &ThreadHandle,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        self.debug_assert_inside(word);
        crate::mcas::cas_word(
            self.shared.mcas.as_deref(),
            thread.slot_index(),
            word,
            current,
            new,
        )
    }

    /// The store of [`HwccUser::cas`]'s mechanism.
    #[inline]
    pub fn store(&self, thread: &ThreadHandle, word: &AtomicU64, value: u64) {
        self.debug_assert_inside(word);
        crate::mcas::store_word(self.shared.mcas.as_deref(), thread.slot_index(), word, value);
    }

    /// A fresh load of a word of the area: plain in `hardware` and `limited` (HWcc memory);
    /// in `mcas` the line is evicted first, as `flush-cas` does before each request, so no
    /// stale cached copy is read.
    #[inline]
    pub fn load(&self, word: &AtomicU64) -> u64 {
        self.debug_assert_inside(word);
        if self.shared.geometry.coherence == Coherence::Mcas {
            Coherence::Mcas.invalidate((word as *const AtomicU64).cast(), 8);
        }
        word.load(Ordering::Acquire)
    }

    #[inline]
    fn debug_assert_inside(&self, word: &AtomicU64) {
        if cfg!(debug_assertions) {
            let base = self.shared.mapping.base() as usize;
            let at = (word as *const AtomicU64 as usize).wrapping_sub(base) as u64;
            debug_assert!(
                self.range().contains(&at),
                "word at heap offset {at} is outside the user's HWcc area {:?}",
                self.range()
            );
        }
    }
}
