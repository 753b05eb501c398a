//! The two slab heaps (CXLALLOC §3.1): where each one's HWcc words, descriptors and slabs lie
//! ([`SlabHeap`]), and their growth (`SlabHeaps`).
//!
//! # Growth
//! A slab heap only grows: by CAS on its HWcc `len` word (detectable, [`crate::dcas`]) after
//! the new slabs' remote words, descriptors and data are backed, so no process ever touches
//! unbacked memory and exhaustion is an error value (constitution rule 8). The process's
//! backer (`backer.rs`) backs slabs ahead of `len` and notes how far in a header word per
//! slab heap; a grow below that word makes no system call.

use crate::backer::Backer;
use crate::class::{Classes, Kind, LARGE, SHIFT_LARGE_SLAB, SHIFT_SMALL_SLAB, SMALL};
use crate::dcas::{self, Writer};
use crate::error::{AllocError, HeapError};
use crate::file::{HeapFile, Words};
use crate::layout::{Geometry, Layout, SIZE_GLOBAL_LINE};
use crate::slab::{SlabDesc, State, SIZE_DESC};
use podkv_hw::sync::{AtomicU64, Ordering};
use std::sync::Arc;

/// Header words, one per slab heap: its slabs are backed up to this many (raised by backers,
/// [`crate::backer`]; zero in a fresh heap, which is always true).
const OFFSET_BACKED_AHEAD: u64 = 264;

/// How much of its lead past `len` the backer populates in this process's mapping, per slab
/// heap (at least one slab). The pages it maps count towards the process's PSS before any
/// block uses them, so this is far less than the backed lead: enough to stay ahead of the
/// grows, which wake the backer each time.
const BYTES_POPULATE_AHEAD: u64 = 256 << 10;

/// Where one slab heap's metadata and data lie (offsets from the heap's start), and this
/// process's view of them (read inside the crate, while the heap that made it is open; the
/// public way in is `Heap::desc`, `Heap::remote`, `Heap::len`).
#[derive(Clone, Copy, Debug)]
pub struct SlabHeap {
    /// Which heap.
    pub kind: Kind,
    /// Its classes.
    pub classes: &'static Classes,
    /// log2 of its slab size.
    pub shift: u32,
    /// Most slabs.
    pub max: u64,
    /// The HWcc `len` word (slabs in use).
    pub len_at: u64,
    /// The HWcc head of the cold global free list (slabs whose pages were released).
    pub free_at: u64,
    /// The HWcc head of the warm global free list (empty slabs whose pages are kept, bounded).
    pub warm_at: u64,
    /// Most slabs on the warm list.
    pub count_warm_max: u32,
    /// First remote-free word.
    pub remote_at: u64,
    /// First descriptor.
    pub desc_at: u64,
    /// First slab's data.
    pub data_at: u64,
    /// Slabs a thread takes per growth.
    pub batch_grow: u32,
    /// Empty slabs a slot keeps before returning them to the global list.
    pub count_keep_unsized: u32,
    /// Slabs past `len` the process's backer thread keeps backed (module `backer`).
    pub count_back_ahead: u32,
    /// Slabs at the head of the cold list the backer backs again once pops reach it.
    pub count_back_cold: u32,
    /// This process's mapping of the heap (`None`: placement only, before mapping).
    words: Option<Words>,
}

impl SlabHeap {
    /// Slab heap `kind`'s placement in a heap of `geometry`, read through `words` (`None`:
    /// placement only, for checks made before the heap is mapped).
    pub(crate) fn new(
        kind: Kind,
        geometry: &Geometry,
        layout: &Layout,
        words: Option<Words>,
    ) -> SlabHeap {
        let global = |line: u64| layout.hwcc + line * SIZE_GLOBAL_LINE;
        match kind {
            Kind::Small => SlabHeap {
                kind,
                classes: &SMALL,
                shift: SHIFT_SMALL_SLAB,
                max: geometry.small_slabs_max(),
                len_at: global(0),
                free_at: global(1),
                warm_at: global(2),
                // The same bytes as CXLALLOC's 32 KiB slabs in twice the count: 2 MiB warm,
                // 128 KiB per growth, 256 KiB of empty slabs kept per slot.
                count_warm_max: 32,
                remote_at: layout.small_remote,
                desc_at: layout.small_desc,
                data_at: layout.small_data,
                batch_grow: 2,
                count_keep_unsized: 4,
                count_back_ahead: 16,
                count_back_cold: 8,
                words,
            },
            Kind::Large => SlabHeap {
                kind,
                classes: &LARGE,
                shift: SHIFT_LARGE_SLAB,
                max: geometry.large_slabs_max(),
                len_at: global(3),
                free_at: global(4),
                warm_at: global(5),
                count_warm_max: 8,
                remote_at: layout.large_remote,
                desc_at: layout.large_desc,
                data_at: layout.large_data,
                batch_grow: 1,
                count_keep_unsized: 2,
                count_back_ahead: 8,
                count_back_cold: 4,
                words,
            },
        }
    }

    /// Bytes in one slab.
    pub const fn slab_bytes(&self) -> u64 {
        1 << self.shift
    }

    /// The offset of slab `slab`'s first byte.
    #[inline]
    pub const fn data_of(&self, slab: u32) -> u64 {
        self.data_at + ((slab as u64) << self.shift)
    }

    /// Which slab of this heap holds `offset`, with the offset inside it.
    #[inline]
    pub const fn slab_of(&self, offset: u64) -> Option<(u32, u64)> {
        let rel = offset.wrapping_sub(self.data_at);
        if rel < self.max << self.shift {
            Some(((rel >> self.shift) as u32, rel & ((1 << self.shift) - 1)))
        } else {
            None
        }
    }

    #[inline]
    fn words(&self) -> &Words {
        self.words
            .as_ref()
            .expect("podkv: a slab heap's placement read before the heap was mapped")
    }

    /// Slab `slab`'s descriptor. The slab must be below `len`.
    #[inline]
    pub(crate) fn desc(&self, slab: u32) -> &SlabDesc {
        let at = self.words().at(self.desc_at + u64::from(slab) * SIZE_DESC as u64);
        // SAFETY: descriptors of slabs below `len` are backed (the grower backs them before
        // publishing `len`) and mapped while the heap is; a descriptor is plain atomics, valid
        // for any bytes.
        unsafe { &*(at as *const SlabDesc) }
    }

    /// A thread starts holding slot `owner - 1`: reads fresh what this process may hold stale
    /// from another tenure of that slot. A no-op unless SWcc.
    ///
    /// - Every descriptor head below `len` (the line other threads read). This process may
    ///   hold heads it read while another process held the slot (a remote free into one of
    ///   that tenure's slabs), still saying "sized, owned by this slot", and the small free
    ///   fast path, and any free of a block of a slab whose head says so, trust such a head
    ///   without reading it again.
    /// - The data of every slab the slot still holds with live blocks (sized or detached):
    ///   the blocks the new tenure allocates there share lines with the last tenure's live
    ///   blocks, which another process wrote. A write-back of such a line carries the whole
    ///   line, so this process's copy of the neighbours must be the one in memory, or the
    ///   write-back reverts them (the model's clobber check showed store items and bucket
    ///   blocks reverted this way, and a double free followed).
    pub(crate) fn begin_tenure(&self, owner: u32, coherence: podkv_hw::Coherence) {
        if !coherence.is_swcc() {
            return;
        }
        for slab in 0..self.len() {
            let desc = self.desc(slab);
            if podkv_hw::site!("alloc.thread.claim.invalidate_heads") {
                coherence.invalidate((desc as *const SlabDesc).cast(), crate::slab::SIZE_DESC_HEAD);
            }
            let meta = desc.meta();
            let holds_live = matches!(meta.state, Some(State::Sized | State::Detached));
            if meta.owner == owner && holds_live && podkv_hw::site!("alloc.thread.claim.invalidate_data") {
                let data = self.data_of(slab);
                coherence.invalidate(self.words().at(data) as *const u8, self.slab_bytes() as usize);
            }
        }
    }

    /// Slab `slab`'s descriptor, read whole: the slab comes to this thread from another
    /// tenure (the global list, or a last remote free took it). This thread writes lines of
    /// the descriptor in part (a class's bitset words), and their write-back would carry this
    /// process's stale copy of the rest along (SWcc reader rule; a no-op otherwise).
    pub(crate) fn changed_hands(&self, slab: u32, coherence: podkv_hw::Coherence) -> &SlabDesc {
        let desc = self.desc(slab);
        if podkv_hw::site!("alloc.slabs.changed_hands.invalidate") {
            coherence.invalidate((desc as *const SlabDesc).cast(), SIZE_DESC);
        }
        desc
    }

    /// Slab `slab`'s remote-free word (HWcc).
    #[inline]
    pub(crate) fn remote(&self, slab: u32) -> &AtomicU64 {
        self.words().word(self.remote_at + 8 * u64::from(slab))
    }

    /// Slabs this heap has grown to (HWcc `len`, a detectable word).
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        dcas::payload(self.len_word().load(Ordering::Acquire))
    }

    /// The length word (HWcc).
    #[inline]
    pub(crate) fn len_word(&self) -> &AtomicU64 {
        self.words().word(self.len_at)
    }

    /// The HWcc word at `offset`, one of this heap's global words (`len_at`, `free_at`,
    /// `warm_at`).
    #[inline]
    pub(crate) fn word_at(&self, offset: u64) -> &AtomicU64 {
        self.words().word(offset)
    }

    /// Slabs past `len` this process's backer populates (`BYTES_POPULATE_AHEAD`, at least one,
    /// at most the backed lead).
    pub(crate) fn count_populate_ahead(&self) -> u32 {
        let slabs = (BYTES_POPULATE_AHEAD >> self.shift).max(1) as u32;
        slabs.min(self.count_back_ahead)
    }

    /// The least slab count, at least `slabs` (at most `max`), whose data ends on a 2 MiB
    /// boundary: the backer backs whole huge pages, so that it can map each as one.
    pub(crate) fn slabs_to_huge_page(self, slabs: u64) -> u64 {
        let end = self.data_of(slabs.min(self.max) as u32);
        let aligned = end.next_multiple_of(crate::backer::SIZE_HUGE_PAGE);
        let slabs = slabs + ((aligned - end) >> self.shift);
        slabs.min(self.max)
    }

    /// How many of this heap's slabs the backers have backed (header word, raised only).
    pub(crate) fn backed_ahead(&self) -> &AtomicU64 {
        self.words()
            .word(OFFSET_BACKED_AHEAD + 8 * self.kind as u64)
    }
}

/// The small and large slab heaps of an open heap, and their growth: owns the file's backing
/// of slabs (with this process's backer).
pub(crate) struct SlabHeaps {
    heaps: [SlabHeap; 2],
    file: Arc<HeapFile>,
    /// This process's backer: how far it backed each slab heap ahead of growth.
    backer: Arc<Backer>,
}

impl SlabHeaps {
    pub(crate) fn new(
        geometry: &Geometry,
        layout: &Layout,
        words: Words,
        file: Arc<HeapFile>,
        backer: Arc<Backer>,
    ) -> SlabHeaps {
        let heap = |kind| SlabHeap::new(kind, geometry, layout, Some(words));
        SlabHeaps {
            heaps: [heap(Kind::Small), heap(Kind::Large)],
            file,
            backer,
        }
    }

    /// Slab heap `kind`.
    #[inline]
    pub(crate) fn get(&self, kind: Kind) -> &SlabHeap {
        &self.heaps[kind as usize]
    }

    /// Both slab heaps, small first.
    pub(crate) fn all(&self) -> &[SlabHeap; 2] {
        &self.heaps
    }

    /// This process's backer (its tests read its counters).
    #[cfg(test)]
    pub(crate) fn backer(&self) -> &Backer {
        &self.backer
    }

    /// Most bytes the backer may have backed ahead of the heaps' lengths (remote words,
    /// descriptors and slab data) and at the heads of their cold lists, for reports and for
    /// tests of returned memory.
    pub(crate) fn slack_bytes(&self) -> u64 {
        self.heaps
            .iter()
            .map(|h| {
                u64::from(h.count_back_ahead) * (h.slab_bytes() + 8 + SIZE_DESC as u64)
                    + u64::from(h.count_back_cold) * h.slab_bytes()
            })
            .sum()
    }

    /// Backs slabs `from..to` of `heap`: their remote words, descriptors and data.
    pub(crate) fn back_slabs(&self, heap: &SlabHeap, from: u64, to: u64) -> Result<(), HeapError> {
        let file = &self.file;
        file.back(heap.remote_at + 8 * from, 8 * (to - from))?;
        file.back(
            heap.desc_at + SIZE_DESC as u64 * from,
            SIZE_DESC as u64 * (to - from),
        )?;
        file.back(heap.data_of(from as u32), (to - from) << heap.shift)
    }

    /// Grows `heap` by up to `batch` slabs, which the caller then owns. Backs the new slabs'
    /// remote words, descriptors and data before publishing the new length, so no process can
    /// touch unbacked memory; exhaustion is an error value. `log(from, count)` runs before each
    /// CAS attempt.
    pub(crate) fn grow(
        &self,
        heap: &SlabHeap,
        batch: u32,
        writer: &impl Writer,
        log: impl Fn(u32, u32),
    ) -> Result<std::ops::Range<u32>, AllocError> {
        let len = heap.len_word();
        let mut cur = len.load(Ordering::Acquire);
        loop {
            let from = u64::from(dcas::payload(cur));
            if from >= heap.max {
                return Err(AllocError::OutOfMemory);
            }
            let new = (from + u64::from(batch)).min(heap.max);
            let backer = &self.backer;
            let backed = heap.backed_ahead().load(Ordering::Acquire);
            if backed < new {
                backer.missed();
                self.back_slabs(heap, from, new)
                    .map_err(|_| AllocError::OutOfMemory)?;
            }
            log(from as u32, (new - from) as u32);
            podkv_hw::cas_site!("alloc.slabs.grow.cas");
            match dcas::cas(len, cur, new as u32, writer) {
                Ok(_) => {
                    let leads = (heap.count_back_ahead, heap.count_populate_ahead());
                    backer.grown(heap.kind, new, backed, leads);
                    return Ok(from as u32..new as u32);
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// The backer's growth work: backs `[len, len + count_back_ahead)` of each slab heap that
    /// is not yet backed and raises the header's note of how far, then populates the data of
    /// those slabs in this process's mapping.
    pub(crate) fn back_ahead(&self) {
        for slabs in &self.heaps {
            let len = u64::from(slabs.len());
            let mut target = (len + u64::from(slabs.count_back_ahead)).min(slabs.max);
            if self.backer.huge_slabs() {
                target = slabs.slabs_to_huge_page(target);
            }
            let done = slabs.backed_ahead();
            let from = done.load(Ordering::Acquire).max(len);
            // Out of space: leave the note where it is; the grow that needs these slabs backs
            // them itself and reports the error.
            if from < target && self.back_slabs(slabs, from, target).is_err() {
                continue;
            }
            if from < target {
                // Fresh slabs past `len`: nobody has used, let alone released, their pages.
                let (start, end) = (slabs.data_of(from as u32), slabs.data_of(target as u32));
                self.backer
                    .collapse(*slabs.words(), slabs.kind as usize, start, end);
            }
            done.fetch_max(target, Ordering::AcqRel);
            let populate = (len + u64::from(slabs.count_populate_ahead())).min(target);
            self.populate_ahead(slabs, len, populate);
        }
    }

    /// Populates the data of slabs `[len, target)` of `heap` (backed; the first
    /// `count_populate_ahead` past `len`) in this process's mapping, past what it populated
    /// before. A first store into a page of shared memory
    /// otherwise takes a fault on the operation's path (about 2.2 M of them to load 8.4 M
    /// items of 1 KiB); the backer takes them all off it, in batches the kernel maps without
    /// a trap per page. Slabs below `len` are left alone: their owners have touched them.
    fn populate_ahead(&self, heap: &SlabHeap, len: u64, target: u64) {
        let from = self.backer.populated(heap.kind).max(len);
        if from >= target {
            return;
        }
        if heap.words().populate(heap.data_of(from as u32), (target - from) << heap.shift) {
            self.backer.note_populated(heap.kind, target);
        } else {
            // The kernel cannot (before Linux 5.14) or the model runs: stop asking, so that
            // grows stop waking the backer for it.
            self.backer.note_populated(heap.kind, u64::MAX);
        }
    }
}
