//! [`Drainer`]: the owner gives up its sparse slabs of size classes that no longer fill them
//! (`disown_sparse`), so that a mover (the store's compaction, `SparseSlabs`) can empty them.
//!
//! A slab on its owner's sized list takes back only the owner's frees: other slots' frees
//! just count down its remote word, and their blocks come back when the owner has used up the
//! slab's own free bits. After a size shift the owner allocates no more of an old class, so a
//! slab of it that a mover emptied would stay the owner's, empty, for good. Disowned
//! (`sized_to_disowned`, logged and recovered as at a slot's release), the slab is no one's:
//! its free bits count as freed, every free counts down its remote word, and the last one
//! takes it to the global list, whose memory goes back to the OS.
//!
//! Only slabs behind the head of a class's list (the head is the class's allocation slab), not
//! morphing, with at most `percent` of their blocks in use by the owner's bits (other slots'
//! frees only make them sparser), the sparsest first, and only while their blocks in use fit
//! in the free blocks of the slabs the owner keeps (`occupancy::to_give_up`): disowning a
//! slab gives up its free blocks until it empties, which pays only when its blocks are moved
//! into slabs that are kept.
//!
//! # Where a given-up slab goes
//! The last free of a disowned slab takes it (`took_slab`, then `keep_or_release`, which
//! knows the slab was given up). An empty slab normally stays
//! near at hand, pages and all: on the taker's unsized list, else the warm global list, so
//! the next slab costs no page faults. A disowned slab was given up on purpose (drained, or
//! left by a released slot): it goes straight to the cold list, its pages released (rule 7),
//! or a drain would only move memory from sparse slabs to warm ones (up to 2.25 MiB of small
//! and 5 MiB of large slabs per slab heap and slot). For the same reason each
//! `disown_sparse` also cools the warm global lists: whatever emptied since the last one
//! goes cold too.

use crate::class::Kind;
use crate::global::List;
use crate::occupancy::{self, SlabFill};
use crate::slabs::SlabHeap;
use crate::slot::unpack_ends;
use crate::sparse::{Disowned, SparseSlabs};
use std::collections::BTreeSet;
use podkv_hw::sync::Ordering::Relaxed;

role! {
    /// A thread handle as the owner that gives its sparse slabs up.
    Drainer
}

impl Drainer<'_> {
    /// Moves every slab of the warm global lists to the cold ones, pages released: a heap
    /// being drained wants its memory back, not kept for a quick reuse. Each slab is popped
    /// and pushed by the logged steps `take_unsized` and `push_global` use.
    fn cool_warm(&self) {
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            while let Some(slab) = self.slabs().pop_global(&heap, List::Warm) {
                self.slabs().keep_or_release(&heap, slab, true);
            }
        }
    }

    /// Disowns this slot's sparse sized slabs at most `percent` in use (module docs), then,
    /// while the slabs it disowned hold less than `over` bytes, its sparsest slabs
    /// (`give_up_for`), then cools the warm global lists (`cool_warm`).
    pub(super) fn disown_sparse(&self, percent: u32, over: u64) -> Disowned {
        let mut count = 0;
        let mut given = 0;
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            for class in 0..heap.classes.len {
                let list = self.fills(&heap, class);
                for slab in occupancy::to_give_up(&list, percent) {
                    self.slabs().sized_to_disowned(&heap, class, slab);
                    count += 1;
                    given += heap.slab_bytes();
                }
            }
        }
        let to_empty = self.give_up_for(over.saturating_sub(given));
        count += to_empty.len() as u32;
        self.cool_warm();
        Disowned { count, to_empty }
    }

    /// Disowns this slot's sparsest slabs until they hold at least `bytes`: the fewest blocks
    /// live per byte first, of any class, the allocation slab of a class included (a class
    /// whose sizes the shift left behind keeps only that one). Not morphing ones, and not
    /// detached ones (they are full). The memory of a heap over its limit: the blocks of
    /// these slabs must go for their memory to go back.
    fn give_up_for(&self, bytes: u64) -> SparseSlabs {
        if bytes == 0 {
            return SparseSlabs::default();
        }
        let mut all = Vec::new();
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            for class in 0..heap.classes.len {
                for (fill, _) in self.fills(&heap, class).into_iter().filter(|(_, may)| *may) {
                    // Live blocks per MiB of slab: what emptying it costs per byte back.
                    let cost = (u64::from(fill.live) << 20) >> heap.shift;
                    all.push((cost, kind, class, fill.slab));
                }
            }
        }
        all.sort_unstable_by_key(|&(cost, ..)| cost);
        let (mut slabs, mut given): ([BTreeSet<u32>; 2], u64) = Default::default();
        for (_, kind, class, slab) in all {
            if given >= bytes {
                break;
            }
            let heap = *self.shared.slabs.get(kind);
            self.slabs().sized_to_disowned(&heap, class, slab);
            slabs[kind as usize].insert(slab);
            given += heap.slab_bytes();
        }
        SparseSlabs::of_slabs(&self.shared, slabs)
    }

    /// This slot's sized list of `heap`'s `class`, head (the allocation slab) first: each
    /// slab's blocks in use by the owner's bits, and whether it may be given up (not
    /// morphing).
    fn fills(&self, heap: &SlabHeap, class: usize) -> Vec<(SlabFill, bool)> {
        let capacity = heap.classes.count[class];
        let (mut link, _) = unpack_ends(self.lists(heap.kind).sized[class].load(Relaxed));
        let mut list = Vec::new();
        while link != 0 {
            let desc = heap.desc(link - 1);
            let live = capacity - desc.count_free(capacity);
            list.push((SlabFill { slab: link - 1, live, capacity }, desc.meta().old == 0));
            link = desc.next();
        }
        list
    }
}
