//! The huge heap: allocations over 512 KiB, one file mapping each (CXLALLOC §3.1.2, §3.3.2).
//!
//! # Map
//! huge data range (2^huge_log2 bytes, 1 TiB by default) → `COUNT_HUGE_RANGES` ranges (1 GiB
//! each by default) → runs of ranges claimed by one thread slot → allocations carved from a
//! slot's runs, each described by one [`HugeDesc`] in that slot's [`HugeLocal`].
//! - The **reservation array** (`huge_ranges`, HWcc, 8 KiB whatever the heap's size) holds one
//!   word per range: zero when free, else the claiming slot and its run. A slot claims a run by
//!   CAS of each word from zero, so concurrent mappers in any process never share address space
//!   (spatial pointer consistency), and gives it back when no allocation is left in it.
//! - A slot's **descriptors** (`huge_local`, SWcc, one writer at a time): `offset`, `len`,
//!   `state` (empty → live → freed → empty). Only the owning slot makes a descriptor live or
//!   empty; the one thread that frees the allocation makes it freed, so no descriptor word is
//!   ever written by two threads at once.
//! - **Mapping**: the allocating process maps the allocation at its offset; every other process
//!   maps it from the SIGSEGV handler on first touch (`fault.rs`), after publishing a hazard
//!   offset (`hazard.rs`).
//! - **Free and reclaim**: the freer marks the descriptor freed and unmaps its own process's
//!   mapping. Every other process unmaps lazily: on its next huge allocation, huge free or
//!   [`crate::Heap::collect_huge`] it unmaps whatever its hazard record names that is no longer
//!   live. The owning slot reclaims a freed descriptor (punches the file's pages out, empties the
//!   descriptor, gives empty runs back) only when no live process's hazard record names it.
//!   Freed descriptors of a slot released meanwhile are reclaimed by whichever process sweeps
//!   it next (`owner.rs`): every collection claims a few such slots for a moment.
//!
//! # Transitions (each logged in the slot's huge log word before it starts)
//! | step | operands | does |
//! | --- | --- | --- |
//! | [`HugeStep::ClaimRun`] | first range, count | CAS ranges zero → slot's run word |
//! | [`HugeStep::Allocate`] | descriptor | back the pages, descriptor → live, map |
//! | [`HugeStep::Reclaim`] | descriptor | punch the pages, descriptor → empty |
//! | [`HugeStep::ReleaseRun`] | first range, count | ranges → zero, last first |
//! | [`HugeStep::Free`] | owner slot, descriptor, generation | descriptor live → freed |
//!
//! Log-before-do: [`HugeLocal::log`] is written with [`HugeStep::to_word`] before each step and
//! cleared after it (a free logs in the *freeing* slot's word, which may not own the block).
//! The slot's recovery word (`recovery.rs`) reports blocks to the application, as for small
//! and large blocks: a huge allocation logs `Alloc(offset)` there once its place is chosen
//! (reported only if this slot's descriptor of it went live), a free logs `Free(offset)` once
//! the descriptor is freed.
//! [`ThreadHandle::recover_huge`] is the recovery, one `match`, idempotent given the word (run
//! by every adoption of a dead slot, `recover.rs`): a claim is undone for ranges of the logged
//! run that hold this slot's word but no descriptor; an allocation whose descriptor never went
//! live has its pages punched out and the descriptor emptied, one that went live is reported
//! in flight; a reclaim is redone; a release is redone; a free is redone unless it took
//! effect, and reported. Crash points (`crash.rs`, `huge_*`) sit in every window.

mod check;
mod owner;

pub use check::HugeReport;
pub use owner::COUNT_SWEEP_SLOTS;

use crate::crash_point;
use crate::dcas::Writer;
use crate::error::{AllocError, ResolveError};
use crate::hazard::{HazardRecord, Hazards, COUNT_HAZARD_RECORDS, SIZE_HAZARD_RECORD};
use crate::heap::Heap;
use crate::layout::{Geometry, Layout, COUNT_HUGE_RANGES};
use crate::mcas::HeapMcas;
use crate::offset::Offset;
use crate::slot::Owner;
use crate::thread::ThreadHandle;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use std::alloc::Layout as AllocLayout;
use std::sync::Arc;

pub use crate::layout::SIZE_HUGE_LOCAL;
/// Huge descriptors per slot: the most huge allocations one slot may hold live or unreclaimed.
pub const COUNT_HUGE_DESC: usize = (SIZE_HUGE_LOCAL as usize - 32) / 32;
/// Alignment of every huge allocation (a transparent huge page).
pub const ALIGN_HUGE: u64 = 2 << 20;
const SIZE_PAGE: u64 = 4096;

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
#[repr(C)]
pub struct HugeDesc {
    /// `DESC_*`.
    pub state: AtomicU64,
    /// Offset of the allocation's first byte.
    pub offset: AtomicU64,
    /// Bytes mapped (the request rounded up to pages).
    pub len: AtomicU64,
    /// Allocations made in this descriptor (mod 2^28).
    pub generation: AtomicU64,
}

/// Bits of a descriptor generation a free logs.
pub const MASK_GENERATION: u64 = (1 << 28) - 1;

/// A thread slot's huge state (CXLALLOC `HugeLocal`), in its own per-slot array so the slot
/// itself is untouched.
#[repr(C)]
pub struct HugeLocal {
    /// The transition under way ([`HugeStep::to_word`]), zero when none. Owner only.
    pub log: AtomicU64,
    reserved: [AtomicU64; 3],
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

/// What a process needs to find and map huge allocations: plain numbers, so the SIGSEGV
/// handler can hold a copy.
#[derive(Clone, Copy, Debug)]
pub struct HugeView {
    base: usize,
    huge_data: u64,
    total: u64,
    range_shift: u32,
    ranges_at: u64,
    hazard_at: u64,
    hazard_owners_at: u64,
    local_at: u64,
    slots: u64,
    record: u64,
    fd: libc::c_int,
    coherence: Coherence,
}

/// A live or freed allocation found by a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Owning slot.
    pub slot: u32,
    /// Descriptor index in the slot.
    pub desc: usize,
    /// The allocation's offset.
    pub offset: u64,
    /// Its mapped length.
    pub len: u64,
}

impl HugeView {
    pub(crate) fn new(
        base: *mut u8,
        geometry: &Geometry,
        layout: &Layout,
        record: usize,
        fd: libc::c_int,
    ) -> HugeView {
        HugeView {
            base: base as usize,
            huge_data: layout.huge_data,
            total: layout.total,
            range_shift: geometry.huge_range_shift(),
            ranges_at: layout.huge_ranges,
            hazard_at: layout.huge_hazard,
            hazard_owners_at: layout.hazard_owners,
            local_at: layout.huge_local,
            slots: geometry.slots(),
            record: record as u64,
            fd,
            coherence: geometry.coherence,
        }
    }

    /// Whether `offset` lies in the huge data range.
    #[inline]
    pub fn contains(&self, offset: u64) -> bool {
        (self.huge_data..self.total).contains(&offset)
    }

    /// The reservation array.
    pub fn ranges(&self) -> &[AtomicU64] {
        // SAFETY: the array lies in the eagerly mapped, backed metadata (backed at open); atomics
        // are valid for any bits.
        unsafe {
            std::slice::from_raw_parts(
                (self.base + self.ranges_at as usize) as *const AtomicU64,
                COUNT_HUGE_RANGES as usize,
            )
        }
    }

    /// Every process's hazard record.
    pub fn records(&self) -> &[HazardRecord] {
        const _: () = assert!(std::mem::size_of::<HazardRecord>() as u64 == SIZE_HAZARD_RECORD);
        // SAFETY: as `ranges`: backed metadata of plain atomics, one record per 4 KiB.
        unsafe {
            std::slice::from_raw_parts(
                (self.base + self.hazard_at as usize) as *const HazardRecord,
                COUNT_HAZARD_RECORDS as usize,
            )
        }
    }

    /// This process's hazard record.
    pub fn record(&self) -> &HazardRecord {
        &self.records()[self.record as usize]
    }

    /// Every hazard record with its owner word (in the HWcc region), for claims and rule 3.
    pub fn hazards(&self) -> Hazards<'_> {
        // SAFETY: as `ranges`: the owner words lie in the backed HWcc region, one per record.
        let owners = unsafe {
            std::slice::from_raw_parts(
                (self.base + self.hazard_owners_at as usize) as *const AtomicU64,
                COUNT_HAZARD_RECORDS as usize,
            )
        };
        Hazards {
            records: self.records(),
            owners,
            coherence: self.coherence,
        }
    }

    /// Rule 1 on this process's record (written back: SWcc). Async-signal-safe.
    fn publish(&self, offset: u64) -> bool {
        self.record().publish(offset, self.coherence)
    }

    /// Rule 2 on this process's record (written back: SWcc). Async-signal-safe.
    fn withdraw(&self, offset: u64) {
        self.record().withdraw(offset, self.coherence);
    }

    /// Slot `slot`'s huge state.
    pub fn local(&self, slot: u32) -> &HugeLocal {
        assert!(u64::from(slot) < self.slots);
        let at = self.local_at + u64::from(slot) * SIZE_HUGE_LOCAL;
        // SAFETY: backed metadata of plain atomics, one `HugeLocal` per slot.
        unsafe { &*((self.base + at as usize) as *const HugeLocal) }
    }

    /// Bytes of one range.
    pub fn range_bytes(&self) -> u64 {
        1 << self.range_shift
    }

    /// The offset of range `i`'s first byte.
    pub fn range_offset(&self, i: u32) -> u64 {
        self.huge_data + (u64::from(i) << self.range_shift)
    }

    /// The run word of the range holding `offset`.
    fn run_of(&self, offset: u64) -> Option<RunWord> {
        if !self.contains(offset) {
            return None;
        }
        let i = (offset - self.huge_data) >> self.range_shift;
        let run = RunWord::unpack(self.ranges()[i as usize].load(Ordering::Acquire))?;
        (u64::from(run.slot) < self.slots).then_some(run)
    }

    /// Reads descriptor `d` consistently: its state before and after the fields agree.
    fn read(&self, d: &HugeDesc) -> (u64, u64, u64) {
        self.coherence.invalidate(
            (d as *const HugeDesc).cast(),
            std::mem::size_of::<HugeDesc>(),
        );
        let state = d.state.load(Ordering::Acquire);
        let (offset, len) = (
            d.offset.load(Ordering::Acquire),
            d.len.load(Ordering::Acquire),
        );
        if d.state.load(Ordering::Acquire) != state {
            return (DESC_EMPTY, 0, 0);
        }
        (state, offset, len)
    }

    /// The live or freed allocation covering `offset` (any byte of it when `exact` is false,
    /// its first byte otherwise). Async-signal-safe.
    pub fn find(&self, offset: u64, exact: bool, states: &[u64]) -> Option<Found> {
        let run = self.run_of(offset)?;
        let local = self.local(run.slot);
        local.descs.iter().enumerate().find_map(|(i, d)| {
            let (state, start, len) = self.read(d);
            let hit = if exact {
                start == offset
            } else {
                (start..start + len).contains(&offset)
            };
            (len != 0 && hit && states.contains(&state)).then_some(Found {
                slot: run.slot,
                desc: i,
                offset: start,
                len,
            })
        })
    }

    /// Publishes and maps the live allocation at `offset` in this process. Async-signal-safe.
    pub fn map_live(&self, found: Found) -> bool {
        if !self.publish(found.offset) {
            return false;
        }
        if !self.map(found.offset, found.len) {
            self.withdraw(found.offset);
            return false;
        }
        true
    }

    /// The SIGSEGV handler's question: does `addr` lie in a live allocation this process may
    /// map? If so map it (publishing its hazard offset first) and say so.
    pub fn map_on_fault(&self, addr: usize) -> bool {
        let offset = addr.wrapping_sub(self.base) as u64;
        if !self.contains(offset) {
            return false;
        }
        match self.find(offset, false, &[DESC_LIVE]) {
            Some(found) => self.map_live(found),
            None => false,
        }
    }

    /// Maps the file's `[offset, offset + len)` at the same offset. Async-signal-safe.
    fn map(&self, offset: u64, len: u64) -> bool {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: `[offset, offset + len)` lies in this process's huge reservation, which only
        // the huge heap maps into; MAP_FIXED replaces exactly that range.
        let got = unsafe {
            libc::mmap(
                (self.base + offset as usize) as *mut libc::c_void,
                len as usize,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.fd,
                offset as libc::off_t,
            )
        };
        got != libc::MAP_FAILED
    }

    /// Puts the reservation back over `[offset, offset + len)`: the range stays ours and any
    /// touch faults again (and is refused unless a live allocation is there by then).
    fn unmap(&self, offset: u64, len: u64) {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
        // SAFETY: as `map`; a PROT_NONE anonymous mapping over our own reservation.
        unsafe {
            libc::mmap(
                (self.base + offset as usize) as *mut libc::c_void,
                len as usize,
                libc::PROT_NONE,
                flags,
                -1,
                0,
            )
        };
    }

    /// The lazy unmap: every allocation this process mapped that is no longer live is unmapped
    /// and its hazard offset withdrawn (rule 2). Returns how many.
    pub fn unmap_freed(&self) -> usize {
        let record = self.record();
        let mut count = 0;
        for offset in record.published(self.coherence) {
            if self.find(offset, true, &[DESC_LIVE]).is_some() {
                continue;
            }
            if let Some(found) = self.find(offset, true, &[DESC_FREED]) {
                self.unmap(found.offset, found.len);
                crash_point!("huge_unmap.unmapped");
            }
            self.withdraw(offset);
            count += 1;
        }
        count
    }

    /// The end of the furthest live or freed allocation: the file must reach it.
    pub fn end_of_allocations(&self) -> u64 {
        (0..self.slots as u32)
            .flat_map(|slot| self.occupied(slot))
            .map(|(offset, len)| offset + len)
            .max()
            .unwrap_or(0)
    }

    /// Unmaps the whole huge range here (the process is letting go of the heap).
    fn unmap_all(&self) {
        self.unmap(self.huge_data, self.total - self.huge_data);
    }

    fn write_back(&self, d: &HugeDesc) {
        self.coherence.write_back(
            (d as *const HugeDesc).cast(),
            std::mem::size_of::<HugeDesc>(),
        );
    }

    /// The runs slot `slot` holds, in range order.
    pub fn runs_of(&self, slot: u32) -> Vec<RunWord> {
        self.ranges()
            .iter()
            .enumerate()
            .filter_map(|(i, w)| RunWord::unpack(w.load(Ordering::Acquire)).map(|r| (i, r)))
            .filter(|(i, r)| r.slot == slot && r.first as usize == *i)
            .map(|(_, r)| r)
            .collect()
    }

    /// Slot `slot`'s allocations (live or freed) as `(offset, len)`, by offset.
    pub fn occupied(&self, slot: u32) -> Vec<(u64, u64)> {
        let mut out: Vec<_> = self
            .local(slot)
            .descs
            .iter()
            .map(|d| self.read(d))
            .filter(|&(state, _, len)| state != DESC_EMPTY && len != 0)
            .map(|(_, offset, len)| (offset, len))
            .collect();
        out.sort_unstable();
        out
    }
}

/// This process's part in the huge heap of one open heap: its hazard record (its place in the
/// SIGSEGV handler's registry is the heap's, dropped before this). Dropped before the heap's
/// mapping.
pub(crate) struct HugeProcess {
    pub(crate) view: HugeView,
    /// `HugeBacking as u64`: this process's choice, changeable while open.
    backing: std::sync::atomic::AtomicU64,
    /// Where this process's next sweep of released slots starts (`owner.rs`).
    sweep_cursor: std::sync::atomic::AtomicUsize,
    /// This process as the record's owner.
    me: Owner,
    /// An `mcas` heap's hook, to give the record back through (its process line).
    mcas: Option<Arc<HeapMcas>>,
}

impl HugeProcess {
    /// This process's part, holding the claimed record `view.record` for `me` (dropping it
    /// gives the record back).
    pub(crate) fn new(
        view: HugeView,
        backing: HugeBacking,
        me: Owner,
        mcas: Option<Arc<HeapMcas>>,
    ) -> HugeProcess {
        HugeProcess {
            view,
            backing: std::sync::atomic::AtomicU64::new(backing as u64),
            sweep_cursor: std::sync::atomic::AtomicUsize::new(0),
            me,
            mcas,
        }
    }

    fn backing(&self) -> HugeBacking {
        match self.backing.load(std::sync::atomic::Ordering::Relaxed) {
            0 => HugeBacking::Reserve,
            _ => HugeBacking::Sparse,
        }
    }
}

impl Drop for HugeProcess {
    fn drop(&mut self) {
        self.view.unmap_all();
        let cas = |word: &AtomicU64, current, new| {
            crate::mcas::cas_as_process(self.mcas.as_deref(), word, current, new)
        };
        self.view
            .hazards()
            .release(self.view.record as usize, self.me, cas);
    }
}

impl Heap {
    pub(crate) fn huge_view(&self) -> Option<&HugeView> {
        self.shared.huge.as_ref().map(|h| &h.view)
    }

    /// Unmaps every huge allocation this process has mapped that was freed since, withdrawing
    /// its hazard offsets so its owner can reclaim it, then sweeps a few released slots
    /// (`owner.rs`). Huge allocations and frees do this themselves; a process that only reads
    /// huge blocks calls it now and then. Returns allocations reclaimed by the sweep.
    pub fn collect_huge(&self) -> usize {
        let Some(huge) = &self.shared.huge else {
            return 0;
        };
        huge.view.unmap_freed();
        owner::sweep_released(self, &huge.view, &huge.sweep_cursor)
    }

    /// Changes how this process backs the huge blocks it allocates from now on (no effect on a
    /// heap without a huge heap).
    pub fn set_huge_backing(&self, backing: HugeBacking) {
        if let Some(huge) = &self.shared.huge {
            huge.backing
                .store(backing as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The live or freed huge allocation starting at `offset`: its slot, descriptor and length.
    pub fn huge_allocation(&self, offset: Offset) -> Option<Found> {
        self.huge_view()?
            .find(offset.0, true, &[DESC_LIVE, DESC_FREED])
    }

    /// This process's address of `[offset, offset + len)`, checked: for offsets that came from
    /// outside the process (a file, a socket, another process's bug). The range must lie inside
    /// one grown slab of the small or large heap or inside one live huge allocation, which is
    /// mapped here if it is not yet. Anything else is an error, never a wild mapping.
    pub fn resolve_checked(&self, offset: Offset, len: u64) -> Result<*mut u8, ResolveError> {
        let refuse = ResolveError {
            offset: offset.0,
            len,
        };
        let end = offset.0.checked_add(len.max(1)).ok_or(refuse)?;
        for kind in crate::class::Kind::ALL {
            let heap = self.slab_heap(kind);
            if let Some((slab, in_slab)) = heap.slab_of(offset.0) {
                let fits = in_slab + (end - offset.0) <= heap.slab_bytes();
                return if fits && slab < self.len(heap) {
                    Ok(self.resolve(offset))
                } else {
                    Err(refuse)
                };
            }
        }
        let view = self.huge_view().ok_or(refuse)?;
        let found = view
            .find(offset.0, false, &[DESC_LIVE])
            .filter(|f| end <= f.offset + f.len)
            .ok_or(refuse)?;
        if !view.record().contains(found.offset, view.coherence) && !view.map_live(found) {
            return Err(refuse);
        }
        Ok(self.resolve(offset))
    }
}

impl ThreadHandle {
    fn huge(&self) -> Option<(&HugeView, HugeBacking)> {
        self.heap()
            .shared
            .huge
            .as_ref()
            .map(|h| (&h.view, h.backing()))
    }

    /// This slot as the owner of its huge state.
    fn huge_owner<'a>(&'a self, view: &'a HugeView) -> owner::HugeOwner<'a> {
        owner::HugeOwner {
            heap: self.heap(),
            view,
            slot: self.slot_index(),
        }
    }

    fn huge_log(&self, step: Option<HugeStep>) {
        let (view, _) = self.huge().expect("huge heap");
        self.huge_owner(view).log(step);
    }

    /// Allocates a huge block: lazy unmap and reclaim first, then a descriptor and a place in
    /// one of this slot's runs (claiming a new run if none fits), back, publish, map.
    #[cold]
    pub(crate) fn allocate_huge(&self, layout: AllocLayout) -> Result<Offset, AllocError> {
        let unsupported = AllocError::Unsupported {
            size: layout.size(),
            align: layout.align(),
        };
        let Some((view, backing)) = self.huge() else {
            return Err(unsupported);
        };
        if layout.align() as u64 > ALIGN_HUGE {
            return Err(unsupported);
        }
        let len = (layout.size() as u64).next_multiple_of(SIZE_PAGE);
        self.log_huge_start();
        self.collect_huge();
        let me = self.slot_index();
        let local = view.local(me);
        let desc = local
            .descs
            .iter()
            .position(|d| d.state.load(Ordering::Acquire) == DESC_EMPTY)
            .ok_or(AllocError::OutOfMemory)?;
        let offset = match self.fit(view, len) {
            Some(offset) => offset,
            None => self.claim_run(view, len)?,
        };
        let d = &local.descs[desc];
        d.offset.store(offset, Ordering::Relaxed);
        d.len.store(len, Ordering::Relaxed);
        self.log_huge_block(crate::recovery::Op::Alloc, offset);
        self.huge_log(Some(HugeStep::Allocate { desc: desc as u16 }));
        crash_point!("huge_alloc.logged");
        let file = &self.heap().shared.file;
        let backed = match backing {
            HugeBacking::Reserve => file.back(offset, len),
            HugeBacking::Sparse => file.back(offset + len - SIZE_PAGE, SIZE_PAGE),
        };
        if backed.is_err() {
            self.undo_allocate(view, desc);
            return Err(AllocError::OutOfMemory);
        }
        crash_point!("huge_alloc.backed");
        // One writer (this slot): a plain increment, written back with the state below.
        let generation = d.generation.load(Ordering::Relaxed);
        d.generation
            .store(generation.wrapping_add(1), Ordering::Relaxed);
        d.state.store(DESC_LIVE, Ordering::Release);
        view.write_back(d);
        crash_point!("huge_alloc.live");
        if !view.publish(offset) {
            return Err(self.undo_live(view, desc));
        }
        crash_point!("huge_alloc.published");
        if !view.map(offset, len) {
            view.withdraw(offset);
            return Err(self.undo_live(view, desc));
        }
        crash_point!("huge_alloc.mapped");
        self.huge_log(None);
        crash_point!("huge_alloc.done");
        Ok(Offset(offset))
    }

    /// Undoes an allocation whose descriptor went live but could not be mapped here.
    fn undo_live(&self, view: &HugeView, desc: usize) -> AllocError {
        view.local(self.slot_index()).descs[desc]
            .state
            .store(DESC_FREED, Ordering::Release);
        self.undo_allocate(view, desc);
        AllocError::OutOfMemory
    }

    fn undo_allocate(&self, view: &HugeView, desc: usize) {
        let owner = self.huge_owner(view);
        owner.reclaim(desc);
        owner.release_empty_runs();
        owner.log(None);
    }

    /// First fit for `len` bytes in this slot's runs, between its allocations.
    fn fit(&self, view: &HugeView, len: u64) -> Option<u64> {
        let me = self.slot_index();
        let occupied = view.occupied(me);
        view.runs_of(me).into_iter().find_map(|run| {
            let start = view.range_offset(run.first);
            let end = start + (u64::from(run.count) << view.range_shift);
            let mut cursor = start;
            for &(offset, used) in occupied.iter().filter(|(o, _)| (start..end).contains(o)) {
                if offset >= cursor + len {
                    return Some(cursor);
                }
                cursor = cursor.max((offset + used).next_multiple_of(ALIGN_HUGE));
            }
            (end >= cursor + len).then_some(cursor)
        })
    }

    /// `ClaimRun`: the lowest run of free ranges long enough for `len`, claimed by one CAS per
    /// range; on losing a range to another slot, the ranges taken so far go back.
    fn claim_run(&self, view: &HugeView, len: u64) -> Result<u64, AllocError> {
        let count = len.div_ceil(view.range_bytes()) as usize;
        let ranges = view.ranges();
        let mut first = 0;
        while first + count <= ranges.len() {
            if let Some(busy) = (first..first + count)
                .rev()
                .find(|&i| ranges[i].load(Ordering::Acquire) != 0)
            {
                first = busy + 1;
                continue;
            }
            let (first32, count32) = (first as u32, count as u32);
            self.huge_log(Some(HugeStep::ClaimRun {
                first: first32,
                count: count32,
            }));
            crash_point!("huge_claim.logged");
            let word = RunWord {
                slot: self.slot_index(),
                first: first32,
                count: count32,
            }
            .pack();
            // Through the writer hook: by mCAS in an `mcas` heap (the array is in its region).
            let lost = (first..first + count).find(|&i| {
                let taken = self.cas_word(&ranges[i], 0, word).is_ok();
                if taken {
                    crash_point!("huge_claim.range");
                }
                !taken
            });
            match lost {
                None => return Ok(view.range_offset(first32)),
                Some(at) => {
                    for range in ranges[first..at].iter().rev() {
                        self.store_word(range, 0);
                    }
                    first = at + 1;
                }
            }
        }
        self.huge_log(None);
        Err(AllocError::OutOfMemory)
    }

    /// Frees a huge block (from any thread of any process): logged in this slot's huge log
    /// (with the descriptor's generation), the descriptor becomes freed, this process unmaps
    /// it, and its owner reclaims it once no process maps it.
    #[cold]
    pub(crate) fn free_huge(&self, offset: Offset) {
        let Some((view, _)) = self.huge() else {
            panic!("podkv: free of {offset}, which lies in no slab of the heap");
        };
        let Some(found) = view.find(offset.0, true, &[DESC_LIVE]) else {
            panic!("podkv: free of {offset}, which is not a live huge allocation");
        };
        let d = &view.local(found.slot).descs[found.desc];
        let generation = d.generation.load(Ordering::Acquire) & MASK_GENERATION;
        let me = self.heap().slot(u64::from(self.slot_index()));
        me.aux.store(offset.0, Ordering::Relaxed);
        self.huge_log(Some(HugeStep::Free {
            slot: found.slot,
            desc: found.desc as u16,
            generation: generation as u32,
        }));
        crash_point!("huge_free.logged");
        d.state.store(DESC_FREED, Ordering::Release);
        view.write_back(d);
        crash_point!("huge_free.marked");
        self.log_huge_block(crate::recovery::Op::Free, offset.0);
        self.huge_log(None);
        crash_point!("huge_free.done");
        self.collect_huge();
    }

    /// This slot's housekeeping, as every huge allocation and free does it: unmap what this
    /// process mapped and was freed since, reclaim this slot's freed allocations that no
    /// process maps any more, give back runs left empty, then sweep a few released slots
    /// (`owner.rs`). Returns allocations reclaimed.
    pub fn collect_huge(&self) -> usize {
        let Some(huge) = &self.heap().shared.huge else {
            return 0;
        };
        huge.view.unmap_freed();
        let mine = self.huge_owner(&huge.view).collect();
        mine + owner::sweep_released(self.heap(), &huge.view, &huge.sweep_cursor)
    }

    /// Finishes or undoes the huge step this slot's log word names, as after a crash of the
    /// slot's previous owner (`owner.rs`): returns the step and the block it leaves in flight.
    pub(crate) fn recover_huge_in_flight(&self) -> Option<(HugeStep, crate::thread::InFlight)> {
        let (view, _) = self.huge()?;
        self.huge_owner(view).recover()
    }

    /// As [`ThreadHandle::recover_huge_in_flight`], the step only.
    pub fn recover_huge(&self) -> Option<HugeStep> {
        self.recover_huge_in_flight().map(|(step, _)| step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_their_log_word() {
        let steps = [
            HugeStep::ClaimRun {
                first: 1023,
                count: 17,
            },
            HugeStep::Allocate { desc: 126 },
            HugeStep::Reclaim { desc: 0 },
            HugeStep::ReleaseRun { first: 0, count: 1 },
            HugeStep::Free {
                slot: 16383,
                desc: 126,
                generation: (MASK_GENERATION - 1) as u32,
            },
        ];
        for step in steps {
            let word = step.to_word();
            assert_ne!(word, 0);
            assert!(word < 1 << 56, "fits the recovery word's operand bits");
            assert_eq!(HugeStep::from_word(word), Some(step));
        }
        assert_eq!(HugeStep::from_word(0), None);
    }

    fn heap_in_shm() -> (tempfile::TempDir, Heap) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let config = crate::Config {
            small_bytes: 1 << 25,
            large_bytes: 1 << 25,
            slots: 4,
            ..crate::Config::default()
        };
        let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
        (dir, heap)
    }

    #[test]
    fn recovery_undoes_a_half_claimed_run_and_spares_another_slot_s_range() {
        let (_dir, heap) = heap_in_shm();
        let t = heap.thread().unwrap();
        let view = *heap.huge_view().unwrap();
        let mine = RunWord {
            slot: t.slot_index(),
            first: 5,
            count: 3,
        };
        let theirs = RunWord {
            slot: t.slot_index() + 1,
            first: 6,
            count: 1,
        };
        view.ranges()[5].store(mine.pack(), Ordering::Release);
        view.ranges()[6].store(theirs.pack(), Ordering::Release);
        t.huge_log(Some(HugeStep::ClaimRun { first: 5, count: 3 }));
        assert_eq!(
            t.recover_huge(),
            Some(HugeStep::ClaimRun { first: 5, count: 3 })
        );
        assert_eq!(view.ranges()[5].load(Ordering::Acquire), 0);
        assert_eq!(view.ranges()[6].load(Ordering::Acquire), theirs.pack());
        assert_eq!(t.recover_huge(), None, "the log is clear");
        view.ranges()[6].store(0, Ordering::Release);
    }

    #[test]
    fn recovery_of_an_allocation_cut_before_it_went_live_returns_its_pages() {
        let (_dir, heap) = heap_in_shm();
        let t = heap.thread().unwrap();
        let view = *heap.huge_view().unwrap();
        let baseline = heap.file_allocated_bytes().unwrap();
        // The crash: run claimed, descriptor written, pages backed, never made live.
        let offset = t.claim_run(&view, 8 << 20).unwrap();
        let d = &view.local(t.slot_index()).descs[3];
        d.offset.store(offset, Ordering::Relaxed);
        d.len.store(8 << 20, Ordering::Relaxed);
        t.huge_log(Some(HugeStep::Allocate { desc: 3 }));
        heap.shared.file.back(offset, 8 << 20).unwrap();
        assert!(heap.file_allocated_bytes().unwrap() >= baseline + (8 << 20));
        assert_eq!(t.recover_huge(), Some(HugeStep::Allocate { desc: 3 }));
        assert_eq!(t.recover_huge(), None);
        let report = heap.check();
        assert!(report.is_valid(), "{:#?}", report.problems);
        assert_eq!(report.huge.ranges_claimed, 0);
        assert_eq!(heap.file_allocated_bytes().unwrap(), baseline);
    }

    #[test]
    fn recovery_finishes_a_reclaim_and_leaves_a_finished_allocation_alone() {
        let (_dir, heap) = heap_in_shm();
        let t = heap.thread().unwrap();
        let view = *heap.huge_view().unwrap();
        let live = t
            .allocate(AllocLayout::from_size_align(3 << 20, 8).unwrap())
            .unwrap();
        let desc = heap.huge_allocation(live).unwrap().desc as u16;
        t.huge_log(Some(HugeStep::Allocate { desc }));
        t.recover_huge();
        assert!(
            heap.resolve_checked(live, 8).is_ok(),
            "a live block stays live"
        );
        // The crash: freed and unmapped everywhere, reclaim logged, pages not yet punched.
        let d = &view.local(t.slot_index()).descs[usize::from(desc)];
        d.state.store(DESC_FREED, Ordering::Release);
        view.unmap_freed();
        t.huge_log(Some(HugeStep::Reclaim { desc }));
        assert_eq!(t.recover_huge(), Some(HugeStep::Reclaim { desc }));
        let report = heap.check();
        assert!(report.is_valid(), "{:#?}", report.problems);
        assert_eq!((report.huge.live, report.huge.freed), (0, 0));
        assert_eq!(report.huge.ranges_claimed, 0);
    }

    #[test]
    fn run_words_round_trip_and_are_never_zero() {
        let run = RunWord {
            slot: 0,
            first: 1000,
            count: 24,
        };
        assert_ne!(run.pack(), 0);
        assert_eq!(RunWord::unpack(run.pack()), Some(run));
        assert_eq!(RunWord::unpack(0), None);
    }
}
