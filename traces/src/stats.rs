//! Trace statistics in the terms of the published table.
//!
//! Definitions (they follow the authors' own analyser, libCacheSim's `traceAnalyzer`, which
//! produced the table; the table itself carries no notes):
//!
//! - **op mix**: requests of each operation / all requests.
//! - **mean key size, mean value size**: means over requests (the `key size` and `value size`
//!   columns), not over distinct keys.
//! - **mean frequency**: requests / distinct keys; **compulsory miss ratio**: its inverse.
//! - **one-hit-wonder ratio**: distinct keys requested exactly once / distinct keys, over the
//!   whole input by default. With [`StatsOptions::window`] set to `W`, the ratio is computed in
//!   each run of `W` consecutive requests and averaged over the complete runs (a trailing partial
//!   run counts only when there is no complete one).
//! - **Zipf alpha**: sort the per-key request counts in decreasing order, `f(1) ≥ f(2) ≥ …`, and
//!   fit `ln f(r) = c − α ln r` by ordinary least squares over ranks `r ∈ [first, last]`; by
//!   default every rank, `[1, distinct keys]` (the table's fit includes the long tail of keys
//!   seen once, which is why write-once clusters such as 15 show α ≈ 0.02).
//! - **TTL**: over requests with a non-zero TTL: min, mean, max and the most common values with
//!   their share, printed like the table's `common TTL` column (`300s:0.98, 299s:0.02`).
//!
//! Memory: one 64-bit key hash and a 32-bit count per distinct key (about 32 bytes each with
//! the table's overhead); keys are never stored. Two keys whose [`key_hash`]es collide count as
//! one; at 10⁹ distinct keys that merges a handful, well below the printed precision.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{key_hash, Op, Record};

/// What `stats` measures beyond the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsOptions {
    /// Requests per one-hit-wonder window; `None` means the whole input.
    pub window: Option<u64>,
    /// First rank of the Zipf fit (1-based).
    pub rank_first: u64,
    /// Last rank of the Zipf fit; `None` means the last distinct key.
    pub rank_last: Option<u64>,
    /// How many common TTL values to report.
    pub common_ttls: usize,
}

impl Default for StatsOptions {
    fn default() -> Self {
        Self {
            window: None,
            rank_first: 1,
            rank_last: None,
            common_ttls: 5,
        }
    }
}

/// One operation's share of the requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpShare {
    /// The operation.
    pub op: Op,
    /// Requests with this operation.
    pub count: u64,
    /// `count / requests`.
    pub fraction: f64,
}

/// A least-squares fit of `ln f(r) = intercept − alpha · ln r`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZipfFit {
    /// The Zipf exponent (the negated slope).
    pub alpha: f64,
    /// The fitted `ln f(1)`.
    pub intercept: f64,
    /// Coefficient of determination of the fit.
    pub r2: f64,
    /// First rank fitted.
    pub rank_first: u64,
    /// Last rank fitted.
    pub rank_last: u64,
}

/// One TTL value's share of the requests that carry a TTL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TtlShare {
    /// TTL in seconds.
    pub ttl: u32,
    /// Share of the requests with a non-zero TTL.
    pub fraction: f64,
}

/// TTLs of the requests that carry one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TtlSummary {
    /// Requests with a non-zero TTL.
    pub requests: u64,
    /// Smallest non-zero TTL (seconds), 0 when there is none.
    pub min: u32,
    /// Mean non-zero TTL (seconds).
    pub mean: f64,
    /// Largest TTL (seconds).
    pub max: u32,
    /// The most common TTLs, most common first.
    pub common: Vec<TtlShare>,
}

/// The statistics of one trace (see the module for definitions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests read.
    pub requests: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Operation mix, most common first; operations never seen are left out.
    pub ops: Vec<OpShare>,
    /// Mean `key size` over requests, bytes.
    pub mean_key_size: f64,
    /// Mean `value size` over requests, bytes.
    pub mean_value_size: f64,
    /// Requests per distinct key.
    pub mean_frequency: f64,
    /// Distinct keys / requests.
    pub compulsory_miss_ratio: f64,
    /// Share of distinct keys requested exactly once, over the window.
    pub one_hit_wonder_ratio: f64,
    /// The one-hit-wonder window in requests; `None` for the whole input.
    pub one_hit_window: Option<u64>,
    /// The Zipf fit; `None` with fewer than two ranks to fit.
    pub zipf: Option<ZipfFit>,
    /// TTL summary.
    pub ttl: TtlSummary,
    /// Last timestamp minus first, seconds.
    pub duration: u64,
    /// Requests per second over the duration, in thousands (the table's kqps).
    pub request_rate_kqps: f64,
}

impl Stats {
    /// The share of `op`, 0 when absent.
    pub fn fraction(&self, op: Op) -> f64 {
        self.ops
            .iter()
            .find(|s| s.op == op)
            .map_or(0.0, |s| s.fraction)
    }
}

/// Running centred sums of a least-squares line fit `y = a + b x` (Welford's updates, so a
/// million points at `x ≈ 14` lose no precision to cancellation).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LineFit {
    n: f64,
    mean_x: f64,
    mean_y: f64,
    cxx: f64,
    cxy: f64,
    cyy: f64,
}

impl LineFit {
    /// Adds the point `(x, y)` `weight` times.
    pub(crate) fn add(&mut self, x: f64, y: f64, weight: f64) {
        self.n += weight;
        let dx = x - self.mean_x;
        let dy = y - self.mean_y;
        self.mean_x += weight * dx / self.n;
        self.mean_y += weight * dy / self.n;
        self.cxx += weight * dx * (x - self.mean_x);
        self.cxy += weight * dx * (y - self.mean_y);
        self.cyy += weight * dy * (y - self.mean_y);
    }

    /// `(slope, intercept, r²)`, or `None` when all `x` are equal.
    pub(crate) fn solve(&self) -> Option<(f64, f64, f64)> {
        if self.n < 2.0 || self.cxx <= 0.0 {
            return None;
        }
        let slope = self.cxy / self.cxx;
        let intercept = self.mean_y - slope * self.mean_x;
        let r2 = if self.cyy > 0.0 {
            (self.cxy * self.cxy / (self.cxx * self.cyy)).min(1.0)
        } else {
            1.0
        };
        Some((slope, intercept, r2))
    }
}

/// Fits the Zipf line to per-key counts sorted in decreasing order, over ranks
/// `[first, last]` (1-based, clamped to the data).
pub fn fit_zipf(sorted_counts: &[u32], first: u64, last: Option<u64>) -> Option<ZipfFit> {
    let n = sorted_counts.len() as u64;
    let last = last.unwrap_or(n).min(n);
    let first = first.max(1);
    if first >= last {
        return None;
    }
    let mut fit = LineFit::default();
    for rank in first..=last {
        let count = sorted_counts[(rank - 1) as usize];
        fit.add((rank as f64).ln(), f64::from(count).ln(), 1.0);
    }
    let (slope, intercept, r2) = fit.solve()?;
    Some(ZipfFit {
        alpha: -slope,
        intercept,
        r2,
        rank_first: first,
        rank_last: last,
    })
}

/// Consumes requests one at a time and produces [`Stats`].
pub struct Accumulator {
    options: StatsOptions,
    requests: u64,
    per_op: [u64; 11],
    key_bytes: u128,
    value_bytes: u128,
    counts: HashMap<u64, u32>,
    window: HashMap<u64, u32>,
    window_ratios: (f64, u64),
    ttls: HashMap<u32, u64>,
    first_timestamp: Option<u64>,
    last_timestamp: u64,
}

impl Accumulator {
    /// An empty accumulator.
    pub fn new(options: StatsOptions) -> Self {
        Self {
            options,
            requests: 0,
            per_op: [0; 11],
            key_bytes: 0,
            value_bytes: 0,
            counts: HashMap::new(),
            window: HashMap::new(),
            window_ratios: (0.0, 0),
            ttls: HashMap::new(),
            first_timestamp: None,
            last_timestamp: 0,
        }
    }

    /// Counts one request.
    pub fn add(&mut self, r: &Record) {
        self.requests += 1;
        self.per_op[r.op.index()] += 1;
        self.key_bytes += u128::from(r.key_size);
        self.value_bytes += u128::from(r.value_size);
        let hash = key_hash(r.key.as_bytes());
        bump(&mut self.counts, hash);
        if r.ttl != 0 {
            *self.ttls.entry(r.ttl).or_default() += 1;
        }
        self.first_timestamp.get_or_insert(r.timestamp);
        self.last_timestamp = r.timestamp;
        if let Some(w) = self.options.window {
            bump(&mut self.window, hash);
            if self.requests % w == 0 {
                self.close_window();
            }
        }
    }

    fn close_window(&mut self) {
        let ratio = one_hit_ratio(self.window.values());
        self.window_ratios.0 += ratio;
        self.window_ratios.1 += 1;
        self.window.clear();
    }

    /// The statistics of everything added.
    pub fn finish(mut self) -> Stats {
        if self.options.window.is_some() && self.window_ratios.1 == 0 && !self.window.is_empty() {
            self.close_window();
        }
        let one_hit_wonder_ratio = match self.options.window {
            Some(_) if self.window_ratios.1 > 0 => {
                self.window_ratios.0 / self.window_ratios.1 as f64
            }
            _ => one_hit_ratio(self.counts.values()),
        };
        let mut sorted: Vec<u32> = self.counts.values().copied().collect();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let requests = self.requests.max(1) as f64;
        let keys = self.counts.len() as u64;
        let duration = self.last_timestamp - self.first_timestamp.unwrap_or(0);
        Stats {
            requests: self.requests,
            keys,
            ops: op_shares(&self.per_op, self.requests),
            mean_key_size: self.key_bytes as f64 / requests,
            mean_value_size: self.value_bytes as f64 / requests,
            mean_frequency: self.requests as f64 / keys.max(1) as f64,
            compulsory_miss_ratio: keys as f64 / requests,
            one_hit_wonder_ratio,
            one_hit_window: self.options.window,
            zipf: fit_zipf(&sorted, self.options.rank_first, self.options.rank_last),
            ttl: ttl_summary(&self.ttls, self.options.common_ttls),
            duration,
            request_rate_kqps: self.requests as f64 / duration.max(1) as f64 / 1000.0,
        }
    }
}

fn bump(counts: &mut HashMap<u64, u32>, hash: u64) {
    let c = counts.entry(hash).or_default();
    *c = c.saturating_add(1);
}

fn one_hit_ratio<'a>(counts: impl ExactSizeIterator<Item = &'a u32>) -> f64 {
    let keys = counts.len().max(1) as f64;
    counts.filter(|&&c| c == 1).count() as f64 / keys
}

fn op_shares(per_op: &[u64; 11], requests: u64) -> Vec<OpShare> {
    let mut shares: Vec<OpShare> = Op::ALL
        .into_iter()
        .zip(per_op)
        .filter(|(_, &count)| count > 0)
        .map(|(op, &count)| OpShare {
            op,
            count,
            fraction: count as f64 / requests as f64,
        })
        .collect();
    shares.sort_by(|a, b| b.count.cmp(&a.count).then(a.op.cmp(&b.op)));
    shares
}

fn ttl_summary(ttls: &HashMap<u32, u64>, common: usize) -> TtlSummary {
    let requests: u64 = ttls.values().sum();
    if requests == 0 {
        return TtlSummary::default();
    }
    let weighted: f64 = ttls.iter().map(|(&t, &n)| f64::from(t) * n as f64).sum();
    let mut by_count: Vec<(u32, u64)> = ttls.iter().map(|(&t, &n)| (t, n)).collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    TtlSummary {
        requests,
        min: ttls.keys().copied().min().unwrap_or(0),
        mean: weighted / requests as f64,
        max: ttls.keys().copied().max().unwrap_or(0),
        common: by_count
            .into_iter()
            .take(common)
            .map(|(ttl, n)| TtlShare {
                ttl,
                fraction: n as f64 / requests as f64,
            })
            .collect(),
    }
}

/// Formats seconds the way the table does: `30s`, `5d`, `2h`, `1.8h`.
pub fn format_ttl(seconds: u32) -> String {
    const DAY: u32 = 86_400;
    const HOUR: u32 = 3_600;
    match seconds {
        0 => "0s".to_owned(),
        s if s % DAY == 0 => format!("{}d", s / DAY),
        s if s % HOUR == 0 => format!("{}h", s / HOUR),
        s if s > HOUR && (s * 10) % HOUR == 0 => format!("{:.1}h", f64::from(s) / f64::from(HOUR)),
        s => format!("{s}s"),
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops: Vec<String> = self
            .ops
            .iter()
            .map(|s| format!("{}:{:.2}", s.op, s.fraction))
            .collect();
        let ttls: Vec<String> = self
            .ttl
            .common
            .iter()
            .map(|s| format!("{}:{:.2}", format_ttl(s.ttl), s.fraction))
            .collect();
        let window = self.one_hit_window.map_or_else(
            || "whole trace".to_owned(),
            |w| format!("{w}-request windows"),
        );
        let zipf = self.zipf.as_ref().map_or_else(
            || "n/a (fewer than two ranks)".to_owned(),
            |z| {
                format!(
                    "{:.4} (ranks {}..={}, r² {:.3})",
                    z.alpha, z.rank_first, z.rank_last, z.r2
                )
            },
        );
        let rows: [(&str, String); 12] = [
            ("requests", self.requests.to_string()),
            ("distinct keys", self.keys.to_string()),
            ("operation", ops.join(" ")),
            ("key size (mean B)", format!("{:.1}", self.mean_key_size)),
            (
                "value size (mean B)",
                format!("{:.1}", self.mean_value_size),
            ),
            ("mean freq", format!("{:.2}", self.mean_frequency)),
            (
                "one-hit-wonder ratio (%)",
                format!("{:.2} ({window})", 100.0 * self.one_hit_wonder_ratio),
            ),
            (
                "compulsory miss ratio (%)",
                format!("{:.2}", 100.0 * self.compulsory_miss_ratio),
            ),
            ("Zipf alpha", zipf),
            ("common TTL", ttls.join(", ")),
            (
                "TTL min/mean/max (s)",
                format!("{}/{:.0}/{}", self.ttl.min, self.ttl.mean, self.ttl.max),
            ),
            (
                "duration (s), rate (kqps)",
                format!("{}, {:.2}", self.duration, self.request_rate_kqps),
            ),
        ];
        for (name, value) in rows {
            writeln!(f, "{name:<27} {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_fit_recovers_an_exact_power_law() {
        let counts: Vec<u32> = (1..=1000u32)
            .map(|r| (1e6 / f64::from(r)).round() as u32)
            .collect();
        let fit = fit_zipf(&counts, 1, None).unwrap();
        assert!((fit.alpha - 1.0).abs() < 1e-3, "{fit:?}");
        assert!(fit.r2 > 0.999);
    }

    #[test]
    fn zipf_fit_needs_two_ranks() {
        assert_eq!(fit_zipf(&[5], 1, None), None);
        assert_eq!(fit_zipf(&[], 1, None), None);
        assert!(fit_zipf(&[3, 3, 3], 1, None).unwrap().alpha.abs() < 1e-12);
    }

    #[test]
    fn ttl_formats_like_the_table() {
        assert_eq!(format_ttl(300), "300s");
        assert_eq!(format_ttl(3600), "1h");
        assert_eq!(format_ttl(6480), "1.8h");
        assert_eq!(format_ttl(432_000), "5d");
        assert_eq!(format_ttl(1800), "1800s");
    }
}
