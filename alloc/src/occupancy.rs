//! A slab's occupancy band (0–30%, 30–70%, 70–100% of its blocks live, as NVAlloc's
//! Fig. 15b) and the histogram of slabs per band: the leaf the checker counts into and the
//! census (`census.rs`) reads.

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

/// How full one slab holding a class is (`sparse.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabFill {
    /// The slab's index in its heap.
    pub slab: u32,
    /// Live blocks.
    pub live: u32,
    /// Blocks of its class that fit in it.
    pub capacity: u32,
}

/// Whether `live` of `capacity` blocks are at most `percent` of them: a slab sparse enough
/// to give up (`thread/drain.rs`) or to drain (`sparse.rs`).
pub fn at_most(live: u32, capacity: u32, percent: u32) -> bool {
    u64::from(live) * 100 <= u64::from(capacity) * u64::from(percent)
}

/// The band of a slab with `live` of `capacity` blocks live.
pub fn band(live: u32, capacity: u32) -> usize {
    let percent = 100 * u64::from(live) / u64::from(capacity.max(1));
    BANDS_PERCENT[1..3]
        .iter()
        .take_while(|&&bound| percent >= u64::from(bound))
        .count()
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
