//! `HotspotIntegerGenerator`: a fraction `hot_opn_fraction` of draws fall uniformly in the
//! hot set, the lowest `hotset_fraction` of `[lower, upper]`; the rest fall uniformly in
//! the cold remainder.
//!
//! YCSB replaces an out-of-range fraction by 0.0 with a warning and swaps reversed
//! bounds; this port refuses both with an error. YCSB's `(int)` cast of the hot interval
//! is kept (saturating at `i32::MAX`, as Java's cast does).

use rand::RngCore;

use crate::error::YcsbError;
use crate::rng::{next_abs_long, next_double};

/// A hotspot distribution over `[lower, upper]`.
///
/// Invariants: `hot_interval + cold_interval == upper - lower + 1`; `hot_interval > 0`
/// if `hot_opn_fraction > 0`; `cold_interval > 0` if `hot_opn_fraction < 1`.
#[derive(Clone, Copy, Debug)]
pub struct Hotspot {
    lower: u64,
    hot_interval: u64,
    cold_interval: u64,
    hot_opn_fraction: f64,
}

impl Hotspot {
    /// A hotspot over `[lower, upper]`.
    pub fn new(
        lower: u64,
        upper: u64,
        hotset_fraction: f64,
        hot_opn_fraction: f64,
    ) -> Result<Self, YcsbError> {
        check_fraction("hotspotdatafraction", hotset_fraction)?;
        check_fraction("hotspotopnfraction", hot_opn_fraction)?;
        if upper < lower {
            return Err(YcsbError::Inconsistent(format!(
                "hotspot range is empty ({lower}..={upper})"
            )));
        }
        let interval = upper - lower + 1;
        let hot_interval = (interval as f64 * hotset_fraction) as i32 as u64;
        let hotspot = Self {
            lower,
            hot_interval,
            cold_interval: interval - hot_interval,
            hot_opn_fraction,
        };
        hotspot.check_sets()?;
        Ok(hotspot)
    }

    /// The next value.
    #[inline]
    pub fn next_value<R: RngCore + ?Sized>(&self, rng: &mut R) -> u64 {
        if next_double(rng) < self.hot_opn_fraction {
            self.lower + next_abs_long(rng) % self.hot_interval
        } else {
            self.lower + self.hot_interval + next_abs_long(rng) % self.cold_interval
        }
    }

    /// Number of items in the hot set (`[lower, lower + hot_interval)`).
    pub fn hot_interval(&self) -> u64 {
        self.hot_interval
    }

    /// The mean, as YCSB computes it.
    pub fn mean(&self) -> f64 {
        let lower = self.lower as f64;
        let hot = self.hot_interval as f64;
        let cold = self.cold_interval as f64;
        self.hot_opn_fraction * (lower + hot / 2.0)
            + (1.0 - self.hot_opn_fraction) * (lower + hot + cold / 2.0)
    }

    fn check_sets(&self) -> Result<(), YcsbError> {
        if self.hot_interval == 0 && self.hot_opn_fraction > 0.0 {
            return Err(YcsbError::Inconsistent(
                "hotspot: the hot set is empty but some operations go to it".into(),
            ));
        }
        if self.cold_interval == 0 && self.hot_opn_fraction < 1.0 {
            return Err(YcsbError::Inconsistent(
                "hotspot: the cold set is empty but some operations go to it".into(),
            ));
        }
        Ok(())
    }
}

fn check_fraction(key: &str, value: f64) -> Result<(), YcsbError> {
    if (0.0..=1.0).contains(&value) {
        return Ok(());
    }
    Err(YcsbError::InvalidValue {
        key: key.into(),
        value: value.to_string(),
        expected: "a fraction in [0, 1]",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::worker_rng;

    #[test]
    fn hot_fraction_of_draws_land_in_hot_set() {
        let gen = Hotspot::new(1000, 1999, 0.2, 0.8).unwrap();
        assert_eq!(gen.hot_interval(), 200);
        let mut rng = worker_rng(4, 0, 0);
        let n = 100_000;
        let mut hot = 0;
        for _ in 0..n {
            let v = gen.next_value(&mut rng);
            assert!((1000..=1999).contains(&v));
            hot += usize::from(v < 1200);
        }
        let frac = hot as f64 / n as f64;
        assert!((frac - 0.8).abs() < 0.006, "{frac}");
    }

    #[test]
    fn bad_fractions_and_empty_sets_are_refused() {
        assert!(Hotspot::new(0, 9, 1.5, 0.8).is_err());
        assert!(Hotspot::new(0, 9, 0.2, -0.1).is_err());
        assert!(Hotspot::new(0, 9, 0.0, 0.8).is_err());
        assert!(Hotspot::new(0, 9, 1.0, 0.8).is_err());
        assert!(Hotspot::new(9, 0, 0.2, 0.8).is_err());
        assert!(Hotspot::new(0, 9, 1.0, 1.0).is_ok());
    }
}
