//! The huge heap's records in the pod heap and their words: a slot's [`HugeLocal`] (its log
//! word and [`HugeDesc`]s), the log's [`HugeStep`]s, and the reservation array's [`RunWord`]s
//! (module `huge` has the map and the transitions' table).

use crate::layout::SIZE_HUGE_LOCAL;
use podkv_hw::sync::AtomicU64;

/// Huge descriptors per slot: the most huge allocations one slot may hold live or unreclaimed.
pub const COUNT_HUGE_DESC: usize = (SIZE_HUGE_LOCAL as usize - 64) / 64;
/// Alignment of every huge allocation (a transparent huge page).
pub const ALIGN_HUGE: u64 = 2 << 20;
/// Bytes of a page: huge allocations are whole pages.
pub(crate) const SIZE_PAGE: u64 = 4096;

/// Descriptor states.
pub const DESC_EMPTY: u64 = 0;
/// A live allocation.
pub const DESC_LIVE: u64 = 1;
/// Freed; waits for every process to unmap it.
pub const DESC_FREED: u64 = 2;

/// One huge allocation.
///
/// # Fields
/// - `state`: `DESC_*`. empty → live by the owning slot; live → freed by the freeing thread;
///   freed → empty by the owning slot once no hazard offset names `offset`. Read by any process.
/// - `offset`, `len`: written by the owning slot while empty, before the store that makes the
///   descriptor live; read by any process that saw it live.
/// - `generation`: allocations made in the descriptor (mod 2^28), bumped by the owning slot
///   before the store that makes it live; a logged free names it, so recovery tells the
///   freed block from a later one at the same place.
///
/// Invariant: `state == EMPTY <=> offset == 0 && len == 0` (quiescent); otherwise
/// `[offset, offset + len)` lies in one run of the owning slot, `ALIGN_HUGE`-aligned, and no two
/// of the slot's descriptors overlap.
///
/// A line of its own: the owning slot writes a descriptor and any freeing thread, of any
/// process, writes its `state`, each writing the line back whole. Two descriptors on one line
/// (format 9 and before) let a remote free's write-back put its stale copy of the neighbour
/// over the owner's newer one (a fresh allocation lost: the stress test under the model died
/// of SIGSEGV on the new block's first touch).
#[repr(C, align(64))]
pub struct HugeDesc {
    /// `DESC_*`.
    pub state: AtomicU64,
    /// Offset of the allocation's first byte.
    pub offset: AtomicU64,
    /// Bytes mapped (the request rounded up to pages).
    pub len: AtomicU64,
    /// Allocations made in this descriptor (mod 2^28).
    pub generation: AtomicU64,
    reserved: [AtomicU64; 4],
}

const _: () = assert!(std::mem::size_of::<HugeDesc>() == 64);

/// Bits of a descriptor generation a free logs.
pub const MASK_GENERATION: u64 = (1 << 28) - 1;

/// A thread slot's huge state (CXLALLOC `HugeLocal`), in its own per-slot array so the slot
/// itself is untouched.
#[repr(C)]
pub struct HugeLocal {
    /// The transition under way ([`HugeStep::to_word`]), zero when none. Owner only.
    pub log: AtomicU64,
    /// The log's line is the owner's alone (see [`HugeDesc`]).
    reserved: [AtomicU64; 7],
    /// The slot's descriptors.
    pub descs: [HugeDesc; COUNT_HUGE_DESC],
}

const _: () = assert!(std::mem::size_of::<HugeLocal>() as u64 <= SIZE_HUGE_LOCAL);

/// A multi-step huge-heap transition, as logged before it starts. Operands fit in 48 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugeStep {
    /// Claiming ranges `first..first + count` for this slot.
    ClaimRun {
        /// First range.
        first: u32,
        /// Ranges.
        count: u32,
    },
    /// Backing, publishing and mapping descriptor `desc` (its offset and length written).
    Allocate {
        /// Descriptor index in the slot.
        desc: u16,
    },
    /// Punching out descriptor `desc`'s pages and emptying it.
    Reclaim {
        /// Descriptor index in the slot.
        desc: u16,
    },
    /// Giving ranges `first..first + count` back.
    ReleaseRun {
        /// First range.
        first: u32,
        /// Ranges.
        count: u32,
    },
    /// Freeing the block of slot `slot`'s descriptor `desc` in generation `generation` (its
    /// offset in the freeing slot's `aux` word).
    Free {
        /// The owning slot.
        slot: u32,
        /// Descriptor index in that slot.
        desc: u16,
        /// The descriptor's generation (low 28 bits).
        generation: u32,
    },
}

const MASK_RANGE: u64 = (1 << 20) - 1;

impl HugeStep {
    /// The log word: tag in bits 0..4, operands in bits 4..48; never zero.
    pub fn to_word(self) -> u64 {
        let run = |tag: u64, first: u32, count: u32| {
            tag | (u64::from(first) & MASK_RANGE) << 4 | (u64::from(count) & MASK_RANGE) << 24
        };
        match self {
            HugeStep::ClaimRun { first, count } => run(1, first, count),
            HugeStep::Allocate { desc } => 2 | u64::from(desc) << 4,
            HugeStep::Reclaim { desc } => 3 | u64::from(desc) << 4,
            HugeStep::ReleaseRun { first, count } => run(4, first, count),
            HugeStep::Free {
                slot,
                desc,
                generation,
            } => {
                5 | (u64::from(desc) & 0xFF) << 4
                    | (u64::from(slot) & 0xFFFF) << 12
                    | (u64::from(generation) & MASK_GENERATION) << 28
            }
        }
    }

    /// Reads a log word back (`None`: no step, or not a huge step).
    pub fn from_word(word: u64) -> Option<HugeStep> {
        let first = ((word >> 4) & MASK_RANGE) as u32;
        let count = ((word >> 24) & MASK_RANGE) as u32;
        let desc = (word >> 4) as u16;
        match word & 0xF {
            1 => Some(HugeStep::ClaimRun { first, count }),
            2 => Some(HugeStep::Allocate { desc }),
            3 => Some(HugeStep::Reclaim { desc }),
            4 => Some(HugeStep::ReleaseRun { first, count }),
            5 => Some(HugeStep::Free {
                slot: ((word >> 12) & 0xFFFF) as u32,
                desc: desc & 0xFF,
                generation: ((word >> 28) & MASK_GENERATION) as u32,
            }),
            _ => None,
        }
    }
}

/// A claimed range's word: the slot (plus one) and the run it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunWord {
    /// Claiming slot.
    pub slot: u32,
    /// The run's first range.
    pub first: u32,
    /// Ranges in the run.
    pub count: u32,
}

impl RunWord {
    /// Packs: slot + 1 in bits 0..16, first in 16..36, count in 36..56. Never zero.
    pub fn pack(self) -> u64 {
        u64::from(self.slot + 1)
            | (u64::from(self.first) & MASK_RANGE) << 16
            | (u64::from(self.count) & MASK_RANGE) << 36
    }

    /// Unpacks a non-zero word.
    pub fn unpack(word: u64) -> Option<RunWord> {
        (word != 0).then(|| RunWord {
            slot: (word & 0xFFFF) as u32 - 1,
            first: ((word >> 16) & MASK_RANGE) as u32,
            count: ((word >> 36) & MASK_RANGE) as u32,
        })
    }
}

/// How a huge allocation's file pages are had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u64)]
pub enum HugeBacking {
    /// Back every page at allocation (`fallocate`): running out of memory is an error value
    /// then, never a `SIGBUS` later (constitution rule 8). The default.
    #[default]
    Reserve = 0,
    /// Back only the last page (which sets the file's length); other pages are had on first
    /// touch. For benchmarks and sparse use of very large blocks: a full `/dev/shm` then shows
    /// as `SIGBUS` on touch.
    Sparse = 1,
}
