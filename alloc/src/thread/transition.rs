//! The slab transitions of one thread slot (CXLALLOC §3.2, Fig. 4): the cold paths behind
//! [`crate::ThreadHandle::allocate`] and [`crate::ThreadHandle::free`], each move named
//! `a_to_b` after the states it joins (`slab.rs` has the states' table), logged before it is
//! done and with a crash point in every window. The slot's own lists change by plain stores
//! ordered so that, read forward from their heads, they are valid at every instant
//! (`recover.rs` relies on it).
//!
//! [`SlabOwner`] is the handle seen as the owner of its slabs; the handle's cold entry points
//! (`allocate_generic`, `free_generic`, …) call in here with their attributes unchanged.

use super::remote_free::RemoteFreer;
use super::current::Current;
use super::morph::Morpher;
use crate::slot::{pack_ends, unpack_ends};
use crate::class::{Kind, SIZE_LARGE_MAX, SIZE_SMALL_MAX};
use crate::{crash_point, dcas, error::AllocError, global::List, offset::Offset, recovery::Op};
use crate::remote::{self, Disown};
use crate::slab::{SlabDesc, State, SIZE_DESC, SIZE_DESC_HEAD};
use crate::slabs::SlabHeap;
use podkv_hw::sync::Ordering::{Acquire, Relaxed};
use std::alloc::Layout;

role! {
    /// A thread handle as the owner of its slabs, making their transitions.
    SlabOwner
}

impl SlabOwner<'_> {
    /// `slab` is empty and in hand — a remote free took it, a detach or disown found no live
    /// block, or recovery found it between lists: it becomes this slot's unsized slab (or goes
    /// global past the unsized bound; `give_back` drains the unsized list after disowning).
    pub(super) fn took_slab(&self, heap: &SlabHeap, slab: u32) {
        self.log_step(Op::TookSlab, heap, slab, 0, |_| {});
        crash_point!("took_slab.logged");
        let desc = heap.changed_hands(slab, self.coherence);
        let given_up = desc.meta().state == Some(State::Disowned);
        desc.set_meta(self.me, 0, State::Unsized);
        crash_point!("took_slab.meta");
        self.keep_or_release(heap, slab, given_up);
    }

    /// Whether the full head slab `slab` stays attached (sized, at the back of its list) while
    /// a fresh slab goes in front of it, instead of being detached: when it is the class's only
    /// sized slab, does not morph, and no other thread has freed into it (its remote count is
    /// still every block, so no remote freer can be waiting for it to be taken). A thread that fills a slab and
    /// frees its blocks again itself then sends no CAS at all: no detach, and its local frees
    /// take the fast path instead of reattaching. At most one full slab per class stays
    /// attached: a slab goes in front of it only when it is the list's only one, and when it
    /// is the head again with another slab behind it, it is detached as usual.
    pub(super) fn keeps_full(&self, heap: &SlabHeap, class: usize, slab: u32) -> bool {
        if heap.desc(slab).next() != 0 || heap.desc(slab).meta().old != 0 {
            return false;
        }
        // An HWcc (uncachable in an `mcas` heap) load: no request to a processor.
        let word = heap.remote(slab).load(Acquire);
        dcas::payload(word) == heap.classes.count[class]
    }

    pub(super) fn free_local(
        &self,
        heap: &SlabHeap,
        desc: &SlabDesc,
        slab: u32,
        class: usize,
        block: u32,
        offset: Offset,
    ) {
        // A detached slab may have come with the slot from another process: read what it
        // uses whole (`unsized_to_sized` and a morph's end wrote the rest back, zero). Not
        // when that process was of this cache domain: it wrote before this thread claimed the
        // slot (`crate::domains`, the exception).
        let detached = desc.meta().state == Some(State::Detached);
        if detached
            && !self.shared.one_domain()
            && podkv_hw::site!("alloc.transition.free_detached.invalidate")
        {
            desc.invalidate(self.coherence, desc.in_use(heap.classes.count[class]));
        }
        let word = &desc.bits[(block / 64) as usize];
        let bits = word.load(Relaxed);
        let bit = 1u64 << (block % 64);
        assert!(
            bits & bit == 0,
            "podkv: double free of block {block} in {} slab {slab}",
            heap.kind.name()
        );
        self.log_block(Op::Free, offset.0);
        crash_point!("free_local.logged");
        word.store(bits | bit, Relaxed);
        self.enter_free(offset.0);
        if detached {
            self.detached_to_sized(heap, class, slab);
        }
        if Morpher(self.0).is_empty(heap, desc, slab, class) {
            self.sized_to_unsized(heap, class, slab);
        }
        self.after_free.set(false);
    }

    pub(super) fn locate(&self, offset: Offset) -> (SlabHeap, u32, u64) {
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            if let Some((slab, in_slab)) = heap.slab_of(offset.0) {
                if slab < heap.len() {
                    return (heap, slab, in_slab);
                }
            }
        }
        panic!("podkv: free of {offset}, which lies in no slab of the heap");
    }

    /// `unsized_to_sized`: gives an empty slab a class, every block free, and puts it at the
    /// head of the class's sized list. `from_list`: the slab is still the unsized list's head
    /// (popped here, after logging); else it is in hand.
    pub(super) fn unsized_to_sized(&self, heap: &SlabHeap, slab: u32, class: usize, from_list: bool) {
        self.log_step(Op::ToSized, heap, slab, class, |s| s.from_list = from_list);
        crash_point!("to_sized.logged");
        if from_list {
            let lists = self.lists(heap.kind);
            let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
            debug_assert_eq!(head, slab + 1);
            let next = heap.desc(slab).next();
            lists
                .unsized_list
                .store(pack_ends(next, count - 1), Relaxed);
            crash_point!("to_sized.popped");
        }
        let desc = heap.desc(slab);
        let capacity = heap.classes.count[class];
        let zeroed = desc.fill_bits(capacity);
        remote::reset(heap.remote(slab), capacity, self.0);
        crash_point!("to_sized.reset");
        desc.set_meta(self.me, class as u8, State::Sized);
        // SWcc writer rule: remote freers of this slab's blocks read its class from here.
        // The whole descriptor if `fill_bits` zeroed words past the class's: while the slab
        // is sized only the lines it uses are written back (`SlabDesc::in_use`).
        if podkv_hw::site!("alloc.transition.to_sized.write_back") {
            desc.write_back(self.coherence, if zeroed { SIZE_DESC } else { SIZE_DESC_HEAD });
        }
        crash_point!("to_sized.meta");
        self.sized_push_front(heap, class, slab);
    }

    /// `sized_to_detached`: the owner found no free block. The slab leaves the sized list; the
    /// last free of its blocks, local or remote, decides its future. If remote frees already
    /// took every block back, nobody else can reach the slab and the owner keeps it, empty.
    pub(super) fn sized_to_detached(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.next_ver();
        self.log_step(Op::ToDetached, heap, slab, class, |_| {});
        crash_point!("to_detached.logged");
        self.sized_unlink(heap, class, slab);
        let desc = heap.desc(slab);
        desc.set_meta(self.me, class as u8, State::Detached);
        // What the slab uses: a taker reads it fresh, and this cache holds no dirty line
        // past it (`unsized_to_sized`, a morph's end).
        if podkv_hw::site!("alloc.transition.to_detached.write_back") {
            desc.write_back(self.coherence, desc.in_use(heap.classes.count[class]));
        }
        crash_point!("to_detached.meta");
        if remote::detach(heap.remote(slab), self.0) == 0 {
            crash_point!("to_detached.kept");
            self.took_slab(heap, slab);
        }
    }

    /// `detached_to_sized`: the owner freed a block of its full slab locally.
    pub(super) fn detached_to_sized(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.next_ver();
        self.log_step(Op::Reattach, heap, slab, class, |_| {});
        crash_point!("reattach.logged");
        remote::reattach(heap.remote(slab), self.0);
        crash_point!("reattach.cas");
        heap.desc(slab).set_meta(self.me, class as u8, State::Sized);
        crash_point!("reattach.meta");
        self.sized_push_back(heap, class, slab);
    }

    /// `sized_to_unsized`: the owner freed the last live block. A class's only slab stays
    /// sized ([`crate::slot::LocalLists::is_only_sized`]).
    pub(super) fn sized_to_unsized(&self, heap: &SlabHeap, class: usize, slab: u32) {
        if self.lists(heap.kind).is_only_sized(class, slab) {
            return;
        }
        self.log_step(Op::ToUnsized, heap, slab, class, |_| {});
        crash_point!("to_unsized.logged");
        self.sized_unlink(heap, class, slab);
        heap.desc(slab).set_meta(self.me, 0, State::Unsized);
        crash_point!("to_unsized.meta");
        self.keep_or_release(heap, slab, false);
    }

    /// Keeps an empty slab in hand on this slot's unsized list, or gives it to the global list
    /// when the slot already keeps enough; a slab `given_up` (disowned: `thread/drain.rs`)
    /// goes straight to the cold list, its pages released.
    pub(super) fn keep_or_release(&self, heap: &SlabHeap, slab: u32, given_up: bool) {
        let lists = self.lists(heap.kind);
        let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
        if given_up || count >= heap.count_keep_unsized {
            if podkv_hw::site!("alloc.transition.release.write_back") {
                heap.desc(slab).write_back(self.coherence, SIZE_DESC);
            }
            self.push_global(heap, slab, false, given_up);
            return;
        }
        self.log_step(Op::Keep, heap, slab, 0, |_| {});
        crash_point!("keep.logged");
        heap.desc(slab).set_links(head, 0);
        crash_point!("keep.linked");
        lists
            .unsized_list
            .store(pack_ends(slab + 1, count + 1), Relaxed);
    }

    /// `unsized_to_free`: pushes a slab this slot holds (in hand, or the unsized list's head if
    /// `from_list`) on the warm global list, else (or if `cold`) the cold one.
    pub(super) fn push_global(&self, heap: &SlabHeap, slab: u32, from_list: bool, cold: bool) {
        for list in List::ORDER.into_iter().skip(usize::from(cold)) {
            self.next_ver();
            self.log_step(Op::PushGlobal, heap, slab, 0, |s| {
                s.from_list = from_list;
                s.warm = list.is_warm();
            });
            crash_point!("push_global.logged");
            if from_list {
                let lists = self.lists(heap.kind);
                let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
                if head == slab + 1 {
                    let next = heap.desc(slab).next();
                    lists
                        .unsized_list
                        .store(pack_ends(next, count - 1), Relaxed);
                    crash_point!("push_global.popped");
                }
            }
            if self.shared.lists.push(heap, slab, list, self.0) {
                crash_point!("push_global.pushed");
                return;
            }
        }
    }

    /// `free_to_unsized`: pops a slab off global list `list` for this slot (logged first),
    /// unsized and this slot's; `None` when the list is empty.
    pub(super) fn pop_global(&self, heap: &SlabHeap, list: List) -> Option<u32> {
        self.next_ver();
        let log = |slab: u32| {
            self.log_step(Op::PopGlobal, heap, slab, 0, |s| s.warm = list.is_warm());
            crash_point!("pop_global.logged");
        };
        let slab = self.shared.lists.pop(heap, list, self.0, log)?;
        crash_point!("pop_global.popped");
        heap.changed_hands(slab, self.coherence).set_meta(self.me, 0, State::Unsized);
        Some(slab)
    }

    /// An empty slab for this slot and whether it is still the unsized list's head: the
    /// unsized list's head, else one popped off the global free list (warm, then cold), else a
    /// new slab from growing the heap (extra grown slabs join the unsized list).
    pub(super) fn take_unsized(&self, heap: &SlabHeap) -> Result<(u32, bool), AllocError> {
        let lists = self.lists(heap.kind);
        let (head, _) = unpack_ends(lists.unsized_list.load(Relaxed));
        if head != 0 {
            return Ok((head - 1, true));
        }
        for list in List::ORDER {
            if let Some(slab) = self.pop_global(heap, list) {
                if list == List::Cold && self.shared.lists.back_popped(heap, slab).is_err() {
                    self.push_global(heap, slab, false, false);
                    return Err(AllocError::OutOfMemory);
                }
                return Ok((slab, false));
            }
        }
        self.next_ver();
        let grown = self.shared.slabs.grow(heap, heap.batch_grow, self.0, |from, count| {
            self.log_step(Op::Grow, heap, from, 0, |s| s.count = count as u8);
            crash_point!("grow.logged");
        })?;
        crash_point!("grow.grown");
        self.place_grown(heap, grown.clone());
        Ok((grown.start, false))
    }

    /// Puts the extra slabs of a growth (all but the first, which the caller keeps in hand) on
    /// the unsized list with one store, so they are on it or not at all.
    pub(super) fn place_grown(&self, heap: &SlabHeap, grown: std::ops::Range<u32>) {
        for slab in grown.clone() {
            heap.desc(slab).set_meta(self.me, 0, State::Unsized);
        }
        if grown.len() < 2 {
            return;
        }
        let lists = self.lists(heap.kind);
        let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
        for slab in grown.start + 1..grown.end {
            let next = if slab + 1 < grown.end { slab + 2 } else { head };
            heap.desc(slab).set_links(next, 0);
        }
        crash_point!("grow.linked");
        lists.unsized_list.store(
            pack_ends(grown.start + 2, count + grown.len() as u32 - 1),
            Relaxed,
        );
    }

    /// Puts `slab` at the head of a sized list. Forward from the head, the list holds the slab
    /// only after the last store.
    pub(super) fn sized_push_front(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let list = &self.lists(heap.kind).sized[class];
        let (head, tail) = unpack_ends(list.load(Relaxed));
        heap.desc(slab).set_links(head, 0);
        crash_point!("push_front.linked");
        if head != 0 {
            let old = heap.desc(head - 1);
            old.set_links(old.next(), slab + 1);
        }
        list.store(
            pack_ends(slab + 1, if tail == 0 { slab + 1 } else { tail }),
            Relaxed,
        );
    }

    /// Puts `slab` at the tail of a sized list. Forward from the head, the list holds the slab
    /// from the old tail's `next` store on.
    pub(super) fn sized_push_back(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let list = &self.lists(heap.kind).sized[class];
        let (head, tail) = unpack_ends(list.load(Relaxed));
        heap.desc(slab).set_links(0, tail);
        crash_point!("push_back.linked");
        if tail != 0 {
            let old = heap.desc(tail - 1);
            old.set_links(slab + 1, old.prev());
            crash_point!("push_back.next");
        }
        list.store(
            pack_ends(if head == 0 { slab + 1 } else { head }, slab + 1),
            Relaxed,
        );
    }

    /// The class's current word may be in a slab leaving the sized list: forget it.
    pub(super) fn forget_current(&self, class: usize) {
        self.current[class].set(Current::none(&self.sink));
    }

    /// Takes `slab` out of a sized list. The first store (the list word for the head, else the
    /// predecessor's `next`) removes it from the forward list; the rest only fix back links.
    pub(super) fn sized_unlink(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let list = &self.lists(heap.kind).sized[class];
        let desc = heap.desc(slab);
        let (next, prev) = (desc.next(), desc.prev());
        if heap.kind == Kind::Small {
            self.forget_current(class);
        }
        let (mut head, mut tail) = unpack_ends(list.load(Relaxed));
        if prev == 0 {
            head = next;
        } else {
            let p = heap.desc(prev - 1);
            p.set_links(next, p.prev());
            crash_point!("unlink.next");
        }
        if next == 0 {
            tail = prev;
        }
        list.store(pack_ends(head, tail), Relaxed);
        crash_point!("unlink.list");
        if next != 0 {
            let n = heap.desc(next - 1);
            n.set_links(n.next(), prev);
        }
        desc.set_links(0, 0);
    }

    /// Gives every slab of this slot back: empty ones to the global list, partly used ones
    /// disowned (`sized_to_disowned`). Detached slabs stay the slot's: a later claimer of the
    /// slot frees into them locally, anyone else's last free takes them.
    pub(super) fn give_back(&self) {
        self.0.flush_remote_frees();
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            for class in 0..heap.classes.len {
                loop {
                    let (head, _) = unpack_ends(self.lists(kind).sized[class].load(Relaxed));
                    if head == 0 {
                        break;
                    }
                    self.sized_to_disowned(&heap, class, head - 1);
                }
            }
            loop {
                let (head, _) = unpack_ends(self.lists(kind).unsized_list.load(Relaxed));
                if head == 0 {
                    break;
                }
                if podkv_hw::site!("alloc.transition.give_back.write_back") {
                    heap.desc(head - 1).write_back(self.coherence, SIZE_DESC);
                }
                self.push_global(&heap, head - 1, true, false);
            }
        }
    }

    /// `sized_to_disowned`: the slab's free bits count as freed and nobody owns it; the last
    /// remote free takes it. With no live block left it goes straight to the global list.
    pub(super) fn sized_to_disowned(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.next_ver();
        self.log_step(Op::Disown, heap, slab, class, |_| {});
        crash_point!("disown.logged");
        self.sized_unlink(heap, class, slab);
        let desc = heap.desc(slab);
        let free = desc.count_free(heap.classes.count[class]);
        desc.set_meta(0, class as u8, State::Disowned);
        if podkv_hw::site!("alloc.transition.disown.write_back") {
            desc.write_back(self.coherence, SIZE_DESC);
        }
        crash_point!("disown.meta");
        if remote::disown(heap.remote(slab), free, self.0) == Disown::Empty {
            crash_point!("disown.empty");
            self.took_slab(heap, slab);
        }
    }

    #[inline(always)]
    pub(super) fn allocate_generic(&self, layout: Layout) -> Result<Offset, AllocError> {
        let (size, align) = (layout.size().max(1), layout.align());
        let unsupported = AllocError::Unsupported {
            size: layout.size(),
            align,
        };
        let small = *self.shared.slabs.get(Kind::Small);
        let large = *self.shared.slabs.get(Kind::Large);
        let (heap, class) = match (
            small.classes.class_for(size, align),
            large.classes.class_for(size, align),
        ) {
            (Some(class), _) if size <= SIZE_SMALL_MAX => (small, class),
            (_, Some(class)) if size <= SIZE_LARGE_MAX => (large, class),
            _ if size > SIZE_LARGE_MAX => return self.allocate_huge(layout),
            _ => return Err(unsupported),
        };
        loop {
            let head = self.lists(heap.kind).sized[class].load(Relaxed) as u32;
            if head != 0 {
                let slab = head - 1;
                let capacity = heap.classes.count[class];
                let size = u64::from(heap.classes.size[class]);
                let at = |block: u32| heap.data_of(slab) + u64::from(block) * size;
                let desc = heap.desc(slab);
                if let Some(block) =
                    desc.take_scanning(capacity, |b| self.log_block(Op::Alloc, at(b)))
                {
                    return Ok(Offset(at(block)));
                }
                if !self.keeps_full(&heap, class, slab) {
                    self.sized_to_detached(&heap, class, slab);
                    continue;
                }
            }
            if Morpher(self.0).try_morph(&heap, class) {
                continue;
            }
            let (slab, from_list) = self.take_unsized(&heap)?;
            self.unsized_to_sized(&heap, slab, class, from_list);
        }
    }

    #[inline(always)]
    pub(super) fn free_generic(&self, offset: Offset) {
        if self.shared.huge_view().is_some_and(|h| h.contains(offset.0)) {
            return self.free_huge(offset);
        }
        let (heap, slab, in_slab) = self.locate(offset);
        let desc = heap.desc(slab);
        // SWcc reader rule, as on the small remote path: the slab may be another thread's.
        // Not one this cache holds as this slot's sized slab: only the owner writes such a
        // head, fresh since the tenure's claim (`SlabHeap::begin_tenure`; as the fast path).
        // Nor when every process of the heap is of this cache domain, checked after the read
        // (`crate::domains`).
        let cached = desc.meta();
        let mine = cached.owner == self.me && cached.state == Some(State::Sized);
        if !mine
            && !self.shared.one_domain()
            && podkv_hw::site!("alloc.transition.free.invalidate")
        {
            desc.invalidate(self.coherence, SIZE_DESC_HEAD);
        }
        let meta = desc.meta();
        if meta.old != 0 {
            return Morpher(self.0).free(&heap, slab, in_slab, meta, offset);
        }
        let class = meta.class as usize;
        let block = heap.classes.block_index(class, in_slab);
        let valid_block = class < heap.classes.len
            && block < heap.classes.count[class]
            && u64::from(block) * u64::from(heap.classes.size[class]) == in_slab;
        match meta.state {
            Some(State::Sized | State::Detached) if meta.owner == self.me && valid_block => {
                self.free_local(&heap, desc, slab, class, block, offset)
            }
            Some(State::Sized | State::Detached | State::Disowned) if meta.owner != self.me && valid_block => {
                RemoteFreer(self.0).remote_free_block(heap.kind, slab, offset)
            }
            _ => panic!("podkv: free of {offset}, which is not an allocated block ({:?} slab {slab}: {meta:?})", heap.kind),
        }
    }

    /// Bitset word `filled` of the slab filled up: if every block is free, the slab is empty.
    /// A class's only sized slab stays sized anyway (`sized_to_unsized`): it is not scanned.
    #[inline(always)]
    pub(super) fn free_maybe_empty(&self, kind: Kind, class: usize, slab: u32, offset: Offset, filled: usize) {
        let only = self.lists(kind).is_only_sized(class, slab);
        let heap = self.shared.slabs.get(kind);
        if !only && heap.desc(slab).is_empty_near(heap.classes.count[class], filled) {
            self.enter_free(offset.0);
            self.sized_to_unsized(heap, class, slab);
            self.after_free.set(false);
        }
    }
}
