//! Recovery of a dead thread slot (CXLALLOC §3.4.2): the adopter, now the slot's owner, reads
//! the recovery word once and finishes the step it names.
//!
//! # What the adopter may rely on
//! - The slot's lists read forward from their heads are valid at every instant (the writes of
//!   each transition are ordered so), so `repair_lists` only re-derives back
//!   links, tails and the unsized count, walking this slot's own slabs.
//! - A step's detectable CAS took effect iff the target still names (this slot, the logged
//!   version) or the recovery word is acknowledged ([`crate::dcas`]).
//! - A slab a step holds "in hand" is on no list and owned by nobody else: the adopter puts it
//!   on the unsized list or the global one.
//!
//! Each arm is idempotent: it re-logs before it changes anything, so a crash of the adopter is
//! recovered the same way. No arm waits for another thread or scans the heap.
//!
//! # The application's turn
//! Recovery ends by telling the application what the dead owner was doing with a block
//! ([`InFlight`]) while the adopter still holds the slot, so the application settles it before
//! the slot can be released and claimed again: [`crate::Heap::recover_dead_with`] calls its
//! callback then; an adoption while claiming ([`crate::Heap::thread`]) calls the hook
//! registered with [`crate::Heap::set_recovery_hook`] and keeps the report for the claiming
//! handle ([`ThreadHandle::take_adoption`]). Huge blocks are reported like the others: the huge
//! log (`huge/owner.rs`) names an allocation made live but not returned, or a free under way.

use super::remote_free::RemoteFreer;
use super::morph::Morpher;
use super::ThreadHandle;
use crate::slot::{pack_ends, unpack_ends};
use crate::class::Kind;
use crate::dcas;
use crate::global::List;
use crate::morph::Morph;
use crate::slabs::SlabHeap;
use crate::offset::Offset;
use crate::pending::Pending;
use crate::recovery::{InFlight, Op, Rec, SlabStep};
use crate::remote::{self, RemoteFree};
use crate::slab::{SlabDesc, State};
use podkv_hw::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::time::{Duration, Instant};

/// What recovering one slot did.
#[derive(Clone, Copy, Debug)]
pub struct Recovered {
    /// The slot.
    pub slot: u32,
    /// The step its recovery word named.
    pub step: Rec,
    /// The huge-heap step its huge log named, if any.
    pub huge_step: Option<crate::huge::HugeStep>,
    /// The block it concerned, for the application.
    pub in_flight: InFlight,
    /// How long recovery took (excluding giving the slot's slabs back), wall clock.
    pub took: Duration,
    /// The recovering thread's CPU time over the same span: `took` without the time the
    /// thread waited for a CPU or was descheduled, which on a loaded machine is most of a
    /// slow `took`.
    pub took_cpu: Duration,
}

role! {
    /// The adopter of a dead slot, finishing the step its recovery word names: the slot's
    /// [`ThreadHandle`], now held by the adopting thread, seen through the recovery's methods.
    Adopter
}

impl Adopter<'_> {
    /// Finishes the step a dead owner of this (just adopted) slot was in, then hands the
    /// report to `settle` while this handle still holds the slot. Bounded work: this slot's
    /// own lists, the one slab the step names and its huge state.
    pub(super) fn recover_with(
        &self,
        settle: &mut dyn FnMut(&ThreadHandle, &Recovered),
    ) -> Recovered {
        let (start, start_cpu) = (Instant::now(), crate::process::thread_cpu_time());
        let rec = Rec(self.slot().recovery.load(Relaxed));
        self.repair_lists();
        let mut in_flight = self.finish(rec);
        self.after_free.set(false);
        // The huge heap logs its own steps (`huge/owner.rs`): finish those (a huge step under
        // way names the block in flight), then reclaim what the dead owner freed and nobody
        // maps any more.
        let huge = self.recover_huge_in_flight();
        if let Some((_, huge_in_flight)) = huge {
            if huge_in_flight != InFlight::None {
                in_flight = huge_in_flight;
            }
        }
        self.collect_huge();
        let recovered = Recovered {
            slot: self.slot_index,
            step: rec,
            huge_step: huge.map(|(step, _)| step),
            in_flight,
            took: start.elapsed(),
            took_cpu: crate::process::thread_cpu_time().saturating_sub(start_cpu),
        };
        settle(self.0, &recovered);
        recovered
    }

    /// The one `match` over the logged step (constitution rule 5): each arm names the crash
    /// window it closes and lives in its own method below.
    fn finish(&self, rec: Rec) -> InFlight {
        let Some(op) = rec.op() else {
            return InFlight::None;
        };
        let step = rec.step();
        let heap = *self.shared.slabs.get(if step.large { Kind::Large } else { Kind::Small });
        let (slab, class) = (step.slab, usize::from(step.class));
        // Steps re-logged below continue the same free, so a recoverer that dies in turn still
        // reports it (the offset stays in `aux`).
        self.after_free.set(slab_step(op) && step.after_free);
        if slab_step(op) && slab >= heap.len() && op != Op::Grow {
            return InFlight::None; // not a slab of this heap: nothing this step can have done
        }
        if slab_step(op) && op != Op::Grow {
            self.take_over(heap.desc(slab));
        }
        let ver = rec.ver();
        match op {
            Op::Idle => InFlight::None,
            Op::Alloc => self.finish_alloc(Offset(rec.offset())),
            Op::Free => self.finish_free(Offset(rec.offset())),
            Op::RemoteFree => self.finish_remote_free(rec),
            Op::Flush => self.finish_flush(rec, &heap, slab),
            Op::ToSized => self.finish_to_sized(&heap, class, slab, step.from_list),
            Op::PopGlobal => self.finish_pop_global(&heap, slab, step.warm, ver),
            Op::Grow => self.finish_grow(&heap, slab, u32::from(step.count), ver),
            Op::ToDetached => self.finish_to_detached(&heap, class, slab, ver),
            Op::Reattach => {
                self.finish_reattach(&heap, class, slab, ver);
                self.freed(step)
            }
            Op::ToUnsized | Op::Keep | Op::TookSlab => {
                let placed = op == Op::ToUnsized && self.in_sized(&heap, class, slab)
                    || self.unsized_head(&heap) == slab + 1;
                if !placed {
                    self.slabs().took_slab(&heap, slab);
                }
                self.freed(step)
            }
            Op::PushGlobal => {
                self.finish_push_global(&heap, slab, step, ver);
                self.freed(step)
            }
            Op::Disown => self.finish_disown(&heap, class, slab, ver),
            Op::Morph => self.finish_morph(&heap, class, usize::from(step.count), slab, ver),
            Op::Unblock => self.finish_unblock(&heap, class, usize::from(step.count), slab, ver),
        }
    }

    /// The free a slab step continues, if it continues one.
    fn freed(&self, step: SlabStep) -> InFlight {
        if step.after_free {
            InFlight::Free(Offset(self.slot().aux.load(Relaxed)))
        } else {
            InFlight::None
        }
    }

    /// Whether the logged CAS (version `ver`) on `word` is the word's last write.
    fn mine(&self, word: &AtomicU64, ver: u16) -> bool {
        self.wrote(word.load(Acquire), ver)
    }

    /// Whether the logged CAS (version `ver`) on `word` took effect.
    fn took(&self, word: &AtomicU64, ver: u16) -> bool {
        self.mine(word, ver) || self.acked(ver)
    }

    /// `unsized_to_sized`: a slab on neither list was in hand.
    fn finish_to_sized(&self, heap: &SlabHeap, class: usize, slab: u32, from_list: bool) -> InFlight {
        let listed =
            self.in_sized(heap, class, slab) || from_list && self.unsized_head(heap) == slab + 1;
        if !listed {
            self.slabs().took_slab(heap, slab);
        }
        InFlight::None
    }

    /// A pop off a global list that took effect leaves the slab in hand; its pages may be
    /// released (cold list): back to the cold list.
    fn finish_pop_global(&self, heap: &SlabHeap, slab: u32, warm: bool, ver: u16) -> InFlight {
        let head = self.shared.lists.head(heap, List::of(warm));
        let w = head.load(Acquire);
        let popped = self.mine(head, ver) && dcas::payload(w) != slab + 1 || self.acked(ver);
        if popped {
            heap.desc(slab)
                .set_meta(self.me, 0, State::Unsized);
            self.slabs().push_global(heap, slab, false, false);
        }
        InFlight::None
    }

    /// A growth that took effect: the extra slabs go on the unsized list (unless already
    /// there), the first is in hand.
    fn finish_grow(&self, heap: &SlabHeap, slab: u32, count: u32, ver: u16) -> InFlight {
        let len = heap.len_word();
        let grown = self.mine(len, ver) && dcas::payload(len.load(Acquire)) == slab + count
            || self.acked(ver);
        if grown && count > 0 {
            if count >= 2 && self.unsized_head(heap) != slab + 2 {
                self.slabs().place_grown(heap, slab..slab + count);
            }
            self.slabs().took_slab(heap, slab);
        }
        InFlight::None
    }

    /// `sized_to_detached`: take the slab if the detach emptied it; unlinked but not detached:
    /// detach now, as the dead owner would have.
    fn finish_to_detached(&self, heap: &SlabHeap, class: usize, slab: u32, ver: u16) -> InFlight {
        let word = heap.remote(slab);
        if self.took(word, ver) {
            if self.mine(word, ver) && remote::count(word.load(Relaxed)) == 0 {
                self.slabs().took_slab(heap, slab);
            }
        } else if !self.in_sized(heap, class, slab) {
            self.next_ver();
            self.log_step(Op::ToDetached, heap, slab, class, |_| {});
            heap.desc(slab)
                .set_meta(self.me, class as u8, State::Detached);
            if remote::detach(word, self.0) == 0 {
                self.slabs().took_slab(heap, slab);
            }
        }
        InFlight::None
    }

    /// `detached_to_sized`: redo the reattach CAS unless it took effect, then the rest.
    fn finish_reattach(&self, heap: &SlabHeap, class: usize, slab: u32, ver: u16) {
        if !self.took(heap.remote(slab), ver) {
            self.next_ver();
            self.log_step(Op::Reattach, heap, slab, class, |_| {});
            remote::reattach(heap.remote(slab), self.0);
        }
        heap.desc(slab)
            .set_meta(self.me, class as u8, State::Sized);
        if !self.in_sized(heap, class, slab) {
            self.slabs().sized_push_back(heap, class, slab);
        }
    }

    /// `unsized_to_free`: a slab neither pushed nor still on the unsized list is in hand.
    fn finish_push_global(&self, heap: &SlabHeap, slab: u32, step: SlabStep, ver: u16) {
        let head = self.shared.lists.head(heap, List::of(step.warm));
        let pushed =
            self.mine(head, ver) && dcas::payload(head.load(Acquire)) == slab + 1 || self.acked(ver);
        let still_listed = step.from_list && self.unsized_head(heap) == slab + 1;
        if !pushed && !still_listed {
            self.slabs().push_global(heap, slab, false, false);
        }
    }

    /// `sized_to_disowned`: take the slab if the disown emptied it; unlinked but not disowned:
    /// disown now.
    fn finish_disown(&self, heap: &SlabHeap, class: usize, slab: u32, ver: u16) -> InFlight {
        let word = heap.remote(slab);
        if self.took(word, ver) {
            if self.mine(word, ver) && dcas::payload(word.load(Relaxed)) == 0 {
                self.slabs().took_slab(heap, slab);
            }
        } else if !self.in_sized(heap, class, slab) {
            self.next_ver();
            self.log_step(Op::Disown, heap, slab, class, |_| {});
            let desc = heap.desc(slab);
            let free = desc.count_free(heap.classes.count[class]);
            desc.set_meta(0, class as u8, State::Disowned);
            if remote::disown(word, free, self.0) == remote::Disown::Empty {
                self.slabs().took_slab(heap, slab);
            }
        }
        InFlight::None
    }

    /// `sized_to_morphing` (`morph.rs`): while `meta` still names the old class, undo (the
    /// old set's words back to zero, the slab back on its old class's list); once it names
    /// the new class, finish: carve again (nothing was allocated from the new class before
    /// the next step was logged), redo the rebase unless it took effect, list the slab.
    fn finish_morph(&self, heap: &SlabHeap, class: usize, old: usize, slab: u32, ver: u16) -> InFlight {
        let Some(morph) = Morph::of(heap.classes, class, old) else {
            return InFlight::None;
        };
        let desc = heap.desc(slab);
        if desc.meta().old == 0 {
            morph.clear_old(desc);
            if !self.in_sized(heap, old, slab) {
                self.slabs().sized_push_back(heap, old, slab);
            }
            return InFlight::None;
        }
        let free_new = morph.carve(desc);
        let word = heap.remote(slab);
        if !self.took(word, ver) {
            self.next_ver();
            self.log_step(Op::Morph, heap, slab, class, |s| s.count = old as u8);
            let free_old = morph.count_old - morph.count_old_set(desc);
            remote::rebase(word, free_old, free_new, self.0);
        }
        if !self.in_sized(heap, class, slab) {
            self.slabs().sized_push_front(heap, class, slab);
        }
        InFlight::None
    }

    /// The owner's free of an old block (`morph.rs`, `free_old`; the block in `aux`): finished
    /// there, told whether the logged CAS took effect and, if it wrote the word last, whether
    /// it took the slab (overwritten means not taken: a slab it emptied has no other writer).
    fn finish_unblock(&self, heap: &SlabHeap, class: usize, old: usize, slab: u32, ver: u16) -> InFlight {
        let offset = Offset(self.slot().aux.load(Relaxed));
        let word = heap.remote(slab);
        let w = word.load(Acquire);
        let counted = self.took(word, ver).then(|| {
            if self.wrote(w, ver) && remote::took_slab(dcas::payload(w)) {
                RemoteFree::TookSlab
            } else {
                RemoteFree::Counted
            }
        });
        Morpher(self.0).finish_unblock(heap, slab, class, old, offset, counted);
        InFlight::Free(offset)
    }

    /// An allocation was logged: if the block's bit is clear it was taken (a huge block: if
    /// this slot's descriptor of it is live).
    fn finish_alloc(&self, offset: Offset) -> InFlight {
        if let Some(view) = self.shared.huge_view().filter(|v| v.contains(offset.0)) {
            let live = view.find(offset.0, true, &[crate::huge::DESC_LIVE]);
            return match live {
                Some(found) if found.slot == self.slot_index => InFlight::Alloc(offset),
                _ => InFlight::None,
            };
        }
        match self.find_block(offset) {
            Some((heap, slab, block)) => {
                let desc = heap.desc(slab);
                let word = desc.bits[(block / 64) as usize].load(Relaxed);
                if desc.meta().owner == self.me && word & 1 << (block % 64) == 0 {
                    InFlight::Alloc(offset)
                } else {
                    InFlight::None
                }
            }
            None => InFlight::None,
        }
    }

    /// A local free was logged: set the bit if it is not yet, and reattach a detached slab.
    /// (A huge block's free is logged here only once its descriptor is freed.)
    fn finish_free(&self, offset: Offset) -> InFlight {
        if self.shared.huge_view().is_some_and(|v| v.contains(offset.0)) {
            return InFlight::Free(offset);
        }
        let Some((heap, slab, block)) = self.find_block(offset) else {
            return InFlight::None;
        };
        let desc = heap.desc(slab);
        let meta = desc.meta();
        if meta.owner != self.me || !matches!(meta.state, Some(State::Sized | State::Detached)) {
            return InFlight::Free(offset);
        }
        let word = &desc.bits[(block / 64) as usize];
        let bit = 1u64 << (block % 64);
        let bits = word.load(Relaxed);
        if bits & bit == 0 {
            self.log_block(Op::Free, offset.0);
            word.store(bits | bit, Relaxed);
        }
        if meta.state == Some(State::Detached) {
            self.enter_free(offset.0);
            self.slabs().detached_to_sized(&heap, usize::from(meta.class), slab);
        }
        InFlight::Free(offset)
    }

    /// A remote free is done once the pending word carries its version; else it is counted
    /// now (the batch it would have joined is as it was: the step logs after any flush).
    fn finish_remote_free(&self, rec: Rec) -> InFlight {
        let offset = Offset(rec.offset());
        let Some((heap, slab)) = self.find_slab(offset) else {
            return InFlight::None;
        };
        let batch = Pending::unpack(self.slot().pending.load(Acquire));
        if batch.is_none_or(|b| b.ver != rec.ver()) {
            RemoteFreer(self.0).remote_free_block(heap.kind, slab, offset);
        }
        InFlight::Free(offset)
    }

    /// A flush: if its CAS took effect, clear the batch (unless done) and take the slab if the
    /// CAS emptied it; else the batch is still in the pending word: flush it now.
    fn finish_flush(&self, rec: Rec, heap: &SlabHeap, slab: u32) -> InFlight {
        let w = heap.remote(slab).load(Acquire);
        if self.wrote(w, rec.ver()) || self.acked(rec.ver()) {
            self.slot().pending.store(0, Release);
            // Overwritten means not taken: a slab the CAS emptied has no other writer.
            if self.wrote(w, rec.ver()) && remote::took_slab(dcas::payload(w)) {
                self.slabs().took_slab(heap, slab);
            }
        } else {
            self.flush_remote_frees();
        }
        InFlight::None
    }

    /// Whether detectable word `w` names this slot's operation `ver` as its last writer.
    fn wrote(&self, w: u64, ver: u16) -> bool {
        dcas::tag(w)
            == (dcas::Tag {
                tid: self.me as u16,
                ver,
            })
    }

    /// Whether this slot's acknowledgement word records `ver` now. Read after the target:
    /// whoever replaced the target acknowledged before it did.
    fn acked(&self, ver: u16) -> bool {
        let word = self.shared.slots
            .ack(u64::from(self.slot_index()))
            .load(Acquire);
        dcas::is_acked(word, ver)
    }

    /// The grown slab a block offset lies in.
    fn find_slab(&self, offset: Offset) -> Option<(SlabHeap, u32)> {
        Kind::ALL.iter().find_map(|&kind| {
            let heap = *self.shared.slabs.get(kind);
            let (slab, _) = heap.slab_of(offset.0)?;
            (slab < heap.len()).then_some((heap, slab))
        })
    }

    /// The slab and block index of a block offset, by the slab's current class.
    fn find_block(&self, offset: Offset) -> Option<(SlabHeap, u32, u32)> {
        let (heap, slab) = self.find_slab(offset)?;
        let (_, in_slab) = heap.slab_of(offset.0)?;
        let class = usize::from(heap.desc(slab).meta().class);
        if class >= heap.classes.len {
            return None;
        }
        let block = heap.classes.block_index(class, in_slab);
        (block < heap.classes.count[class]).then_some((heap, slab, block))
    }

    fn unsized_head(&self, heap: &SlabHeap) -> u32 {
        unpack_ends(self.lists(heap.kind).unsized_list.load(Relaxed)).0
    }

    /// Whether `slab` is on the sized list of `class` (walking forward).
    fn in_sized(&self, heap: &SlabHeap, class: usize, slab: u32) -> bool {
        let (mut link, _) = unpack_ends(self.lists(heap.kind).sized[class].load(Relaxed));
        let mut steps = 0;
        while link != 0 && steps <= heap.len() {
            if link == slab + 1 {
                return true;
            }
            link = heap.desc(link - 1).next();
            steps += 1;
        }
        false
    }

    /// Re-derives every back link, tail and the unsized count of this slot's lists from their
    /// forward links (which every transition keeps valid).
    /// SWcc reader rule for a descriptor the adopter now owns: the dead owner wrote it (and
    /// wrote it back, or its host's cache holds it), so this process's cached copy, loaded
    /// whenever, is read fresh before the adopter trusts or changes it.
    fn take_over<'d>(&self, desc: &'d SlabDesc) -> &'d SlabDesc {
        if podkv_hw::site!("alloc.recover.take_over.invalidate") {
            self.shared.geometry.coherence.invalidate(
                (desc as *const SlabDesc).cast(),
                std::mem::size_of::<SlabDesc>(),
            );
        }
        desc
    }

    fn repair_lists(&self) {
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            let len = heap.len();
            let lists = self.lists(kind);
            for class in 0..heap.classes.len {
                let (head, _) = unpack_ends(lists.sized[class].load(Relaxed));
                if head == 0 {
                    lists.sized[class].store(0, Relaxed);
                    continue;
                }
                let (mut link, mut prev, mut steps) = (head, 0, 0);
                while link != 0 && link <= len && steps <= len {
                    let desc = self.take_over(heap.desc(link - 1));
                    if desc.prev() != prev {
                        desc.set_links(desc.next(), prev);
                    }
                    prev = link;
                    link = desc.next();
                    steps += 1;
                }
                lists.sized[class].store(pack_ends(head, prev), Relaxed);
            }
            let (head, _) = unpack_ends(lists.unsized_list.load(Relaxed));
            let (mut link, mut count) = (head, 0);
            while link != 0 && link <= len && count <= len {
                count += 1;
                link = self.take_over(heap.desc(link - 1)).next();
            }
            lists.unsized_list.store(pack_ends(head, count), Relaxed);
        }
    }
}

/// Whether `op` names a slab (not a block).
fn slab_step(op: Op) -> bool {
    !matches!(op, Op::Idle | Op::Alloc | Op::Free | Op::RemoteFree)
}
