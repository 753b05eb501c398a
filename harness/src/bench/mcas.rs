//! `podkv bench mcas`: nanoseconds per CAS for plain CPU CAS against the mCAS kinds
//! (`flush-cas`, and `nmp` with its processor in a thread or in a `podkv mcas-nmp` process),
//! alone and with two threads on one word, or over `--threads 1,2,…` (the paper's Fig. 11):
//! mean nanoseconds per CAS, and p50/p99 of every 16th CAS timed on its own.
//!
//! The processor and the protocol live in `podkv_hw::mcas`; this file runs the threads,
//! takes medians and prints.

use crate::helpers::{append_ndjson, median};
use anyhow::{anyhow, bail};
use podkv_hw::mcas::processor::TAKEOVER_AFTER;
use podkv_hw::mcas::{
    ensure_processor, Liveness, Mcas, McasKind, NmpOptions, Region, RegionFile, Start,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// One implementation the benchmark compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchKind {
    /// A plain CPU CAS: the baseline (correct only with hardware coherence).
    Cpu,
    /// An mCAS implementation.
    Mcas(McasKind),
}

impl std::str::FromStr for BenchKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(BenchKind::Cpu),
            other => other.parse().map(BenchKind::Mcas),
        }
    }
}

impl std::fmt::Display for BenchKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchKind::Cpu => f.pad("cpu"),
            BenchKind::Mcas(kind) => f.pad(kind.name()),
        }
    }
}

/// Where the `nmp` benchmark's processor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Place {
    /// Its own process (`podkv mcas-nmp`), as deployed.
    Process,
    /// A thread of the benchmark process.
    Thread,
}

/// `podkv bench mcas`.
#[derive(clap::Args, Debug)]
pub struct BenchMcasArgs {
    /// CAS operations per thread per run.
    #[arg(long, default_value_t = 200_000)]
    pub ops: u64,
    /// Runs of each configuration (interleaved); the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Implementations to compare: cpu (plain CPU CAS, the baseline), flush-cas, nmp, device.
    #[arg(long, value_delimiter = ',', default_value = "cpu,flush-cas,nmp")]
    pub kinds: Vec<BenchKind>,
    /// Where the nmp processor runs.
    #[arg(long, value_enum, default_value_t = Place::Process)]
    pub processor: Place,
    /// Directory for the temporary region file.
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Append one NDJSON record per configuration to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Thread counts to sweep, all CASing one word, comma separated [default: 1
    /// (`uncontended`) and 2 (`contended`)].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
}

/// The two default cases: one thread alone, and two threads CASing the same word.
const CASES: [(&str, usize); 2] = [("uncontended", 1), ("contended", 2)];

/// One CAS in this many is timed on its own for the latency percentiles (the clock reads
/// stay out of the other fifteen, which the mean is mostly made of).
const EVERY_SAMPLED: u64 = 16;

/// One run of one configuration.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    /// Mean nanoseconds per CAS of the slowest thread.
    ns_per_op: f64,
    /// Median latency of the sampled CASes.
    p50_ns: f64,
    /// 99th percentile of the sampled CASes.
    p99_ns: f64,
}

/// The cases a run sweeps: (name, threads).
fn cases(args: &BenchMcasArgs) -> Vec<(String, usize)> {
    if args.threads.is_empty() {
        return CASES.iter().map(|&(n, t)| (n.to_owned(), t)).collect();
    }
    args.threads
        .iter()
        .map(|&t| (format!("threads-{t}"), t))
        .collect()
}

/// Runs `podkv bench mcas` and prints a table of medians and ratios to CPU CAS.
pub fn run(args: &BenchMcasArgs) -> anyhow::Result<()> {
    if args.ops == 0 || args.repeat == 0 || args.threads.contains(&0) {
        bail!("--ops, --repeat and --threads must be positive");
    }
    if args.kinds.contains(&BenchKind::Mcas(McasKind::Device)) {
        return Err(podkv_hw::mcas::device::unavailable().into());
    }
    let path = args
        .dir
        .join(format!("podkv-mcas-bench-{}", std::process::id()));
    let file =
        RegionFile::create(&path, 4, 8).map_err(|e| anyhow!("creating {}: {e}", path.display()));
    let result = file.and_then(|file| bench_on(args, &path, file.region()));
    let _ = std::fs::remove_file(&path);
    result
}

fn bench_on(args: &BenchMcasArgs, path: &Path, region: &Region) -> anyhow::Result<()> {
    let processor = if args.kinds.contains(&BenchKind::Mcas(McasKind::Nmp)) {
        Some(start_processor(args.processor, path, region)?)
    } else {
        None
    };
    let cases = cases(args);
    let mut runs = vec![vec![Vec::new(); args.kinds.len()]; cases.len()];
    for _ in 0..args.repeat {
        for (case, &(_, threads)) in cases.iter().enumerate() {
            for (k, &kind) in args.kinds.iter().enumerate() {
                runs[case][k].push(run_once(kind, region, threads, args.ops)?);
            }
        }
    }
    if let Some(processor) = processor {
        processor.stop()?;
    }
    report(args, &cases, &runs)
}

/// A running processor for the benchmark, stopped cleanly at the end.
enum Running {
    Thread(podkv_hw::mcas::ProcessorHandle),
    Process(std::process::Child),
}

impl Running {
    fn stop(self) -> anyhow::Result<()> {
        match self {
            Running::Thread(handle) => drop(handle.stop()),
            Running::Process(mut child) => {
                // SAFETY: kill(2) on our own child's pid; it only sends a signal.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                let status = child.wait()?;
                if !status.success() {
                    bail!("the mCAS processor exited with {status}");
                }
            }
        }
        Ok(())
    }
}

fn start_processor(place: Place, path: &Path, region: &Region) -> anyhow::Result<Running> {
    let start = match place {
        Place::Thread => Start::Thread,
        Place::Process => {
            let mut command = std::process::Command::new(std::env::current_exe()?);
            command.arg("mcas-nmp").arg("--heap").arg(path);
            command.stdout(std::process::Stdio::null());
            // SAFETY: prctl(2) is async-signal-safe; it only asks the kernel to SIGTERM the child
            // when this process dies, so an interrupted benchmark leaves no processor behind.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            Start::Command(command)
        }
    };
    match ensure_processor(region, start, TAKEOVER_AFTER)? {
        Liveness::StartedThread(handle) => Ok(Running::Thread(handle)),
        Liveness::StartedProcess(child) => Ok(Running::Process(child)),
        Liveness::Existing { pid } => bail!("a fresh region is already served by pid {pid}"),
    }
}

/// One run: `threads` threads each perform `ops` CAS attempts incrementing the same word.
fn run_once(kind: BenchKind, region: &Region, threads: usize, ops: u64) -> anyhow::Result<Run> {
    let target = region.targets().start;
    let word = region.target(target).expect("the first target exists");
    let before = word.load(Ordering::SeqCst);
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (region, barrier) = (region.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || worker(kind, &region, t as u32, ops, &barrier))
        })
        .collect();
    let mut slowest = Duration::ZERO;
    let mut won = 0;
    let mut samples = Vec::new();
    for worker in workers {
        let (elapsed, wins, sampled) = worker.join().expect("benchmark thread panicked")?;
        slowest = slowest.max(elapsed);
        won += wins;
        samples.extend(sampled);
    }
    let after = word.load(Ordering::SeqCst);
    if after.wrapping_sub(before) != won {
        bail!(
            "{kind}: {won} successful CASes but the counter moved {}",
            after - before
        );
    }
    samples.sort_unstable();
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1)))
            .map_or(0.0, |&ns| ns as f64)
    };
    Ok(Run {
        ns_per_op: slowest.as_nanos() as f64 / ops as f64,
        p50_ns: at(0.5),
        p99_ns: at(0.99),
    })
}

fn worker(
    kind: BenchKind,
    region: &Region,
    client: u32,
    ops: u64,
    barrier: &Barrier,
) -> anyhow::Result<(Duration, u64, Vec<u64>)> {
    let target = region.targets().start;
    let word = region.target(target).expect("the first target exists");
    let mcas = match kind {
        BenchKind::Cpu => None,
        BenchKind::Mcas(kind) => Some(Mcas::open(kind, region, client, NmpOptions::default())),
    };
    barrier.wait(); // before any `?`, so a failing thread never strands the others
    let mcas = mcas.transpose()?;
    let mut seen = word.load(Ordering::SeqCst);
    let mut won = 0;
    let mut sampled = Vec::with_capacity((ops / EVERY_SAMPLED + 1) as usize);
    let start = Instant::now();
    for i in 0..ops {
        let timed = (i % EVERY_SAMPLED == 0).then(Instant::now);
        let previous = match &mcas {
            None => {
                match word.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(p) | Err(p) => p,
                }
            }
            Some(mcas) => mcas.cas(target, seen, seen + 1)?,
        };
        if let Some(t) = timed {
            sampled.push(t.elapsed().as_nanos() as u64);
        }
        if previous == seen {
            won += 1;
            seen += 1;
        } else {
            seen = previous;
        }
    }
    Ok((start.elapsed(), won, sampled))
}

fn report(
    args: &BenchMcasArgs,
    cases: &[(String, usize)],
    runs: &[Vec<Vec<Run>>],
) -> anyhow::Result<()> {
    println!(
        "mcas bench: {} CAS/thread, median of {} runs, nmp processor: {:?}, evict: {}",
        args.ops,
        args.repeat,
        args.processor,
        podkv_hw::persist::evict_kind().name()
    );
    println!(
        "{:<12} {:>7} {:<10} {:>10} {:>9} {:>9} {:>9}",
        "case", "threads", "kind", "ns/op", "x cpu", "p50 ns", "p99 ns"
    );
    let cpu = args.kinds.iter().position(|&k| k == BenchKind::Cpu);
    let context = crate::process_stats::context();
    let med =
        |runs: &[Run], f: fn(&Run) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    for (case, (name, threads)) in cases.iter().enumerate() {
        for (k, kind) in args.kinds.iter().enumerate() {
            let these = &runs[case][k];
            let ns = med(these, |r| r.ns_per_op);
            let (p50, p99) = (med(these, |r| r.p50_ns), med(these, |r| r.p99_ns));
            let ratio = cpu.map(|c| ns / med(&runs[case][c], |r| r.ns_per_op));
            let shown = ratio.map_or("-".to_string(), |r| format!("{r:.1}"));
            println!(
                "{name:<12} {threads:>7} {kind:<10} {ns:>10.1} {shown:>9} {p50:>9.0} {p99:>9.0}"
            );
            if let Some(path) = &args.json {
                let record = serde_json::json!({
                    "bench": "mcas", "kind": "mcas", "case": name, "threads": threads,
                    "processes": 1, "cas": kind.to_string(),
                    "ops_per_thread": args.ops, "ns_per_op_median": ns,
                    "ns_per_op_runs": these.iter().map(|r| r.ns_per_op).collect::<Vec<_>>(),
                    "p50_ns": p50, "p99_ns": p99, "ratio_to_cpu": ratio,
                    "processor": format!("{:?}", args.processor).to_lowercase(),
                    "git_commit": crate::process_stats::git_commit(),
                    "command": context.command, "suite": context.suite, "figure": context.figure,
                    "oversubscribed": crate::process_stats::oversubscribed(*threads),
                });
                append_ndjson(path, &record)?;
            }
        }
    }
    Ok(())
}
