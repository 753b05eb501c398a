//! The global free lists (CXLALLOC §3.1): per slab heap, a **warm** list of empty slabs whose
//! pages are kept (at most `count_warm_max`) and a **cold** list of slabs whose pages were
//! released to the OS (constitution rule 7). Both are Treiber stacks whose HWcc head words
//! change by single detectable CAS ([`crate::free_list`]); a slab on them is owned by nobody.
//!
//! # Sharing
//! - head words: HWcc, changed only by `GlobalLists::push` and `GlobalLists::pop` (CAS
//!   through the caller's [`Writer`]).
//! - a listed slab's descriptor links and depth: written by the pusher, which owns the slab
//!   until its CAS, and written back before it (SWcc); read fresh by poppers.
//! - a slab's `pages` word (its release count): written by its owner when it pushes the slab
//!   on the cold list, and written back with the links; read fresh by poppers and by the
//!   backer, which keeps what it backed in its own process (`crate::backer`).

use crate::backer::Backer;
use crate::dcas::Writer;
use crate::error::AllocError;
use crate::file::HeapFile;
use crate::free_list;
use crate::slab::{SlabDesc, State, SIZE_DESC_HEAD};
use crate::slabs::SlabHeap;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use std::sync::Arc;

/// Which global list of a slab heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// Empty slabs whose pages are kept (bounded).
    Warm,
    /// Slabs whose pages were released.
    Cold,
}

impl List {
    /// Warm first: where a slab is pushed, and popped, first.
    pub const ORDER: [List; 2] = [List::Warm, List::Cold];

    /// The list a step logs with its `warm` flag.
    pub const fn of(warm: bool) -> List {
        if warm {
            List::Warm
        } else {
            List::Cold
        }
    }

    /// Whether this is the warm list (a step's logged flag).
    pub const fn is_warm(self) -> bool {
        matches!(self, List::Warm)
    }
}

/// The global free lists of both slab heaps, and the backing of slabs that leave the cold
/// one.
pub(crate) struct GlobalLists {
    file: Arc<HeapFile>,
    backer: Arc<Backer>,
    coherence: Coherence,
}

impl GlobalLists {
    pub(crate) fn new(file: Arc<HeapFile>, backer: Arc<Backer>, coherence: Coherence) -> Self {
        GlobalLists {
            file,
            backer,
            coherence,
        }
    }

    /// The head word of `heap`'s `list` (HWcc).
    pub(crate) fn head<'h>(&self, heap: &'h SlabHeap, list: List) -> &'h AtomicU64 {
        heap.word_at(match list {
            List::Warm => heap.warm_at,
            List::Cold => heap.free_at,
        })
    }

    /// Slabs on `heap`'s `list`: the depth its top slab's descriptor records (read fresh). A
    /// count for reports and limits, read without a lock: a push or pop under way may be
    /// counted either way.
    pub(crate) fn count(&self, heap: &SlabHeap, list: List) -> u32 {
        let top = free_list::head_of(self.head(heap, list).load(Ordering::Acquire));
        top.checked_sub(1).map_or(0, |slab| {
            let desc = heap.desc(slab);
            self.coherence
                .invalidate((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
            desc.depth.load(Ordering::Relaxed) as u32
        })
    }

    /// Pops a slab off `list`; `before(slab)` runs before each CAS attempt. A cold slab's
    /// pages must be backed again ([`GlobalLists::back_popped`]) before use.
    pub(crate) fn pop(
        &self,
        heap: &SlabHeap,
        list: List,
        writer: &impl Writer,
        before: impl Fn(u32),
    ) -> Option<u32> {
        let next_of = |slab: u32| {
            let desc = heap.desc(slab);
            if podkv_hw::site!("alloc.global.pop.invalidate") {
                self.coherence
                    .invalidate((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
            }
            desc.next()
        };
        free_list::pop(self.head(heap, list), writer, next_of, before)
    }

    /// Backs a slab's data pages (a slab from the cold list, whose pages were released).
    fn back_slab(&self, heap: &SlabHeap, slab: u32) -> Result<(), AllocError> {
        self.file
            .back(heap.data_of(slab), heap.slab_bytes())
            .map_err(|_| AllocError::OutOfMemory)
    }

    /// Makes sure the data pages of a slab the caller just popped off the cold list are
    /// backed: nothing to do when a backer backed them after their release (module `backer`),
    /// else the system call on this path. Either way the backer is asked to back the list's
    /// next slabs, since whoever pops next will want them.
    pub(crate) fn back_popped(&self, heap: &SlabHeap, slab: u32) -> Result<(), AllocError> {
        let backer = &self.backer;
        backer.cold_popped(heap.kind);
        if backer.backed_cold_at(heap.kind, slab, self.releases(heap, slab)) {
            return Ok(());
        }
        backer.missed_cold();
        self.back_slab(heap, slab)
    }

    /// How many times slab `slab`'s pages were released, read fresh: the word's last writer
    /// was the slab's last pusher, maybe on another host (SWcc reader rule).
    fn releases(&self, heap: &SlabHeap, slab: u32) -> u64 {
        let desc = heap.desc(slab);
        if podkv_hw::site!("alloc.global.back_cold.invalidate_pages") {
            self.coherence
                .invalidate((&desc.pages as *const AtomicU64).cast(), 8);
        }
        desc.releases()
    }

    /// The backer's half of [`GlobalLists::back_popped`]: backs the data pages of the first
    /// `count` slabs of `heap`'s cold list that this process's backer has not backed since
    /// their last release, and notes each. Returns how many it backed.
    ///
    /// The walk owns nothing and writes nothing in the heap: a slab it reads may be popped
    /// (and pushed again) under it, and from then on it follows stale links. That is harmless:
    /// it stops at `count` slabs and at any slab past `len`, backing never destroys data, and
    /// each note carries the release count read *before* backing, so a release in between
    /// leaves it stale.
    pub(crate) fn back_cold_head(&self, heap: &SlabHeap, count: u32) -> Result<u32, AllocError> {
        let len = heap.len();
        let coherence = self.coherence;
        let head = self.head(heap, List::Cold);
        let mut link = free_list::head_of(head.load(Ordering::Acquire));
        let mut backed = 0;
        for _ in 0..count {
            if link == free_list::NIL || link > len {
                break;
            }
            let slab = link - 1;
            let desc = heap.desc(slab);
            if podkv_hw::site!("alloc.global.back_cold.invalidate_desc") {
                coherence.invalidate((desc as *const SlabDesc).cast(), SIZE_DESC_HEAD);
            }
            let releases = self.releases(heap, slab);
            if !self.backer.backed_cold_at(heap.kind, slab, releases) {
                self.back_slab(heap, slab)?;
                self.backer.note_backed_cold(heap.kind, slab, releases);
                backed += 1;
            }
            link = desc.next();
        }
        Ok(backed)
    }

    /// The backer's cold-list work: for each slab heap popped since its last look, backs the
    /// head of the cold list ([`GlobalLists::back_cold_head`]). Out of space here leaves the
    /// rest to the poppers, who report it.
    pub(crate) fn back_cold_heads(&self, heaps: &[SlabHeap]) {
        let cold = self.backer.take_cold_popped();
        for heap in heaps {
            if cold & 1 << heap.kind as u32 != 0 {
                if let Ok(count) = self.back_cold_head(heap, heap.count_back_cold) {
                    self.backer.backed_cold(count);
                }
            }
        }
    }

    /// `unsized_to_free`: pushes a slab the caller owns on the warm list (refused, returning
    /// false, when that already holds `count_warm_max` slabs) or on the cold list with its
    /// pages released to the OS first (rule 7). Idempotent up to its CAS.
    pub(crate) fn push(&self, heap: &SlabHeap, slab: u32, list: List, writer: &impl Writer) -> bool {
        heap.desc(slab).set_meta(0, 0, State::Free);
        let head = self.head(heap, list);
        let depth_of = |s: u32| heap.desc(s).depth.load(Ordering::Relaxed) as u32;
        let link = |s: u32, next: u32, depth: u32| self.link_free(heap, s, next, depth);
        match list {
            List::Warm => free_list::push_bounded(
                head,
                slab,
                Some(heap.count_warm_max),
                writer,
                depth_of,
                link,
            ),
            List::Cold => {
                self.file.release(heap.data_of(slab), heap.slab_bytes());
                heap.desc(slab).pages_released();
                free_list::push(head, slab, writer, depth_of, link);
                true
            }
        }
    }

    /// Links a slab we own into a global list: its descriptor is written back first, since
    /// any thread may pop it next (SWcc writer rule).
    fn link_free(&self, heap: &SlabHeap, slab: u32, next: u32, depth: u32) {
        let desc = heap.desc(slab);
        desc.set_links(next, 0);
        desc.depth.store(u64::from(depth), Ordering::Relaxed);
        if podkv_hw::site!("alloc.global.link.write_back") {
            self.coherence.write_back(
                (desc as *const SlabDesc).cast(),
                std::mem::size_of::<SlabDesc>(),
            );
        }
    }
}
