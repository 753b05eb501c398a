//! `ScrambledZipfianGenerator`: a zipfian over a fixed, huge item space (10^10), each
//! draw scattered with FNV-64 and folded into `[min, max]`.
//!
//! Because the inner item space never changes, the popular items stay popular when the
//! requested range grows, and zeta is a constant: YCSB's `ZETAN` = 26.46902820178302,
//! zeta of 10^10 items at theta 0.99. (YCSB builds the inner generator as
//! `ZipfianGenerator(0, ITEM_COUNT, …)`, i.e. over `ITEM_COUNT + 1` items with the zeta of
//! `ITEM_COUNT`; that off-by-one is kept.)
//!
//! Only theta 0.99 is offered, as in YCSB, whose other-theta constructor is commented out:
//! any other theta needs zeta summed over 10^10 terms.

use rand::RngCore;

use super::modulo::Modulus;
use super::zipfian::{Zipfian, THETA_DEFAULT};
use crate::fnv::fnvhash64;

/// YCSB's precomputed zeta of [`ITEM_COUNT`] items at theta 0.99.
pub const ZETAN: f64 = 26.469_028_201_783_02;

/// YCSB's inner item space (`ITEM_COUNT = 10000000000L` in 0.17).
pub const ITEM_COUNT: u64 = 10_000_000_000;

/// A scrambled zipfian over `[min, max]`.
///
/// Invariant: `itemcount == max - min + 1 >= 1`.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    gen: Zipfian,
    min: u64,
    itemcount: u64,
    /// `itemcount`, for the reduction.
    modulus: Modulus,
}

impl ScrambledZipfian {
    /// Items `min..=max`; `None` when the range is empty.
    pub fn new(min: u64, max: u64) -> Option<Self> {
        let itemcount = max.checked_sub(min)?.checked_add(1)?;
        let gen = Zipfian::with_zetan(0, ITEM_COUNT + 1, THETA_DEFAULT, ZETAN);
        Some(Self {
            gen,
            min,
            itemcount,
            modulus: Modulus::new(itemcount)?,
        })
    }

    /// The next item: `min + fnvhash64(zipfian) % itemcount`.
    ///
    /// The hash is taken as unsigned, which differs from Java only for the one hash value
    /// that Java's `Math.abs` leaves negative.
    #[inline(always)]
    pub fn next_value<R: RngCore + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let rank = self.gen.next_value(rng);
        self.min + self.modulus.reduce(fnvhash64(rank as i64) as u64)
    }

    /// The middle of the range (YCSB assumes the scramble is uniform).
    pub fn mean(&self) -> f64 {
        self.min as f64 + (self.itemcount - 1) as f64 / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::worker_rng;

    /// Euler–Maclaurin for `sum_{k=1..n} k^-theta`: the first `m` terms exactly, then the
    /// integral, the half end-point terms and the first derivative correction.
    fn zeta_euler_maclaurin(n: f64, theta: f64) -> f64 {
        let m = 10_000.0f64;
        let head = super::super::zipfian::zeta_static(m as u64, theta);
        let f = |x: f64| x.powf(-theta);
        let df = |x: f64| -theta * x.powf(-theta - 1.0);
        let integral = (n.powf(1.0 - theta) - m.powf(1.0 - theta)) / (1.0 - theta);
        head + integral + (f(n) - f(m)) / 2.0 + (df(n) - df(m)) / 12.0
    }

    #[test]
    fn zetan_is_zeta_of_ten_to_the_ten() {
        let estimate = zeta_euler_maclaurin(ITEM_COUNT as f64, THETA_DEFAULT);
        assert!((estimate - ZETAN).abs() < 1e-9, "{estimate} vs {ZETAN}");
    }

    #[test]
    fn most_popular_item_is_the_hash_of_rank_zero() {
        let mut gen = ScrambledZipfian::new(0, 999).unwrap();
        let mut rng = worker_rng(2, 0, 0);
        let n = 200_000;
        let mut counts = vec![0u32; 1000];
        for _ in 0..n {
            let v = gen.next_value(&mut rng);
            counts[v as usize] += 1;
        }
        let hot = (fnvhash64(0) as u64 % 1000) as usize;
        let top = counts
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| **c)
            .unwrap()
            .0;
        assert_eq!(top, hot);
        // P(rank 0) = 1 / ZETAN, plus the few other ranks that fold onto the same item.
        let frac = f64::from(counts[hot]) / f64::from(n);
        assert!(
            (1.0 / ZETAN - 0.003..1.0 / ZETAN + 0.01).contains(&frac),
            "{frac}"
        );
    }

    #[test]
    fn empty_range_is_refused() {
        assert!(ScrambledZipfian::new(3, 2).is_none());
    }
}
