//! Thread slots: the per-thread state every allocating thread claims (CXLALLOC `SmallLocal`).
//!
//! A heap holds a fixed array of slots. A thread claims a free one by CAS on its `owner` word
//! when it first allocates and releases it when its handle drops. A slot owns its local lists:
//! per heap (small, large), one unsized list and one sized list per class.
//!
//! # Fields
//! - `owner`: who holds the slot — host id (bits 48..64), the process's start time in clock
//!   ticks since boot (low 24 bits, bits 24..48) and its pid (bits 0..24); zero when free. One
//!   word, so a claim, an adoption and a liveness check each see one consistent owner, and a
//!   reused pid (other start time) is another owner. CAS by claimers and adopters; stored by
//!   the releasing owner.
//! - `recovery`: the slot's 8-byte recovery word ([`crate::recovery`]): the operation under
//!   way, logged by the owner before each step; written by nobody else (another thread's
//!   acknowledgement of a version goes to the slot's word in the HWcc region, `dcas`).
//! - `lease`: in lease mode, the time (ms since the Unix epoch) until which the owner is alive;
//!   renewed by the owning process. Written before the claim CAS, so a fresh claim is never
//!   seen expired.
//! - `generation`: claims so far (for reports).
//! - `aux`: the offset of the free whose slow continuation is under way (owner only).
//! - `pending`: the batch of remote frees of one slab not yet counted on its remote word
//!   (owner only; [`crate::pending`]).
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
    /// `host << 48 | start24 << 24 | pid`; zero means unclaimed.
    pub owner: AtomicU64,
    /// The recovery word.
    pub recovery: AtomicU64,
    /// Lease deadline (ms since the Unix epoch), in lease mode.
    pub lease: AtomicU64,
    /// Claims so far.
    pub generation: AtomicU64,
    /// Offset of the free whose continuation is under way.
    pub aux: AtomicU64,
    /// Remote frees counted here, not yet on their slab's remote word ([`crate::pending`]).
    pub pending: AtomicU64,
    reserved: [AtomicU64; 2],
    /// Small heap lists (`[0]`) and large heap lists (`[1]`).
    pub lists: [LocalLists; 2],
}

/// Who owns a slot, as its `owner` word records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Host id (16 bits of a hash of the machine id, never zero).
    pub host: u16,
    /// Process id (below 2^24, Linux's `pid_max` limit is 2^22).
    pub pid: u32,
    /// Low 24 bits of the process's start time in clock ticks after boot.
    pub start: u32,
}

impl Owner {
    /// Packs an owner into a nonzero word.
    pub const fn pack(self) -> u64 {
        (self.host as u64) << 48
            | ((self.start & 0xFF_FFFF) as u64) << 24
            | (self.pid & 0xFF_FFFF) as u64
    }

    /// Unpacks a word; `None` for an unclaimed slot.
    pub const fn unpack(word: u64) -> Option<Owner> {
        if word == 0 {
            return None;
        }
        Some(Owner {
            host: (word >> 48) as u16,
            pid: (word & 0xFF_FFFF) as u32,
            start: ((word >> 24) & 0xFF_FFFF) as u32,
        })
    }
}

/// The pid in an owner word (zero: unclaimed).
#[inline]
pub const fn owner_pid(word: u64) -> u32 {
    (word & 0xFF_FFFF) as u32
}

impl Slot {
    /// Tries to claim this slot for `me` if it is free; returns whether it did.
    pub fn try_claim(&self, me: Owner, lease_until: u64) -> bool {
        if self.owner.load(Ordering::Acquire) != 0 {
            return false;
        }
        self.try_take(0, me, lease_until)
    }

    /// Takes the slot over from the owner word `from` (zero: free; else a dead owner being
    /// adopted); returns whether it did. The lease is renewed first, so nobody sees the new
    /// owner's lease expired.
    pub fn try_take(&self, from: u64, me: Owner, lease_until: u64) -> bool {
        self.lease.store(lease_until, Ordering::Release);
        if self
            .owner
            .compare_exchange(from, me.pack(), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.generation.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Gives the slot back (its lists must already be empty).
    pub fn release(&self) {
        self.owner.store(0, Ordering::Release);
    }
}

const _: () = assert!(std::mem::size_of::<Slot>() <= SIZE_SLOT);
