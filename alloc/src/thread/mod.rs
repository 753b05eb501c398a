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
//! whatever step a dead slot was in (its `Adopter` is this handle, seen by the adopter).

use crate::class::{
    Kind, SHIFT_SMALL_SLAB, SIZE_SMALL_MAX, SMALL_BY_WORDS, SMALL_COUNT,
    SMALL_RECIP, SMALL_SIZE,
};
use crate::crash_point;
use crate::dcas::{self, Writer};
use crate::error::AllocError;
use crate::shared::Hold;
use crate::slabs::SlabHeap;
use crate::huge::{HugeOwner, HugeStep};
use crate::offset::Offset;
use crate::recovery::{Op, Rec, SlabStep};
use crate::slab::{Meta, SlabDesc, State, COUNT_BITSET_WORDS};
use crate::class::is_block_start;
use crate::slot::{unpack_ends, LocalLists, Slot};
use podkv_hw::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::alloc::Layout;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

#[macro_use]
mod role;
mod adopt;
mod current;
mod drain;
mod hooks;
mod morph;
mod recover;
mod remote_free;
mod transition;
pub(crate) use adopt::{adopt, claim, Adoptions};
pub use adopt::RecoveryHook;
use recover::Adopter;
use remote_free::RemoteFreer;
use current::Current;
use transition::SlabOwner;
pub use crate::recovery::InFlight;
pub use recover::Recovered;

/// One thread's claim on a heap: its thread slot. Not `Send`: a slot belongs to one thread.
/// Dropping it gives every slab back (empty ones to the global list with their pages released,
/// partly used ones disowned) and releases the slot.
pub struct ThreadHandle {
    /// The heap's state in this process, which this handle keeps open.
    shared: Hold,
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
    /// The current detectable-operation version, kept where a [`Rec`] keeps it;
    /// [`ThreadHandle::ver`] reads it back.
    ver_bits: Cell<u64>,
    /// `ver_bits` with [`Op::Alloc`] and with [`Op::Free`]: a block step's [`Rec`] but for its
    /// offset, so the fast paths log with one `or` of the offset.
    tag_alloc: Cell<u64>,
    tag_free: Cell<u64>,
    /// [`SMALL_RECIP`], copied into the handle: the free fast path indexes it from the handle
    /// pointer it holds anyway, not from a table address it must first load.
    recip: [u64; 256],
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

// The free fast path's unchecked bitset index: the largest reciprocal (8 B blocks) times the
// last byte of a small slab stays inside the bitset.
const _: () = assert!(
    ((((1u64 << SHIFT_SMALL_SLAB) - 1) * SMALL_RECIP[0]) >> 32) / 64 < COUNT_BITSET_WORDS as u64
);

impl ThreadHandle {
    /// Gives up this slot's sparse slabs at most `percent` in use whose blocks fit in the
    /// slabs it keeps, then its sparsest slabs until they hold `over` bytes (`drain.rs`).
    pub fn disown_sparse(&self, percent: u32, over: u64) -> crate::Disowned {
        drain::Drainer(self).disown_sparse(percent, over)
    }

    fn new(shared: Hold, adoptions: Arc<Adoptions>, i: u64) -> ThreadHandle {
        let small = *shared.slabs.get(Kind::Small);
        let tenure = |kind| shared.slabs.get(kind).begin_tenure(i as u32 + 1, shared.geometry.coherence);
        Kind::ALL.into_iter().for_each(tenure); // a new tenure: see there
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
            tag_alloc: Cell::new(0),
            tag_free: Cell::new(0),
            recip: SMALL_RECIP,
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

    /// This handle as the owner of its slabs (`transition.rs`).
    #[inline]
    fn slabs(&self) -> SlabOwner<'_> {
        SlabOwner(self)
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

    /// `log_block(Op::Alloc, offset)` from its precomputed tag.
    #[inline]
    fn log_alloc(&self, offset: u64) {
        self.log(Rec(self.tag_alloc.get() | Rec::block(Op::Idle, 0, offset).0));
    }

    /// `log_block(Op::Free, offset)` from its precomputed tag.
    #[inline]
    fn log_free(&self, offset: u64) {
        self.log(Rec(self.tag_free.get() | Rec::block(Op::Idle, 0, offset).0));
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
            podkv_hw::cas_site!("alloc.thread.ack_window.cas");
            match self.cas_word(word, cur, new) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    fn set_ver(&self, ver: u16) {
        self.ver_bits.set(Rec::block(Op::Idle, ver, 0).0);
        self.tag_alloc.set(Rec::block(Op::Alloc, ver, 0).0);
        self.tag_free.set(Rec::block(Op::Free, ver, 0).0);
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
    /// SWcc (`limited`, `mcas`): a block shares its first and last cache lines with its slab
    /// neighbours unless `layout` is 64-byte aligned and sized, and those neighbours may be
    /// another host's. Before writing such a block, reload its edge lines
    /// ([`podkv_hw::Coherence::reload_edges`]): the write-back that hands the block on writes
    /// whole lines, and a stale copy of a neighbour's bytes in them would clobber it.
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
                let at = current.at + u64::from(free.trailing_zeros()) * current.size;
                // The caller writes the block next: its line is asked for now, so that store
                // does not miss and hold up the store buffer (mimalloc's pop reads the block).
                podkv_hw::persist::prefetch_write(self.resolve(Offset(at)));
                self.log_alloc(at);
                crash_point!("alloc.logged");
                // The mask clears only bits above the allocatable ones (phantom bits past the
                // slab's capacity), so the lowest free bit is the word's lowest set bit.
                word.store(bits & (bits - 1), Relaxed);
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
                    size: SMALL_SIZE[class],
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
    /// SWcc (`limited`, `mcas`): the caller has written back whatever it wrote in the block
    /// (a free moves the block's ownership, and the slab may go to another host): a dirty
    /// line left in this host's cache would be evicted later over the next owner's bytes.
    ///
    /// The fast path sets the block's bit in a sized slab this slot owns: plain loads and
    /// stores again, after logging the block. A word that fills up may mean an empty slab:
    /// that check is cold.
    #[inline]
    pub fn free(&self, offset: Offset) {
        let rel = offset.0.wrapping_sub(self.small_data_at);
        if rel < self.small_data_len {
            let slab = (rel >> SHIFT_SMALL_SLAB) as usize;
            // SAFETY: `rel` is inside the small heap's data, so `slab` is below its `max`.
            // Every such descriptor is mapped and inside the file (opening backs the huge
            // records, which lie past all slab data); a slab past `len` reads as zeros, meta
            // 0, which no fast path takes. A descriptor is plain atomics, valid for any bytes.
            let desc = unsafe { &*self.small_descs.add(slab) };
            let meta = desc.meta.load(Relaxed);
            // `meta` differs from `meta_sized` in the class byte only, or it is not this
            // slot's sized slab: rotated, the class byte is the low byte and every other
            // difference lies above it, so one compare tests owner, state and morph byte.
            let diff = (meta ^ self.meta_sized).rotate_right(32);
            if diff <= 0xFF {
                let class = diff as u8 as usize;
                let in_slab = rel & ((1 << SHIFT_SMALL_SLAB) - 1);
                let scaled = in_slab * self.recip[class];
                let block = scaled >> 32;
                // SAFETY: `in_slab < 2^16` and every reciprocal is at most `2^32 / 8`, so
                // `block < 2^13` and `block / 64 < 128`, the bitset's length (a class byte
                // past the last class has reciprocal 0: block 0).
                let word = unsafe { desc.bits.get_unchecked((block / 64) as usize) };
                let bits = word.load(Relaxed);
                let set = bits | 1 << (block % 64);
                if set != bits && is_block_start(scaled) {
                    self.log_free(offset.0);
                    crash_point!("free.logged");
                    let bits = set;
                    word.store(bits, Relaxed);
                    // All ones: every block of this word is free (phantom bits included).
                    if bits == u64::MAX {
                        let i = (block / 64) as usize;
                        self.free_maybe_empty(Kind::Small, class, slab as u32, offset, i);
                    }
                    return;
                }
            }
            if meta as u32 != self.me && meta != 0 {
                return self.free_remote_small(offset, slab as u32, meta, rel);
            }
            // This slot's sized slab, morphing: besides the class byte only the morph byte
            // differs (rotated, bits 16..24).
            if diff & !0x00FF_00FF == 0 && diff > 0xFF {
                return morph::Morpher(self).free_small(offset, slab as u32, meta, rel);
            }
        }
        self.free_generic(offset);
    }

    #[inline(never)]
    fn free_remote_small(&self, offset: Offset, slab: u32, meta: u64, rel: u64) {
        RemoteFreer(self).free_remote_small(offset, slab, meta, rel);
    }

    /// Counts this slot's pending remote frees on their slab's remote word (one detectable
    /// CAS), and takes the slab if they were its last live blocks. A thread that has freed
    /// other threads' blocks and will free no more for a while may call this so their slab
    /// can be reused at once; dropping the handle does it too.
    pub fn flush_remote_frees(&self) {
        RemoteFreer(self).flush_remote_frees();
    }

    /// Bitset word `filled` of the slab filled up: if every block is free, the slab is empty.
    #[cold]
    #[inline(never)]
    fn free_maybe_empty(&self, kind: Kind, class: usize, slab: u32, offset: Offset, filled: usize) {
        self.slabs().free_maybe_empty(kind, class, slab, offset, filled);
    }

    #[cold]
    #[inline(never)]
    fn allocate_generic(&self, layout: Layout) -> Result<Offset, AllocError> {
        self.slabs().allocate_generic(layout)
    }

    #[cold]
    #[inline(never)]
    fn free_generic(&self, offset: Offset) {
        self.slabs().free_generic(offset);
    }

    /// Gives everything back and releases the slot, logging `Idle` last (with the version, so
    /// the next owner continues from it).
    fn release(&self) {
        self.slabs().give_back();
        self.log(Rec::slab(Op::Idle, self.ver(), SlabStep::default()));
        self.shared.slots.unhold(self.slot_index);
        self.shared.slots.release(self.slot_index, self.shared.me);
    }
}
