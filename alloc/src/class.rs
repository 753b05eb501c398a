//! Size classes of the small and large heaps.
//!
//! # How classes are made
//! Sizes step by 8 B up to 64 B, then by an eighth of each power of two (64, 72, 80, …, 128,
//! 144, …). Each size is then *expanded* to the largest multiple of 8 that still fits the same
//! number of blocks in a slab, so a slab wastes less than 8 B per block at its tail; equal
//! sizes merge.
//!
//! # Internal fragmentation bound (tested in `tests::fragmentation_bound`)
//! - below 64 B: under 8 B per block;
//! - 64 B to 32 KiB: under 12.5% of the block;
//! - above 32 KiB a 512 KiB slab holds few blocks, and waste is bounded by the block count
//!   instead: under 15% to 64 KiB, 21% to 128 KiB, 34% to 256 KiB, and up to 50% above (a
//!   request just over 256 KiB takes a whole slab), inherent to CXLALLOC's 512 KiB slab.

/// The most classes any heap has.
pub const COUNT_CLASSES_MAX: usize = 80;
/// Largest small allocation.
pub const SIZE_SMALL_MAX: usize = 1024;
/// Largest large allocation.
pub const SIZE_LARGE_MAX: usize = 512 * 1024;
/// log2 of a small slab (64 KiB: twice CXLALLOC's 32 KiB, so the one 8-byte detectable remote
/// word per slab is 0.012% of the small heap's bytes, under the 0.02% HWcc budget).
pub const SHIFT_SMALL_SLAB: u32 = 16;
/// log2 of a large slab (512 KiB).
pub const SHIFT_LARGE_SLAB: u32 = 19;
/// Most blocks in any slab (8 B blocks in a 64 KiB small slab), and so the bits of a slab's
/// bitset.
pub const COUNT_BLOCKS_MAX: usize = 1 << (SHIFT_SMALL_SLAB - 3);

/// Which slab heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// 8 B – 1 KiB blocks in 64 KiB slabs.
    Small = 0,
    /// 1 KiB – 512 KiB blocks in 512 KiB slabs.
    Large = 1,
}

impl Kind {
    /// Both kinds, small first.
    pub const ALL: [Kind; 2] = [Kind::Small, Kind::Large];

    /// The kind's name.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Small => "small",
            Kind::Large => "large",
        }
    }
}

/// One heap's classes: block size, blocks per slab, and the reciprocal that turns a block's
/// offset in its slab into its index without a division.
#[derive(Debug)]
pub struct Classes {
    /// Block size of each class (bytes, multiple of 8, increasing).
    pub size: [u32; COUNT_CLASSES_MAX],
    /// Blocks per slab of each class.
    pub count: [u32; COUNT_CLASSES_MAX],
    /// `ceil(2^32 / size)`: `(offset * recip) >> 32 == offset / size` for block offsets.
    pub recip: [u64; COUNT_CLASSES_MAX],
    /// Classes in use.
    pub len: usize,
    /// log2 of this heap's slab size.
    pub shift_slab: u32,
}

impl Classes {
    const fn build(min: u32, max: u32, shift_slab: u32) -> Classes {
        let slab = 1u32 << shift_slab;
        let mut out = Classes {
            size: [0; COUNT_CLASSES_MAX],
            count: [0; COUNT_CLASSES_MAX],
            recip: [0; COUNT_CLASSES_MAX],
            len: 0,
            shift_slab,
        };
        let mut raw = min;
        while raw <= max {
            let blocks = slab / raw;
            let expanded = (slab / blocks) & !7;
            let fits = if expanded > max { max } else { expanded };
            if out.len == 0 || out.size[out.len - 1] != fits {
                out.size[out.len] = fits;
                out.count[out.len] = slab / fits;
                out.recip[out.len] = (1u64 << 32).div_ceil(fits as u64);
                out.len += 1;
            }
            raw = next_raw(raw);
        }
        out
    }

    /// The smallest class serving `size` bytes at alignment `align`, if this heap serves it.
    pub fn class_for(&self, size: usize, align: usize) -> Option<usize> {
        let first = self.size[..self.len].partition_point(|&s| (s as usize) < size);
        (first..self.len).find(|&c| self.size[c] as usize % align == 0)
    }

    /// The index of the block at byte `offset` of its slab (exact for block starts).
    #[inline]
    pub const fn block_index(&self, class: usize, offset: u64) -> u32 {
        ((offset * self.recip[class]) >> 32) as u32
    }
}

const fn next_raw(raw: u32) -> u32 {
    if raw < 64 {
        raw + 8
    } else {
        let pow = 1u32 << (31 - raw.leading_zeros());
        raw + pow / 8
    }
}

/// The small heap's classes: 8 B to 1 KiB in 64 KiB slabs.
pub static SMALL: Classes = SMALL_CLASSES;
const SMALL_CLASSES: Classes = Classes::build(8, SIZE_SMALL_MAX as u32, SHIFT_SMALL_SLAB);
/// The large heap's classes: just over 1 KiB to 512 KiB in 512 KiB slabs.
pub static LARGE: Classes = Classes::build(
    SIZE_SMALL_MAX as u32 + 128,
    SIZE_LARGE_MAX as u32,
    SHIFT_LARGE_SLAB,
);

/// Per small class, indexed by a `u8` so the fast paths need no bounds check: block size.
/// (These tables are `const`, not `static`: a crate that inlines a fast path then reads its own
/// copy directly instead of through the global offset table, one load less per use.)
pub const SMALL_SIZE: [u64; 256] = small_column(0);
/// Per small class: the reciprocal of the block size (see [`Classes::recip`]).
pub const SMALL_RECIP: [u64; 256] = small_column(1);
/// Per small class: blocks per slab (zero past the last class).
pub const SMALL_COUNT: [u32; 256] = small_counts();

const fn small_counts() -> [u32; 256] {
    let mut out = [0u32; 256];
    let mut c = 0;
    while c < SMALL_CLASSES.len {
        out[c] = SMALL_CLASSES.count[c];
        c += 1;
    }
    out
}

const fn small_column(which: u32) -> [u64; 256] {
    let mut out = [0u64; 256];
    let mut c = 0;
    while c < SMALL_CLASSES.len {
        out[c] = if which == 0 {
            SMALL_CLASSES.size[c] as u64
        } else {
            SMALL_CLASSES.recip[c]
        };
        c += 1;
    }
    out
}

/// Small class by `(size + 7) / 8`, for the allocation fast path (sizes 0..=1024).
pub const SMALL_BY_WORDS: [u8; SIZE_SMALL_MAX / 8 + 1] = small_lut();

const fn small_lut() -> [u8; SIZE_SMALL_MAX / 8 + 1] {
    let mut lut = [0u8; SIZE_SMALL_MAX / 8 + 1];
    let mut words = 0;
    let mut class = 0;
    while words <= SIZE_SMALL_MAX / 8 {
        while (SMALL_CLASSES.size[class] as usize) < words * 8 {
            class += 1;
        }
        lut[words] = class as u8;
        words += 1;
    }
    lut
}

/// Whether a small block's offset in its slab, times its class's reciprocal (`scaled`), was
/// a block's first byte. With `recip = (2^32 + d) / size`, `d < size`, and an offset
/// `q * size + r` under `2^SHIFT_SMALL_SLAB` (2^16), the low 32 bits are
/// `q * d + r * (2^32 + d) / size`: under `2^SHIFT_SMALL_SLAB` when `r` is 0 (`q * d` is at
/// most the offset), at least `2^32 / SIZE_SMALL_MAX = 2^22` otherwise. One compare instead
/// of a multiply back. The bound holds while `size * (2^SHIFT_SMALL_SLAB + size) <= 2^32`
/// for the largest size (then `q * d` also never carries into the block index), which the
/// assertion checks; `tests::block_start_test_is_exact_for_every_small_class_and_offset`
/// tries every offset of every class.
#[cfg(not(podkv_loom))] // the thread fast paths' helper; loom builds have none
#[inline]
pub(crate) fn is_block_start(scaled: u64) -> bool {
    const _: () = assert!(
        (SIZE_SMALL_MAX as u64) * ((1 << SHIFT_SMALL_SLAB) + SIZE_SMALL_MAX as u64) <= 1 << 32
    );
    (scaled as u32) < 1 << SHIFT_SMALL_SLAB
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(not(podkv_loom))]
    fn block_start_test_is_exact_for_every_small_class_and_offset() {
        for (class, &recip) in SMALL_RECIP.iter().enumerate().take(SMALL.len) {
            let size = u64::from(SMALL.size[class]);
            for in_slab in 0..1u64 << SHIFT_SMALL_SLAB {
                let scaled = in_slab * recip;
                assert_eq!(
                    is_block_start(scaled),
                    in_slab % size == 0,
                    "class {class} ({size} B), offset {in_slab}"
                );
                assert_eq!(scaled >> 32, in_slab / size);
            }
        }
    }

    fn all() -> [&'static Classes; 2] {
        [&SMALL, &LARGE]
    }

    #[test]
    fn classes_fit_their_slabs_and_increase() {
        for classes in all() {
            let slab = 1u64 << classes.shift_slab;
            assert!(classes.len <= COUNT_CLASSES_MAX);
            for c in 0..classes.len {
                let (size, count) = (u64::from(classes.size[c]), u64::from(classes.count[c]));
                assert_eq!(size % 8, 0);
                assert!(
                    count * size <= slab && slab - count * size < 8 * count,
                    "tail waste of class {c}"
                );
                assert!(count as usize <= COUNT_BLOCKS_MAX);
                if c > 0 {
                    assert!(classes.size[c] > classes.size[c - 1]);
                }
            }
        }
        assert_eq!(SMALL_CLASSES.size[0], 8);
        assert_eq!(
            SMALL_CLASSES.size[SMALL_CLASSES.len - 1] as usize,
            SIZE_SMALL_MAX
        );
        assert_eq!(LARGE.size[LARGE.len - 1] as usize, SIZE_LARGE_MAX);
        assert!((LARGE.size[0] as usize) > SIZE_SMALL_MAX);
    }

    #[test]
    fn reciprocal_is_exact_on_every_block_start() {
        for classes in all() {
            for c in 0..classes.len {
                for block in 0..u64::from(classes.count[c]) {
                    let offset = block * u64::from(classes.size[c]);
                    assert_eq!(u64::from(classes.block_index(c, offset)), block);
                }
            }
        }
    }

    #[test]
    fn fragmentation_bound() {
        for size in 1..=SIZE_LARGE_MAX {
            let classes = if size <= SIZE_SMALL_MAX {
                &SMALL
            } else {
                &LARGE
            };
            let class = classes
                .class_for(size, 1)
                .expect("every size up to 512 KiB is served");
            let block = classes.size[class] as usize;
            let waste = block - size;
            if size < 64 {
                assert!(waste < 8, "size {size} -> {block}");
            } else {
                let bound = match size {
                    0..=32768 => 0.125,
                    32769..=65536 => 0.15,
                    65537..=131072 => 0.21,
                    131073..=262144 => 0.34,
                    _ => 0.50,
                };
                assert!(
                    (waste as f64) < bound * block as f64,
                    "size {size} -> {block}: over {bound}"
                );
            }
        }
    }

    #[test]
    fn lookup_table_agrees_with_search() {
        for size in 0..=SIZE_SMALL_MAX {
            let by_table = SMALL_BY_WORDS[size.div_ceil(8)] as usize;
            assert_eq!(
                Some(by_table),
                SMALL_CLASSES.class_for(size.max(1), 1),
                "size {size}"
            );
        }
    }

    #[test]
    fn alignment_picks_a_multiple() {
        let c = SMALL_CLASSES.class_for(65, 64).unwrap();
        assert_eq!(SMALL_CLASSES.size[c] % 64, 0);
        assert!(SMALL_CLASSES.size[c] >= 65);
        assert_eq!(SMALL_CLASSES.class_for(8, 2048), None);
    }
}
