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
//! instructions). Every state change of a slab happens in the cold paths, named after the
//! transition it makes (`slab.rs`).

use crate::class::{
    SHIFT_SMALL_SLAB, SIZE_LARGE_MAX, SIZE_SMALL_MAX, SMALL_BY_WORDS, SMALL_COUNT, SMALL_RECIP,
    SMALL_SIZE,
};
use crate::error::{AllocError, HeapError};
use crate::heap::{Heap, Kind, SlabHeap};
use crate::offset::Offset;
use crate::remote::{self, Disown, RemoteFree};
use crate::slab::{Meta, SlabDesc, State, SIZE_DESC};
use crate::slot::{LocalLists, Slot};
use podkv_hw::sync::{AtomicU64, Ordering::Relaxed};
use std::alloc::Layout;
use std::marker::PhantomData;

/// One thread's claim on a heap: its thread slot. Not `Send`: a slot belongs to one thread.
/// Dropping it gives every slab back (empty ones to the global list with their pages released,
/// partly used ones disowned) and releases the slot.
pub struct ThreadHandle {
    heap: Heap,
    base: *mut u8,
    slot: *const Slot,
    slot_index: u32,
    /// Slot index plus one: the owner value of this slot's slabs.
    me: u32,
    small_desc_at: u64,
    small_data_at: u64,
    small_data_len: u64,
    small_remote_at: u64,
    /// `meta` of a sized slab this slot owns, class bits masked out.
    meta_sized: u64,
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

impl ThreadHandle {
    pub(crate) fn claim(heap: Heap) -> Result<ThreadHandle, HeapError> {
        let count = heap.geometry().slots();
        let (pid, start) = (heap.shared.pid, heap.shared.start_time);
        let first = thread_hash() % count;
        for i in (first..count).chain(0..first) {
            if heap.slot(i).try_claim(pid, start) {
                let small = *heap.slab_heap(Kind::Small);
                return Ok(ThreadHandle {
                    base: heap.resolve(Offset(0)),
                    slot: heap.slot(i),
                    slot_index: i as u32,
                    me: i as u32 + 1,
                    small_desc_at: small.desc_at,
                    small_data_at: small.data_at,
                    small_data_len: small.max << small.shift,
                    small_remote_at: small.remote_at,
                    meta_sized: Meta::pack(i as u32 + 1, 0, State::Sized),
                    heap,
                    _not_send: PhantomData,
                });
            }
        }
        Err(HeapError::NoSlot { count })
    }

    /// The heap this handle allocates from.
    pub fn heap(&self) -> &Heap {
        &self.heap
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

    #[inline]
    fn slot(&self) -> &Slot {
        // SAFETY: the slot lies in the backed slots region, mapped while `self.heap` lives.
        unsafe { &*self.slot }
    }

    #[inline]
    fn lists(&self, kind: Kind) -> &LocalLists {
        &self.slot().lists[kind as usize]
    }

    #[inline]
    fn small_desc(&self, slab: u32) -> &SlabDesc {
        let at = self.small_desc_at + u64::from(slab) * SIZE_DESC as u64;
        // SAFETY: `slab` is on one of this slot's lists or owned by it, so it is below `len`
        // and its descriptor is backed; descriptors are plain atomics.
        unsafe { &*(self.base.add(at as usize) as *const SlabDesc) }
    }

    /// Allocates a block for `layout` and returns its offset.
    ///
    /// The fast path takes the first free bit of the head slab of the class's sized list, from
    /// its cursor on: loads and stores on this slot's own metadata only — no atomic
    /// read-modify-write and no flush.
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<Offset, AllocError> {
        if layout.size() <= SIZE_SMALL_MAX && layout.align() <= 8 {
            let class = SMALL_BY_WORDS[layout.size().div_ceil(8)];
            let head = self.lists(Kind::Small).sized[usize::from(class)].load(Relaxed) as u32;
            if head != 0 {
                let desc = self.small_desc(head - 1);
                let i = desc.cursor() as usize;
                if let Some(word) = desc.bits.get(i) {
                    let bits = word.load(Relaxed);
                    let block = i as u64 * 64 + u64::from(bits.trailing_zeros());
                    // A block past the capacity is a phantom bit: only phantoms are left here.
                    if bits != 0 && block < u64::from(SMALL_COUNT[usize::from(class)]) {
                        word.store(bits & (bits - 1), Relaxed);
                        let slab = u64::from(head - 1) << SHIFT_SMALL_SLAB;
                        let at = slab + block * SMALL_SIZE[usize::from(class)];
                        return Ok(Offset(self.small_data_at + at));
                    }
                }
                return self.allocate_small_scan(layout, head - 1, class);
            }
        }
        self.allocate_generic(layout)
    }

    /// The cursor word of the head slab is used up: scan on from it, else the slow path.
    #[inline(never)]
    fn allocate_small_scan(
        &self,
        layout: Layout,
        slab: u32,
        class: u8,
    ) -> Result<Offset, AllocError> {
        let capacity = SMALL_COUNT[usize::from(class)];
        if let Some(block) = self.small_desc(slab).take_scanning(capacity) {
            let at = (u64::from(slab) << SHIFT_SMALL_SLAB)
                + u64::from(block) * SMALL_SIZE[usize::from(class)];
            return Ok(Offset(self.small_data_at + at));
        }
        self.allocate_generic(layout)
    }

    /// Frees the block at `offset`, which must have come from this heap's `allocate` and not
    /// been freed since. Panics on an offset that is not an allocated block it can recognise
    /// (outside the heap, inside a block, or a double free within the owning slot).
    ///
    /// The fast path sets the block's bit in a sized slab this slot owns: plain loads and
    /// stores again. A word that fills up may mean an empty slab: that check is cold.
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
                let block = (in_slab * SMALL_RECIP[class]) >> 32;
                let i = (block / 64) as usize % desc.bits.len();
                let word = &desc.bits[i];
                let bits = word.load(Relaxed);
                let bit = 1u64 << (block % 64);
                if bits & bit == 0 && block * SMALL_SIZE[class] == in_slab {
                    word.store(bits | bit, Relaxed);
                    // All ones: every block of this word is free (phantom bits included).
                    if bits | bit == u64::MAX {
                        self.free_maybe_empty(Kind::Small, class, slab);
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

    /// The remote path for a small block: validate, then one atomic decrement.
    #[inline(never)]
    fn free_remote_small(&self, offset: Offset, slab: u32, meta: u64, rel: u64) {
        let meta = Meta::unpack(meta);
        let class = usize::from(meta.class);
        let in_slab = rel & ((1 << SHIFT_SMALL_SLAB) - 1);
        let live = matches!(
            meta.state,
            Some(State::Sized | State::Detached | State::Disowned)
        );
        let block = (in_slab * SMALL_RECIP[class]) >> 32;
        let exact = block * SMALL_SIZE[class] == in_slab && block < u64::from(SMALL_COUNT[class]);
        if !live || !exact {
            return self.free_generic(offset);
        }
        // SAFETY: `slab` lies below the heap's maximum, so its remote word is inside the HWcc
        // region; it is backed because the slab has a live block (it was grown into).
        let word = unsafe {
            &*(self
                .base
                .add((self.small_remote_at + 8 * u64::from(slab)) as usize)
                as *const AtomicU64)
        };
        if remote::free_remote(word) == RemoteFree::TookSlab {
            let heap = *self.heap.slab_heap(Kind::Small);
            self.heap
                .desc(&heap, slab)
                .set_meta(self.me, 0, State::Unsized);
            self.keep_or_release(&heap, slab);
        }
    }

    /// A word of the slab filled up: if every block is free, the slab is empty.
    #[cold]
    #[inline(never)]
    fn free_maybe_empty(&self, kind: Kind, class: usize, slab: u32) {
        let heap = *self.heap.slab_heap(kind);
        if self
            .heap
            .desc(&heap, slab)
            .is_empty_of(heap.classes.count[class])
        {
            self.sized_to_unsized(&heap, class, slab);
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
        let small = *self.heap.slab_heap(Kind::Small);
        let large = *self.heap.slab_heap(Kind::Large);
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
                if let Some(block) = self.heap.desc(&heap, slab).take_scanning(capacity) {
                    let at = u64::from(block) * u64::from(heap.classes.size[class]);
                    return Ok(Offset(heap.data_of(slab) + at));
                }
                self.sized_to_detached(&heap, class, slab);
                continue;
            }
            let slab = self.take_unsized(&heap)?;
            self.unsized_to_sized(&heap, slab, class);
        }
    }

    #[cold]
    #[inline(never)]
    fn free_generic(&self, offset: Offset) {
        if self.heap.huge_view().is_some_and(|h| h.contains(offset.0)) {
            return self.free_huge(offset);
        }
        let (heap, slab, in_slab) = self.locate(offset);
        let desc = self.heap.desc(&heap, slab);
        let meta = desc.meta();
        let class = meta.class as usize;
        let block = heap.classes.block_index(class, in_slab);
        let valid_block = class < heap.classes.len
            && block < heap.classes.count[class]
            && u64::from(block) * u64::from(heap.classes.size[class]) == in_slab;
        match meta.state {
            Some(State::Sized | State::Detached) if meta.owner == self.me && valid_block => {
                self.free_local(&heap, desc, slab, class, block, meta.state == Some(State::Detached))
            }
            Some(State::Sized | State::Detached | State::Disowned) if meta.owner != self.me && valid_block => {
                self.free_remote(&heap, slab)
            }
            _ => panic!("podkv: free of {offset}, which is not an allocated block ({:?} slab {slab}: {meta:?})", heap.kind),
        }
    }

    fn locate(&self, offset: Offset) -> (SlabHeap, u32, u64) {
        for kind in Kind::ALL {
            let heap = *self.heap.slab_heap(kind);
            if let Some((slab, in_slab)) = heap.slab_of(offset.0) {
                if slab < self.heap.len(&heap) {
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
        detached: bool,
    ) {
        let word = &desc.bits[(block / 64) as usize];
        let bits = word.load(Relaxed);
        let bit = 1u64 << (block % 64);
        assert!(
            bits & bit == 0,
            "podkv: double free of block {block} in {} slab {slab}",
            heap.kind.name()
        );
        word.store(bits | bit, Relaxed);
        if detached {
            self.detached_to_sized(heap, class, slab);
        }
        if desc.is_empty_of(heap.classes.count[class]) {
            self.sized_to_unsized(heap, class, slab);
        }
    }

    /// The remote path: one atomic decrement of the slab's HWcc counter; whoever frees the last
    /// block of a detached or disowned slab takes it.
    fn free_remote(&self, heap: &SlabHeap, slab: u32) {
        if remote::free_remote(self.heap.remote(heap, slab)) == RemoteFree::TookSlab {
            self.heap
                .desc(heap, slab)
                .set_meta(self.me, 0, State::Unsized);
            self.keep_or_release(heap, slab);
        }
    }

    /// `unsized_to_sized`: gives an empty slab a class, every block free.
    fn unsized_to_sized(&self, heap: &SlabHeap, slab: u32, class: usize) {
        let desc = self.heap.desc(heap, slab);
        let capacity = heap.classes.count[class];
        desc.fill_bits(capacity);
        remote::reset(self.heap.remote(heap, slab), capacity);
        desc.set_meta(self.me, class as u8, State::Sized);
        self.sized_push_front(heap, class, slab);
    }

    /// `sized_to_detached`: the owner found no free block. The slab leaves the sized list; the
    /// last free of its blocks, local or remote, decides its future. If remote frees already
    /// took every block back, nobody else can reach the slab and the owner keeps it, empty.
    fn sized_to_detached(&self, heap: &SlabHeap, class: usize, slab: u32) {
        self.sized_unlink(heap, class, slab);
        let desc = self.heap.desc(heap, slab);
        desc.set_meta(self.me, class as u8, State::Detached);
        self.write_back(desc);
        if remote::detach(self.heap.remote(heap, slab)) == 0 {
            desc.set_meta(self.me, 0, State::Unsized);
            self.keep_or_release(heap, slab);
        }
    }

    /// `detached_to_sized`: the owner freed a block of its full slab locally.
    fn detached_to_sized(&self, heap: &SlabHeap, class: usize, slab: u32) {
        remote::reattach(self.heap.remote(heap, slab));
        self.heap
            .desc(heap, slab)
            .set_meta(self.me, class as u8, State::Sized);
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
        self.sized_unlink(heap, class, slab);
        self.heap
            .desc(heap, slab)
            .set_meta(self.me, 0, State::Unsized);
        self.keep_or_release(heap, slab);
    }

    /// Keeps an empty slab on this slot's unsized list, or gives it to the global list (its
    /// pages released) when the slot already keeps enough.
    fn keep_or_release(&self, heap: &SlabHeap, slab: u32) {
        let lists = self.lists(heap.kind);
        let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
        if count >= heap.count_keep_unsized {
            self.write_back(self.heap.desc(heap, slab));
            self.heap.push_free(heap, slab);
            return;
        }
        self.heap.desc(heap, slab).set_links(head, 0);
        lists
            .unsized_list
            .store(pack_ends(slab + 1, count + 1), Relaxed);
    }

    /// An empty slab for this slot: its own unsized list, else the global free list, else a
    /// new slab from growing the heap (extra grown slabs join the unsized list).
    fn take_unsized(&self, heap: &SlabHeap) -> Result<u32, AllocError> {
        let lists = self.lists(heap.kind);
        let (head, count) = unpack_ends(lists.unsized_list.load(Relaxed));
        if head != 0 {
            let next = self.heap.desc(heap, head - 1).next();
            lists
                .unsized_list
                .store(pack_ends(next, count - 1), Relaxed);
            return Ok(head - 1);
        }
        if let Some(slab) = self.heap.pop_free(heap)? {
            self.heap
                .desc(heap, slab)
                .set_meta(self.me, 0, State::Unsized);
            return Ok(slab);
        }
        let grown = self.heap.grow(heap, heap.batch_grow)?;
        for extra in grown.start + 1..grown.end {
            self.heap
                .desc(heap, extra)
                .set_meta(self.me, 0, State::Unsized);
            self.keep_or_release(heap, extra);
        }
        self.heap
            .desc(heap, grown.start)
            .set_meta(self.me, 0, State::Unsized);
        Ok(grown.start)
    }

    fn write_back(&self, desc: &SlabDesc) {
        let coherence = self.heap.geometry().coherence;
        coherence.write_back(
            (desc as *const SlabDesc).cast(),
            std::mem::size_of::<SlabDesc>(),
        );
    }

    fn sized_push_front(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let list = &self.lists(heap.kind).sized[class];
        let (head, tail) = unpack_ends(list.load(Relaxed));
        self.heap.desc(heap, slab).set_links(head, 0);
        if head != 0 {
            let old = self.heap.desc(heap, head - 1);
            old.set_links(old.next(), slab + 1);
        }
        list.store(
            pack_ends(slab + 1, if tail == 0 { slab + 1 } else { tail }),
            Relaxed,
        );
    }

    fn sized_push_back(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let list = &self.lists(heap.kind).sized[class];
        let (head, tail) = unpack_ends(list.load(Relaxed));
        self.heap.desc(heap, slab).set_links(0, tail);
        if tail != 0 {
            let old = self.heap.desc(heap, tail - 1);
            old.set_links(slab + 1, old.prev());
        }
        list.store(
            pack_ends(if head == 0 { slab + 1 } else { head }, slab + 1),
            Relaxed,
        );
    }

    fn sized_unlink(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let list = &self.lists(heap.kind).sized[class];
        let desc = self.heap.desc(heap, slab);
        let (next, prev) = (desc.next(), desc.prev());
        let (mut head, mut tail) = unpack_ends(list.load(Relaxed));
        if prev == 0 {
            head = next;
        } else {
            let p = self.heap.desc(heap, prev - 1);
            p.set_links(next, p.prev());
        }
        if next == 0 {
            tail = prev;
        } else {
            let n = self.heap.desc(heap, next - 1);
            n.set_links(n.next(), prev);
        }
        desc.set_links(0, 0);
        list.store(pack_ends(head, tail), Relaxed);
    }

    /// Gives every slab of this slot back: empty ones to the global list, partly used ones
    /// disowned (`sized_to_disowned`). Detached slabs stay the slot's: a later claimer of the
    /// slot frees into them locally, anyone else's last free takes them.
    fn give_back(&self) {
        for kind in Kind::ALL {
            let heap = *self.heap.slab_heap(kind);
            for class in 0..heap.classes.len {
                loop {
                    let (head, _) = unpack_ends(self.lists(kind).sized[class].load(Relaxed));
                    if head == 0 {
                        break;
                    }
                    self.sized_unlink(&heap, class, head - 1);
                    self.sized_to_disowned(&heap, class, head - 1);
                }
            }
            loop {
                let (head, count) = unpack_ends(self.lists(kind).unsized_list.load(Relaxed));
                if head == 0 {
                    break;
                }
                let next = self.heap.desc(&heap, head - 1).next();
                self.lists(kind)
                    .unsized_list
                    .store(pack_ends(next, count - 1), Relaxed);
                self.heap.push_free(&heap, head - 1);
            }
        }
    }

    /// `sized_to_disowned`: the slab's free bits count as freed and nobody owns it; the last
    /// remote free takes it. With no live block left it goes straight to the global list.
    fn sized_to_disowned(&self, heap: &SlabHeap, class: usize, slab: u32) {
        let desc = self.heap.desc(heap, slab);
        let free = desc.count_free(heap.classes.count[class]);
        desc.set_meta(0, class as u8, State::Disowned);
        self.write_back(desc);
        if remote::disown(self.heap.remote(heap, slab), free) == Disown::Empty {
            self.heap.push_free(heap, slab);
        }
    }
}

impl Drop for ThreadHandle {
    fn drop(&mut self) {
        self.give_back();
        self.collect_huge();
        self.slot().release();
    }
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
