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
//! [`crate::ThreadHandle::recover_huge`] is the recovery, one `match`, idempotent given the word (run
//! by every adoption of a dead slot, `recover.rs`): a claim is undone for ranges of the logged
//! run that hold this slot's word but no descriptor; an allocation whose descriptor never went
//! live has its pages punched out and the descriptor emptied, one that went live is reported
//! in flight; a reclaim is redone; a release is redone; a free is redone unless it took
//! effect, and reported. Crash points (`crash.rs`, `huge_*`) sit in every window.

mod check;
mod desc;
mod owner;
mod view;

pub use check::HugeReport;
pub use desc::{
    HugeBacking, HugeDesc, HugeLocal, HugeStep, RunWord, ALIGN_HUGE, COUNT_HUGE_DESC, DESC_EMPTY,
    DESC_FREED, DESC_LIVE, MASK_GENERATION,
};
pub use owner::COUNT_SWEEP_SLOTS;
pub use view::{Found, HugeView};
pub use crate::layout::SIZE_HUGE_LOCAL;

use crate::file::HeapFile;
use crate::mcas::HeapMcas;
use crate::offset::Offset;
use crate::recovery::Op;
use crate::slot::Owner;
use crate::slots::Slots;
pub(crate) use owner::HugeOwner;
use podkv_hw::sync::AtomicU64;
use podkv_hw::sync::mapped::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// What a huge step needs from the thread holding the slot it runs for.
pub(crate) trait HugeThread {
    /// Logs that a huge allocation started and names no block yet (so the slot's recovery
    /// word no longer names its previous allocation, which the application holds).
    fn log_huge_start(&self);
    /// Logs a huge block's allocation or free in the slot's recovery word, for `InFlight`
    /// reports: `Alloc(offset)` once the place is chosen (reported only if this slot's
    /// descriptor of it went live), `Free(offset)` once it is freed.
    fn log_huge_block(&self, op: Op, offset: u64);
    /// The thread's huge housekeeping (`ThreadHandle::collect_huge`).
    fn collect_huge(&self) -> usize;
}

/// This process's part in the huge heap of one open heap: its view, its hazard record, how it
/// backs the blocks it allocates and where its sweeps start. Held by the heap; its place in the
/// SIGSEGV handler's registry is the heap's, left before this is dropped, and this is dropped
/// before the heap's mapping.
pub(crate) struct HugeHeap {
    pub(crate) view: HugeView,
    /// `HugeBacking as u64`: this process's choice, changeable while open.
    backing: podkv_hw::sync::mapped::AtomicU64,
    /// Where this process's next sweep of released slots starts (`owner.rs`).
    sweep_cursor: AtomicUsize,
    /// This process as the record's owner.
    me: Owner,
    /// An `mcas` heap's hook: the reservation array changes through it, and the record goes
    /// back through it (its process line).
    mcas: Option<Arc<HeapMcas>>,
    file: Arc<HeapFile>,
}

impl HugeHeap {
    /// This process's part, holding the claimed record `view.record` for `me` (dropping it
    /// gives the record back).
    pub(crate) fn new(
        view: HugeView,
        backing: HugeBacking,
        me: Owner,
        mcas: Option<Arc<HeapMcas>>,
        file: Arc<HeapFile>,
    ) -> HugeHeap {
        HugeHeap {
            view,
            backing: podkv_hw::sync::mapped::AtomicU64::new(backing as u64),
            sweep_cursor: AtomicUsize::new(0),
            me,
            mcas,
            file,
        }
    }

    fn backing(&self) -> HugeBacking {
        match self.backing.load(Relaxed) {
            0 => HugeBacking::Reserve,
            _ => HugeBacking::Sparse,
        }
    }

    /// Changes how this process backs the huge blocks it allocates from now on.
    pub(crate) fn set_backing(&self, backing: HugeBacking) {
        self.backing.store(backing as u64, Relaxed);
    }

    /// The live or freed huge allocation starting at `offset`.
    pub(crate) fn allocation(&self, offset: Offset) -> Option<Found> {
        self.view.find(offset.0, true, &[DESC_LIVE, DESC_FREED])
    }

    /// Slot `slot`'s huge state, acted on by the thread holding the slot.
    pub(crate) fn owner<'a>(&'a self, slots: &'a Slots, slot: u32) -> HugeOwner<'a> {
        HugeOwner {
            huge: self,
            slots,
            slot,
        }
    }

    /// This process's housekeeping without a slot: unmaps every huge allocation it mapped
    /// that was freed since, then sweeps a few released slots (`owner.rs`), holding each with
    /// `hold` (the heap's, which keeps a lease heap's leases renewed). Returns allocations
    /// reclaimed by the sweep.
    pub(crate) fn collect(&self, slots: &Slots, hold: &dyn Fn(u32)) -> usize {
        self.view.unmap_freed();
        owner::sweep_released(self, slots, hold)
    }

    /// The heap's CAS hook (`Shared::cas_word`) on behalf of slot `client`.
    #[inline]
    fn cas_word(&self, client: u32, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        crate::mcas::cas_word(self.mcas.as_deref(), client, word, current, new)
    }

    /// The heap's store hook (`Shared::store_word`) on behalf of slot `client`.
    #[inline]
    fn store_word(&self, client: u32, word: &AtomicU64, value: u64) {
        crate::mcas::store_word(self.mcas.as_deref(), client, word, value);
    }
}

impl Drop for HugeHeap {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::Heap;
    use crate::thread::ThreadHandle;
    use podkv_hw::sync::Ordering;

    /// `t`'s slot as the owner of its huge state.
    fn owner<'a>(heap: &'a Heap, t: &ThreadHandle) -> HugeOwner<'a> {
        let huge = heap.shared.huge.as_ref().unwrap();
        huge.owner(&heap.shared.slots, t.slot_index())
    }

    /// Logs `step` in `t`'s huge log, as a huge transition does before it starts.
    fn huge_log(heap: &Heap, t: &ThreadHandle, step: HugeStep) {
        owner(heap, t).log(Some(step));
    }

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
        huge_log(&heap, &t, HugeStep::ClaimRun { first: 5, count: 3 });
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
        let offset = owner(&heap, &t).claim_run(8 << 20).unwrap();
        let d = &view.local(t.slot_index()).descs[3];
        d.offset.store(offset, Ordering::Relaxed);
        d.len.store(8 << 20, Ordering::Relaxed);
        huge_log(&heap, &t, HugeStep::Allocate { desc: 3 });
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
            .allocate(std::alloc::Layout::from_size_align(3 << 20, 8).unwrap())
            .unwrap();
        let desc = heap.huge_allocation(live).unwrap().desc as u16;
        huge_log(&heap, &t, HugeStep::Allocate { desc });
        t.recover_huge();
        assert!(
            heap.resolve_checked(live, 8).is_ok(),
            "a live block stays live"
        );
        // The crash: freed and unmapped everywhere, reclaim logged, pages not yet punched.
        let d = &view.local(t.slot_index()).descs[usize::from(desc)];
        d.state.store(DESC_FREED, Ordering::Release);
        view.unmap_freed();
        huge_log(&heap, &t, HugeStep::Reclaim { desc });
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
