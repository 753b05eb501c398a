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

/// The slabs of one class's list to give up (`thread/drain.rs`): `list` is the list in order,
/// the class's allocation slab (its head, always kept) first, each slab with the blocks its
/// owner has in use (`live`) and whether it may be given up (not morphing: a morphing slab's
/// free blocks may be blocked by old ones, so they are not counted as room either). The
/// sparsest slabs go first, each at most `percent` in use, for as long as the blocks in use
/// of those given up fit in the free blocks of those kept: a slab given up then costs the
/// moves of its blocks and saves a whole slab.
pub fn to_give_up(list: &[(SlabFill, bool)], percent: u32) -> Vec<u32> {
    let mut free_kept: u64 = list
        .iter()
        .filter(|(_, may)| *may)
        .map(|(f, _)| u64::from(f.capacity.saturating_sub(f.live)))
        .sum();
    let mut candidates: Vec<&SlabFill> = list
        .iter()
        .skip(1)
        .filter(|(f, may)| *may && at_most(f.live, f.capacity, percent))
        .map(|(f, _)| f)
        .collect();
    candidates.sort_by_key(|f| f.live);
    let (mut moved, mut out) = (0u64, Vec::new());
    for f in candidates {
        let free_left = free_kept - u64::from(f.capacity.saturating_sub(f.live));
        if moved + u64::from(f.live) > free_left {
            break;
        }
        free_kept = free_left;
        moved += u64::from(f.live);
        out.push(f.slab);
    }
    out
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

    fn list(lives: &[(u32, bool)]) -> Vec<(SlabFill, bool)> {
        let fill = |(i, &(live, may)): (usize, &(u32, bool))| {
            (SlabFill { slab: i as u32, live, capacity: 100 }, may)
        };
        lives.iter().enumerate().map(fill).collect()
    }

    #[test]
    fn the_sparsest_slabs_are_given_up_while_their_blocks_fit_in_the_kept() {
        // Head 60 in use (40 free), then 10, 70, 20, 45: 10 and 20 fit in the kept slabs' 40 +
        // 30 + 55 free; giving up 45 too would leave 40 + 30 free for 10 + 20 + 45 moved.
        let l = list(&[(60, true), (10, true), (70, true), (20, true), (45, true)]);
        assert_eq!(to_give_up(&l, 50), vec![1, 3]);
        assert_eq!(to_give_up(&l, 15), vec![1], "over the share in use");
        assert!(to_give_up(&l[..1], 100).is_empty(), "the head is always kept");
        let l = list(&[(95, true), (10, false), (20, true), (90, true)]);
        assert_eq!(to_give_up(&l, 50), Vec::<u32>::new(), "20 do not fit in 5 + 10 free");
        let l = list(&[(50, true), (0, true), (0, true)]);
        assert_eq!(to_give_up(&l, 50), vec![1, 2], "empty slabs always go");
        let l = list(&[(100, true), (50, true), (50, true)]);
        assert_eq!(to_give_up(&l, 50), vec![1], "one half-full slab folds into the other");
    }
}
