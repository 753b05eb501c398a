//! `floor(n * x^alpha)` for the zipfian tail, equal to what libm's `pow` gives, at a
//! third of its cost.
//!
//! # Why
//!
//! Every zipfian draw past the two head items computes `floor(n * pow(x, alpha))`
//! (alpha = 100 at YCSB's theta 0.99). libm's `pow` is correct to ~0.52 ulp and costs
//! ~30 ns; only the floor matters, and the streams must stay exactly as libm makes them.
//!
//! # How
//!
//! For `x` in `[0.5, 1)`, the top `BITS_INDEX` mantissa bits pick a cell whose middle
//! `c` is exact (those bits, then a one). With `r = (x - c) / c`, `|r| <= 2^-12`:
//!
//! `x^alpha = c^alpha * (1 + r)^alpha = c^alpha * sum_k binom(alpha, k) r^k`,
//!
//! `c^alpha` from a table built with libm's `pow` itself, the binomial series cut after
//! `r^7` and evaluated in Estrin's scheme (a short dependency chain, no `log`/`exp`).
//! Then `y = n * p` is trusted only when it lies farther than `y * MARGIN` from every
//! integer: then libm's `n * pow(x, alpha)` lies in the same unit interval and has the
//! same floor. Otherwise (or outside the table's domain) libm decides.
//!
//! # Error bound (relative, against the exact `x^alpha`)
//!
//! - `x - c` is exact (same binade, within 2^-13); `r` carries two roundings, 2^-52,
//!   which moves `(1 + r)^alpha` by `alpha |r| 2^-52 <= 2^-57` (alpha <= [`ALPHA_MAX`]);
//! - the series tail: `(alpha |r|)^8 / 8! <= (2^-5)^8 / 40320 < 2^-55`;
//! - its evaluation, a sum near 1 of eight terms each correct to an ulp: `< 2^-50`;
//! - `c^alpha` from libm: `< 2^-52`; the final product: `2^-53`.
//!
//! So `p` is within `2^-49` of `x^alpha`, libm's within `2^-52`, and after the
//! products by `n` (libm's `n * pow`; here `n * c^alpha` first, then the series, the
//! same two roundings as `n * p`) the two `y` differ by less than `y * 2^-48`.
//! `MARGIN` is `2^-42`, 64 times that; the tests measure `p` against libm directly (and
//! require under 2^-49.5). The margin sends under 1% of draws to libm (the tests bound
//! it).

/// Mantissa bits that index the table: 2048 cells of `[0.5, 1)` (32 KiB; the draws of
/// theta 0.99 touch the top ~40%), each `2^-12` wide, so `|r| <= 2^-13 / 0.5 = 2^-12`.
const BITS_INDEX: u32 = 11;

/// Cells in the table.
const COUNT_CELLS: usize = 1 << BITS_INDEX;

/// Largest exponent served: keeps `alpha |r| <= 2^-5`, where the series cut after `r^7`
/// is within 2^-55. YCSB's theta 0.99 gives alpha = 100.
pub const ALPHA_MAX: f64 = 128.0;

/// Coefficients of the series kept (`r^0` to `r^7`).
const COUNT_TERMS: usize = 8;

/// How far from an integer `n * p` must lie, relative to itself, to be trusted.
const MARGIN: f64 = 1.0 / (1u64 << 42) as f64;

/// Largest `y` served: below 2^52 every double's floor is exact and fits a `u64`.
const Y_MAX: f64 = (1u64 << 52) as f64;

/// The biased exponent of doubles in `[0.5, 1)`.
const EXPONENT_HALF: u64 = 1022;

/// `x^alpha` on `[0.5, 1)` for one `alpha`: per cell `1 / c` and `c^alpha`.
///
/// Invariant: `cells[i] == [1 / c_i, pow(c_i, alpha)]` with `c_i` `cell_middle(i)`,
/// and `series[k] == binom(alpha, k)` (rounded).
pub struct Power {
    alpha: f64,
    /// A fixed-size array: indexing it by a masked index needs no bounds check.
    cells: Box<[[f64; 2]; COUNT_CELLS]>,
    series: [f64; COUNT_TERMS],
}

impl Power {
    /// The table for `alpha`; `None` outside `(0, ALPHA_MAX]` (libm serves those).
    pub fn new(alpha: f64) -> Option<Self> {
        if !(alpha > 0.0 && alpha <= ALPHA_MAX) {
            return None;
        }
        let mut cells = Box::new([[0.0; 2]; COUNT_CELLS]);
        for (i, cell) in cells.iter_mut().enumerate() {
            let c = cell_middle(i as u64);
            *cell = [1.0 / c, c.powf(alpha)];
        }
        let mut series = [0.0; COUNT_TERMS];
        let mut binom = 1.0;
        for (k, term) in series.iter_mut().enumerate() {
            *term = binom;
            binom *= (alpha - k as f64) / (k + 1) as f64;
        }
        Some(Self {
            alpha,
            cells,
            series,
        })
    }

    /// The exponent.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// `floor(n * pow(x, alpha))` exactly as libm computes it, or `None` when this
    /// cannot tell (then the caller asks libm).
    ///
    /// `n` multiplies the table's `c^alpha` while the series is evaluated, so it is off
    /// the chain of dependent operations (`y = (n * c^alpha) * series`, two roundings as
    /// in `n * (c^alpha * series)`; see the module doc's bound).
    #[inline(always)]
    pub fn floor_scaled(&self, n: f64, x: f64) -> Option<u64> {
        let (c_pow, series) = self.parts(x)?;
        let y = (n * c_pow) * series;
        #[expect(
            clippy::neg_cmp_op_on_partial_ord,
            reason = "one compare that also sends NaN to libm; `is_nan() || >=` is two"
        )]
        let outside = !(y < Y_MAX);
        if outside {
            return None;
        }
        // A signed conversion without saturation: one instruction (the unsigned and
        // saturating ones are branchy).
        // SAFETY: `0 <= y < 2^52` (checked above; `n * c_pow` and the series are
        // positive or NaN), so `y` truncates to an i64.
        let floor = unsafe { y.to_int_unchecked::<i64>() };
        // `below` is exact (Sterbenz). `1 - below` is `floor + 1 - y` exactly whenever
        // the test can go either way: for `below >= 0.5` by Sterbenz, and for `y >=
        // 2^41` (the only `y` whose margin reaches 0.5) because `below` then has at most
        // 11 fractional bits; otherwise both are above 0.5 and the margin below it.
        let below = y - floor as f64;
        let above = 1.0 - below;
        let margin = y * MARGIN;
        (below > margin && above > margin).then_some(floor as u64)
    }

    /// `x^alpha` within 2^-49 (see the module doc); `None` outside `[0.5, 1)`.
    #[inline(always)]
    pub fn pow(&self, x: f64) -> Option<f64> {
        self.parts(x).map(|(c_pow, series)| c_pow * series)
    }

    /// `(c^alpha, (1 + r)^alpha)` for `x` in the cell of middle `c`; their product is
    /// `x^alpha`.
    #[inline(always)]
    fn parts(&self, x: f64) -> Option<(f64, f64)> {
        let bits = x.to_bits();
        if bits >> 52 != EXPONENT_HALF {
            return None;
        }
        let index = (bits >> (52 - BITS_INDEX)) & (COUNT_CELLS as u64 - 1);
        let [inv_c, c_pow] = self.cells[index as usize];
        let r = (x - cell_middle(index)) * inv_c;
        let a = &self.series;
        let r2 = r * r;
        let r4 = r2 * r2;
        let low = (a[0] + a[1] * r) + r2 * (a[2] + a[3] * r);
        let high = (a[4] + a[5] * r) + r2 * (a[6] + a[7] * r);
        Some((c_pow, low + r4 * high))
    }
}

impl std::fmt::Debug for Power {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Power")
            .field("alpha", &self.alpha)
            .finish_non_exhaustive()
    }
}

/// The exact middle of cell `index` of `[0.5, 1)`: the index as the top mantissa bits,
/// then a one.
#[inline(always)]
fn cell_middle(index: u64) -> f64 {
    let half_cell = 1u64 << (51 - BITS_INDEX);
    f64::from_bits(EXPONENT_HALF << 52 | index << (52 - BITS_INDEX) | half_cell)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{next_double, worker_rng};

    /// Exponents of theta 0.99 (YCSB's), 0.9, 0.5 and 0.2.
    fn alphas() -> [f64; 4] {
        [0.99, 0.9, 0.5, 0.2].map(|theta: f64| 1.0 / (1.0 - theta))
    }

    /// `floor(n * pow(x, alpha))` the way the zipfian did before this module.
    fn libm_floor(n: f64, x: f64, alpha: f64) -> u64 {
        (n * x.powf(alpha)) as u64
    }

    #[test]
    fn cells_cover_the_domain_and_middles_are_inside() {
        for i in 0..COUNT_CELLS as u64 {
            let c = cell_middle(i);
            assert!((0.5..1.0).contains(&c));
            assert_eq!(
                (c.to_bits() >> (52 - BITS_INDEX)) & (COUNT_CELLS as u64 - 1),
                i
            );
        }
    }

    #[test]
    fn pow_is_within_the_bound_of_libm() {
        let mut rng = worker_rng(11, 0, 0);
        for alpha in alphas() {
            let power = Power::new(alpha).unwrap();
            let mut worst = 0.0f64;
            for _ in 0..400_000 {
                let x = 0.5 + 0.5 * next_double(&mut rng);
                let (ours, libm) = (power.pow(x).unwrap(), x.powf(alpha));
                worst = worst.max(((ours - libm) / libm).abs());
            }
            // The margin assumes 2^-48 between the two (see the module doc).
            assert!(
                worst < (-49.5f64).exp2(),
                "alpha {alpha}: 2^{}",
                worst.log2()
            );
        }
    }

    #[test]
    fn floors_agree_with_libm_on_random_draws() {
        let mut rng = worker_rng(12, 0, 0);
        for alpha in alphas() {
            let power = Power::new(alpha).unwrap();
            for n in [10_000_000_001.0, 2_000_000.0, 1_000.0] {
                let mut fallbacks = 0;
                for _ in 0..200_000 {
                    let x = 0.5 + 0.5 * next_double(&mut rng);
                    match power.floor_scaled(n, x) {
                        Some(k) => assert_eq!(k, libm_floor(n, x, alpha), "{alpha} {n} {x}"),
                        None => fallbacks += 1,
                    }
                }
                assert!(
                    fallbacks < 2_000,
                    "alpha {alpha}, n {n}: {fallbacks} fallbacks"
                );
            }
        }
    }

    /// The smallest double in `[lo, hi]` whose libm floor reaches `k` (bisection over
    /// the doubles' bit patterns, which are ordered like the positive doubles).
    fn threshold(n: f64, alpha: f64, k: u64) -> f64 {
        let (mut lo, mut hi) = (0.5f64.to_bits(), 1.0f64.to_bits());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if libm_floor(n, f64::from_bits(mid), alpha) >= k {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        f64::from_bits(hi)
    }

    /// Around the points where the floor steps, every answer given is libm's.
    #[test]
    fn floors_agree_with_libm_at_every_step_tried() {
        let alpha = 1.0 / (1.0 - 0.99);
        let power = Power::new(alpha).unwrap();
        // 2^45 puts the upper steps where `y >= 2^41`, the margin near or above 0.5.
        for n in [10_000_000_001.0f64, 2_000_000.0, (1u64 << 45) as f64] {
            let top = libm_floor(n, f64::from_bits(1.0f64.to_bits() - 1), alpha);
            let ks = (1..40).map(|i| (top as f64 * (i as f64 / 40.0).powi(3)) as u64 + 2);
            for k in ks {
                let step = threshold(n, alpha, k).to_bits();
                for bits in step - 8..step + 8 {
                    let x = f64::from_bits(bits);
                    if let Some(floor) = power.floor_scaled(n, x) {
                        assert_eq!(floor, libm_floor(n, x, alpha), "n {n}, x {x}");
                    }
                }
            }
        }
    }

    #[test]
    fn outside_the_domain_is_left_to_libm() {
        let power = Power::new(100.0).unwrap();
        for x in [
            0.0,
            0.25,
            0.499_999,
            1.0,
            1.5,
            -0.75,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert!(power.pow(x).is_none(), "{x}");
        }
        assert!(power.floor_scaled(1e300, 0.9).is_none());
        for alpha in [0.0, -1.0, 129.0, f64::NAN, f64::INFINITY] {
            assert!(Power::new(alpha).is_none(), "{alpha}");
        }
    }
}
