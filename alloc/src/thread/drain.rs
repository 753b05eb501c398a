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
//! frees only make them sparser), and only in a class whose such slabs' blocks in use fit in
//! two slabs fewer: disowning a slab gives up its free blocks until it empties, which pays
//! only when its blocks are moved into fewer slabs.
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
use crate::occupancy;
use crate::slot::unpack_ends;
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

    /// Disowns this slot's sparse sized slabs at most `percent` in use (module docs), then
    /// cools the warm global lists (`cool_warm`); how many slabs it disowned.
    pub(super) fn disown_sparse(&self, percent: u32) -> u32 {
        let mut disowned = 0;
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            for class in 0..heap.classes.len {
                let capacity = heap.classes.count[class];
                let (head, _) = unpack_ends(self.lists(kind).sized[class].load(Relaxed));
                if head == 0 {
                    continue;
                }
                let (mut sparse, mut used) = (Vec::new(), 0u64);
                let mut link = heap.desc(head - 1).next();
                while link != 0 {
                    let desc = heap.desc(link - 1);
                    let in_use = capacity - desc.count_free(capacity);
                    if desc.meta().old == 0 && occupancy::at_most(in_use, capacity, percent) {
                        sparse.push(link - 1);
                        used += u64::from(in_use);
                    }
                    link = desc.next();
                }
                if sparse.len() as u64 >= used.div_ceil(u64::from(capacity)) + 2 {
                    for slab in sparse {
                        self.slabs().sized_to_disowned(&heap, class, slab);
                        disowned += 1;
                    }
                }
            }
        }
        self.cool_warm();
        disowned
    }
}
