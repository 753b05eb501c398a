//! Slab descriptors (SWcc) and slab states (CXLALLOC §3.1.1, Figure 4).
//!
//! # States
//! | state | owner | on which list | free bits | remote word |
//! | --- | --- | --- | --- | --- |
//! | `Free` | none | global free list (or beyond `len`) | — | — |
//! | `Unsized` | a slot | the slot's unsized list | — | — |
//! | `Sized` | a slot | the slot's sized list of its class | 0..=capacity | `free_bits + live`, not detached |
//! | `Detached` | a slot | none | 0 | `live` (≥ 1), `DETACHED` |
//! | `Disowned` | none | none | folded into the count | `live` (≥ 1), `DETACHED` |
//!
//! A sized slab with no free bit is full but not yet noticed: the owner's next allocation finds
//! no free bit in a whole scan of the bitset and detaches it (so the fast paths keep no count) —
//! unless it is its class's only sized slab and nobody else has freed into it: then it stays
//! sized behind a fresh slab (at most one such per class), and its owner's frees stay local.
//!
//! Moves: `free_to_unsized` (pop global), `unsized_to_sized` (pick a class), `sized_to_detached`
//! (the owner found the slab full), `detached_to_sized` (the owner freed one locally),
//! `sized_to_unsized` (the owner freed the last live block), `unsized_to_free` (push global,
//! pages released), `sized_to_disowned` (the owner's slot is released with live blocks left),
//! and `*_to_unsized` by whoever frees the last block of a detached or disowned slab.
//!
//! A sized slab may also be *morphing* (`sized_to_morphing`, [`crate::morph`]): it serves a
//! new class while old blocks of its old class are still live. It keeps that mark (the morph
//! byte of `meta`) while detached or disowned; it loses it when it becomes unsized.
//!
//! # Fields
//! Every field is written only by the slab's owner (or, for a slab nobody owns, by the one
//! thread that just took it); `meta` is read by any freer, `links.next` by global-list poppers.
//! The owner writes the descriptor back before ownership can move (constitution rule 6).

use crate::class::COUNT_BLOCKS_MAX;
use podkv_hw::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

/// Words in a slab's free bitset.
pub const COUNT_BITSET_WORDS: usize = COUNT_BLOCKS_MAX / 64;
/// Bytes of a descriptor's head (meta, links, cursor, depth): the line other threads read.
pub const SIZE_DESC_HEAD: usize = 64;
/// Bytes of one descriptor: the head line and the bitset (1088 B).
pub const SIZE_DESC: usize = SIZE_DESC_HEAD + COUNT_BITSET_WORDS * 8;

/// A slab's state, stored in `meta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum State {
    /// On the global free list, or never used.
    Free = 0,
    /// On its owner's unsized list: no class yet.
    Unsized = 1,
    /// On its owner's sized list: has a class and at least one free block.
    Sized = 2,
    /// Full; still its owner's for local frees, and the last remote free takes it.
    Detached = 3,
    /// Given up by its owner with live blocks; the last remote free takes it.
    Disowned = 4,
}

impl State {
    fn from_u8(v: u8) -> Option<State> {
        Some(match v {
            0 => State::Free,
            1 => State::Unsized,
            2 => State::Sized,
            3 => State::Detached,
            4 => State::Disowned,
            _ => return None,
        })
    }
}

/// The `meta` bits holding a morphing slab's old class plus one ([`Meta::old`]).
pub const MASK_MORPH: u64 = 0xFF << 48;

/// A decoded `meta` word: `owner | class << 32 | state << 40 | (old + 1) << 48`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Owning slot plus one; zero when nobody owns the slab.
    pub owner: u32,
    /// Size class (meaningful in `Sized`, `Detached`, `Disowned`).
    pub class: u8,
    /// The state; `None` for a value no valid heap holds.
    pub state: Option<State>,
    /// A morphing slab's old class plus one (`crate::morph`); zero for any other slab. Its
    /// bits lie outside those the owner's fast free path compares, so every free of a
    /// morphing slab's blocks takes the slow path.
    pub old: u8,
}

impl Meta {
    /// Packs an owner, class and state.
    #[inline]
    pub const fn pack(owner: u32, class: u8, state: State) -> u64 {
        owner as u64 | (class as u64) << 32 | (state as u64) << 40
    }

    /// Unpacks a word.
    #[inline]
    pub fn unpack(word: u64) -> Meta {
        Meta {
            owner: word as u32,
            class: (word >> 32) as u8,
            state: State::from_u8((word >> 40) as u8),
            old: (word >> 48) as u8,
        }
    }
}

/// One slab's SWcc descriptor (1088 B: a 64 B head line and an 8192-bit free bitset).
#[repr(C, align(64))]
pub struct SlabDesc {
    /// Owner, class and state ([`Meta`]). Written by the owner; read by any freer.
    pub meta: AtomicU64,
    /// `next + 1` (bits 0..32) and `prev + 1` (bits 32..64) in the list holding the slab.
    /// Written by the owner (or the global-list pusher); `next` read by global-list poppers.
    pub links: AtomicU64,
    /// The bitset word where the next search starts (a hint: frees do not move it back, and a
    /// search wraps around before it calls the slab full). Owner only.
    pub cursor: AtomicU64,
    /// On a global free list: slabs from this one down, so a bounded list knows its length.
    /// Written by the pusher before its CAS.
    pub depth: AtomicU64,
    /// Bit `i` set: block `i` is free for the owner to allocate. Owner only.
    pub bits: [AtomicU64; COUNT_BITSET_WORDS],
    /// How many times the slab's data pages were released (punched): `releases << 1`. Only
    /// the slab's owner writes it, counting a release when it pushes the slab on the cold list
    /// (after punching); a backer remembers in its own process the count it read before
    /// backing a cold slab's pages, and a popper of that process skips backing while the
    /// count is unchanged ([`crate::backer`]). Bit 0 is what builds that let backers set a
    /// `backed` bit by CAS left; it is ignored and the next release clears it. It lies in
    /// what was the descriptor's end padding, so the descriptor keeps its size; zero (a fresh
    /// slab): never released.
    pub pages: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<SlabDesc>() == SIZE_DESC);

impl SlabDesc {
    /// The decoded meta word.
    #[inline]
    pub fn meta(&self) -> Meta {
        Meta::unpack(self.meta.load(Relaxed))
    }

    /// Sets owner, class and state. A slab that keeps its class (`Sized`, `Detached`,
    /// `Disowned`) keeps its morph byte ([`Meta::old`]); `Free` and `Unsized` clear it.
    #[inline]
    pub fn set_meta(&self, owner: u32, class: u8, state: State) {
        let keep = match state {
            State::Sized | State::Detached | State::Disowned => {
                self.meta.load(Relaxed) & MASK_MORPH
            }
            State::Free | State::Unsized => 0,
        };
        self.meta
            .store(Meta::pack(owner, class, state) | keep, Relaxed);
    }

    /// Makes the slab a morphing one of class `class` whose old blocks are of class `old`
    /// (`crate::morph`), sized and owned by `owner`.
    #[inline]
    pub fn set_meta_morphing(&self, owner: u32, class: u8, old: u8) {
        let word = Meta::pack(owner, class, State::Sized) | u64::from(old + 1) << 48;
        self.meta.store(word, Relaxed);
    }

    /// A morphing slab whose old blocks are all freed is an ordinary one of its class again:
    /// the morph byte is cleared, all else kept.
    pub fn end_morph(&self) {
        self.meta.store(self.meta.load(Relaxed) & !MASK_MORPH, Relaxed);
    }

    /// `next + 1` in the slab's list.
    #[inline]
    pub fn next(&self) -> u32 {
        self.links.load(Relaxed) as u32
    }

    /// `prev + 1` in the slab's list.
    #[inline]
    pub fn prev(&self) -> u32 {
        (self.links.load(Relaxed) >> 32) as u32
    }

    /// Sets both links (each `slab + 1`, zero for none).
    #[inline]
    pub fn set_links(&self, next: u32, prev: u32) {
        self.links
            .store(u64::from(next) | u64::from(prev) << 32, Relaxed);
    }

    /// Counts a release of the slab's data pages (the caller, the slab's owner, just punched
    /// them): no backer's note of them holds any more.
    #[inline]
    pub fn pages_released(&self) {
        self.pages.store((self.releases() + 1) << 1, Release);
    }

    /// How many times the slab's data pages were released.
    #[inline]
    pub fn releases(&self) -> u64 {
        self.pages.load(Acquire) >> 1
    }

    /// The search cursor.
    #[inline]
    pub fn cursor(&self) -> u32 {
        self.cursor.load(Relaxed) as u32
    }

    /// Moves the search cursor.
    #[inline]
    pub fn set_cursor(&self, cursor: u32) {
        self.cursor.store(u64::from(cursor), Relaxed);
    }

    /// Bytes at its start that its slab, of `capacity` blocks, reads and writes: the head
    /// line and the lines of the class's bitset words (the rest is zero in every state,
    /// [`SlabDesc::fill_bits`]), or all of it while the slab morphs. What the SWcc rules must
    /// carry for the slab, once the lines past it are written back (`unsized_to_sized`, a
    /// morph's end): a 512 KiB slab of 1 KiB blocks uses 2 of the descriptor's 17 lines.
    #[inline]
    pub fn in_use(&self, capacity: u32) -> usize {
        if self.meta().old != 0 {
            return SIZE_DESC;
        }
        let words = (capacity.div_ceil(64) as usize).min(COUNT_BITSET_WORDS);
        (SIZE_DESC_HEAD + words * 8).next_multiple_of(64)
    }

    /// Writes back its first `len` bytes (the SWcc writer rule; nothing under `Hardware`).
    #[inline]
    pub fn write_back(&self, coherence: podkv_hw::Coherence, len: usize) {
        coherence.write_back((self as *const SlabDesc).cast(), len);
    }

    /// Makes its first `len` bytes fresh (the SWcc reader rule; nothing under `Hardware`).
    #[inline]
    pub fn invalidate(&self, coherence: podkv_hw::Coherence, len: usize) {
        coherence.invalidate((self as *const SlabDesc).cast(), len);
    }

    /// Makes every one of `capacity` blocks free (the `unsized_to_sized` half that touches
    /// bits), with the phantom bits past the capacity set in the last word. Words past the
    /// capacity are cleared only where a larger earlier capacity left bits: a small class's
    /// sizing writes its few words, not the whole 1 KiB bitset. Whether it cleared any (under
    /// SWcc their lines must then be written back: [`SlabDesc::in_use`] leaves them out).
    pub fn fill_bits(&self, capacity: u32) -> bool {
        let words = capacity.div_ceil(64) as usize;
        let mut zeroed = false;
        for (i, word) in self.bits.iter().enumerate() {
            if i < words {
                word.store(full_word(capacity, i), Relaxed);
            } else if word.load(Relaxed) != 0 {
                word.store(0, Relaxed);
                zeroed = true;
            }
        }
        self.set_cursor(0);
        zeroed
    }

    /// Whether every one of `capacity` blocks is free.
    pub fn is_empty_of(&self, capacity: u32) -> bool {
        self.is_empty_near(capacity, 0)
    }

    /// [`SlabDesc::is_empty_of`], asked when bitset word `filled` has just become all free:
    /// its two neighbours are read first. Blocks are freed in runs (in or against allocation
    /// order), so a slab that is not empty yet almost always shows it next to the word that
    /// just filled, and the answer costs two loads instead of a scan from word 0 over every
    /// free word before the live ones (up to 128 words in a 64 KiB slab of 8 B blocks).
    pub fn is_empty_near(&self, capacity: u32, filled: usize) -> bool {
        // Words past the capacity are zero in every state (`fill_bits`), so only the
        // capacity's words are read.
        let words = (capacity.div_ceil(64) as usize).min(COUNT_BITSET_WORDS);
        let full = |i: usize| self.bits[i].load(Relaxed) == u64::MAX;
        let (after, before) = (filled + 1, filled.wrapping_sub(1));
        if (after < words && !full(after)) || (before < words && !full(before)) {
            return false;
        }
        (0..words).all(full)
    }

    /// Free blocks of a slab of `capacity` blocks: set bits of the capacity's words, less the
    /// phantom ones. (Words past them are zero, or a morphing slab's old blocks.)
    pub fn count_free(&self, capacity: u32) -> u32 {
        let words = (capacity.div_ceil(64) as usize).min(COUNT_BITSET_WORDS);
        let bits: u32 = self.bits[..words]
            .iter()
            .map(|w| w.load(Relaxed).count_ones())
            .sum();
        bits - phantom_bits(capacity)
    }

    /// Set bits in the bitset (the checker's recount of `free`).
    pub fn count_bits(&self) -> u32 {
        self.bits.iter().map(|w| w.load(Relaxed).count_ones()).sum()
    }

    /// The first bitset word with a free block, from the cursor word on and wrapping around,
    /// with its allocatable bits ([`allocatable`]); the cursor moves there. `None` when none of
    /// the `capacity` blocks is free.
    pub fn seek_word(&self, capacity: u32) -> Option<(usize, u64)> {
        let words = (capacity.div_ceil(64) as usize).clamp(1, COUNT_BITSET_WORDS);
        let start = self.cursor() as usize % words;
        let i = (start..words)
            .chain(0..start)
            .find(|&i| self.bits[i].load(Relaxed) & allocatable(capacity, i) != 0)?;
        self.set_cursor(i as u32);
        Some((i, allocatable(capacity, i)))
    }

    /// Takes the first free block from the cursor word on ([`SlabDesc::seek_word`]); `None`
    /// when none of the `capacity` blocks is free. `log(block)` runs just before the block's
    /// bit is cleared (the caller logs the allocation).
    #[cold]
    pub fn take_scanning(&self, capacity: u32, log: impl FnOnce(u32)) -> Option<u32> {
        let (i, mask) = self.seek_word(capacity)?;
        let w = self.bits[i].load(Relaxed);
        let block = i as u32 * 64 + (w & mask).trailing_zeros();
        log(block);
        self.bits[i].store(w & !(1 << (block % 64)), Relaxed);
        Some(block)
    }
}

/// The bits of bitset word `i` a slab of `capacity` blocks can allocate (phantoms cleared).
#[inline]
pub fn allocatable(capacity: u32, i: usize) -> u64 {
    let left = capacity.saturating_sub(i as u32 * 64);
    if left >= 64 {
        u64::MAX
    } else {
        (1u64 << left) - 1
    }
}

/// Phantom bits of a slab of `capacity` blocks: the last bitset word's bits past the capacity,
/// always set and never allocated, so "this word is all free" is a test against `u64::MAX`.
pub const fn phantom_bits(capacity: u32) -> u32 {
    (64 - capacity % 64) % 64
}

/// Word `i` of the bitset of a slab whose `capacity` blocks are all free: all ones up to the
/// last word (phantom bits included), zero after it.
#[inline]
pub const fn full_word(capacity: u32, i: usize) -> u64 {
    if (i as u32) < capacity.div_ceil(64) {
        u64::MAX
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_counts_up_and_clears_the_bit_older_backers_set() {
        let desc = desc();
        assert_eq!(desc.releases(), 0, "a fresh heap's slab was never released");
        desc.pages_released();
        assert_eq!(desc.releases(), 1);
        desc.pages.store(desc.pages.load(Relaxed) | 1, Relaxed);
        assert_eq!(desc.releases(), 1, "the old backed bit is not part of the count");
        desc.pages_released();
        assert_eq!(desc.pages.load(Relaxed), 2 << 1, "and a release clears it");
    }

    #[test]
    fn allocatable_bits_stop_at_the_capacity() {
        assert_eq!(allocatable(8192, 127), u64::MAX);
        assert_eq!(allocatable(8192, 128), 0);
        assert_eq!(allocatable(1365, 21), (1 << 21) - 1);
        assert_eq!(allocatable(1365, 20), u64::MAX);
        assert_eq!(allocatable(512, 7), u64::MAX);
        assert_eq!(allocatable(512, 8), 0);
        assert_eq!(allocatable(32, 0), (1 << 32) - 1);
    }

    fn desc() -> Box<SlabDesc> {
        // SAFETY: a descriptor is plain atomics, for which all-zero is a valid value (rule 3).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    #[test]
    fn meta_round_trips_and_zero_is_free_and_unowned() {
        let m = Meta::unpack(Meta::pack(7, 3, State::Detached));
        assert_eq!(
            m,
            Meta {
                owner: 7,
                class: 3,
                state: Some(State::Detached),
                old: 0,
            }
        );
        assert_eq!(
            Meta::unpack(0),
            Meta {
                owner: 0,
                class: 0,
                state: Some(State::Free),
                old: 0,
            }
        );
        assert_eq!(Meta::unpack(9 << 40).state, None);
    }

    #[test]
    fn fill_then_take_every_block_once_and_never_a_phantom() {
        let d = desc();
        d.fill_bits(100);
        assert_eq!(d.count_free(100), 100);
        assert!(d.is_empty_of(100));
        let mut seen = std::collections::HashSet::new();
        while let Some(block) = d.take_scanning(100, |_| {}) {
            assert!(block < 100 && seen.insert(block));
        }
        assert_eq!(seen.len(), 100);
        assert_eq!(d.count_free(100), 0);
        assert_eq!(d.count_bits(), phantom_bits(100), "phantom bits stay set");
        assert!(!d.is_empty_of(100));
    }

    #[test]
    fn a_smaller_capacity_clears_the_words_a_larger_one_left() {
        let d = desc();
        d.fill_bits(COUNT_BLOCKS_MAX as u32);
        assert_eq!(
            d.count_free(COUNT_BLOCKS_MAX as u32),
            COUNT_BLOCKS_MAX as u32
        );
        d.fill_bits(100);
        assert_eq!(d.count_bits(), 128, "two words: 100 blocks and 28 phantoms");
        assert!(d.bits[2..].iter().all(|w| w.load(Relaxed) == 0));
        assert_eq!(d.count_free(100), 100);
    }

    #[test]
    fn emptiness_near_a_filled_word_agrees_with_the_whole_scan() {
        let d = desc();
        let capacity = 1000u32;
        d.fill_bits(capacity);
        let words = capacity.div_ceil(64) as usize;
        for filled in 0..words {
            assert!(d.is_empty_near(capacity, filled));
        }
        // One live block anywhere: no word, near or far, calls the slab empty.
        for live in [0u32, 63, 64, 500, 999] {
            d.fill_bits(capacity);
            let taken = d.take_scanning(capacity, |_| {});
            assert_eq!(taken, Some(0));
            d.bits[0].fetch_or(1, Relaxed);
            d.bits[(live / 64) as usize].fetch_and(!(1 << (live % 64)), Relaxed);
            for filled in 0..words {
                assert!(
                    !d.is_empty_near(capacity, filled),
                    "live {live}, filled {filled}"
                );
            }
            assert!(!d.is_empty_of(capacity));
        }
    }

    #[test]
    fn full_words_cover_the_capacity_plus_its_phantoms() {
        for capacity in [1u32, 63, 64, 65, 512, 4096, 8192] {
            let bits: u32 = (0..COUNT_BITSET_WORDS)
                .map(|i| full_word(capacity, i).count_ones())
                .sum();
            assert_eq!(bits - phantom_bits(capacity), capacity);
            assert_eq!(bits % 64, 0);
        }
    }
}
