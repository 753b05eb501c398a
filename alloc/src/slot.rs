//! Thread slots: the per-thread state every allocating thread claims (CXLALLOC `SmallLocal`).
//!
//! A heap holds a fixed array of slots. A thread claims a free one by CAS on its `owner` word
//! when it first allocates and releases it when its handle drops. A slot owns its local lists:
//! per heap (small, large), one unsized list and one sized list per class.
//!
//! # Fields
//! - `owner`: `pid` (bits 32..64, zero when free) and a generation (bits 0..32) bumped at every
//!   claim. CAS by claimers; stored by the releasing owner; read by the checker.
//! - `recovery`: the slot's 8-byte recovery word (written by the owner before a multi-step move).
//! - `start_time`: the owner's process start time (clock ticks since boot), so a reused pid is
//!   not taken for the owner. Written by the claimer after its CAS.
//! - `lists`: written and read only by the owner (single writer, single reader).

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

/// A thread slot.
#[repr(C, align(64))]
pub struct Slot {
    /// `pid << 32 | generation`; pid zero means unclaimed.
    pub owner: AtomicU64,
    /// The recovery word.
    pub recovery: AtomicU64,
    /// The owner's process start time.
    pub start_time: AtomicU64,
    reserved: [AtomicU64; 5],
    /// Small heap lists (`[0]`) and large heap lists (`[1]`).
    pub lists: [LocalLists; 2],
}

const _: () = assert!(std::mem::size_of::<Slot>() <= SIZE_SLOT);

/// The pid in an owner word (zero: unclaimed).
#[inline]
pub const fn owner_pid(word: u64) -> u32 {
    (word >> 32) as u32
}

impl Slot {
    /// Tries to claim this slot for `pid`; returns whether it did.
    pub fn try_claim(&self, pid: u32, start_time: u64) -> bool {
        let cur = self.owner.load(Ordering::Acquire);
        if owner_pid(cur) != 0 {
            return false;
        }
        let claimed = u64::from(pid) << 32 | u64::from((cur as u32).wrapping_add(1));
        if self
            .owner
            .compare_exchange(cur, claimed, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.start_time.store(start_time, Ordering::Relaxed);
        true
    }

    /// Gives the slot back (its lists must already be empty).
    pub fn release(&self) {
        let cur = self.owner.load(Ordering::Relaxed);
        self.owner
            .store(cur & u64::from(u32::MAX), Ordering::Release);
    }
}
