//! The huge heap's checker and statistics: one walk over the reservation array, every slot's
//! descriptors and every hazard record.
//!
//! # Invariants (exact on a quiescent heap)
//! - a claimed range's word names a slot of the heap and a run that contains the range and
//!   ends inside the array; every range of a run holds the run's word;
//! - a non-empty descriptor is live or freed, `ALIGN_HUGE`-aligned, of whole pages, inside one
//!   run of its own slot, and overlaps no other descriptor of that slot; an empty one is zero;
//! - every run holds at least one descriptor (an empty run is given back at once);
//! - every hazard cell of a live process names a live or freed descriptor's offset; no cell
//!   lies at or beyond its record's `high`;
//! - no slot's huge log word names a step (no transition was left half made).

use super::{HugeStep, HugeView, RunWord, ALIGN_HUGE, DESC_EMPTY, DESC_FREED, DESC_LIVE};
use crate::hazard::COUNT_HAZARDS;
use crate::layout::Geometry;
use podkv_hw::sync::{AtomicU64, Ordering::Acquire};

/// What the huge heap holds, as [`crate::Heap::check`] saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HugeReport {
    /// Whether the heap has a huge heap at all.
    pub enabled: bool,
    /// Address space of the huge heap.
    pub reserved_bytes: u64,
    /// Bytes of one range of the reservation array.
    pub range_bytes: u64,
    /// Ranges claimed by slots.
    pub ranges_claimed: u64,
    /// Runs (claims) of ranges.
    pub runs: u64,
    /// Live allocations and their bytes.
    pub live: u64,
    /// Bytes mapped by live allocations.
    pub live_bytes: u64,
    /// Freed allocations not yet reclaimed.
    pub freed: u64,
    /// Their bytes.
    pub freed_bytes: u64,
    /// Freed allocations some live process still maps (awaiting its lazy unmap).
    pub awaiting_unmap: u64,
    /// Freed allocations of released slots (a sweep reclaims them once nobody maps them).
    pub freed_in_released: u64,
    /// Hazard records claimed by running processes.
    pub processes: u64,
    /// Hazard records left by dead processes.
    pub dead_records: u64,
    /// Huge allocations this process has mapped now.
    pub mapped_here: u64,
    /// Their bytes.
    pub mapped_here_bytes: u64,
}

impl HugeReport {
    /// Checks the huge heap through `view`, appending one line per violated invariant to
    /// `problems`; `released(slot)` says whether a slot is free now (`Heap::check_huge`).
    pub(crate) fn check(
        view: &HugeView,
        geometry: &Geometry,
        released: impl Fn(u32) -> bool,
        problems: &mut Vec<String>,
    ) -> HugeReport {
        let mut report = HugeReport {
            enabled: true,
            reserved_bytes: geometry.huge_bytes(),
            range_bytes: view.range_bytes(),
            ..HugeReport::default()
        };
        check_ranges(view, &mut report, problems);
        for slot in 0..geometry.slots() as u32 {
            let freed = report.freed;
            check_slot(view, slot, &mut report, problems);
            if released(slot) {
                report.freed_in_released += report.freed - freed;
            }
        }
        check_records(view, &mut report, problems);
        report
    }
}

fn check_ranges(view: &HugeView, report: &mut HugeReport, problems: &mut Vec<String>) {
    let ranges = view.ranges();
    for (i, word) in ranges.iter().enumerate() {
        let Some(run) = RunWord::unpack(word.load(Acquire)) else {
            continue;
        };
        report.ranges_claimed += 1;
        let end = run.first as usize + run.count as usize;
        let bad = u64::from(run.slot) >= view.slots
            || !(run.first as usize..end).contains(&i)
            || end > ranges.len();
        if bad {
            problems.push(format!("huge range {i} holds an impossible claim {run:?}"));
            continue;
        }
        if run.first as usize == i {
            report.runs += 1;
            let whole = ranges[i..end]
                .iter()
                .all(|w| w.load(Acquire) == word.load(Acquire));
            if !whole {
                problems.push(format!("huge run {run:?} is not claimed whole"));
            }
        }
    }
}

fn check_slot(view: &HugeView, slot: u32, report: &mut HugeReport, problems: &mut Vec<String>) {
    let local = view.local(slot);
    if podkv_hw::site!("alloc.huge.check.invalidate_log") {
        view.coherence
            .invalidate((&local.log as *const AtomicU64).cast(), 8);
    }
    if let Some(step) = HugeStep::from_word(local.log.load(Acquire)) {
        problems.push(format!("slot {slot} left huge step {step:?} half made"));
    }
    let runs = view.runs_of(slot);
    let run_span = |r: &RunWord| {
        let start = view.range_offset(r.first);
        start..start + (u64::from(r.count) << view.range_shift)
    };
    let mut used_runs = vec![false; runs.len()];
    for (i, d) in local.descs.iter().enumerate() {
        let (state, offset, len) = view.read(d);
        if state == DESC_EMPTY {
            if offset != 0 || len != 0 {
                problems.push(format!("slot {slot} empty huge descriptor {i} is not zero"));
            }
            continue;
        }
        match state {
            DESC_LIVE => {
                report.live += 1;
                report.live_bytes += len;
            }
            DESC_FREED => {
                report.freed += 1;
                report.freed_bytes += len;
                if view.hazards().is_hazard(offset) {
                    report.awaiting_unmap += 1;
                }
            }
            _ => problems.push(format!("slot {slot} huge descriptor {i} has state {state}")),
        }
        let run = runs
            .iter()
            .position(|r| run_span(r).contains(&offset) && offset + len <= run_span(r).end);
        match run {
            Some(r) => used_runs[r] = true,
            None => problems.push(format!(
                "slot {slot} huge descriptor {i} at {offset:#x}+{len:#x} lies in none of its runs"
            )),
        }
        if offset % ALIGN_HUGE != 0 || len == 0 || len % 4096 != 0 {
            problems.push(format!("slot {slot} huge descriptor {i} is misaligned"));
        }
    }
    let occupied = view.occupied(slot);
    for pair in occupied.windows(2) {
        if pair[0].0 + pair[0].1 > pair[1].0 {
            problems.push(format!("slot {slot} huge allocations overlap: {pair:x?}"));
        }
    }
    for (run, used) in runs.iter().zip(used_runs) {
        if !used {
            problems.push(format!(
                "slot {slot} holds huge run {run:?} with no allocation"
            ));
        }
    }
}

fn check_records(view: &HugeView, report: &mut HugeReport, problems: &mut Vec<String>) {
    let hazards = view.hazards();
    for (i, record) in view.records().iter().enumerate() {
        if podkv_hw::site!("alloc.huge.check.invalidate_record") {
            view.coherence.invalidate(
                (record as *const crate::hazard::HazardRecord).cast(),
                std::mem::size_of::<crate::hazard::HazardRecord>(),
            );
        }
        let high = record.high.load(Acquire) as usize;
        if record.cells[high.min(COUNT_HAZARDS)..]
            .iter()
            .any(|c| c.load(Acquire) != 0)
        {
            problems.push(format!(
                "hazard record {i} has a cell beyond its high mark {high}"
            ));
        }
        let pid = crate::slot::owner_pid(hazards.owner(i));
        if pid == 0 {
            continue;
        }
        if !hazards.is_live(i) {
            report.dead_records += 1;
            continue;
        }
        report.processes += 1;
        let mine = i as u64 == view.record;
        for offset in record.published(view.coherence) {
            match view.find(offset, true, &[DESC_LIVE, DESC_FREED]) {
                Some(found) if mine => {
                    report.mapped_here += 1;
                    report.mapped_here_bytes += found.len;
                }
                Some(_) => {}
                None => problems.push(format!(
                    "process {} holds hazard offset {offset:#x}, which names no huge allocation",
                    pid
                )),
            }
        }
    }
}
