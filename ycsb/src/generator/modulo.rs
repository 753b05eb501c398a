//! `a % d` for a divisor fixed at construction, without a division instruction.
//!
//! Lemire, Kaser and Kurz, "Faster Remainder by Direct Computation" (2019): with
//! `M = ⌈2^128 / d⌉`, `a % d = ⌊((M · a) mod 2^128) · d / 2^128⌋` for every 64-bit `a`
//! and `d ≥ 1`. Four multiplies instead of a 64-bit `div` (tens of cycles); the key
//! choosers reduce every draw modulo their interval, so this is on the per-op path.

/// A divisor and its precomputed inverse.
///
/// Invariant: `d >= 1` and `m == (u128::MAX / d) + 1` (wrapping: 0 when `d == 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modulus {
    d: u64,
    m: u128,
}

impl Modulus {
    /// The modulus `d`; `None` for 0.
    pub fn new(d: u64) -> Option<Self> {
        (d > 0).then(|| Self {
            d,
            m: (u128::MAX / u128::from(d)).wrapping_add(1),
        })
    }

    /// The divisor.
    pub fn divisor(&self) -> u64 {
        self.d
    }

    /// `a % d`.
    #[inline]
    pub fn reduce(&self, a: u64) -> u64 {
        let low = self.m.wrapping_mul(u128::from(a));
        let d = u128::from(self.d);
        let bottom = ((low as u64 as u128) * d) >> 64;
        let top = (low >> 64) * d;
        ((bottom + top) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_match_the_remainder() {
        let divisors = [
            1,
            2,
            3,
            7,
            10,
            1000,
            1 << 32,
            (1 << 32) + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        let values = [
            0,
            1,
            2,
            999,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
            6_284_781_860_667_377_211,
        ];
        for d in divisors {
            let m = Modulus::new(d).unwrap();
            for a in values {
                assert_eq!(m.reduce(a), a % d, "{a} % {d}");
            }
        }
        assert!(Modulus::new(0).is_none());
    }

    proptest::proptest! {
        #[test]
        fn matches_the_remainder(a in proptest::num::u64::ANY, d in 1u64..) {
            proptest::prop_assert_eq!(Modulus::new(d).unwrap().reduce(a), a % d);
        }

        #[test]
        fn matches_small_divisors(a in proptest::num::u64::ANY, d in 1u64..100_000) {
            proptest::prop_assert_eq!(Modulus::new(d).unwrap().reduce(a), a % d);
        }
    }
}
