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
//! A snapshot of a live heap (`Heap::check`'s walk): a slab may have emptied since. Acting on
//! it is only ever a wasted move, never a wrong one.

use crate::check::HeapReport;
use crate::class::Kind;
use std::collections::BTreeSet;

/// The slabs to drain, by heap; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseSlabs {
    /// Per slab heap: where its slabs start, its slab shift, and the slabs to drain.
    heaps: [(u64, u32, BTreeSet<u32>); 2],
}

impl SparseSlabs {
    /// The disowned slabs to drain in `report`'s heap at `percent` live at most; `ranges` gives each
    /// slab heap's first slab offset and slab shift, small heap first.
    pub fn of_report(report: &HeapReport, percent: u32, ranges: [(u64, u32); 2]) -> SparseSlabs {
        let mut sparse = SparseSlabs::default();
        for kind in Kind::ALL {
            let (data_at, shift) = ranges[kind as usize];
            let slabs = report.heaps[kind as usize]
                .fills
                .iter()
                .filter(|f| u64::from(f.live) * 100 <= u64::from(f.capacity) * u64::from(percent))
                .map(|f| f.slab)
                .collect();
            sparse.heaps[kind as usize] = (data_at, shift, slabs);
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
    use crate::occupancy::SlabFill;

    fn report(fills: &[(u32, u8, u32)]) -> HeapReport {
        let mut report = HeapReport::default();
        report.heaps[0].fills = fills
            .iter()
            .map(|&(slab, class, live)| SlabFill {
                slab,
                class,
                live,
                capacity: 100,
            })
            .collect();
        report
    }

    const RANGES: [(u64, u32); 2] = [(1 << 20, 16), (1 << 40, 19)];

    #[test]
    fn disowned_slabs_at_most_the_share_live_are_drained() {
        let fills = [(0, 1, 50), (1, 1, 51), (3, 2, 0), (9, 2, 100)];
        let sparse = SparseSlabs::of_report(&report(&fills), 50, RANGES);
        assert_eq!(sparse.len(), 2);
        let at = |slab: u64| (1 << 20) + (slab << 16) + 64;
        assert!(sparse.holds(at(0)) && sparse.holds(at(3)));
        assert!(!sparse.holds(at(1)) && !sparse.holds(at(9)), "fuller than the share");
        assert!(!sparse.holds(at(2)), "a slab not disowned");
        assert!(!sparse.holds(at(3) + (1 << 40)), "an offset of the other heap");
        assert!(!sparse.holds(64), "an offset before both heaps");
        assert!(SparseSlabs::of_report(&report(&[]), 50, RANGES).is_empty());
    }
}
