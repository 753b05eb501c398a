//! How many times each key of a synthetic trace is requested, decided before the first request.
//!
//! The table gives, per cluster, the compulsory miss ratio `c` (distinct keys / requests), the
//! one-hit-wonder ratio `o` (keys requested once / distinct keys) and the Zipf alpha `α` fitted
//! over every rank (see [`crate::stats`]). For `R` requests the plan is:
//!
//! ```text
//! K = round(c·R) distinct keys,  O = round(o·K) of them requested once,
//! M = K − O keys requested at least twice, sharing S = R − O requests:
//! count(i) = 2 + ⌊(S − 2M) · i^−β / Σ_j j^−β⌋  (+1 for the first few, so Σ count = S)
//! ```
//!
//! Drawing keys independently from a Zipf law cannot hit `c` and `o` together (a key drawn twice
//! in expectation is drawn once or never about 40 % of the time), so counts are assigned exactly
//! and only their order is random. The skew `β` is then searched so that the same
//! least-squares estimator `stats` uses, applied to these counts, returns the published `α`.
//! Not every `α` is reachable with given `c`, `o` and `R`: when even `β = 0` (all multi-hit keys
//! equally popular) fits a larger α, `β` stays 0; when no `β` fits α as large as published, the
//! largest reachable is used. [`Popularity::fitted_alpha`] tells what the trace will measure.
//!
//! Invariant, checked by [`Popularity::is_valid`]:
//! `Σ multi + once == requests`, every `multi[i] ≥ 2`, `multi` non-increasing.

use crate::stats::LineFit;

/// Largest skew tried; beyond it nearly all multi-hit requests go to one key.
const BETA_MAX: f64 = 8.0;

/// Grid step of the climb in [`Popularity::solve_beta`].
const BETA_STEP: f64 = 0.125;

/// Bisection steps inside one grid step: the step shrinks below 10⁻⁶.
const COUNT_BISECTION_STEPS: u32 = 17;

/// Counts whose logarithm is tabulated (most counts are small).
const COUNT_LN_TABLE: usize = 4096;

/// Per-key request counts of a synthetic trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Popularity {
    /// Requests of each key requested at least twice, most popular first (rank order).
    pub multi: Vec<u32>,
    /// Keys requested exactly once.
    pub once: u64,
    /// The skew exponent that shaped `multi`.
    pub beta: f64,
}

impl Popularity {
    /// Plans `requests` requests over about `keys` distinct keys, `one_hit` of them requested
    /// once, skewed to match `alpha` when given (see the module docs). `keys` and `one_hit` are
    /// adjusted when they cannot be met exactly: at least one key, and every multi-hit key needs
    /// two requests.
    pub fn plan(requests: u32, keys: u64, one_hit: u64, alpha: Option<f64>) -> Self {
        let requests = u64::from(requests);
        let keys = keys.clamp(1, requests.max(1));
        let mut once = one_hit.min(keys).min(requests);
        let mut multi_keys = keys - once;
        if multi_keys == 0 && requests > once {
            // Requests left over but no key to take them: one key becomes a multi-hit key.
            once = once.saturating_sub(1);
            multi_keys = 1;
        }
        let shared = requests - once;
        multi_keys = multi_keys.min(shared / 2);
        if multi_keys == 0 {
            once = requests;
        }
        let shared = requests - once;
        let mut plan = Self {
            multi: vec![2; multi_keys as usize],
            once,
            beta: 0.0,
        };
        let ln_rank: Vec<f64> = (1..=multi_keys).map(|r| (r as f64).ln()).collect();
        plan.reshape(shared, 0.0, &ln_rank);
        if let Some(alpha) = alpha {
            plan.solve_beta(shared, alpha);
        }
        debug_assert!(plan.is_valid(requests));
        plan
    }

    /// Distinct keys.
    pub fn keys(&self) -> u64 {
        self.multi.len() as u64 + self.once
    }

    /// Checks the invariant in the module docs.
    pub fn is_valid(&self, requests: u64) -> bool {
        let sum: u64 = self.multi.iter().map(|&c| u64::from(c)).sum();
        sum + self.once == requests
            && self.multi.iter().all(|&c| c >= 2)
            && self.multi.windows(2).all(|w| w[0] >= w[1])
    }

    /// The Zipf alpha `stats` will fit to a trace with these counts (every rank).
    pub fn fitted_alpha(&self) -> Option<f64> {
        let ln_rank: Vec<f64> = (1..=self.multi.len()).map(|r| (r as f64).ln()).collect();
        self.fit(&ln_rank, self.tail_fit())
    }

    /// The fit of the one-hit tail alone: ranks `M+1 ..= K`, each with count 1 (`ln 1 = 0`).
    fn tail_fit(&self) -> LineFit {
        let mut fit = LineFit::default();
        for rank in self.multi.len() as u64 + 1..=self.keys() {
            fit.add((rank as f64).ln(), 0.0, 1.0);
        }
        fit
    }

    /// Adds the multi-hit keys to the tail's fit and returns the alpha.
    fn fit(&self, ln_rank: &[f64], mut fit: LineFit) -> Option<f64> {
        let ln_small: Vec<f64> = (0..COUNT_LN_TABLE).map(|c| (c as f64).ln()).collect();
        for (&x, &count) in ln_rank.iter().zip(&self.multi) {
            let y = ln_small
                .get(count as usize)
                .copied()
                .unwrap_or_else(|| f64::from(count).ln());
            fit.add(x, y, 1.0);
        }
        fit.solve().map(|(slope, _, _)| -slope)
    }

    /// Redistributes `shared` requests over the multi-hit keys with skew `beta`.
    fn reshape(&mut self, shared: u64, beta: f64, ln_rank: &[f64]) {
        self.beta = beta;
        let m = self.multi.len();
        if m == 0 {
            return;
        }
        let extra = shared - 2 * m as u64;
        let weight = |i: usize| (-beta * ln_rank[i]).exp();
        let total: f64 = (0..m).map(weight).sum();
        let mut given = 0u64;
        for (i, count) in self.multi.iter_mut().enumerate() {
            let share = (extra as f64 * weight(i) / total).floor() as u64;
            given += share;
            *count = 2 + share as u32;
        }
        // Floors leave fewer than `m` requests over; the most popular keys take one each,
        // which keeps the counts non-increasing.
        let left = extra.saturating_sub(given) as usize;
        for count in &mut self.multi[..left] {
            *count += 1;
        }
    }

    /// Finds `beta` with `fitted_alpha == alpha`.
    ///
    /// The fit is not monotone in `beta`: it rises from the flat layout, peaks, then falls as
    /// one key takes all the extra requests and the rest flatten at 2. So `beta` climbs a grid
    /// until the fit reaches `alpha` (then bisects inside the last step) or starts falling
    /// (then keeps the peak: the closest reachable alpha).
    fn solve_beta(&mut self, shared: u64, alpha: f64) {
        let ln_rank: Vec<f64> = (1..=self.multi.len()).map(|r| (r as f64).ln()).collect();
        let tail = self.tail_fit();
        let fitted = |p: &mut Self, beta: f64| {
            p.reshape(shared, beta, &ln_rank);
            p.fit(&ln_rank, tail).unwrap_or(0.0)
        };
        let (mut lo, mut best) = (0.0, fitted(self, 0.0));
        if self.multi.len() < 2 || best >= alpha {
            self.reshape(shared, 0.0, &ln_rank);
            return;
        }
        let mut hi = lo;
        loop {
            hi += BETA_STEP;
            let f = fitted(self, hi);
            if f >= alpha {
                break;
            }
            if f < best || hi >= BETA_MAX {
                self.reshape(shared, lo, &ln_rank);
                return;
            }
            (lo, best) = (hi, f);
        }
        for _ in 0..COUNT_BISECTION_STEPS {
            let mid = 0.5 * (lo + hi);
            if fitted(self, mid) < alpha {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.reshape(shared, hi, &ln_rank);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_and_hit_the_target_alpha() {
        let p = Popularity::plan(100_000, 26_350, 3_921, Some(0.4251));
        assert!(p.is_valid(100_000));
        assert_eq!(p.keys(), 26_350);
        let alpha = p.fitted_alpha().unwrap();
        assert!(
            (alpha - 0.4251).abs() < 1e-3,
            "alpha {alpha}, beta {}",
            p.beta
        );
        assert!(p.beta > 0.0);
    }

    #[test]
    fn impossible_targets_are_adjusted_not_violated() {
        // Every key once but fewer keys than requests: one key absorbs the rest.
        let p = Popularity::plan(10, 5, 5, None);
        assert!(p.is_valid(10));
        assert_eq!(p.keys(), 5);
        // Multi-hit keys need two requests each: 10 requests cannot feed 9 multi-hit keys.
        let p = Popularity::plan(10, 10, 1, None);
        assert!(p.is_valid(10));
        assert_eq!(p.multi.len(), 4);
        // All keys once.
        let p = Popularity::plan(10, 10, 10, Some(1.0));
        assert!(p.is_valid(10));
        assert!(p.multi.is_empty());
    }

    #[test]
    fn a_target_below_the_flat_fit_keeps_beta_zero() {
        let p = Popularity::plan(10_000, 9_000, 8_000, Some(0.0001));
        assert_eq!(p.beta, 0.0);
        assert!(p.fitted_alpha().unwrap() > 0.0001);
    }
}
