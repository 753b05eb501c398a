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

use super::{
    HugeLocal, HugeStep, HugeView, RunWord, COUNT_HUGE_DESC, DESC_EMPTY, DESC_FREED, DESC_LIVE,
    MASK_GENERATION,
};
use crate::crash_point;
use crate::heap::Heap;
use crate::offset::Offset;
use crate::thread::InFlight;
use podkv_hw::sync::Ordering;

/// Most released slots one sweep claims (each reclaims every freed descriptor it holds).
pub const COUNT_SWEEP_SLOTS: usize = 4;

/// The owner of slot `slot`'s huge state: the thread holding the slot.
pub(crate) struct HugeOwner<'a> {
    pub(crate) heap: &'a Heap,
    pub(crate) view: &'a HugeView,
    pub(crate) slot: u32,
}

impl HugeOwner<'_> {
    fn local(&self) -> &HugeLocal {
        self.view.local(self.slot)
    }

    /// Logs the step about to start (`None`: the step is over).
    pub(crate) fn log(&self, step: Option<HugeStep>) {
        let word = step.map_or(0, HugeStep::to_word);
        self.local().log.store(word, Ordering::Release);
    }

    /// Whether descriptor `desc` is freed and no live process maps it.
    fn reclaimable(&self, desc: usize) -> bool {
        let (state, offset, _) = self.view.read(&self.local().descs[desc]);
        state == DESC_FREED && !self.view.hazards().is_hazard(offset)
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
            self.heap.shared.file.release(offset, len);
        }
        crash_point!("huge_reclaim.punched");
        d.state.store(DESC_EMPTY, Ordering::Release);
        d.offset.store(0, Ordering::Relaxed);
        d.len.store(0, Ordering::Relaxed);
        self.view.write_back(d);
        crash_point!("huge_reclaim.emptied");
    }

    /// `ReleaseRun` for each of the slot's runs that holds no allocation.
    pub(crate) fn release_empty_runs(&self) {
        let occupied = self.view.occupied(self.slot);
        for run in self.view.runs_of(self.slot) {
            let start = self.view.range_offset(run.first);
            let end = start + (u64::from(run.count) << self.view.range_shift);
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
        let ranges = self.view.ranges();
        let span = first as usize..(first as usize + count as usize).min(ranges.len());
        for range in ranges[span].iter().rev() {
            let _ = self.heap.cas_word(self.slot, range, word, 0);
        }
    }

    /// Finishes or undoes the huge step the slot's log names, as after a crash of its
    /// previous owner: one `match`, idempotent, touching only the slot's own state, the ranges
    /// the step names and, for a free, the one descriptor it names. Returns the step and the
    /// block it leaves the application to settle.
    pub(crate) fn recover(&self) -> Option<(HugeStep, InFlight)> {
        let step = HugeStep::from_word(self.local().log.load(Ordering::Acquire))?;
        let in_flight = match step {
            // Crashed while claiming: give back whatever of the run it got but did not use.
            HugeStep::ClaimRun { first, count } => {
                let run = self.view.range_offset(first)..self.view.range_offset(first + count);
                let used = self
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
                let (state, offset, _) = self.view.read(&self.local().descs[desc]);
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
                if u64::from(slot) < self.view.slots {
                    let d = &self.view.local(slot).descs[usize::from(desc) % COUNT_HUGE_DESC];
                    let (state, _, _) = self.view.read(d);
                    let same = d.generation.load(Ordering::Acquire) & MASK_GENERATION
                        == u64::from(generation);
                    if state == DESC_LIVE && same {
                        d.state.store(DESC_FREED, Ordering::Release);
                        self.view.write_back(d);
                    }
                }
                let aux = &self.heap.slot(u64::from(self.slot)).aux;
                InFlight::Free(Offset(aux.load(Ordering::Relaxed)))
            }
        };
        self.log(None);
        Some((step, in_flight))
    }
}

impl HugeView {
    /// The slots holding at least one run, each once, in slot order.
    fn slots_with_runs(&self) -> Vec<u32> {
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

/// The sweep (module docs): reclaims freed allocations of up to [`COUNT_SWEEP_SLOTS`] released
/// slots, starting at this process's cursor. Returns allocations reclaimed.
pub(crate) fn sweep_released(
    heap: &Heap,
    view: &HugeView,
    cursor: &std::sync::atomic::AtomicUsize,
) -> usize {
    let slots = view.slots_with_runs();
    if slots.is_empty() {
        return 0;
    }
    let start = cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % slots.len();
    let (mut claimed, mut reclaimed) = (0, 0);
    for &slot in slots[start..].iter().chain(&slots[..start]) {
        if claimed == COUNT_SWEEP_SLOTS {
            break;
        }
        let owner = HugeOwner { heap, view, slot };
        // Free is one load (a dead owner's slot is recovery's, and judging life costs a read
        // of /proc); reclaimable needs the descriptors and hazard records.
        let free = heap
            .slot_owner_word(u64::from(slot))
            .load(Ordering::Acquire)
            == 0;
        if !free || !(0..COUNT_HUGE_DESC).any(|i| owner.reclaimable(i)) {
            continue;
        }
        if !heap.try_claim_slot(u64::from(slot), 0, heap.shared.me) {
            continue;
        }
        // Lease mode: renewed while held, however long the punching takes.
        heap.hold(slot);
        claimed += 1;
        crash_point!("huge_sweep.claimed");
        reclaimed += owner.collect();
        crash_point!("huge_sweep.collected");
        heap.unhold(slot);
        heap.shared.slots.release(slot, heap.shared.me);
    }
    reclaimed
}
