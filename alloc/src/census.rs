//! The slab-utilisation census: how full the slabs holding blocks are, per size class, as
//! NVAlloc's Fig. 15b breaks them down (0–30%, 30–70%, 70–100% of a slab's blocks live).
//!
//! The census reads what the checker's one walk over every slab gathers (`check.rs` counts
//! each slab into its class's [`Occupancy`]); it writes nothing. On a live heap it is a
//! snapshot that may show a move half made, as the checker's statistics do.
//!
//! A slab counts when it holds a class: sized, detached or disowned. Empty slabs (free on the
//! global lists or unsized on a slot's list) hold no class; [`Census::idle_slabs`] counts them.
//! A slab's *occupancy* is `live / capacity`, its live blocks over the blocks of its class that
//! fit in it; `live` counts remote frees still pending in a slot's batch as freed.

use crate::check::HeapReport;
use crate::class::{Kind, SHIFT_LARGE_SLAB, SHIFT_SMALL_SLAB};

/// The occupancy bands, as fractions of a slab's capacity in percent: a slab is in band `i`
/// when `BANDS_PERCENT[i] <= 100 * live / capacity < BANDS_PERCENT[i + 1]` (the last band
/// includes 100%).
pub const BANDS_PERCENT: [u32; 4] = [0, 30, 70, 100];

/// The bands' names, as reports print them.
pub const BAND_NAMES: [&str; 3] = ["0-30%", "30-70%", "70-100%"];

/// How many slabs fall in each occupancy band.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Slabs per band of [`BANDS_PERCENT`], lowest first.
    pub slabs: [u64; 3],
}

impl Occupancy {
    /// Counts one slab with `live` of its `capacity` blocks live.
    pub fn add(&mut self, live: u32, capacity: u32) {
        self.slabs[band(live, capacity)] += 1;
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Occupancy) {
        for (mine, theirs) in self.slabs.iter_mut().zip(other.slabs) {
            *mine += theirs;
        }
    }

    /// Slabs counted.
    pub fn total(&self) -> u64 {
        self.slabs.iter().sum()
    }
}

/// The band of a slab with `live` of `capacity` blocks live.
pub fn band(live: u32, capacity: u32) -> usize {
    let percent = 100 * u64::from(live) / u64::from(capacity.max(1));
    BANDS_PERCENT[1..3]
        .iter()
        .take_while(|&&bound| percent >= u64::from(bound))
        .count()
}

/// Bytes in one slab of `kind`.
pub const fn slab_bytes(kind: Kind) -> u64 {
    match kind {
        Kind::Small => 1 << SHIFT_SMALL_SLAB,
        Kind::Large => 1 << SHIFT_LARGE_SLAB,
    }
}

/// One size class in the census.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassCensus {
    /// The slab heap of the class.
    pub kind: Kind,
    /// The class's index in its heap.
    pub class: usize,
    /// Block size.
    pub block_bytes: u32,
    /// Slabs holding the class (sized, detached, disowned).
    pub slabs: u64,
    /// Bytes of those slabs: `slabs * slab_bytes(kind)`.
    pub slab_bytes: u64,
    /// Bytes of live blocks (block sizes).
    pub live_bytes: u64,
    /// The slabs by occupancy band.
    pub occupancy: Occupancy,
}

/// What [`crate::Heap::census`] found: per class and over the small and large heaps (the huge
/// heap has no slabs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Classes with slabs, small heap first, by class index.
    pub classes: Vec<ClassCensus>,
    /// Slabs of both heaps by occupancy band.
    pub occupancy: Occupancy,
    /// Bytes of live blocks in both slab heaps.
    pub live_bytes: u64,
    /// Bytes of slabs holding a class in both heaps.
    pub slab_bytes: u64,
    /// Slabs holding no class: free on the global lists or unsized on a slot's list.
    pub idle_slabs: u64,
}

impl Census {
    /// The census of the slab statistics in `report` (from [`crate::Heap::check`]).
    pub fn of_report(report: &HeapReport) -> Census {
        let mut census = Census::default();
        for (kind, heap) in Kind::ALL.into_iter().zip(&report.heaps) {
            for (&class, stats) in &heap.classes {
                let slab_bytes = stats.slabs * slab_bytes(kind);
                let live_bytes = stats.live_blocks * u64::from(stats.block_bytes);
                census.occupancy.merge(&stats.occupancy);
                census.live_bytes += live_bytes;
                census.slab_bytes += slab_bytes;
                census.classes.push(ClassCensus {
                    kind,
                    class,
                    block_bytes: stats.block_bytes,
                    slabs: stats.slabs,
                    slab_bytes,
                    live_bytes,
                    occupancy: stats.occupancy,
                });
            }
            census.idle_slabs += ["free", "unsized"]
                .iter()
                .filter_map(|state| heap.slabs_by_state.get(state))
                .sum::<u64>();
        }
        census
    }

    /// Live bytes over slab bytes (1.0 for a heap with no slabs): how much of the memory the
    /// classes hold is live.
    pub fn utilisation(&self) -> f64 {
        if self.slab_bytes == 0 {
            1.0
        } else {
            self.live_bytes as f64 / self.slab_bytes as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_split_at_30_and_70_percent() {
        assert_eq!(band(0, 100), 0);
        assert_eq!(band(29, 100), 0);
        assert_eq!(band(30, 100), 1);
        assert_eq!(band(69, 100), 1);
        assert_eq!(band(70, 100), 2);
        assert_eq!(band(100, 100), 2);
        assert_eq!(band(1, 3), 1, "33% is in the middle band");
        assert_eq!(band(0, 0), 0, "a class with no capacity is empty, not a division by 0");
    }

    #[test]
    fn occupancy_adds_and_merges() {
        let mut a = Occupancy::default();
        a.add(1, 10);
        a.add(9, 10);
        let mut b = Occupancy::default();
        b.add(5, 10);
        a.merge(&b);
        assert_eq!(a.slabs, [1, 1, 1]);
        assert_eq!(a.total(), 3);
    }
}
