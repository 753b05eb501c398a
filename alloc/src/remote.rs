//! The remote-free counter: a slab's only HWcc word (CXLALLOC §3.2.1).
//!
//! # The word
//! `count` (bits 0..32) counts *down* from the slab's block count: one remote free takes one.
//! Local frees never touch it, so for a slab the invariant is
//!
//! ```text
//! count == free_bits + live          (free_bits: set bits in the owner's bitset)
//! ```
//!
//! `DETACHED` (bit 32) says the owner has given up the right to notice the slab emptying:
//! whoever takes `count` to zero now owns the slab. The owner sets it when the slab fills
//! (nothing left to allocate, so every block is live and `count == live`; if that is already
//! zero the owner simply keeps the empty slab), and clears it again
//! if it frees one of the slab's blocks locally before that happens; `count >= 1` throughout,
//! because the owner's own block is still counted. A slab given up with free bits left
//! (*disowned*) folds those bits into the count in the same CAS that sets `DETACHED`.
//!
//! Every change is one atomic read-modify-write, so a thread that dies between two of them
//! leaves the word consistent; no operation waits for another.

use podkv_hw::sync::{AtomicU64, Ordering};

/// Bit set while whoever frees the last block takes the slab.
pub const DETACHED: u64 = 1 << 32;
/// The count's bits.
pub const MASK_COUNT: u64 = u32::MAX as u64;

/// The count part of a remote word.
#[inline]
pub const fn count(word: u64) -> u32 {
    (word & MASK_COUNT) as u32
}

/// What a remote free did to the slab.
#[must_use]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum RemoteFree {
    /// The block is counted; the slab has live blocks left, or an owner who will notice.
    Counted,
    /// The freed block was the last live one of a detached or disowned slab: the caller owns
    /// the slab now and must take it (reset it and put it on one of its lists).
    TookSlab,
}

/// Frees one block remotely: one atomic decrement.
#[inline]
pub fn free_remote(word: &AtomicU64) -> RemoteFree {
    let prev = word.fetch_sub(1, Ordering::AcqRel);
    debug_assert!(count(prev) != 0, "remote free on a slab with no live block");
    if count(prev) == 1 && prev & DETACHED != 0 {
        RemoteFree::TookSlab
    } else {
        RemoteFree::Counted
    }
}

/// Starts a sizing: every block free, no remote free yet. Only for a slab with no live block,
/// which no other thread can reach.
#[inline]
pub fn reset(word: &AtomicU64, capacity: u32) {
    word.store(u64::from(capacity), Ordering::Release);
}

/// The owner filled the slab (no free bit): from now on the last free takes it. Returns the
/// count at that moment: the slab's live blocks. Zero means remote frees already took every
/// block back; the owner keeps the slab then (nobody else can reach it).
#[inline]
pub fn detach(word: &AtomicU64) -> u32 {
    let prev = word.fetch_or(DETACHED, Ordering::AcqRel);
    debug_assert!(prev & DETACHED == 0, "detaching a detached slab");
    count(prev)
}

/// The owner freed a block of its detached slab locally: the slab is its own again.
#[inline]
pub fn reattach(word: &AtomicU64) {
    let prev = word.fetch_and(!DETACHED, Ordering::AcqRel);
    debug_assert!(
        prev & DETACHED != 0 && count(prev) >= 1,
        "reattaching a slab not detached"
    );
}

/// What giving up a slab with free bits did.
#[must_use]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Disown {
    /// Live blocks remain; the last remote free will take the slab.
    Disowned,
    /// No live block remained: the caller still owns the (empty) slab.
    Empty,
}

/// Gives up a slab that still has `free_bits` unallocated blocks: they count as freed, and
/// `DETACHED` is set, in one CAS.
pub fn disown(word: &AtomicU64, free_bits: u32) -> Disown {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        debug_assert!(count(cur) >= free_bits, "count below the owner's free bits");
        let left = count(cur) - free_bits;
        let new = if left == 0 {
            0
        } else {
            u64::from(left) | DETACHED
        };
        match word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) if left == 0 => return Disown::Empty,
            Ok(_) => return Disown::Disowned,
            Err(seen) => cur = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_remote_free_of_a_detached_slab_takes_it() {
        let word = AtomicU64::new(0);
        reset(&word, 3);
        assert_eq!(detach(&word), 3);
        assert_eq!(free_remote(&word), RemoteFree::Counted);
        assert_eq!(free_remote(&word), RemoteFree::Counted);
        assert_eq!(free_remote(&word), RemoteFree::TookSlab);
    }

    #[test]
    fn an_attached_slab_is_never_taken() {
        let word = AtomicU64::new(0);
        reset(&word, 2);
        // Owner still holds a free bit, so count stays >= 1 after every live block is freed.
        assert_eq!(free_remote(&word), RemoteFree::Counted);
        assert_eq!(count(word.load(Ordering::Relaxed)), 1);
    }

    #[test]
    fn reattach_keeps_the_count() {
        let word = AtomicU64::new(0);
        reset(&word, 4);
        let _ = detach(&word);
        let _ = free_remote(&word);
        reattach(&word);
        assert_eq!(word.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn disown_folds_free_bits_in() {
        let word = AtomicU64::new(0);
        reset(&word, 10);
        let _ = free_remote(&word); // 9 = 6 free bits + 3 live
        assert_eq!(disown(&word, 6), Disown::Disowned);
        assert_eq!(word.load(Ordering::Relaxed), 3 | DETACHED);
        let word = AtomicU64::new(5);
        assert_eq!(disown(&word, 5), Disown::Empty);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }
}
