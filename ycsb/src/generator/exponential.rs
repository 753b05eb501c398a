//! `ExponentialGenerator`: `-ln(u) / gamma`, with gamma given by a mean or by YCSB's
//! percentile/range pair ("`percentile`% of draws fall below `range`").

use rand::RngCore;

use crate::rng::next_double;

/// YCSB's default `exponential.percentile`.
pub const PERCENTILE_DEFAULT: f64 = 95.0;

/// YCSB's default `exponential.frac` (the comment in YCSB says 1/7; the value is 6/7).
pub const FRAC_DEFAULT: f64 = 0.857_142_857_1;

/// An exponential distribution with rate `gamma`.
#[derive(Clone, Copy, Debug)]
pub struct Exponential {
    gamma: f64,
}

impl Exponential {
    /// Mean `mean` (YCSB's `ExponentialGenerator(double mean)`).
    pub fn with_mean(mean: f64) -> Self {
        Self { gamma: 1.0 / mean }
    }

    /// `percentile` percent of draws below `range`:
    /// `gamma = -ln(1 - percentile/100) / range`.
    pub fn with_percentile(percentile: f64, range: f64) -> Self {
        Self {
            gamma: -(1.0 - percentile / 100.0).ln() / range,
        }
    }

    /// The next draw, in `[0, inf]` (`inf` when `u` is exactly 0, as in Java).
    #[inline]
    pub fn next_value<R: RngCore + ?Sized>(&self, rng: &mut R) -> f64 {
        -next_double(rng).ln() / self.gamma
    }

    /// `1 / gamma`.
    pub fn mean(&self) -> f64 {
        1.0 / self.gamma
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::worker_rng;

    /// YCSB's own `main`: 90% of draws below 100.
    #[test]
    fn percentile_holds() {
        let gen = Exponential::with_percentile(90.0, 100.0);
        let mut rng = worker_rng(5, 0, 0);
        let n = 100_000;
        let below = (0..n).filter(|_| gen.next_value(&mut rng) < 100.0).count();
        let frac = below as f64 / n as f64;
        assert!((frac - 0.90).abs() < 0.005, "{frac}");
    }

    #[test]
    fn mean_holds() {
        let gen = Exponential::with_mean(50.0);
        let mut rng = worker_rng(6, 0, 0);
        let n = 100_000;
        let sum: f64 = (0..n).map(|_| gen.next_value(&mut rng)).sum();
        assert!((sum / n as f64 - 50.0).abs() < 1.0);
        assert!((gen.mean() - 50.0).abs() < 1e-12);
    }
}
