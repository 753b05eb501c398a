//! Per-operation latency and outcome counts: one [`Recorder`] per worker thread, merged
//! into one [`Tally`] per process and then per run.
//!
//! Latencies are recorded in clock ticks: the time-stamp counter on x86-64 (a few
//! nanoseconds to read, versus ~20 for `clock_gettime`), nanoseconds elsewhere. Each
//! worker times its whole run in both ticks and nanoseconds; the run's `ns_per_tick` is
//! the ratio of the sums, which converts the merged histograms to microseconds.

use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Significant digits kept by every histogram.
const DIGITS_HISTOGRAM: u8 = 2;

/// The current tick.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Sub-buckets in the lower half of a bucket, as a power of two: 2 significant digits
/// need 200 distinct values per bucket, hdrhistogram rounds that up to 256, half of which
/// are new in every bucket after the first.
const BITS_SUB_BUCKETS_HALF: u32 = 7;

/// Sub-buckets in the lower half of a bucket.
const COUNT_SUB_BUCKETS_HALF: usize = 1 << BITS_SUB_BUCKETS_HALF;

/// Values up to `2^BITS_TICKS` ticks (minutes) keep 2 digits; larger ones are counted as
/// the largest (an operation that slow is an outage, not a latency).
const BITS_TICKS: u32 = 40;

/// Buckets after the first.
const COUNT_BUCKETS: usize = (BITS_TICKS - BITS_SUB_BUCKETS_HALF - 1) as usize;

/// Largest value counted as itself.
const TICKS_MAX: u64 = (1 << BITS_TICKS) - 1;

/// Latency counts of one operation kind, in hdrhistogram's layout for 2 significant
/// digits and a lowest value of 1: value `v < 256` at index `v`; a larger `v` in bucket
/// `b = log2(v) - 7` at index `b * 128 + (v >> b)` (so every index below `256 + 128 * b`
/// belongs to buckets up to `b`). Recording is a leading-zero count, a shift and an
/// increment, where hdrhistogram's generic `record` also checks and resizes.
///
/// Invariant: `counts.len() == 256 + COUNT_BUCKETS * 128`.
#[derive(Clone)]
struct Buckets {
    counts: Box<[u64]>,
}

impl Buckets {
    fn new() -> Self {
        Self {
            counts: vec![0; COUNT_INDEXES].into_boxed_slice(),
        }
    }

    /// The index of `ticks` (clamped to [`TICKS_MAX`]).
    #[inline(always)]
    fn index(ticks: u64) -> usize {
        let v = ticks.min(TICKS_MAX);
        let bucket = 63 - (v | 255).leading_zeros() - BITS_SUB_BUCKETS_HALF;
        ((bucket as usize) << BITS_SUB_BUCKETS_HALF) + (v >> bucket) as usize
    }

    /// The lowest value counted at `index` (hdrhistogram's `value_from_index`).
    fn value_at(index: usize) -> u64 {
        if index < 2 * COUNT_SUB_BUCKETS_HALF {
            return index as u64;
        }
        let bucket = (index >> BITS_SUB_BUCKETS_HALF) - 1;
        ((index - (bucket << BITS_SUB_BUCKETS_HALF)) as u64) << bucket
    }

    #[inline(always)]
    fn record(&mut self, ticks: u64) {
        let i = Self::index(ticks);
        // `index` is below `counts.len()` for every value up to TICKS_MAX; the check
        // costs a compare that is never taken.
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
    }

    /// The same counts as an hdrhistogram.
    fn to_histogram(&self) -> Histogram<u64> {
        histogram_of(&self.counts)
    }
}

/// Entries of one histogram in [`Buckets`]' layout (hdrhistogram's, 2 significant digits).
pub(crate) const COUNT_INDEXES: usize =
    2 * COUNT_SUB_BUCKETS_HALF + COUNT_BUCKETS * COUNT_SUB_BUCKETS_HALF;

/// The index of `value` in [`Buckets`]' layout, for counts kept outside a [`Recorder`] (such
/// as `podkv heap chaos`'s, in shared memory); values over [`TICKS_MAX`] count as it.
#[inline(always)]
pub(crate) fn index_of(value: u64) -> usize {
    Buckets::index(value)
}

/// An hdrhistogram of counts kept in [`Buckets`]' layout (`counts[i]` values at index `i`).
pub(crate) fn histogram_of(counts: &[u64]) -> Histogram<u64> {
    let mut h = new_histogram();
    for (i, &n) in counts.iter().enumerate().filter(|(_, &n)| n > 0) {
        h.record_n(Buckets::value_at(i), n)
            .expect("auto-resizing histograms take any value");
    }
    h
}

/// One worker's measurements of one timed phase.
pub struct Recorder {
    buckets: Vec<Buckets>,
    hits: Vec<u64>,
    misses: Vec<u64>,
    started: Option<(Instant, u64, u64)>,
    /// Timed (nanoseconds, ticks, CPU nanoseconds of this thread).
    elapsed: (u64, u64, u64),
    /// Time on each side of the A/B switch (`--ab-windows`; empty without).
    sides: Sides,
    /// Latency counts on each side of the A/B switch (made at the first operation with a
    /// side: a run without `--ab-windows` carries none).
    side_buckets: Option<Box<[Buckets; 2]>>,
}

impl Recorder {
    /// A recorder for `kinds` operation kinds.
    pub fn new(kinds: usize) -> Self {
        Self {
            buckets: (0..kinds).map(|_| Buckets::new()).collect(),
            hits: vec![0; kinds],
            misses: vec![0; kinds],
            started: None,
            elapsed: (0, 0, 0),
            sides: Sides::default(),
            side_buckets: None,
        }
    }

    /// Starts the clock.
    pub fn start(&mut self) {
        self.started = Some((Instant::now(), ticks(), thread_cpu_ns()));
    }

    /// Stops the clock.
    pub fn stop(&mut self) {
        if let Some((at, tick, cpu)) = self.started.take() {
            self.elapsed = (
                at.elapsed().as_nanos() as u64,
                ticks().wrapping_sub(tick),
                thread_cpu_ns().saturating_sub(cpu),
            );
        }
    }

    /// Records one operation of `kind` that took `ticks`.
    #[inline]
    pub fn record(&mut self, kind: usize, ticks: u64, hit: bool) {
        self.buckets[kind].record(ticks.max(1));
        if hit {
            self.hits[kind] += 1;
        } else {
            self.misses[kind] += 1;
        }
    }

    /// Adds an operation of `ticks` to `side` of the A/B switch (`--ab-windows`).
    #[inline]
    pub fn record_side(&mut self, side: usize, ticks: u64) {
        self.sides.add(side, ticks);
        let buckets = self
            .side_buckets
            .get_or_insert_with(|| Box::new([Buckets::new(), Buckets::new()]));
        buckets[side].record(ticks.max(1));
    }

    /// The worker's totals.
    pub fn into_tally(self) -> Tally {
        Tally {
            histograms: self.buckets.iter().map(Buckets::to_histogram).collect(),
            hits: self.hits,
            misses: self.misses,
            elapsed_ns_max: self.elapsed.0,
            elapsed_ns_sum: self.elapsed.0,
            elapsed_ticks_sum: self.elapsed.1,
            cpu_ns_sum: self.elapsed.2,
            ab: self.sides,
            ab_histograms: self
                .side_buckets
                .map_or_else(Vec::new, |b| b.iter().map(Buckets::to_histogram).collect()),
        }
    }
}

/// CPU time of the calling thread, in nanoseconds (0 if the clock is unavailable).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; the clock id is a constant the kernel knows.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new(DIGITS_HISTOGRAM).expect("2 significant digits is valid")
}

/// Time and operations on each side of the A/B switch (`--ab-windows`, [`super::ab`];
/// index 0: off, 1: on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sides {
    /// Ticks the operations on each side took.
    pub ticks: [u64; 2],
    /// Operations on each side.
    pub ops: [u64; 2],
}

impl Sides {
    /// Adds an operation of `ticks` on `side`.
    #[inline]
    pub fn add(&mut self, side: usize, ticks: u64) {
        self.ticks[side] += ticks;
        self.ops[side] += 1;
    }

    /// Adds another worker's sides.
    pub fn merge(&mut self, other: &Sides) {
        for side in 0..2 {
            self.ticks[side] += other.ticks[side];
            self.ops[side] += other.ops[side];
        }
    }

    /// Ticks per operation on each side (zero for a side without operations).
    pub fn ticks_per_op(&self) -> [f64; 2] {
        std::array::from_fn(|side| self.ticks[side] as f64 / self.ops[side].max(1) as f64)
    }

    /// Time per operation with the switch on over time per operation with it off (`None`
    /// unless both sides have operations).
    pub fn on_over_off(&self) -> Option<f64> {
        if self.ops[0] == 0 || self.ops[1] == 0 || self.ticks[0] == 0 {
            return None;
        }
        let per_op = |side: usize| self.ticks[side] as f64 / self.ops[side] as f64;
        Some(per_op(1) / per_op(0))
    }
}

/// Merged measurements of several workers.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Latency in ticks, per kind.
    pub histograms: Vec<Histogram<u64>>,
    /// Hits per kind.
    pub hits: Vec<u64>,
    /// Misses per kind.
    pub misses: Vec<u64>,
    /// The longest worker's timed nanoseconds.
    pub elapsed_ns_max: u64,
    /// Timed nanoseconds summed over workers.
    pub elapsed_ns_sum: u64,
    /// Timed ticks summed over workers.
    pub elapsed_ticks_sum: u64,
    /// CPU nanoseconds of the workers' timed loops, summed.
    pub cpu_ns_sum: u64,
    /// Time on each side of the A/B switch, summed (`--ab-windows`).
    pub ab: Sides,
    /// Latency in ticks on each side of the A/B switch, off then on (`--ab-windows`; empty
    /// without).
    pub ab_histograms: Vec<Histogram<u64>>,
}

impl Tally {
    /// An empty tally for `kinds` kinds.
    pub fn new(kinds: usize) -> Self {
        Recorder::new(kinds).into_tally()
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        for (a, b) in self.histograms.iter_mut().zip(&other.histograms) {
            a.add(b).expect("auto-resizing histograms always add");
        }
        for (a, b) in self.hits.iter_mut().zip(&other.hits) {
            *a += b;
        }
        for (a, b) in self.misses.iter_mut().zip(&other.misses) {
            *a += b;
        }
        self.elapsed_ns_max = self.elapsed_ns_max.max(other.elapsed_ns_max);
        self.elapsed_ns_sum += other.elapsed_ns_sum;
        self.elapsed_ticks_sum += other.elapsed_ticks_sum;
        self.cpu_ns_sum += other.cpu_ns_sum;
        self.ab.merge(&other.ab);
        if self.ab_histograms.is_empty() {
            // A decoded histogram keeps its size: these must grow as the others do.
            self.ab_histograms = other.ab_histograms.clone();
            self.ab_histograms.iter_mut().for_each(|h| h.auto(true));
        } else {
            for (a, b) in self.ab_histograms.iter_mut().zip(&other.ab_histograms) {
                a.add(b).expect("auto-resizing histograms always add");
            }
        }
    }

    /// Operations of `kind`.
    pub fn count(&self, kind: usize) -> u64 {
        self.hits[kind] + self.misses[kind]
    }

    /// All operations.
    pub fn total(&self) -> u64 {
        self.hits.iter().sum::<u64>() + self.misses.iter().sum::<u64>()
    }

    /// Nanoseconds per tick.
    pub fn ns_per_tick(&self) -> f64 {
        if self.elapsed_ticks_sum == 0 {
            1.0
        } else {
            self.elapsed_ns_sum as f64 / self.elapsed_ticks_sum as f64
        }
    }

    /// All kinds in one histogram.
    pub fn overall(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for h in &self.histograms {
            all.add(h).expect("auto-resizing histograms always add");
        }
        all
    }

    /// The wire form (histograms as hex of hdrhistogram's V2 encoding).
    pub fn to_wire(&self) -> TallyWire {
        TallyWire {
            histograms: self.histograms.iter().map(encode).collect(),
            hits: self.hits.clone(),
            misses: self.misses.clone(),
            elapsed_ns_max: self.elapsed_ns_max,
            elapsed_ns_sum: self.elapsed_ns_sum,
            elapsed_ticks_sum: self.elapsed_ticks_sum,
            cpu_ns_sum: self.cpu_ns_sum,
            ab: self.ab,
            ab_histograms: self.ab_histograms.iter().map(encode).collect(),
        }
    }
}

/// A [`Tally`] as a worker process sends it to the launcher.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TallyWire {
    histograms: Vec<String>,
    hits: Vec<u64>,
    misses: Vec<u64>,
    elapsed_ns_max: u64,
    elapsed_ns_sum: u64,
    elapsed_ticks_sum: u64,
    cpu_ns_sum: u64,
    #[serde(default)]
    ab: Sides,
    #[serde(default)]
    ab_histograms: Vec<String>,
}

impl TallyWire {
    /// Decodes the tally.
    pub fn decode(&self) -> anyhow::Result<Tally> {
        let decode_all = |texts: &[String]| -> anyhow::Result<Vec<Histogram<u64>>> {
            texts.iter().map(|t| decode(t)).collect()
        };
        Ok(Tally {
            histograms: decode_all(&self.histograms)?,
            hits: self.hits.clone(),
            misses: self.misses.clone(),
            elapsed_ns_max: self.elapsed_ns_max,
            elapsed_ns_sum: self.elapsed_ns_sum,
            elapsed_ticks_sum: self.elapsed_ticks_sum,
            cpu_ns_sum: self.cpu_ns_sum,
            ab: self.ab,
            ab_histograms: decode_all(&self.ab_histograms)?,
        })
    }
}

/// A histogram as hex of hdrhistogram's V2 encoding.
fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut bytes)
        .expect("serialising to memory cannot fail");
    hex(&bytes)
}

/// The histogram [`encode`] wrote.
fn decode(text: &str) -> anyhow::Result<Histogram<u64>> {
    let bytes = unhex(text)?;
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| anyhow::anyhow!("bad histogram from a worker: {e:?}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(text.len() % 2 == 0, "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| Ok(u8::from_str_radix(&text[i..i + 2], 16)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_compare_time_per_operation() {
        let mut a = Sides::default();
        assert_eq!(a.on_over_off(), None, "no operations: no ratio");
        a.add(0, 100);
        a.add(0, 300);
        assert_eq!(a.on_over_off(), None, "one side only: no ratio");
        let mut b = Sides::default();
        b.add(1, 100);
        a.merge(&b);
        assert_eq!(a.ops, [2, 1]);
        assert_eq!(a.on_over_off(), Some(0.5), "100 ticks on against 200 off");
    }

    #[test]
    fn each_side_keeps_its_latencies_through_the_wire() {
        assert!(
            Recorder::new(1).into_tally().ab_histograms.is_empty(),
            "a run without sides carries no side histograms"
        );
        let mut r = Recorder::new(1);
        for t in 1..=100 {
            r.record_side(0, t);
            r.record_side(1, 10 * t);
        }
        let tally = r.into_tally();
        let mut sum = Tally::new(1);
        sum.merge(&tally.to_wire().decode().unwrap());
        let mut slower = Recorder::new(1);
        slower.record_side(1, 1 << 30);
        sum.merge(&slower.into_tally());
        sum.merge(&tally);
        let [off, on] = [&sum.ab_histograms[0], &sum.ab_histograms[1]];
        assert_eq!((off.len(), on.len()), (200, 201));
        assert_eq!(off.value_at_quantile(0.99), 99);
        let p50 = on.value_at_quantile(0.5);
        assert!((500..=515).contains(&p50), "the on side's own: {p50}");
        assert!(
            on.equivalent(on.max(), 1 << 30),
            "grown past the first merge's largest"
        );
        assert_eq!(sum.ab.ops, [200, 201]);
    }

    #[test]
    fn buckets_are_hdrhistograms_layout() {
        let mut values: Vec<u64> = (1..5000).collect();
        values.extend((0..62).flat_map(|s| [1u64 << s, (1 << s) + 1, (3 << s) / 2]));
        values.extend([TICKS_MAX, u64::MAX]);
        let mut buckets = Buckets::new();
        let mut reference = new_histogram();
        for &v in &values {
            buckets.record(v);
            reference.record(v.min(TICKS_MAX)).unwrap();
            let i = Buckets::index(v.min(TICKS_MAX));
            assert!(
                reference.equivalent(Buckets::value_at(i), v.min(TICKS_MAX)),
                "{v}"
            );
        }
        let ours = buckets.to_histogram();
        assert_eq!(ours.len(), reference.len());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                ours.value_at_quantile(q),
                reference.value_at_quantile(q),
                "{q}"
            );
        }
        assert_eq!(ours.max(), reference.max());
        assert_eq!(ours.min(), reference.min());
    }

    #[test]
    fn tallies_merge_and_survive_the_wire() {
        let mut a = Recorder::new(2);
        a.start();
        for t in 1..=100 {
            a.record(0, t, t % 2 == 0);
        }
        a.record(1, 5000, false);
        a.stop();
        let a = a.into_tally();
        let back = a.to_wire().decode().unwrap();
        let mut sum = Tally::new(2);
        sum.merge(&a);
        sum.merge(&back);
        assert_eq!(sum.count(0), 200);
        assert_eq!((sum.hits[0], sum.misses[1]), (100, 2));
        assert_eq!(sum.overall().len(), 202);
        assert!(sum.histograms[0].value_at_quantile(0.5) <= 51);
    }
}
