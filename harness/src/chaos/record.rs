//! The application's record: a file beside the heap (`<heap>.chaos`) that every chaos process
//! maps, holding the table of blocks the workers hold, the control words, and each worker's
//! counters and latency histograms (which outlive a killed worker).
//!
//! # Layout (8-byte words)
//! - `RECORDS` records, each `offset | owner << 48 | state << 56` or zero: a block some worker
//!   holds (states below);
//! - `last[slot]` for `SLOTS_MAX` thread slots: the block each slot last handed to its worker;
//! - per worker, [`FIELDS`] words: heartbeat, pause acknowledgement, rest request, then per
//!   phase the operations that backed pages and those that released pages, then per measure
//!   and phase the slowest operation that did neither;
//! - the control words: pause, window, control;
//! - per worker, per measure and phase, a latency histogram: its exact maximum, then counts in
//!   the runner's hdrhistogram layout ([`metrics::index_of`]), read back as an hdrhistogram.
//!
//! Each worker is the only writer of its own fields and histograms; the coordinator is the
//! only writer of the control words and `rest`; records change by CAS or by their owner.

use crate::runner::metrics;
use anyhow::Context;
use podkv_alloc::file::Calls;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::*};

pub(super) const RECORDS: usize = 8192;
const SLOTS_MAX: usize = 16384;
pub(super) const WORKERS_MAX: usize = 64;
const MASK_OFFSET: u64 = (1 << 48) - 1;
/// A record a worker claimed for an allocation it has not made yet (offset 0).
pub(super) const RESERVED: u64 = 1;
/// A record whose block is allocated but not yet noted in `last` (only its allocator knows).
pub(super) const UNSETTLED: u64 = 2;
/// A record whose block its owner holds.
pub(super) const SETTLED: u64 = 3;
/// A record whose block is being freed.
pub(super) const FREEING: u64 = 4;
/// How an operation's latency is measured: wall clock; the thread's CPU time; and wall clock
/// less the time the thread waited on a run queue (runnable, but another task had the CPU:
/// `run_delay` in `/proc/thread-self/schedstat`). The third still counts every wait an
/// operation could cause itself (spinning, sleeping, blocking in the kernel) and leaves out
/// only the scheduler's preemption, which on a machine with fewer cores than runnable
/// processes dominates the wall clock's tail.
pub(super) const MEASURES: usize = 3;
pub(super) const MEASURE_NAMES: [&str; MEASURES] = ["wall", "CPU", "wall less run-queue wait"];
/// Operations that overlapped a kill-to-recovery window, ones that overlapped a control window
/// (the same wait with one worker resting instead of dead: the A/A control), and the others.
pub(super) const PHASE_CALM: usize = 0;
pub(super) const PHASE_WINDOW: usize = 1;
pub(super) const PHASE_CONTROL: usize = 2;
/// Not operations: a fixed busy loop each first-started worker times before it starts work,
/// the machine's floor (what the same timing gives for code that never waits).
pub(super) const PHASE_FLOOR: usize = 3;
pub(super) const PHASES: usize = 4;
/// Words per worker in the record file: heartbeat, pause acknowledgement, rest request, then
/// per phase the operations that backed pages (`fallocate`) and those that released pages,
/// then per measure and phase the slowest operation that did neither.
const FIELDS: usize = 3 + 2 * PHASES + MEASURES * PHASES;
/// Words of one latency histogram: its maximum, then its counts.
const HISTOGRAM: usize = 1 + metrics::COUNT_INDEXES;
/// Words per worker of latency histograms.
const HISTOGRAMS: usize = MEASURES * PHASES * HISTOGRAM;

/// The shared record file.
pub(super) struct Record {
    words: &'static [AtomicU64],
}

impl Record {
    /// Where the per-worker fields, the control words (pause, window) and the histograms start.
    const AT_WORKERS: usize = RECORDS + SLOTS_MAX;
    const AT_CONTROL: usize = Self::AT_WORKERS + FIELDS * WORKERS_MAX;
    const AT_HISTOGRAMS: usize = Self::AT_CONTROL + 8;
    pub(super) const LEN: usize = Self::AT_HISTOGRAMS + HISTOGRAMS * WORKERS_MAX;

    /// Maps the record of the heap at `heap` (created zeroed with `create`).
    pub(super) fn open(heap: &Path, create: bool) -> anyhow::Result<Record> {
        let path = path_of(heap);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))?;
        let len = Self::LEN * 8;
        file.set_len(len as u64)?;
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .with_context(|| format!("cannot map {}", path.display()))?;
        // Every process keeps its record until it exits.
        let map: &'static memmap2::MmapRaw = Box::leak(Box::new(map));
        // SAFETY: `len` bytes mapped shared and page-aligned (so 8-aligned), alive for the
        // process (leaked); AtomicU64 is valid for any bits.
        let words =
            unsafe { std::slice::from_raw_parts(map.as_ptr() as *const AtomicU64, Self::LEN) };
        Ok(Record { words })
    }

    /// Removes the record of the heap at `heap`.
    pub(super) fn remove(heap: &Path) {
        let _ = std::fs::remove_file(path_of(heap));
    }

    pub(super) fn record(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }
    pub(super) fn last(&self, slot: u32) -> &AtomicU64 {
        &self.words[RECORDS + slot as usize]
    }
    fn worker(&self, w: usize, field: usize) -> &AtomicU64 {
        &self.words[Self::AT_WORKERS + FIELDS * w + field]
    }
    pub(super) fn heartbeat(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 0)
    }
    pub(super) fn paused(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 1)
    }
    /// Non-zero while the coordinator wants worker `w` idle (it rests through a control window,
    /// as a killed worker would be dead through a kill window).
    pub(super) fn rest(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 2)
    }
    /// Worker `w`'s count of operations in `phase` that backed pages (`release` false) or
    /// released them (true).
    fn calls(&self, w: usize, phase: usize, release: bool) -> &AtomicU64 {
        self.worker(w, 3 + 2 * phase + usize::from(release))
    }
    /// Worker `w`'s slowest operation of `measure` in `phase` that made no system call.
    fn quiet_max(&self, w: usize, measure: usize, phase: usize) -> &AtomicU64 {
        self.worker(w, 3 + 2 * PHASES + measure * PHASES + phase)
    }
    /// Counts one operation that made system calls (`calls`), or notes the latencies of one
    /// that made none (this worker is the only writer of its fields).
    pub(super) fn count_calls(&self, w: usize, phase: usize, calls: Calls, ns: [u64; MEASURES]) {
        for (release, made) in [(false, calls.backs), (true, calls.releases)] {
            if made > 0 {
                let count = self.calls(w, phase, release);
                count.store(count.load(Relaxed) + 1, Relaxed);
            }
        }
        if calls != Calls::default() {
            return;
        }
        for (measure, ns) in ns.into_iter().enumerate() {
            let max = self.quiet_max(w, measure, phase);
            if ns > max.load(Relaxed) {
                max.store(ns, Relaxed);
            }
        }
    }
    /// Over every worker: operations in `phase` that backed pages, operations that released
    /// pages, and the slowest operation of `measure` in `phase` that did neither.
    pub(super) fn calls_and_quiet_max(&self, measure: usize, phase: usize) -> (u64, u64, u64) {
        (0..WORKERS_MAX).fold((0, 0, 0), |(backs, releases, max), w| {
            (
                backs + self.calls(w, phase, false).load(Acquire),
                releases + self.calls(w, phase, true).load(Acquire),
                max.max(self.quiet_max(w, measure, phase).load(Acquire)),
            )
        })
    }
    /// Worker `w`'s latency histogram of `measure` in `phase`: its maximum, then its counts.
    /// Kept across the worker's restarts: a killed worker's operations stay counted.
    pub(super) fn histogram(&self, w: usize, measure: usize, phase: usize) -> &[AtomicU64] {
        let at = Self::AT_HISTOGRAMS + HISTOGRAMS * w + (measure * PHASES + phase) * HISTOGRAM;
        &self.words[at..at + HISTOGRAM]
    }

    /// Counts one operation's latencies (this worker is the only writer of its histograms).
    pub(super) fn count_latency(&self, w: usize, phase: usize, ns: [u64; MEASURES]) {
        for (measure, ns) in ns.into_iter().enumerate() {
            let h = self.histogram(w, measure, phase);
            if ns > h[0].load(Relaxed) {
                h[0].store(ns, Relaxed);
            }
            let b = &h[1 + metrics::index_of(ns)];
            b.store(b.load(Relaxed) + 1, Relaxed);
        }
    }

    /// The pause epoch: odd while the coordinator wants everyone paused.
    pub(super) fn pause(&self) -> &AtomicU64 {
        &self.words[Self::AT_CONTROL]
    }
    /// The window: odd from a kill until the dead process's slots are recovered.
    pub(super) fn window(&self) -> &AtomicU64 {
        &self.words[Self::AT_CONTROL + 1]
    }
    /// The control window: odd while one worker rests as long as a killed one stays dead.
    pub(super) fn control(&self) -> &AtomicU64 {
        &self.words[Self::AT_CONTROL + 2]
    }
}

pub(super) const fn pack(offset: u64, owner: u64, state: u64) -> u64 {
    offset | owner << 48 | state << 56
}
pub(super) const fn offset_of(r: u64) -> u64 {
    r & MASK_OFFSET
}
pub(super) const fn owner_of(r: u64) -> u64 {
    (r >> 48) & 0xFF
}
pub(super) const fn state_of(r: u64) -> u64 {
    r >> 56
}

fn path_of(heap: &Path) -> PathBuf {
    let mut p = heap.as_os_str().to_owned();
    p.push(".chaos");
    PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_of_the_record_belongs_to_one_field() {
        // Owners as (field, worker, a, b, c): labels are only spelled out on a clash.
        type Owner = (&'static str, usize, usize, usize, usize);
        let mut owner: Vec<Option<Owner>> = vec![None; Record::LEN];
        let mut claim = |i: usize, what: Owner| {
            assert!(i < Record::LEN, "{what:?} at {i} is past the record");
            if let Some(other) = owner[i].replace(what) {
                panic!("{what:?} and {other:?} share word {i}");
            }
        };
        // A record over plain memory, only to compute the fields' places.
        let words: &'static [AtomicU64] =
            Box::leak((0..Record::LEN).map(|_| AtomicU64::new(0)).collect());
        let r = Record { words };
        let at = |word: &AtomicU64| word.as_ptr() as usize;
        let offset = |word: &AtomicU64, r: &Record| (at(word) - at(&r.words[0])) / 8;
        for w in 0..WORKERS_MAX {
            claim(offset(r.heartbeat(w), &r), ("heartbeat", w, 0, 0, 0));
            claim(offset(r.paused(w), &r), ("paused", w, 0, 0, 0));
            claim(offset(r.rest(w), &r), ("rest", w, 0, 0, 0));
            for phase in 0..PHASES {
                for release in [false, true] {
                    let word = r.calls(w, phase, release);
                    claim(offset(word, &r), ("calls", w, phase, release.into(), 0));
                }
                for measure in 0..MEASURES {
                    let word = r.quiet_max(w, measure, phase);
                    claim(offset(word, &r), ("quiet", w, measure, phase, 0));
                    let h = r.histogram(w, measure, phase);
                    for (b, word) in h.iter().enumerate() {
                        claim(offset(word, &r), ("histogram", w, measure, phase, b));
                    }
                }
            }
            if w == 0 {
                claim(offset(r.pause(), &r), ("pause", 0, 0, 0, 0));
                claim(offset(r.window(), &r), ("window", 0, 0, 0, 0));
                claim(offset(r.control(), &r), ("control", 0, 0, 0, 0));
            }
        }
    }
}
