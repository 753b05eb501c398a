//! The remote-free counter: a slab's only HWcc word (CXLALLOC §3.2.1).
//!
//! # The word
//! A detectable word ([`crate::dcas`]) whose payload is `count` (bits 0..31) and `DETACHED`
//! (bit 31). `count` counts *down* from the slab's block count: one remote free takes one.
//! Local frees never touch it, so for a slab the invariant is
//!
//! ```text
//! count == free_bits + live          (free_bits: set bits in the owner's bitset)
//! ```
//!
//! `DETACHED` says the owner has given up the right to notice the slab emptying: whoever takes
//! `count` to zero now owns the slab. The owner sets it when the slab fills (nothing left to
//! allocate, so every block is live and `count == live`; if that is already zero the owner
//! simply keeps the empty slab), and clears it again if it frees one of the slab's blocks
//! locally before that happens; `count >= 1` throughout, because the owner's own block is still
//! counted. A slab given up with free bits left (*disowned*) folds those bits into the count in
//! the same CAS that sets `DETACHED`.
//!
//! Every change is one detectable CAS, so a thread that dies between two of them leaves the
//! word consistent, a recoverer can tell whether its last change took effect (and, from the
//! payload its CAS wrote, whether it took the slab), and no operation waits for another.

use crate::dcas::{self, Writer};
use podkv_hw::sync::{AtomicU64, Ordering};

/// Payload bit set while whoever frees the last block takes the slab.
pub const DETACHED: u32 = 1 << 31;
/// The count's bits in the payload.
pub const MASK_COUNT: u32 = DETACHED - 1;

/// The count part of a remote word.
#[inline]
pub const fn count(word: u64) -> u32 {
    dcas::payload(word) & MASK_COUNT
}

/// Whether a remote word is detached.
#[inline]
pub const fn is_detached(word: u64) -> bool {
    dcas::payload(word) & DETACHED != 0
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

/// Whether a payload written by a remote free means the freer took the slab.
#[inline]
pub const fn took_slab(payload: u32) -> bool {
    payload == DETACHED
}

/// Applies `change` to the payload by detectable CAS until it sticks; returns the payload
/// before and after.
#[inline]
fn update(word: &AtomicU64, writer: &impl Writer, change: impl Fn(u32) -> u32) -> (u32, u32) {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        let new = change(dcas::payload(cur));
        podkv_hw::cas_site!("alloc.remote.update.cas");
        match dcas::cas(word, cur, new, writer) {
            Ok(_) => return (dcas::payload(cur), new),
            Err(seen) => cur = seen,
        }
    }
}

/// Frees one block remotely: one detectable decrement.
#[inline]
pub fn free_remote(word: &AtomicU64, writer: &impl Writer) -> RemoteFree {
    free_remote_n(word, 1, writer)
}

/// Frees `n` blocks of one slab remotely (a flushed batch): one detectable subtraction.
#[inline]
pub fn free_remote_n(word: &AtomicU64, n: u32, writer: &impl Writer) -> RemoteFree {
    let (prev, new) = update(word, writer, |p| {
        debug_assert!(
            p & MASK_COUNT >= n,
            "remote free of {n} blocks on a slab with fewer live"
        );
        p.wrapping_sub(n)
    });
    debug_assert!(prev & MASK_COUNT >= n);
    if took_slab(new) {
        RemoteFree::TookSlab
    } else {
        RemoteFree::Counted
    }
}

/// Starts a sizing: every block free, no remote free yet. Only for a slab with no live block,
/// which no other thread can reach (a plain store, after acknowledging the last writer). A
/// word that already says exactly that (the slab was last sized with the same capacity and
/// emptied) is left as it is: nobody can change it before the slab is sized, so there is
/// nothing to write, and in an `mcas` heap no request to send.
#[inline]
pub fn reset(word: &AtomicU64, capacity: u32, writer: &impl Writer) {
    let current = word.load(Ordering::Acquire);
    if dcas::payload(current) == capacity {
        return;
    }
    let previous = dcas::tag(current);
    let me = writer.tag();
    if previous.tid != 0 && previous.tid != me.tid {
        writer.acknowledge(previous);
    }
    writer.store_word(word, dcas::pack(capacity, me));
}

/// The owner filled the slab (no free bit): from now on the last free takes it. Returns the
/// count at that moment: the slab's live blocks. Zero means remote frees already took every
/// block back; the owner keeps the slab then (nobody else can reach it).
#[inline]
pub fn detach(word: &AtomicU64, writer: &impl Writer) -> u32 {
    let (prev, _) = update(word, writer, |p| {
        debug_assert!(p & DETACHED == 0, "detaching a detached slab");
        p | DETACHED
    });
    prev & MASK_COUNT
}

/// The owner freed a block of its detached slab locally: the slab is its own again.
#[inline]
pub fn reattach(word: &AtomicU64, writer: &impl Writer) {
    let (prev, _) = update(word, writer, |p| p & !DETACHED);
    debug_assert!(
        prev & DETACHED != 0 && prev & MASK_COUNT >= 1,
        "reattaching a slab not detached"
    );
}

/// The owner morphed a sized slab (`crate::morph`): its `free_old` free bits of the old class
/// gave way to `free_new` free bits of the new class. One CAS, so remote frees counted before
/// or after it stay counted: `count == free_bits + live` holds across the morph.
#[inline]
pub fn rebase(word: &AtomicU64, free_old: u32, free_new: u32, writer: &impl Writer) {
    update(word, writer, |p| {
        debug_assert!(
            p & DETACHED == 0 && p & MASK_COUNT >= free_old,
            "morphing a detached slab or one with fewer blocks than free bits"
        );
        p - free_old + free_new
    });
}

/// The owner freed an old block of its morphing slab (`crate::morph`) and `freed` new blocks
/// it alone blocked came free: one live block less, `freed` free bits more, in one CAS. With
/// none freed it is a free like any other: the last live block of a detached slab takes it.
/// With some freed a detached slab keeps `count >= freed >= 1`, so no remote free takes it
/// before the owner reattaches it.
#[inline]
pub fn unblock(word: &AtomicU64, freed: u32, writer: &impl Writer) -> RemoteFree {
    let (_, new) = update(word, writer, |p| {
        debug_assert!(
            p & MASK_COUNT >= 1,
            "an old block freed on a slab with none live"
        );
        p - 1 + freed
    });
    if took_slab(new) {
        RemoteFree::TookSlab
    } else {
        RemoteFree::Counted
    }
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

/// The payload disowning writes when `free_bits` of the slab's count are unallocated blocks.
#[inline]
pub const fn disowned(payload: u32, free_bits: u32) -> u32 {
    let left = (payload & MASK_COUNT) - free_bits;
    if left == 0 {
        0
    } else {
        left | DETACHED
    }
}

/// Gives up a slab that still has `free_bits` unallocated blocks: they count as freed, and
/// `DETACHED` is set, in one CAS.
pub fn disown(word: &AtomicU64, free_bits: u32, writer: &impl Writer) -> Disown {
    let (_, new) = update(word, writer, |p| {
        debug_assert!(
            p & MASK_COUNT >= free_bits,
            "count below the owner's free bits"
        );
        disowned(p, free_bits)
    });
    if new == 0 {
        Disown::Empty
    } else {
        Disown::Disowned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcas::{Tag, Untracked};

    const W: Untracked = Untracked(Tag { tid: 1, ver: 1 });

    #[test]
    fn last_remote_free_of_a_detached_slab_takes_it() {
        let word = AtomicU64::new(0);
        reset(&word, 3, &W);
        assert_eq!(detach(&word, &W), 3);
        assert_eq!(free_remote(&word, &W), RemoteFree::Counted);
        assert_eq!(free_remote(&word, &W), RemoteFree::Counted);
        assert_eq!(free_remote(&word, &W), RemoteFree::TookSlab);
    }

    #[test]
    fn an_attached_slab_is_never_taken() {
        let word = AtomicU64::new(0);
        reset(&word, 2, &W);
        // Owner still holds a free bit, so count stays >= 1 after every live block is freed.
        assert_eq!(free_remote(&word, &W), RemoteFree::Counted);
        assert_eq!(count(word.load(Ordering::Relaxed)), 1);
    }

    #[test]
    fn reattach_keeps_the_count() {
        let word = AtomicU64::new(0);
        reset(&word, 4, &W);
        let _ = detach(&word, &W);
        let _ = free_remote(&word, &W);
        reattach(&word, &W);
        assert_eq!(dcas::payload(word.load(Ordering::Relaxed)), 3);
    }

    #[test]
    fn disown_folds_free_bits_in() {
        let word = AtomicU64::new(0);
        reset(&word, 10, &W);
        let _ = free_remote(&word, &W); // 9 = 6 free bits + 3 live
        assert_eq!(disown(&word, 6, &W), Disown::Disowned);
        assert_eq!(dcas::payload(word.load(Ordering::Relaxed)), 3 | DETACHED);
        let word = AtomicU64::new(5);
        assert_eq!(disown(&word, 5, &W), Disown::Empty);
        assert_eq!(dcas::payload(word.load(Ordering::Relaxed)), 0);
    }

    #[test]
    fn a_rebase_keeps_remote_frees_made_before_and_after_it() {
        let word = AtomicU64::new(0);
        reset(&word, 10, &W); // 8 free bits, 2 live
        let _ = free_remote(&word, &W); // one live block freed remotely: 9
        rebase(&word, 8, 5, &W); // 5 new free bits, 1 live
        assert_eq!(dcas::payload(word.load(Ordering::Relaxed)), 6);
        let _ = free_remote(&word, &W);
        assert_eq!(disown(&word, 5, &W), Disown::Empty);
    }

    #[test]
    fn an_old_block_freed_with_new_blocks_under_it_moves_the_count_by_them_less_one() {
        let word = AtomicU64::new(0);
        reset(&word, 10, &W); // 4 free bits, 6 live (2 of them old blocks)
        assert_eq!(unblock(&word, 3, &W), RemoteFree::Counted); // 7 free, 5 live
        assert_eq!(dcas::payload(word.load(Ordering::Relaxed)), 12);
        let word = AtomicU64::new(0);
        reset(&word, 2, &W);
        assert_eq!(detach(&word, &W), 2); // 2 live, one an old block
        assert_eq!(unblock(&word, 0, &W), RemoteFree::Counted);
        assert_eq!(unblock(&word, 0, &W), RemoteFree::TookSlab);
    }

    #[test]
    fn every_change_names_its_writer() {
        let word = AtomicU64::new(0);
        reset(&word, 2, &Untracked(Tag { tid: 4, ver: 2 }));
        let _ = free_remote(&word, &Untracked(Tag { tid: 9, ver: 5 }));
        assert_eq!(
            dcas::tag(word.load(Ordering::Relaxed)),
            Tag { tid: 9, ver: 5 }
        );
    }
}
