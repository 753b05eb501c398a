//! `podkv bench mcas`: nanoseconds per CAS for plain CPU CAS against the mCAS kinds
//! (`flush-cas`, and `nmp` with its processor in a thread or in a `podkv mcas-nmp` process),
//! alone and with two threads on one word.
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
}

/// The two cases: one thread alone, and two threads CASing the same word.
const CASES: [(&str, usize); 2] = [("uncontended", 1), ("contended", 2)];

/// Runs `podkv bench mcas` and prints a table of medians and ratios to CPU CAS.
pub fn run(args: &BenchMcasArgs) -> anyhow::Result<()> {
    if args.ops == 0 || args.repeat == 0 {
        bail!("--ops and --repeat must be positive");
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
    let mut runs = vec![vec![Vec::new(); args.kinds.len()]; CASES.len()];
    for _ in 0..args.repeat {
        for (case, &(_, threads)) in CASES.iter().enumerate() {
            for (k, &kind) in args.kinds.iter().enumerate() {
                runs[case][k].push(run_once(kind, region, threads, args.ops)?);
            }
        }
    }
    if let Some(processor) = processor {
        processor.stop()?;
    }
    report(args, &runs)
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
/// Returns nanoseconds per operation of the slowest thread.
fn run_once(kind: BenchKind, region: &Region, threads: usize, ops: u64) -> anyhow::Result<f64> {
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
    for worker in workers {
        let (elapsed, wins) = worker.join().expect("benchmark thread panicked")?;
        slowest = slowest.max(elapsed);
        won += wins;
    }
    let after = word.load(Ordering::SeqCst);
    if after.wrapping_sub(before) != won {
        bail!(
            "{kind}: {won} successful CASes but the counter moved {}",
            after - before
        );
    }
    Ok(slowest.as_nanos() as f64 / ops as f64)
}

fn worker(
    kind: BenchKind,
    region: &Region,
    client: u32,
    ops: u64,
    barrier: &Barrier,
) -> anyhow::Result<(Duration, u64)> {
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
    let start = Instant::now();
    for _ in 0..ops {
        let previous = match &mcas {
            None => {
                match word.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(p) | Err(p) => p,
                }
            }
            Some(mcas) => mcas.cas(target, seen, seen + 1)?,
        };
        if previous == seen {
            won += 1;
            seen += 1;
        } else {
            seen = previous;
        }
    }
    Ok((start.elapsed(), won))
}

fn report(args: &BenchMcasArgs, runs: &[Vec<Vec<f64>>]) -> anyhow::Result<()> {
    println!(
        "mcas bench: {} CAS/thread, median of {} runs, nmp processor: {:?}, evict: {}",
        args.ops,
        args.repeat,
        args.processor,
        podkv_hw::persist::evict_kind().name()
    );
    println!(
        "{:<12} {:>7} {:<10} {:>10} {:>9}",
        "case", "threads", "kind", "ns/op", "x cpu"
    );
    let cpu = args.kinds.iter().position(|&k| k == BenchKind::Cpu);
    for (case, &(name, threads)) in CASES.iter().enumerate() {
        for (k, kind) in args.kinds.iter().enumerate() {
            let ns = median(&mut runs[case][k].clone());
            let ratio = cpu.map(|c| ns / median(&mut runs[case][c].clone()));
            let shown = ratio.map_or("-".to_string(), |r| format!("{r:.1}"));
            println!("{name:<12} {threads:>7} {kind:<10} {ns:>10.1} {shown:>9}");
            if let Some(path) = &args.json {
                let record = serde_json::json!({
                    "bench": "mcas", "case": name, "threads": threads, "kind": kind.to_string(),
                    "ops_per_thread": args.ops, "ns_per_op_median": ns,
                    "ns_per_op_runs": runs[case][k], "ratio_to_cpu": ratio,
                    "processor": format!("{:?}", args.processor).to_lowercase(),
                });
                append_ndjson(path, &record)?;
            }
        }
    }
    Ok(())
}
