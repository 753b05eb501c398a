//! Synthetic traces shaped by one cluster's published statistics.
//!
//! # Model
//!
//! - **Popularity**: exact per-key counts from [`Popularity::plan`] (distinct keys from the
//!   compulsory miss ratio, one-hit wonders from their ratio, Zipf skew fitted to the published
//!   alpha). The multi-hit requests are laid out as a list and shuffled; the one-hit keys are
//!   interleaved uniformly (each step emits a new key with probability
//!   `one-hit keys left / requests left`), so they need no memory.
//! - **Operations**: drawn independently per request from the published mix, normalised to 1.
//! - **Per-key attributes**, a pure function of `(seed, key id)` so they never change within a
//!   trace: key size uniform in `mean ± mean/8`; value size log-normal with `σ = 1` and the
//!   published mean (`μ = ln mean − σ²/2`), rounded, at most 1 MiB; TTL drawn from the published
//!   common TTLs (shares normalised).
//! - **Size drift** (optional, [`Generator::with_value_drift`]): value sizes follow the
//!   request's position instead of the key: request `i` of `n` stores about
//!   `from + (to − from)·i/n` bytes, times a per-key factor uniform in `[7/8, 9/8]`. The key
//!   set and its popularity are unchanged, so keys already stored are rewritten with the new
//!   sizes as the run goes on, the size shift that makes slabs of old classes sparse.
//! - **TTL column**: the key's TTL on requests that store a value, 0 otherwise (as in the
//!   traces).
//! - **Timestamps**: a Poisson process at the published request rate, in whole seconds.
//! - **Client id**: uniform over [`COUNT_CLIENTS`] clients.
//! - **Key text**: `key size` bytes ending in the key id in fixed-width base 62, so keys are
//!   unique and `key.len() == key size`.
//!
//! # Cost
//!
//! Memory is 4 bytes per multi-hit request (the shuffled list) plus the count plan; hence
//! `ops ≤ u32::MAX`. Everything is drawn from ChaCha8 streams seeded by `seed`, so a seed fixes
//! the trace byte for byte.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::ClusterStats;
use crate::popularity::Popularity;
use crate::{mix64, Op, Record};

/// Number of distinct client ids in a generated trace (the table publishes none).
pub const COUNT_CLIENTS: u32 = 64;

/// Log-normal shape of value sizes.
const VALUE_SIGMA: f64 = 1.0;

/// Largest generated value: memcached's default item size limit.
const SIZE_VALUE_MAX: f64 = 1_048_576.0;

/// Base-62 digits for key ids.
const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Salts separating the per-key hash streams.
const SALT_KEY_SIZE: u64 = 0x6b65_795f_7369_7a65;
const SALT_VALUE_A: u64 = 0x7661_6c75_655f_6131;
const SALT_VALUE_B: u64 = 0x7661_6c75_655f_6232;
const SALT_TTL: u64 = 0x7474_6c5f_7474_6c5f;
const SALT_FILL: u64 = 0x6669_6c6c_6669_6c6c;

/// Value sizes that drift linearly over a trace, from about `from` bytes at its first request
/// to about `to` at its last (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drift {
    /// Mean value size at the trace's start.
    pub from: u32,
    /// Mean value size at the trace's end.
    pub to: u32,
}

impl std::str::FromStr for Drift {
    type Err = String;

    /// `FROM:TO` in bytes, e.g. `100:1024`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (from, to) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: expected FROM:TO in bytes, e.g. 100:1024"))?;
        let bytes = |t: &str| {
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|&b| b >= 1 && f64::from(b) <= SIZE_VALUE_MAX)
                .ok_or_else(|| format!("{t:?}: a value size is 1 to {SIZE_VALUE_MAX} bytes"))
        };
        Ok(Drift {
            from: bytes(from)?,
            to: bytes(to)?,
        })
    }
}

/// The published shape, turned into samplers.
#[derive(Clone, Debug)]
struct Shape {
    ops: Vec<(Op, f64)>,
    ttls: Vec<(u32, f64)>,
    key_size: (u32, u32),
    value_mu: f64,
    rate_per_s: f64,
}

impl Shape {
    fn new(c: &ClusterStats) -> Self {
        let mean = c.key_size.round().max(1.0) as u32;
        let spread = (f64::from(mean) / 8.0).round() as u32;
        Self {
            ops: cumulative(&c.ops),
            ttls: cumulative(&c.ttls),
            key_size: (mean - spread.min(mean - 1), mean + spread),
            value_mu: c.value_size.max(1.0).ln() - VALUE_SIGMA * VALUE_SIGMA / 2.0,
            rate_per_s: (c.request_rate_kqps * 1000.0).max(1.0),
        }
    }
}

/// Turns shares into a cumulative distribution ending at exactly 1.
fn cumulative<T: Copy>(shares: &[(T, f64)]) -> Vec<(T, f64)> {
    let total: f64 = shares.iter().map(|s| s.1).sum();
    let mut acc = 0.0;
    let mut out: Vec<(T, f64)> = shares
        .iter()
        .map(|&(t, s)| {
            acc += s / total;
            (t, acc)
        })
        .collect();
    if let Some(last) = out.last_mut() {
        last.1 = 1.0;
    }
    out
}

/// Picks from a cumulative distribution with `u ∈ [0, 1)`.
fn pick<T: Copy>(cdf: &[(T, f64)], u: f64) -> Option<T> {
    cdf.iter().find(|(_, c)| u < *c).or(cdf.last()).map(|p| p.0)
}

/// A uniform `[0, 1)` from 53 hash bits.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// An iterator of synthetic requests; see the module docs.
pub struct Generator {
    shape: Shape,
    seed: u64,
    width: usize,
    multi_ids: Vec<u32>,
    next_multi: usize,
    once_left: u64,
    next_once_id: u64,
    rng: ChaCha8Rng,
    clock: f64,
    popularity_alpha: Option<f64>,
    drift: Option<Drift>,
    /// Requests in the whole trace, and returned so far: the drift's position.
    ops: u64,
    emitted: u64,
}

impl Generator {
    /// Plans a trace of `ops` requests for cluster `c` with `seed`.
    pub fn new(c: &ClusterStats, ops: u32, seed: u64) -> Self {
        let compulsory = if c.compulsory_miss_ratio > 0.0 {
            c.compulsory_miss_ratio
        } else {
            1.0 / c.mean_frequency.max(1.0)
        };
        let keys = (compulsory * f64::from(ops)).round() as u64;
        let one_hit = (c.one_hit_wonder_ratio * keys as f64).round() as u64;
        let plan = Popularity::plan(ops, keys, one_hit, c.zipf_alpha);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut multi_ids: Vec<u32> = plan
            .multi
            .iter()
            .enumerate()
            .flat_map(|(id, &count)| std::iter::repeat_n(id as u32, count as usize))
            .collect();
        multi_ids.shuffle(&mut rng);
        let mut digits = 1;
        while 62f64.powi(digits as i32) < plan.keys() as f64 {
            digits += 1;
        }
        rng.set_stream(1);
        Self {
            shape: Shape::new(c),
            seed,
            width: digits,
            next_once_id: plan.multi.len() as u64,
            multi_ids,
            next_multi: 0,
            once_left: plan.once,
            rng,
            clock: 0.0,
            popularity_alpha: plan.fitted_alpha(),
            drift: None,
            ops: u64::from(ops),
            emitted: 0,
        }
    }

    /// Makes value sizes drift over the trace instead of following the cluster's per-key
    /// log-normal (see the module docs). Keys, operations and times are unchanged.
    pub fn with_value_drift(mut self, drift: Drift) -> Self {
        self.drift = Some(drift);
        self
    }

    /// The Zipf alpha the whole trace will measure (see [`Popularity::fitted_alpha`]).
    pub fn planned_alpha(&self) -> Option<f64> {
        self.popularity_alpha
    }

    /// Requests not yet returned.
    pub fn remaining(&self) -> u64 {
        (self.multi_ids.len() - self.next_multi) as u64 + self.once_left
    }

    fn next_key_id(&mut self) -> Option<u64> {
        let multi_left = (self.multi_ids.len() - self.next_multi) as u64;
        let total = multi_left + self.once_left;
        if total == 0 {
            return None;
        }
        if self.rng.gen_range(0..total) < self.once_left {
            self.once_left -= 1;
            self.next_once_id += 1;
            return Some(self.next_once_id - 1);
        }
        self.next_multi += 1;
        Some(u64::from(self.multi_ids[self.next_multi - 1]))
    }

    fn key_hash(&self, id: u64, salt: u64) -> u64 {
        mix64(mix64(self.seed ^ salt) ^ id)
    }

    fn key_text(&self, id: u64) -> String {
        let (lo, hi) = self.shape.key_size;
        let span = u64::from(hi - lo + 1);
        let size =
            (lo as usize + (self.key_hash(id, SALT_KEY_SIZE) % span) as usize).max(self.width);
        let mut key = vec![0u8; size];
        let (fill, tail) = key.split_at_mut(size - self.width);
        let mut h = self.key_hash(id, SALT_FILL);
        for b in fill.iter_mut() {
            *b = DIGITS[(h % 62) as usize];
            h = mix64(h);
        }
        let mut rest = id;
        for b in tail.iter_mut().rev() {
            *b = DIGITS[(rest % 62) as usize];
            rest /= 62;
        }
        String::from_utf8(key).unwrap_or_default()
    }

    fn value_size(&self, id: u64) -> u32 {
        if let Some(Drift { from, to }) = self.drift {
            let at = self.emitted as f64 / self.ops.max(1) as f64;
            let mean = f64::from(from) + (f64::from(to) - f64::from(from)) * at;
            let factor = 0.875 + 0.25 * unit(self.key_hash(id, SALT_VALUE_A));
            return (mean * factor).round().clamp(1.0, SIZE_VALUE_MAX) as u32;
        }
        // Box–Muller: two uniforms from the key's hash give one standard normal.
        let u1 = unit(self.key_hash(id, SALT_VALUE_A)).max(f64::MIN_POSITIVE);
        let u2 = unit(self.key_hash(id, SALT_VALUE_B));
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (self.shape.value_mu + VALUE_SIGMA * z)
            .exp()
            .round()
            .min(SIZE_VALUE_MAX) as u32
    }

    fn ttl(&self, id: u64) -> u32 {
        pick(&self.shape.ttls, unit(self.key_hash(id, SALT_TTL))).unwrap_or(0)
    }
}

impl Iterator for Generator {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        let id = self.next_key_id()?;
        let op = pick(&self.shape.ops, self.rng.gen::<f64>()).unwrap_or(Op::Get);
        let gap: f64 = -(1.0 - self.rng.gen::<f64>()).ln() / self.shape.rate_per_s;
        self.clock += gap;
        let key = self.key_text(id);
        let value_size = self.value_size(id);
        self.emitted += 1;
        Some(Record {
            timestamp: self.clock as u64,
            key_size: key.len() as u32,
            key,
            value_size,
            client_id: self.rng.gen_range(0..COUNT_CLIENTS),
            op,
            ttl: if op.stores_value() { self.ttl(id) } else { 0 },
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining() as usize;
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::cluster;
    use std::str::FromStr;

    #[test]
    fn keys_are_unique_per_id_and_sized() {
        let g = Generator::new(&cluster(12).unwrap(), 1000, 7);
        let a = g.key_text(0);
        let b = g.key_text(1);
        assert_ne!(a, b);
        assert_eq!(a, g.key_text(0));
        assert!((38..=50).contains(&a.len()), "{a}");
    }

    #[test]
    fn cumulative_ends_at_one_and_picks_in_order() {
        let cdf = cumulative(&[(Op::Set, 0.8), (Op::Get, 0.21)]);
        assert_eq!(cdf[1].1, 1.0);
        assert_eq!(pick(&cdf, 0.0), Some(Op::Set));
        assert_eq!(pick(&cdf, 0.9), Some(Op::Get));
    }

    #[test]
    fn drifting_values_grow_from_start_to_end_on_the_same_keys() {
        let plain: Vec<Record> = Generator::new(&cluster(31).unwrap(), 20_000, 5).collect();
        let drift = Drift::from_str("100:1024").unwrap();
        let drifted: Vec<Record> = Generator::new(&cluster(31).unwrap(), 20_000, 5)
            .with_value_drift(drift)
            .collect();
        let keys = |t: &[Record]| t.iter().map(|r| r.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&plain), keys(&drifted), "the drift changes sizes only");
        let mean =
            |t: &[Record]| t.iter().map(|r| f64::from(r.value_size)).sum::<f64>() / t.len() as f64;
        let (head, tail) = (mean(&drifted[..1000]), mean(&drifted[19_000..]));
        assert!((95.0..130.0).contains(&head), "start mean {head}");
        assert!((950.0..1100.0).contains(&tail), "end mean {tail}");
        assert!(drifted.iter().all(|r| (87..=1153).contains(&r.value_size)));
        assert!(Drift::from_str("100").is_err() && Drift::from_str("0:5").is_err());
    }

    #[test]
    fn the_generator_returns_exactly_ops_requests() {
        let g = Generator::new(&cluster(31).unwrap(), 5000, 1);
        assert_eq!(g.remaining(), 5000);
        assert_eq!(g.count(), 5000);
    }
}
