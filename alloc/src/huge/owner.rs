//! Acting as a slot's huge owner: the steps only the slot owning a descriptor makes (reclaim,
//! giving runs back, recovery), for the slot a thread holds or for a released slot a thread
//! holds for a moment to reclaim what its last owner left freed (the sweep).
//!
//! # The sweep: freed blocks of released slots
//! A huge block freed while another process still maps it cannot be reclaimed at once; if its
//! owning slot is released before that process unmaps it, no owner is left to reclaim it
//! (rule 7: memory goes back). So every huge housekeeping call ([`crate::ThreadHandle::collect_huge`],
//! [`Heap::collect_huge`]) ends with a sweep:
//! 1. one pass over the reservation array (constant size: `COUNT_HUGE_RANGES` loads) lists
//!    the slots holding runs — a slot holding a freed descriptor holds the run it lies in;
//! 2. from a per-process round-robin cursor, up to [`COUNT_SWEEP_SLOTS`] of those that are
//!    free and hold a freed descriptor no live process maps are claimed by the ordinary claim
//!    CAS (a slot claimed meanwhile is skipped: nobody waits), reclaimed as their owner would
//!    reclaim them, and released.
//!
//! The sweeper is the slot's owner while it holds it, so "only the owning slot empties a
//! descriptor" still holds. A sweeper that dies holding one leaves a dead slot; recovery adopts
//! it and finishes the huge step its log names (the slab recovery word, untouched, says idle).

use super::desc::{
    HugeBacking, HugeLocal, HugeStep, RunWord, ALIGN_HUGE, COUNT_HUGE_DESC, DESC_EMPTY,
    DESC_FREED, DESC_LIVE, MASK_GENERATION, SIZE_PAGE,
};
use super::{HugeHeap, HugeThread};
use crate::crash_point;
use crate::error::AllocError;
use crate::offset::Offset;
use crate::recovery::{InFlight, Op};
use crate::slots::Slots;
use podkv_hw::sync::{AtomicU64, Ordering};
use std::alloc::Layout as AllocLayout;

/// Most released slots one sweep claims (each reclaims every freed descriptor it holds).
pub const COUNT_SWEEP_SLOTS: usize = 4;

/// The owner of slot `slot`'s huge state (the huge heap's per-thread part): the thread
/// holding the slot, or a sweeper holding a released one for a moment.
pub(crate) struct HugeOwner<'a> {
    pub(super) huge: &'a HugeHeap,
    pub(super) slots: &'a Slots,
    pub(super) slot: u32,
}

impl HugeOwner<'_> {
    fn local(&self) -> &HugeLocal {
        self.huge.view.local(self.slot)
    }

    /// Allocates a huge block: lazy unmap and reclaim first, then a descriptor and a place in
    /// one of this slot's runs (claiming a new run if none fits), back, publish, map.
    pub(crate) fn allocate(
        &self,
        layout: AllocLayout,
        thread: &impl HugeThread,
    ) -> Result<Offset, AllocError> {
        let unsupported = AllocError::Unsupported {
            size: layout.size(),
            align: layout.align(),
        };
        let (view, backing) = (&self.huge.view, self.huge.backing());
        if layout.align() as u64 > ALIGN_HUGE {
            return Err(unsupported);
        }
        let len = (layout.size() as u64).next_multiple_of(SIZE_PAGE);
        thread.log_huge_start();
        thread.collect_huge();
        let me = self.slot;
        let local = view.local(me);
        // SWcc reader rule: other hosts wrote these descriptors since this process last read
        // them (the slot's earlier owners, a sweep that reclaimed them, remote freers). A
        // stale `EMPTY` would hand out a descriptor that names a live block, which would then
        // lose its name (its readers could no longer map it, its range would look free) and
        // this allocation's write-back would carry the stale generation along.
        if podkv_hw::site!("alloc.huge.allocate.invalidate_descs") {
            view.coherence
                .invalidate(local.descs.as_ptr().cast(), std::mem::size_of_val(&local.descs));
        }
        let desc = local
            .descs
            .iter()
            .position(|d| d.state.load(Ordering::Acquire) == DESC_EMPTY)
            .ok_or(AllocError::OutOfMemory)?;
        let offset = match self.fit(len) {
            Some(offset) => offset,
            None => self.claim_run(len)?,
        };
        let d = &local.descs[desc];
        d.offset.store(offset, Ordering::Relaxed);
        d.len.store(len, Ordering::Relaxed);
        thread.log_huge_block(Op::Alloc, offset);
        self.log(Some(HugeStep::Allocate { desc: desc as u16 }));
        crash_point!("huge_alloc.logged");
        let file = &self.huge.file;
        let backed = match backing {
            HugeBacking::Reserve => file.back(offset, len),
            HugeBacking::Sparse => file.back(offset + len - SIZE_PAGE, SIZE_PAGE),
        };
        if backed.is_err() {
            self.undo_allocate(desc);
            return Err(AllocError::OutOfMemory);
        }
        crash_point!("huge_alloc.backed");
        // One writer (this slot): a plain increment, written back with the state below.
        let generation = d.generation.load(Ordering::Relaxed);
        d.generation
            .store(generation.wrapping_add(1), Ordering::Relaxed);
        d.state.store(DESC_LIVE, Ordering::Release);
        if podkv_hw::site!("alloc.huge.allocate.write_back") {
            view.write_back(d);
        }
        crash_point!("huge_alloc.live");
        if !view.publish(offset) {
            return Err(self.undo_live(desc));
        }
        crash_point!("huge_alloc.published");
        if !view.map(offset, len) {
            view.withdraw(offset);
            return Err(self.undo_live(desc));
        }
        crash_point!("huge_alloc.mapped");
        self.log(None);
        crash_point!("huge_alloc.done");
        Ok(Offset(offset))
    }

    /// Undoes an allocation whose descriptor went live but could not be mapped here.
    fn undo_live(&self, desc: usize) -> AllocError {
        self.local().descs[desc]
            .state
            .store(DESC_FREED, Ordering::Release);
        self.undo_allocate(desc);
        AllocError::OutOfMemory
    }

    fn undo_allocate(&self, desc: usize) {
        self.reclaim(desc);
        self.release_empty_runs();
        self.log(None);
    }

    /// First fit for `len` bytes in this slot's runs, between its allocations.
    fn fit(&self, len: u64) -> Option<u64> {
        let (view, me) = (&self.huge.view, self.slot);
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
    pub(super) fn claim_run(&self, len: u64) -> Result<u64, AllocError> {
        let view = &self.huge.view;
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
            self.log(Some(HugeStep::ClaimRun {
                first: first32,
                count: count32,
            }));
            crash_point!("huge_claim.logged");
            let word = RunWord {
                slot: self.slot,
                first: first32,
                count: count32,
            }
            .pack();
            // Through the writer hook: by mCAS in an `mcas` heap (the array is in its region).
            let lost = (first..first + count).find(|&i| {
                podkv_hw::cas_site!("alloc.huge.reserve.cas");
                let taken = self.huge.cas_word(self.slot, &ranges[i], 0, word).is_ok();
                if taken {
                    crash_point!("huge_claim.range");
                }
                !taken
            });
            match lost {
                None => return Ok(view.range_offset(first32)),
                Some(at) => {
                    for range in ranges[first..at].iter().rev() {
                        self.huge.store_word(self.slot, range, 0);
                    }
                    first = at + 1;
                }
            }
        }
        self.log(None);
        Err(AllocError::OutOfMemory)
    }

    /// Frees a huge block (from any thread of any process): logged in this slot's huge log
    /// (with the descriptor's generation), the descriptor becomes freed, this process unmaps
    /// it, and its owner reclaims it once no process maps it.
    pub(crate) fn free(&self, offset: Offset, thread: &impl HugeThread) {
        let view = &self.huge.view;
        let Some(found) = view.find(offset.0, true, &[DESC_LIVE]) else {
            panic!("podkv: free of {offset}, which is not a live huge allocation");
        };
        let d = &view.local(found.slot).descs[found.desc];
        let generation = d.generation.load(Ordering::Acquire) & MASK_GENERATION;
        let me = self.slots.slot(u64::from(self.slot));
        me.aux.store(offset.0, Ordering::Relaxed);
        // SWcc writer rule, before the log names the step: an adopter on another host reads
        // the offset in flight from here (the slot's release, which writes the rest of the
        // slot back, never comes after a crash).
        if podkv_hw::site!("alloc.huge.free.write_back_aux") {
            view.coherence
                .write_back((&me.aux as *const AtomicU64).cast(), 8);
        }
        self.log(Some(HugeStep::Free {
            slot: found.slot,
            desc: found.desc as u16,
            generation: generation as u32,
        }));
        crash_point!("huge_free.logged");
        d.state.store(DESC_FREED, Ordering::Release);
        if podkv_hw::site!("alloc.huge.free.write_back") {
            view.write_back(d);
        }
        crash_point!("huge_free.marked");
        thread.log_huge_block(Op::Free, offset.0);
        self.log(None);
        crash_point!("huge_free.done");
        thread.collect_huge();
    }


    /// Logs the step about to start (`None`: the step is over), written back (SWcc): the
    /// log lives in the slot's `HugeLocal`, which the slot's release does not write back, and
    /// the slot's next owner (another host, adopting or claiming) or a checker reads it. Huge
    /// steps map or unmap memory, so a line written back per step costs nothing that shows.
    pub(crate) fn log(&self, step: Option<HugeStep>) {
        let word = step.map_or(0, HugeStep::to_word);
        let log = &self.local().log;
        log.store(word, Ordering::Release);
        if podkv_hw::site!("alloc.huge.log.write_back") {
            self.huge
                .view
                .coherence
                .write_back((log as *const AtomicU64).cast(), 8);
        }
    }

    /// Whether descriptor `desc` is freed and no live process maps it.
    fn reclaimable(&self, desc: usize) -> bool {
        let (state, offset, _) = self.huge.view.read(&self.local().descs[desc]);
        state == DESC_FREED && !self.huge.view.hazards().is_hazard(offset)
    }

    /// Reclaims every freed descriptor no live process maps and gives back runs left empty.
    /// Returns allocations reclaimed.
    pub(crate) fn collect(&self) -> usize {
        let reclaimable: Vec<usize> = (0..COUNT_HUGE_DESC)
            .filter(|&i| self.reclaimable(i))
            .collect();
        for &desc in &reclaimable {
            self.reclaim(desc);
        }
        if !reclaimable.is_empty() {
            self.release_empty_runs();
        }
        self.log(None);
        reclaimable.len()
    }

    /// `Reclaim`: punch out the pages, empty the descriptor (no hazard left).
    pub(crate) fn reclaim(&self, desc: usize) {
        self.log(Some(HugeStep::Reclaim { desc: desc as u16 }));
        crash_point!("huge_reclaim.logged");
        let d = &self.local().descs[desc];
        let (offset, len) = (
            d.offset.load(Ordering::Relaxed),
            d.len.load(Ordering::Relaxed),
        );
        if len != 0 {
            self.huge.file.release(offset, len);
        }
        crash_point!("huge_reclaim.punched");
        d.state.store(DESC_EMPTY, Ordering::Release);
        d.offset.store(0, Ordering::Relaxed);
        d.len.store(0, Ordering::Relaxed);
        if podkv_hw::site!("alloc.huge.reclaim.write_back") {
            self.huge.view.write_back(d);
        }
        crash_point!("huge_reclaim.emptied");
    }

    /// `ReleaseRun` for each of the slot's runs that holds no allocation.
    pub(crate) fn release_empty_runs(&self) {
        let occupied = self.huge.view.occupied(self.slot);
        for run in self.huge.view.runs_of(self.slot) {
            let start = self.huge.view.range_offset(run.first);
            let end = start + (u64::from(run.count) << self.huge.view.range_shift);
            if occupied.iter().any(|(o, _)| (start..end).contains(o)) {
                continue;
            }
            self.log(Some(HugeStep::ReleaseRun {
                first: run.first,
                count: run.count,
            }));
            crash_point!("huge_release.logged");
            self.give_back_ranges(run.first, run.count);
            crash_point!("huge_release.given");
        }
    }

    /// Gives back the ranges of `first..first + count` that hold this slot's word for that run
    /// (one CAS each, last first, so a range another slot claimed meanwhile stays its).
    pub(crate) fn give_back_ranges(&self, first: u32, count: u32) {
        let word = RunWord {
            slot: self.slot,
            first,
            count,
        }
        .pack();
        let ranges = self.huge.view.ranges();
        let span = first as usize..(first as usize + count as usize).min(ranges.len());
        for range in ranges[span].iter().rev() {
            podkv_hw::cas_site!("alloc.huge.unreserve.cas");
            let _ = self.huge.cas_word(self.slot, range, word, 0);
        }
    }

    /// Finishes or undoes the huge step the slot's log names, as after a crash of its
    /// previous owner: one `match`, idempotent, touching only the slot's own state, the ranges
    /// the step names and, for a free, the one descriptor it names. Returns the step and the
    /// block it leaves the application to settle.
    pub(crate) fn recover(&self) -> Option<(HugeStep, InFlight)> {
        let log = &self.local().log;
        if podkv_hw::site!("alloc.huge.recover.invalidate_log") {
            self.huge
                .view
                .coherence
                .invalidate((log as *const AtomicU64).cast(), 8);
        }
        let step = HugeStep::from_word(log.load(Ordering::Acquire))?;
        let in_flight = match step {
            // Crashed while claiming: give back whatever of the run it got but did not use.
            HugeStep::ClaimRun { first, count } => {
                let run = self.huge.view.range_offset(first)..self.huge.view.range_offset(first + count);
                let used = self
                    .huge
                    .view
                    .occupied(self.slot)
                    .iter()
                    .any(|(o, _)| run.contains(o));
                if !used {
                    self.give_back_ranges(first, count);
                }
                InFlight::None
            }
            // Crashed before the descriptor went live: its pages were perhaps backed; punch them
            // out and empty it. Live: made but never returned, the application decides. Freed
            // (a failed mapping undone): the collection after recovery reclaims it.
            HugeStep::Allocate { desc } => {
                let desc = usize::from(desc) % COUNT_HUGE_DESC;
                let (state, offset, _) = self.huge.view.read(&self.local().descs[desc]);
                match state {
                    DESC_EMPTY => {
                        self.reclaim(desc);
                        self.release_empty_runs();
                        InFlight::None
                    }
                    DESC_LIVE => InFlight::Alloc(Offset(offset)),
                    _ => InFlight::None,
                }
            }
            // Crashed while reclaiming (no hazard was left): redo it.
            HugeStep::Reclaim { desc } => {
                self.reclaim(usize::from(desc) % COUNT_HUGE_DESC);
                self.release_empty_runs();
                InFlight::None
            }
            // Crashed while giving ranges back: finish.
            HugeStep::ReleaseRun { first, count } => {
                self.give_back_ranges(first, count);
                InFlight::None
            }
            // Crashed while freeing (maybe another slot's block): mark it freed unless that
            // took effect — the descriptor still live in the logged generation means it did
            // not (a later generation is a new block at a reused place: not ours to free).
            HugeStep::Free {
                slot,
                desc,
                generation,
            } => {
                if u64::from(slot) < self.huge.view.slots {
                    let d = &self.huge.view.local(slot).descs[usize::from(desc) % COUNT_HUGE_DESC];
                    let (state, _, _) = self.huge.view.read(d);
                    let same = d.generation.load(Ordering::Acquire) & MASK_GENERATION
                        == u64::from(generation);
                    if state == DESC_LIVE && same {
                        d.state.store(DESC_FREED, Ordering::Release);
                        if podkv_hw::site!("alloc.huge.recover.write_back") {
                            self.huge.view.write_back(d);
                        }
                    }
                }
                let aux = &self.slots.slot(u64::from(self.slot)).aux;
                InFlight::Free(Offset(aux.load(Ordering::Relaxed)))
            }
        };
        self.log(None);
        Some((step, in_flight))
    }
}

/// The sweep (module docs): reclaims freed allocations of up to [`COUNT_SWEEP_SLOTS`] released
/// slots, starting at this process's cursor, holding each claimed slot with `hold` (the heap's:
/// a lease heap renews its lease while held). Returns allocations reclaimed.
pub(super) fn sweep_released(huge: &HugeHeap, slots: &Slots, hold: &dyn Fn(u32)) -> usize {
    let view = &huge.view;
    let cursor = &huge.sweep_cursor;
    let me = huge.me;
    let slots_with_runs = view.slots_with_runs();
    if slots_with_runs.is_empty() {
        return 0;
    }
    let start = cursor.fetch_add(1, Ordering::Relaxed) % slots_with_runs.len();
    let (mut claimed, mut reclaimed) = (0, 0);
    for &slot in slots_with_runs[start..]
        .iter()
        .chain(&slots_with_runs[..start])
    {
        if claimed == COUNT_SWEEP_SLOTS {
            break;
        }
        let owner = huge.owner(slots, slot);
        // Free is one load (a dead owner's slot is recovery's, and judging life costs a read
        // of /proc); reclaimable needs the descriptors and hazard records.
        let free = slots
            .owner_word(u64::from(slot))
            .load(Ordering::Acquire)
            == 0;
        if !free || !(0..COUNT_HUGE_DESC).any(|i| owner.reclaimable(i)) {
            continue;
        }
        if !slots.try_claim(u64::from(slot), 0, me) {
            continue;
        }
        // Lease mode: renewed while held, however long the punching takes.
        hold(slot);
        claimed += 1;
        crash_point!("huge_sweep.claimed");
        reclaimed += owner.collect();
        crash_point!("huge_sweep.collected");
        slots.unhold(slot);
        slots.release(slot, me);
    }
    reclaimed
}
