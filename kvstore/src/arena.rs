//! Where nodes live: the pod heap ([`PodArena`]) or, with the `baselines` feature,
//! process-local memory from mimalloc (`local_arena::LocalArena`, evaluation only). The index, epochs and item code are written once over
//! [`Arena`], so the two differ only in allocator and mapping.
//!
//! An arena hands out 8-byte-aligned blocks named by `u64` *offsets* from [`Arena::base`]; zero
//! is never a block, so zero means "none" in links. For the pod heap the base is the mapping's
//! start (offsets are the same in every process); for the local arena the base is null and an
//! offset is simply an address.

use crate::item::View;
use crate::StoreError;
use podkv_alloc::{AllocError, Heap, HwccUser, InFlight, Offset, ThreadHandle};
use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use std::alloc::Layout;

/// Memory for the index: blocks, per-thread slots and one root word.
pub trait Arena: Clone + Send + Sync + 'static {
    /// One thread's allocation handle; it names the thread's slot.
    type Thread;
    /// Claims a slot and an allocation handle for the calling thread.
    fn thread(&self) -> Result<Self::Thread, StoreError>;
    /// The slot `thread` holds, in `0..self.slots()`.
    fn slot_index(thread: &Self::Thread) -> u32;
    /// How many slots exist.
    fn slots(&self) -> u32;
    /// The slots' owner words, if the arena has them: a slot whose word is zero holds no
    /// thread, live or dead, and an advancer of the epoch skips its announcement
    /// (`reclaim::reclaimer::try_advance`). `None`: every slot may hold one.
    fn slot_owners(&self) -> Option<&[AtomicU64]> {
        None
    }
    /// The address offsets are relative to.
    fn base(&self) -> *mut u8;
    /// Allocates `size` bytes aligned to 8.
    fn allocate(thread: &Self::Thread, size: usize) -> Result<u64, AllocError>;
    /// Allocates `size` bytes aligned to `align` (a power of two, at most 64).
    fn allocate_aligned(
        thread: &Self::Thread,
        size: usize,
        _align: usize,
    ) -> Result<u64, AllocError> {
        Self::allocate(thread, size)
    }
    /// Frees a block from [`Arena::allocate`] of any thread.
    fn free(thread: &Self::Thread, at: u64);
    /// The root word that holds the store descriptor's offset (zero: no store yet).
    fn root(&self) -> &AtomicU64;
    /// How the arena's memory is kept coherent across hosts (process memory: `Hardware`).
    fn coherence(&self) -> Coherence {
        Coherence::Hardware
    }
    /// A zeroed block of `size` bytes (8-aligned, 64 in the pod heap) for the store's
    /// multi-writer words (`layout::HwccWords` and the announcements): in the pod heap, HWcc
    /// memory; an ordinary block by default.
    fn hwcc_block(&self, thread: &Self::Thread, size: usize) -> Result<u64, StoreError> {
        alloc_zeroed::<Self>(thread, View::new(self.base()), size)
    }
    /// Whether `len` bytes at `at` lie in HWcc memory as [`Arena::hwcc_block`] hands it out
    /// (`check` holds the store's shared words to it). Process memory: anywhere.
    fn is_hwcc(&self, _at: u64, _len: u64) -> bool {
        true
    }
    /// Gives back a block from [`Arena::hwcc_block`] that was never published (its creator
    /// lost the root CAS).
    fn hwcc_unused(&self, thread: &Self::Thread, at: u64) {
        Self::free(thread, at);
    }
    /// The heap's mCAS hook for the store's multi-writer words, in an `mcas` heap only
    /// (`None` elsewhere: there those words are HWcc memory and change by CPU atomics).
    /// `Shared` takes it once at open.
    fn mcas_hook(&self) -> Option<HwccUser> {
        None
    }
    /// The hook CAS of a word in the HWcc area, for `thread` ([`HwccUser::cas`]); only
    /// called with the hook [`Arena::mcas_hook`] gave.
    fn hook_cas(
        _hook: &HwccUser,
        _thread: &Self::Thread,
        _word: &AtomicU64,
        _current: u64,
        _new: u64,
    ) -> Result<u64, u64> {
        unreachable!("an arena without an mCAS hook is never asked for a hook CAS")
    }
    /// The hook store of a word in the HWcc area ([`HwccUser::store`]); as
    /// [`Arena::hook_cas`].
    fn hook_store(_hook: &HwccUser, _thread: &Self::Thread, _word: &AtomicU64, _value: u64) {
        unreachable!("an arena without an mCAS hook is never asked for a hook store")
    }
    /// Largest block this arena serves today.
    fn block_max(&self) -> usize;
    /// Where a block of `size` bytes comes from: its region and its size class (eviction
    /// frees room where a failed allocation needs it). One class by default.
    fn block_class(&self, _size: usize) -> BlockClass {
        BlockClass {
            region: 0,
            block: 0,
        }
    }
    /// The slabs worth draining at `percent` of their blocks live at most
    /// ([`podkv_alloc::SparseSlabs`], read by `compact`); `None` where the arena names none.
    fn sparse_slabs(&self, _percent: u32) -> Option<podkv_alloc::SparseSlabs> {
        None
    }
    /// Gives up `thread`'s sparse slabs at most `percent` in use whose blocks fit in the
    /// slabs it keeps, then its sparsest until they hold `over` bytes
    /// (`podkv_alloc::ThreadHandle::disown_sparse`), so that moving (or, for the latter,
    /// removing) their blocks empties them. None by default.
    fn disown_sparse(_thread: &Self::Thread, _percent: u32, _over: u64) -> podkv_alloc::Disowned {
        podkv_alloc::Disowned::default()
    }
    /// Bytes of slab memory the arena holds (`podkv_alloc::Heap::held_bytes`); `None` where
    /// it has no slabs of its own to count.
    fn held_bytes(&self) -> Option<u64> {
        None
    }
    /// Counts `thread`'s batched remote frees on their slab now (a slab they empty goes
    /// back). Nothing by default.
    fn flush_remote_frees(_thread: &Self::Thread) {}
    /// The map's name in reports (`KvMap::name`).
    const NAME: &'static str;
    /// Recovers every slot whose owner died (finishing its allocator step) and calls
    /// `settle(slot, in_flight, step)` for each — the block its allocation or free concerned
    /// and the step word recovery read — while the slot is still held, so nobody claims it
    /// before it is settled. Nothing dies in process memory.
    fn recover_dead_with(&self, _settle: &mut dyn FnMut(u32, InFlight, u64)) {}
    /// What recovery reported when `thread` adopted its slot from a dead owner while claiming
    /// it (taken once; `None` when the slot was free or nothing dies).
    fn adoption(_thread: &Self::Thread) -> Option<(InFlight, u64)> {
        None
    }
    /// The thread's allocator step word now (what recovery would read): the store snapshots
    /// it before an allocation it logs, so an `Alloc` report naming an *earlier* allocation
    /// is told apart (the word did not change). Zero where nothing is logged.
    fn step(_thread: &Self::Thread) -> u64 {
        0
    }
}

/// The region and size class a block comes from: blocks of one class share slabs, so freeing
/// one makes room for another; a block of another class in the same region makes room only
/// once its whole slab is free; a block of another region never does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockClass {
    /// The region (pod heap: 0 small, 1 large, 2 huge).
    pub region: u8,
    /// The class's block size (0 where the arena has no classes).
    pub block: u32,
}

/// The pod heap, shared by processes.
#[derive(Clone, Debug)]
pub struct PodArena {
    /// The heap.
    pub heap: Heap,
    /// Which of the heap's roots holds the descriptor (0 by default; roots 0..4 are the store's).
    pub root_index: usize,
}

impl Arena for PodArena {
    type Thread = ThreadHandle;
    const NAME: &'static str = "podkv";

    fn thread(&self) -> Result<ThreadHandle, StoreError> {
        Ok(self.heap.thread()?)
    }

    #[inline]
    fn slot_index(thread: &ThreadHandle) -> u32 {
        thread.slot_index()
    }

    fn slots(&self) -> u32 {
        self.heap.geometry().slots() as u32
    }

    fn slot_owners(&self) -> Option<&[AtomicU64]> {
        Some(self.heap.slot_owner_words())
    }

    #[inline]
    fn base(&self) -> *mut u8 {
        self.heap.resolve(Offset(0))
    }

    #[inline]
    fn allocate(thread: &ThreadHandle, size: usize) -> Result<u64, AllocError> {
        let layout = Layout::from_size_align(size, 8)
            .map_err(|_| AllocError::Unsupported { size, align: 8 })?;
        thread.allocate(layout).map(|o| o.0)
    }

    #[inline]
    fn allocate_aligned(
        thread: &ThreadHandle,
        size: usize,
        align: usize,
    ) -> Result<u64, AllocError> {
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| AllocError::Unsupported { size, align })?;
        thread.allocate(layout).map(|o| o.0)
    }

    #[inline]
    fn free(thread: &ThreadHandle, at: u64) {
        thread.free(Offset(at));
    }

    fn root(&self) -> &AtomicU64 {
        self.heap.root(self.root_index)
    }

    fn coherence(&self) -> Coherence {
        self.heap.geometry().coherence
    }

    /// Carved from the heap's user HWcc area by one hook CAS on its cursor (the area's first
    /// word; blocks start at its second line), backed first. Never reused: see
    /// [`Arena::hwcc_unused`].
    fn hwcc_block(&self, thread: &ThreadHandle, size: usize) -> Result<u64, StoreError> {
        let area = self.heap.hwcc_user();
        let no_room = || StoreError::NoHwccRoom {
            need: size as u64,
            area: area.len(),
        };
        area.back(64).map_err(|_| no_room())?;
        let cursor = area.word(0);
        loop {
            let seen = area.load(cursor);
            let at = seen.max(64);
            let end = at + (size as u64).next_multiple_of(64);
            if end > area.len() {
                return Err(no_room());
            }
            area.back(end)?;
            podkv_hw::cas_site!("store.hwcc.carve.cas");
            if area.cas(thread, cursor, seen, end).is_ok() {
                return Ok(area.range().start + at);
            }
        }
    }

    fn mcas_hook(&self) -> Option<HwccUser> {
        (self.heap.geometry().coherence == Coherence::Mcas).then(|| self.heap.hwcc_user())
    }

    #[inline]
    fn hook_cas(
        hook: &HwccUser,
        thread: &ThreadHandle,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        hook.cas(thread, word, current, new)
    }

    #[inline]
    fn hook_store(hook: &HwccUser, thread: &ThreadHandle, word: &AtomicU64, value: u64) {
        hook.store(thread, word, value);
    }

    fn is_hwcc(&self, at: u64, len: u64) -> bool {
        let area = self.heap.hwcc_user();
        let range = area.range();
        range.start + 64 <= at && at + len <= range.start + area.backed()
    }

    /// Nothing: a block carved from the HWcc area stays carved (the cursor only grows, so
    /// no later carve gets bytes the loser wrote). A lost root race happens only while
    /// processes open a fresh heap at once; each loser leaves one block.
    fn hwcc_unused(&self, _: &ThreadHandle, _: u64) {}

    fn block_max(&self) -> usize {
        // Blocks past the large heap's come from the huge heap, up to its size.
        (self.heap.geometry().huge_bytes().min(u64::from(u32::MAX)) as usize).max(512 * 1024)
    }

    fn block_class(&self, size: usize) -> BlockClass {
        use podkv_alloc::class::{Kind, SIZE_LARGE_MAX, SIZE_SMALL_MAX};
        let (region, kind) = match size {
            s if s <= SIZE_SMALL_MAX => (0, Kind::Small),
            s if s <= SIZE_LARGE_MAX => (1, Kind::Large),
            _ => {
                return BlockClass {
                    region: 2,
                    block: 0,
                }
            }
        };
        let classes = self.heap.slab_heap(kind).classes;
        let block = classes.class_for(size, 8).map_or(0, |c| classes.size[c]);
        BlockClass { region, block }
    }

    fn sparse_slabs(&self, percent: u32) -> Option<podkv_alloc::SparseSlabs> {
        Some(self.heap.sparse_slabs(percent))
    }

    fn disown_sparse(thread: &ThreadHandle, percent: u32, over: u64) -> podkv_alloc::Disowned {
        thread.disown_sparse(percent, over)
    }

    fn held_bytes(&self) -> Option<u64> {
        Some(self.heap.held_bytes())
    }

    fn flush_remote_frees(thread: &ThreadHandle) {
        thread.flush_remote_frees();
    }

    fn recover_dead_with(&self, settle: &mut dyn FnMut(u32, InFlight, u64)) {
        self.heap
            .recover_dead_with(|_, r| settle(r.slot, r.in_flight, r.step.0));
    }

    fn adoption(thread: &ThreadHandle) -> Option<(InFlight, u64)> {
        thread.take_adoption().map(|r| (r.in_flight, r.step.0))
    }

    #[inline]
    fn step(thread: &ThreadHandle) -> u64 {
        let slot = thread.slot();
        slot.recovery.load(Ordering::Relaxed)
    }
}

/// Allocates an item or bucket block of `size` bytes: under SWcc on whole lines (64-aligned,
/// in a class of 64-byte multiples), so no line is shared with another block whose owner
/// writes it back (whole-line write-backs would clobber each other).
#[inline]
pub(crate) fn allocate_object<A: Arena>(
    thread: &A::Thread,
    view: View,
    size: usize,
) -> Result<u64, AllocError> {
    if view.is_swcc() {
        A::allocate_aligned(thread, size, 64)
    } else {
        A::allocate(thread, size)
    }
}

/// Allocates a zeroed block of `size` bytes from `thread` (store metadata: descriptor, slot
/// records, limbo bags), on whole lines under SWcc as items are ([`allocate_object`]): a slot
/// writes its record's and bags' lines back one by one.
pub(crate) fn alloc_zeroed<A: Arena>(
    thread: &A::Thread,
    view: View,
    size: usize,
) -> Result<u64, StoreError> {
    let at = allocate_object::<A>(thread, view, size).map_err(|_| StoreError::OutOfMemory)?;
    // SAFETY: a fresh block of `size` bytes this thread owns and has not published.
    unsafe { std::ptr::write_bytes(view.ptr(at), 0, size) };
    if view.is_swcc() && podkv_hw::site!("store.zeroed.write_back") {
        view.write_back_new(at, size);
    }
    Ok(at)
}
