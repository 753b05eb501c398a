//! `UniformLongGenerator`: `Math.abs(nextLong()) % interval + lb`, modulo bias and all.

use rand::RngCore;

use super::modulo::Modulus;
use crate::rng::next_abs_long;

/// Uniform over `[lb, ub]`, both inclusive.
///
/// Invariant: `interval == ub - lb + 1 >= 1`.
#[derive(Clone, Copy, Debug)]
pub struct UniformLong {
    lb: u64,
    interval: u64,
    /// `interval`, for the reduction.
    modulus: Modulus,
}

impl UniformLong {
    /// Uniform over `[lb, ub]`; `None` when the interval is empty (`ub < lb`).
    pub fn new(lb: u64, ub: u64) -> Option<Self> {
        let interval = ub.checked_sub(lb)?.checked_add(1)?;
        Some(Self {
            lb,
            interval,
            modulus: Modulus::new(interval)?,
        })
    }

    /// The next value.
    #[inline]
    pub fn next_value<R: RngCore + ?Sized>(&self, rng: &mut R) -> u64 {
        self.modulus.reduce(next_abs_long(rng)) + self.lb
    }

    /// `(lb + ub) / 2`.
    pub fn mean(&self) -> f64 {
        self.lb as f64 + (self.interval - 1) as f64 / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::worker_rng;

    #[test]
    fn stays_in_bounds_and_covers_them() {
        let gen = UniformLong::new(10, 14).unwrap();
        let mut rng = worker_rng(0, 0, 0);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            let v = gen.next_value(&mut rng);
            assert!((10..=14).contains(&v));
            seen[(v - 10) as usize] += 1;
        }
        for count in seen {
            assert!((1800..2200).contains(&count), "{seen:?}");
        }
        assert_eq!(gen.mean(), 12.0);
    }

    #[test]
    fn empty_interval_is_refused() {
        assert!(UniformLong::new(5, 4).is_none());
        assert!(UniformLong::new(5, 5).is_some());
    }
}
