//! `SkewedLatestGenerator`: zipfian distance back from the newest record, so recent
//! records are the popular ones (YCSB workload D's `latest`).
//!
//! `next = max - zipfian.next_long(max)` with `max = basis.last_value()`. The zipfian is
//! built over the basis's value at construction and grows its zeta incrementally as
//! records are acknowledged. YCSB quirk kept: the distance back is drawn from `max` items
//! (`0..max`), not `max + 1`, so record 0 is never chosen once `max > 0`.

use std::sync::Arc;

use rand::RngCore;

use super::counter::Basis;
use super::zipfian::Zipfian;

/// A zipfian skewed toward the newest record of `B`.
#[derive(Debug)]
pub struct SkewedLatest<B> {
    basis: Arc<B>,
    zipfian: Zipfian,
}

impl<B> Clone for SkewedLatest<B> {
    fn clone(&self) -> Self {
        Self {
            basis: Arc::clone(&self.basis),
            zipfian: self.zipfian.clone(),
        }
    }
}

impl<B: Basis> SkewedLatest<B> {
    /// Skewed toward `basis`'s latest value (zeta computed now, over that many items).
    pub fn new(basis: Arc<B>) -> Self {
        let items = basis.last_value().max(0) as u64;
        Self {
            basis,
            zipfian: Zipfian::new(items),
        }
    }

    /// The next record number, in `(max - itemcount, max]`; `max` when only one exists.
    #[inline]
    pub fn next_value<R: RngCore + ?Sized>(&mut self, rng: &mut R) -> i64 {
        let max = self.basis.last_value();
        let back = self.zipfian.next_long(max.max(0) as u64, rng);
        max - back as i64
    }

    /// The zipfian underneath (for its zeta).
    pub fn zipfian(&self) -> &Zipfian {
        &self.zipfian
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::counter::AcknowledgedCounter;
    use crate::generator::zipfian::zeta_static;
    use crate::rng::worker_rng;

    #[test]
    fn newest_is_most_popular_and_follows_acks() {
        let basis = Arc::new(AcknowledgedCounter::new(1000));
        let mut gen = SkewedLatest::new(Arc::clone(&basis));
        let mut rng = worker_rng(9, 0, 0);
        let n = 100_000;
        let newest = (0..n).filter(|_| gen.next_value(&mut rng) == 999).count();
        let expect = 1.0 / zeta_static(999, 0.99);
        let frac = newest as f64 / n as f64;
        assert!((frac - expect).abs() < 0.005, "{frac} vs {expect}");

        for _ in 0..500 {
            let v = basis.next_value();
            basis.acknowledge(v).unwrap();
        }
        let draws: Vec<i64> = (0..10_000).map(|_| gen.next_value(&mut rng)).collect();
        assert!(draws.iter().all(|v| (1..=1499).contains(v)));
        assert!(draws.iter().filter(|v| **v == 1499).count() > 1_000);
        assert_eq!(gen.zipfian().count_for_zeta(), 1499);
    }
}
