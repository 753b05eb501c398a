//! The recovery word (CXLALLOC §3.4.2): 8 bytes per thread slot naming the operation the slot's
//! owner is performing, with enough operands to finish it idempotently after a crash.
//!
//! # The rule: log, then do
//! Before every step that changes shared state or moves a slab, the owner stores the step's
//! [`Rec`] in its slot's recovery word (a plain store, also on the allocation and free fast
//! paths). A recoverer reads the word once and runs one `match` over it
//! (`thread/recover.rs`): bounded work, no heap scan, and nothing anyone waits for.
//!
//! # The word
//! ```text
//! op (bits 59..64) | reserved (58) | version (42..58) | payload (0..42)
//! ```
//! - `version`: the slot's detectable-operation counter ([`crate::dcas`]); a step with a CAS on
//!   a shared word increments it first, and the CAS tags the word with it. Whether another
//!   thread acknowledged it (replaced a word this slot wrote with it) is recorded apart, in the
//!   slot's acknowledgement word in the HWcc region: the recovery word has one writer, its
//!   owner (format 4 kept an acknowledgement bit here, set by other threads' CPU CAS).
//! - payload: a block offset / 8 (42 bits: heaps up to 32 TiB) or a slab step's fields:
//!   slab (bits 0..24), class (24..31), heap kind (31), `from_list` (32: the slab was the head
//!   of the slot's unsized list), `after_free` (33: the step continues the free of the block
//!   in the slot's `aux` word), a count or a morph's old class (34..41), `warm` (41: the warm
//!   global list).

use crate::offset::Offset;

const SHIFT_OP: u32 = 59;
const SHIFT_VER: u32 = 42;
const MASK_PAYLOAD: u64 = (1 << SHIFT_VER) - 1;
/// Largest offset a block step can log.
pub const OFFSET_MAX: u64 = MASK_PAYLOAD << 3;

/// Operation codes, in the word's top five bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Nothing under way (a fresh or cleanly released slot).
    Idle = 0,
    /// Taking block `offset` from an owned slab's bitset.
    Alloc = 1,
    /// Setting block `offset`'s bit in an owned slab.
    Free = 2,
    /// Counting block `offset` freed on another slot's slab into the slot's pending batch
    /// (`crate::pending`); done when the pending word carries this step's version.
    RemoteFree = 3,
    /// `unsized_to_sized`: giving `slab` (the unsized list's head if `from_list`, else one this
    /// slot holds in hand) class `class` and the sized list's head.
    ToSized = 4,
    /// `free_to_unsized`: popping `slab` off the global list (the warm one if `warm`;
    /// detectable).
    PopGlobal = 5,
    /// Growing the heap from slab `slab` by `count` slabs (detectable CAS on `len`).
    Grow = 6,
    /// `sized_to_detached` of a full `slab` (detectable CAS on its remote word).
    ToDetached = 7,
    /// `detached_to_sized`: the owner freed into its detached `slab` (detectable CAS).
    Reattach = 8,
    /// `sized_to_unsized`: the owner's `slab` of class `class` became empty.
    ToUnsized = 9,
    /// `unsized_to_free`: pushing `slab` on the global list (the warm one if `warm`; taken off
    /// the slot's unsized list first if `from_list`; detectable).
    PushGlobal = 10,
    /// `sized_to_disowned` of `slab` while the slot is given back (detectable CAS).
    Disown = 11,
    /// A remote free took the now-empty `slab`, which this slot holds in hand.
    TookSlab = 12,
    /// Keeping `slab` (held in hand, empty) on the slot's unsized list.
    Keep = 13,
    /// Flushing the slot's pending remote frees of `slab` (the count is in the pending word):
    /// one detectable CAS on the slab's remote word, then the pending word is cleared.
    Flush = 14,
    /// `sized_to_morphing`: the sized `slab` of class `count` (its old class) becomes a
    /// morphing slab of class `class` (`crate::morph`; a detectable CAS rebases its remote
    /// word), moving to the head of that class's sized list.
    Morph = 15,
    /// The owner frees the old block at `aux` of its morphing `slab` of class `class` (old
    /// class `count`; `crate::morph`): its old-set bit is cleared, the new blocks it alone
    /// blocked come free, and a detectable CAS moves the remote count by their number less
    /// one.
    Unblock = 16,
}

impl Op {
    const ALL: [Op; 17] = [
        Op::Idle,
        Op::Alloc,
        Op::Free,
        Op::RemoteFree,
        Op::ToSized,
        Op::PopGlobal,
        Op::Grow,
        Op::ToDetached,
        Op::Reattach,
        Op::ToUnsized,
        Op::PushGlobal,
        Op::Disown,
        Op::TookSlab,
        Op::Keep,
        Op::Flush,
        Op::Morph,
        Op::Unblock,
    ];

    /// The operation's name (for reports).
    pub fn name(self) -> &'static str {
        match self {
            Op::Idle => "idle",
            Op::Alloc => "alloc",
            Op::Free => "free",
            Op::RemoteFree => "remote_free",
            Op::ToSized => "unsized_to_sized",
            Op::PopGlobal => "free_to_unsized",
            Op::Grow => "grow",
            Op::ToDetached => "sized_to_detached",
            Op::Reattach => "detached_to_sized",
            Op::ToUnsized => "sized_to_unsized",
            Op::PushGlobal => "unsized_to_free",
            Op::Disown => "sized_to_disowned",
            Op::TookSlab => "took_slab",
            Op::Keep => "keep_unsized",
            Op::Flush => "flush_remote_frees",
            Op::Morph => "sized_to_morphing",
            Op::Unblock => "free_old_block",
        }
    }
}

/// A decoded recovery word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec(pub u64);

impl Rec {
    /// A block step: `op` on the block at `offset`.
    #[inline]
    pub const fn block(op: Op, ver: u16, offset: u64) -> Rec {
        Rec((op as u64) << SHIFT_OP | (ver as u64) << SHIFT_VER | offset >> 3)
    }

    /// A slab step.
    #[inline]
    pub const fn slab(op: Op, ver: u16, step: SlabStep) -> Rec {
        Rec((op as u64) << SHIFT_OP | (ver as u64) << SHIFT_VER | step.pack())
    }

    /// The operation; `None` for a code no build writes.
    pub fn op(self) -> Option<Op> {
        Op::ALL.get((self.0 >> SHIFT_OP) as usize).copied()
    }

    /// The detectable-operation version.
    #[inline]
    pub const fn ver(self) -> u16 {
        (self.0 >> SHIFT_VER) as u16
    }

    /// A block step's offset.
    pub const fn offset(self) -> u64 {
        (self.0 & MASK_PAYLOAD) << 3
    }

    /// A slab step's fields.
    pub const fn step(self) -> SlabStep {
        SlabStep::unpack(self.0 & MASK_PAYLOAD)
    }
}

impl std::fmt::Display for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op() {
            None => write!(f, "unknown op {:#x}", self.0),
            Some(Op::Idle) => f.write_str("idle"),
            Some(op @ (Op::Alloc | Op::Free | Op::RemoteFree)) => {
                write!(
                    f,
                    "{} of block {:#x} (v{})",
                    op.name(),
                    self.offset(),
                    self.ver()
                )
            }
            Some(op) => {
                let s = self.step();
                write!(
                    f,
                    "{} of {} slab {} class {} (v{}{}{})",
                    op.name(),
                    if s.large { "large" } else { "small" },
                    s.slab,
                    s.class,
                    self.ver(),
                    if s.from_list { ", from list" } else { "" },
                    if s.after_free { ", after a free" } else { "" },
                )
            }
        }
    }
}

/// The operands of a slab step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SlabStep {
    /// The slab.
    pub slab: u32,
    /// Its class (where it matters).
    pub class: u8,
    /// Large heap (else small).
    pub large: bool,
    /// The slab came off the slot's unsized list's head.
    pub from_list: bool,
    /// The global step is on the warm list (else the cold one).
    pub warm: bool,
    /// The step continues the free of the block in the slot's `aux` word.
    pub after_free: bool,
    /// A count (slabs grown; below 128).
    pub count: u8,
}

impl SlabStep {
    const fn pack(self) -> u64 {
        (self.slab & 0xFF_FFFF) as u64
            | ((self.class & 0x7F) as u64) << 24
            | (self.large as u64) << 31
            | (self.from_list as u64) << 32
            | (self.after_free as u64) << 33
            | ((self.count & 0x7F) as u64) << 34
            | (self.warm as u64) << 41
    }

    const fn unpack(p: u64) -> SlabStep {
        SlabStep {
            slab: (p & 0xFF_FFFF) as u32,
            class: ((p >> 24) & 0x7F) as u8,
            large: (p >> 31) & 1 != 0,
            from_list: (p >> 32) & 1 != 0,
            after_free: (p >> 33) & 1 != 0,
            count: ((p >> 34) & 0x7F) as u8,
            warm: (p >> 41) & 1 != 0,
        }
    }
}

/// What the dead slot was doing with a block when it died, as the application sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFlight {
    /// No allocation or free was under way.
    None,
    /// The block was taken for an allocation that may not have reached the application: if
    /// the application holds no record of it, it should free it.
    Alloc(Offset),
    /// A free of the block was under way; recovery finished it (the block is free).
    Free(Offset),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let r = Rec::block(Op::RemoteFree, 0xBEEF, 0x7_1234_5678);
        assert_eq!(r.op(), Some(Op::RemoteFree));
        assert_eq!(r.ver(), 0xBEEF);
        assert_eq!(r.offset(), 0x7_1234_5678);
        let step = SlabStep {
            slab: 0xAB_CDEF,
            class: 92,
            large: true,
            from_list: true,
            after_free: true,
            count: 100,
            warm: true,
        };
        let r = Rec::slab(Op::Grow, 7, step);
        assert_eq!((r.op(), r.ver(), r.step()), (Some(Op::Grow), 7, step));
        assert_eq!(Rec(0).op(), Some(Op::Idle), "a zero-filled slot is idle");
        assert_eq!(Rec(31 << 59).op(), None);
    }
}
