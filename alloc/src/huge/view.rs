//! [`HugeView`]: what a process needs to find and map huge allocations, as plain numbers so
//! the SIGSEGV handler can hold a copy; lookups, mapping and unmapping, the lazy unmap.

use super::desc::{
    HugeDesc, HugeLocal, RunWord, DESC_EMPTY, DESC_FREED, DESC_LIVE,
};
use crate::crash_point;
use crate::hazard::{HazardRecord, Hazards, COUNT_HAZARD_RECORDS, SIZE_HAZARD_RECORD};
use crate::layout::{Geometry, Layout, COUNT_HUGE_RANGES, SIZE_HUGE_LOCAL};
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use podkv_hw::topology::{Placement, RawPlacement};

/// What a process needs to find and map huge allocations: plain numbers, so the SIGSEGV
/// handler can hold a copy.
#[derive(Clone, Copy, Debug)]
pub struct HugeView {
    pub(super) base: usize,
    pub(super) huge_data: u64,
    pub(super) total: u64,
    pub(super) range_shift: u32,
    pub(super) ranges_at: u64,
    pub(super) hazard_at: u64,
    pub(super) hazard_owners_at: u64,
    pub(super) local_at: u64,
    pub(super) slots: u64,
    pub(super) record: u64,
    pub(super) fd: libc::c_int,
    pub(super) coherence: Coherence,
    /// The heap's placement, applied to each block as it is mapped (the eager mapping made at
    /// open does not cover the huge range).
    pub(super) placement: RawPlacement,
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
        placement: &Placement,
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
            placement: placement.raw(),
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
    pub(super) fn publish(&self, offset: u64) -> bool {
        self.record().publish(offset, self.coherence)
    }

    /// Rule 2 on this process's record (written back: SWcc). Async-signal-safe.
    pub(super) fn withdraw(&self, offset: u64) {
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
    pub(super) fn run_of(&self, offset: u64) -> Option<RunWord> {
        if !self.contains(offset) {
            return None;
        }
        let i = (offset - self.huge_data) >> self.range_shift;
        let run = RunWord::unpack(self.ranges()[i as usize].load(Ordering::Acquire))?;
        (u64::from(run.slot) < self.slots).then_some(run)
    }

    /// Reads descriptor `d` consistently: its state before and after the fields agree.
    pub(super) fn read(&self, d: &HugeDesc) -> (u64, u64, u64) {
        // Under the coherence model a descriptor page this process never touched is not
        // mapped yet, and this runs in the SIGSEGV handler too, where a fault would kill the
        // process (SIGSEGV is blocked there): load the page without faulting. (Nothing
        // without the model.)
        podkv_hw::model::touch((d as *const HugeDesc).cast(), std::mem::size_of::<HugeDesc>());
        if podkv_hw::site!("alloc.huge.read.invalidate") {
            self.coherence.invalidate(
                (d as *const HugeDesc).cast(),
                std::mem::size_of::<HugeDesc>(),
            );
        }
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

    /// The live allocation holding all of `[offset, end)`, mapped here (its hazard offset
    /// published first) unless it already is: `None` if there is none or it cannot be mapped
    /// (`Heap::resolve_checked`).
    pub fn map_checked(&self, offset: u64, end: u64) -> Option<Found> {
        let found = self
            .find(offset, false, &[DESC_LIVE])
            .filter(|f| end <= f.offset + f.len)?;
        (self.record().contains(found.offset, self.coherence) || self.map_live(found))
            .then_some(found)
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
    pub(super) fn map(&self, offset: u64, len: u64) -> bool {
        let addr = (self.base + offset as usize) as *mut u8;
        if let Some(mapped) = podkv_hw::model::attach(addr, len as usize) {
            return mapped;
        }
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
        if got == libc::MAP_FAILED {
            return false;
        }
        if !self.placement.is_default() {
            // Before any page of the block is touched, so its pages are placed as the heap's
            // are. A refusal (the policy was checked at open) leaves the kernel's default:
            // the block still works, only its pages may sit elsewhere.
            let _ = self.placement.bind(got.cast(), len as usize);
        }
        true
    }

    /// Puts the reservation back over `[offset, offset + len)`: the range stays ours and any
    /// touch faults again (and is refused unless a live allocation is there by then).
    pub(super) fn unmap(&self, offset: u64, len: u64) {
        if podkv_hw::model::detach((self.base + offset as usize) as *mut u8, len as usize) {
            return;
        }
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

    /// The end of the furthest live or freed allocation: the file must reach it. Only a slot
    /// holding a run has allocations (they lie in its runs, as the checker checks and the
    /// sweep relies on), so only those slots' descriptors are read: an open touches no page
    /// of the others (8 KiB each; 8 MiB of every process's memory at 1024 slots).
    pub fn end_of_allocations(&self) -> u64 {
        self.slots_with_runs()
            .into_iter()
            .flat_map(|slot| self.occupied(slot))
            .map(|(offset, len)| offset + len)
            .max()
            .unwrap_or(0)
    }

    /// Unmaps the whole huge range here (the process is letting go of the heap).
    pub(super) fn unmap_all(&self) {
        self.unmap(self.huge_data, self.total - self.huge_data);
    }

    pub(super) fn write_back(&self, d: &HugeDesc) {
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

    /// The slots holding at least one run, each once, in slot order.
    pub(crate) fn slots_with_runs(&self) -> Vec<u32> {
        let mut slots: Vec<u32> = self
            .ranges()
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let run = RunWord::unpack(w.load(Ordering::Acquire))?;
                (run.first as usize == i && u64::from(run.slot) < self.slots).then_some(run.slot)
            })
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }
}
