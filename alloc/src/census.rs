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
pub use crate::occupancy::{band, Occupancy, BAND_NAMES, BANDS_PERCENT};

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

impl std::fmt::Display for Census {
    /// One line: slabs per band, then live bytes over slab bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slabs")?;
        for (i, (name, n)) in BAND_NAMES.iter().zip(self.occupancy.slabs).enumerate() {
            write!(f, "{} {name} {n}", if i == 0 { "" } else { "," })?;
        }
        write!(
            f,
            " (of {} holding a class; {} idle); {} B live in {} B of slabs ({:.1}%)",
            self.occupancy.total(),
            self.idle_slabs,
            self.live_bytes,
            self.slab_bytes,
            100.0 * self.utilisation()
        )
    }
}
