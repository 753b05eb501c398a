//! Heap geometry and the fixed offset of every region.
//!
//! # Regions, in file (and reservation) order
//! ```text
//! 0            header       4 KiB   words at byte offsets:
//!                            0 format word (geometry, version)              (layout.rs)
//!                            8 placement word (zero: default policy)        (heap/place.rs)
//!                            256 huge metadata backed                       (heap/open.rs)
//!                            264, 272 small, large backed-ahead             (slabs.rs)
//!                            280 user HWcc area's backed high-water mark    (hwcc_user.rs)
//!                            288 cache domains that opened the heap         (domains.rs)
//!                            512 root words (COUNT_ROOTS)                   (heap/)
//!                            1024 mCAS process lines' borrow words          (mcas.rs)
//! hwcc         HWcc         globals: len, cold and warm free list heads    (one line each)
//!                            per slab heap,
//!                            then one 8 B remote-free word per slab         (remote.rs)
//!                            then the huge heap's reservation array: one    (huge/)
//!                            8 B claim word per huge range
//!                            (COUNT_HUGE_RANGES, 8 KiB in all),
//!                            then one 8 B acknowledgement word per thread   (thread.rs)
//!                            slot (the help array of detectable CAS),
//!                            then one 8 B owner word per thread slot        (slot.rs)
//!                            and one per hazard record                      (hazard.rs)
//!                            then, page aligned, the user's HWcc area:      (hwcc_user.rs)
//!                            2^hwcc_user_log2 bytes the heap's user (the
//!                            store) lays out itself, backed as it grows
//! mcas         mCAS lines   `mcas` heaps only: the mCAS region's header,    (mcas.rs)
//!                            liveness and journal lines, then one request
//!                            (spwr) and one response (sprd) line per thread
//!                            slot and per process line; its targets are the
//!                            HWcc region above
//! slots        thread slots COUNT_SLOTS × 2 KiB                             (slot.rs)
//! small_desc   SWcc descs   one 1088 B descriptor per small slab           (slab.rs)
//! large_desc   SWcc descs   one 1088 B descriptor per large slab
//! small_data   small slabs  64 KiB each, 2 MiB aligned
//! large_data   large slabs  512 KiB each, 2 MiB aligned
//! huge_hazard  hazard recs  COUNT_HAZARD_RECORDS × 4 KiB, one per mapping   (hazard.rs)
//!                            process: its hazard offsets
//! huge_local   per slot     SIZE_HUGE_LOCAL per thread slot: log word and   (huge.rs)
//!                            huge descriptors
//! huge_data    huge heap    2^huge_log2 bytes of address space, mapped one
//!                            allocation at a time, on demand in each process
//! ```
//! Everything before `huge_data` is mapped eagerly over the sparse file when a process opens
//! the heap; the huge heap's data is only reserved (`PROT_NONE`) and each allocation is mapped
//! over its range by the allocating process, and by others from the SIGSEGV handler
//! (`fault.rs`) when they first touch it.
//! Every offset is a pure function of the geometry, which the header's format word encodes in
//! 64 bits; so a process that reads the word knows the whole layout, and offsets name the same
//! bytes in every process (constitution rule 1). The file is sparse: only the parts a heap has
//! grown into are backed.

use crate::class::{SHIFT_LARGE_SLAB, SHIFT_SMALL_SLAB};
use crate::hazard::{COUNT_HAZARD_RECORDS, SIZE_HAZARD_RECORD};
use crate::process::Liveness;
use crate::slab::SIZE_DESC;
use crate::slot::SIZE_SLOT;
use podkv_hw::mcas::region::region_bytes;
use podkv_hw::mcas::McasKind;
use podkv_hw::Coherence;

/// The header's size.
pub const SIZE_HEADER: u64 = 4096;
/// Bytes of one HWcc global line.
pub const SIZE_GLOBAL_LINE: u64 = 64;
/// HWcc global lines: per slab heap, `len`, the cold and the warm free list.
pub const COUNT_GLOBAL_LINES: u64 = 6;
const ALIGN_PAGE: u64 = 4096;
const ALIGN_DATA: u64 = 2 << 20;
/// The format word's magic ("PKV" in the low 24 bits).
pub const MAGIC: u64 = 0x564B50;
/// The on-file format this build reads and writes. 6: the owner words of the thread slots and
/// of the hazard records live in the HWcc region (changed through the heap's one hook, so by
/// mCAS in an `mcas` heap), a slot's lease has its own line, and an `mcas` heap's region has
/// process lines (5 kept each owner word in its slot or record, changed by CPU CAS; 5 had
/// 64 KiB small slabs with 1088 B descriptors and the slots' acknowledgement words at the end
/// of the HWcc region, which 4 lacked).
///
/// 7: the HWcc region ends with the user's HWcc area (`Geometry::hwcc_user_log2`, format
/// word bits 58–63), so the store's multi-writer words can be HWcc (and mCAS targets). In a
/// lease heap, 7 also changed the slot's lease line from a wall-clock deadline to a pid-tagged
/// heartbeat, and an owner word's bit 23 to the fence flag (`lease.rs`).
///
/// 8: a slab may be morphing (`crate::morph`): its descriptor's `meta` holds its old class in
/// bits 48–55 and its bitset an old set at the top; the recovery word has the step
/// `sized_to_morphing`. A build of 7 would take such a slab's old blocks for new ones.
///
/// 9: a morphing slab's owner frees its old blocks itself (`Op::Unblock` in the recovery word:
/// the old set's bit cleared, the new blocks over the block freed, the remote count moved by
/// one CAS), and a slab whose old set empties is sized again. A build of 8 knows no such step:
/// it would drop a dead owner's half-made one, losing the block and the new blocks under it.
///
/// 10: a slot's huge descriptors and its huge log word take a 64-byte line each
/// (`huge::HugeDesc`), and its `HugeLocal` twice the bytes: a remote free of one descriptor
/// wrote back a line holding another.
///
/// 11: header word 288 names the cache domain every process that opened a `limited` heap
/// belongs to (or says there were several: `crate::domains`), and a free reads a slab's
/// descriptor from its cache when that is this process's domain. A build of 10 would open
/// such a heap from another host without saying so, and its writes would go unseen.
pub const FORMAT_VERSION: u64 = 11;
/// Process lines of an `mcas` heap's region: the mCAS client lines a process borrows for the
/// requests it makes without a thread slot of its own (claiming a slot or a hazard record),
/// one per process at a time (`mcas.rs`, "Process lines").
pub const COUNT_PROCESS_LINES: u64 = 64;
/// Largest reservation a geometry may ask for (64 TiB: well inside a 47-bit address space).
pub const SIZE_RESERVATION_MAX: u64 = 64 << 40;

/// The shape of a heap: how far each slab heap may grow, how many thread slots, which
/// coherence mode. Fixed when the heap is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// log2 of the most small slabs.
    pub small_slabs_log2: u32,
    /// log2 of the most large slabs.
    pub large_slabs_log2: u32,
    /// log2 of the number of thread slots.
    pub slots_log2: u32,
    /// The heap's coherence mode.
    pub coherence: Coherence,
    /// How a slot's owner is judged dead.
    pub liveness: Liveness,
    /// log2 of the huge heap's address space, zero for a heap without a huge heap.
    pub huge_log2: u32,
    /// Which mCAS implementation an `mcas` heap uses (`flush-cas` or `nmp`); `flush-cas` for
    /// every other mode, where nothing uses it.
    pub mcas: McasKind,
    /// log2 of the user's HWcc area (the end of the HWcc region, laid out by the heap's user,
    /// the store); zero for a heap without one.
    pub hwcc_user_log2: u32,
}

/// Header byte offset of the backed high-water mark of the user's HWcc area (raised by
/// `fetch_max`; a heap on a file is backed by processes of one host).
pub(crate) const OFFSET_HWCC_USER_BACKED: u64 = 280;

/// Smallest user HWcc area (one page).
pub const HWCC_USER_LOG2_MIN: u32 = 12;
/// Largest user HWcc area (1 TiB of address space).
pub const HWCC_USER_LOG2_MAX: u32 = 40;

/// Ranges in the huge heap's reservation array: each one `2^huge_log2 / COUNT_HUGE_RANGES`
/// bytes of address space (1 GiB for the default 1 TiB huge heap).
pub const COUNT_HUGE_RANGES: u64 = 1024;
/// Bytes of one slot's huge state (`huge::HugeLocal`).
pub const SIZE_HUGE_LOCAL: u64 = 8192;
/// Smallest huge heap (2 GiB: 1024 ranges of 2 MiB).
pub const HUGE_LOG2_MIN: u32 = 31;
/// Largest huge heap (16 TiB of address space).
pub const HUGE_LOG2_MAX: u32 = 44;

/// Why a format word was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum FormatProblem {
    /// The magic is not podkv's.
    Foreign(u64),
    /// A podkv heap of another format version.
    Version(u64),
    /// Fields outside what any valid heap has.
    Corrupt(&'static str),
}

impl Geometry {
    /// Packs the geometry into the header's format word (never zero).
    pub fn to_word(self) -> u64 {
        MAGIC
            | FORMAT_VERSION << 24
            | u64::from(self.small_slabs_log2) << 32
            | u64::from(self.large_slabs_log2) << 38
            | u64::from(self.slots_log2) << 44
            | self.coherence.to_bits() << 48
            | u64::from(self.liveness == Liveness::Lease) << 50
            | u64::from(self.huge_log2) << 51
            | u64::from(self.mcas == McasKind::Nmp) << 57
            | u64::from(self.hwcc_user_log2) << 58
    }

    /// Reads a format word back, refusing foreign, other-version and impossible ones.
    pub fn from_word(word: u64) -> Result<Geometry, FormatProblem> {
        if word & 0xFF_FFFF != MAGIC {
            return Err(FormatProblem::Foreign(word & 0xFF_FFFF));
        }
        let version = (word >> 24) & 0xFF;
        if version != FORMAT_VERSION {
            return Err(FormatProblem::Version(version));
        }
        let coherence = Coherence::from_bits((word >> 48) & 0x3)
            .ok_or(FormatProblem::Corrupt("coherence mode"))?;
        let nmp = word >> 57 & 1 != 0;
        if nmp && coherence != Coherence::Mcas {
            return Err(FormatProblem::Corrupt(
                "mCAS implementation in a heap without mCAS",
            ));
        }
        let geometry = Geometry {
            small_slabs_log2: ((word >> 32) & 0x3F) as u32,
            large_slabs_log2: ((word >> 38) & 0x3F) as u32,
            slots_log2: ((word >> 44) & 0xF) as u32,
            coherence,
            liveness: if word >> 50 & 1 != 0 {
                Liveness::Lease
            } else {
                Liveness::Process
            },
            huge_log2: ((word >> 51) & 0x3F) as u32,
            mcas: if nmp {
                McasKind::Nmp
            } else {
                McasKind::FlushCas
            },
            hwcc_user_log2: (word >> 58) as u32,
        };
        geometry.validate().map_err(FormatProblem::Corrupt)?;
        Ok(geometry)
    }

    /// Checks the geometry describes a heap this build can map.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.small_slabs_log2 > 24 || self.large_slabs_log2 > 24 {
            return Err("slab count over 2^24");
        }
        if self.slots_log2 > 14 {
            return Err("more than 16384 thread slots");
        }
        if self.huge_log2 != 0 && !(HUGE_LOG2_MIN..=HUGE_LOG2_MAX).contains(&self.huge_log2) {
            return Err("huge heap outside 2 GiB to 16 TiB");
        }
        if self.hwcc_user_log2 != 0
            && !(HWCC_USER_LOG2_MIN..=HWCC_USER_LOG2_MAX).contains(&self.hwcc_user_log2)
        {
            return Err("user HWcc area outside 4 KiB to 1 TiB");
        }
        if self.mcas == McasKind::Device {
            return Err("mCAS device not available on this machine (use flush-cas or nmp)");
        }
        if self.mcas != McasKind::FlushCas && self.coherence != Coherence::Mcas {
            return Err("an mCAS implementation only applies to coherence mode mcas");
        }
        if self.layout().total > SIZE_RESERVATION_MAX.min(crate::recovery::OFFSET_MAX) {
            return Err("heap larger than 32 TiB of address space");
        }
        Ok(())
    }

    /// Most small slabs.
    pub fn small_slabs_max(&self) -> u64 {
        1 << self.small_slabs_log2
    }

    /// Most large slabs.
    pub fn large_slabs_max(&self) -> u64 {
        1 << self.large_slabs_log2
    }

    /// Thread slots.
    pub fn slots(&self) -> u64 {
        1 << self.slots_log2
    }

    /// Bytes of the huge heap's address space (zero: no huge heap).
    pub fn huge_bytes(&self) -> u64 {
        if self.huge_log2 == 0 {
            0
        } else {
            1 << self.huge_log2
        }
    }

    /// Bytes of the user's HWcc area (zero: none).
    pub fn hwcc_user_bytes(&self) -> u64 {
        if self.hwcc_user_log2 == 0 {
            0
        } else {
            1 << self.hwcc_user_log2
        }
    }

    /// log2 of one huge range's bytes.
    pub fn huge_range_shift(&self) -> u32 {
        self.huge_log2
            .saturating_sub(COUNT_HUGE_RANGES.trailing_zeros())
    }

    /// Clients of an `mcas` heap's region: one per thread slot (client `i` is slot `i`'s), then
    /// [`COUNT_PROCESS_LINES`] process lines (client `slots + j` is process line `j`).
    pub fn mcas_clients(&self) -> u32 {
        (self.slots() + COUNT_PROCESS_LINES) as u32
    }

    /// Where every region lies.
    pub fn layout(&self) -> Layout {
        let (small, large) = (self.small_slabs_max(), self.large_slabs_max());
        let hwcc = SIZE_HEADER;
        let small_remote = hwcc + COUNT_GLOBAL_LINES * SIZE_GLOBAL_LINE;
        let large_remote = small_remote + 8 * small;
        let huge_ranges = large_remote + 8 * large;
        let slot_acks = huge_ranges + 8 * COUNT_HUGE_RANGES;
        let slot_owners = slot_acks + 8 * self.slots();
        let hazard_owners = slot_owners + 8 * self.slots();
        let hazard_end = hazard_owners + 8 * COUNT_HAZARD_RECORDS;
        let hwcc_user = match self.hwcc_user_bytes() {
            0 => hazard_end,
            _ => hazard_end.next_multiple_of(ALIGN_PAGE),
        };
        let hwcc_end = hwcc_user + self.hwcc_user_bytes();
        let mcas = hwcc_end.next_multiple_of(ALIGN_PAGE);
        let mcas_bytes = if self.coherence == Coherence::Mcas {
            region_bytes(self.mcas_clients())
        } else {
            0
        };
        let slots = (mcas + mcas_bytes).next_multiple_of(ALIGN_PAGE);
        let small_desc = slots + SIZE_SLOT as u64 * self.slots();
        let large_desc = small_desc + SIZE_DESC as u64 * small;
        let small_data = (large_desc + SIZE_DESC as u64 * large).next_multiple_of(ALIGN_DATA);
        let large_data = (small_data + (small << SHIFT_SMALL_SLAB)).next_multiple_of(ALIGN_DATA);
        let large_end = large_data + (large << SHIFT_LARGE_SLAB);
        let huge_hazard = large_end.next_multiple_of(ALIGN_PAGE);
        let huge_local = huge_hazard + SIZE_HAZARD_RECORD * COUNT_HAZARD_RECORDS;
        let huge_data = (huge_local + SIZE_HUGE_LOCAL * self.slots()).next_multiple_of(ALIGN_DATA);
        let total = huge_data + self.huge_bytes();
        Layout {
            hwcc,
            small_remote,
            large_remote,
            hwcc_user,
            hwcc_end,
            mcas,
            mcas_bytes,
            slots,
            small_desc,
            large_desc,
            small_data,
            large_data,
            huge_ranges,
            slot_acks,
            slot_owners,
            hazard_owners,
            huge_hazard,
            huge_local,
            huge_data,
            total,
        }
    }
}

/// Byte offsets of each region from the start of the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// HWcc globals: per slab heap `len`, cold free list, warm free list (one line each).
    pub hwcc: u64,
    /// Small slabs' remote-free words.
    pub small_remote: u64,
    /// Large slabs' remote-free words.
    pub large_remote: u64,
    /// The user's HWcc area, `hwcc_user..hwcc_end` (page aligned; empty without one): the
    /// HWcc region's last part, laid out by the heap's user (`hwcc_user.rs`).
    pub hwcc_user: u64,
    /// End of the HWcc region (`hwcc..hwcc_end`: every multi-writer word of the slab heaps,
    /// the huge reservation array, the slots' acknowledgement and owner words, the hazard
    /// records' owner words and the user's HWcc area: the mCAS targets of an `mcas` heap).
    pub hwcc_end: u64,
    /// The mCAS region's lines (header, liveness, journal, spwr and sprd per thread slot and
    /// per process line), page aligned after the HWcc region; `mcas_bytes` is zero unless the
    /// heap is `mcas`.
    pub mcas: u64,
    /// Bytes of the mCAS region's lines.
    pub mcas_bytes: u64,
    /// Thread slots.
    pub slots: u64,
    /// Small slabs' SWcc descriptors.
    pub small_desc: u64,
    /// Large slabs' SWcc descriptors.
    pub large_desc: u64,
    /// Small slabs' data.
    pub small_data: u64,
    /// Large slabs' data.
    pub large_data: u64,
    /// The huge heap's reservation array (`COUNT_HUGE_RANGES` words).
    pub huge_ranges: u64,
    /// One acknowledgement word per thread slot: the help array of detectable CAS
    /// ([`crate::dcas`]), changed only through the heap's one hook.
    pub slot_acks: u64,
    /// One owner word per thread slot ([`crate::slot::Owner`] packed; zero: free), changed only
    /// through the heap's one hook: claim and adoption by CAS from zero or from a dead owner's
    /// word, release by CAS from the owner's word to zero.
    pub slot_owners: u64,
    /// One owner word per hazard record (as a slot's; `COUNT_HAZARD_RECORDS` words), the HWcc
    /// region's last, changed like the slots' owner words.
    pub hazard_owners: u64,
    /// Hazard records, one per process mapping the heap (`hazard.rs`).
    pub huge_hazard: u64,
    /// Per thread slot: the huge heap's log word and descriptors (`huge.rs`).
    pub huge_local: u64,
    /// The huge heap's data: the end of what every process maps eagerly.
    pub huge_data: u64,
    /// End of the heap: the reservation's length.
    pub total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            small_slabs_log2: 21,
            large_slabs_log2: 17,
            slots_log2: 10,
            coherence: Coherence::Hardware,
            liveness: Liveness::Process,
            huge_log2: 40,
            mcas: McasKind::FlushCas,
            hwcc_user_log2: 0,
        }
    }

    #[test]
    fn word_round_trips_and_is_never_zero() {
        let g = geometry();
        assert_ne!(g.to_word(), 0);
        assert_eq!(Geometry::from_word(g.to_word()), Ok(g));
    }

    #[test]
    fn foreign_version_and_corrupt_words_are_refused() {
        assert_eq!(
            Geometry::from_word(0x1234),
            Err(FormatProblem::Foreign(0x1234))
        );
        let next = FORMAT_VERSION + 1;
        let other_version = (geometry().to_word() & !(0xFF << 24)) | next << 24;
        assert_eq!(
            Geometry::from_word(other_version),
            Err(FormatProblem::Version(next))
        );
        assert!(matches!(
            Geometry::from_word(geometry().to_word() | 1 << 60),
            Err(FormatProblem::Corrupt(_))
        ), "a user HWcc area of 2^4 bytes");
        let huge = Geometry {
            small_slabs_log2: 40,
            ..geometry()
        };
        assert!(matches!(
            Geometry::from_word(huge.to_word()),
            Err(FormatProblem::Corrupt(_))
        ));
    }

    #[test]
    fn regions_are_ordered_aligned_and_disjoint() {
        let g = geometry();
        let l = g.layout();
        assert!(l.hwcc >= SIZE_HEADER);
        assert!(l.small_remote + 8 * g.small_slabs_max() <= l.large_remote);
        assert!(l.hwcc_end <= l.slots);
        assert!(l.slots + SIZE_SLOT as u64 * g.slots() <= l.small_desc);
        assert!(l.large_desc + SIZE_DESC as u64 * g.large_slabs_max() <= l.small_data);
        assert_eq!(l.small_data % ALIGN_DATA, 0);
        assert_eq!(l.large_data % ALIGN_DATA, 0);
        assert!(l.small_data + (g.small_slabs_max() << SHIFT_SMALL_SLAB) <= l.large_data);
        assert_eq!(l.huge_ranges, l.large_remote + 8 * g.large_slabs_max());
        assert_eq!(l.huge_ranges + 8 * COUNT_HUGE_RANGES, l.slot_acks);
        assert_eq!(l.slot_acks + 8 * g.slots(), l.slot_owners);
        assert_eq!(l.slot_owners + 8 * g.slots(), l.hazard_owners);
        assert_eq!(l.hazard_owners + 8 * COUNT_HAZARD_RECORDS, l.hwcc_end);
        assert!(l.large_data + (g.large_slabs_max() << SHIFT_LARGE_SLAB) <= l.huge_hazard);
        assert!(l.huge_hazard + SIZE_HAZARD_RECORD * COUNT_HAZARD_RECORDS <= l.huge_local);
        assert!(l.huge_local + SIZE_HUGE_LOCAL * g.slots() <= l.huge_data);
        assert_eq!(l.huge_data % ALIGN_DATA, 0);
        assert_eq!(l.total, l.huge_data + (1 << 40));
        assert_eq!(g.huge_range_shift(), 30, "1 TiB in 1024 ranges of 1 GiB");
    }

    #[test]
    fn an_mcas_heap_puts_its_region_between_the_hwcc_words_and_the_slots() {
        let hardware = geometry();
        let mcas = Geometry {
            coherence: Coherence::Mcas,
            mcas: McasKind::Nmp,
            ..geometry()
        };
        let (h, m) = (hardware.layout(), mcas.layout());
        assert_eq!(h.mcas_bytes, 0, "other modes keep their layout");
        assert_eq!(h.slots, h.hwcc_end.next_multiple_of(ALIGN_PAGE));
        assert_eq!(m.hwcc_end, m.hazard_owners + 8 * COUNT_HAZARD_RECORDS);
        assert_eq!(m.mcas % ALIGN_PAGE, 0);
        assert!(
            m.hwcc_end <= m.mcas,
            "the targets stay apart from the lines"
        );
        assert_eq!(
            m.mcas_bytes,
            region_bytes(mcas.slots() as u32 + COUNT_PROCESS_LINES as u32),
            "a line pair per slot and per process line"
        );
        assert!(m.mcas + m.mcas_bytes <= m.slots);
        assert_eq!(Geometry::from_word(mcas.to_word()), Ok(mcas));
        let device = Geometry {
            mcas: McasKind::Device,
            ..mcas
        };
        assert!(device.validate().is_err());
    }

    #[test]
    fn the_user_hwcc_area_ends_the_hwcc_region_and_round_trips() {
        let none = geometry().layout();
        assert_eq!(none.hwcc_user, none.hwcc_end, "no area: an empty range");
        for log2 in [HWCC_USER_LOG2_MIN, 26, HWCC_USER_LOG2_MAX] {
            let g = Geometry {
                hwcc_user_log2: log2,
                coherence: Coherence::Mcas,
                ..geometry()
            };
            let l = g.layout();
            assert_eq!(l.hwcc_user % ALIGN_PAGE, 0);
            assert!(l.hwcc_user >= l.hazard_owners + 8 * COUNT_HAZARD_RECORDS);
            assert_eq!(l.hwcc_end - l.hwcc_user, 1 << log2);
            assert!(l.hwcc_end <= l.mcas && l.mcas + l.mcas_bytes <= l.slots);
            assert_eq!(Geometry::from_word(g.to_word()), Ok(g));
        }
        for log2 in [1, 11, 41, 63] {
            let g = Geometry {
                hwcc_user_log2: log2,
                ..geometry()
            };
            assert!(g.validate().is_err(), "hwcc_user_log2 {log2}");
        }
    }

    #[test]
    fn huge_heap_sizes_outside_the_range_are_refused() {
        for log2 in [1, 30, 45, 63] {
            let g = Geometry {
                huge_log2: log2,
                ..geometry()
            };
            assert!(g.validate().is_err(), "huge_log2 {log2}");
        }
        let none = Geometry {
            huge_log2: 0,
            ..geometry()
        };
        assert_eq!(none.layout().total, none.layout().huge_data);
    }
}
