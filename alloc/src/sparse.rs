//! Sparse slabs worth draining: the disowned slabs a heap's user should move its blocks out
//! of, so that they empty and their memory goes back to the OS.
//!
//! Slab morphing (`morph.rs`) reuses a slab whose few old blocks are scattered; it cannot
//! help a class whose slabs stay half full once its sizes stop being asked for (after a size
//! shift each old class's slabs sit at 30–70%: new blocks of a larger class would be blocked
//! by almost every old one). Only moving the live blocks helps, and only the heap's user can:
//! it knows who points at a block (the store moves an item by one CAS on its bucket, as
//! memcached's slab mover rescues items). Owners give such slabs up first
//! (`ThreadHandle::disown_sparse`), since a slab on its owner's list takes other slots'
//! frees back only once the owner has used its own free bits; a disowned slab is taken by its
//! last free, whoever frees. The slabs named here are the disowned ones with at most
//! `percent` of their blocks live (slabs given up at a slot's release included).
//!
//! A snapshot of a live heap: a slab may have emptied since. Acting on
//! it is only ever a wasted move, never a wrong one.

use crate::class::Kind;
use crate::occupancy::{self, SlabFill};
use crate::pending::Pending;
use crate::remote;
use crate::shared::Shared;
use crate::slab::State;
use crate::slot::owner_pid;
use podkv_hw::sync::Ordering::Acquire;
use std::collections::{BTreeMap, BTreeSet};

/// What an owner gave up (`ThreadHandle::disown_sparse`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disowned {
    /// Slabs disowned, of both slab heaps.
    pub count: u32,
    /// Those given up for the memory over a limit: their blocks must go, not move (a move
    /// would take a new block of the class, where the class may have no other slab).
    pub to_empty: SparseSlabs,
}

/// The slabs to drain, by heap; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseSlabs {
    /// Per slab heap: where its slabs start, its slab shift, and the slabs to drain.
    heaps: [(u64, u32, BTreeSet<u32>); 2],
}

impl SparseSlabs {
    /// The disowned slabs of `shared`'s heap at most `percent` live. Reads every slab
    /// descriptor and remote word, and the pending remote frees of claimed slots only: the
    /// records of slots nobody holds are never touched (on a fresh tmpfs heap, reading one
    /// would allocate its pages). Under SWcc a descriptor may be read stale: a slab named
    /// wrongly costs a wasted move at most.
    pub(crate) fn of_heap(shared: &Shared, percent: u32) -> SparseSlabs {
        let mut pending: [BTreeMap<u32, u32>; 2] = Default::default();
        for (i, owner) in shared.slots.owner_words().iter().enumerate() {
            if owner_pid(owner.load(Acquire)) == 0 {
                continue;
            }
            let word = shared.slots.slot(i as u64).pending.load(Acquire);
            if let Some(batch) = Pending::unpack(word) {
                *pending[batch.kind as usize].entry(batch.slab).or_default() += batch.count;
            }
        }
        let mut fills: [Vec<SlabFill>; 2] = Default::default();
        let mut ranges = [(0, 0); 2];
        for kind in Kind::ALL {
            let heap = *shared.slabs.get(kind);
            ranges[kind as usize] = (heap.data_at, heap.shift);
            for slab in 0..heap.len() {
                let meta = heap.desc(slab).meta();
                let class = usize::from(meta.class);
                if meta.state != Some(State::Disowned) || class >= heap.classes.len {
                    continue;
                }
                let count = remote::count(heap.remote(slab).load(Acquire));
                let waiting = pending[kind as usize].get(&slab).copied().unwrap_or(0);
                fills[kind as usize].push(SlabFill {
                    slab,
                    live: count.saturating_sub(waiting),
                    capacity: heap.classes.count[class],
                });
            }
        }
        SparseSlabs::of_fills(&fills, percent, ranges)
    }

    /// The slabs of `fills` (the disowned slabs of each slab heap, small first) at most
    /// `percent` live; `ranges` gives each slab heap's first slab offset and slab shift.
    pub(crate) fn of_fills(fills: &[Vec<SlabFill>; 2], percent: u32, ranges: [(u64, u32); 2]) -> SparseSlabs {
        let mut sparse = SparseSlabs::default();
        for kind in Kind::ALL {
            let (data_at, shift) = ranges[kind as usize];
            let slabs = fills[kind as usize]
                .iter()
                .filter(|f| occupancy::at_most(f.live, f.capacity, percent))
                .map(|f| f.slab)
                .collect();
            sparse.heaps[kind as usize] = (data_at, shift, slabs);
        }
        sparse
    }

    /// The slabs `slabs` (per slab heap, small first) of `shared`'s heap.
    pub(crate) fn of_slabs(shared: &Shared, slabs: [BTreeSet<u32>; 2]) -> SparseSlabs {
        let mut sparse = SparseSlabs::default();
        for (kind, slabs) in Kind::ALL.into_iter().zip(slabs) {
            let heap = shared.slabs.get(kind);
            sparse.heaps[kind as usize] = (heap.data_at, heap.shift, slabs);
        }
        sparse
    }

    /// Whether the block at heap offset `offset` lies in a slab to drain.
    pub fn holds(&self, offset: u64) -> bool {
        self.heaps.iter().any(|(data_at, shift, slabs)| {
            offset >= *data_at
                && u32::try_from((offset - data_at) >> shift).is_ok_and(|s| slabs.contains(&s))
        })
    }

    /// Slabs to drain, in both heaps.
    pub fn len(&self) -> usize {
        self.heaps.iter().map(|h| h.2.len()).sum()
    }

    /// Whether there is no slab to drain.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fills(small: &[(u32, u32)]) -> [Vec<SlabFill>; 2] {
        let small = small
            .iter()
            .map(|&(slab, live)| SlabFill {
                slab,
                live,
                capacity: 100,
            })
            .collect();
        [small, Vec::new()]
    }

    const RANGES: [(u64, u32); 2] = [(1 << 20, 16), (1 << 40, 19)];

    #[test]
    fn disowned_slabs_at_most_the_share_live_are_drained() {
        let fills_in = [(0, 50), (1, 51), (3, 0), (9, 100)];
        let sparse = SparseSlabs::of_fills(&fills(&fills_in), 50, RANGES);
        assert_eq!(sparse.len(), 2);
        let at = |slab: u64| (1 << 20) + (slab << 16) + 64;
        assert!(sparse.holds(at(0)) && sparse.holds(at(3)));
        assert!(!sparse.holds(at(1)) && !sparse.holds(at(9)), "fuller than the share");
        assert!(!sparse.holds(at(2)), "a slab not disowned");
        assert!(!sparse.holds(at(3) + (1 << 40)), "an offset of the other heap");
        assert!(!sparse.holds(64), "an offset before both heaps");
        assert!(SparseSlabs::of_fills(&fills(&[]), 50, RANGES).is_empty());
    }
}
