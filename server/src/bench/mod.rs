//! `podkv bench threadtest|xmalloc`: allocator microbenchmarks, podkv against mimalloc and the
//! system allocator in the same binary, with real processes sharing one heap for podkv.
//!
//! # Map
//! - [`workload`]: the two loops; [`alloc`]: the allocators behind one trait;
//! - [`control`]: start line and results, shared by threads or processes; [`ring`]: xmalloc's
//!   hand-over queue;
//! - this file: arguments, one run per (repeat, allocator), the table and NDJSON records.
//!
//! Every run is measured from a common start (all workers wait at the start line, warm-up
//! done) to the last worker's finish; the table reports the median over `--repeat` runs and
//! each allocator's ratio to mimalloc from the same invocation.

pub mod alloc;
pub mod control;
pub mod huge;
pub mod metrics;
pub mod ring;
pub mod workload;

use alloc::BenchAlloc;
use control::{Control, COUNT_WORKERS_MAX};
use podkv_alloc::{Config, Heap, Offset};
use podkv_hw::Coherence;
use ring::Ring;
use std::alloc::Layout;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Which microbenchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Batches of fixed-size allocations then frees, thread-local (Hoard's threadtest).
    Threadtest,
    /// Producer/consumer hand-over in a ring of workers: every free is remote.
    Xmalloc,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Threadtest => "threadtest",
            Kind::Xmalloc => "xmalloc",
        }
    }
}

/// An allocator to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AllocatorName {
    /// The pod heap (shared memory; may span processes).
    Podkv,
    /// The pod heap with recovery logging and CAS acknowledgement off, to measure what
    /// recoverability costs (one process only).
    PodkvNonrecoverable,
    /// The pod heap in `limited` coherence mode (SWcc protocol on descriptors), to measure
    /// what the mode costs against `podkv` in one run (one process only).
    PodkvLimited,
    /// mimalloc, linked in (process-local).
    Mimalloc,
    /// The system allocator (process-local).
    System,
}

impl AllocatorName {
    fn name(self) -> &'static str {
        match self {
            AllocatorName::Podkv => "podkv",
            AllocatorName::PodkvNonrecoverable => "podkv-nonrecoverable",
            AllocatorName::PodkvLimited => "podkv-limited",
            AllocatorName::Mimalloc => "mimalloc",
            AllocatorName::System => "system",
        }
    }
}

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
    #[arg(long, default_value = "64GiB", value_parser = crate::heap_cmd::parse_bytes)]
    pub heap_bytes: u64,
    /// Runs per allocator; the table shows the median.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Append one NDJSON record per run to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// xmalloc: most blocks each producer keeps waiting for its consumer [default: a whole
    /// ring, 4096]. Huge blocks need a small window: each live one holds a descriptor.
    #[arg(long)]
    pub window: Option<usize>,
    /// How podkv backs blocks over 512 KiB: `reserve` every page at allocation (out of memory
    /// is an error then), or `sparse` (only the pages touched).
    #[arg(long, value_enum, default_value = "reserve")]
    pub huge_backing: Backing,
    /// Coherence mode of podkv's heap: `hardware` (all memory coherent) or `limited` (only the
    /// HWcc words; slab descriptors follow the SWcc write-back/invalidate protocol).
    #[arg(long, default_value = "hardware")]
    pub coherence: podkv_hw::Coherence,
    /// Address space of podkv's huge heap (blocks over 512 KiB); 0: none (e.g. under valgrind,
    /// which cannot reserve a terabyte).
    #[arg(long, default_value = "1TiB", value_parser = crate::heap_cmd::parse_bytes)]
    pub huge_bytes: u64,
}

/// How podkv backs huge blocks (`podkv_alloc::HugeBacking`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backing {
    /// Every page at allocation.
    Reserve,
    /// Only the pages touched.
    Sparse,
}

impl Backing {
    fn to_alloc(self) -> podkv_alloc::HugeBacking {
        match self {
            Backing::Reserve => podkv_alloc::HugeBacking::Reserve,
            Backing::Sparse => podkv_alloc::HugeBacking::Sparse,
        }
    }
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
    /// The commit of the binary.
    pub git_commit: &'static str,
}

/// Runs a benchmark as the command line asked: every repeat of every allocator, then the table.
pub fn run(kind: Kind, args: &BenchArgs) -> anyhow::Result<Vec<Record>> {
    let threads = args
        .threads
        .unwrap_or(if kind == Kind::Xmalloc { 2 } else { 1 });
    validate(kind, args, threads)?;
    let mut records = Vec::new();
    for repeat in 0..args.repeat {
        for &allocator in &args.allocator {
            let record = run_once(kind, allocator, args, threads, repeat)?;
            eprintln!(
                "{} {:>9} run {}/{}: {:>12.0} ops/s",
                kind.name(),
                allocator.name(),
                repeat + 1,
                args.repeat,
                record.ops_per_sec
            );
            if let Some(path) = &args.json {
                append_json(path, &record)?;
            }
            records.push(record);
        }
    }
    print_table(args, &records);
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
        args.processes == 1 || args.allocator.iter().all(|&a| a == AllocatorName::Podkv),
        "only podkv can run with --processes > 1: mimalloc and system memory cannot be shared across processes"
    );
    anyhow::ensure!(
        kind != Kind::Xmalloc || workers >= 2,
        "xmalloc hands blocks between workers: use at least 2"
    );
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
    let params = [
        kind as u64,
        args.size as u64,
        per_worker,
        args.batch as u64,
        threads as u64,
        args.processes as u64,
        args.window.unwrap_or(0) as u64,
        args.huge_backing.to_alloc() as u64,
    ];
    let (seconds, pss_bytes, page_faults, hwcc_bytes) = match allocator {
        AllocatorName::Podkv => run_podkv(args, params, true, args.coherence)?,
        AllocatorName::PodkvNonrecoverable => run_podkv(args, params, false, args.coherence)?,
        AllocatorName::PodkvLimited => run_podkv(args, params, true, Coherence::Limited)?,
        AllocatorName::Mimalloc => run_local(params, alloc::mimalloc),
        AllocatorName::System => run_local(params, alloc::system),
    };
    let ops = per_worker * workers;
    Ok(Record {
        kind: kind.name(),
        allocator: allocator.name(),
        size: args.size,
        ops,
        threads,
        processes: args.processes,
        seconds,
        ops_per_sec: ops as f64 / seconds,
        pss_bytes,
        hwcc_bytes,
        page_faults,
        repeat,
        coherence: match allocator {
            AllocatorName::Podkv | AllocatorName::PodkvNonrecoverable => {
                Some(args.coherence.name())
            }
            AllocatorName::PodkvLimited => Some(Coherence::Limited.name()),
            AllocatorName::Mimalloc | AllocatorName::System => None,
        },
        git_commit: metrics::git_commit(),
    })
}

fn set_params(ctl: &Control, params: [u64; 8]) {
    let words = [
        &ctl.kind,
        &ctl.size,
        &ctl.ops_per_worker,
        &ctl.batch,
        &ctl.threads,
        &ctl.processes,
        &ctl.window,
        &ctl.huge_backing,
    ];
    for (word, value) in words.into_iter().zip(params) {
        word.store(value, Ordering::Release);
    }
}

/// A process-local allocator: control block and rings in ordinary memory.
fn run_local<A: BenchAlloc, F: Fn() -> A + Sync>(
    params: [u64; 8],
    make: F,
) -> (f64, u64, u64, Option<u64>) {
    let ctl = zeroed_box::<Control>();
    set_params(&ctl, params);
    let rings: Vec<Box<Ring>> = (0..ctl.workers()).map(|_| zeroed_box::<Ring>()).collect();
    let ring_refs: Vec<&Ring> = rings.iter().map(|r| &**r).collect();
    std::thread::scope(|s| {
        s.spawn(|| run_process(&ctl, &ring_refs, 0, &make));
        Control::wait_for(&ctl.ready, ctl.workers() as u64);
        ctl.go.store(1, Ordering::Release);
    });
    (
        seconds_of(&ctl),
        ctl.pss[0].load(Ordering::Acquire),
        ctl.faults[0].load(Ordering::Acquire),
        None,
    )
}

fn zeroed_box<T>() -> Box<T> {
    let layout = Layout::new::<T>();
    // SAFETY: `T` here is a control block or ring: plain atomics, for which zero is valid.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        assert!(!p.is_null(), "out of memory");
        Box::from_raw(p)
    }
}

fn seconds_of(ctl: &Control) -> f64 {
    let max = ctl.elapsed_ns[..ctl.workers()]
        .iter()
        .map(|e| e.load(Ordering::Acquire))
        .max()
        .unwrap_or(0);
    max.max(1) as f64 / 1e9
}

/// podkv: one heap; workers are threads of this process, or of child processes.
fn run_podkv(
    args: &BenchArgs,
    params: [u64; 8],
    recoverable: bool,
    coherence: Coherence,
) -> anyhow::Result<(f64, u64, u64, Option<u64>)> {
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
        huge_bytes: args.huge_bytes,
        huge_backing: args.huge_backing.to_alloc(),
        ..Config::default()
    };
    let result = run_podkv_at(&path, &config, params);
    if temp {
        let _ = std::fs::remove_file(&path);
    }
    result
}

fn run_podkv_at(
    path: &Path,
    config: &Config,
    params: [u64; 8],
) -> anyhow::Result<(f64, u64, u64, Option<u64>)> {
    let heap = Heap::open(path, config)?;
    let launcher = heap.thread()?;
    let ctl_offset = launcher.allocate(Layout::new::<Control>())?;
    // SAFETY: a fresh block of Control's size and alignment; zeroed, a Control is valid.
    let ctl = unsafe {
        std::ptr::write_bytes(heap.resolve(ctl_offset), 0, Control::SIZE);
        &*(heap.resolve(ctl_offset) as *const Control)
    };
    set_params(ctl, params);
    let mut ring_offsets = Vec::new();
    for w in 0..ctl.workers() {
        let off = launcher.allocate(Layout::new::<Ring>())?;
        // SAFETY: a fresh block of Ring's size; zero is an empty ring.
        unsafe { std::ptr::write_bytes(heap.resolve(off), 0, Ring::SIZE) };
        ctl.rings[w].store(off.0, Ordering::Release);
        ring_offsets.push(off);
    }
    let processes = params[5] as usize;
    if processes == 1 {
        let rings = rings_of(&heap, ctl);
        std::thread::scope(|s| {
            s.spawn(|| {
                run_process(ctl, &rings, 0, &|| {
                    heap.thread().expect("a free thread slot")
                })
            });
            Control::wait_for(&ctl.ready, ctl.workers() as u64);
            ctl.go.store(1, Ordering::Release);
        });
    } else {
        spawn_processes(path, ctl_offset, ctl, processes)?;
    }
    let pss = ctl.pss[..processes]
        .iter()
        .map(|p| p.load(Ordering::Acquire))
        .sum();
    let faults = ctl.faults[..processes]
        .iter()
        .map(|p| p.load(Ordering::Acquire))
        .sum();
    let out = (seconds_of(ctl), pss, faults, Some(heap.hwcc_bytes()));
    for off in ring_offsets {
        launcher.free(off);
    }
    launcher.free(ctl_offset);
    Ok(out)
}

fn rings_of<'h>(heap: &'h Heap, ctl: &Control) -> Vec<&'h Ring> {
    (0..ctl.workers())
        .map(|w| {
            let off = Offset(ctl.rings[w].load(Ordering::Acquire));
            // SAFETY: the launcher allocated and zeroed each ring before any worker started,
            // and frees them only after every worker has finished.
            unsafe { &*(heap.resolve(off) as *const Ring) }
        })
        .collect()
}

fn spawn_processes(
    path: &Path,
    ctl_offset: Offset,
    ctl: &Control,
    processes: usize,
) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for p in 0..processes {
        let child = std::process::Command::new(&exe)
            .args(["bench-worker", "--heap"])
            .arg(path)
            .args([
                "--control",
                &ctl_offset.0.to_string(),
                "--process",
                &p.to_string(),
            ])
            .spawn()?;
        children.push(child);
    }
    Control::wait_for(&ctl.ready, ctl.workers() as u64);
    ctl.go.store(1, Ordering::Release);
    for mut child in children {
        let status = child.wait()?;
        anyhow::ensure!(
            status.success(),
            "a benchmark worker process failed: {status}"
        );
    }
    Ok(())
}

/// The hidden `podkv bench-worker` subcommand: one process of a multi-process podkv run.
pub fn worker_process(heap_path: &Path, control: u64, process: usize) -> anyhow::Result<()> {
    let heap = Heap::open(
        heap_path,
        &Config {
            create: false,
            ..Config::default()
        },
    )?;
    // SAFETY: the launcher allocated the control block at this offset and keeps it until
    // every worker process has exited.
    let ctl = unsafe { &*(heap.resolve(Offset(control)) as *const Control) };
    if ctl.huge_backing.load(Ordering::Acquire) == podkv_alloc::HugeBacking::Sparse as u64 {
        heap.set_huge_backing(podkv_alloc::HugeBacking::Sparse);
    }
    let rings = rings_of(&heap, ctl);
    run_process(ctl, &rings, process, &|| {
        heap.thread().expect("a free thread slot")
    });
    Ok(())
}

/// Runs this process's threads of the benchmark and records its memory and faults.
fn run_process<A: BenchAlloc, F: Fn() -> A + Sync>(
    ctl: &Control,
    rings: &[&Ring],
    process: usize,
    make: &F,
) {
    let threads = ctl.threads.load(Ordering::Acquire) as usize;
    let done_here = AtomicU64::new(0);
    let measured = AtomicU64::new(0);
    let faults_before = metrics::minor_faults();
    let cpus = crate::runner::worker::allowed_cpus();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (done_here, measured, cpus) = (&done_here, &measured, &cpus);
            s.spawn(move || {
                // Each worker on its own CPU (round robin), as the runner does, so runs of
                // different allocators see the same placement.
                if !cpus.is_empty() {
                    crate::runner::worker::pin_to(cpus[(process * threads + t) % cpus.len()]);
                }
                let a = make();
                run_worker(&a, ctl, rings, process * threads + t);
                done_here.fetch_add(1, Ordering::AcqRel);
                if t == 0 {
                    Control::wait_for(done_here, threads as u64);
                    ctl.pss[process].store(metrics::pss_bytes(), Ordering::Release);
                    let faults = metrics::minor_faults() - faults_before;
                    ctl.faults[process].store(faults, Ordering::Release);
                    measured.store(1, Ordering::Release);
                }
                Control::wait_for(measured, 1);
            });
        }
    });
}

fn run_worker<A: BenchAlloc>(a: &A, ctl: &Control, rings: &[&Ring], w: usize) {
    let layout =
        Layout::from_size_align(ctl.size.load(Ordering::Acquire) as usize, 8).expect("validated");
    let ops = ctl.ops_per_worker.load(Ordering::Acquire);
    let batch = ctl.batch.load(Ordering::Acquire);
    let workers = rings.len();
    let threadtest = ctl.kind.load(Ordering::Acquire) == Kind::Threadtest as u64;
    if threadtest {
        workload::threadtest(a, layout, 1, batch as usize); // warm-up: slabs and pages in place
    }
    ctl.ready.fetch_add(1, Ordering::AcqRel);
    Control::wait_for(&ctl.go, 1);
    let start = Instant::now();
    if threadtest {
        workload::threadtest(a, layout, ops / batch, batch as usize);
    } else {
        let window = match ctl.window.load(Ordering::Acquire) as usize {
            0 => ring::COUNT_RING_SLOTS,
            window => window,
        };
        workload::xmalloc(
            a,
            layout,
            ops,
            (batch, window),
            rings[w],
            rings[(w + workers - 1) % workers],
        );
    }
    ctl.elapsed_ns[w].store(start.elapsed().as_nanos() as u64, Ordering::Release);
}

fn append_json(path: &Path, record: &Record) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(file, "{}", serde_json::to_string(record)?)?;
    Ok(())
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
        metrics::median(&mut v)
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
    let (on, off) = (median_of("podkv"), median_of("podkv-nonrecoverable"));
    if on > 0.0 && off > 0.0 {
        println!(
            "recoverable podkv runs at {:.1}% of non-recoverable podkv",
            100.0 * on / off
        );
    }
}

/// Bytes in binary units, for tables.
pub fn human_bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}
