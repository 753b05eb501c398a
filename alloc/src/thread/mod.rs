//! A thread's handle on the heap: allocation and free.
//!
//! # Paths
//! - [`ThreadHandle::allocate`]: pop a block from the head slab of the class's sized list;
//!   everything else goes to `allocate_generic`.
//! - [`ThreadHandle::free`]: set the block's bit in a slab this slot owns; everything else goes
//!   to `free_generic`, which takes the remote path (one atomic decrement of the slab's HWcc
//!   counter) for slabs owned by others.
//!
//! Both fast paths are plain loads and stores of memory only this slot writes: no atomic
//! read-modify-write, no flush, no system call (as in mimalloc's `alloc.c`, about a dozen
//! instructions), plus one plain store of the step into the slot's recovery word. Every state
//! change of a slab happens in the cold paths, named after the transition it makes
//! (`slab.rs`).
//!
//! # Log, then do (constitution rule 5)
//! Every step first stores its [`Rec`] in the recovery word; a step with a CAS on a shared word
//! takes a fresh version first and the CAS is detectable ([`crate::dcas`]). The writes of each
//! transition are ordered so that a slot's lists, read forward from their heads, are valid at
//! every instant, and `crash_point!`s mark every window between them. `recover.rs` finishes
//! whatever step a dead slot was in (its [`Adopter`] is this handle, seen by the adopter).

use crate::class::{
    Kind, SHIFT_SMALL_SLAB, SIZE_LARGE_MAX, SIZE_SMALL_MAX, SMALL_BY_WORDS, SMALL_COUNT,
    SMALL_RECIP, SMALL_SIZE,
};
use crate::crash_point;
use crate::dcas::{self, Tag, Writer};
use crate::error::{AllocError, HeapError};
use crate::global::List;
use crate::shared::Shared;
use crate::slabs::SlabHeap;
use crate::huge::{HugeOwner, HugeStep, HugeThread};
use crate::offset::Offset;
use crate::pending::{Pending, COUNT_MAX};
use crate::process::SlotLife;
use crate::recovery::{Op, Rec, SlabStep};
use crate::remote::{self, Disown, RemoteFree};
use crate::slab::{Meta, SlabDesc, State, SIZE_DESC_HEAD};
use crate::slot::{LocalLists, Slot};
use podkv_hw::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::alloc::Layout;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

mod adopt;
mod recover;
pub(crate) use adopt::Adoptions;
pub use adopt::RecoveryHook;
use recover::Adopter;
pub use crate::recovery::InFlight;
pub use recover::Recovered;

/// One thread's claim on a heap: its thread slot. Not `Send`: a slot belongs to one thread.
/// Dropping it gives every slab back (empty ones to the global list with their pages released,
/// partly used ones disowned) and releases the slot.
pub struct ThreadHandle {
    /// The heap's state in this process, which this handle keeps open.
    shared: Arc<Shared>,
    /// This process's recovery hook and adoption reports.
    adoptions: Arc<Adoptions>,
    base: *mut u8,
    slot: *const Slot,
    slot_index: u32,
    /// Slot index plus one: the owner value of this slot's slabs.
    me: u32,
    /// This process's address of the small heap's first descriptor.
    small_descs: *const SlabDesc,
    small_data_at: u64,
    small_data_len: u64,
    /// `meta` of a sized slab this slot owns, class bits masked out.
    meta_sized: u64,
    /// Where steps are logged: the slot's recovery word, or `sink` when not recoverable.
    rec: *const AtomicU64,
    /// The log of a handle that is not recoverable, and the word an empty [`Current`] reads.
    sink: Box<AtomicU64>,
    recoverable: bool,
    /// The current detectable-operation version, kept where a [`Rec`] keeps it (so the fast
    /// paths log with one `or`); [`ThreadHandle::ver`] reads it back.
    ver_bits: Cell<u64>,
    /// Per small class, the bitset word the fast path allocates from (see [`Current`]).
    current: [Cell<Current>; 256],
    /// The heap's coherence mode (SWcc rules apply unless `Hardware`).
    coherence: podkv_hw::Coherence,
    /// Whether the slow path under way continues a free (whose offset is in the slot's `aux`).
    after_free: Cell<bool>,
    _not_send: PhantomData<*mut ()>,
}

impl std::fmt::Debug for ThreadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadHandle")
            .field("slot", &self.slot_index)
            .finish()
    }
}

const MASK_OWNER_STATE: u64 = !(0xFF << 32);

/// Where the next small allocation of one class comes from: one bitset word of a slab on the
/// class's sized list, cached in the handle (process memory, not the heap) so the fast path
/// neither walks from the list head nor checks for phantom bits. The word stays valid while
/// the slab is on this slot's sized list for the class: `sized_unlink` forgets it. An empty
/// entry has `mask` 0 (its `word` is any readable word), so it never yields a block.
#[derive(Clone, Copy, Debug)]
struct Current {
    word: *const AtomicU64,
    /// The word's allocatable bits: all but the phantom bits past the slab's capacity.
    mask: u64,
    /// Offset of the word's block 0.
    at: u64,
}

impl Current {
    /// An entry that yields nothing; `readable` is any word that outlives it.
    fn none(readable: &AtomicU64) -> Current {
        Current {
            word: readable,
            mask: 0,
            at: 0,
        }
    }
}

impl ThreadHandle {
    /// Claims a free slot, or adopts a dead one (recovering it first).
    pub(crate) fn claim(
        shared: Arc<Shared>,
        adoptions: Arc<Adoptions>,
    ) -> Result<ThreadHandle, HeapError> {
        let count = shared.geometry.slots();
        let me = shared.me;
        let first = thread_hash() % count;
        for i in (first..count).chain(0..first) {
            match shared.slots.life(i) {
                SlotLife::Free if shared.slots.try_claim(i, 0, me) => {
                    return Ok(ThreadHandle::new(shared, adoptions, i));
                }
                SlotLife::Dead(word) if shared.slots.try_claim(i, word, me) => {
                    let handle = ThreadHandle::new(shared, adoptions, i);
                    handle.recover();
                    return Ok(handle);
                }
                _ => {}
            }
        }
        Err(HeapError::NoSlot { count })
    }

    /// Adopts slot `i` if its owner is dead (owner word `word`): `None` if another thread
    /// changed the slot first.
    pub(crate) fn adopt(
        shared: &Arc<Shared>,
        adoptions: &Arc<Adoptions>,
        i: u64,
        word: u64,
    ) -> Option<ThreadHandle> {
        shared
            .slots
            .try_claim(i, word, shared.me)
            .then(|| ThreadHandle::new(shared.clone(), adoptions.clone(), i))
    }

    fn new(shared: Arc<Shared>, adoptions: Arc<Adoptions>, i: u64) -> ThreadHandle {
        let small = *shared.slabs.get(Kind::Small);
        let slot = shared.slots.slot(i) as *const Slot;
        let recoverable = shared.recoverable;
        // SAFETY: the slot is mapped while `shared` lives.
        let last = Rec(unsafe { &*slot }.recovery.load(Acquire));
        let sink = Box::new(AtomicU64::new(0));
        let empty = Current::none(&sink);
        shared.hold(i as u32);
        let handle = ThreadHandle {
            base: shared.resolve(Offset(0)),
            slot,
            slot_index: i as u32,
            me: i as u32 + 1,
            small_descs: shared.resolve(Offset(small.desc_at)).cast(),
            small_data_at: small.data_at,
            small_data_len: small.max << small.shift,
            meta_sized: Meta::pack(i as u32 + 1, 0, State::Sized),
            rec: if recoverable {
                // SAFETY: as above.
                unsafe { &(*slot).recovery }
            } else {
                &*sink
            },
            sink,
            recoverable,
            ver_bits: Cell::new(0),
            current: std::array::from_fn(|_| Cell::new(empty)),
            after_free: Cell::new(false),
            coherence: shared.geometry.coherence,
            shared,
            adoptions,
            _not_send: PhantomData,
        };
        // Versions continue from the slot's last one, so words a previous owner of this
        // slot tagged are never taken for this owner's; the acknowledgement window follows
        // (keeping what it records for the last owner's version, which recovery may need).
        handle.set_ver(last.ver().wrapping_add(1));
        handle.open_ack_window();
        handle
    }

    /// Recovers this slot, just adopted while claiming it: the registered recovery hook sees
    /// the report, and the claiming handle keeps it ([`ThreadHandle::take_adoption`]).
    pub(crate) fn recover(&self) -> Recovered {
        let hook = self.adoptions.hook();
        let recovered = self.recover_with(&mut |handle, recovered| {
            if let Some(hook) = &hook {
                hook(handle, recovered);
            }
        });
        self.adoptions.keep(&self.shared.slots, recovered);
        recovered
    }

    /// Finishes the step a dead owner of this (just adopted) slot was in, then hands the
    /// report to `settle` while this handle still holds the slot (`recover.rs`).
    pub(crate) fn recover_with(
        &self,
        settle: &mut dyn FnMut(&ThreadHandle, &Recovered),
    ) -> Recovered {
        Adopter(self).recover_with(settle)
    }

    /// What recovery reported when this handle adopted its slot from a dead owner while
    /// claiming it (taken once; `None` for a slot that was free).
    pub fn take_adoption(&self) -> Option<Recovered> {
        self.adoptions.take(&self.shared.slots, self.slot_index)
    }

    /// This slot as the owner of its huge state (`None`: the heap has no huge heap).
    fn huge(&self) -> Option<HugeOwner<'_>> {
        let shared = &self.shared;
        let huge = shared.huge.as_ref()?;
        Some(huge.owner(&shared.slots, self.slot_index))
    }

    /// Allocates a huge block (`huge/owner.rs`).
    #[cold]
    fn allocate_huge(&self, layout: Layout) -> Result<Offset, AllocError> {
        match self.huge() {
            Some(huge) => huge.allocate(layout, self),
            None => Err(AllocError::Unsupported {
                size: layout.size(),
                align: layout.align(),
            }),
        }
    }

    /// Frees a huge block, from any thread of any process (`huge/owner.rs`).
    #[cold]
    fn free_huge(&self, offset: Offset) {
        let Some(huge) = self.huge() else {
            panic!("podkv: free of {offset}, which lies in no slab of the heap");
        };
        huge.free(offset, self);
    }

    /// This slot's housekeeping, as every huge allocation and free does it: unmap what this
    /// process mapped and was freed since, reclaim this slot's freed allocations that no
    /// process maps any more, give back runs left empty, then sweep a few released slots
    /// (`huge/owner.rs`). Returns allocations reclaimed.
    pub fn collect_huge(&self) -> usize {
        let shared = &self.shared;
        let Some(huge) = &shared.huge else {
            return 0;
        };
        huge.view.unmap_freed();
        let mine = huge.owner(&shared.slots, self.slot_index).collect();
        mine + huge.collect(&shared.slots, &|slot| shared.hold(slot))
    }

    /// Finishes or undoes the huge step this slot's log word names, as after a crash of the
    /// slot's previous owner (`huge/owner.rs`): returns the step and the block it leaves in
    /// flight.
    pub(crate) fn recover_huge_in_flight(&self) -> Option<(HugeStep, InFlight)> {
        self.huge()?.recover()
    }

    /// As `recover_huge_in_flight`, the step only.
    pub fn recover_huge(&self) -> Option<HugeStep> {
        self.recover_huge_in_flight().map(|(step, _)| step)
    }

    /// The offset of an address in this process's mapping of the heap, if it lies in it.
    pub fn offset_of(&self, ptr: *const u8) -> Option<Offset> {
        self.shared.offset_of(ptr)
    }

    /// The thread slot this handle holds.
    pub fn slot_index(&self) -> u32 {
        self.slot_index
    }

    /// This process's address of `offset`.
    #[inline]
    pub fn resolve(&self, offset: Offset) -> *mut u8 {
        self.base.wrapping_add(offset.0 as usize)
    }

    /// The thread slot this handle holds.
    #[inline]
    pub fn slot(&self) -> &Slot {
        // SAFETY: the slot lies in the backed slots region, mapped while `self.shared` lives.
        unsafe { &*self.slot }
    }

    /// Logs a step (a plain store; constitution rule 5).
    #[inline]
    fn log(&self, rec: Rec) {
        // SAFETY: `rec` points at the slot's recovery word or at `sink`, both live as `self`.
        unsafe { &*self.rec }.store(rec.0, Relaxed);
    }

    #[inline]
    fn log_block(&self, op: Op, offset: u64) {
        let rec = Rec::block(op, 0, offset);
        self.log(Rec(rec.0 | self.ver_bits.get()));
    }

    fn log_step(
        &self,
        op: Op,
        heap: &SlabHeap,
        slab: u32,
        class: usize,
        f: impl Fn(&mut SlabStep),
    ) {
        let mut step = SlabStep {
            slab,
            class: class as u8,
            large: heap.kind == Kind::Large,
            after_free: self.after_free.get(),
            ..SlabStep::default()
        };
        f(&mut step);
        self.log(Rec::slab(op, self.ver(), step));
    }

    /// Starts a step with a detectable CAS: a fresh version.
    #[inline]
    fn next_ver(&self) {
        let ver = self.ver().wrapping_add(1);
        self.set_ver(ver);
        if ver % dcas::WINDOW == 0 {
            self.open_ack_window();
        }
    }

    /// Moves this slot's acknowledgement window to the current version ([`dcas::ack_base`]):
    /// at a claim and every `dcas::WINDOW` versions, one CAS through the heap's hook.
    #[cold]
    fn open_ack_window(&self) {
        if !self.recoverable {
            return;
        }
        let word = self.shared.slots.ack(u64::from(self.slot_index));
        let base = dcas::ack_base(self.ver());
        let mut cur = word.load(Acquire);
        loop {
            let new = dcas::rebased(cur, base);
            if new == cur {
                return;
            }
            match self.cas_word(word, cur, new) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    fn set_ver(&self, ver: u16) {
        self.ver_bits.set(Rec::block(Op::Idle, ver, 0).0);
    }

    /// The current detectable-operation version.
    #[inline]
    fn ver(&self) -> u16 {
        Rec(self.ver_bits.get()).ver()
    }

    /// Marks the slow path of a free of `offset` under way (its steps say `after_free`).
    fn enter_free(&self, offset: u64) {
        self.slot().aux.store(offset, Relaxed);
        self.after_free.set(true);
    }

    #[inline]
    fn lists(&self, kind: Kind) -> &LocalLists {
        &self.slot().lists[kind as usize]
    }

    #[inline]
    fn small_desc(&self, slab: u32) -> &SlabDesc {
        // SAFETY: `slab` is on one of this slot's lists or owned by it, so it is below `len`
        // and its descriptor is backed; descriptors are plain atomics.
        unsafe { &*self.small_descs.add(slab as usize) }
    }

    /// Allocates a block for `layout` and returns its offset.
    ///
    /// The fast path takes the lowest free bit of the class's [`Current`] word: loads and
    /// stores on this slot's own metadata only — no atomic read-modify-write and no flush —
    /// after logging the block in the recovery word.
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<Offset, AllocError> {
        if layout.size() <= SIZE_SMALL_MAX && layout.align() <= 8 {
            let class = SMALL_BY_WORDS[layout.size().div_ceil(8)];
            let current = self.current[usize::from(class)].get();
            // SAFETY: `word` is a bitset word of a slab on this slot's sized list (backed
            // while the heap lives) or, with `mask` 0, the handle's own sink word.
            let word = unsafe { &*current.word };
            let bits = word.load(Relaxed);
            let free = bits & current.mask;
            if free != 0 {
                let at =
                    current.at + u64::from(free.trailing_zeros()) * SMALL_SIZE[usize::from(class)];
                self.log_block(Op::Alloc, at);
                crash_point!("alloc.logged");
                word.store(bits ^ (free & free.wrapping_neg()), Relaxed);
                return Ok(Offset(at));
            }
            return self.allocate_small_refill(layout, class);
        }
        self.allocate_generic(layout)
    }

    /// The class's current word is used up: make the next word with a free block in the
    /// sized list's head slab current (from the slab's cursor on, wrapping around) and take
    /// from it, else the slow path.
    #[inline(never)]
    fn allocate_small_refill(&self, layout: Layout, class: u8) -> Result<Offset, AllocError> {
        let class = usize::from(class);
        let (head, _) = unpack_ends(self.lists(Kind::Small).sized[class].load(Relaxed));
        if head != 0 {
            let slab = head - 1;
            let desc = self.small_desc(slab);
            if let Some((i, mask)) = desc.seek_word(SMALL_COUNT[class]) {
                self.current[class].set(Current {
                    word: &desc.bits[i],
                    mask,
                    at: self.small_data_at
                        + (u64::from(slab) << SHIFT_SMALL_SLAB)
                        + i as u64 * 64 * SMALL_SIZE[class],
                });
                return self.allocate(layout);
            }
        }
        self.allocate_generic(layout)
    }

    /// Frees the block at `offset`, which must have come from this heap's `allocate` and not
    /// been freed since. Panics on an offset that is not an allocated block it can recognise
    /// (outside the heap, inside a block, or a double free within the owning slot).
    ///
    /// The fast path sets the block's bit in a sized slab this slot owns: plain loads and
    /// stores again, after logging the block. A word that fills up may mean an empty slab:
    /// that check is cold.
    #[inline]
    pub fn free(&self, offset: Offset) {
        let rel = offset.0.wrapping_sub(self.small_data_at);
        if rel < self.small_data_len {
            let slab = (rel >> SHIFT_SMALL_SLAB) as u32;
            let desc = self.small_desc(slab);
            let meta = desc.meta.load(Relaxed);
            if meta & MASK_OWNER_STATE == self.meta_sized {
                let class = usize::from((meta >> 32) as u8);
                let in_slab = rel & ((1 << SHIFT_SMALL_SLAB) - 1);
                let scaled = in_slab * SMALL_RECIP[class];
                let block = scaled >> 32;
                let i = (block / 64) as usize % desc.bits.len();
                let word = &desc.bits[i];
                let bits = word.load(Relaxed);
                let bit = 1u64 << (block % 64);
                if bits & bit == 0 && is_block_start(scaled) {
                    self.log_block(Op::Free, offset.0);
                    crash_point!("free.logged");
                    word.store(bits | bit, Relaxed);
                    // All ones: every block of this word is free (phantom bits included).
                    if bits | bit == u64::MAX {
                        self.free_maybe_empty(Kind::Small, class, slab, offset, i);
                    }
                    return;
                }
            }
            if meta as u32 != self.me && meta != 0 {
                return self.free_remote_small(offset, slab, meta, rel);
            }
        }
        self.free_generic(offset);
    }

    /// The remote path for a small block: validate, then one detectable decrement.
    #[inline(never)]
    fn free_remote_small(&self, offset: Offset, slab: u32, meta: u64, rel: u64) {
        // SWcc reader rule: another thread's descriptor is read fresh, not from this cache —
        // unless this slot's pending batch already counts blocks of the slab: it was read
        // fresh when the batch began, and while the batch holds live blocks of the slab
        // nobody can re-size it, so its class (all this free reads) is still right.
        let meta = if self.coherence.is_swcc() && !self.batches(Kind::Small, slab) {
            let desc = self.small_desc(slab);
            self.coherence
                .invalidate((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
            desc.meta.load(Relaxed)
        } else {
            meta
        };
        let meta = Meta::unpack(meta);
        let class = usize::from(meta.class);
        let in_slab = rel & ((1 << SHIFT_SMALL_SLAB) - 1);
        let live = matches!(
            meta.state,
            Some(State::Sized | State::Detached | State::Disowned)
        );
        let scaled = in_slab * SMALL_RECIP[class];
        let exact = is_block_start(scaled) && scaled >> 32 < u64::from(SMALL_COUNT[class]);
        if !live || !exact {
            return self.free_generic(offset);
        }
        self.remote_free_block(Kind::Small, slab, offset);
    }

    /// Whether this slot's pending batch counts blocks of `kind` slab `slab`.
    #[inline]
    fn batches(&self, kind: Kind, slab: u32) -> bool {
        Pending::unpack(self.slot().pending.load(Relaxed))
            .is_some_and(|p| p.slab == slab && p.kind == kind)
    }

    /// Logs and does one remote free of `offset`, a block of `kind` slab `slab`: a plain store
    /// counting it in the slot's pending batch ([`crate::pending`]), flushed first if the batch
    /// names another slab or is full.
    #[inline]
    fn remote_free_block(&self, kind: Kind, slab: u32, offset: Offset) {
        let pending = &self.slot().pending;
        let count = match Pending::unpack(pending.load(Relaxed)) {
            Some(p) if p.slab == slab && p.kind == kind && p.count < COUNT_MAX => p.count + 1,
            Some(_) => {
                self.flush_remote_frees();
                1
            }
            None => 1,
        };
        self.next_ver();
        self.log_block(Op::RemoteFree, offset.0);
        crash_point!("remote_free.logged");
        let batch = Pending {
            slab,
            kind,
            count,
            ver: self.ver(),
        };
        pending.store(batch.pack(), Relaxed);
    }

    /// Counts this slot's pending remote frees on their slab's remote word (one detectable
    /// CAS), and takes the slab if they were its last live blocks. A thread that has freed
    /// other threads' blocks and will free no more for a while may call this so their slab
    /// can be reused at once; dropping the handle does it too.
    pub fn flush_remote_frees(&self) {
        let pending = &self.slot().pending;
        let Some(batch) = Pending::unpack(pending.load(Relaxed)) else {
            return;
        };
        let heap = *self.shared.slabs.get(batch.kind);
        self.next_ver();
        self.log_step(Op::Flush, &heap, batch.slab, 0, |_| {});
        crash_point!("flush.logged");
        let word = heap.remote(batch.slab);
        let took = remote::free_remote_n(word, batch.count, self);
        crash_point!("flush.counted");
        pending.store(0, Relaxed);
        crash_point!("flush.cleared");
        if took == RemoteFree::TookSlab {
            self.took_slab(&heap, batch.slab);
        }
    }

    /// `slab` is empty and in hand — a remote free took it, a detach or disown found no live
    /// block, or recovery found it between lists: it becomes this slot's unsized slab (or goes
    /// global past the unsized bound; `give_back` drains the unsized list after disowning).
    pub(crate) fn took_slab(&self, heap: &SlabHeap, slab: u32) {
        self.log_step(Op::TookSlab, heap, slab, 0, |_| {});
        crash_point!("took_slab.logged");
        heap.desc(slab)
            .set_meta(self.me, 0, State::Unsized);
        crash_point!("took_slab.meta");
        self.keep_or_release(heap, slab);
    }

    /// Bitset word `filled` of the slab filled up: if every block is free, the slab is empty.
    #[cold]
    #[inline(never)]
    fn free_maybe_empty(&self, kind: Kind, class: usize, slab: u32, offset: Offset, filled: usize) {
        let heap = *self.shared.slabs.get(kind);
        if heap.desc(slab)
            .is_empty_near(heap.classes.count[class], filled)
        {
            self.enter_free(offset.0);
            self.sized_to_unsized(&heap, class, slab);
            self.after_free.set(false);
        }
    }

    #[cold]
    #[inline(never)]
    fn allocate_generic(&self, layout: Layout) -> Result<Offset, AllocError> {
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
            let (slab, from_list) = self.take_unsized(&heap)?;
            self.unsized_to_sized(&heap, slab, class, from_list);
        }
    }

    /// Whether the full head slab `slab` stays attached (sized, at the back of its list) while
    /// a fresh slab goes in front of it, instead of being detached: when it is the class's only
    /// sized slab and no other thread has freed into it (its remote count is still every block,
    /// so no remote freer can be waiting for it to be taken). A thread that fills a slab and
    /// frees its blocks again itself then sends no CAS at all: no detach, and its local frees
    /// take the fast path instead of reattaching. At most one full slab per class stays
    /// attached: a slab goes in front of it only when it is the list's only one, and when it
    /// is the head again with another slab behind it, it is detached as usual.
    fn keeps_full(&self, heap: &SlabHeap, class: usize, slab: u32) -> bool {
        if heap.desc(slab).next() != 0 {
            return false;
        }
        // An HWcc (uncachable in an `mcas` heap) load: no request to a processor.
        let word = heap.remote(slab).load(Acquire);
        dcas::payload(word) == heap.classes.count[class]
    }

    #[cold]
    #[inline(never)]
    fn free_generic(&self, offset: Offset) {
        if self.shared.huge_view().is_some_and(|h| h.contains(offset.0)) {
            return self.free_huge(offset);
        }
        let (heap, slab, in_slab) = self.locate(offset);
        let desc = heap.desc(slab);
        // SWcc reader rule, as on the small remote path: the slab may be another thread's.
        self.coherence
            .invalidate((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
        let meta = desc.meta();
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
                self.remote_free_block(heap.kind, slab, offset)
            }
            _ => panic!("podkv: free of {offset}, which is not an allocated block ({:?} slab {slab}: {meta:?})", heap.kind),
        }
    }

    fn locate(&self, offset: Offset) -> (SlabHeap, u32, u64) {
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

    fn free_local(
        &self,
        heap: &SlabHeap,
        desc: &SlabDesc,
        slab: u32,
        class: usize,
        block: u32,
        offset: Offset,
    ) {
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
        if desc.meta().state == Some(State::Detached) {
            self.detached_to_sized(heap, class, slab);
        }
        if desc.is_empty_of(heap.classes.count[class]) {
            self.sized_to_unsized(heap, class, slab);
        }
        self.after_free.set(false);
    }

    /// `unsized_to_sized`: gives an empty slab a class, every block free, and puts it at the
    /// head of the class's sized list. `from_list`: the slab is still the unsized list's head
    /// (popped here, after logging); else it is in hand.
    fn unsized_to_sized(&self, heap: &SlabHeap, slab: u32, class: usize, from_list: bool) {
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
        desc.fill_bits(capacity);
        remote::reset(heap.remote(slab), capacity, self);
        crash_point!("to_sized.reset");
        desc.set_meta(self.me, class as u8, State::Sized);
        // SWcc writer rule: remote freers of this slab's blocks read its class from here.
        self.coherence
            .write_back((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
        crash_point!("to_sized.meta");
        self.sized_push_front(heap, class, slab);
    }

    /// `sized_to_detached`: the owner found no free block. The slab leaves the sized list; the
    /// last free of its blocks, local or remote, decides its future. If remote frees already
    /// took every block back, nobody else can reach the slab and the owner keeps it, empty.
    fn sized_to_detached(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.next_ver();
        self.log_step(Op::ToDetached, heap, slab, class, |_| {});
        crash_point!("to_detached.logged");
        self.sized_unlink(heap, class, slab);
        let desc = heap.desc(slab);
        desc.set_meta(self.me, class as u8, State::Detached);
        self.write_back(desc);
        crash_point!("to_detached.meta");
        if remote::detach(heap.remote(slab), self) == 0 {
            crash_point!("to_detached.kept");
            self.took_slab(heap, slab);
        }
    }

    /// `detached_to_sized`: the owner freed a block of its full slab locally.
    fn detached_to_sized(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.next_ver();
        self.log_step(Op::Reattach, heap, slab, class, |_| {});
        crash_point!("reattach.logged");
        remote::reattach(heap.remote(slab), self);
        crash_point!("reattach.cas");
        heap.desc(slab)
            .set_meta(self.me, class as u8, State::Sized);
        crash_point!("reattach.meta");
        self.sized_push_back(heap, class, slab);
    }

    /// `sized_to_unsized`: the owner freed the last live block. A slab that is its class's only
    /// one stays sized, so a thread allocating and freeing one block does not re-size a slab
    /// every time.
    fn sized_to_unsized(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let (head, tail) = unpack_ends(self.lists(heap.kind).sized[class].load(Relaxed));
        if head == slab + 1 && tail == slab + 1 {
            return;
        }
        self.log_step(Op::ToUnsized, heap, slab, class, |_| {});
        crash_point!("to_unsized.logged");
        self.sized_unlink(heap, class, slab);
        heap.desc(slab)
            .set_meta(self.me, 0, State::Unsized);
        crash_point!("to_unsized.meta");
        self.keep_or_release(heap, slab);
    }

    /// Keeps an empty slab in hand on this slot's unsized list, or gives it to the global list
    /// (its pages released) when the slot already keeps enough.
    fn keep_or_release(&self, heap: &SlabHeap, slab: u32) {
        let lists = self.lists(heap.kind);
        let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
        if count >= heap.count_keep_unsized {
            self.write_back(heap.desc(slab));
            self.push_global(heap, slab, false);
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
    /// `from_list`) on the warm global list, else the cold one.
    fn push_global(&self, heap: &SlabHeap, slab: u32, from_list: bool) {
        for list in List::ORDER {
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
            if self.shared.lists.push(heap, slab, list, self) {
                crash_point!("push_global.pushed");
                return;
            }
        }
    }

    /// An empty slab for this slot and whether it is still the unsized list's head: the
    /// unsized list's head, else one popped off the global free list (warm, then cold), else a
    /// new slab from growing the heap (extra grown slabs join the unsized list).
    fn take_unsized(&self, heap: &SlabHeap) -> Result<(u32, bool), AllocError> {
        let lists = self.lists(heap.kind);
        let (head, _) = unpack_ends(lists.unsized_list.load(Relaxed));
        if head != 0 {
            return Ok((head - 1, true));
        }
        let lists = &self.shared.lists;
        for list in List::ORDER {
            self.next_ver();
            let log = |slab: u32| {
                self.log_step(Op::PopGlobal, heap, slab, 0, |s| s.warm = list.is_warm());
                crash_point!("pop_global.logged");
            };
            if let Some(slab) = lists.pop(heap, list, self, log) {
                crash_point!("pop_global.popped");
                heap.desc(slab)
                    .set_meta(self.me, 0, State::Unsized);
                if list == List::Cold && lists.back_popped(heap, slab).is_err() {
                    self.push_global(heap, slab, false);
                    return Err(AllocError::OutOfMemory);
                }
                return Ok((slab, false));
            }
        }
        self.next_ver();
        let grown = self.shared.slabs.grow(heap, heap.batch_grow, self, |from, count| {
            self.log_step(Op::Grow, heap, from, 0, |s| s.count = count as u8);
            crash_point!("grow.logged");
        })?;
        crash_point!("grow.grown");
        self.place_grown(heap, grown.clone());
        Ok((grown.start, false))
    }

    /// Puts the extra slabs of a growth (all but the first, which the caller keeps in hand) on
    /// the unsized list with one store, so they are on it or not at all.
    fn place_grown(&self, heap: &SlabHeap, grown: std::ops::Range<u32>) {
        for slab in grown.clone() {
            heap.desc(slab)
                .set_meta(self.me, 0, State::Unsized);
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

    fn write_back(&self, desc: &SlabDesc) {
        let coherence = self.shared.geometry.coherence;
        coherence.write_back(
            (desc as *const SlabDesc).cast(),
            std::mem::size_of::<SlabDesc>(),
        );
    }

    /// Puts `slab` at the head of a sized list. Forward from the head, the list holds the slab
    /// only after the last store.
    fn sized_push_front(&self, heap: &SlabHeap, class: usize, slab: u32) {
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
    fn sized_push_back(&self, heap: &SlabHeap, class: usize, slab: u32) {
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
    fn forget_current(&self, class: usize) {
        self.current[class].set(Current::none(&self.sink));
    }

    /// Takes `slab` out of a sized list. The first store (the list word for the head, else the
    /// predecessor's `next`) removes it from the forward list; the rest only fix back links.
    fn sized_unlink(&self, heap: &SlabHeap, class: usize, slab: u32) {
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
    fn give_back(&self) {
        self.flush_remote_frees();
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
                self.write_back(heap.desc(head - 1));
                self.push_global(&heap, head - 1, true);
            }
        }
    }

    /// `sized_to_disowned`: the slab's free bits count as freed and nobody owns it; the last
    /// remote free takes it. With no live block left it goes straight to the global list.
    fn sized_to_disowned(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.next_ver();
        self.log_step(Op::Disown, heap, slab, class, |_| {});
        crash_point!("disown.logged");
        self.sized_unlink(heap, class, slab);
        let desc = heap.desc(slab);
        let free = desc.count_free(heap.classes.count[class]);
        desc.set_meta(0, class as u8, State::Disowned);
        self.write_back(desc);
        crash_point!("disown.meta");
        if remote::disown(heap.remote(slab), free, self) == Disown::Empty {
            crash_point!("disown.empty");
            self.took_slab(heap, slab);
        }
    }

    /// Gives everything back and releases the slot, logging `Idle` last (with the version, so
    /// the next owner continues from it).
    fn release(&self) {
        self.give_back();
        self.log(Rec::slab(Op::Idle, self.ver(), SlabStep::default()));
        self.shared.slots.unhold(self.slot_index);
        self.shared.slots.release(self.slot_index, self.shared.me);
    }
}

impl Writer for ThreadHandle {
    #[inline]
    fn tag(&self) -> Tag {
        Tag {
            tid: self.me as u16,
            ver: self.ver(),
        }
    }

    /// Records `previous.ver` in slot `previous.tid - 1`'s acknowledgement word (the help
    /// array of detectable CAS, [`dcas`]) unless it holds that or a later version: through the
    /// heap's hook, so by mCAS in an `mcas` heap. Lock-free: a CAS fails only when another
    /// acknowledger or the owner's window move changed the word.
    fn acknowledge(&self, previous: Tag) {
        if !self.recoverable || u64::from(previous.tid) > self.shared.geometry.slots() {
            return;
        }
        let word = self.shared.slots.ack(u64::from(previous.tid) - 1);
        let mut cur = word.load(Acquire);
        while let Some(new) = dcas::acknowledged(cur, previous.ver) {
            match self.cas_word(word, cur, new) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// The heap's one hook ([`Heap::cas_word`]): CPU CAS, or memory-side CAS in an `mcas` heap.
    #[inline]
    fn cas_word(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        self.shared.cas_word(self.slot_index, word, current, new)
    }

    /// The heap's one hook ([`Heap::store_word`]).
    #[inline]
    fn store_word(&self, word: &AtomicU64, value: u64) {
        self.shared.store_word(self.slot_index, word, value);
    }
}

impl HugeThread for ThreadHandle {
    fn log_huge_start(&self) {
        self.log(Rec::slab(Op::Idle, self.ver(), SlabStep::default()));
    }

    fn log_huge_block(&self, op: Op, offset: u64) {
        self.log_block(op, offset);
    }

    fn collect_huge(&self) -> usize {
        ThreadHandle::collect_huge(self)
    }
}

impl Drop for ThreadHandle {
    fn drop(&mut self) {
        self.collect_huge();
        self.release();
    }
}

/// Whether a small block's offset in its slab, times its class's reciprocal (`scaled`), was
/// a block's first byte. With `recip = (2^32 + d) / size`, `d < size`, and an offset
/// `q * size + r` under `2^SHIFT_SMALL_SLAB` (2^16), the low 32 bits are
/// `q * d + r * (2^32 + d) / size`: under `2^SHIFT_SMALL_SLAB` when `r` is 0 (`q * d` is at
/// most the offset), at least `2^32 / SIZE_SMALL_MAX = 2^22` otherwise. One compare instead
/// of a multiply back. The bound holds while `size * (2^SHIFT_SMALL_SLAB + size) <= 2^32`
/// for the largest size (then `q * d` also never carries into the block index), which the
/// assertion checks; `tests::block_start_test_is_exact_for_every_small_class_and_offset`
/// tries every offset of every class.
#[inline]
fn is_block_start(scaled: u64) -> bool {
    const _: () = assert!(
        (SIZE_SMALL_MAX as u64) * ((1 << SHIFT_SMALL_SLAB) + SIZE_SMALL_MAX as u64) <= 1 << 32
    );
    (scaled as u32) < 1 << SHIFT_SMALL_SLAB
}

#[inline]
fn unpack_ends(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

#[inline]
fn pack_ends(low: u32, high: u32) -> u64 {
    u64::from(low) | u64::from(high) << 32
}

fn thread_hash() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::thread::current().id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::SMALL;

    #[test]
    fn block_start_test_is_exact_for_every_small_class_and_offset() {
        for (class, &recip) in SMALL_RECIP.iter().enumerate().take(SMALL.len) {
            let size = u64::from(SMALL.size[class]);
            for in_slab in 0..1u64 << SHIFT_SMALL_SLAB {
                let scaled = in_slab * recip;
                assert_eq!(
                    is_block_start(scaled),
                    in_slab % size == 0,
                    "class {class} ({size} B), offset {in_slab}"
                );
                assert_eq!(scaled >> 32, in_slab / size);
            }
        }
    }
}
