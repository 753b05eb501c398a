//! One worker process of `podkv heap chaos`: it allocates, frees and hands blocks to other
//! workers through the record, timing every operation three ways into its histograms, and
//! stops at a safe point between operations whenever the coordinator pauses everyone.

use super::record::{
    offset_of, owner_of, pack, state_of, Record, FREEING, PHASE_CALM, PHASE_CONTROL, PHASE_FLOOR,
    PHASE_WINDOW, RECORDS, RESERVED, SETTLED, UNSETTLED,
};
use anyhow::{ensure, Context};
use podkv_alloc::{Config, Heap, Offset, ThreadHandle};
use std::alloc::Layout;
use std::path::Path;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// One worker process of `podkv heap chaos`.
pub(super) fn run(path: &Path, w: u64, workers: u64, seed: u64, floor: u64) -> anyhow::Result<()> {
    let heap = Heap::open(
        path,
        &Config {
            create: false,
            ..super::config()
        },
    )?;
    let record = Record::open(path, false)?;
    let t = heap.thread()?;
    let mut rng = podkv_alloc::stress::Rng::new(seed);
    let w_idx = w as usize;
    let mut paused_epoch = 0;
    let run_delay = RunDelay::open()?;
    time_floor(&record, w_idx, &run_delay, seed, floor);
    loop {
        let epoch = record.pause().load(Acquire);
        if epoch % 2 == 1 {
            if epoch != paused_epoch {
                record.paused(w_idx).store(epoch, Release);
                paused_epoch = epoch;
            }
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        if record.rest(w_idx).load(Acquire) != 0 {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        let Some(op) = choose(&record, &mut rng, w, workers) else {
            continue;
        };
        let (window, control) = (
            record.window().load(Acquire),
            record.control().load(Acquire),
        );
        // The readings nest around the operation so that the wall clock times it alone.
        let waited = run_delay.read().unwrap_or(0);
        let cpu = thread_cpu_ns();
        let calls = podkv_alloc::file::calls_on_this_thread();
        let begin = Instant::now();
        perform(&t, &record, op, w);
        let ns = begin.elapsed().as_nanos() as u64;
        let calls = podkv_alloc::file::calls_on_this_thread() - calls;
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
        let queued = run_delay.read().unwrap_or(0).saturating_sub(waited);
        let phase = phase_of(
            [window, record.window().load(Acquire)],
            [control, record.control().load(Acquire)],
        );
        let ns = [ns, cpu_ns, ns.saturating_sub(queued)];
        record.count_latency(w_idx, phase, ns);
        record.count_calls(w_idx, phase, calls, ns);
        record.heartbeat(w_idx).fetch_add(1, Release);
    }
}

/// The phase of an operation from the window and control words read before and after it
/// (each odd while its window is open): a kill window if it overlapped one, else a control
/// window if it overlapped one, else calm.
fn phase_of(window: [u64; 2], control: [u64; 2]) -> usize {
    let overlapped = |[before, after]: [u64; 2]| before % 2 == 1 || after != before;
    if overlapped(window) {
        PHASE_WINDOW
    } else if overlapped(control) {
        PHASE_CONTROL
    } else {
        PHASE_CALM
    }
}

/// An operation of a worker's: allocate a block for a record it reserved, hand a block it
/// holds to a worker, or free one.
enum Op {
    Allocate { i: usize, size: usize },
    HandOver { i: usize, r: u64, to: u64 },
    Free { i: usize, r: u64 },
}

/// Draws the next operation: a random record, which the worker reserves if it is free (and the
/// draw says allocate) or acts on if it holds its block; `None` when there is nothing to do.
fn choose(record: &Record, rng: &mut podkv_alloc::stress::Rng, w: u64, workers: u64) -> Option<Op> {
    let i = rng.below(RECORDS as u64) as usize;
    let r = record.record(i).load(Acquire);
    let roll = rng.below(100);
    if r == 0 {
        if roll >= 60 {
            return None;
        }
        record
            .record(i)
            .compare_exchange(0, pack(0, w, RESERVED), AcqRel, Relaxed)
            .ok()?;
        let size = if rng.below(10) == 0 {
            2048 + rng.below(120 << 10) as usize
        } else {
            8 + rng.below(1000) as usize
        };
        Some(Op::Allocate { i, size })
    } else if owner_of(r) == w && state_of(r) == SETTLED {
        if roll < 50 {
            Some(Op::HandOver {
                i,
                r,
                to: rng.below(workers),
            })
        } else {
            Some(Op::Free { i, r })
        }
    } else {
        None
    }
}

/// Performs one operation.
fn perform(t: &ThreadHandle, record: &Record, op: Op, w: u64) {
    match op {
        Op::Allocate { i, size } => {
            record.last(t.slot_index()).store(0, Release);
            let off = t
                .allocate(Layout::from_size_align(size, 8).expect("layout"))
                .expect("chaos heap exhausted");
            // SAFETY: a fresh block of at least 8 bytes.
            unsafe { (t.resolve(off) as *mut u64).write_volatile(i as u64) };
            record.record(i).store(pack(off.0, w, UNSETTLED), Release);
            record.last(t.slot_index()).store(off.0, Release);
            record.record(i).store(pack(off.0, w, SETTLED), Release);
        }
        Op::HandOver { i, r, to } => {
            let _ = record.record(i).compare_exchange(
                r,
                pack(offset_of(r), to, SETTLED),
                AcqRel,
                Relaxed,
            );
        }
        Op::Free { i, r } => {
            // SAFETY: a block this worker holds.
            let stamp = unsafe { (t.resolve(Offset(offset_of(r))) as *const u64).read_volatile() };
            assert_eq!(stamp, i as u64, "block of record {i} overwritten");
            record
                .record(i)
                .store(pack(offset_of(r), w, FREEING), Release);
            t.free(Offset(offset_of(r)));
            record.record(i).store(0, Release);
        }
    }
}

/// Times `floor` runs of a fixed busy loop that never waits, into [`PHASE_FLOOR`]: the
/// machine's floor for the same three measures.
fn time_floor(record: &Record, w: usize, run_delay: &RunDelay, seed: u64, floor: u64) {
    let mut x = seed;
    for _ in 0..floor {
        let waited = run_delay.read().unwrap_or(0);
        let cpu = thread_cpu_ns();
        let begin = Instant::now();
        for k in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(k));
        }
        let ns = begin.elapsed().as_nanos() as u64;
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
        let queued = run_delay.read().unwrap_or(0).saturating_sub(waited);
        record.count_latency(w, PHASE_FLOOR, [ns, cpu_ns, ns.saturating_sub(queued)]);
    }
}

/// This thread's CPU time in ns.
fn thread_cpu_ns() -> u64 {
    podkv_alloc::process::thread_cpu_time().as_nanos() as u64
}

/// This thread's run-queue wait so far (ns), read from `/proc/thread-self/schedstat`
/// ("CPU time, run-queue wait, time slices"); kept open and read with `pread`.
struct RunDelay(std::fs::File);

impl RunDelay {
    fn open() -> anyhow::Result<RunDelay> {
        let file = std::fs::File::open("/proc/thread-self/schedstat")
            .context("open /proc/thread-self/schedstat (needs a kernel with sched_info)")?;
        let delay = RunDelay(file);
        ensure!(
            delay.read().is_some(),
            "unreadable /proc/thread-self/schedstat"
        );
        Ok(delay)
    }

    fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.0.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(1)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_counts_in_the_window_it_overlapped() {
        let cases = [
            ([2, 2], [4, 4], PHASE_CALM, "no window"),
            ([3, 3], [4, 4], PHASE_WINDOW, "inside a kill window"),
            ([2, 3], [4, 4], PHASE_WINDOW, "a kill window opened"),
            ([3, 4], [4, 4], PHASE_WINDOW, "a kill window closed"),
            ([2, 4], [4, 4], PHASE_WINDOW, "a whole kill window"),
            ([2, 2], [5, 5], PHASE_CONTROL, "inside a control window"),
            ([2, 2], [4, 5], PHASE_CONTROL, "a control window opened"),
            ([2, 2], [5, 6], PHASE_CONTROL, "a control window closed"),
            ([2, 3], [5, 6], PHASE_WINDOW, "both: the kill's"),
        ];
        for (window, control, phase, what) in cases {
            assert_eq!(phase_of(window, control), phase, "{what}");
        }
    }
}
