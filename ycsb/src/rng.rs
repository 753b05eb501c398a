//! Randomness: one ChaCha8 stream per (seed, phase, worker), and the two Java draws
//! YCSB's generators are written in terms of.
//!
//! YCSB draws from `ThreadLocalRandom`, which cannot be seeded. Here every generator takes
//! the RNG as an argument, and a worker's RNG is `ChaCha8Rng::seed_from_u64(seed)` moved
//! to stream `phase << 32 | worker`, so workers and phases never share a stream and a run
//! is a pure function of its seed (see [`crate::stream`] for what shared counters add).

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The RNG every worker owns.
pub type WorkerRng = ChaCha8Rng;

/// The seed used when none is given (`--seed`, `podkv.seed`), so runs repeat by default.
pub const SEED_DEFAULT: u64 = 0;

/// `2^-53`: the spacing of Java's `nextDouble` values.
const DOUBLE_UNIT: f64 = 1.0 / (1u64 << 53) as f64;

/// The RNG of worker `worker` in phase number `phase` (0 load, 1 run) of a run seeded
/// with `seed`.
pub fn worker_rng(seed: u64, phase: u32, worker: u32) -> WorkerRng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream((u64::from(phase) << 32) | u64::from(worker));
    rng
}

/// Java's `Random.nextDouble()`: uniform in `[0, 1)` with 53 random bits.
#[inline]
pub fn next_double<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * DOUBLE_UNIT
}

/// Java's `Math.abs(random.nextLong())`, the draw YCSB reduces modulo an interval.
///
/// Java leaves `Long.MIN_VALUE` negative (probability 2^-64); this returns 2^63 instead,
/// which keeps every caller's result inside its interval.
#[inline]
pub fn next_abs_long<R: RngCore + ?Sized>(rng: &mut R) -> u64 {
    (rng.next_u64() as i64).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_double_is_in_unit_interval() {
        let mut rng = worker_rng(1, 0, 0);
        for _ in 0..10_000 {
            let u = next_double(&mut rng);
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn streams_differ_by_phase_and_worker() {
        let a = worker_rng(7, 0, 0).next_u64();
        let b = worker_rng(7, 0, 1).next_u64();
        let c = worker_rng(7, 1, 0).next_u64();
        let again = worker_rng(7, 0, 0).next_u64();
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
    }

    #[test]
    fn abs_long_never_exceeds_two_to_the_63() {
        let mut rng = worker_rng(3, 0, 0);
        for _ in 0..10_000 {
            assert!(next_abs_long(&mut rng) <= 1 << 63);
        }
    }
}
