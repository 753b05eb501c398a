//! Slab morphing (after NVAlloc §5.2): a sparse sized slab of one class is made to serve
//! another while its few old blocks stay valid until they are freed.
//!
//! # A morphing slab
//! Its `meta` names the new class as its class and the old class in its morph byte
//! ([`crate::slab::Meta::old`]). Its bitset holds two sets:
//! - words `0..words(new)`: the owner's free bits of the new class, as in any sized slab;
//!   a new block that overlaps an old block still in use is *blocked*: its bit is clear, so it
//!   is never allocated;
//! - the top `words(old)` words ([`Morph::old_at`]): the old set, bit `i` set when old block
//!   `i` was in use (its free bit clear) when the slab morphed. It never changes until the
//!   slab is sized again, save that the owner clears the bit of an old block it frees itself
//!   ([`Morph::forget`]), so any thread may read it (after an invalidation under SWcc).
//!
//! A free of an offset that starts an old block of the old set is an old block's free. Any
//! other offset must be a new block. No new block starting at an old set block can be live
//! (it would be blocked), so the two never mix up; and a freer that reads a cleared bit stale
//! takes a new block there for an old one, which it counts on the remote word just the same.
//! - **The owner frees an old block** (`thread/morph.rs`, `free_old`): as NVAlloc gives back
//!   the space under an old block when it goes, the old set forgets the block and the new
//!   blocks it alone blocked come free at once ([`Morph::unblock`]); one detectable CAS moves
//!   the remote count by their number less one. When the last old block goes the slab is an
//!   ordinary one of its new class again (the morph byte is cleared, its frees take the fast
//!   path).
//! - **Another thread frees an old block**: it counts it on the remote word, as any remote
//!   free. The owner cannot tell which old block went, so the new blocks over it stay
//!   blocked until the slab drains.
//!
//! The remote word keeps CXLALLOC's invariant `count == free bits + live blocks` (old and
//! new) throughout, so a detached or disowned morphing slab is taken by its last free like
//! any other.
//!
//! # Which slab, and when
//! When the owner needs a slab for a class and its unsized list is empty, it looks (at most
//! [`COUNT_SCAN_MAX`] slabs) through its sized lists of other classes, behind their heads
//! (which their classes allocate from), for a slab at most [`OCCUPANCY_MAX_PERCENT`] in use
//! (by its clear bits) whose morph leaves at least half the new class's blocks free, and
//! whose two sets fit the bitset ([`Morph::fits`]); slabs that morph already are skipped.
//! `thread/morph.rs` makes the move, logged and recoverable.

use crate::class::Classes;
use crate::slab::{allocatable, phantom_bits, SlabDesc, COUNT_BITSET_WORDS};
use podkv_hw::sync::Ordering::Relaxed;

/// A slab morphs only when at most this share of its blocks is in use (NVAlloc's 20%).
pub const OCCUPANCY_MAX_PERCENT: u32 = 20;
/// Most slabs one search for a slab to morph looks at.
pub const COUNT_SCAN_MAX: u32 = 64;

/// The shapes of a morph: the new class's and the old class's block size and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Morph {
    /// New class's block size.
    pub size_new: u32,
    /// New class's blocks per slab.
    pub count_new: u32,
    /// Old class's block size.
    pub size_old: u32,
    /// Old class's blocks per slab.
    pub count_old: u32,
}

const fn words(count: u32) -> usize {
    count.div_ceil(64) as usize
}

impl Morph {
    /// The morph of a slab of class `old` into class `class`, if both are classes of
    /// `classes`, differ, and their sets fit the bitset ([`Morph::fits`]).
    pub fn of(classes: &Classes, class: usize, old: usize) -> Option<Morph> {
        if class >= classes.len || old >= classes.len || class == old {
            return None;
        }
        let morph = Morph {
            size_new: classes.size[class],
            count_new: classes.count[class],
            size_old: classes.size[old],
            count_old: classes.count[old],
        };
        morph.fits().then_some(morph)
    }

    /// New blocks one old block overlaps, on average over its place in the slab, times 1024:
    /// `(size_old + size_new - gcd) / size_new`. 1024 when old blocks tile new ones (104 B
    /// under 208 B), up to twice that when they straddle their edges.
    pub const fn span(&self) -> u32 {
        let (mut a, mut b) = (self.size_old, self.size_new);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        ((self.size_old + self.size_new - a) as u64 * 1024 / self.size_new as u64) as u32
    }

    /// Whether the old set fits the top of the bitset without touching the old class's free
    /// bits (so the old set is written before anything else changes) or the new class's.
    pub const fn fits(&self) -> bool {
        let old = words(self.count_old);
        2 * old <= COUNT_BITSET_WORDS && words(self.count_new) + old <= COUNT_BITSET_WORDS
    }

    /// The first bitset word of the old set.
    pub const fn old_at(&self) -> usize {
        COUNT_BITSET_WORDS - words(self.count_old)
    }

    /// Whether old block `i` is in the old set of `desc`.
    #[inline]
    pub fn old_in_use(&self, desc: &SlabDesc, i: u32) -> bool {
        i < self.count_old
            && desc.bits[self.old_at() + (i / 64) as usize].load(Relaxed) & 1 << (i % 64) != 0
    }

    /// The old block starting at byte `in_slab` of the slab, if it is in the old set.
    #[inline]
    pub fn old_block(&self, desc: &SlabDesc, in_slab: u64) -> Option<u32> {
        let size = u64::from(self.size_old);
        let i = (in_slab / size) as u32;
        (in_slab % size == 0 && self.old_in_use(desc, i)).then_some(i)
    }

    /// Whether any of old blocks `first..=last` is in the old set of `desc` (a new block over
    /// them is blocked): whole-word tests, for the owner's free path (`thread/morph.rs`).
    #[inline]
    pub fn any_old_in_use(&self, desc: &SlabDesc, first: u32, last: u32) -> bool {
        let last = last.min(self.count_old.saturating_sub(1));
        let at = self.old_at();
        let (low, high) = (u64::MAX << (first % 64), u64::MAX >> (63 - last % 64));
        if first / 64 == last / 64 {
            // `first > last` in one word leaves no bit in the mask.
            let mask = if first > last { 0 } else { low & high };
            return desc.bits[at + (first / 64) as usize].load(Relaxed) & mask != 0;
        }
        first < last && self.any_old_in_words(desc, first / 64, last / 64, low, high)
    }

    /// [`Morph::any_old_in_use`] over several words: the first and last by their masks, the
    /// words between whole.
    #[cold]
    fn any_old_in_words(&self, desc: &SlabDesc, first: u32, last: u32, low: u64, high: u64) -> bool {
        let word = |w: u32| desc.bits[self.old_at() + w as usize].load(Relaxed);
        word(first) & low != 0 || (first + 1..last).any(|w| word(w) != 0) || word(last) & high != 0
    }

    /// Whether any block is left in the old set.
    pub fn any_old_set(&self, desc: &SlabDesc) -> bool {
        desc.bits[self.old_at()..].iter().any(|w| w.load(Relaxed) != 0)
    }

    /// Whether new block `j` overlaps an old block for which `in_use` says yes.
    fn blocked_by(&self, j: u32, in_use: impl Fn(u32) -> bool) -> bool {
        let (size_new, size_old) = (u64::from(self.size_new), u64::from(self.size_old));
        let first = (u64::from(j) * size_new / size_old) as u32;
        let last = ((u64::from(j + 1) * size_new - 1) / size_old) as u32;
        (first..=last.min(self.count_old.saturating_sub(1))).any(in_use)
    }

    /// Whether new block `j` overlaps an old block of the old set.
    pub fn blocked(&self, desc: &SlabDesc, j: u32) -> bool {
        self.blocked_by(j, |i| self.old_in_use(desc, i))
    }

    /// The new class's free bits word `w` when `in_use` names the old blocks in use: every
    /// unblocked block free, phantom bits set.
    fn carved_word(&self, w: usize, in_use: &impl Fn(u32) -> bool) -> u64 {
        let mut word = !allocatable(self.count_new, w);
        for b in 0..64u32 {
            let j = w as u32 * 64 + b;
            if j < self.count_new && !self.blocked_by(j, in_use) {
                word |= 1 << b;
            }
        }
        word
    }

    /// New blocks a morph of `desc` (a sized slab of the old class, not yet morphing) would
    /// leave free.
    pub fn preview_free(&self, desc: &SlabDesc) -> u32 {
        let in_use = |i: u32| desc.bits[(i / 64) as usize].load(Relaxed) & 1 << (i % 64) == 0;
        (0..words(self.count_new))
            .map(|w| self.carved_word(w, &in_use).count_ones())
            .sum::<u32>()
            - phantom_bits(self.count_new)
    }

    /// Writes the old set: the old class's clear free bits, at the top of the bitset. The old
    /// class's free bits are not touched ([`Morph::fits`]).
    pub fn write_old(&self, desc: &SlabDesc) {
        for w in 0..words(self.count_old) {
            let free = desc.bits[w].load(Relaxed);
            let in_use = !free & allocatable(self.count_old, w);
            desc.bits[self.old_at() + w].store(in_use, Relaxed);
        }
    }

    /// Undoes [`Morph::write_old`] of a slab that did not morph: the words return to zero.
    pub fn clear_old(&self, desc: &SlabDesc) {
        for word in &desc.bits[self.old_at()..] {
            word.store(0, Relaxed);
        }
    }

    /// Writes the new class's free bits from the old set (every unblocked block free) and
    /// clears the words between the two sets; returns the free blocks. Idempotent: it reads
    /// only the old set.
    pub fn carve(&self, desc: &SlabDesc) -> u32 {
        let in_use = |i: u32| self.old_in_use(desc, i);
        let mut free = 0;
        for w in 0..words(self.count_new) {
            let word = self.carved_word(w, &in_use);
            free += word.count_ones();
            desc.bits[w].store(word, Relaxed);
        }
        for word in &desc.bits[words(self.count_new)..self.old_at()] {
            word.store(0, Relaxed);
        }
        free - phantom_bits(self.count_new)
    }

    /// Forgets old block `i`, freed by the slab's owner: its old-set bit is cleared. Only the
    /// owner writes the old set after the morph; a freer reading the bit stale only treats the
    /// offset as an old block, which it counts on the remote word as it would a new one.
    pub fn forget(&self, desc: &SlabDesc, i: u32) {
        let word = &desc.bits[self.old_at() + (i / 64) as usize];
        word.store(word.load(Relaxed) & !(1 << (i % 64)), Relaxed);
    }

    /// The new blocks over old block `i` that no old block of the set blocks any more
    /// (after [`Morph::forget`]) become free; returns how many. Idempotent: such a block was
    /// blocked by `i` until then, so it was never allocated, and nothing is allocated from the
    /// slab before the owner's next logged step.
    pub fn unblock(&self, desc: &SlabDesc, i: u32) -> u32 {
        let (size_new, size_old) = (u64::from(self.size_new), u64::from(self.size_old));
        let first = (u64::from(i) * size_old / size_new) as u32;
        let last = ((u64::from(i + 1) * size_old - 1) / size_new) as u32;
        let mut freed = 0;
        for j in first..=last.min(self.count_new - 1) {
            if !self.blocked(desc, j) {
                let word = &desc.bits[(j / 64) as usize];
                word.store(word.load(Relaxed) | 1 << (j % 64), Relaxed);
                freed += 1;
            }
        }
        freed
    }

    /// Blocks in the old set.
    pub fn count_old_set(&self, desc: &SlabDesc) -> u32 {
        desc.bits[self.old_at()..]
            .iter()
            .map(|w| w.load(Relaxed).count_ones())
            .sum()
    }

    /// What breaks a morphing slab's bitset rules, for the checker: a free bit on a blocked
    /// block or missing phantom bits, a bit between the sets, an old-set bit past the old
    /// class's blocks.
    pub fn problem(&self, desc: &SlabDesc) -> Option<String> {
        for w in 0..words(self.count_new) {
            let word = desc.bits[w].load(Relaxed);
            if word | allocatable(self.count_new, w) != u64::MAX {
                return Some(format!("new-class word {w} lacks phantom bits"));
            }
            let free = word & allocatable(self.count_new, w);
            for b in (0..64u32).filter(|b| free & 1 << b != 0) {
                if self.blocked(desc, w as u32 * 64 + b) {
                    return Some(format!("new block {} is free but blocked", w * 64 + b as usize));
                }
            }
        }
        if desc.bits[words(self.count_new)..self.old_at()]
            .iter()
            .any(|w| w.load(Relaxed) != 0)
        {
            return Some("bits between the new class's and the old set".to_owned());
        }
        (0..words(self.count_old))
            .find(|&w| {
                desc.bits[self.old_at() + w].load(Relaxed) & !allocatable(self.count_old, w) != 0
            })
            .map(|w| format!("old-set word {w} has bits past the old class's blocks"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::SMALL;

    fn desc() -> Box<SlabDesc> {
        // SAFETY: a descriptor is plain atomics, for which all-zero is a valid value (rule 3).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    fn class_of(size: usize) -> usize {
        SMALL.class_for(size, 8).unwrap()
    }

    #[test]
    fn the_smallest_class_never_morphs_and_mid_classes_fit_both_ways() {
        let (c8, c48, c104, c1024) = (class_of(8), class_of(48), class_of(100), class_of(1024));
        assert!(Morph::of(&SMALL, c48, c8).is_none(), "8 B blocks fill the bitset");
        assert!(Morph::of(&SMALL, c8, c48).is_none());
        assert!(Morph::of(&SMALL, c48, c48).is_none());
        for (a, b) in [(c48, c104), (c104, c48), (c104, c1024), (c1024, c104)] {
            assert!(Morph::of(&SMALL, a, b).is_some(), "{a} from {b}");
        }
    }

    #[test]
    fn old_blocks_that_tile_the_new_ones_span_the_fewest() {
        let tiled = Morph::of(&SMALL, class_of(208), class_of(104)).unwrap();
        let straddling = Morph::of(&SMALL, class_of(240), class_of(144)).unwrap();
        assert_eq!(tiled.span(), 1024);
        assert_eq!(straddling.span(), (144 + 240 - 48) * 1024 / 240);
        assert!(straddling.span() > tiled.span());
    }

    #[test]
    fn a_morph_blocks_exactly_the_new_blocks_over_old_blocks_in_use() {
        let (old, new) = (class_of(48), class_of(100));
        let m = Morph::of(&SMALL, new, old).unwrap();
        let d = desc();
        d.fill_bits(m.count_old);
        let in_use = [0u32, 1, 500, m.count_old - 1];
        for &i in &in_use {
            d.bits[(i / 64) as usize].fetch_and(!(1 << (i % 64)), Relaxed);
        }
        let preview = m.preview_free(&d);
        m.write_old(&d);
        assert_eq!(m.count_old_set(&d), in_use.len() as u32);
        let free = m.carve(&d);
        assert_eq!(free, preview);
        assert_eq!(d.count_free(m.count_new), free);
        assert_eq!(m.problem(&d), None);
        for j in 0..m.count_new {
            let start = u64::from(j) * u64::from(m.size_new);
            let end = start + u64::from(m.size_new);
            let overlaps = in_use.iter().any(|&i| {
                let (s, e) = (u64::from(i) * 48, u64::from(i + 1) * 48);
                s < end && start < e
            });
            let bit = d.bits[(j / 64) as usize].load(Relaxed) & 1 << (j % 64) != 0;
            assert_eq!(bit, !overlaps, "new block {j}");
        }
        for &i in &in_use {
            assert_eq!(m.old_block(&d, u64::from(i) * 48), Some(i));
        }
        assert_eq!(m.old_block(&d, 2 * 48), None, "free when the slab morphed");
        assert_eq!(m.old_block(&d, 1), None, "inside a block");
        assert_eq!(m.carve(&d), free, "carving again changes nothing");
        for first in 0..m.count_old + 2 {
            for last in first.saturating_sub(1)..(first + 70).min(m.count_old + 2) {
                let slow = (first..=last.min(m.count_old - 1)).any(|i| m.old_in_use(&d, i));
                assert_eq!(m.any_old_in_use(&d, first, last), slow, "{first}..={last}");
            }
        }
        m.clear_old(&d);
        assert_eq!(m.count_old_set(&d), 0);
    }
}
