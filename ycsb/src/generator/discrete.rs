//! `DiscreteGenerator` as CoreWorkload uses it: the operation chooser.
//!
//! Operations with a positive proportion are added in YCSB's order (read, update,
//! insert, scan, read-modify-write; then podkv's delete); a draw `u` walks them,
//! subtracting each normalized weight until `u` falls below one.

use rand::RngCore;

use crate::op::OpKind;
use crate::rng::next_double;

/// A weighted choice among operation kinds.
///
/// Invariant: `1 <= len <= 6`; the first `len` weights are positive and sum to 1.
#[derive(Clone, Copy, Debug)]
pub struct OperationChooser {
    weights: [(f64, OpKind); 6],
    len: usize,
}

impl OperationChooser {
    /// A chooser over `(weight, kind)` pairs; pairs with weight `<= 0` are dropped.
    /// `None` when no weight is positive.
    pub fn new(pairs: &[(f64, OpKind)]) -> Option<Self> {
        let mut weights = [(0.0, OpKind::Read); 6];
        let mut len = 0;
        for &(weight, kind) in pairs.iter().filter(|(w, _)| *w > 0.0).take(6) {
            weights[len] = (weight, kind);
            len += 1;
        }
        let sum: f64 = weights[..len].iter().map(|(w, _)| w).sum();
        for pair in &mut weights[..len] {
            pair.0 /= sum;
        }
        (len > 0).then_some(Self { weights, len })
    }

    /// The next kind.
    ///
    /// Where YCSB would throw ("should not get here") after rounding leaves `u` above the
    /// last weight, this returns the last kind.
    #[inline]
    pub fn next_value<R: RngCore + ?Sized>(&self, rng: &mut R) -> OpKind {
        let mut val = next_double(rng);
        for &(weight, kind) in &self.weights[..self.len] {
            if val < weight {
                return kind;
            }
            val -= weight;
        }
        self.weights[self.len - 1].1
    }

    /// The normalized `(probability, kind)` pairs.
    pub fn weights(&self) -> &[(f64, OpKind)] {
        &self.weights[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::worker_rng;

    #[test]
    fn proportions_are_normalized_and_held() {
        let chooser = OperationChooser::new(&[
            (2.0, OpKind::Read),
            (0.0, OpKind::Update),
            (2.0, OpKind::Scan),
        ])
        .unwrap();
        assert_eq!(chooser.weights().len(), 2);
        let mut rng = worker_rng(0, 1, 0);
        let n = 100_000;
        let reads = (0..n)
            .filter(|_| chooser.next_value(&mut rng) == OpKind::Read)
            .count();
        assert!((reads as f64 / n as f64 - 0.5).abs() < 0.006);
    }

    #[test]
    fn all_zero_is_refused() {
        assert!(OperationChooser::new(&[(0.0, OpKind::Read)]).is_none());
    }
}
