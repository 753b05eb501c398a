//! `podkv bench huge`: threadtest and xmalloc with huge blocks (1 GiB by default), as
//! CXLALLOC §5.3 runs them, swept over processes × threads, podkv against mimalloc and the
//! system allocator in the same binary.
//!
//! # What a run touches
//! The loops write one byte of each block (its first page), so memory stays bounded by
//! metadata and one page per live block: podkv backs huge blocks `sparse`ly here by default
//! (only touched pages; `--huge-backing reserve` backs all of them), and the baselines' `mmap`s
//! are lazy too. Every live podkv huge block holds one of its slot's 127 descriptors, so
//! xmalloc runs with a window of `--batch` blocks per producer instead of a 4096-slot ring.
//!
//! # On the shared runner
//! Every configuration is one `podkv bench threadtest|xmalloc` run ([`super::run_records`]):
//! the runner's launcher, `podkv run-worker` processes sharing the heap, pinned workers,
//! shared-memory start line, progress bar, PSS, faults and HWcc, one timed loop per pattern
//! ([`super::workload`]), records through [`crate::helpers::append_ndjson`]. A
//! baseline run still going after `--timeout` seconds is stopped by the runner's stop word
//! (its blocks are all freed), its record says `timed_out`, and the summary says so.

use super::job::{AllocatorName, Backing, Kind};
use super::BenchArgs;
use crate::helpers::{human_bytes, median, parse_bytes};
use std::path::PathBuf;

/// Flags of `podkv bench huge`.
#[derive(clap::Args, Clone, Debug)]
pub struct HugeArgs {
    /// Patterns to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "threadtest,xmalloc")]
    pub pattern: Vec<Kind>,
    /// Allocators, comma separated (mimalloc and system run with one process only).
    #[arg(long, value_delimiter = ',', default_value = "podkv,mimalloc,system")]
    pub allocator: Vec<AllocatorName>,
    /// Bytes per allocation.
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
    pub size: u64,
    /// Allocations per run, split evenly across workers.
    #[arg(long, default_value_t = 4000)]
    pub ops: u64,
    /// Threads per process to sweep, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Processes to sweep, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub processes: Vec<usize>,
    /// threadtest: blocks live per round; xmalloc: hand-over batch and window per producer.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Runs per configuration; tables show the median.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Append one NDJSON record per run to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// How podkv backs huge blocks.
    #[arg(long, value_enum, default_value = "sparse")]
    pub huge_backing: Backing,
    /// Seconds each baseline (mimalloc, system) run may take; one still going then is
    /// stopped and reported as timed out.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Heap file for podkv [default: a fresh file under /dev/shm per run, removed afterwards].
    #[arg(long)]
    pub heap: Option<PathBuf>,
}

/// One line of the summary.
struct Row {
    kind: Kind,
    processes: usize,
    threads: usize,
    allocator: AllocatorName,
    /// Median ops/s, or `None` when the run timed out.
    ops_per_sec: Option<f64>,
    pss_bytes: u64,
}

/// Runs the sweep and prints one summary table.
pub fn run(args: &HugeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.batch >= 1 && args.batch <= 32,
        "--batch must be 1 to 32"
    );
    anyhow::ensure!(
        args.size > 512 << 10,
        "--size must be over 512 KiB (a huge block)"
    );
    let mut rows = Vec::new();
    for &kind in &args.pattern {
        for &processes in &args.processes {
            for &threads in &args.threads {
                if kind == Kind::Xmalloc && processes * threads < 2 {
                    continue; // xmalloc hands blocks between at least two workers
                }
                for &allocator in &args.allocator {
                    if allocator != AllocatorName::Podkv && processes > 1 {
                        continue;
                    }
                    let row = run_one(args, kind, processes, threads, allocator)?;
                    rows.push(row);
                }
            }
        }
    }
    print_summary(args, &rows);
    Ok(())
}

fn bench_args(
    args: &HugeArgs,
    allocator: AllocatorName,
    processes: usize,
    threads: usize,
) -> BenchArgs {
    BenchArgs {
        allocator: vec![allocator],
        size: args.size as usize,
        ops: args.ops,
        threads: Some(threads),
        processes,
        batch: args.batch,
        heap: args.heap.clone(),
        heap_bytes: 1 << 30,
        repeat: args.repeat,
        json: args.json.clone(),
        duration: match allocator {
            AllocatorName::Mimalloc | AllocatorName::Jemalloc | AllocatorName::System => {
                Some(args.timeout as f64)
            }
            _ => None,
        },
        window: Some(args.batch),
        huge_backing: args.huge_backing,
        coherence: podkv_hw::Coherence::Hardware,
        mcas_impl: podkv_hw::mcas::McasKind::FlushCas,
        huge_bytes: 1 << 40,
    }
}

fn run_one(
    args: &HugeArgs,
    kind: Kind,
    processes: usize,
    threads: usize,
    allocator: AllocatorName,
) -> anyhow::Result<Row> {
    let bench = bench_args(args, allocator, processes, threads);
    let records = super::run_records(kind, &bench)?;
    let mut ops: Vec<f64> = records.iter().map(|r| r.ops_per_sec).collect();
    let timed_out = records.iter().any(|r| r.timed_out);
    if timed_out {
        eprintln!(
            "{} {}: timed out after {} s",
            kind.name(),
            allocator.name(),
            args.timeout
        );
    }
    Ok(Row {
        kind,
        processes,
        threads,
        allocator,
        ops_per_sec: (!timed_out).then(|| median(&mut ops)),
        pss_bytes: records.iter().map(|r| r.pss_bytes).max().unwrap_or(0),
    })
}

fn print_summary(args: &HugeArgs, rows: &[Row]) {
    println!(
        "\nbench huge: size={} ops={} batch={} repeats={} backing={:?} (median ops/s; podkv/mimalloc ratio)",
        human_bytes(args.size),
        args.ops,
        args.batch,
        args.repeat,
        args.huge_backing
    );
    println!(
        "{:<11} {:>9} {:>7} {:<9} {:>12} {:>8} {:>11}",
        "pattern", "processes", "threads", "allocator", "ops/s", "ratio", "pss"
    );
    for row in rows {
        let mimalloc = rows
            .iter()
            .find(|r| {
                r.kind == row.kind
                    && r.threads == row.threads
                    && r.processes == 1
                    && r.allocator == AllocatorName::Mimalloc
            })
            .and_then(|r| r.ops_per_sec);
        let ratio = match (row.allocator, row.ops_per_sec, mimalloc) {
            (AllocatorName::Podkv, Some(ops), Some(base)) if base > 0.0 => {
                format!("{:.2}x", ops / base)
            }
            _ => "-".into(),
        };
        println!(
            "{:<11} {:>9} {:>7} {:<9} {:>12} {:>8} {:>11}",
            row.kind.name(),
            row.processes,
            row.threads,
            row.allocator.name(),
            row.ops_per_sec
                .map_or("timed out".into(), |ops| format!("{ops:.0}")),
            ratio,
            human_bytes(row.pss_bytes)
        );
    }
}
