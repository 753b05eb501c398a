//! Thread slots: the per-thread state every allocating thread claims (CXLALLOC `SmallLocal`).
//!
//! A heap holds a fixed array of slots. A thread claims a free one by CAS on its owner word
//! when it first allocates and releases it when its handle drops. A slot owns its local lists:
//! per heap (small, large), one unsized list and one sized list per class.
//!
//! # The owner word (in the HWcc region since format 6)
//! Who holds slot `i` is not in the slot: it is word `i` of `Layout::slot_owners`, a
//! multi-writer word, so it lives among the mCAS targets and changes only through the heap's
//! one hook (`Slots::try_claim`, `Slots::release`): host id (bits 48..64), the
//! process's start time in clock ticks since boot (low 24 bits, bits 24..48), the fence flag
//! (bit 23, [`crate::lease::FLAG_FENCED`]: set by an observer that saw the owner's lease
//! lapse) and its pid (bits 0..23); zero when free. One word, so a claim, an adoption and a liveness check each
//! see one consistent owner, and a reused pid (other start time) is another owner. CAS from
//! zero by claimers, from a dead owner's word by adopters, from the owner's word to zero by the
//! releasing owner.
//!
//! # Fields (single writer: the slot's owner)
//! - `beat`: in lease mode, the owner's heartbeat ([`crate::lease::Beat`]: a counter tagged
//!   with the beater's pid), advanced by the owning process every third of a lease, watched by
//!   any host judging the owner's life by its own clock (`lease.rs`). On a line of its own: in
//!   `limited` and `mcas` heaps the beater writes it back after each store and watchers
//!   invalidate it before each load (SWcc) without touching the rest of the slot. Written (and
//!   written back) by a claimer before its claim CAS; a beat by anyone but the owner word's
//!   process counts for nobody, so a loser's beat is harmless.
//! - `recovery`: the slot's 8-byte recovery word ([`crate::recovery`]): the operation under
//!   way, logged by the owner before each step; written by nobody else (another thread's
//!   acknowledgement of a version goes to the slot's word in the HWcc region, `dcas`).
//! - `generation`: claims so far (for reports), bumped by each new owner after its claim.
//! - `aux`: the offset of the free whose slow continuation is under way (owner only).
//! - `pending`: the batch of remote frees of one slab not yet counted on its remote word
//!   (owner only; [`crate::pending`]).
//! - `lists`: written and read only by the owner (single writer, single reader).
//!
//! Ownership of the whole slot moves with the owner word, so in `limited` and `mcas` heaps the
//! slot follows SWcc: the owner writes it back before the releasing CAS and a new owner (claimer
//! or adopter) invalidates it after a successful one.

use crate::class::COUNT_CLASSES_MAX;
use podkv_hw::sync::{AtomicU64, Ordering};

/// Bytes of one slot.
pub const SIZE_SLOT: usize = 2048;

/// One slab heap's local lists in a slot.
#[repr(C)]
pub struct LocalLists {
    /// `head + 1` (bits 0..32) and length (32..64) of the unsized list (linked through `next`).
    pub unsized_list: AtomicU64,
    /// Per class: `head + 1` (bits 0..32) and `tail + 1` (32..64), doubly linked.
    pub sized: [AtomicU64; COUNT_CLASSES_MAX],
}

impl LocalLists {
    /// Whether `slab` is all of `class`'s sized list: such a slab stays sized when it empties
    /// (a thread allocating and freeing one block does not re-size a slab every time).
    #[inline]
    pub(crate) fn is_only_sized(&self, class: usize, slab: u32) -> bool {
        let (head, tail) = unpack_ends(self.sized[class].load(Ordering::Relaxed));
        head == slab + 1 && tail == slab + 1
    }
}

/// A thread slot.
#[repr(C, align(64))]
pub struct Slot {
    /// The owner's heartbeat, in lease mode: alone on the slot's first line.
    pub beat: AtomicU64,
    beat_line: [AtomicU64; 7],
    /// The recovery word.
    pub recovery: AtomicU64,
    /// Claims so far.
    pub generation: AtomicU64,
    /// Offset of the free whose continuation is under way.
    pub aux: AtomicU64,
    /// Remote frees counted here, not yet on their slab's remote word ([`crate::pending`]).
    pub pending: AtomicU64,
    reserved: [AtomicU64; 4],
    /// Small heap lists (`[0]`) and large heap lists (`[1]`).
    pub lists: [LocalLists; 2],
}

/// Who owns a slot (or a hazard record), as its owner word records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Host id (16 bits of a hash of the machine id, never zero).
    pub host: u16,
    /// Process id (below 2^22, Linux's `pid_max` limit; bit 23 of the word is
    /// [`crate::lease::FLAG_FENCED`]).
    pub pid: u32,
    /// Low 24 bits of the process's start time in clock ticks after boot.
    pub start: u32,
}

impl Owner {
    /// Packs an owner into a nonzero word.
    pub const fn pack(self) -> u64 {
        (self.host as u64) << 48
            | ((self.start & 0xFF_FFFF) as u64) << 24
            | (self.pid & 0x7F_FFFF) as u64
    }

    /// Unpacks a word; `None` for an unclaimed slot.
    pub const fn unpack(word: u64) -> Option<Owner> {
        if word == 0 {
            return None;
        }
        Some(Owner {
            host: (word >> 48) as u16,
            pid: owner_pid(word),
            start: ((word >> 24) & 0xFF_FFFF) as u32,
        })
    }
}

/// The pid in an owner word (zero: unclaimed), without the fence flag.
#[inline]
pub const fn owner_pid(word: u64) -> u32 {
    (word & 0x7F_FFFF) as u32
}

impl Slot {
    /// The slot's bytes, for the SWcc write-back at release and invalidation at claim.
    pub(crate) fn bytes(&self) -> (*const u8, usize) {
        ((self as *const Slot).cast(), std::mem::size_of::<Slot>())
    }
}

const _: () = assert!(std::mem::size_of::<Slot>() <= SIZE_SLOT);
const _: () = assert!(
    std::mem::offset_of!(Slot, recovery) == 64,
    "the beat has its own line"
);

/// A list word's two ends (head and tail, or head and count).
#[inline]
pub(crate) fn unpack_ends(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// Packs a list word's two ends.
#[inline]
pub(crate) fn pack_ends(low: u32, high: u32) -> u64 {
    u64::from(low) | u64::from(high) << 32
}
