//! Epoch-based reclamation across processes (after crossbeam-epoch, CXLALLOC §5.2.1).
//!
//! # Words (all in the heap)
//! - the **global epoch** (descriptor): advanced by one CAS by any thread; read by pinners;
//! - one **announcement** per thread slot: `epoch << 1 | PINNED` while the slot's thread is
//!   inside an operation, zero otherwise. Written only by the slot's owner (and, once, by the
//!   recovery of a dead owner, see `recover`); read by advancers;
//! - one **limbo list** per slot (`limbo`): retired nodes with the epoch they were retired in.
//!   Written only by the slot's owner; a new owner of the slot inherits it, so garbage of a
//!   thread that exits or dies is never lost.
//!
//! # Rule
//! A node unlinked and retired when the global epoch was `r` is freed once the global epoch is
//! `r + 2` or more ([`is_reclaimable`]): the advance `r+1 → r+2` needs every pinned slot to have
//! announced `r+1`, i.e. to have pinned after the node was unreachable.
//!
//! A slot that is not pinned (including a released slot, whose announcement its handle zeroed on
//! drop) never holds the epoch back. A slot pinned by a *dead* owner would; store recovery
//! (`Map::recover_dead`, see `recover`) zeroes its announcement once it has settled the slot.
//!
//! These functions are written over `&AtomicU64` so `tests/loom.rs` checks them as they are.
//! How the words are read and changed is a [`Words`]: [`Cpu`] atomics for HWcc memory (and
//! loom), or the heap's hook in an `mcas` heap (the store's `Shared`), whose announcements and
//! epoch are not coherent and change only by mCAS.

use podkv_hw::sync::{fence, AtomicU64, Ordering};

/// Bit 0 of an announcement: the slot is pinned.
pub const PINNED: u64 = 1;

/// How the epoch's words are read and changed (see the module doc).
pub trait Words {
    /// A load of `word` with (at least) ordering `order`, fresh from memory.
    fn load(&self, word: &AtomicU64, order: Ordering) -> u64;
    /// A load of `word` that may return an older value than memory holds now (a cached
    /// copy: in an `mcas` heap, without the eviction a fresh load pays); at least as new as
    /// this thread's last fresh load of it.
    fn load_cached(&self, word: &AtomicU64, order: Ordering) -> u64 {
        self.load(word, order)
    }
    /// `word = value`, then a full fence: later loads are ordered after the store.
    fn store_fenced(&self, word: &AtomicU64, value: u64);
    /// `word = value`, with release ordering.
    fn store(&self, word: &AtomicU64, value: u64);
    /// The CAS of `word`: `Ok(previous)` on success, `Err(found)`.
    fn cas(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64>;
}

/// CPU atomics on coherent memory.
#[derive(Clone, Copy, Debug)]
pub struct Cpu;

impl Words for Cpu {
    #[inline]
    fn load(&self, word: &AtomicU64, order: Ordering) -> u64 {
        word.load(order)
    }

    /// On x86-64 a locked `xchg` is a full barrier and cheaper than `mfence` (crossbeam-epoch's
    /// `pin` makes the same choice); loom and other targets get the portable store + `SeqCst`
    /// fence.
    #[inline]
    fn store_fenced(&self, word: &AtomicU64, value: u64) {
        #[cfg(all(target_arch = "x86_64", not(podkv_loom)))]
        word.swap(value, Ordering::SeqCst);
        #[cfg(not(all(target_arch = "x86_64", not(podkv_loom))))]
        {
            word.store(value, Ordering::Relaxed);
            fence(Ordering::SeqCst);
        }
    }

    #[inline]
    fn store(&self, word: &AtomicU64, value: u64) {
        word.store(value, Ordering::Release);
    }

    #[inline]
    fn cas(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        word.compare_exchange(current, new, Ordering::Release, Ordering::Relaxed)
    }
}

/// Pins: announces the current global epoch. Returns the epoch announced.
#[inline]
pub fn pin(global: &AtomicU64, announce: &AtomicU64) -> u64 {
    pin_with(&Cpu, global, announce)
}

/// [`pin`] through `words`.
#[inline]
pub fn pin_with(words: &impl Words, global: &AtomicU64, announce: &AtomicU64) -> u64 {
    let epoch = words.load(global, Ordering::Relaxed);
    words.store_fenced(announce, epoch << 1 | PINNED);
    epoch
}

/// [`pin_with`] announcing the epoch as this thread's cache has it ([`Words::load_cached`]).
///
/// Safe with any epoch the global word once held: an announcement below the global epoch
/// only holds advancing back (an advancer needs every pinned slot to announce the current
/// one), and the rule's proof needs only that a pin announcing `r + 1` loaded it after the
/// epoch became `r + 1`, which any load of that value did. Not live alone: a thread whose
/// cached copy never refreshes would hold the epoch back at every pin, so callers pin with
/// a fresh load now and then (`Reclaim::pin`).
#[inline]
pub fn pin_cached_with(words: &impl Words, global: &AtomicU64, announce: &AtomicU64) -> u64 {
    let epoch = words.load_cached(global, Ordering::Relaxed);
    words.store_fenced(announce, epoch << 1 | PINNED);
    epoch
}

/// Unpins: nothing this slot read while pinned is used afterwards.
#[inline]
pub fn unpin(announce: &AtomicU64) {
    unpin_with(&Cpu, announce);
}

/// [`unpin`] through `words`.
#[inline]
pub fn unpin_with(words: &impl Words, announce: &AtomicU64) {
    words.store(announce, 0);
}

/// The epoch to stamp a node unlinked just now with.
#[inline]
pub fn retire_epoch(global: &AtomicU64) -> u64 {
    retire_epoch_with(&Cpu, global)
}

/// [`retire_epoch`] through `words`.
#[inline]
pub fn retire_epoch_with(words: &impl Words, global: &AtomicU64) -> u64 {
    words.load(global, Ordering::SeqCst)
}

/// Advances the global epoch by one if every pinned slot has announced it; returns the global
/// epoch afterwards.
pub fn try_advance<'a>(
    global: &AtomicU64,
    announcements: impl IntoIterator<Item = &'a AtomicU64>,
) -> u64 {
    try_advance_with(&Cpu, global, announcements)
}

/// [`try_advance`] through `words`.
pub fn try_advance_with<'a>(
    words: &impl Words,
    global: &AtomicU64,
    announcements: impl IntoIterator<Item = &'a AtomicU64>,
) -> u64 {
    let epoch = advance_begin(words, global);
    for a in announcements {
        if holds_back(words, a, epoch) {
            return epoch;
        }
    }
    advance_end(words, global, epoch)
}

/// The first step of [`try_advance_with`], for a caller that scans the announcements its own
/// way: the epoch to advance from, read before the fence that every announcement read must
/// follow.
#[inline]
pub fn advance_begin(words: &impl Words, global: &AtomicU64) -> u64 {
    let epoch = words.load(global, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    epoch
}

/// Whether announcement `a`, read after [`advance_begin`], holds the global epoch at `epoch`
/// (a pin announced in an older epoch).
#[inline]
pub fn holds_back(words: &impl Words, a: &AtomicU64, epoch: u64) -> bool {
    let word = words.load(a, Ordering::Relaxed);
    word & PINNED != 0 && word >> 1 != epoch
}

/// The last step of [`try_advance_with`], once no announcement held `epoch` back: the advance
/// to `epoch + 1`; the global epoch afterwards.
#[inline]
pub fn advance_end(words: &impl Words, global: &AtomicU64, epoch: u64) -> u64 {
    fence(Ordering::Acquire);
    match words.cas(global, epoch, epoch + 1) {
        Ok(_) => epoch + 1,
        Err(now) => now,
    }
}

/// Whether a node retired in epoch `retired` may be freed when the global epoch is `global`.
#[inline]
pub fn is_reclaimable(retired: u64, global: u64) -> bool {
    global >= retired + 2
}
