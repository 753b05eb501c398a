//! `podkv bench frag`: NVAlloc's Fragbench (ASPLOS '22, §3 Table 1 and §6.4), podkv against
//! mimalloc, jemalloc (feature `baselines`) and the system allocator in the same binary.
//!
//! # Workloads (Table 1)
//! | workload | Before | delete | After |
//! | --- | --- | --- | --- |
//! | `w1` | 100 B | 90% | 130 B |
//! | `w2` | 100–150 B | 0% | 200–250 B |
//! | `w3` | 100–150 B | 90% | 200–250 B |
//! | `w4` | 100–200 B | 50% | 1000–2000 B |
//!
//! Sizes are uniform over their range. The phases are [`phases`]'s; the paper allocates 5 GB
//! per phase with at most 1 GB live (`--total-bytes 5GB --live-bytes 1GB`); the default is a
//! sixteenth of that, which runs in seconds.
//!
//! # One process per run
//! Each (workload, allocator, repeat) runs in a fresh `podkv bench frag --one …` child, so no
//! allocator inherits another's cached memory and each phase's PSS is the allocator's alone.
//! The child prints its phases as one JSON line; this process turns them into one NDJSON
//! record per phase (appended by [`crate::helpers::append_ndjson`], with the command, suite
//! and figure as every bench's records) and prints the table of medians.
//!
//! `podkv` runs the heap as this process's default has it (slab morphing on unless
//! `PODKV_MORPH=0`), `podkv-nomorph` with morphing off, so one invocation compares the two.
//! podkv's records add the slab-utilisation census at each phase's end
//! ([`podkv_alloc::Census`]: slabs by occupancy 0–30%, 30–70%, 70–100% as the paper's
//! Fig. 15b) and the heap file's size; its PSS counts the heap's pages this process touched.

mod phases;
mod table;

use crate::helpers::parse_bytes;
use crate::process_stats;
use anyhow::Context;
pub use phases::PhaseResult;
use podkv_alloc::heap::morph_default;
use podkv_alloc::{Config, Heap};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A Fragbench workload (NVAlloc Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 100 B; delete 90%; 130 B.
    W1,
    /// 100–150 B; delete 0%; 200–250 B.
    W2,
    /// 100–150 B; delete 90%; 200–250 B.
    W3,
    /// 100–200 B; delete 50%; 1000–2000 B.
    W4,
}

impl Workload {
    /// `w1` … `w4`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W3 => "w3",
            Workload::W4 => "w4",
        }
    }

    /// The smallest and largest block (inclusive) of an allocating phase.
    pub fn sizes(self, phase: Phase) -> (u32, u32) {
        let after = phase == Phase::After;
        match self {
            Workload::W1 if after => (130, 130),
            Workload::W1 => (100, 100),
            Workload::W2 | Workload::W3 if after => (200, 250),
            Workload::W2 | Workload::W3 => (100, 150),
            Workload::W4 if after => (1000, 2000),
            Workload::W4 => (100, 200),
        }
    }

    /// The share of live blocks the Delete phase frees.
    pub fn delete_percent(self) -> u32 {
        match self {
            Workload::W1 | Workload::W3 => 90,
            Workload::W2 => 0,
            Workload::W4 => 50,
        }
    }
}

/// A phase of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Allocate the first distribution.
    Before = 1,
    /// Free a share at random.
    Delete = 2,
    /// Allocate the second distribution.
    After = 3,
}

impl Phase {
    /// The phases in order.
    pub const ALL: [Phase; 3] = [Phase::Before, Phase::Delete, Phase::After];

    /// `before`, `delete` or `after`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Before => "before",
            Phase::Delete => "delete",
            Phase::After => "after",
        }
    }
}

/// An allocator Fragbench measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FragAllocator {
    /// The pod heap, slab morphing on (NVAlloc §5.2; unless `PODKV_MORPH=0`).
    Podkv,
    /// The pod heap with slab morphing off: static slab segregation.
    PodkvNomorph,
    /// mimalloc, linked in.
    Mimalloc,
    /// jemalloc, linked in with the `baselines` feature.
    Jemalloc,
    /// The system allocator (glibc malloc).
    System,
}

impl FragAllocator {
    /// The allocator's name in records.
    pub fn name(self) -> &'static str {
        match self {
            FragAllocator::Podkv => "podkv",
            FragAllocator::PodkvNomorph => "podkv-nomorph",
            FragAllocator::Mimalloc => "mimalloc",
            FragAllocator::Jemalloc => "jemalloc",
            FragAllocator::System => "system",
        }
    }
}

/// The allocators a plain `podkv bench frag` runs: all this binary has.
#[cfg(feature = "baselines")]
const DEFAULT_ALLOCATORS: &str = "podkv,podkv-nomorph,mimalloc,jemalloc,system";
#[cfg(not(feature = "baselines"))]
const DEFAULT_ALLOCATORS: &str = "podkv,podkv-nomorph,mimalloc,system";

/// Flags of `podkv bench frag`.
#[derive(clap::Args, Clone, Debug)]
pub struct FragArgs {
    /// Workloads, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "w1,w2,w3,w4")]
    pub workload: Vec<Workload>,
    /// Allocators, comma separated; ratios are against mimalloc [default: podkv,
    /// podkv-nomorph, mimalloc, jemalloc (with feature `baselines`), system].
    #[arg(long, value_enum, value_delimiter = ',', default_value = DEFAULT_ALLOCATORS)]
    pub allocator: Vec<FragAllocator>,
    /// Bytes allocated in each of Before and After (the paper: 5GB).
    #[arg(long, default_value = "320MiB", value_parser = parse_bytes)]
    pub total_bytes: u64,
    /// Most bytes live at once (the paper: 1GB).
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub live_bytes: u64,
    /// Runs per (workload, allocator); the table shows medians.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Seed of the sizes and victims (repeat `r` uses `seed + r`).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Most bytes of each of podkv's small and large slab heaps (address space reserved).
    #[arg(long, default_value = "64GiB", value_parser = parse_bytes)]
    pub heap_bytes: u64,
    /// Append one NDJSON record per phase of every run to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run one workload with one allocator in this process and print its phases as a JSON
    /// line (what each run's child process does).
    #[arg(long, hide = true)]
    pub one: bool,
}

/// One phase of one run, as `--json` appends it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Record {
    /// `frag`.
    pub kind: &'static str,
    /// `w1` … `w4`.
    pub workload: &'static str,
    /// Allocator name.
    pub allocator: &'static str,
    /// What the phase measured.
    #[serde(flatten)]
    pub result: PhaseResult,
    /// Operations (allocations plus frees) per second in the phase.
    pub ops_per_sec: f64,
    /// `--total-bytes`.
    pub total_bytes: u64,
    /// `--live-bytes`.
    pub live_cap_bytes: u64,
    /// The run's seed.
    pub seed: u64,
    /// Which repeat this was.
    pub repeat: usize,
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
}

/// Runs `podkv bench frag`: every repeat of every workload and allocator, then the table.
pub fn run(args: &FragArgs) -> anyhow::Result<()> {
    validate(args)?;
    if args.one {
        let results = run_here(args, args.workload[0], args.allocator[0], args.seed)?;
        println!("{}", serde_json::to_string(&results)?);
        return Ok(());
    }
    let mut records = Vec::new();
    for &workload in &args.workload {
        for repeat in 0..args.repeat {
            for &allocator in &args.allocator {
                let seed = args.seed + repeat as u64;
                let phases = run_child(args, workload, allocator, seed)?;
                for result in phases {
                    let record = record(args, workload, allocator, seed, repeat, result);
                    if let Some(path) = &args.json {
                        crate::helpers::append_ndjson(path, &record)?;
                    }
                    records.push(record);
                }
                eprintln!(
                    "frag {} {:>9} run {}/{} done",
                    workload.name(),
                    allocator.name(),
                    repeat + 1,
                    args.repeat
                );
            }
        }
    }
    table::print(args, &records);
    Ok(())
}

fn validate(args: &FragArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.repeat >= 1, "--repeat must be at least 1");
    anyhow::ensure!(
        !args.workload.is_empty() && !args.allocator.is_empty(),
        "name at least one --workload and one --allocator"
    );
    anyhow::ensure!(
        args.live_bytes >= 4096 && args.total_bytes >= args.live_bytes,
        "--live-bytes must be at least 4KiB and --total-bytes at least --live-bytes"
    );
    anyhow::ensure!(
        !args.one || (args.workload.len() == 1 && args.allocator.len() == 1),
        "--one runs one workload with one allocator"
    );
    if !cfg!(feature = "baselines") && args.allocator.contains(&FragAllocator::Jemalloc) {
        anyhow::bail!("jemalloc is not in this binary: build podkv with `--features baselines`");
    }
    Ok(())
}

/// One run in a fresh `podkv bench frag --one` process.
fn run_child(
    args: &FragArgs,
    workload: Workload,
    allocator: FragAllocator,
    seed: u64,
) -> anyhow::Result<Vec<PhaseResult>> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args(["bench", "frag", "--one", "--workload", workload.name()])
        .args(["--allocator", allocator.name(), "--seed", &seed.to_string()])
        .args(["--total-bytes", &args.total_bytes.to_string()])
        .args(["--live-bytes", &args.live_bytes.to_string()])
        .args(["--heap-bytes", &args.heap_bytes.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot start a Fragbench run")?;
    anyhow::ensure!(
        out.status.success(),
        "Fragbench {} with {} failed: {}",
        workload.name(),
        allocator.name(),
        out.status
    );
    serde_json::from_slice(&out.stdout).context("a Fragbench run printed no phases")
}

/// One run in this process.
fn run_here(
    args: &FragArgs,
    workload: Workload,
    allocator: FragAllocator,
    seed: u64,
) -> anyhow::Result<Vec<PhaseResult>> {
    use crate::bench::alloc;
    let (total, cap) = (args.total_bytes, args.live_bytes);
    Ok(match allocator {
        FragAllocator::Podkv => return run_podkv(args, workload, seed, morph_default()),
        FragAllocator::PodkvNomorph => return run_podkv(args, workload, seed, false),
        FragAllocator::Mimalloc => {
            phases::run(&alloc::mimalloc(), workload, total, cap, seed, &|| None)
        }
        #[cfg(feature = "baselines")]
        FragAllocator::Jemalloc => {
            phases::run(&alloc::jemalloc(), workload, total, cap, seed, &|| None)
        }
        #[cfg(not(feature = "baselines"))]
        FragAllocator::Jemalloc => unreachable!("refused by validate"),
        FragAllocator::System => {
            phases::run(&alloc::system(), workload, total, cap, seed, &|| None)
        }
    })
}

/// podkv on a fresh heap file under /dev/shm, removed afterwards.
fn run_podkv(
    args: &FragArgs,
    workload: Workload,
    seed: u64,
    morph: bool,
) -> anyhow::Result<Vec<PhaseResult>> {
    let path = PathBuf::from(format!("/dev/shm/podkv-frag-{}", std::process::id()));
    let config = Config {
        small_bytes: args.heap_bytes,
        large_bytes: args.heap_bytes,
        huge_bytes: 0,
        morph,
        ..Config::default()
    };
    let result = (|| {
        let heap = Heap::open(&path, &config)?;
        let thread = heap.thread()?;
        let probe = || Some((heap.census(), heap.file_allocated_bytes().unwrap_or(0)));
        let results = phases::run(
            &thread,
            workload,
            args.total_bytes,
            args.live_bytes,
            seed,
            &probe,
        );
        anyhow::Ok(results)
    })();
    let _ = std::fs::remove_file(&path);
    result
}

fn record(
    args: &FragArgs,
    workload: Workload,
    allocator: FragAllocator,
    seed: u64,
    repeat: usize,
    result: PhaseResult,
) -> Record {
    let context = process_stats::context();
    Record {
        kind: "frag",
        workload: workload.name(),
        allocator: allocator.name(),
        ops_per_sec: result.ops as f64 / result.seconds.max(1e-9),
        result,
        total_bytes: args.total_bytes,
        live_cap_bytes: args.live_bytes,
        seed,
        repeat,
        git_commit: process_stats::git_commit(),
        command: context.command,
        suite: context.suite,
        figure: context.figure,
    }
}
