//! One process of a benchmark run on the shared runner: its pinned worker threads, their
//! timed loops, and what the process measured.
//!
//! The runner's launcher ([`crate::runner::launch_processes`]) starts the processes — this
//! one's threads in the launcher itself when there is one process, else `podkv run-worker`
//! processes that reach [`worker_process`] — and holds every worker at the runner's
//! start line ([`crate::runner::control`]): a worker warms up, counts itself `ready`, waits
//! for `go`, runs its loop, counts itself `done`. The benchmark has one phase, the timed one.
//!
//! # Timing
//! The benches' operations take 10–30 ns, so nothing is timed per operation: each worker
//! times its whole loop (the run's seconds are the slowest worker's), and publishes its
//! progress for the launcher's progress bar once per batch, not per operation.
//!
//! # Memory
//! A process measures its PSS and page faults when all its workers are done but before any
//! exits, so per-thread allocator caches are still counted, as they are while a program
//! runs.

use super::alloc::BenchAlloc;
use super::job::{BenchJob, Kind};
use super::ring::{self, Ring};
use super::workload;
use crate::process_stats;
use crate::runner::control::Control;
use crate::runner::metrics::{thread_cpu_ns, Tally};
use crate::runner::report::ProcessReport;
use crate::runner::spec::RunSpec;
use anyhow::Context;
use podkv_alloc::{Config, Heap, Offset};
use podkv_hw::cpus::{allowed_to_process, pin_to};
use std::alloc::Layout;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// `podkv run-worker` for a benchmark: opens the shared heap (or boost segment) and runs
/// this process's workers. Only podkv and boost span processes (validated by the launcher).
pub fn worker_process(
    spec: &RunSpec,
    job: &BenchJob,
    ctl: &Control,
    process: usize,
) -> anyhow::Result<ProcessReport> {
    anyhow::ensure!(
        job.allocator.spans_processes(),
        "{} cannot run in a worker process: its memory is process-local",
        job.allocator.name()
    );
    if job.allocator == super::AllocatorName::Boost {
        return boost_worker(spec, job, ctl, process);
    }
    let path = job
        .heap
        .as_ref()
        .context("a podkv benchmark names its heap")?;
    let config = Config {
        create: false,
        huge_backing: job.huge_backing.to_alloc(),
        ..Config::default()
    };
    let heap = Heap::open(path, &config)?;
    let rings = rings_in(&heap, &job.rings);
    run_process(spec, job, ctl, &rings, process, &|| {
        heap.thread().expect("a free thread slot")
    })
}

/// A worker process of the boost baseline: the launcher's segment, opened by name.
fn boost_worker(
    spec: &RunSpec,
    job: &BenchJob,
    ctl: &Control,
    process: usize,
) -> anyhow::Result<ProcessReport> {
    let name = job
        .heap
        .as_ref()
        .context("a boost benchmark names its segment")?;
    let segment = super::boost::Segment::open(&name.to_string_lossy())?;
    let handle = segment.handle();
    let rings: Vec<&Ring> = job
        .rings
        .iter()
        // SAFETY: the launcher allocated and zeroed each ring in the segment before any
        // worker started, and frees the segment only after every worker process has exited.
        .map(|&h| unsafe { &*(handle.addr(h) as *const Ring) })
        .collect();
    run_process(spec, job, ctl, &rings, process, &|| segment.handle())
}

/// The rings at `offsets` in `heap`.
pub(super) fn rings_in<'h>(heap: &'h Heap, offsets: &[u64]) -> Vec<&'h Ring> {
    offsets
        .iter()
        .map(|&off| {
            // SAFETY: the launcher allocated and zeroed each ring before any worker started,
            // and frees them only after every worker process has exited.
            unsafe { &*(heap.resolve(Offset(off)) as *const Ring) }
        })
        .collect()
}

/// Runs process `process`'s threads (one allocator handle each from `make`) and returns
/// what the process measured.
pub fn run_process<A: BenchAlloc, F: Fn() -> A + Sync>(
    spec: &RunSpec,
    job: &BenchJob,
    ctl: &Control,
    rings: &[&Ring],
    process: usize,
    make: &F,
) -> anyhow::Result<ProcessReport> {
    let threads = spec.threads;
    let cpus = allowed_to_process();
    let faults_before = process_stats::minor_faults();
    let finished = AtomicU64::new(0);
    let measured = AtomicU64::new(0);
    let memory = (AtomicU64::new(0), AtomicU64::new(0));
    let results: Vec<anyhow::Result<Timed>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (cpus, finished, measured, memory) = (&cpus, &finished, &measured, &memory);
                s.spawn(move || {
                    let w = process * threads + t;
                    if spec.pin && !cpus.is_empty() {
                        pin_to(cpus[w % cpus.len()]);
                    }
                    let exit = ThreadExit {
                        finished,
                        measured,
                        ctl,
                    };
                    let a = make();
                    let result = run_worker(&a, job, ctl, rings, w);
                    exit.finish();
                    if t == 0 {
                        wait_until(finished, threads as u64);
                        memory
                            .0
                            .store(process_stats::pss_bytes(), Ordering::Release);
                        let faults = process_stats::minor_faults().saturating_sub(faults_before);
                        memory.1.store(faults, Ordering::Release);
                        measured.store(1, Ordering::Release);
                    }
                    wait_until(measured, 1);
                    if result.is_err() {
                        ctl.failed.store(1, Ordering::Release);
                    }
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut tally = Tally::new(1);
    for timed in results {
        let timed = timed?;
        tally.hits[0] += timed.ops;
        tally.elapsed_ns_max = tally.elapsed_ns_max.max(timed.ns);
        tally.elapsed_ns_sum += timed.ns;
        tally.cpu_ns_sum += timed.cpu_ns;
    }
    Ok(ProcessReport {
        process,
        tally: tally.to_wire(),
        pss_bytes: memory.0.load(Ordering::Acquire),
        page_faults: memory.1.load(Ordering::Acquire),
        hwcc_bytes: None,
        coherence: None,
        servers: Vec::new(),
        pss_samples: Vec::new(),
        timed_from_ns: 0,
        server_version: None,
    })
}

/// What one worker's timed loop did.
struct Timed {
    ops: u64,
    ns: u64,
    cpu_ns: u64,
}

/// Counts a worker thread as finished exactly once, also when its loop panics (then it
/// also releases the others and fails the run, so no thread waits for it forever).
struct ThreadExit<'a> {
    finished: &'a AtomicU64,
    measured: &'a AtomicU64,
    ctl: &'a Control,
}

impl ThreadExit<'_> {
    fn finish(self) {
        self.finished.fetch_add(1, Ordering::AcqRel);
        std::mem::forget(self);
    }
}

impl Drop for ThreadExit<'_> {
    fn drop(&mut self) {
        self.ctl.failed.store(1, Ordering::Release);
        self.finished.fetch_add(1, Ordering::AcqRel);
        self.measured.store(1, Ordering::Release);
    }
}

fn wait_until(word: &AtomicU64, target: u64) {
    while word.load(Ordering::Acquire) < target {
        std::thread::yield_now();
    }
}

/// One worker: warm up, the start line, the timed loop (the only code path of each
/// benchmark's loop), done.
fn run_worker<A: BenchAlloc>(
    a: &A,
    job: &BenchJob,
    ctl: &Control,
    rings: &[&Ring],
    w: usize,
) -> anyhow::Result<Timed> {
    let layout = Layout::from_size_align(job.size, 8)?;
    if job.kind == Kind::Threadtest {
        // Warm-up, untimed: slabs and pages in place.
        let (progress, stop) = (AtomicU64::new(0), AtomicU64::new(0));
        workload::threadtest(a, layout, 1, job.batch, &progress, &stop);
    }
    ctl.start_line(0)?;
    let progress = &ctl.progress[w];
    let (start, cpu) = (Instant::now(), thread_cpu_ns());
    let ops = match job.kind {
        Kind::Threadtest => {
            let rounds = job.ops_per_worker / job.batch as u64;
            workload::threadtest(a, layout, rounds, job.batch, progress, &ctl.stop)
        }
        Kind::Xmalloc => {
            let window = match job.window {
                0 => ring::COUNT_RING_SLOTS,
                window => window,
            };
            let input = rings[(w + rings.len() - 1) % rings.len()];
            let batching = (job.batch as u64, window);
            workload::xmalloc(
                a,
                layout,
                job.ops_per_worker,
                batching,
                (rings[w], input),
                progress,
                &ctl.stop,
            )
        }
    };
    let timed = Timed {
        ops,
        ns: start.elapsed().as_nanos() as u64,
        cpu_ns: thread_cpu_ns().saturating_sub(cpu),
    };
    progress.store(ops, Ordering::Relaxed);
    ctl.finish_line(0);
    Ok(timed)
}
