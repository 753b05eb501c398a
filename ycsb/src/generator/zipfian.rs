//! `ZipfianGenerator`: Gray et al., "Quickly Generating Billion-Record Synthetic
//! Databases" (SIGMOD '94), as YCSB implements it.
//!
//! # The algorithm
//!
//! Item `i` (0-based) should be drawn with probability `1 / ((i+1)^theta * zeta(n))`,
//! where `zeta(n) = sum_{k=1..n} k^-theta`. With `u` uniform in `[0, 1)`:
//! `u * zeta(n) < 1` gives item 0, `< 1 + 0.5^theta` gives item 1 (both exact), and
//! otherwise `n * (eta*u - eta + 1)^alpha` (an approximation for the tail), where
//! `alpha = 1 / (1 - theta)` and `eta = (1 - (2/n)^(1-theta)) / (1 - zeta(2)/zeta(n))`.
//!
//! # Growing the item count
//!
//! `next_long(itemcount)` may be asked for more items than zeta was computed for. Then
//! zeta is extended incrementally from `count_for_zeta` to `itemcount` (one `powf` per
//! new item), as YCSB does. A smaller item count keeps the old zeta (YCSB's
//! `allowitemcountdecrease = false`).
//!
//! YCSB quirk kept: after growth, `eta` is recomputed with the *construction-time*
//! `items`, not the new item count (`(1 - Math.pow(2.0 / items, 1 - theta))`).
//!
//! YCSB's constructor draws one value and throws it away; with an explicit RNG that draw
//! would only shift the sequence, so it is not made.
//!
//! # The tail's power
//!
//! `floor(itemcount * pow(x, alpha))` comes from [`Power`], which gives libm's result
//! (it asks libm when it cannot be sure) at a third of the cost.

use std::sync::Arc;

use rand::RngCore;

use super::power::Power;

use crate::rng::next_double;

/// YCSB's `ZIPFIAN_CONSTANT`.
pub const THETA_DEFAULT: f64 = 0.99;

/// A zipfian distribution over `[base, base + items)`, item `base` the most popular.
///
/// Invariant: `zetan == zeta_static(count_for_zeta, theta)` up to rounding, unless the
/// generator was built with a precomputed zeta ([`Zipfian::with_zetan`]).
#[derive(Clone, Debug)]
pub struct Zipfian {
    /// Items at construction; used by `next_value` and, as in YCSB, in `eta` forever.
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    /// `0.5^theta`, hoisted out of the draw (YCSB computes it on every call).
    half_pow_theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// `eta`'s numerator, `1 - (2 / items)^(1 - theta)`: fixed by the construction-time
    /// `items`, so computed once (YCSB recomputes it, one `pow`, on every growth).
    eta_numerator: f64,
    /// The item count `zetan` was last computed for.
    count_for_zeta: u64,
    /// `x^alpha` by table, shared by the clones; `None` for an alpha it does not serve.
    power: Option<Arc<Power>>,
}

impl Zipfian {
    /// Items `0..items` with theta 0.99 (`ZipfianGenerator(long items)`).
    pub fn new(items: u64) -> Self {
        Self::with_zetan(0, items, THETA_DEFAULT, zeta_static(items, THETA_DEFAULT))
    }

    /// Items `min..=max` with theta 0.99 (`ZipfianGenerator(long min, long max)`).
    pub fn with_range(min: u64, max: u64) -> Self {
        Self::with_theta(min, max, THETA_DEFAULT)
    }

    /// Items `min..=max` with zipfian constant `theta`.
    pub fn with_theta(min: u64, max: u64, theta: f64) -> Self {
        let items = max - min + 1;
        Self::with_zetan(min, items, theta, zeta_static(items, theta))
    }

    /// Items `base..base + items` with a precomputed `zetan`
    /// (`ZipfianGenerator(min, max, zipfianconstant, zetan)` with `items = max - min + 1`).
    pub fn with_zetan(base: u64, items: u64, theta: f64, zetan: f64) -> Self {
        let zeta2theta = zeta_static(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let mut zipfian = Self {
            items,
            base,
            theta,
            zeta2theta,
            half_pow_theta: 0.5f64.powf(theta),
            alpha,
            zetan,
            eta: 0.0,
            eta_numerator: 1.0 - (2.0 / items as f64).powf(1.0 - theta),
            count_for_zeta: items,
            power: Power::new(alpha).map(Arc::new),
        };
        zipfian.eta = zipfian.eta_for(zetan);
        zipfian
    }

    /// The next item from the construction-time item count.
    #[inline(always)]
    pub fn next_value<R: RngCore + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.next_long(self.items, rng)
    }

    /// The next item from `itemcount` items, extending zeta first if `itemcount` grew.
    #[inline(always)]
    pub fn next_long<R: RngCore + ?Sized>(&mut self, itemcount: u64, rng: &mut R) -> u64 {
        if itemcount > self.count_for_zeta {
            self.grow_to(itemcount);
        }
        let u = next_double(rng);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + self.half_pow_theta {
            return self.base + 1;
        }
        let (n, x) = (to_f64(itemcount), self.eta * u - self.eta + 1.0);
        let tail = self
            .power
            .as_ref()
            .and_then(|power| power.floor_scaled(n, x));
        self.base + tail.unwrap_or_else(|| self.tail_libm(n, x))
    }

    /// YCSB's tail, `n * pow(x, alpha)`, with libm's `pow` (the slow path).
    #[cold]
    fn tail_libm(&self, n: f64, x: f64) -> u64 {
        to_u64(n * x.powf(self.alpha))
    }

    /// The zeta currently in use.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The item count the current zeta was computed for.
    pub fn count_for_zeta(&self) -> u64 {
        self.count_for_zeta
    }

    /// The zipfian constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// Extends zeta from `count_for_zeta` items to `itemcount` items (the slow path).
    #[cold]
    fn grow_to(&mut self, itemcount: u64) {
        self.zetan = zeta_incremental(self.count_for_zeta, itemcount, self.theta, self.zetan);
        self.count_for_zeta = itemcount;
        self.eta = self.eta_for(self.zetan);
    }

    fn eta_for(&self, zetan: f64) -> f64 {
        self.eta_numerator / (1.0 - self.zeta2theta / zetan)
    }
}

/// `x as u64` (negative and NaN to 0, too large to `u64::MAX`), with the usual case —
/// `0 <= x < 2^63` — on the one-instruction signed conversion, which gives the same value
/// there.
#[inline(always)]
fn to_u64(x: f64) -> u64 {
    const TWO_POW_63: f64 = (1u64 << 63) as f64;
    if (0.0..TWO_POW_63).contains(&x) {
        x as i64 as u64
    } else {
        x as u64
    }
}

/// `x as f64`, with the usual case — `x < 2^63` — on the one-instruction signed
/// conversion, which gives the same value there.
#[inline(always)]
fn to_f64(x: u64) -> f64 {
    match i64::try_from(x) {
        Ok(signed) => signed as f64,
        Err(_) => x as f64,
    }
}

/// `zeta(n) = sum_{i=0..n} 1 / (i+1)^theta`, from scratch (`zetastatic(n, theta)`).
pub fn zeta_static(n: u64, theta: f64) -> f64 {
    zeta_incremental(0, n, theta, 0.0)
}

/// Extends `initial_sum`, the zeta of `st` items, to the zeta of `n` items
/// (`zetastatic(st, n, theta, initialsum)`).
pub fn zeta_incremental(st: u64, n: u64, theta: f64, initial_sum: f64) -> f64 {
    let mut sum = initial_sum;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{next_double, worker_rng};

    fn relative(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs()
    }

    #[test]
    fn to_u64_is_as() {
        let edges = [
            -1.0,
            -0.0,
            0.0,
            0.5,
            1.0,
            1e10,
            9.2e18,
            9.223_372_036_854_775e18,
            2f64.powi(63),
            2f64.powi(64),
            1e300,
            f64::INFINITY,
            f64::NAN,
        ];
        for x in edges {
            assert_eq!(to_u64(x), x as u64, "{x}");
        }
    }

    #[test]
    fn to_f64_is_as() {
        for x in [
            0,
            1,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
        ] {
            assert_eq!(to_f64(x).to_bits(), (x as f64).to_bits(), "{x}");
        }
    }

    #[test]
    fn zeta_of_two_is_one_plus_half_to_theta() {
        assert!(relative(zeta_static(2, 0.99), 1.0 + 0.5f64.powf(0.99)) < 1e-15);
    }

    #[test]
    fn incremental_zeta_equals_recomputed_zeta_after_growth() {
        let mut zipfian = Zipfian::new(1_000);
        let mut rng = worker_rng(0, 0, 0);
        for itemcount in [1_000, 1_500, 1_501, 40_000] {
            zipfian.next_long(itemcount, &mut rng);
            assert_eq!(zipfian.count_for_zeta(), itemcount);
            let fresh = zeta_static(itemcount, THETA_DEFAULT);
            assert!(relative(zipfian.zetan(), fresh) < 1e-12, "{itemcount}");
        }
    }

    /// YCSB's draw as written, libm `pow` and all.
    fn draw_with_libm(z: &Zipfian, itemcount: u64, u: f64) -> u64 {
        let uz = u * z.zetan;
        if uz < 1.0 {
            return z.base;
        }
        if uz < 1.0 + 0.5f64.powf(z.theta) {
            return z.base + 1;
        }
        z.base + (itemcount as f64 * (z.eta * u - z.eta + 1.0).powf(z.alpha)) as u64
    }

    #[test]
    fn draws_are_those_of_the_libm_formula() {
        // The scrambled zipfian's 10^10 items with YCSB's zeta (summing it takes minutes).
        let big = Zipfian::with_zetan(7, 10_000_000_001, 0.99, 26.469_028_201_783_02);
        let cases = [
            big,
            Zipfian::with_theta(7, 2_000_006, 0.99),
            Zipfian::with_theta(7, 1_006, 0.99),
            Zipfian::with_theta(7, 5_006, 0.5),
        ];
        for mut zipfian in cases {
            let items = zipfian.items;
            let mut rng = worker_rng(5, 0, 0);
            for i in 0..100_000u64 {
                let itemcount = items + i / 1_000;
                let mut twin = rng.clone();
                let v = zipfian.next_long(itemcount, &mut rng);
                let expected = draw_with_libm(&zipfian, itemcount, next_double(&mut twin));
                assert_eq!(v, expected, "{items} items, draw {i}");
            }
        }
    }

    #[test]
    fn smaller_item_count_keeps_zeta() {
        let mut zipfian = Zipfian::new(1_000);
        let before = zipfian.zetan();
        let mut rng = worker_rng(0, 0, 0);
        let v = zipfian.next_long(10, &mut rng);
        assert_eq!(zipfian.zetan(), before);
        assert!(v < 1_000);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut zipfian = Zipfian::with_range(100, 199);
        let mut rng = worker_rng(1, 0, 0);
        for _ in 0..20_000 {
            let v = zipfian.next_value(&mut rng);
            assert!((100..=199).contains(&v), "{v}");
        }
    }

    proptest::proptest! {
        #[test]
        fn incremental_matches_static(st in 0u64..2_000, extra in 0u64..2_000, theta in 0.1f64..0.999) {
            let n = st + extra;
            let stepwise = zeta_incremental(st, n, theta, zeta_static(st, theta));
            proptest::prop_assert!(relative(stepwise, zeta_static(n, theta)) < 1e-12);
        }
    }
}
