//! `sized_to_morphing` and the frees of a morphing slab's blocks ([`crate::morph`]): a slot
//! that needs a slab for a class and keeps no empty one turns one of its own sparse sized
//! slabs of another class into that class's, instead of taking a fresh slab.
//!
//! # The move, logged first (constitution rule 5)
//! 1. log [`Op::Morph`] (slab, new class, old class);
//! 2. write the old set at the top of the bitset (the old class's free bits stay as they
//!    were) — `morph.old`;
//! 3. unlink the slab from its old class's sized list;
//! 4. write the old set back, then `meta` names the new class and the old one (the point of
//!    no return), written back — `morph.meta`;
//! 5. carve the new class's free bits from the old set — `morph.carved`;
//! 6. rebase the remote word by one detectable CAS (old free bits out, new ones in) —
//!    `morph.counted`;
//! 7. push the slab on the new class's sized list.
//!
//! Recovery (`recover.rs`) undoes a move whose `meta` still names the old class (the old set
//! words back to zero, the slab back on its list) and finishes one whose `meta` names the new
//! class: carving again is idempotent (nothing is allocated from the new class before the next
//! step is logged), the CAS is redone unless it took effect, the slab is pushed unless listed.
//!
//! # The owner's free of a new block (`free_small`)
//! The free fast path sends the owner's frees into its own morphing small slab here, not to
//! `free_generic`: a new block that is not blocked and not free is logged ([`Op::Free`],
//! `morph_free.logged`) and its bit set, as on the fast path; recovery finishes it as any
//! local free. The slab can be empty then only if other slots freed its old blocks (this slot
//! wrote its remote word last otherwise, and every old block of the set is live): only then,
//! and when the freed block's word shows no live new block among its first clear bits, is the
//! slab counted for emptiness (its remote word against its free bits).
//!
//! # The owner's free of an old block ([`Op::Unblock`], `free_old`)
//! Logged with the block's offset in `aux`; then the old set forgets the block
//! (`unblock.old`), the new blocks over it that no other old block blocks come free
//! (`unblock.freed`), one detectable CAS moves the remote count by their number less one
//! (`unblock.counted`; with none freed it is a plain free, which can take a detached slab),
//! and with no old block left the morph ends (`unblock.ended`). Each write is idempotent, so
//! recovery redoes them all from the offset, the CAS only unless it took effect.

use super::remote_free::RemoteFreer;
use crate::crash_point;
use crate::dcas;
use crate::class::{is_block_start, Kind, COUNT_CLASSES_MAX, SHIFT_SMALL_SLAB, SMALL, SMALL_RECIP};
use crate::morph::{Morph, COUNT_SCAN_MAX, OCCUPANCY_MAX_PERCENT};
use crate::offset::Offset;
use crate::recovery::Op;
use crate::remote::{self, RemoteFree};
use crate::slab::{Meta, SlabDesc, State, SIZE_DESC, SIZE_DESC_HEAD};
use crate::slabs::SlabHeap;
use crate::slot::unpack_ends;
use podkv_hw::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};

/// Clear bits of a morphing slab's word its owner's free tests for a live new block before
/// it counts the whole slab (`Morpher::live_in_word`).
const COUNT_CLEAR_TRIED: u32 = 4;

role! {
    /// A thread handle as the owner of its slabs, morphing them and freeing into morphing ones.
    Morpher
}

impl Morpher<'_> {
    /// Morphs a sparse slab of another class to serve `class`, when this process morphs and
    /// the slot keeps no empty slab: whether it did (the slab is then `class`'s list head).
    #[cold]
    pub(super) fn try_morph(&self, heap: &SlabHeap, class: usize) -> bool {
        let (unsized_head, _) = unpack_ends(self.lists(heap.kind).unsized_list.load(Relaxed));
        if !self.shared.morph || unsized_head != 0 {
            return false;
        }
        match self.candidate(heap, class) {
            Some((slab, old, morph)) => {
                self.sized_to_morphing(heap, slab, class, old, &morph);
                true
            }
            None => false,
        }
    }

    /// The first of this slot's sized slabs of another class (at most [`COUNT_SCAN_MAX`]
    /// looked at) that does not morph already, is at most [`OCCUPANCY_MAX_PERCENT`] in use
    /// and would leave at least half of `class`'s blocks free. Old classes are tried in the
    /// order of [`Morph::span`], least first: an old class whose blocks tile `class`'s (104 B
    /// under 208 B) blocks one new block per old block in use, another up to two, so the same
    /// old blocks lock the least space. A list's head is passed over: its class allocates from
    /// it, so a fresh one is sparse without being calcified, and taking it would only send that
    /// class for a slab in turn.
    fn candidate(&self, heap: &SlabHeap, class: usize) -> Option<(u32, usize, Morph)> {
        let mut order = [(0u32, 0u8); COUNT_CLASSES_MAX];
        let mut count = 0;
        for old in 0..heap.classes.len {
            let (head, _) = unpack_ends(self.lists(heap.kind).sized[old].load(Relaxed));
            if head == 0 || heap.desc(head - 1).next() == 0 {
                continue;
            }
            if let Some(morph) = Morph::of(heap.classes, class, old) {
                order[count] = (morph.span(), old as u8);
                count += 1;
            }
        }
        order[..count].sort_unstable();
        let mut budget = COUNT_SCAN_MAX;
        for &(_, old) in &order[..count] {
            let old = usize::from(old);
            let Some(morph) = Morph::of(heap.classes, class, old) else {
                continue;
            };
            let (head, _) = unpack_ends(self.lists(heap.kind).sized[old].load(Relaxed));
            let mut link = heap.desc(head - 1).next();
            while link != 0 {
                if budget == 0 {
                    return None;
                }
                budget -= 1;
                let desc = heap.desc(link - 1);
                let used = morph.count_old - desc.count_free(morph.count_old);
                if desc.meta().old == 0
                    && used * 100 <= morph.count_old * OCCUPANCY_MAX_PERCENT
                    && morph.preview_free(desc) * 2 >= morph.count_new
                {
                    return Some((link - 1, old, morph));
                }
                link = desc.next();
            }
        }
        None
    }

    /// `sized_to_morphing` (module docs): sized slab `slab` of class `old` becomes a morphing
    /// slab of `class`, at the head of its sized list.
    fn sized_to_morphing(&self, heap: &SlabHeap, slab: u32, class: usize, old: usize, morph: &Morph) {
        self.next_ver();
        self.log_step(Op::Morph, heap, slab, class, |s| s.count = old as u8);
        crash_point!("morph.logged");
        let desc = heap.desc(slab);
        morph.write_old(desc);
        crash_point!("morph.old");
        self.slabs().sized_unlink(heap, old, slab);
        // SWcc writer rule: freers of old blocks read the old set once `meta` says so.
        if podkv_hw::site!("alloc.morph.old.write_back") {
            let old_set = &desc.bits[morph.old_at()..];
            self.coherence
                .write_back(old_set.as_ptr().cast(), std::mem::size_of_val(old_set));
        }
        desc.set_meta_morphing(self.me, class as u8, old as u8);
        if podkv_hw::site!("alloc.morph.meta.write_back") {
            self.coherence
                .write_back((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
        }
        crash_point!("morph.meta");
        let free_new = morph.carve(desc);
        crash_point!("morph.carved");
        let free_old = morph.count_old - morph.count_old_set(desc);
        remote::rebase(heap.remote(slab), free_old, free_new, self.0);
        crash_point!("morph.counted");
        self.slabs().sized_push_front(heap, class, slab);
    }

    /// A free of `offset`, at byte `in_slab` of morphing slab `slab` whose `meta` is `meta`
    /// (from `free_generic`): an old block of the old set is counted on the remote word by
    /// whoever frees it; a new block is freed as in any sized slab.
    pub(super) fn free(&self, heap: &SlabHeap, slab: u32, in_slab: u64, meta: Meta, offset: Offset) {
        let desc = heap.desc(slab);
        let (class, old) = (usize::from(meta.class), usize::from(meta.old) - 1);
        let morph = Morph::of(heap.classes, class, old);
        let live = matches!(meta.state, Some(State::Sized | State::Detached | State::Disowned));
        let Some(morph) = morph.filter(|_| live) else {
            panic!("podkv: free of {offset} in a slab that cannot morph ({:?} slab {slab}: {meta:?})", heap.kind);
        };
        // SWcc reader rule: another thread's old set is read fresh.
        if meta.owner != self.me && podkv_hw::site!("alloc.morph.free.invalidate") {
            let old_set = &desc.bits[morph.old_at()..];
            self.coherence
                .invalidate(old_set.as_ptr().cast(), std::mem::size_of_val(old_set));
        }
        if let Some(i) = morph.old_block(desc, in_slab) {
            if meta.owner == self.me && matches!(meta.state, Some(State::Sized | State::Detached)) {
                return self.free_old(heap, slab, class, old, i, offset);
            }
            return RemoteFreer(self.0).remote_free_block(heap.kind, slab, offset);
        }
        let size = u64::from(morph.size_new);
        let block = (in_slab / size) as u32;
        let valid = in_slab % size == 0 && block < morph.count_new && !morph.blocked(desc, block);
        match meta.state {
            Some(State::Sized | State::Detached) if meta.owner == self.me && valid => {
                self.slabs().free_local(heap, desc, slab, class, block, offset)
            }
            _ if meta.owner != self.me && valid => {
                RemoteFreer(self.0).remote_free_block(heap.kind, slab, offset)
            }
            _ => panic!("podkv: free of {offset}, which is not an allocated block (morphing {:?} slab {slab}: {meta:?})", heap.kind),
        }
    }

    /// The owner's free of `offset` (at `rel` in the small heap) in its own sized small slab
    /// `slab` that morphs (`meta`, as the free fast path read it). A new block is freed as on
    /// the fast path: plain stores after the log, no `locate` and no old-set lookup beyond its
    /// own span. Anything else (an old block, a blocked or bad offset) goes to `free_generic`,
    /// which [`Morpher::free`] serves.
    #[inline(never)]
    pub(super) fn free_small(&self, offset: Offset, slab: u32, meta: u64, rel: u64) {
        let class = usize::from((meta >> 32) as u8);
        let old = usize::from((meta >> 48) as u8).wrapping_sub(1);
        let Some(morph) = Morph::of(&SMALL, class, old) else {
            return self.slabs().free_generic(offset);
        };
        let in_slab = rel & ((1 << SHIFT_SMALL_SLAB) - 1);
        let scaled = in_slab * SMALL_RECIP[class];
        let block = (scaled >> 32) as u32;
        let desc = self.small_desc(slab);
        let recip_old = SMALL_RECIP[old];
        if is_block_start(scaled)
            && block < morph.count_new
            && !Self::blocked(&morph, recip_old, desc, block)
        {
            let word = &desc.bits[(block / 64) as usize];
            let bits = word.load(Relaxed);
            let set = bits | 1 << (block % 64);
            if set != bits {
                self.log_free(offset.0);
                crash_point!("morph_free.logged");
                word.store(set, Relaxed);
                let heap = self.shared.slabs.get(Kind::Small);
                if self.freed_by_others(heap, slab)
                    && !Self::live_in_word(&morph, recip_old, desc, block / 64, set)
                    && self.is_empty(heap, desc, slab, class)
                {
                    self.enter_free(offset.0);
                    self.slabs().sized_to_unsized(heap, class, slab);
                    self.after_free.set(false);
                }
                return;
            }
        }
        // An old block of the old set: `free_old`, as `Morpher::free` would send it.
        let scaled = in_slab * recip_old;
        let i = (scaled >> 32) as u32;
        if is_block_start(scaled) && morph.old_in_use(desc, i) {
            let heap = *self.shared.slabs.get(Kind::Small);
            return self.free_old(&heap, slab, class, old, i, offset);
        }
        self.slabs().free_generic(offset);
    }

    /// Whether new block `j` of small morph `morph` overlaps an old block of the old set: the
    /// old blocks under its bytes by the old class's reciprocal `recip_old` (exact for every
    /// offset of a small slab, `class::tests`).
    #[inline]
    fn blocked(morph: &Morph, recip_old: u64, desc: &SlabDesc, j: u32) -> bool {
        let recip = recip_old;
        let start = u64::from(j) * u64::from(morph.size_new);
        let first = (start * recip) >> 32;
        let last = ((start + u64::from(morph.size_new) - 1) * recip) >> 32;
        morph.any_old_in_use(desc, first as u32, last as u32)
    }

    /// Whether another slot wrote the remote word of this slot's morphing slab `slab` since
    /// this slot did (the morph's rebase, an unblock): its tag names the last writer. If not,
    /// every old block in the old set is still live (only the owner forgets one, and only
    /// another slot counts a free of one), so a free of a new block cannot empty the slab. An
    /// HWcc load (uncachable in an `mcas` heap): no request to a processor.
    #[inline]
    fn freed_by_others(&self, heap: &SlabHeap, slab: u32) -> bool {
        dcas::tag(heap.remote(slab).load(Acquire)).tid != self.me as u16
    }

    /// Whether bitset word `w` (now `bits`) of a morphing slab shows a live new block: a clear
    /// bit of a block that is not blocked. A few clear bits are tried; past them the answer is
    /// "maybe not", and the caller counts the whole slab. So a free into a slab with live
    /// blocks around it costs one or two tests, and only a slab close to empty is counted. A
    /// new block another thread freed still shows as live (its bit stays clear): such a slab
    /// is reclaimed as any sized slab with remote frees is, once detached and drained.
    #[inline]
    fn live_in_word(morph: &Morph, recip_old: u64, desc: &SlabDesc, w: u32, bits: u64) -> bool {
        let mut clear = !bits;
        for _ in 0..COUNT_CLEAR_TRIED {
            if clear == 0 {
                return false;
            }
            let j = w * 64 + clear.trailing_zeros();
            if j < morph.count_new && !Self::blocked(morph, recip_old, desc, j) {
                return true;
            }
            clear &= clear - 1;
        }
        false
    }

    /// The owner frees old block `i` of its morphing slab `slab` (at `offset`): the space
    /// under it comes back at once, as NVAlloc's index table gives it back, not when the
    /// whole slab drains. Logged first ([`Op::Unblock`], the offset in `aux`), then
    /// [`Morpher::unblock`].
    fn free_old(&self, heap: &SlabHeap, slab: u32, class: usize, old: usize, i: u32, offset: Offset) {
        self.enter_free(offset.0);
        self.next_ver();
        self.log_step(Op::Unblock, heap, slab, class, |s| s.count = old as u8);
        crash_point!("unblock.logged");
        self.unblock(heap, slab, class, old, i, None);
        self.after_free.set(false);
    }

    /// `free_old` after its log: the old set forgets block `i` (`unblock.old`), the new blocks
    /// it alone blocked come free (`unblock.freed`), one detectable CAS moves the remote count
    /// by their number less one (`unblock.counted`; `counted` is what that CAS did when
    /// recovery found it took effect). A slab with no old block left is an ordinary one of
    /// its class again (`unblock.ended`: its frees take the fast path); a detached one with
    /// free blocks now is reattached, an empty one leaves its list.
    fn unblock(&self, heap: &SlabHeap, slab: u32, class: usize, old: usize, i: u32, counted: Option<RemoteFree>) {
        let Some(morph) = Morph::of(heap.classes, class, old) else {
            return;
        };
        let desc = heap.desc(slab);
        morph.forget(desc, i);
        // SWcc writer rule: a freer of a new block over the old one reads the old set.
        if podkv_hw::site!("alloc.morph.unblock.write_back") {
            let word = &desc.bits[morph.old_at() + (i / 64) as usize];
            self.coherence
                .write_back((word as *const AtomicU64).cast(), std::mem::size_of::<u64>());
        }
        crash_point!("unblock.old");
        let freed = morph.unblock(desc, i);
        crash_point!("unblock.freed");
        let counted =
            counted.unwrap_or_else(|| remote::unblock(heap.remote(slab), freed, self.0));
        crash_point!("unblock.counted");
        if counted == RemoteFree::TookSlab {
            return self.slabs().took_slab(heap, slab);
        }
        if !morph.any_old_set(desc) {
            desc.end_morph();
            // SWcc writer rule: freers read the slab's class and mark from here. The whole
            // descriptor: the old set's lines past the new class's words were written in
            // the morph, and from now on only the lines the class uses are written back
            // (`SlabDesc::in_use`).
            if podkv_hw::site!("alloc.morph.end.write_back") {
                self.coherence
                    .write_back((desc as *const SlabDesc).cast(), SIZE_DESC);
            }
            crash_point!("unblock.ended");
        }
        if freed > 0 && desc.meta().state == Some(State::Detached) {
            self.slabs().detached_to_sized(heap, class, slab);
        }
        if desc.meta().state == Some(State::Sized) && self.maybe_empty(heap, &morph, desc, slab, (class, old), i) {
            self.slabs().sized_to_unsized(heap, class, slab);
        }
    }

    /// Recovery of [`Op::Unblock`] (`recover.rs`): the old block is the one at `offset` (the
    /// slot's `aux`); `counted` is what the logged CAS did, if it took effect, else it is
    /// made again under a fresh version.
    pub(super) fn finish_unblock(&self, heap: &SlabHeap, slab: u32, class: usize, old: usize, offset: Offset, counted: Option<RemoteFree>) {
        let Some(morph) = Morph::of(heap.classes, class, old) else {
            return;
        };
        let i = (offset.0.wrapping_sub(heap.data_of(slab)) / u64::from(morph.size_old)) as u32;
        if i >= morph.count_old {
            return;
        }
        if counted.is_none() {
            self.next_ver();
            self.log_step(Op::Unblock, heap, slab, class, |s| s.count = old as u8);
        }
        self.unblock(heap, slab, class, old, i, counted);
    }

    /// [`Morpher::is_empty`] after old block `i` of small or large slab `slab` was freed,
    /// answered "no" at once when the new-class word over the block's first byte shows a live
    /// new block ([`Morpher::live_in_word`]; small slabs only).
    fn maybe_empty(&self, heap: &SlabHeap, morph: &Morph, desc: &SlabDesc, slab: u32, (class, old): (usize, usize), i: u32) -> bool {
        if heap.kind == Kind::Small {
            let j = (u64::from(i) * u64::from(morph.size_old) / u64::from(morph.size_new)) as u32;
            let w = (j / 64) as usize;
            if w < desc.bits.len()
                && Self::live_in_word(morph, SMALL_RECIP[old], desc, j / 64, desc.bits[w].load(Relaxed))
            {
                return false;
            }
        }
        self.is_empty(heap, desc, slab, class)
    }

    /// Whether the owner's sized slab `slab` of `class` holds no live block, asked after a
    /// local free set a bit. A morphing slab's blocked blocks never come free in its bitset,
    /// so its remote word tells: `count == free bits` means no live block, old or new, and no
    /// remote free pending; nobody else can then change it.
    pub(super) fn is_empty(&self, heap: &SlabHeap, desc: &SlabDesc, slab: u32, class: usize) -> bool {
        let capacity = heap.classes.count[class];
        if desc.meta().old == 0 {
            return desc.is_empty_of(capacity);
        }
        // An HWcc (uncachable in an `mcas` heap) load: no request to a processor.
        remote::count(heap.remote(slab).load(Acquire)) == desc.count_free(capacity)
    }
}
