//! `podkv bench threadtest|xmalloc`: allocator microbenchmarks, podkv against mimalloc,
//! jemalloc (feature `baselines`) and the system allocator in the same binary, with real
//! processes sharing one heap for podkv.
//!
//! # Map
//! - [`workload`]: the two loops; [`alloc`]: the allocators behind one trait;
//!   [`ring`]: xmalloc's hand-over queue;
//! - [`process`]: one process of a run — pinned worker threads at the runner's start line,
//!   the timed loops, PSS and faults; [`job`]: the run's job as the runner carries it;
//! - [`frag`]: `podkv bench frag`, NVAlloc's Fragbench (one child process per run);
//! - [`huge`]: `podkv bench huge`, the same over huge blocks; [`mcas`]: `podkv bench mcas`,
//!   nanoseconds per mCAS (threads of its own, no allocator); [`recovery`]: `podkv bench
//!   recovery`, the time to recover the store after a writer's `kill -9`;
//! - this file: arguments, one run per (repeat, allocator) launched by the shared runner
//!   ([`crate::runner::launch_processes`]: `podkv run-worker` processes, shared-memory
//!   barriers, progress bar), the table and NDJSON records.
//!
//! Every run is measured from a common start (all workers wait at the start line, warm-up
//! done) to the last worker's finish; the table reports the median over `--repeat` runs and
//! each allocator's ratio to mimalloc from the same invocation. `--duration` ends a run
//! early through the runner's stop word (its record says `timed_out`); records are appended
//! by [`crate::helpers::append_ndjson`], as the runner's own.

pub mod alloc;
pub mod boost;
pub mod frag;
pub mod huge;
pub mod job;
pub mod mcas;
pub mod process;
pub mod recovery;
pub mod ring;
pub mod workload;

use crate::helpers::{human_bytes, median};
use crate::process_stats;
use crate::runner;
use crate::runner::control::COUNT_WORKERS_MAX;
use crate::runner::report::ProcessReport;
use crate::runner::spec::{Job, RunSpec};
use crate::runner::targets::TargetSpec;
use alloc::BenchAlloc;
pub use job::{AllocatorName, Backing, BenchJob, Kind};
use podkv_alloc::{Config, Heap, Liveness};
use podkv_hw::Coherence;
use ring::Ring;
use std::alloc::Layout;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Flags shared by `podkv bench threadtest` and `podkv bench xmalloc`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Allocators to measure in this one run, comma separated; ratios are against mimalloc.
    #[arg(long, value_delimiter = ',', default_value = "podkv,mimalloc")]
    pub allocator: Vec<AllocatorName>,
    /// Bytes per allocation.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Allocations in all, split evenly across workers.
    #[arg(long, default_value_t = 20_000_000)]
    pub ops: u64,
    /// Threads per process [default: 1 for threadtest, 2 for xmalloc].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Processes sharing one heap (podkv only: other allocators cannot share memory).
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
    /// Objects per threadtest round / blocks per xmalloc hand-over batch.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Heap file for podkv [default: a fresh file under /dev/shm, removed afterwards].
    #[arg(long)]
    pub heap: Option<PathBuf>,
    /// Most bytes of each of podkv's small and large slab heaps (address space reserved).
    #[arg(long, default_value = "64GiB", value_parser = crate::helpers::parse_bytes)]
    pub heap_bytes: u64,
    /// Runs per allocator; the table shows the median.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Append one NDJSON record per run to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// End each run after this many seconds, even if allocations remain (every block made
    /// is still freed); the record then says `"timed_out": true`.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// xmalloc: most blocks each producer keeps waiting for its consumer [default: a whole
    /// ring, 4096]. Huge blocks need a small window: each live one holds a descriptor.
    #[arg(long)]
    pub window: Option<usize>,
    /// How podkv backs blocks over 512 KiB: `reserve` every page at allocation (out of memory
    /// is an error then), or `sparse` (only the pages touched).
    #[arg(long, value_enum, default_value = "reserve")]
    pub huge_backing: Backing,
    /// Coherence mode of podkv's heap: `hardware` (all memory coherent), `limited` (only the
    /// HWcc words; slab descriptors follow the SWcc write-back/invalidate protocol) or `mcas`
    /// (nothing coherent; every multi-writer word changed by memory-side CAS).
    #[arg(long, default_value = "hardware")]
    pub coherence: podkv_hw::Coherence,
    /// With `--coherence mcas`: the mCAS implementation, `flush-cas` (write back, then CPU CAS)
    /// or `nmp` (the software near-memory processor, started by the first process to open the
    /// heap). Ignored in other modes.
    #[arg(long, default_value = "flush-cas")]
    pub mcas_impl: podkv_hw::mcas::McasKind,
    /// Address space of podkv's huge heap (blocks over 512 KiB); 0: none (e.g. under valgrind,
    /// which cannot reserve a terabyte).
    #[arg(long, default_value = "1TiB", value_parser = crate::helpers::parse_bytes)]
    pub huge_bytes: u64,
}

/// One measured run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Record {
    /// `threadtest` or `xmalloc`.
    pub kind: &'static str,
    /// Allocator name.
    pub allocator: &'static str,
    /// Bytes per allocation.
    pub size: usize,
    /// Allocations made.
    pub ops: u64,
    /// Threads per process.
    pub threads: usize,
    /// Processes.
    pub processes: usize,
    /// Wall time from the start line to the last worker's finish.
    pub seconds: f64,
    /// Allocations (each with its free) per second.
    pub ops_per_sec: f64,
    /// Summed PSS of the workers' processes at the end of the timed run.
    pub pss_bytes: u64,
    /// HWcc metadata of the heap (podkv only).
    pub hwcc_bytes: Option<u64>,
    /// The heap's coherence mode (podkv only).
    pub coherence: Option<&'static str>,
    /// Minor page faults during the run, summed over processes.
    pub page_faults: u64,
    /// Which repeat this was.
    pub repeat: usize,
    /// Whether `--duration` ended the run before its allocations were all made.
    pub timed_out: bool,
    /// The commit of the binary.
    pub git_commit: &'static str,
    /// The `podkv` command line that made the record.
    pub command: String,
    /// The suite that ran it (its file's stem), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// The paper figure that suite reproduces, if it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figure: Option<String>,
    /// Whether the workers outnumbered the machine's CPUs.
    pub oversubscribed: bool,
    /// With `--coherence mcas`: the mCAS implementation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcas_impl: Option<&'static str>,
}

/// Runs a benchmark as the command line asked: every repeat of every allocator, then the table.
pub fn run(kind: Kind, args: &BenchArgs) -> anyhow::Result<Vec<Record>> {
    let records = run_records(kind, args)?;
    print_table(args, &records);
    Ok(records)
}

/// Every repeat of every allocator, each record appended to `--json` as it comes.
pub fn run_records(kind: Kind, args: &BenchArgs) -> anyhow::Result<Vec<Record>> {
    let threads = args
        .threads
        .unwrap_or(if kind == Kind::Xmalloc { 2 } else { 1 });
    validate(kind, args, threads)?;
    let mut records = Vec::new();
    for repeat in 0..args.repeat {
        for &allocator in &args.allocator {
            let record = run_once(kind, allocator, args, threads, repeat)?;
            eprintln!(
                "{} {:>9} run {}/{}: {:>12.0} ops/s{}",
                kind.name(),
                allocator.name(),
                repeat + 1,
                args.repeat,
                record.ops_per_sec,
                if record.timed_out { " (timed out)" } else { "" }
            );
            if let Some(path) = &args.json {
                crate::helpers::append_ndjson(path, &record)?;
            }
            records.push(record);
        }
    }
    Ok(records)
}

fn validate(kind: Kind, args: &BenchArgs, threads: usize) -> anyhow::Result<()> {
    let workers = threads * args.processes;
    anyhow::ensure!(
        threads >= 1 && args.processes >= 1,
        "--threads and --processes must be at least 1"
    );
    anyhow::ensure!(
        workers <= COUNT_WORKERS_MAX,
        "at most {COUNT_WORKERS_MAX} workers (threads × processes)"
    );
    anyhow::ensure!(args.size >= 1, "--size must be at least 1 byte");
    anyhow::ensure!(
        args.batch >= 1 && args.repeat >= 1,
        "--batch and --repeat must be at least 1"
    );
    anyhow::ensure!(
        args.processes == 1 || args.allocator.iter().all(|a| a.spans_processes()),
        "only podkv and boost can run with --processes > 1: the other allocators' memory is process-local"
    );
    anyhow::ensure!(
        kind != Kind::Xmalloc || workers >= 2,
        "xmalloc hands blocks between workers: use at least 2"
    );
    if let Some(d) = args.duration {
        anyhow::ensure!(d > 0.0 && d.is_finite(), "--duration must be positive");
    }
    Layout::from_size_align(args.size, 8)?;
    Ok(())
}

fn run_once(
    kind: Kind,
    allocator: AllocatorName,
    args: &BenchArgs,
    threads: usize,
    repeat: usize,
) -> anyhow::Result<Record> {
    let workers = (threads * args.processes) as u64;
    let per_worker = match kind {
        Kind::Threadtest => (args.ops / workers / args.batch as u64).max(1) * args.batch as u64,
        Kind::Xmalloc => (args.ops / workers).max(1),
    };
    let budget = per_worker * workers;
    let job = BenchJob {
        kind,
        allocator,
        size: args.size,
        ops_per_worker: per_worker,
        ops: budget,
        batch: args.batch,
        window: args.window.unwrap_or(0),
        huge_backing: args.huge_backing,
        heap: None,
        rings: Vec::new(),
    };
    let spec = spec_of(job, args.processes, threads, args.duration);
    let (reports, hwcc_bytes) = match allocator {
        AllocatorName::Podkv => run_podkv(args, spec, true, args.coherence, Liveness::Process)?,
        AllocatorName::PodkvNonrecoverable => {
            run_podkv(args, spec, false, args.coherence, Liveness::Process)?
        }
        AllocatorName::PodkvLimited => {
            run_podkv(args, spec, true, Coherence::Limited, Liveness::Process)?
        }
        AllocatorName::PodkvLease => run_podkv(args, spec, true, args.coherence, Liveness::Lease)?,
        AllocatorName::Mimalloc => (run_local(spec, alloc::mimalloc)?, None),
        AllocatorName::Jemalloc => (run_jemalloc(spec)?, None),
        AllocatorName::Boost => (run_boost(args, spec)?, None),
        AllocatorName::System => (run_local(spec, alloc::system)?, None),
    };
    let mut tally = runner::metrics::Tally::new(1);
    for r in &reports {
        tally.merge(&r.tally.decode()?);
    }
    let ops = tally.total();
    let seconds = tally.elapsed_ns_max.max(1) as f64 / 1e9;
    let context = process_stats::context();
    let coherence = match allocator {
        AllocatorName::Podkv | AllocatorName::PodkvNonrecoverable | AllocatorName::PodkvLease => {
            Some(args.coherence.name())
        }
        AllocatorName::PodkvLimited => Some(Coherence::Limited.name()),
        AllocatorName::Mimalloc
        | AllocatorName::Jemalloc
        | AllocatorName::System
        | AllocatorName::Boost => None,
    };
    Ok(Record {
        kind: kind.name(),
        allocator: allocator.name(),
        size: args.size,
        ops,
        threads,
        processes: args.processes,
        seconds,
        ops_per_sec: ops as f64 / seconds,
        pss_bytes: reports.iter().map(|r| r.pss_bytes).sum(),
        hwcc_bytes,
        page_faults: reports.iter().map(|r| r.page_faults).sum(),
        repeat,
        timed_out: ops < budget,
        coherence,
        git_commit: process_stats::git_commit(),
        command: context.command,
        suite: context.suite,
        figure: context.figure,
        oversubscribed: process_stats::oversubscribed(threads * args.processes),
        mcas_impl: (coherence == Some(Coherence::Mcas.name())).then(|| args.mcas_impl.name()),
    })
}

/// The runner's spec of `job` with `processes` × `threads` pinned workers, stopped after
/// `duration` seconds if given.
fn spec_of(job: BenchJob, processes: usize, threads: usize, duration: Option<f64>) -> RunSpec {
    RunSpec {
        job: Job::Bench(job),
        target: TargetSpec::Null,
        processes,
        threads,
        duration,
        pin: true,
        pacing: crate::runner::pacing::Pacing::Closed,
        hosts_apart: false,
        fixed_buckets: None,
        ab_windows: None,
        ab_window_ticks: None,
        ab_target: None,
    }
}

/// jemalloc, when the binary has it.
fn run_jemalloc(spec: RunSpec) -> anyhow::Result<Vec<ProcessReport>> {
    #[cfg(feature = "baselines")]
    return run_local(spec, alloc::jemalloc);
    #[cfg(not(feature = "baselines"))]
    {
        drop(spec);
        anyhow::bail!("jemalloc is not in this binary: build podkv with `--features baselines`")
    }
}

/// boost.interprocess: one segment (at most 1 GiB, or `--heap-bytes`) holding the rings;
/// workers are threads of this process, or of `podkv run-worker` processes that open it.
fn run_boost(args: &BenchArgs, mut spec: RunSpec) -> anyhow::Result<Vec<ProcessReport>> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "podkv-bench-boost-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let segment = boost::Segment::create(&name, args.heap_bytes.min(1 << 30))?;
    let workers = spec.workers();
    let job = job_of(&mut spec);
    for _ in 0..workers {
        job.rings.push(segment.alloc_zeroed(Ring::SIZE)?);
    }
    job.heap = Some(PathBuf::from(&name));
    let job = job.clone();
    let handle = segment.handle();
    let rings: Vec<&Ring> = job
        .rings
        .iter()
        // SAFETY: each ring is a zeroed block of the segment, live until `segment` drops.
        .map(|&h| unsafe { &*(handle.addr(h) as *const Ring) })
        .collect();
    let (reports, _) = runner::launch_processes(&spec, &|ctl| {
        process::run_process(&spec, &job, ctl, &rings, 0, &|| segment.handle())
    })?;
    Ok(reports)
}

/// The benchmark job of a spec made by [`spec_of`].
fn job_of(spec: &mut RunSpec) -> &mut BenchJob {
    match &mut spec.job {
        Job::Bench(job) => job,
        _ => unreachable!("spec_of makes benchmark specs"),
    }
}

/// A process-local allocator: one process, its rings in ordinary memory.
fn run_local<A: BenchAlloc, F: Fn() -> A + Sync>(
    mut spec: RunSpec,
    make: F,
) -> anyhow::Result<Vec<ProcessReport>> {
    let rings: Vec<Box<Ring>> = (0..spec.threads).map(|_| zeroed_box::<Ring>()).collect();
    let ring_refs: Vec<&Ring> = rings.iter().map(|r| &**r).collect();
    let job = job_of(&mut spec).clone();
    let (reports, _) = runner::launch_processes(&spec, &|ctl| {
        process::run_process(&spec, &job, ctl, &ring_refs, 0, &make)
    })?;
    Ok(reports)
}

fn zeroed_box<T>() -> Box<T> {
    let layout = Layout::new::<T>();
    // SAFETY: `T` here is a ring: plain atomics, for which zero is valid (an empty ring).
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        assert!(!p.is_null(), "out of memory");
        Box::from_raw(p)
    }
}

/// podkv: one heap; workers are threads of this process, or of `podkv run-worker`
/// processes that open the same heap.
fn run_podkv(
    args: &BenchArgs,
    spec: RunSpec,
    recoverable: bool,
    coherence: Coherence,
    liveness: Liveness,
) -> anyhow::Result<(Vec<ProcessReport>, Option<u64>)> {
    let temp = args.heap.is_none();
    let path = args.heap.clone().unwrap_or_else(|| {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        PathBuf::from(format!(
            "/dev/shm/podkv-bench-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ))
    });
    let config = Config {
        small_bytes: args.heap_bytes,
        large_bytes: args.heap_bytes,
        recoverable,
        coherence,
        liveness,
        huge_bytes: args.huge_bytes,
        huge_backing: args.huge_backing.to_alloc(),
        mcas: args.mcas_impl,
        ..Config::default()
    };
    let result = run_podkv_at(&path, &config, spec);
    if temp {
        let _ = std::fs::remove_file(&path);
    }
    result
}

fn run_podkv_at(
    path: &Path,
    config: &Config,
    mut spec: RunSpec,
) -> anyhow::Result<(Vec<ProcessReport>, Option<u64>)> {
    let heap = Heap::open(path, config)?;
    let launcher = heap.thread()?;
    let workers = spec.workers();
    let job = job_of(&mut spec);
    for _ in 0..workers {
        let off = launcher.allocate(Layout::new::<Ring>())?;
        // SAFETY: a fresh block of Ring's size; zero is an empty ring.
        unsafe { std::ptr::write_bytes(heap.resolve(off), 0, Ring::SIZE) };
        job.rings.push(off.0);
    }
    job.heap = Some(path.to_owned());
    let job = job.clone();
    let rings = process::rings_in(&heap, &job.rings);
    let result = runner::launch_processes(&spec, &|ctl| {
        process::run_process(&spec, &job, ctl, &rings, 0, &|| {
            heap.thread().expect("a free thread slot")
        })
    });
    let hwcc = heap.hwcc_bytes();
    for &off in &job.rings {
        launcher.free(podkv_alloc::Offset(off));
    }
    Ok((result?.0, Some(hwcc)))
}

fn print_table(args: &BenchArgs, records: &[Record]) {
    let Some(first) = records.first() else { return };
    println!(
        "{} size={} ops={} threads={} processes={} repeats={} (median)",
        first.kind, first.size, first.ops, first.threads, first.processes, args.repeat
    );
    println!(
        "{:<20} {:>14} {:>10} {:>12} {:>12} {:>10}",
        "allocator", "ops/s", "vs mimalloc", "pss", "hwcc", "faults"
    );
    let median_of = |name: &str| {
        let mut v: Vec<f64> = records
            .iter()
            .filter(|r| r.allocator == name)
            .map(|r| r.ops_per_sec)
            .collect();
        median(&mut v)
    };
    let base = median_of("mimalloc");
    for &allocator in &args.allocator {
        let name = allocator.name();
        let ops = median_of(name);
        let last = records
            .iter()
            .rev()
            .find(|r| r.allocator == name)
            .expect("every allocator ran");
        let ratio = if base > 0.0 {
            format!("{:.2}x", ops / base)
        } else {
            "-".into()
        };
        let hwcc = last.hwcc_bytes.map_or("-".into(), human_bytes);
        println!(
            "{:<20} {:>14.0} {:>10} {:>12} {:>12} {:>10}",
            name,
            ops,
            ratio,
            human_bytes(last.pss_bytes),
            hwcc,
            last.page_faults
        );
    }
    let limited = median_of("podkv-limited");
    if limited > 0.0 && median_of("podkv") > 0.0 {
        println!(
            "podkv in limited coherence mode runs at {:.1}% of podkv in {} mode",
            100.0 * limited / median_of("podkv"),
            args.coherence.name()
        );
    }
    let lease = median_of("podkv-lease");
    if lease > 0.0 && median_of("podkv") > 0.0 {
        println!(
            "podkv in lease liveness mode runs at {:.1}% of podkv in process mode",
            100.0 * lease / median_of("podkv")
        );
    }
    let (on, off) = (median_of("podkv"), median_of("podkv-nonrecoverable"));
    if on > 0.0 && off > 0.0 {
        println!(
            "recoverable podkv runs at {:.1}% of non-recoverable podkv",
            100.0 * on / off
        );
    }
}
